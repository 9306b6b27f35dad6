"""A fake OpenAI-compatible server on loopback whose answers are faults on demand.

The path of each request names its scenario: `Fake.url("drop")` is a base URL whose chat
completions stream a few pieces, then drop the connection. `/<scenario>+<family>/v1/models`
lists a model the way a server of that family does. Every request is recorded on the server.
The `fake` fixture (conftest.py) serves one for a test module.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def event(
    content: str | None = None,
    finish: str | None = None,
    usage: Any = None,
    reasoning: str | None = None,
    field: str = "reasoning_content",
) -> bytes:
    """One server-sent event of a streamed chat completion (a `chat.completion.chunk`)."""
    delta: dict[str, Any] = {} if content is None else {"content": content}
    if reasoning is not None:  # a reasoning parser's separate field (vLLM, SGLang, DeepSeek)
        delta[field] = reasoning
    chunk: dict[str, Any] = {
        "id": "fake",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake-model",
        "choices": [
            {
                "index": 0,
                "delta": delta,
                "finish_reason": finish,
            }
        ],
    }
    if usage is not None:
        chunk["usage"] = usage
    return f"data: {json.dumps(chunk)}\n\n".encode()


PIECES = ["Hello", ",", " wor"]


REASONING = ["The user wants 2+2. ", "That is 4; STOP here is ", "not the end."]


#: What each family's server answers GET /models with (the shapes of their own schemas).
LISTINGS: dict[str, Any] = {
    "vllm": {
        "object": "list",
        "data": [
            {"id": "fake-model", "object": "model", "owned_by": "vllm", "max_model_len": 2048}
        ],
    },
    "sglang": {"object": "list", "data": [{"id": "fake-model", "owned_by": "sglang"}]},
    "tgi": {"object": "list", "data": [{"id": "fake-model", "owned_by": "fake-model"}]},
    "llamacpp": {
        "object": "list",
        "data": [{"id": "fake-model", "owned_by": "llamacpp", "meta": {"n_ctx_train": 8192}}],
    },
    "llamacpppython": {
        "object": "list",
        "data": [{"id": "/m/fake.gguf", "object": "model", "owned_by": "me", "permissions": []}],
    },
    "transformers": {
        "object": "list",
        "data": [{"id": "fake-model", "owned_by": "", "status": {"value": "loaded"}}],
    },
    "other": {"object": "list", "data": [{"id": "fake-model", "owned_by": "someone"}]},
}


USAGE = {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}


ERRORS = {
    "401": (401, {"error": {"message": "Incorrect API key provided: {auth}", "code": 401}}),
    "404": (404, {"error": {"message": "The model `nope` does not exist", "code": 404}}),
    "429": (429, {"error": {"message": "Rate limit reached for requests", "code": 429}}),
    "500": (500, {"detail": "CUDA out of memory. Tried to allocate 2.00 GiB"}),
}


class Fake(ThreadingHTTPServer):
    """The fake server; ``handler`` a Handler subclass with scenarios of its own, ``port``
    a port to listen on (0: any free one)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, handler: type[BaseHTTPRequestHandler] | None = None, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), handler or Handler)
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        #: The path (with its query) of every request, in order.
        self.paths: list[str] = []
        self.listings_served = 0
        self.listings_asked = 0
        self.stalled = threading.Event()
        self.client_gone = threading.Event()
        self.release = threading.Event()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that closed its connection mid-answer is what some tests do

    def url(self, scenario: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{scenario}/v1"


class Handler(BaseHTTPRequestHandler):
    """Answers each request as its path's scenario says (see the module's docstring)."""

    protocol_version = "HTTP/1.1"
    server: Fake

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        # GET /<scenario>+<family>/v1/models: what a server of that family lists; a
        # scenario without "+" is a server that does not answer it (404); "+busy" one that
        # cannot answer now (503).
        self.server.paths.append(self.path)
        self.server.listings_asked += 1
        _, _, family = self.path.split("/")[1].partition("+")
        if family == "busy":
            self.send_error(503)
            return
        path = self.path.partition("?")[0]
        if not path.endswith("/v1/models") or family not in LISTINGS:
            self.send_error(404)
            return
        self.server.listings_served += 1
        text = json.dumps(LISTINGS[family]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        scenario = self.path.split("/")[1].partition("+")[0]
        self.server.paths.append(self.path)
        self.server.requests.append((scenario, dict(self.headers), body))
        if scenario in ERRORS:
            status, payload = ERRORS[scenario]
            text = json.dumps(payload).replace("{auth}", self.headers.get("Authorization", ""))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(text)))
            if status == 429:
                self.send_header("Retry-After", "7")
            self.end_headers()
            self.wfile.write(text.encode())
            return
        if scenario == "notsse":
            text = b'{"choices": []}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if scenario == "empty":  # nothing at all (llama-cpp-python, a prompt over its context)
            self.chunk(b"")
            return
        pieces = {"json": ['{"a": ', "[1, 2]}"]}.get(scenario, PIECES)
        self.chunk(event())  # the role-only opening event, as servers send
        if scenario in ("reasoning", "reasoning-vllm"):
            # The thinking in its own field, the answer in content (a JSON one, with a stop
            # string inside the thinking that must not end the run).
            field = "reasoning" if scenario == "reasoning-vllm" else "reasoning_content"
            for piece in REASONING:
                self.chunk(event(reasoning=piece, field=field))
            pieces = ['{"answer": ', "4}"]
        for piece in pieces:
            self.chunk(event(piece))
        if scenario == "drop":
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        if scenario == "garbage":
            self.chunk(b"data: {this is not json\n\n")
        elif scenario == "error_event":
            self.chunk(b'data: {"error": "generation crashed: boom"}\n\n')
        elif scenario == "stall":
            self.stall()
            return
        elif scenario == "finish_stall":  # the answer is over, but no [DONE] ever comes
            self.chunk(event(finish="stop"))
            self.stall()
            return
        elif scenario == "nousage":  # a server that ignores stream_options.include_usage
            self.chunk(event(finish="stop"))
            self.chunk(b"data: [DONE]\n\n")
        elif scenario in ("ok", "json", "length", "filter", "reasoning", "reasoning-vllm") or (
            scenario.startswith("finish-")
        ):
            finish = {"length": "length", "filter": "content_filter"}.get(scenario, "stop")
            if scenario.startswith("finish-"):  # finish-<the server's finish_reason>
                finish = scenario.removeprefix("finish-")
            self.chunk(event(finish=finish))
            self.chunk(b"data: " + json.dumps({"choices": [], "usage": USAGE}).encode() + b"\n\n")
            self.chunk(b"data: [DONE]\n\n")
        # "nofinish" (and the rest): a clean end of the body, without a finish_reason.
        self.chunk(b"")

    def chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def stall(self) -> None:
        """Send nothing more; notice the client closing the connection."""
        self.server.stalled.set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not self.server.release.is_set():
            readable, _, _ = select.select([self.connection], [], [], 0.05)
            if readable and self.connection.recv(1, socket.MSG_PEEK) == b"":
                self.server.client_gone.set()
                break
        self.close_connection = True


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler] | None = None, port: int = 0) -> Iterator[Fake]:
    """A fake server (see Fake) listening while the block runs."""
    server = Fake(handler, port)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
