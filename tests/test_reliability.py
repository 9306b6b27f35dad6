"""Reliability under faults, random cancels, contention and long use, no browser.

Every case checks what a user would notice: the end state and its error, that ``result``
is set only for a complete run, that no thread outlives its run, and that the model is free
for the next one. All on the tiny random model: the default model adds nothing here.
States are reached through gates in forward hooks, never by sleeping; the timeouts only keep
a broken engine from hanging the suite.
"""

from __future__ import annotations

import gc
import itertools
import json
import logging
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nbstream
from nbstream.backends import Backend, Job
from nbstream.generation import active_runs
from nbstream.streaming import TokenDecoder

pytestmark = pytest.mark.usefixtures("no_leftover_runs")

LONG = 4000  # tokens: far more than a one-line run produces before a test stops it
HANG_S = 60.0  # hang guard only: nothing here is expected to take that long


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = HANG_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"never reached: {what}")
        time.sleep(0.002)


def new_threads(baseline: set[threading.Thread]) -> list[str]:
    return sorted(t.name for t in set(threading.enumerate()) - baseline)


def assert_no_thread_survives(baseline: set[threading.Thread]) -> None:
    """Every thread started since ``baseline`` has exited (a run's worker, a view thread)."""
    wait_until(lambda: not new_threads(baseline), f"threads still alive: {new_threads(baseline)}")
    assert threading.active_count() <= len(baseline)
    assert not active_runs()


class StepGate:
    """A forward hook that counts the model's forward calls (1 is the prompt's pass, which
    yields the first token) and can pause the model inside one of them, or raise there."""

    def __init__(self, model: Any) -> None:
        self.calls = 0
        self.threads: list[int] = []
        self.times: list[float] = []
        self.pause_at: int | None = None
        self.fail_at: int | None = None
        self.error: BaseException | None = None
        self.reached = threading.Event()
        self.proceed = threading.Event()
        self._handle = model.register_forward_hook(self._hook)

    def arm(self, *, pause_at: int | None = None) -> None:
        """Count from zero again (runs of one test are sequential) and pause at ``pause_at``."""
        self.calls = 0
        self.pause_at = pause_at
        self.reached.clear()
        self.proceed.clear()

    def _hook(self, module: Any, args: Any, output: Any) -> None:
        self.calls += 1
        self.threads.append(threading.get_ident())
        self.times.append(time.perf_counter())
        if self.calls == self.fail_at and self.error is not None:
            error, self.fail_at = self.error, None  # one-shot: the next run is healthy
            raise error
        if self.calls == self.pause_at:
            self.reached.set()
            if not self.proceed.wait(HANG_S):
                raise RuntimeError("the test never let the paused model go on")

    def remove(self) -> None:
        self.proceed.set()
        self._handle.remove()


@pytest.fixture
def gate(tiny_line: tuple[Any, Any]) -> Iterator[StepGate]:
    g = StepGate(tiny_line[0])
    try:
        yield g
    finally:
        g.remove()


def full_decode(tokenizer: Any, run: nbstream.Generation) -> str:
    return tokenizer.decode(run.token_ids, skip_special_tokens=True)


# -- the fault matrix ------------------------------------------------------------------------


class InjectedFault(RuntimeError):
    pass


class DecodeFailsOnce:
    """The real tokenizer without a ``tokenizers`` backend (so the run decodes with
    ``decode``), whose ``decode`` raises once the run has produced a few tokens."""

    def __init__(self, tokenizer: Any, after_tokens: int = 6) -> None:
        self._tokenizer = tokenizer
        self._after = after_tokens
        self.armed = True
        self.backend_tokenizer = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._tokenizer(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)

    def decode(self, ids: Any, **kwargs: Any) -> str:
        if self.armed and len(ids) >= self._after:
            self.armed = False
            raise UnicodeDecodeError("utf-8", b"\xc3", 0, 1, "injected: truncated data")
        return self._tokenizer.decode(ids, **kwargs)


FAULTS = ["forward step 0", "forward step 1", "forward step 50", "tokenizer", "budget", "interrupt"]


def interrupt_main_once_in_wait(run: nbstream.Generation) -> threading.Thread:
    """Deliver SIGINT to the main thread (what the kernel's interrupt button does) once it
    blocks in ``Generation.wait`` and the run has produced a few tokens."""
    main = threading.main_thread()
    assert threading.current_thread() is main

    def in_wait() -> bool:
        frame = sys._current_frames().get(main.ident)
        while frame is not None:
            code = frame.f_code
            if code.co_name == "wait" and code.co_filename.endswith("generation.py"):
                return True
            frame = frame.f_back
        return False

    def interrupter() -> None:
        wait_until(lambda: run.metrics["tokens"] >= 3 and in_wait(), "main thread in wait()")
        signal.pthread_kill(main.ident, signal.SIGINT)

    helper = threading.Thread(target=interrupter, name="test-interrupter")
    helper.start()
    return helper


@pytest.mark.parametrize("surface", ["engine", "widget"])
@pytest.mark.parametrize("fault", FAULTS)
def test_fault_matrix(tiny_line, gate, fault, surface, figures):
    model, tokenizer = tiny_line
    settings_: dict[str, Any] = {"max_new_tokens": 80}
    tok: Any = tokenizer
    expected: dict[str, Any]
    if fault.startswith("forward step"):
        step = int(fault.rsplit(" ", 1)[1])
        gate.fail_at, gate.error = step + 1, InjectedFault(f"injected at step {step}")
        expected = {
            "status": "failed",
            "raises": nbstream.GenerationFailed,
            "error": (InjectedFault, f"injected at step {step}"),
            "reason": "error",
            "tokens": step,  # every step before the faulty one delivered its token
        }
    elif fault == "tokenizer":
        tok = DecodeFailsOnce(tokenizer)
        settings_["max_new_tokens"] = LONG
        message = "'utf-8' codec can't decode byte 0xc3 in position 0: injected: truncated data"
        expected = {
            "status": "failed",
            "raises": nbstream.GenerationFailed,
            "error": (UnicodeDecodeError, message),
            "reason": "error",
        }
    elif fault == "budget":
        settings_.update(max_new_tokens=LONG, budget_s=0.3)
        expected = {
            "status": "failed",
            "raises": nbstream.GenerationFailed,
            "error": (TimeoutError, "the run overran its budget of 0.3 s"),
            "reason": "timeout",
        }
    else:
        settings_["max_new_tokens"] = LONG
        expected = {
            "status": "cancelled",
            "raises": KeyboardInterrupt,
            "error": None,
            "reason": "cancelled",
        }

    widget = nbstream.StreamWidget(model, tok) if surface == "widget" else None
    baseline = set(threading.enumerate())
    if widget is not None:
        run = widget.generate("Hello", **settings_)
        wait: Callable[[], str] = widget.wait
    else:
        run = nbstream.stream(model, tok, "Hello", **settings_)
        # Read as a user streaming it does (the text is decoded by its readers), except
        # for the interrupt, which lands in wait().
        wait = run.wait if fault == "interrupt" else lambda: "".join(run)
    helper = interrupt_main_once_in_wait(run) if fault == "interrupt" else None
    try:
        with pytest.raises(expected["raises"]) as info:
            wait()
    finally:
        if helper is not None:
            helper.join(HANG_S)

    assert run.done and run.status == expected["status"]
    assert run.result is None
    assert run.metrics["finish_reason"] == expected["reason"]
    if fault != "tokenizer":  # (text that could not be decoded is not shown)
        assert run.partial_text == full_decode(tokenizer, run)
    if "tokens" in expected:
        assert run.metrics["tokens"] == expected["tokens"]
    else:
        assert run.metrics["tokens"] < LONG  # the model was halted, not left running
    if expected["error"] is None:
        assert run.error is None
    else:
        kind, message = expected["error"]
        assert isinstance(run.error, kind) and str(run.error) == message
        assert info.value.__cause__ is run.error
        assert str(info.value) == f"the run failed: {kind.__name__}: {message}"
    if widget is not None:
        assert widget.status == expected["status"] and widget.result is None
        assert widget.metrics["finish_reason"] == expected["reason"]
        if expected["error"] is None:
            assert widget.error_info is None
        else:
            assert widget.error_info == {"type": kind.__name__, "message": message}
    assert_no_thread_survives(baseline)

    # The model is free: the next run gets it at once and completes.
    if widget is not None:
        after = widget.generate("Hello", max_new_tokens=5)
        assert after.metrics["queued_s"] == 0  # it never waited for the model
        assert widget.wait(HANG_S) == after.result
        assert widget.status == "complete" and widget.error_info is None
    else:
        after = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=5)
        assert after.metrics["queued_s"] == 0  # it never waited for the model
        assert after.wait(HANG_S) == after.result
    assert after.result == full_decode(tokenizer, after)
    assert_no_thread_survives(baseline)
    figures.setdefault("faults", {})[f"{fault} ({surface})"] = {
        "status": run.status,
        "error": type(run.error).__name__ if run.error is not None else None,
        "finish_reason": run.metrics["finish_reason"],
        "threads_left": len(new_threads(baseline)),
        "next_run": after.status,
    }


@pytest.mark.parametrize("surface", ["engine", "widget"])
def test_a_raising_callback_leaves_the_run_complete(tiny_line, caplog, surface):
    model, tokenizer = tiny_line
    calls: list[str] = []

    def bad(_arg: Any) -> None:
        calls.append("bad")
        raise InjectedFault("injected in a callback")

    baseline = set(threading.enumerate())
    caplog.set_level(logging.ERROR, logger="nbstream")
    if surface == "widget":
        w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=12)
        w.on_complete(bad)
        w.on_complete(calls.append)
        run = w.generate("Hello")
        text = w.wait(HANG_S)
        wait_until(lambda: len(calls) == 2, "both on_complete callbacks called")
        assert w.status == "complete" and w.error_info is None and w.result == text
    else:
        run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=12)
        run.add_done_callback(bad)
        run.add_done_callback(lambda r: calls.append(r.result))
        text = run.wait(HANG_S)
        wait_until(lambda: len(calls) == 2, "both done-callbacks called")
    assert calls == ["bad", text]  # the one after the raising callback still ran
    assert run.status == "complete" and run.error is None and run.result == text
    assert_no_thread_survives(baseline)
    logged = [r for r in caplog.records if r.exc_info and r.exc_info[0] is InjectedFault]
    assert len(logged) == 1 and "callback raised" in logged[0].getMessage()
    # The next run completes, and the callbacks keep working.
    if surface == "widget":
        w.generate("Hello", max_new_tokens=4)
        again = w.wait(HANG_S)
        wait_until(lambda: len(calls) == 4, "callbacks of the second run")
        assert calls[2:] == ["bad", again]
    else:
        assert nbstream.stream(model, tokenizer, "Hello", max_new_tokens=4).wait(HANG_S)
    assert_no_thread_survives(baseline)


# -- random cancels --------------------------------------------------------------------------

MOMENTS = [
    "queued",
    "at once",
    "in the prompt's pass",
    "mid-stream",
    "last step",
    "racing",
    "after",
]


def test_random_cancels_end_cancelled_or_complete_and_leave_nothing(tiny_line, gate, figures):
    model, tokenizer = tiny_line
    rng = random.Random(20240606)
    baseline = set(threading.enumerate())
    tally: dict[str, dict[str, int]] = {m: {"cancelled": 0, "complete": 0} for m in MOMENTS}
    checked = 0

    def check(run: nbstream.Generation, stopped: bool) -> None:
        nonlocal checked
        assert run.wait_done(HANG_S), "a run never ended"
        assert run.status in ("cancelled", "complete")
        # stop() said it stopped the run exactly when the run ends cancelled.
        assert stopped == (run.status == "cancelled")
        assert run.partial_text == full_decode(tokenizer, run)
        if run.status == "complete":
            assert run.result == run.partial_text == run.wait(0)
        else:
            assert run.result is None
            with pytest.raises(nbstream.GenerationCancelled):
                run.wait(0)
        assert run.join(HANG_S)
        checked += 1

    for _ in range(100):
        moment = rng.choice(MOMENTS)
        n = rng.randint(3, 30)
        prompt = rng.choice(["Hello", "Name a color.", "Count to five", "Why?"])
        if moment == "queued":
            gate.arm(pause_at=1)
            blocker = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=n)
            assert gate.reached.wait(HANG_S)
            run = nbstream.stream(model, tokenizer, prompt, max_new_tokens=n)
            assert run.status == "queued"
            stopped = run.stop()
            assert run.wait_done(HANG_S) and run.token_ids == []
            gate.proceed.set()
            check(blocker, stopped=False)
        elif moment == "at once":
            gate.arm()
            run = nbstream.stream(model, tokenizer, prompt, max_new_tokens=n)
            stopped = run.stop()
        elif moment == "racing":
            # From another thread, at a drawn delay: whatever the run is doing by then.
            gate.arm()
            run = nbstream.stream(model, tokenizer, prompt, max_new_tokens=n)
            said: list[bool] = []
            timer = threading.Timer(rng.uniform(0, 0.1), lambda r=run, s=said: s.append(r.stop()))
            timer.start()
            timer.join(HANG_S)
            stopped = said[0]
        elif moment == "after":
            gate.arm()
            run = nbstream.stream(model, tokenizer, prompt, max_new_tokens=n)
            assert run.wait_done(HANG_S)
            stopped = run.stop()
            assert stopped is False
        else:
            step = {"in the prompt's pass": 1, "last step": n}.get(moment) or rng.randint(2, n - 1)
            gate.arm(pause_at=step)
            run = nbstream.stream(model, tokenizer, prompt, max_new_tokens=n)
            assert gate.reached.wait(HANG_S)
            stopped = run.stop()  # while the model is inside that step
            gate.proceed.set()
            assert stopped is True
            assert run.wait_done(HANG_S)
            assert run.metrics["tokens"] == step  # that step's token, and no other
        check(run, stopped)
        tally[moment][run.status] += 1

    assert checked == 100 + sum(tally["queued"].values())
    for moment in ("queued", "in the prompt's pass", "mid-stream", "last step"):
        assert tally[moment]["cancelled"] > 0 and tally[moment]["complete"] == 0, tally
    assert tally["after"]["complete"] > 0 and tally["after"]["cancelled"] == 0, tally
    assert_no_thread_survives(baseline)
    figures["random_cancels"] = {
        "runs": checked,
        "by_moment": tally,
        "threads_left": len(new_threads(baseline)),
    }


# -- contention ------------------------------------------------------------------------------


def blocks(threads: list[int]) -> list[int]:
    """The forward calls' threads with consecutive repeats collapsed: one entry per run that
    had the model, as long as runs never interleave."""
    out: list[int] = []
    for ident in threads:
        if not out or out[-1] != ident:
            out.append(ident)
    return out


def test_four_widgets_on_one_model_run_one_at_a_time_each_as_if_alone(
    tiny_line, greedy, gate, figures
):
    model, tokenizer = tiny_line
    prompts = ["Hello", "Name a color.", "Count to five", "Why is the sky blue?"]
    n = 20
    solo = [greedy(model, tokenizer, prompt, n)[1] for prompt in prompts]
    widgets = [nbstream.StreamWidget(model, tokenizer, max_new_tokens=n) for _ in prompts]
    baseline = set(threading.enumerate())
    gate.arm(pause_at=1)  # whoever gets the model first holds it until all four are in
    gate.threads.clear()
    gate.times.clear()
    start = threading.Barrier(len(widgets))
    runs: dict[int, nbstream.Generation] = {}

    def click(i: int) -> None:
        start.wait(HANG_S)
        runs[i] = widgets[i].generate(prompts[i])

    starters = [threading.Thread(target=click, args=(i,)) for i in range(len(widgets))]
    for t in starters:
        t.start()
    for t in starters:
        t.join(HANG_S)
    assert gate.reached.wait(HANG_S)
    assert sorted(r.status for r in runs.values()) == ["queued"] * 3 + ["running"]
    gate.proceed.set()
    texts = [w.wait(HANG_S) for w in widgets]

    assert texts == solo  # each as its own greedy run alone would have answered
    for w, text in zip(widgets, texts, strict=True):
        assert w.status == "complete" and w.result == text
    # Serialized: the model's forward calls come in four unbroken blocks, one per run...
    assert len(blocks(gate.threads)) == len(widgets) == len(set(gate.threads))
    # ...that never overlap in time.
    spans: dict[int, list[float]] = {}
    for ident, at in zip(gate.threads, gate.times, strict=True):
        spans.setdefault(ident, [at, at])[1] = at
    ordered = sorted(spans.values())
    for (_, end), (start, _) in itertools.pairwise(ordered):
        assert start > end
    assert_no_thread_survives(baseline)
    figures["contention"] = {
        "widgets": len(widgets),
        "forward_blocks": len(blocks(gate.threads)),
        "equal_to_solo": sum(t == s for t, s in zip(texts, solo, strict=True)),
    }


def test_ten_concurrent_run_clicks_on_a_queued_widget_start_exactly_one_run(
    tiny_line, greedy, gate
):
    model, tokenizer = tiny_line
    holder = nbstream.StreamWidget(model, tokenizer, max_new_tokens=8)
    w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=8)
    baseline = set(threading.enumerate())
    gate.arm(pause_at=1)
    holder.generate("Hello")
    assert gate.reached.wait(HANG_S)
    start = threading.Barrier(10)

    def click() -> None:
        start.wait(HANG_S)
        w._handle_message(w, {"type": "run", "prompt": "Name a color."}, [])

    clickers = [threading.Thread(target=click) for _ in range(10)]
    for t in clickers:
        t.start()
    for t in clickers:
        t.join(HANG_S)
    assert w.run_id == 1 and w.status == "queued"
    assert w.input_error == ""  # the extra clicks are ignored, not reported as errors
    workers = [t for t in new_threads(baseline) if t.startswith("nbstream-run-")]
    assert len(workers) == 2  # the holder's run and this widget's one
    gate.proceed.set()
    assert w.wait(HANG_S) == greedy(model, tokenizer, "Name a color.", 8)[1]
    holder.wait(HANG_S)
    assert w.run_id == 1
    assert_no_thread_survives(baseline)


# -- soak ------------------------------------------------------------------------------------


def test_soak_two_hundred_generations(tiny_line, figures):
    model, tokenizer = tiny_line
    w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=12)
    per_run: list[list[dict[str, Any]]] = []
    original_send = w.comm.send

    def send(data: Any = None, metadata: Any = None, buffers: Any = None) -> None:
        # Everything the widget sends to its views: state updates and custom messages.
        per_run[-1].append(data)
        original_send(data=data, metadata=metadata, buffers=buffers)

    w.comm.send = send
    process = psutil.Process()
    baseline = set(threading.enumerate())
    texts: set[str] = set()
    warm_rss = 0
    for i in range(200):
        per_run.append([])
        run = w.generate("Hello")
        texts.add(w.wait(HANG_S))
        assert run.join(HANG_S)
        assert_no_thread_survives(baseline)
        if i == 19:  # after a warm-up: allocator pools, caches of torch and tokenizers
            gc.collect()
            warm_rss = process.memory_info().rss
    gc.collect()
    growth = process.memory_info().rss - warm_rss
    assert growth < 50 * 2**20, f"resident memory grew {growth / 2**20:.1f} MB in 180 runs"
    assert len(texts) == 1  # a greedy answer does not drift as runs pile up

    def is_delta(message: dict[str, Any]) -> bool:
        return message.get("method") == "custom" and message["content"].get("type") == "delta"

    def overhead(message: dict[str, Any]) -> int:
        """Bytes of a message on the wire, its text left out."""
        if is_delta(message):
            message = {**message, "content": {**message["content"], "text": ""}}
        return len(json.dumps(message))

    (answer,) = texts
    for messages in per_run:
        # The text went out exactly once per run, in at most one delta per token, and
        # besides the deltas only a few state updates.
        assert "".join(m["content"]["text"] for m in messages if is_delta(m)) == answer
        assert len(messages) <= 12 + 4
    # No message grows from the first runs to the last: what a message carries besides
    # the text stays the same size (room for more digits in a run id and the metrics).
    first = max(overhead(m) for messages in per_run[:10] for m in messages)
    last = max(overhead(m) for messages in per_run[-10:] for m in messages)
    assert last <= first + 32, (first, last)
    figures["soak"] = {
        "runs": len(per_run),
        "rss_growth_mb": round(growth / 2**20, 1),
        "max_messages_per_run": max(len(m) for m in per_run),
        "message_overhead_first_bytes": first,
        "message_overhead_last_bytes": last,
        "threads_left": len(new_threads(baseline)),
    }


# -- the incremental decoder inside a run ------------------------------------------------------
# test_streaming.py checks TokenDecoder alone; here the ids go through a whole run (its
# reader-side decoding, the first-text path, stop strings) with a reader reading between
# pieces, as a notebook's view does.


class IdsJob(Job):
    """A job whose "model" hands over a given list of token ids, one piece each time the
    test says so."""

    prompt_text: str | None = None
    prompt_tokens: int | None = None
    prompt: Any = "ids"
    seed: int | None = None

    def __init__(self, tokenizer: Any, pieces: list[list[int]], settings: dict[str, Any]):
        self.tokenizer = tokenizer
        self.pieces = pieces
        self.settings = settings
        self.in_effect = dict(settings)
        self.turn = threading.Semaphore(0)
        self.delivered = threading.Semaphore(0)

    def decoder(self) -> TokenDecoder:
        return TokenDecoder(self.tokenizer)

    def count_tokens(self, buffer: Any) -> int:
        return len(buffer.items)

    def run(self, buffer: Any, control: Any) -> str:
        buffer.put("the prompt")  # as generate() does: the buffer skips it
        for piece in self.pieces:
            if not self.turn.acquire(timeout=HANG_S):
                raise RuntimeError("the test never asked for the next piece")
            for token_id in piece:
                buffer.put(token_id)
            self.delivered.release()
        return "length"


class IdsBackend(Backend):
    def __init__(self, job: IdsJob) -> None:
        self.job = job

    def queue_key(self) -> Any:
        return self

    def prepare(self, prompt: Any, settings: dict[str, Any]) -> IdsJob:
        self.job.settings = self.job.in_effect = settings
        return self.job


_pools: dict[int, tuple[list[int], list[int]]] = {}


def id_pools(tokenizer: Any) -> tuple[list[int], list[int]]:
    if id(tokenizer) not in _pools:
        vocab = tokenizer.get_vocab()
        single_bytes = sorted(i for token, i in vocab.items() if len(token) == 1)
        cut = tokenizer.encode("你好世界 🎉👍🏽 café 𝔘𝔫𝔦 👩‍👩‍👧 Ωμέγα", add_special_tokens=False)
        _pools[id(tokenizer)] = single_bytes, cut
    return _pools[id(tokenizer)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_runs_text_is_always_a_prefix_of_the_full_decode(tiny, data):
    tokenizer = tiny[1]
    single_bytes, cut = id_pools(tokenizer)
    one_id = st.one_of(
        st.sampled_from(single_bytes),  # continuation bytes, lead bytes, ASCII
        st.sampled_from(cut),  # pieces of multi-byte characters
        st.sampled_from(list(tokenizer.all_special_ids)),
        st.integers(0, len(tokenizer) - 1),
    )
    ids = data.draw(st.lists(one_id, max_size=40), label="ids")
    full = tokenizer.decode(ids, skip_special_tokens=True)
    pieces, i = [], 0
    while i < len(ids):
        size = data.draw(st.integers(1, 5), label="piece size")
        pieces.append(ids[i : i + size])
        i += size
    run_settings: dict[str, Any] = {}
    expected = full
    whole = [part for part in full.split("\ufffd") if part]  # text without cut characters
    if whole and data.draw(st.booleans(), label="with a stop string"):
        part = data.draw(st.sampled_from(whole), label="stop from")
        start = data.draw(st.integers(0, len(part) - 1), label="stop start")
        stop = part[start : start + data.draw(st.integers(1, 3), label="stop length")]
        run_settings["stop"] = [stop]
        expected = full[: full.index(stop)]
    job = IdsJob(tokenizer, pieces, run_settings)
    run = nbstream.stream(IdsBackend(job), None, "ids", **run_settings)
    seen = []
    for _ in pieces:
        job.turn.release()
        assert job.delivered.acquire(timeout=HANG_S)
        seen.append(run.partial_text)  # what a view shows at this moment
    assert run.wait(HANG_S) == expected
    for text in seen:
        # Never a character the final text does not have (no early U+FFFD), never retracted.
        assert expected.startswith(text)
    assert "".join(run) == expected
    assert run.token_ids == ids
    assert run.join(HANG_S)
