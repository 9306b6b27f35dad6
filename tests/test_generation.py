"""The run lifecycle: states, reading, wait, stop, metrics, faults, bad input and the queue.

All on the tiny random model (fast); the real default model is in test_default_model.py.
"""

from __future__ import annotations

import asyncio
import math
import signal
import sys
import threading
import time

import pytest
from branching_server import PROMPT

import nbstream
from nbstream.generation import METRIC_KEYS, active_runs

pytestmark = pytest.mark.usefixtures("no_leftover_runs")

LONG = 4000  # tokens: far more than any test lets a one-line run produce before it stops it


def run_threads() -> set[threading.Thread]:
    """The engine's worker threads alive now."""
    return {t for t in threading.enumerate() if t.name.startswith("nbstream-run-")}


def wait_until(predicate, timeout=30.0):
    """Poll (no timing assertion: the timeout only keeps a broken engine from hanging)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.002)


def test_error_classes():
    assert issubclass(nbstream.GenerationCancelled, nbstream.GenerationError)
    assert issubclass(nbstream.GenerationFailed, nbstream.GenerationError)
    assert not issubclass(nbstream.GenerationCancelled, nbstream.GenerationFailed)
    assert issubclass(nbstream.GenerationError, Exception)


# -- a complete run ---------------------------------------------------------------------------


def test_stream_returns_at_once_and_completes(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    p.hold()
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=12)
    # stream() returned while the model is held at its first forward call: it never blocks.
    assert isinstance(run, nbstream.Generation)
    assert run.status == "running"
    assert not run.done
    assert run.result is None
    p.release()
    text = run.wait()
    assert run.status == "complete"
    assert run.done
    assert run.error is None
    assert text == run.result == run.partial_text
    assert len(text) > 0


def test_result_equals_chunks_decode_and_greedy_generate(tiny_line, greedy):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Zebra crossing", max_new_tokens=40)
    chunks = list(run)
    ids, text = greedy(model, tokenizer, "Zebra crossing", 40)
    assert run.status == "complete"
    assert "".join(chunks) == run.result == text
    assert run.token_ids == ids
    assert run.result == tokenizer.decode(run.token_ids, skip_special_tokens=True)
    assert all(chunks), "no empty chunks"


def test_sampled_run_result_is_full_decode_of_its_ids(tiny):
    # Sampling the random model over its whole vocabulary draws many byte tokens: characters
    # cut between tokens, stray continuation bytes, special tokens.
    model, tokenizer = tiny
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=80, temperature=1.0, seed=7)
    chunks = list(run)
    assert run.status == "complete"
    assert run.metrics["tokens"] == len(run.token_ids) == 80
    full = tokenizer.decode(run.token_ids, skip_special_tokens=True)
    assert "".join(chunks) == run.result == full


def test_each_iterator_replays_from_the_first_chunk(tiny_line):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=150)
    live = iter(run)
    first = next(live)
    wait_until(lambda: len(run.partial_text) > len(first))
    late = list(run)  # starts after some chunks were produced: replays them, then follows
    rest = [first, *live]
    assert run.status == "complete"
    assert late == rest
    assert "".join(late) == run.result
    assert list(run) == late  # and once more after the end


def test_iteration_ends_with_the_run_not_at_the_end_of_the_reader_s_pause(probe, monkeypatch):
    """A reader pauses between wakes so tokens pile up; the run's end cuts the pause short.

    The pause is made ten minutes long. The model waits at its prefill until the reader is
    asleep, and at its third pass until the reader has read the first token (it is then in
    its pause, the run not over); then it runs to its end.
    """
    from nbstream import generation
    from nbstream.testing import forced_model

    monkeypatch.setattr(generation, "_MIN_WAKE_INTERVAL_S", 600.0)
    model, tokenizer = forced_model(" one two three four five six")
    p = probe(model)
    prefill, third = threading.Event(), threading.Event()

    def wait_for_the_test(calls: int) -> None:
        gate = {1: prefill, 3: third}.get(calls)
        if gate is not None and not gate.wait(60):
            raise RuntimeError("the test never let the model go on")

    p.on_call = wait_for_the_test
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=20, temperature=0)
    chunks: list[str] = []
    first_read = threading.Event()

    def read() -> None:
        for chunk in run:
            chunks.append(chunk)
            first_read.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    wait_until(lambda: run._buffer._sleepers == 1)  # it found nothing yet, and sleeps
    prefill.set()
    assert first_read.wait(60), "the reader never read the first token"
    third.set()
    reader.join(60)
    assert not reader.is_alive(), "the reader slept on after the run had ended"
    assert run.status == "complete"
    assert "".join(chunks) == run.result == " one two three four five six"


def test_readers_on_several_threads_see_the_same_chunks(tiny_line):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=120)
    seen: list[list[str]] = [[] for _ in range(4)]

    def read(i: int) -> None:
        for chunk in run:
            seen[i].append(chunk)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert run.status == "complete"
    assert all(s == seen[0] for s in seen)
    assert "".join(seen[0]) == run.result


def test_partial_text_grows_while_running(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=LONG)
    wait_until(lambda: p.calls >= 6)
    p.hold()
    wait_until(p.held.is_set)
    # The model is held mid-run: the text so far is readable, the run is not over.
    partial = run.partial_text
    assert partial
    assert run.status == "running"
    assert run.result is None
    p.release()
    run.stop()
    with pytest.raises(nbstream.GenerationCancelled):
        run.wait()
    assert run.partial_text.startswith(partial)


def test_done_callback_runs_once_for_each_end(tiny_line):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=5)
    called: list[str] = []
    got = threading.Event()

    def on_done(r):
        called.append(r.status)
        got.set()

    run.add_done_callback(on_done)
    run.wait()
    assert got.wait(30)
    late: list[str] = []
    run.add_done_callback(lambda r: late.append(r.status))  # after the end: called at once
    assert called == ["complete"]
    assert late == ["complete"]


def test_repr_shows_state_and_text(tiny_line):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=4)
    run.wait()
    assert "complete" in repr(run)
    assert run._repr_markdown_() == run.result


# -- metrics -------------------------------------------------------------------------------------


def test_metrics_keys_exist_from_the_start(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    p.hold()
    first = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=5)
    second = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=5)
    wait_until(p.held.is_set)
    for run in (first, second):
        assert tuple(run.metrics) == METRIC_KEYS
    queued = second.metrics
    assert second.status == "queued"
    assert {k for k, v in queued.items() if v is not None} <= {"tokens", "forced_tokens"}
    assert queued["tokens"] in (0, None) and queued["forced_tokens"] == 0
    running = first.metrics
    assert running["ttft_s"] is None and running["first_chunk_s"] is None
    assert running["finish_reason"] is None
    assert running["queued_s"] is not None and running["elapsed_s"] is not None
    p.release()
    first.wait()
    second.wait()
    for run in (first, second):
        m = run.metrics
        assert tuple(m) == METRIC_KEYS
        # Every key is known at the end; thinking_tokens is None for a run that did not think.
        assert all(m[k] is not None for k in METRIC_KEYS if k != "thinking_tokens"), m
        assert m["thinking_tokens"] is None and m["first_answer_s"] == m["first_chunk_s"]
        assert m["tokens"] == 5
        assert m["finish_reason"] == "length"
        assert m["ttft_s"] <= m["first_chunk_s"] <= m["elapsed_s"]
        assert m["tokens_per_s"] > 0
    assert second.metrics["queued_s"] > 0


def test_metrics_count_token_ids_not_chunks(tiny):
    # Sampled CJK-heavy text: chunks hold whole characters, so several ids make one chunk.
    model, tokenizer = tiny
    run = nbstream.stream(model, tokenizer, "你好", max_new_tokens=60, temperature=1.0, seed=3)
    chunks = list(run)
    assert run.metrics["tokens"] == len(run.token_ids) == 60
    assert isinstance(run.metrics["tokens"], int)
    assert len(chunks) <= 60


def test_finish_reason_eos(tiny, monkeypatch):
    model, tokenizer = tiny
    # The random model's greedy output is newlines: make the newline its end token.
    newline = tokenizer.encode("\n", add_special_tokens=False)[0]
    monkeypatch.setattr(model.generation_config, "eos_token_id", newline)
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=30)
    run.wait()
    assert run.metrics["finish_reason"] == "eos"
    assert run.metrics["tokens"] == 1
    assert run.token_ids == [newline]


# -- wait ------------------------------------------------------------------------------------------


def test_wait_timeout_raises_and_the_run_goes_on(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    p.hold()
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=8)
    with pytest.raises(TimeoutError):
        run.wait(timeout=0.05)
    assert run.status == "running"
    p.release()
    assert run.wait() == run.result
    assert run.status == "complete"


def test_keyboard_interrupt_in_wait_stops_the_run(tiny_line):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=LONG)
    main = threading.main_thread()
    assert threading.current_thread() is main
    counts: dict[str, int] = {}

    def in_wait() -> bool:
        frame = sys._current_frames().get(main.ident)
        while frame is not None:
            if frame.f_code.co_name == "wait" and frame.f_code.co_filename.endswith(
                "generation.py"
            ):
                return True
            frame = frame.f_back
        return False

    def interrupter() -> None:
        wait_until(lambda: run.metrics["tokens"] >= 3 and in_wait())
        counts["sent"] = run.metrics["tokens"]
        signal.pthread_kill(main.ident, signal.SIGINT)  # what the kernel's interrupt does

    helper = threading.Thread(target=interrupter)
    helper.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run.wait()
    finally:
        helper.join(60)
    assert "sent" in counts
    assert run.done  # wait() re-raised only after the worker acknowledged the stop
    assert run.status == "cancelled"
    assert run.metrics["finish_reason"] == "cancelled"
    assert run.metrics["tokens"] < LONG
    assert run.result is None
    # The run says why, in its message and its record.
    assert run.cancel_reason == "interrupted (Ctrl-C, or the kernel's interrupt button)"
    assert run.record["cancel_reason"] == run.cancel_reason


# -- stop ------------------------------------------------------------------------------------------


def test_stop_halts_within_one_decode_step(tiny_line):
    model, tokenizer = tiny_line
    # When each forward pass (one decode step) starts, to count those begun after Stop.
    starts: list[float] = []
    hook = model.register_forward_pre_hook(lambda _m, _a: starts.append(time.perf_counter()))
    try:
        run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=LONG)
        chunks = []
        for chunk in run:
            chunks.append(chunk)
            if run.metrics["tokens"] >= 10:
                break
        stopped_at = time.perf_counter()
        assert run.stop() is True
        at_stop = run.metrics["tokens"]
        with pytest.raises(nbstream.GenerationCancelled) as info:
            run.wait()
    finally:
        hook.remove()
    final = run.metrics["tokens"]
    # At most one decode step starts after Stop. transformers checks its stopping criteria
    # before it hands the step's token to the streamer, so a token already chosen when Stop
    # came may reach the count just after it: one more token, or two with that one.
    assert len([t for t in starts if t > stopped_at]) <= 1
    assert 0 <= final - at_stop <= 2
    assert run.status == "cancelled"
    assert run.metrics["finish_reason"] == "cancelled"
    assert run.result is None
    assert run.partial_text.startswith("".join(chunks))
    assert info.value.partial_text == run.partial_text
    assert isinstance(info.value, nbstream.GenerationError)
    # iteration replays everything, then raises the run's end
    replay = []
    with pytest.raises(nbstream.GenerationCancelled):
        for chunk in run:
            replay.append(chunk)
    assert "".join(replay) == run.partial_text
    assert run.stop() is False  # already ended
    assert run.join(30)


def test_stop_from_inside_a_decode_step(tiny_line, probe):
    # stop() lands while the model is computing step 5: that step's token may still arrive,
    # no other.
    model, tokenizer = tiny_line
    p = probe(model)
    box: dict = {}
    ready = threading.Event()

    def on_call(n: int) -> None:
        if n == 5:
            ready.wait(30)
            box["stopped"] = box["run"].stop()
            box["at_stop"] = box["run"].metrics["tokens"]

    p.on_call = on_call
    box["run"] = run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=LONG)
    ready.set()
    with pytest.raises(nbstream.GenerationCancelled):
        run.wait()
    assert box["stopped"] is True
    assert box["at_stop"] == 4
    assert run.metrics["tokens"] - box["at_stop"] <= 1
    assert p.calls == 5  # no forward pass after the one stop() landed in


def test_stop_after_the_end_returns_false(tiny_line):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=3)
    run.wait()
    assert run.stop() is False
    assert run.status == "complete"
    assert run.result is not None


def test_stop_twice(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    p.hold()
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=LONG)
    assert run.stop() is True
    assert run.stop() is False
    p.release()
    with pytest.raises(nbstream.GenerationCancelled):
        run.wait()
    assert run.metrics["tokens"] <= 1


def test_stop_reason_is_in_the_exception_the_property_and_the_record(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    p.hold()
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=LONG)
    assert run.stop(reason="the widget was closed") is True
    assert run.stop(reason="another reason") is False  # the first stop's reason stays
    p.release()
    with pytest.raises(nbstream.GenerationCancelled) as info:
        run.wait()
    assert str(info.value) == "the run was cancelled because the widget was closed"
    assert run.cancel_reason == "the widget was closed"
    assert run.record["cancel_reason"] == "the widget was closed"
    assert run.record["status"] == "cancelled" and run.error is None


def test_stop_without_a_reason_keeps_the_plain_message(tiny_line):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=LONG)
    run.stop()
    with pytest.raises(nbstream.GenerationCancelled, match=r"^the run was cancelled$"):
        run.wait()
    assert run.cancel_reason is None and run.record["cancel_reason"] is None
    done = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=3)
    done.wait()
    assert done.stop(reason="too late") is False and done.cancel_reason is None
    assert done.record["cancel_reason"] is None


# -- async -----------------------------------------------------------------------------------------


def test_async_for_and_wait_async(tiny_line):
    model, tokenizer = tiny_line

    async def main():
        run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=30)
        chunks = [chunk async for chunk in run]
        text = await run.wait_async()
        return run, chunks, text

    run, chunks, text = asyncio.run(main())
    assert run.status == "complete"
    assert "".join(chunks) == text == run.result


def test_async_reading_does_not_block_the_loop(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    p.hold()
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=10)

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                if ticks == 5:
                    p.release()  # only reachable if the loop keeps turning while we wait
                await asyncio.sleep(0.01)

        task = asyncio.create_task(ticker())
        chunks = [chunk async for chunk in run]
        text = await run.wait_async()
        task.cancel()
        return chunks, text, ticks

    chunks, text, ticks = asyncio.run(main())
    assert ticks >= 5
    assert "".join(chunks) == text == run.result


def test_wait_async_raises_the_runs_end(tiny_line):
    model, tokenizer = tiny_line

    async def main():
        run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=LONG)
        seen = []
        with pytest.raises(nbstream.GenerationCancelled):
            async for chunk in run:
                seen.append(chunk)
                run.stop()
        with pytest.raises(nbstream.GenerationCancelled):
            await run.wait_async()
        return run, seen

    run, seen = asyncio.run(main())
    assert run.status == "cancelled"
    assert "".join(seen) == run.partial_text


def test_wait_async_timeout_leaves_the_run_going(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    p.hold()  # the run cannot end on its own, however fast the machine
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=LONG)

    async def main():
        with pytest.raises(TimeoutError):
            await run.wait_async(timeout=0.05)

    asyncio.run(main())  # must return although the run goes on
    assert run.status == "running"
    assert run.stop() is True
    p.release()
    with pytest.raises(nbstream.GenerationCancelled):
        run.wait()


def test_cancelled_await_stops_the_run(tiny_line):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=LONG)

    async def main():
        task = asyncio.create_task(run.wait_async())
        # Let the await begin: a task cancelled before its first step never runs its
        # coroutine, so nothing would be awaiting the run to stop it (a fast model can have
        # its two tokens before the loop below first yields).
        await asyncio.sleep(0)
        while run.metrics["tokens"] < 2:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    with pytest.raises(nbstream.GenerationCancelled):
        run.wait()
    assert run.metrics["tokens"] < LONG


# -- budget ----------------------------------------------------------------------------------------


def test_budget_overrun_fails_with_timeout(tiny_line):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=LONG, budget_s=0.3)
    with pytest.raises(nbstream.GenerationFailed) as info:
        run.wait()
    assert run.status == "failed"
    assert run.metrics["finish_reason"] == "timeout"
    assert isinstance(run.error, TimeoutError)
    assert info.value.__cause__ is run.error
    assert run.result is None
    assert run.partial_text  # text was shown (a step always runs before the check)
    assert run.metrics["tokens"] < LONG
    with pytest.raises(nbstream.GenerationFailed):
        list(run)


def test_budget_not_reached_completes(tiny_line):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=5, budget_s=600)
    assert run.wait() == run.result
    assert run.metrics["finish_reason"] == "length"


# -- faults: the worker dies -----------------------------------------------------------------------


class Boom(Exception):
    pass


class HardBoom(BaseException):
    """Not an Exception: the worker must still end failed, keeping it."""


@pytest.mark.parametrize(
    "fail_at, error",
    [
        (1, Boom("in the prompt's forward pass, before any token")),
        (2, Boom("right after the first token")),
        (9, RuntimeError("mid-stream")),
        (6, HardBoom("a BaseException")),
        (4, MemoryError()),
    ],
)
def test_worker_that_dies_ends_failed_with_the_exception(tiny_line, probe, fail_at, error):
    model, tokenizer = tiny_line
    p = probe(model)
    p.fail_at, p.error = fail_at, error
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=40)
    chunks = []
    with pytest.raises(nbstream.GenerationFailed) as info:
        for chunk in run:  # ends, with the failure, instead of waiting forever
            chunks.append(chunk)
    assert info.value.__cause__ is error
    assert run.status == "failed"
    assert run.error is error
    assert run.metrics["finish_reason"] == "error"
    assert run.metrics["tokens"] == fail_at - 1
    assert run.result is None
    assert "".join(chunks) == run.partial_text
    if fail_at > 2:
        assert run.partial_text  # text was shown, and still no result
    with pytest.raises(nbstream.GenerationFailed) as again:
        run.wait(timeout=30)
    assert again.value.__cause__ is error
    assert run.join(30)
    # The model is free again: the next run gets it at once and completes.
    p.fail_at = None
    after = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=3)
    assert after.status != "queued"
    assert after.wait()


def test_failure_of_a_queued_runs_predecessor_lets_it_run(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    p.hold()
    p.fail_at, p.error = 1, Boom("first run dies")
    first = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=5)
    second = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=5)
    assert second.status == "queued"
    p.release()
    with pytest.raises(nbstream.GenerationFailed):
        first.wait(30)
    assert second.wait(30)
    assert second.status == "complete"


class _Wrapped:
    """The real tokenizer, except for the parts a test makes fail."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer

    def __call__(self, *args, **kwargs):
        return self._tokenizer(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


class DecodeFails(_Wrapped):
    def decode(self, *args, **kwargs):
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "injected decode failure")


class StepFails(_Wrapped):
    """Its incremental decoder breaks on the first token."""

    @property
    def backend_tokenizer(self):
        return object()  # not a tokenizers.Tokenizer: DecodeStream.step raises

    def decode(self, *args, **kwargs):
        return self._tokenizer.decode(*args, **kwargs)


@pytest.mark.parametrize("tokenizer_cls", [DecodeFails, StepFails])
def test_decoding_failure_ends_the_run_failed(tiny_line, tokenizer_cls):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer_cls(tokenizer), "Hello", max_new_tokens=20)
    with pytest.raises(nbstream.GenerationFailed) as info:
        list(run)
    assert run.status == "failed"
    assert run.metrics["finish_reason"] == "error"
    assert run.error is not None
    assert info.value.__cause__ is run.error
    assert run.result is None
    with pytest.raises(nbstream.GenerationFailed):
        run.wait(30)
    assert run.join(30)


def test_decoding_failure_mid_stream_stops_the_model(tiny_line):
    # A reader that hits the failure mid-stream ends the run: the model does not go on.
    model, tokenizer = tiny_line
    run = nbstream.stream(model, StepFails(tokenizer), "Hello", max_new_tokens=LONG)
    with pytest.raises(nbstream.GenerationFailed) as info:
        list(run)
    assert isinstance(info.value.__cause__, TypeError)
    assert run.status == "failed"
    assert run.metrics["tokens"] < LONG


# -- bad input -------------------------------------------------------------------------------------

MESSAGES = [{"role": "user", "content": "Hello"}]


@pytest.mark.parametrize(
    "prompt, settings, exc, words",
    [
        ("", {}, ValueError, "empty"),
        ("   \n\t ", {}, ValueError, "empty"),
        (None, {}, TypeError, "prompt"),
        (42, {}, TypeError, "prompt"),
        (b"Hello", {}, TypeError, "prompt"),
        ({"role": "user", "content": "Hello"}, {}, TypeError, "prompt"),
        (["Hello", "World"], {}, ValueError, "batch"),
        ([MESSAGES, MESSAGES], {}, ValueError, "role"),
        ([], {}, ValueError, "empty"),
        ([{"role": "user"}], {}, ValueError, "content"),
        ([{"content": "Hello"}], {}, ValueError, "role"),
        (["Hello", {"role": "user", "content": "x"}], {}, ValueError, "dict"),
        ([{"role": "wizard", "content": "Hello"}], {}, ValueError, "role"),
        ([{"role": "user", "content": 5}], {}, TypeError, "content"),
        ([{"role": "system", "content": "Be brief."}], {}, ValueError, "user"),
        ([{"role": "user", "content": "  "}], {}, ValueError, "user"),
        ("bad \ud800 surrogate", {}, ValueError, "surrogate"),
        ("Hello", {"num_beams": 2}, ValueError, "num_beams"),
        ("Hello", {"num_return_sequences": 3}, ValueError, "num_return_sequences"),
        ("Hello", {"max_new_tokens": 0}, ValueError, "positive"),
        ("Hello", {"max_new_tokens": -5}, ValueError, "positive"),
        ("Hello", {"max_new_tokens": 10**9}, ValueError, "absurd"),
        ("Hello", {"max_new_tokens": 8190}, ValueError, "context"),
        ("Hello " * 9000, {"max_new_tokens": 5}, ValueError, "context"),
        ("Hello", {"max_new_tokens": 2.5}, TypeError, "int"),
        ("Hello", {"temperature": -0.5}, ValueError, "temperature"),
        ("Hello", {"temperature": math.nan}, ValueError, "temperature"),
        ("Hello", {"temperature": math.inf}, ValueError, "temperature"),
        ("Hello", {"temperature": "hot"}, TypeError, "temperature"),
        ("Hello", {"temperature": 0, "do_sample": True}, ValueError, "greedy"),
        ("Hello", {"top_p": 0}, ValueError, "top_p"),
        ("Hello", {"top_k": -1}, ValueError, "top_k"),
        ("Hello", {"repetition_penalty": 0}, ValueError, "repetition_penalty"),
        ("Hello", {"budget_s": 0}, ValueError, "budget_s"),
        ("Hello", {"seed": -1}, ValueError, "seed"),
        ("Hello", {"do_sample": "yes"}, TypeError, "do_sample"),
        ("Hello", {"max_tokens": 5}, TypeError, "max_new_tokens"),
        ("Hello", {"streamer": object()}, TypeError, "streamer"),
    ],
)
def test_bad_input_raises_before_any_thread(tiny_line, prompt, settings, exc, words):
    model, tokenizer = tiny_line
    threads_before = run_threads()
    runs_before = set(active_runs())
    with pytest.raises(exc) as info:
        nbstream.stream(model, tokenizer, prompt, **settings)
    assert words in str(info.value)
    assert run_threads() == threads_before
    assert set(active_runs()) == runs_before
    # Nothing holds the model: the next run gets it at once (running, or already complete
    # on a fast machine; never queued behind a phantom).
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=2)
    assert run.status != "queued"
    run.wait()


@pytest.mark.parametrize(
    "model_arg, tokenizer_arg, words",
    [(None, "tok", "no model"), ("model", None, "tokenizer"), (object(), "tok", "generate")],
)
def test_bad_model_or_tokenizer(tiny_line, model_arg, tokenizer_arg, words):
    model, tokenizer = tiny_line
    m = model if model_arg == "model" else model_arg
    t = tokenizer if tokenizer_arg == "tok" else tokenizer_arg
    before = run_threads()
    with pytest.raises(TypeError, match=words):
        nbstream.stream(m, t, "Hello")
    assert run_threads() == before


# -- prompts ---------------------------------------------------------------------------------------


def test_string_prompt_goes_through_the_chat_template(tiny_line):
    model, tokenizer = tiny_line
    assert tokenizer.chat_template
    run = nbstream.stream(model, tokenizer, "Name two colors.", max_new_tokens=2)
    run.wait()
    expected = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Name two colors."}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert run.prompt_text == expected
    assert run.prompt_text.endswith("<|im_start|>assistant\n")
    assert run.prompt_tokens == len(tokenizer(expected, add_special_tokens=False)["input_ids"])


def test_message_list_prompt(tiny_line, greedy):
    model, tokenizer = tiny_line
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Zebra crossing"},
    ]
    run = nbstream.stream(model, tokenizer, messages, max_new_tokens=10)
    text = run.wait()
    assert run.prompt_text == tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    assert "You are terse." in run.prompt_text
    assert text == greedy(model, tokenizer, messages, 10)[1]


def test_base_model_gets_plain_text(tiny_line, greedy, monkeypatch):
    model, tokenizer = tiny_line
    monkeypatch.setattr(tokenizer, "chat_template", None)
    run = nbstream.stream(model, tokenizer, "Once upon a time", max_new_tokens=10)
    text = run.wait()
    assert run.prompt_text == "Once upon a time"
    assert text == greedy(model, tokenizer, "Once upon a time", 10)[1]
    with pytest.raises(ValueError, match="chat template"):
        nbstream.stream(model, tokenizer, MESSAGES)


def test_special_tokens_are_skipped(tiny, monkeypatch):
    # Force the model to emit a special token, then text: the special token never shows.
    model, tokenizer = tiny
    special = tokenizer.convert_tokens_to_ids("<|im_start|>")
    newline = tokenizer.encode("\n", add_special_tokens=False)[0]
    calls = []

    def bias(module, args, output):
        calls.append(1)
        output.logits[..., special if len(calls) == 1 else newline] += 1000.0
        return output

    handle = model.register_forward_hook(bias)
    try:
        run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=4)
        text = run.wait()
    finally:
        handle.remove()
    assert run.token_ids[0] == special
    assert "<|im_start|>" not in text
    assert text == tokenizer.decode(run.token_ids, skip_special_tokens=True) == "\n\n\n"


# -- the queue -------------------------------------------------------------------------------------

PROMPTS = ["Hello", "你好世界", "Zebra crossing"]


def _blocks(threads: list[int]) -> list[int]:
    """Collapse consecutive repeats: [a, a, b, b, a] -> [a, b, a]."""
    out: list[int] = []
    for t in threads:
        if not out or out[-1] != t:
            out.append(t)
    return out


def test_runs_on_one_model_queue_in_fifo_order_never_interleaved(tiny_line, probe):
    model, tokenizer = tiny_line
    solo = [nbstream.stream(model, tokenizer, p, max_new_tokens=25).wait() for p in PROMPTS]
    assert len(set(solo)) == len(solo)  # distinct outputs, so a mix-up would show
    p = probe(model)
    p.hold()
    ended: list[int] = []
    runs = []
    for i, prompt in enumerate([*PROMPTS, "Hello"]):
        run = nbstream.stream(model, tokenizer, prompt, max_new_tokens=25)
        run.add_done_callback(lambda r, i=i: ended.append(i))
        runs.append(run)
    wait_until(p.held.is_set)
    assert [r.status for r in runs] == ["running", "queued", "queued", "queued"]
    p.release()
    texts = [r.wait(60) for r in runs]
    assert texts == [*solo, solo[0]]
    # A run's done-callbacks run on its worker after its end is set (wait() may return first).
    wait_until(lambda: len(ended) == 4)
    assert sorted(ended) == [0, 1, 2, 3]
    # The model's forward calls came in one unbroken block per run, in the order started.
    assert _blocks(p.threads) == [r._thread.ident for r in runs]
    for r in runs[1:]:
        assert r.metrics["queued_s"] > 0


def test_stop_of_a_queued_run_cancels_it_without_running(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    p.hold()
    first = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=10)
    second = nbstream.stream(model, tokenizer, "你好世界", max_new_tokens=10)
    third = nbstream.stream(model, tokenizer, "Zebra crossing", max_new_tokens=10)
    wait_until(p.held.is_set)
    assert second.status == "queued"
    assert second.stop() is True
    # It ends while the first still holds the model: it never had it.
    with pytest.raises(nbstream.GenerationCancelled):
        second.wait(30)
    assert first.status == "running"
    assert third.status == "queued"
    assert second.status == "cancelled"
    assert second.metrics["finish_reason"] == "cancelled"
    assert second.metrics["tokens"] == 0
    assert second.partial_text == ""
    assert second.result is None
    assert second.stop() is False
    with pytest.raises(nbstream.GenerationCancelled):
        list(second)
    p.release()
    assert first.wait(60)
    assert third.wait(60)
    assert second._thread.ident not in p.threads
    assert _blocks(p.threads) == [first._thread.ident, third._thread.ident]


def test_stop_of_the_running_run_hands_the_model_on(tiny_line, probe):
    model, tokenizer = tiny_line
    first = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=LONG)
    second = nbstream.stream(model, tokenizer, "Zebra crossing", max_new_tokens=10)
    assert second.status == "queued"
    wait_until(lambda: first.metrics["tokens"] >= 2)
    first.stop()
    with pytest.raises(nbstream.GenerationCancelled):
        first.wait(30)
    assert second.wait(60)
    assert second.status == "complete"


def test_runs_on_different_models_do_not_queue(tiny, tiny_line, probe):
    p = probe(tiny_line[0])
    p.hold()
    a = nbstream.stream(*tiny_line, "Hello", max_new_tokens=5)
    b = nbstream.stream(*tiny, "Hello", max_new_tokens=5)
    assert b.wait(60) is not None  # completes while the other model is held
    assert a.status == "running"
    p.release()
    a.wait(60)


def test_wait_done_never_raises(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    p.hold()
    p.fail_at, p.error = 1, Boom("dies")
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=5)
    assert run.wait_done(0.05) is False
    assert not run.done
    p.release()
    assert run.wait_done(30) is True
    assert run.done and run.status == "failed"


# -- a branch's figures -----------------------------------------------------------------------


class StepClock:
    """A clock that moves one second per forward of the model and stands still otherwise:
    rates and times then count model steps, whatever the machine's speed."""

    def __init__(self) -> None:
        self.now = 1000.0

    def tick(self, _calls: int) -> None:
        self.now += 1.0

    def perf_counter(self) -> float:
        return self.now


def test_a_branchs_rate_and_first_token_count_only_what_it_generated(tiny_line, probe, monkeypatch):
    """111 forced tokens and 9 generated: the rate and the time to the first token are the
    generated tokens', as a fresh run's; the metrics say how many were forced."""
    import types

    import nbstream.run_lifecycle as lifecycle
    import nbstream.streaming as streaming

    model, tokenizer = tiny_line
    parent = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=120)
    parent.wait()
    clock = StepClock()
    fake = types.SimpleNamespace(**{**vars(time), "perf_counter": clock.perf_counter})
    monkeypatch.setattr(lifecycle, "time", fake)
    monkeypatch.setattr(streaming, "time", fake)
    probe(model).on_call = clock.tick
    branch = parent.branch(110, parent.token_ids[110] + 1)
    branch.wait()
    fresh = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=9)
    fresh.wait()
    metrics = branch.metrics
    assert metrics["tokens"] == 120 and metrics["forced_tokens"] == 111
    # One step a second: the first generated token after one, then one a second.
    assert metrics["ttft_s"] == fresh.metrics["ttft_s"] == 1.0
    assert metrics["tokens_per_s"] == fresh.metrics["tokens_per_s"] == 1.0
    assert fresh.metrics["forced_tokens"] == 0


@pytest.mark.parametrize(
    ("answer", "settings"),
    [("   \n  ", {}), ("EN", {"stop": ["END"]})],
    ids=["blanks", "held-as-a-stop-strings-start"],
)
def test_an_answer_shown_only_at_its_end_has_a_first_chunk_time(answer, settings):
    # Blanks might yet open a thinking section, "EN" might yet be "END": both are held back
    # until the last token, and shown then.
    from nbstream.testing import forced_model

    model, tokenizer = forced_model(answer)
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=10, **settings)
    assert run.wait() == answer
    m = run.metrics
    assert m["first_chunk_s"] is not None and m["first_answer_s"] == m["first_chunk_s"]
    assert m["ttft_s"] <= m["first_chunk_s"] <= m["elapsed_s"]


def test_a_server_branchs_metrics_say_what_was_forced(loopback):
    """On a server the answer so far is sent as text: counted as forced, and the first token
    is the server's first, which comes after it is shown."""
    endpoint = nbstream.Endpoint(loopback.url("vllm", "branch"), "m")
    run = nbstream.stream(endpoint, None, PROMPT, max_new_tokens=20, alternatives=3)
    run.wait(30)
    branch = run.branch(2, run.trace[2].alternatives[1])
    branch.wait(30)
    metrics = branch.metrics
    assert metrics["forced_tokens"] == 3 and run.metrics["forced_tokens"] == 0
    assert metrics["first_chunk_s"] < metrics["ttft_s"] <= metrics["elapsed_s"]


def test_a_greedy_trace_is_taken_after_each_step_not_by_a_processor(tiny):
    # A greedy run's trace is recorded by the stopping criterion generate() calls anyway,
    # from the token generate() picked: no logits processor (and no second argmax) per step.
    model, tokenizer = tiny
    seen: dict[str, object] = {}
    original = model.generate

    def generate(*args, **kwargs):
        seen.update(kwargs)
        return original(*args, **kwargs)

    model.generate = generate
    try:
        run = nbstream.stream(
            model, tokenizer, "Hi", max_new_tokens=12, do_sample=False, alternatives=3
        )
        run.wait()
    finally:
        del model.generate
    assert "logits_processor" not in seen
    trace = run.trace
    assert [step.id for step in trace] == run.token_ids
    for step in trace:
        # Every alternative but the token taken is cut; its rank counts what was above it.
        assert step.cut == tuple(alt != step.id for alt in step.alternative_ids)
        if step.id in step.alternative_ids:
            assert step.rank == 1 + sum(lp > step.logprob for lp in step.alternative_logprobs)
