"""A loopback server that streams logprobs and continues an answer, as vLLM documents it.

It speaks the wire format vLLM documents for streamed chat completions with
`"logprobs": true, "top_logprobs": k` (each chunk's ``choices[0].logprobs.content``), and
continues a final assistant message when asked to (``continue_final_message``), as vLLM and
SGLang do; llama-server does it by itself (prefill). It records every request, so a test can
say what reached the server and that nothing did. The `loopback` fixture (conftest.py) serves
one for a test module.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PROMPT = "Name two colors."


#: The server's answer, token by token: (text, logprob, [(alternative, logprob), ...]).
ANSWER = [
    ("Red", -0.3, [("Red", -0.3), ("Blue", -1.6), ("Green", -2.5)]),
    (" and", -0.1, [(" and", -0.1), (",", -2.4), (" or", -3.0)]),
    (" blue", -0.9, [(" blue", -0.9), (" green", -1.2), (" white", -2.0)]),
    (".", -0.05, [(".", -0.05), ("!", -3.1), (" and", -4.0)]),
]


#: What it says after an answer so far it was asked to continue.
CONTINUATION = [
    (" yellow", -0.7, [(" yellow", -0.7), (" pink", -1.1)]),
    (".", -0.2, [(".", -0.2), (",", -1.9)]),
]


LISTING = {
    "vllm": "vllm",
    "sglang": "sglang",
    "llamacpp": "llamacpp",
    "tf": None,  # transformers serve: an entry with a status
    "lcp": "me",  # llama-cpp-python
    "tgi": "m",  # Text Generation Inference: owned_by is the model id
}


def listing(family: str) -> dict[str, Any]:
    if family == "tf":
        return {"data": [{"id": "m", "owned_by": "", "status": {"value": "loaded"}}]}
    entry: dict[str, Any] = {"id": "m", "owned_by": LISTING[family]}
    if family == "lcp":
        entry["permissions"] = []
    return {"object": "list", "data": [entry]}


def chunk(content: str | None, logprobs: Any = None, finish: str | None = None) -> bytes:
    delta = {} if content is None else {"content": content}
    choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
    data = {"object": "chat.completion.chunk", "model": "m", "choices": [choice]}
    return f"data: {json.dumps(data)}\n\n".encode()


def logprobs_of(text: str, logprob: Any, tops: list[tuple[str, float]]) -> dict[str, Any]:
    return {
        "content": [
            {
                "token": text,
                "logprob": logprob,
                "bytes": list(text.encode()),
                "top_logprobs": [
                    {"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in tops
                ],
            }
        ]
    }


class Loopback(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), LoopbackHandler)
        #: (scenario, request body) of every POST, in order.
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def url(self, family: str, scenario: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{family}.{scenario}/v1"

    def posts(self, scenario: str) -> list[dict[str, Any]]:
        return [body for name, body in self.requests if name == scenario]


class LoopbackHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Loopback

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, kind: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        family = self.path.split("/")[1].partition(".")[0]
        self._send(200, "application/json", json.dumps(listing(family)).encode())

    def do_POST(self) -> None:
        family, _, scenario = self.path.split("/")[1].partition(".")
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((scenario, body))
        if body.get("top_logprobs", 0) > 20:  # as vLLM and OpenAI answer
            error = {"error": {"message": "top_logprobs must be at most 20", "code": 400}}
            self._send(400, "application/json", json.dumps(error).encode())
            return
        messages = body["messages"]
        continues = messages[-1]["role"] == "assistant" and (
            body.get("continue_final_message") is True or family == "llamacpp"
        )
        answer = CONTINUATION if continues else ANSWER
        asked = body.get("logprobs") is True
        events = [chunk(None)]
        if scenario == "reasoning":  # a reasoning parser's separate field, as vLLM sends it
            think = {"index": 0, "delta": {"reasoning_content": "Think."}, "finish_reason": None}
            events.append(f"data: {json.dumps({'choices': [think]})}\n\n".encode())
        for i, (text, logprob, tops) in enumerate(answer):
            lp: Any = None
            if asked and scenario != "nologprobs":
                lp = logprobs_of(text, logprob, tops[: body["top_logprobs"]])
                if scenario == "malformed" and i == 2:
                    lp = logprobs_of(text, "not a number", tops)
            events.append(chunk(text, lp))
        events += [chunk(None, finish="stop"), b"data: [DONE]\n\n"]
        self._send(200, "text/event-stream", b"".join(events))
