"""The widget's state under races: what the page holds must be what the kernel holds.

The page is simulated from what the kernel puts on the comm: every ``update`` message
merged in order is the state a front end ends with. Runs start, stream, stop and end on
other threads while settings arrive from the page and thread switches happen about every
bytecode (``sys.setswitchinterval(1e-6)``); at the end the two states must agree.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from typing import Any

import pytest
import traitlets

import nbstream
from nbstream.testing import tiny_model

SYNCED = ("status", "metrics", "run_id", "error_info", "settings_errors", "temperature")


@pytest.fixture
def line() -> tuple[Any, Any]:
    return tiny_model(one_line=True)


class Page:
    """The state a front end holds: the widget's updates, merged in the order sent."""

    def __init__(self, w: Any) -> None:
        self.state: dict[str, Any] = dict(w.get_state())
        self.lock = threading.Lock()
        original = w.comm.send

        def send(data: Any = None, metadata: Any = None, buffers: Any = None) -> None:
            if isinstance(data, dict) and data.get("method") in ("update", "echo_update"):
                with self.lock:
                    self.state.update(data.get("state", {}))
            original(data=data, metadata=metadata, buffers=buffers)

        w.comm.send = send

    def disagreements(self, w: Any) -> dict[str, tuple[Any, Any]]:
        kernel = w.get_state()
        return {k: (self.state.get(k), kernel[k]) for k in SYNCED if self.state.get(k) != kernel[k]}


def settle(w: Any) -> None:
    """Wait for the run and for its view thread to publish its end."""
    with contextlib.suppress(nbstream.GenerationError):
        w.wait(60)
    deadline = time.monotonic() + 30
    while any(t.name.startswith("nbstream-view-") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "a view thread never ended"
        time.sleep(0.01)


def test_page_and_kernel_agree_after_shaken_runs(line, shaken):
    w = nbstream.StreamWidget(*line, max_new_tokens=40)
    page = Page(w)
    rng = random.Random(8)
    for i in range(25):
        halt = threading.Event()

        def from_the_page(seed: int = i, halt: threading.Event = halt) -> None:
            # The panel edits a setting while the run streams, as a user would.
            values = [0.5, -1, 0.7, None]
            k = seed
            while not halt.is_set():
                w.set_state({"temperature": values[k % len(values)]})
                k += 1
                time.sleep(0.001)

        editor = threading.Thread(target=from_the_page)
        editor.start()
        run = w.generate("Hello", temperature=0.0)
        if rng.random() < 0.5:
            time.sleep(rng.random() * 0.05)
            run.stop()
        settle(w)
        halt.set()
        editor.join(30)
        w.set_state({"temperature": None})
        assert page.disagreements(w) == {}, f"after run {i}"
        assert w.status == run.status
    w.close()


def test_every_synced_write_is_serialized_on_the_widget(line):
    """No thread writes a synced trait while another holds the widget (its hold_sync)."""
    w = nbstream.StreamWidget(*line, max_new_tokens=30)
    unlocked: list[str] = []

    def check(change: dict[str, Any]) -> None:
        if change["name"] in w.keys and not w._lock._is_owned():
            unlocked.append(f"{change['name']} on {threading.current_thread().name}")

    w.observe(check, names=traitlets.All)
    for stop in (False, True, False):
        run = w.generate("Hello")
        if stop:
            run.stop()
        settle(w)
    w.set_state({"temperature": 0.5})
    assert unlocked == []
    w.close()


def test_an_old_runs_view_thread_never_writes_over_a_new_run(line, probe, monkeypatch):
    """Widen the window between the old view thread's check and its write."""
    model, tokenizer = line
    p = probe(model)
    other = nbstream.StreamWidget(model, tokenizer, max_new_tokens=3)
    w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=4000)
    p.hold()
    other.generate("Hello")  # holds the model: w's first run is queued behind it
    first = w.generate("Hello")
    assert first.status == "queued"
    first_thread = w._feed._thread
    original = type(w).hold_sync
    entered = threading.Event()

    @contextlib.contextmanager
    def slow_hold_sync(self: Any) -> Any:
        if threading.current_thread() is first_thread and not entered.is_set():
            entered.set()
            time.sleep(0.5)  # a thread switch right here
        with original(self):
            yield

    monkeypatch.setattr(type(w), "hold_sync", slow_hold_sync)
    p.release()  # the first run gets the model: its view thread publishes "running"...
    assert entered.wait(30)
    # ...while, meanwhile, it is stopped and a second run is queued behind `other` again.
    first.stop()
    with contextlib.suppress(nbstream.GenerationError):
        first.wait(30)
    p.hold()
    other.generate("Hello")
    second = w.generate("Hello")
    first_thread.join(30)
    assert w.run_id == 2
    assert w.status == second.status == "queued"  # never the first run's "running"
    p.release()
    second.stop()
    settle(w)
    assert w.status == "cancelled"
    other.close()
    w.close()


def test_a_crash_in_the_view_thread_still_publishes_the_real_end(line, monkeypatch):
    w = nbstream.StreamWidget(*line, max_new_tokens=30)
    done: list[str] = []
    w.on_complete(done.append)
    calls = {"n": 0}
    feed = type(w._feed)
    original = feed._send_delta

    def broken(self: Any, *args: Any) -> None:
        calls["n"] += 1
        raise RuntimeError("view transport broke")

    monkeypatch.setattr(feed, "_send_delta", broken)
    run = w.generate("Hello")
    text = run.wait(60)
    settle(w)
    monkeypatch.setattr(feed, "_send_delta", original)
    assert calls["n"] >= 1
    assert w.status == "complete"  # the end, not the state the crash happened in
    assert done == [text]  # on_complete still ran
    w.close()


def test_wait_inside_on_complete_does_not_join_its_own_thread(line):
    w = nbstream.StreamWidget(*line, max_new_tokens=5)
    seen: list[Any] = []

    def callback(text: str) -> None:
        try:
            seen.append(w.wait(5) == text)
        except BaseException as exc:
            seen.append(exc)

    w.on_complete(callback)
    w.generate("Hello")
    settle(w)
    assert seen == [True]
    w.close()


def test_a_display_racing_the_end_never_leaves_a_stale_saved_state(line, monkeypatch):
    """The run ends while the widget is being displayed (a re-display of a shared chat, a
    `%%nbstream` cell): the saved fallback must end on the run's end, never "running"."""
    import IPython.display

    from nbstream.widgets import display as _display

    published: list[str] = []  # first line of each saved fallback, in the order sent

    def record(data: Any, *, display_id: Any = None, **kwargs: Any) -> None:
        if display_id is not None:
            published.append(data["text/plain"].splitlines()[0])

    show_with_fallback = _display.show_with_fallback

    def slow_show(data: Any, metadata: Any, display_id: str) -> None:
        time.sleep(0.5)  # the bundle was read ("running"); a thread switch right here
        show_with_fallback(data, metadata, display_id)

    monkeypatch.setattr(_display, "in_kernel", lambda: True)
    monkeypatch.setattr(_display, "show_with_fallback", slow_show)
    monkeypatch.setattr(IPython.display, "display", record)
    monkeypatch.setattr(IPython.display, "update_display", record)
    w = nbstream.StreamWidget(*line, max_new_tokens=3)
    run = w.generate("Hello")
    w._ipython_display_()
    run.wait(60)
    settle(w)
    assert published and published[-1].startswith("nbstream · complete")
    w.close()


def test_wait_joins_its_own_runs_view_thread_not_a_later_one(line, probe, monkeypatch):
    """An on_complete callback starts the next run before wait() gets to join: wait() must
    not block on the new run's view thread (which lives as long as that run)."""
    from nbstream.widgets import run_slot as _run_slot

    monkeypatch.setattr(_run_slot, "JOIN_S", 600.0)  # a wrong join would block for good
    model, tokenizer = line
    p = probe(model)
    w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=3)
    later: list[Any] = []

    def again(text: str) -> None:
        if not later:
            p.hold()  # the next run stays running until released
            later.append(w.generate("Again", max_new_tokens=40))

    w.on_complete(again)
    run_wait = nbstream.Generation.wait

    entered = threading.Event()

    def slow_wait(self: Any, timeout: Any = None) -> str:
        if self is first:
            entered.set()
        text = run_wait(self, timeout)
        time.sleep(0.5)  # a thread switch here: on_complete starts the next run meanwhile
        return text

    monkeypatch.setattr(nbstream.Generation, "wait", slow_wait)
    # The first run waits at its first step until wait() is waiting on it: otherwise it could
    # end, and on_complete start the next, before the waiter calls wait(), which then rightly
    # waits for the widget's current run (the held one).
    p.hold()
    first = w.generate("Hello")
    returned = threading.Event()
    waiter = threading.Thread(target=lambda: (w.wait(60), returned.set()))
    waiter.start()
    assert entered.wait(30), "wait() never waited on the first run"
    p.release()
    assert returned.wait(30), "wait() blocked on the next run's view thread"
    assert first.status == "complete" and later and not later[0].done
    p.release()
    later[0].wait(60)
    settle(w)
    waiter.join(30)
    w.close()


def test_a_closed_widget_displays_its_fallback(line, monkeypatch):
    import IPython.display

    shown: list[Any] = []
    monkeypatch.setattr(IPython.display, "display", lambda data, **k: shown.append(data))
    w = nbstream.StreamWidget(*line, max_new_tokens=3)
    w.generate("Hello")
    w.wait(60)
    w.close()
    w._ipython_display_()
    assert shown[0]["text/plain"].startswith("nbstream · complete")


def test_the_state_published_at_launch_is_never_an_end(line, monkeypatch):
    """A run that ended before the widget published its start: the traits say "running"
    until the end is published with the result in place."""
    w = nbstream.StreamWidget(*line, max_new_tokens=2)
    seen: list[tuple[str, bool]] = []
    w.observe(lambda change: seen.append((change["new"], w.run.done)), names="status")
    stream = nbstream.widgets.stream.stream

    def finished_stream(*args: Any, **kwargs: Any) -> Any:
        run = stream(*args, **kwargs)
        run.wait_done(60)  # ended before _launch reads its status
        return run

    monkeypatch.setattr(nbstream.widgets.stream, "stream", finished_stream)
    w.generate("Hello")
    settle(w)
    ends = [(s, done) for s, done in seen if s in ("complete", "failed", "cancelled")]
    assert ends == [("complete", True)]
    assert seen[0] == ("running", True)
    w.close()


def test_a_view_thread_that_cannot_start_leaves_no_run_streaming_unseen(line, monkeypatch):
    from nbstream.widgets import feed as _feed

    w = nbstream.StreamWidget(*line, max_new_tokens=4000)
    start = threading.Thread.start

    def no_view_thread(self: threading.Thread) -> None:
        if self.name.startswith(_feed.VIEW_THREAD_PREFIX):
            raise RuntimeError("can't start new thread")
        start(self)

    monkeypatch.setattr(threading.Thread, "start", no_view_thread)
    with pytest.raises(RuntimeError, match="new thread"):
        w.generate("Hello")
    monkeypatch.setattr(threading.Thread, "start", start)
    run = w.run
    assert run is not None and run.wait_done(60)
    assert run.status == "cancelled"
    deadline = time.monotonic() + 30
    while w.status != "cancelled":  # published from the run's own thread
        assert time.monotonic() < deadline, f"the widget stayed {w.status}"
        time.sleep(0.01)
    w.close()
