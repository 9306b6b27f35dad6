"""The remote backend: a model behind an OpenAI-compatible chat-completions server.

vLLM, Text Generation Inference, SGLang, ``transformers serve`` and others speak the same
streaming protocol (``POST {base_url}/chat/completions`` with ``"stream": true``, answered
with server-sent events). :class:`Endpoint` is a backend under the engine's seam, so a run
on a server has the same lifecycle, end states, Stop, budget, metrics and record as a run
on a local model.

The client is ``httpx`` (``pip install 'nbstream[remote]'``), driven by an event loop of
the run's own on the worker thread: a Stop, a spent budget or a stop string cancels the
request at once, even while it waits for the server (or for its name to be looked up), and
closing the connection is what tells the server to stop generating. What a server sends is
read a bounded step at a time (an error body, a line of the event stream, a compressed
body), so a hostile or broken server cannot fill the kernel's memory.

The package's modules, each over the ones below it (an import-linter contract in
pyproject.toml keeps them so):

- ``endpoint``: :class:`Endpoint`, and the probe that asks a server what it is.
- ``job``: :class:`RemoteJob`, one run's request and its streamed answer.
- ``chunks``: the chunks of a streamed answer; ``request``: a request's body, its sampling
  fields, and a branch's answer so far.
- ``errors``: :class:`EndpointError` and what a failed request says; ``logprobs``:
  ``run.trace`` from a server's logprobs.
- ``secret``: the API key, sent and blotted out; ``transport``: the HTTP transport (the
  run's event loop, bounded and inflated bodies, the event-stream reader, the stop watch).
"""

from __future__ import annotations

from .endpoint import Endpoint
from .errors import EndpointError
from .job import RemoteJob
from .logprobs import RemoteTraceCapture

__all__ = ["Endpoint", "EndpointError", "RemoteJob", "RemoteTraceCapture"]
