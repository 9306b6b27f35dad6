"""nbstream: watch a language model think in a Jupyter notebook.

Streams text from a Hugging Face ``transformers`` model on a background thread, with honest
end states (complete, failed, cancelled), a Stop that really stops generation, and a result
that exists only when the run completed.
"""

from __future__ import annotations

import logging
from typing import Any

from ._version import __version__
from .backends.remote import Endpoint, EndpointError
from .doctor import doctor
from .generation import (
    Generation,
    GenerationCancelled,
    GenerationError,
    GenerationFailed,
    replay,
    rerun,
    stream,
)
from .models import ModelNotFoundError, default_model_dir, load_model
from .recording import load
from .widgets.chat import ChatWidget
from .widgets.compare import CompareWidget
from .widgets.stream import StreamWidget

logging.getLogger(__name__).addHandler(logging.NullHandler())


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext nbstream``: register the ``%%nbstream`` and ``%nbstream`` magics.

    Args:
        ipython: The running IPython shell (IPython passes it).
    """
    # Imported here, so `import nbstream` does not pull in IPython's magics machinery.
    from .magic import load_ipython_extension as load

    load(ipython)


__all__ = [
    "ChatWidget",
    "CompareWidget",
    "Endpoint",
    "EndpointError",
    "Generation",
    "GenerationCancelled",
    "GenerationError",
    "GenerationFailed",
    "ModelNotFoundError",
    "StreamWidget",
    "__version__",
    "default_model_dir",
    "doctor",
    "load",
    "load_ipython_extension",
    "load_model",
    "replay",
    "rerun",
    "stream",
]
