"""Models and servers for tests, benchmarks and demos.

``nbstream.testing`` holds the tiny, fast models (:func:`tiny_model`, :func:`forced_model`);
``nbstream.testing.servers`` starts real OpenAI-compatible servers on a loopback port.

Example:
    >>> from nbstream.testing import tiny_model
    >>> model, tokenizer = tiny_model()  # doctest: +SKIP
"""

from __future__ import annotations

from .models import forced_model, tiny_model

__all__ = ["forced_model", "tiny_model"]
