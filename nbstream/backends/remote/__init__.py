"""The remote backend: a model behind an OpenAI-compatible chat-completions server.

vLLM, Text Generation Inference, SGLang, ``transformers serve`` and others speak the same
streaming protocol (``POST {base_url}/chat/completions`` with ``"stream": true``, answered
with server-sent events). :class:`Endpoint` is a backend under the engine's seam, so a run
on a server has the same lifecycle, end states, Stop, budget, metrics and record as a run
on a local model.
"""

from __future__ import annotations

from .endpoint import Endpoint, EndpointError, RemoteJob, RemoteTraceCapture

__all__ = ["Endpoint", "EndpointError", "RemoteJob", "RemoteTraceCapture"]
