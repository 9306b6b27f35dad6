"""An Endpoint's API key never shows: every form a key takes, against every place text goes.

The forms: the key as a server echoes it, given with the whitespace a file leaves on it, cut
short by the server, cut by nbstream's own quoting of a long error body or event, escaped
(Python repr, bytes repr, JSON, percent-encoding), in an exception's message, its note or
its context. The places: the run's error (str and repr), its record, the traceback, the
run's and the endpoint's repr, the widget's synced state and traceback, the output saved
in a notebook, and every log line at DEBUG.

The rule checked (the scrub's own, nbstream/backends/remote/secret.py): no run of 6 or more
of the key's characters, in any of its written forms, anywhere. The figure for the README:
``pytest -q -s tests/test_secrets.py -k every_place`` prints the forms × places table.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import traceback
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import hypothesis
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nbstream
from nbstream.backends.remote import EndpointError

# Random-looking, as real keys are: no run of 6 of their characters occurs by chance in the
# messages checked. ODD holds what the escaping forms change: + / = " \ ~ and a quote.
KEY = "sk-live-Q7vX2mPz9RkT4wYb8NcJ"
ODD = "sk+Ab/9x=Zq\"w\\Yt~Kp'3Lm"
RUN = 6  # the scrub's shortest run of key characters

# -- the leak detector: independent of the scrub it checks -----------------------------------


def written_forms(key: str) -> set[str]:
    """The ways ``key`` can be written into text."""
    return {
        key,
        repr(key)[1:-1],
        repr(key.encode())[2:-1],
        json.dumps(key)[1:-1],
        urllib.parse.quote(key, safe=""),
        urllib.parse.quote_plus(key, safe=""),
    }


def fold(text: str) -> str:
    """ASCII letters lowercased (percent-encoding's hex digits come in either case)."""
    return "".join(c.lower() if c.isascii() else c for c in text)


def leaks(text: str, key: str) -> list[str]:
    """Every run of RUN characters of any written form of ``key`` found in ``text``."""
    low = fold(text)
    found = set()
    for form in written_forms(key):
        for i in range(len(form) - RUN + 1):
            if fold(form[i : i + RUN]) in low:
                found.add(form[i : i + RUN])
    return sorted(found)


def scrub(key: str, text: str) -> str:
    return nbstream.Endpoint("http://127.0.0.1:9/v1", "m", api_key=key).credentials.scrub(text)


# Keys as a header can carry them: printable ASCII, any of it.
KEYS = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=RUN, max_size=60)


@st.composite
def key_and_text(draw: st.DrawFn) -> tuple[str, str]:
    """A key, and text holding pieces of it (RUN characters or more, of any written form,
    from anywhere in it: a prefix a cut left, a suffix, the whole) among other text."""
    key = draw(KEYS)
    parts = [draw(st.text(max_size=12))]
    for _ in range(draw(st.integers(1, 3))):
        form = draw(st.sampled_from(sorted(written_forms(key))))
        start = draw(st.integers(0, len(form) - RUN))
        end = draw(st.integers(start + RUN, len(form)))
        parts += [form[start:end], draw(st.text(max_size=12))]
    return key, "".join(parts)


@hypothesis.settings(max_examples=300, deadline=None)
@given(key_and_text())
def test_no_piece_of_the_key_survives_the_scrub(case):
    key, text = case
    scrubbed = scrub(key, text)
    assert not leaks(scrubbed, key)
    assert "***" in scrubbed
    assert scrub(key, scrubbed) == scrubbed  # nothing left to find


def test_a_message_without_the_key_is_left_alone():
    message = "HTTP 401 from http://127.0.0.1:8000/v1/chat/completions: invalid token."
    assert scrub(KEY, message) == message and scrub(ODD, message) == message
    # A key shorter than a run is blotted out only where it stands as a word of its own.
    assert (
        scrub("EMPTY", "Bearer EMPTY was refused; EMPTYING") == "Bearer *** was refused; EMPTYING"
    )


# -- a server that shows the key back, in the form asked for -----------------------------


def _json(status: int, payload: Any) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(payload).encode()


def _echo(auth: str, key: str) -> tuple[int, str, bytes]:
    return _json(401, {"error": {"message": f"Incorrect API key provided: {auth}"}})


def _server_cut(auth: str, key: str) -> tuple[int, str, bytes]:
    # The server cut the key itself: 14 of its characters shown, then an ellipsis.
    return _json(401, {"error": {"message": f"Incorrect API key: {auth[:21]}…"}})


def _long(auth: str, key: str) -> tuple[int, str, bytes]:
    # nbstream quotes 500 characters of an error body: this one has the key across the cut.
    return _json(403, {"error": {"message": "." * 482 + f" {auth} was refused"}})


def _repr_escaped(auth: str, key: str) -> tuple[int, str, bytes]:
    # A detail that is an object: nbstream quotes it as Python writes a dict.
    return _json(400, {"detail": {"headers": {"authorization": auth}}})


def _json_escaped(auth: str, key: str) -> tuple[int, str, bytes]:
    # A plain-text body quoting JSON: the key with its quotes and backslashes escaped.
    return 502, "text/plain", f"upstream said: {json.dumps({'auth': auth})}".encode()


def _percent(auth: str, key: str) -> tuple[int, str, bytes]:
    query = urllib.parse.urlencode({"api_key": key})
    return 404, "text/plain", f"no route for GET /v1/models?{query}".encode()


def _stream(events: list[bytes]) -> tuple[int, str, bytes]:
    hello = {"choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}]}
    return (
        200,
        "text/event-stream",
        b"data: " + json.dumps(hello).encode() + b"\n\n" + b"".join(events),
    )


def _error_event(auth: str, key: str) -> tuple[int, str, bytes]:
    return _stream([f"event: error\ndata: upstream refused {auth}\n\n".encode()])


def _event_cut(auth: str, key: str) -> tuple[int, str, bytes]:
    # A malformed event: nbstream quotes 120 characters of it, the key across the cut.
    data = "{oops " + "." * 96 + f" {auth} and more"
    return _stream([f"data: {data}\n\n".encode()])


def _error_object(auth: str, key: str) -> tuple[int, str, bytes]:
    return _stream([b"data: " + json.dumps({"error": {"message": auth}}).encode() + b"\n\n"])


SERVED: dict[str, Callable[[str, str], tuple[int, str, bytes]]] = {
    "echo": _echo,
    "server-cut": _server_cut,
    "long": _long,
    "repr": _repr_escaped,
    "json": _json_escaped,
    "percent": _percent,
    "error-event": _error_event,
    "event-cut": _event_cut,
    "error-object": _error_object,
}


class Echo(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), EchoHandler)
        self.headers_seen: list[dict[str, str]] = []

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass

    def url(self, scenario: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{scenario}/v1"


class EchoHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Echo

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        # "listing": a server whose model list echoes the Authorization header it got, in
        # every field nbstream reads or quotes (the model ids, owned_by).
        auth = self.headers.get("Authorization", "")
        if not self.path.startswith("/listing/"):
            self.send_error(404)
            return
        key = auth.removeprefix("Bearer ")
        listing = {"data": [{"id": auth, "owned_by": key}, {"id": key, "owned_by": auth}]}
        body = json.dumps(listing).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.server.headers_seen.append(dict(self.headers))
        scenario = self.path.split("/")[1]
        auth = self.headers.get("Authorization", "")
        key = auth.removeprefix("Bearer ")
        if scenario in ("ok", "listing"):
            ok: dict[str, Any] = {
                "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}]
            }
            if scenario == "listing":  # and its chunks name the model as the key
                ok["model"] = auth
            status, kind, body = _stream([b"data: " + json.dumps(ok).encode() + b"\n\n"])
        elif scenario.startswith("copies-"):  # "." * offset, then the key over and over
            offset = int(scenario.removeprefix("copies-"))
            status, kind, body = 500, "text/plain", ("." * offset + key * 80_000).encode()
        else:
            status, kind, body = SERVED[scenario](auth, key)
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def echo() -> Iterator[Echo]:
    server = Echo()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


# -- exceptions that quote the key, raised where the HTTP library raises -------------------


def _bytes_repr(auth: str) -> BaseException:
    # What httpx raises for a header value it refuses (h11's words, chained as httpx does).
    import httpcore
    import httpx

    message = f"Illegal header value {(auth + chr(10)).encode()!r}"
    error = httpx.LocalProtocolError(message)
    error.__cause__ = httpcore.LocalProtocolError(message)
    return error


def _foreign(auth: str) -> BaseException:
    # Not an httpx error: nothing in the request's own handling catches it.
    return RuntimeError(f"proxy refused the headers {{'authorization': {auth!r}}}")


def _with_context(auth: str) -> BaseException:
    # The message says nothing; the exception it was raised while handling does.
    try:
        raise KeyError(auth)
    except KeyError as inner:
        outer = OSError("the proxy connection failed")
        outer.__context__ = inner
        return outer


def _with_note(auth: str) -> BaseException:
    error = ValueError("the request could not be sent")
    error.__notes__ = [f"headers: Authorization: {auth}"]  # add_note, also before 3.11
    return error


RAISED: dict[str, Callable[[str], BaseException]] = {
    "bytes-repr": _bytes_repr,
    "foreign-exception": _foreign,
    "exception-context": _with_context,
    "exception-note": _with_note,
}


@contextlib.contextmanager
def raising(make: Callable[[str], BaseException]) -> Iterator[None]:
    """Every request in the block raises ``make(its Authorization header)`` from httpx."""
    import httpx

    real = httpx.AsyncClient

    def answer(request: httpx.Request) -> httpx.Response:
        raise make(request.headers["Authorization"])

    def client(**options: Any) -> Any:
        return real(transport=httpx.MockTransport(answer), **options)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(httpx, "AsyncClient", client)
        yield


# -- the places -----------------------------------------------------------------------------


def places(widget: nbstream.StreamWidget, endpoint: Any, failed: BaseException) -> dict[str, str]:
    run = widget.run
    assert run is not None and run.error is not None
    error = run.error
    saved = widget._repr_mimebundle_()
    assert saved is not None
    data, _ = saved
    return {
        "str(run.error)": str(error),
        "repr(run.error)": repr(error),
        "run.record": json.dumps(run.record),
        "traceback": "".join(
            traceback.format_exception(type(failed), failed, failed.__traceback__)
        ),
        "repr(run)": repr(run),
        "repr(endpoint)": repr(endpoint) + repr(vars(endpoint)),
        "widget state": json.dumps(widget.get_state(), default=str),
        "widget.traceback": widget.traceback or "",
        "repr(widget)": repr(widget),
        "saved output": data.get("text/plain", "") + data.get("text/markdown", ""),
    }


def fail_on(endpoint: Any) -> tuple[nbstream.StreamWidget, BaseException]:
    widget = nbstream.StreamWidget(endpoint)
    widget.generate("Hi")
    with pytest.raises(nbstream.GenerationFailed) as failed:
        widget.wait(60)
    return widget, failed.value


FORMS = [
    *((name, KEY, "") for name in SERVED),
    *((f"{name} (odd key)", ODD, "") for name in ("echo", "repr", "json", "percent", "long")),
    ("key with whitespace around it", KEY, "  \r\n"),
    *((name, KEY, "") for name in RAISED),
]


def test_no_form_of_the_key_shows_in_every_place(echo, caplog, no_leftover_runs):
    caplog.set_level(logging.DEBUG)  # every logger: nbstream's, httpx's, httpcore's
    table: dict[str, dict[str, list[str]]] = {}
    for form, key, around in FORMS:
        caplog.clear()
        name = form.removesuffix(" (odd key)")
        raised = RAISED.get(name)
        scenario = "echo" if raised is not None or around else name
        endpoint = nbstream.Endpoint(
            echo.url(scenario), "fake-model", api_key=around + key + around
        )
        with raising(raised) if raised is not None else contextlib.nullcontext():
            widget, failed = fail_on(endpoint)
        shown = places(widget, endpoint, failed)
        widget.close()
        shown["logs"] = caplog.text + "".join(r.getMessage() for r in caplog.records)
        table[form] = {place: leaks(text, key) for place, text in shown.items()}
    names = list(next(iter(table.values())))
    found = {(form, place): got for form, row in table.items() for place, got in row.items() if got}
    print(
        f"\nkey forms × places: {len(table)} × {len(names)} = {len(table) * len(names)} checks, "
        f"{len(found)} leaks"
    )
    for (form, place), got in found.items():
        print(f"  LEAK {form} → {place}: {got}")
    assert not found


def test_a_key_read_from_a_file_works(echo, no_leftover_runs):
    # open(path).read() keeps the newline: the key is what is around it, and it works.
    for raw in (KEY + "\n", f"  {KEY}\r\n", f"\t{KEY} "):
        endpoint = nbstream.Endpoint(echo.url("ok"), "fake-model", api_key=raw)
        run = nbstream.stream(endpoint, None, "Hi")
        assert run.wait(60) == "HelHi", run.error
        assert echo.headers_seen[-1]["Authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize(
    "inside",
    ["\n", "\r", "\t", "\x00", "\x1b", "\x7f", "\x85", "é", "\u2028"],
    ids=["LF", "CR", "TAB", "NUL", "ESC", "DEL", "NEL", "e-acute", "LINE-SEPARATOR"],
)
def test_a_key_with_a_character_a_header_cannot_carry_is_refused_unquoted(echo, inside):
    key = KEY[:12] + inside + KEY[12:]
    before = len(echo.headers_seen)
    with pytest.raises(ValueError, match="api_key") as refused:
        nbstream.Endpoint(echo.url("ok"), "fake-model", api_key=key)
    message = str(refused.value)
    assert "copy the key again" in message
    shown = message + "".join(traceback.format_exception(refused.type, refused.value, None))
    assert not leaks(shown, KEY[:12]) and not leaks(shown, KEY[12:])
    assert len(echo.headers_seen) == before  # nothing was sent


def test_the_error_keeps_the_servers_words_around_the_blotted_key(echo, no_leftover_runs):
    # Blotting the key out leaves the rest of the message readable, and marks where it was.
    endpoint = nbstream.Endpoint(echo.url("long"), "fake-model", api_key=KEY)
    run = nbstream.stream(endpoint, None, "Hi")
    assert run.wait_done(60) and isinstance(run.error, EndpointError)
    message = str(run.error)
    assert "HTTP 403" in message and "Bearer ***" in message and "…" in message
    assert not leaks(message, KEY)


@pytest.mark.parametrize("offset", range(len(KEY)))
def test_a_key_cut_by_nbstreams_own_bound_leaves_no_piece(echo, offset, no_leftover_runs):
    # A body of nothing but copies of the key, far longer than nbstream reads and scrubs:
    # blotted out, the copies shrink to one mark, and nbstream's bound cuts a copy at every
    # offset in turn. Whatever piece of it the cut leaves (shorter than the scrub
    # recognizes), none may show: the quote is the dots, marks and ellipsis, nothing else.
    endpoint = nbstream.Endpoint(echo.url(f"copies-{offset}"), "fake-model", api_key=KEY)
    run = nbstream.stream(endpoint, None, "Hi")
    assert run.wait_done(60) and isinstance(run.error, EndpointError)
    message = str(run.error)
    quoted = message.partition("/chat/completions: ")[2].partition(". The server failed")[0]
    assert quoted and set(quoted) <= {".", "*", "…"}, quoted


def test_a_model_list_that_echoes_the_key_shows_it_nowhere(echo, caplog, no_leftover_runs):
    # nbstream asks the server what it is (GET /models) with the key, and quotes what the
    # list says in the record and in warnings (the model asked for is not in it).
    caplog.set_level(logging.DEBUG)
    endpoint = nbstream.Endpoint(echo.url("listing"), "fake-model", api_key=KEY)
    assert endpoint.family == "generic"
    run = nbstream.stream(endpoint, None, "Hi", top_k=3)
    assert run.wait(60) == "HelHi", run.error
    record = json.dumps(run.record)
    assert "does not list the model asked for" in record and "***" in record
    assert "answered as 'Bearer ***'" in record
    shown = [record, repr(run), repr(vars(endpoint)), caplog.text]
    shown += [r.getMessage() for r in caplog.records]
    assert not [text for text in shown if leaks(text, KEY)]
