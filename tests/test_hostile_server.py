"""A hostile server: answers an OpenAI-compatible server should not send, or sends slowly.

nbstream.Endpoint (nbstream/backends/remote/) against the fake server of fake_server.py,
with scenarios of this file's own: events the SSE spec says carry nothing, a redirect, a gzip
bomb on an error body and on the stream, a line of many megabytes, a body that drips, and a
name lookup that hangs. Each run ends, in bounded memory (measured with tracemalloc), with
the state and words the user should see; a Stop takes effect within STOP_S whatever the
server is doing. The plainer faults (error statuses, a dropped connection, a malformed
event, a stall) are test_remote.py's.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import select
import socket
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from fake_server import PIECES, USAGE, Fake, Handler, event, serving
from helpers import fail

import nbstream
from nbstream.backends.remote import endpoint as remote_endpoint

pytestmark = pytest.mark.usefixtures("no_leftover_runs")

#: The promise: a Stop ends the run, cancelled, within this, whatever the server does.
STOP_S = 1.0
#: How long a hostile server keeps at it (dripping, a lookup hanging) unless let go: far
#: past every bound checked.
HANG_S = 60.0
#: What a bomb inflates to, and the most memory a run that meets one may take.
BOMB_BYTES = 128 * 2**20
MEMORY_BOUND = 24 * 2**20
#: A line of an event stream far longer than any chunk of text (nbstream's bound is 1 MiB).
LONG_LINE = 8 * 2**20
SLOW_HOST = "slow-resolver.invalid"
#: Random-looking, as real keys are: no run of 6 of its characters is in nbstream's words.
KEY = "sk-Wq8Zt3Vb7Nx2Lp5Rk9Jd"


def gzipped(parts: Iterable[bytes]) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    return b"".join(packer.compress(part) for part in parts) + packer.flush()


def bomb(head: bytes = b"") -> bytes:
    """``head`` then BOMB_BYTES of one letter on one line, gzipped (about 1 KB a MB)."""
    megabyte = b"a" * 2**20
    return gzipped(itertools.chain([head], itertools.repeat(megabyte, BOMB_BYTES // 2**20)))


#: The bombs, made once (before any memory is measured).
BOMBS: dict[str, bytes] = {}


def events_around(extra: bytes) -> list[bytes]:
    """A proper answer (PIECES, finish, usage, [DONE]) with ``extra`` after each event."""
    usage = b"data: " + json.dumps({"choices": [], "usage": USAGE}).encode() + b"\n\n"
    wire = [event(), *(event(piece) for piece in PIECES), event(finish="stop"), usage]
    return [part for chunk in wire for part in (chunk, extra) if part] + [b"data: [DONE]\n\n"]


class Hostile(Handler):
    """test_remote's Handler, with the scenarios in SCENARIOS (POST /<scenario>/v1/...)."""

    def do_POST(self) -> None:
        scenario = self.path.split("/")[1].partition("+")[0]
        serve = SCENARIOS.get(scenario)
        if serve is None:
            super().do_POST()
            return
        self.rfile.read(int(self.headers["Content-Length"]))
        self.server.paths.append(self.path)
        serve(self)

    def head(self, status: int, kind: str, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()

    def whole(self, status: int, kind: str, body: bytes, **headers: str) -> None:
        self.head(status, kind, Content_Length=str(len(body)), **headers)
        self.wfile.write(body)

    def chunked(self, status: int, kind: str, parts: list[bytes], **headers: str) -> None:
        self.head(status, kind, Transfer_Encoding="chunked", **headers)
        for part in parts:
            self.chunk(part)
        self.chunk(b"")

    def drip(self, status: int, kind: str, start: list[bytes], piece: bytes) -> None:
        """``start``, then ``piece`` every 20 ms until the client goes (or HANG_S)."""
        self.head(status, kind, Transfer_Encoding="chunked")
        for part in start:
            self.chunk(part)
        self.server.stalled.set()
        deadline = time.monotonic() + HANG_S
        with contextlib.suppress(OSError):
            while time.monotonic() < deadline and not self.server.release.is_set():
                readable, _, _ = select.select([self.connection], [], [], 0.02)
                if readable and self.connection.recv(1, socket.MSG_PEEK) == b"":
                    self.server.client_gone.set()
                    break
                self.chunk(piece)
        self.close_connection = True


def _empty_data(h: Hostile) -> None:
    h.chunked(200, "text/event-stream", events_around(b"data:\n\n"))


def _id_keepalive(h: Hostile) -> None:
    h.chunked(200, "text/event-stream", events_around(b"id: 7\n\n\n\n: keep-alive\n\n"))


def _redirect(h: Hostile) -> None:
    port = h.server.server_address[1]
    auth = h.headers.get("Authorization", "").removeprefix("Bearer ")
    where = f"http://user:pw@127.0.0.1:{port}/moved/v1/chat/completions?key={auth}"
    h.whole(307, "text/plain", b"", Location=where)


def _bomb_500(h: Hostile) -> None:
    h.whole(500, "text/plain", BOMBS["500"], Content_Encoding="gzip")


def _bomb_stream(h: Hostile) -> None:
    h.whole(200, "text/event-stream", BOMBS["stream"], Content_Encoding="gzip")


def _long_line(h: Hostile) -> None:
    megabyte = b"a" * 2**20
    h.head(200, "text/event-stream", Transfer_Encoding="chunked")
    for part in [*events_around(b"")[:4], b"data: {"]:
        h.chunk(part)
    with contextlib.suppress(OSError):  # nbstream stops reading after its bound
        for _ in range(LONG_LINE // 2**20):
            h.chunk(megabyte)
        h.chunk(b"\n\n")
        h.chunk(b"")


def _slow_500(h: Hostile) -> None:
    h.drip(500, "text/plain", [b"upstream failed: "], b"x")


def _slow_line(h: Hostile) -> None:
    h.drip(200, "text/event-stream", [*events_around(b"")[:4], b"data: {"], b"a" * 512)


SCENARIOS: dict[str, Callable[[Hostile], None]] = {
    "emptydata": _empty_data,
    "idkeepalive": _id_keepalive,
    "redirect": _redirect,
    "bomb500": _bomb_500,
    "bombstream": _bomb_stream,
    "longline": _long_line,
    "slow500": _slow_500,
    "slowline": _slow_line,
}


@pytest.fixture(scope="module")
def hostile() -> Iterator[Fake]:
    BOMBS["500"] = bomb()
    BOMBS["stream"] = bomb(b"".join(events_around(b"")[:4]) + b"data: ")
    with serving(Hostile) as server:
        yield server


@pytest.fixture
def dripping(hostile: Fake) -> Iterator[Fake]:
    hostile.stalled.clear()
    hostile.client_gone.clear()
    hostile.release.clear()
    yield hostile
    hostile.release.set()


@contextlib.contextmanager
def peak_memory() -> Iterator[list[int]]:
    """The most memory Python held while the block ran (its one item, once it is over)."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    peak: list[int] = []
    try:
        yield peak
    finally:
        peak.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()


def endpoint(server: Fake, scenario: str, **options: Any) -> nbstream.Endpoint:
    return nbstream.Endpoint(server.url(scenario), "fake-model", api_key=KEY, **options)


def stopped_in_time(run: nbstream.Generation) -> None:
    """Stop ``run`` now: it must end cancelled within STOP_S, its text so far kept."""
    assert run.stop()
    assert run.wait_done(STOP_S), f"still {run.status} {STOP_S} s after Stop"
    assert run.status == "cancelled", run.error
    assert run.metrics["finish_reason"] == "cancelled"


# -- what the SSE spec says carries nothing ---------------------------------------------


@pytest.mark.parametrize("scenario", ["emptydata", "idkeepalive"])
def test_events_that_carry_nothing_are_skipped(hostile, scenario):
    # An empty "data:" then a blank line; an "id:" alone and blank keep-alive lines. The
    # spec dispatches no event for the second, and one with no data for the first: neither
    # is a chunk of the answer.
    run = nbstream.stream(endpoint(hostile, scenario), None, "Hi")
    assert run.wait(60) == "".join(PIECES), run.error
    assert run.metrics["finish_reason"] == "eos"
    assert run.metrics["chunks"] == 6  # the opening event, 3 pieces, the finish, the usage


# -- a redirect -------------------------------------------------------------------------


def test_a_redirect_is_named_with_where_it_points(hostile):
    message = fail(nbstream.stream(endpoint(hostile, "redirect"), None, "Hi"))
    port = hostile.server_address[1]
    assert "HTTP 307" in message
    assert f"http://127.0.0.1:{port}/moved/v1/chat/completions" in message
    assert "Authorization" in message and f"base_url='http://127.0.0.1:{port}/moved/v1'" in message
    assert KEY not in message and "pw" not in message and "user:" not in message
    assert "event stream" not in message


# -- bombs and long lines: bounded memory, and a clear end ---------------------------------


def test_a_gzip_bomb_on_an_error_body_fails_in_bounded_memory(hostile):
    with peak_memory() as peak:
        run = nbstream.stream(endpoint(hostile, "bomb500"), None, "Hi")
        assert run.wait_done(HANG_S / 2), "the run never ended"
    message = fail(run)
    assert peak[0] < MEMORY_BOUND, f"{peak[0] / 2**20:.0f} MiB held for a bomb"
    assert "HTTP 500" in message and "aaaa" in message and "its log says why" in message


@pytest.mark.parametrize("scenario", ["bombstream", "longline"])
def test_a_line_of_megabytes_fails_saying_so_in_bounded_memory(hostile, scenario):
    with peak_memory() as peak:
        run = nbstream.stream(endpoint(hostile, scenario), None, "Hi")
        assert run.wait_done(HANG_S / 2), "the run never ended"
    message = fail(run)
    assert peak[0] < MEMORY_BOUND, f"{peak[0] / 2**20:.0f} MiB held for one line"
    assert "line of more than 1 MiB" in message and "partial_text" in message
    assert run.partial_text == "".join(PIECES)


# -- Stop, whatever the server is doing ------------------------------------------------------


@pytest.mark.parametrize("scenario", ["slow500", "slowline"])
def test_stop_while_a_body_drips(dripping, scenario):
    expected = "" if scenario == "slow500" else "".join(PIECES)
    run = nbstream.stream(endpoint(dripping, scenario), None, "Hi")
    assert dripping.stalled.wait(30)
    # The pieces sent before the drip reach the run when the client has read them, which
    # may be after the server stalls: Stop once they are shown, then they must stay.
    deadline = time.monotonic() + 30
    while run.partial_text != expected and time.monotonic() < deadline:
        time.sleep(0.01)
    stopped_in_time(run)
    assert run.partial_text == expected
    assert dripping.client_gone.wait(30), "Stop left the connection open"


@pytest.fixture
def slow_resolver(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Name lookups of SLOW_HOST hang (until the test is over, then give loopback); the
    event is set once one has started."""
    started = threading.Event()
    release = threading.Event()
    real = socket.getaddrinfo

    def lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host in (SLOW_HOST, SLOW_HOST.encode()):
            started.set()
            release.wait(HANG_S)
            host = "127.0.0.1"
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    yield started
    release.set()


def slow_url(server: Fake, scenario: str) -> str:
    return f"http://{SLOW_HOST}:{server.server_address[1]}/{scenario}/v1"


def test_stop_while_the_servers_name_is_looked_up(hostile, slow_resolver):
    server = nbstream.Endpoint(slow_url(hostile, "ok"), "fake-model", server="vllm")
    run = nbstream.stream(server, None, "Hi")
    assert slow_resolver.wait(30)
    stopped_in_time(run)


def test_the_probe_gives_up_on_a_slow_lookup_at_its_bound(hostile, slow_resolver):
    server = nbstream.Endpoint(slow_url(hostile, "ok+vllm"), "fake-model")
    started = time.monotonic()
    run = nbstream.stream(server, None, "Hi")
    took = time.monotonic() - started
    # The probe's documented bound, with room for a loaded machine; the lookup hangs 60 s.
    assert took < remote_endpoint._PROBE_TIMEOUT_S + 10, f"stream() took {took:.1f} s"
    stopped_in_time(run)  # the run's own lookup hangs too
    assert run.record["server"]["family"] == "generic"
    assert "did not answer within" in run.record["server"]["evidence"]
