"""The engine's promises under races: hand-offs shaken, windows widened, many runs.

Every test here asserts an outcome that must hold whatever the timing (no test asserts a
moment). The shaker runs many short runs with ``sys.setswitchinterval(1e-6)`` (the
interpreter switches threads about every bytecode) while reader threads hammer every
public property; the other tests widen one window each, as a badly timed thread switch
would, to show that a hand-off is safe by construction rather than by luck.

``NBSTREAM_SHAKE_RUNS`` sets how many runs the shaker makes (default 200).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import random
import threading
import time
from typing import Any

import pytest

import nbstream
from nbstream.generation import RUN_THREAD_PREFIX, active_runs
from nbstream.run_text import RunText
from nbstream.streaming import TokenBuffer

SHAKE_RUNS = int(os.environ.get("NBSTREAM_SHAKE_RUNS", "200"))
LONG = 4000


def wait_until(predicate: Any, timeout: float = 30.0, what: str = "condition") -> None:
    """Poll; the timeout only keeps a broken engine from hanging the suite."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} never became true")
        time.sleep(0.005)


# -- the shaker ---------------------------------------------------------------------------------


def _hammer(run: nbstream.Generation, stop: threading.Event, problems: list[str]) -> None:
    """Read every public property of ``run`` in a loop, as views and notebooks do."""
    seen: list[str] = []
    while not stop.is_set():
        try:
            status = run.status
            if seen and seen[-1] != status:
                order = ["queued", "running", "terminal"]
                rank = {s: order.index(s if s in order else "terminal") for s in (seen[-1], status)}
                if rank[status] < rank[seen[-1]] or seen[-1] in {"complete", "failed", "cancelled"}:
                    problems.append(f"status went from {seen[-1]} to {status}")
            seen.append(status)
            text = run.partial_text
            result = run.result
            if result is not None and not text.startswith(result[: len(text)]):
                problems.append("result disagrees with partial_text")
            run.metrics  # noqa: B018 - reading is the test
            repr(run)
            run.token_ids  # noqa: B018
            run.record  # noqa: B018
            run.value  # noqa: B018
        except Exception as exc:  # any exception in a reader is a broken promise
            problems.append(f"reader raised {type(exc).__name__}: {exc}")
            return
        if run.done:
            return


def _iterate(run: nbstream.Generation, out: dict[str, Any]) -> None:
    chunks: list[str] = []
    try:
        for chunk in run:
            chunks.append(chunk)
        # The promise of the class docstring: once iteration ends, the answer exists.
        out["after"] = (run.done, run.result, run.record is not None, run.status)
    except nbstream.GenerationError:
        out["after"] = (run.done, run.result, run.record is not None, run.status)
    except Exception as exc:
        out["error"] = exc
    out["chunks"] = chunks


def test_shaken_runs_keep_every_promise(tiny, shaken):
    """Hundreds of short runs, thread switches every bytecode, readers on every property."""
    model, tokenizer = tiny
    rng = random.Random(14)
    problems: list[str] = []
    outcomes: dict[str, int] = {}
    for i in range(SHAKE_RUNS):
        stop_it = rng.random() < 0.25
        run = nbstream.stream(model, tokenizer, f"Say {i}", max_new_tokens=rng.randint(1, 12))
        halt = threading.Event()
        out: dict[str, Any] = {}
        readers = [threading.Thread(target=_hammer, args=(run, halt, problems)) for _ in range(2)]
        readers.append(threading.Thread(target=_iterate, args=(run, out)))
        if i % 3 == 0:  # also a reader that only waits on active_runs(), as magics do
            readers.append(threading.Thread(target=lambda: [active_runs() for _ in range(50)]))
        for reader in readers:
            reader.start()
        if stop_it:
            run.stop()
        with contextlib.suppress(nbstream.GenerationError):
            run.wait(60)
        for reader in readers:
            reader.join(60)
        halt.set()
        assert not any(r.is_alive() for r in readers), f"run {i}: a reader hung"
        outcomes[run.status] = outcomes.get(run.status, 0) + 1
        if "error" in out:
            problems.append(f"run {i}: iteration raised {out['error']!r}")
            continue
        done, result, has_record, status = out["after"]
        if not done or not has_record or status not in {"complete", "failed", "cancelled"}:
            problems.append(f"run {i}: iteration ended before the run was done ({status})")
        if status == "complete" and result != "".join(out["chunks"]):
            problems.append(f"run {i}: joined chunks {out['chunks']!r} != result {result!r}")
        if status != "complete" and result is not None:
            problems.append(f"run {i}: a {status} run has a result")
        if status == "failed":
            problems.append(f"run {i}: a healthy run failed: {run.error!r}")
        if not stop_it and status != "complete":
            problems.append(f"run {i}: not stopped, yet {status}")
        if "".join(out["chunks"]) != run.partial_text:
            problems.append(f"run {i}: joined chunks != partial_text")
    assert problems == [], problems[:10]
    assert sum(outcomes.values()) == SHAKE_RUNS
    assert outcomes.get("failed", 0) == 0


# -- case 3: a reader between a token and its timestamp -------------------------------------------


def test_a_token_is_visible_only_with_its_timestamp():
    """Whoever sees item i must find times[i] (the time of the first visible text)."""
    buffer = TokenBuffer(skip_first=False)
    seen_without_time: list[int] = []

    class Watched(list):
        def append(self, item: Any) -> None:
            super().append(item)
            # What a reader running right now would see.
            if len(buffer.times) < len(self):
                seen_without_time.append(len(self) - 1)

    buffer.items = Watched()
    for token in range(50):
        buffer.put(token)
    assert seen_without_time == []
    assert len(buffer.items) == len(buffer.times) == 50


# -- case 4: iteration ends only once the answer exists ------------------------------------------


def test_iteration_ends_only_after_result_and_record_exist(tiny, monkeypatch):
    """Widen the window between the buffer's close and the end's publication."""
    model, tokenizer = tiny
    close = TokenBuffer.close

    def slow_close(self: TokenBuffer) -> None:
        close(self)
        time.sleep(0.2)  # a thread switch here must not let a reader see an unfinished end

    monkeypatch.setattr(TokenBuffer, "close", slow_close)
    for _ in range(3):
        run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=6)
        chunks = list(run)
        assert run.done
        assert run.result == "".join(chunks)
        assert run.record is not None and run.record["status"] == "complete"

    async def follow() -> tuple[list[str], Any]:
        run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=6)
        chunks = [chunk async for chunk in run]
        return chunks, run

    chunks, run = asyncio.run(follow())
    assert run.done and run.result == "".join(chunks) and run.record is not None


def test_done_callbacks_see_the_published_end(tiny):
    model, tokenizer = tiny
    seen: list[Any] = []
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=5)
    run.add_done_callback(lambda r: seen.append((r.done, r.result, r.record is not None)))
    text = run.wait(60)
    run.join(60)
    assert seen == [(True, text, True)]


# -- case 7: the budget fires while the model is stuck inside a step ------------------------------


@pytest.mark.parametrize("where", ["prefill", "decode step"])
def test_budget_ends_the_run_while_a_step_hangs(tiny_line, probe, where):
    model, tokenizer = tiny_line
    p = probe(model)
    if where == "prefill":
        p.hold()
        run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=LONG, budget_s=0.3)
    else:
        # Held at the first decode step. The budget must outlast the prefill, which on a
        # loaded machine can take longer than any fixed figure: a run whose budget ran out
        # before the hold is tried again with a budget twice as long.
        p.on_call = lambda calls: p.hold() if calls == 2 else None
        for budget in (0.3, 0.6, 1.2, 2.4, 4.8, 9.6):
            run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=LONG, budget_s=budget)
            while not (p.held.is_set() or run.done):
                p.held.wait(0.05)
            if p.held.is_set():
                break
            assert run.join(30)  # out of budget before the hold: again, from a clean count
            p.release()
            p.threads.clear()
    assert p.held.wait(30)
    # wait() without a timeout returns at the deadline although the model is still held.
    with pytest.raises(nbstream.GenerationFailed) as info:
        run.wait()
    assert p.held.is_set() and not p.gate.is_set()  # the step has not ended
    assert run.status == "failed" and run.metrics["finish_reason"] == "timeout"
    assert isinstance(info.value.__cause__, TimeoutError)
    assert run.done and run.record["status"] == "failed"
    text = run.partial_text
    # The model is still busy: a next run waits for it rather than interleaving.
    after = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=2)
    p.release()
    assert run.join(30)
    assert after.wait(60) is not None
    # The step that ended after the deadline added nothing to the failed run's text.
    assert run.partial_text == text and run.status == "failed"


def test_a_run_stopped_during_a_hung_step_ends_cancelled_at_its_deadline(tiny_line, probe):
    """Stop cannot halt a step that hangs; the budget still bounds the wait, and the run
    ends as the user asked (cancelled), not timed out."""
    model, tokenizer = tiny_line
    p = probe(model)
    # The first forward pass hangs, well inside the budget: on a loaded machine, with the
    # interpreter switching threads at every bytecode, a budget of a few tenths of a second
    # could run out before a later step was reached, and the run would end failed.
    p.on_call = lambda calls: p.hold() if calls == 1 else None
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=LONG, budget_s=2.0)
    assert p.held.wait(30)
    assert run.stop() is True
    with pytest.raises(nbstream.GenerationCancelled):
        run.wait()  # no timeout: the budget is what bounds it
    assert p.held.is_set() and not p.gate.is_set()  # the step still hangs
    assert run.metrics["finish_reason"] == "cancelled"
    p.release()
    assert run.join(30)


def test_a_stop_string_found_before_a_hung_step_completes_the_run(probe, monkeypatch):
    """A reader found the stop string (one the generating thread's watch missed, as across
    a special token), then the next step hangs past the budget: the answer was over."""
    from nbstream.backends import stopping
    from nbstream.testing import forced_model

    monkeypatch.setattr(stopping.StopStringWatch, "hit", lambda self, input_ids: False)
    answer = "An answer. END"
    model, tokenizer = forced_model(answer + " and then the model goes on and on" * 4)
    p = probe(model)
    # Step n + 1 hangs: the n tokens up to the end of "END" have been handed on.
    n = len(tokenizer.encode(answer, add_special_tokens=False))
    p.on_call = lambda calls: p.hold() if calls == n + 1 else None
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=200, stop=["END"], budget_s=0.5)
    assert p.held.wait(30)
    # A reader sees the stop string in what was generated before the step hung.
    wait_until(lambda: run.partial_text == "An answer. " or run.done, what="the answer read")
    assert run.wait() == "An answer. "
    assert run.metrics["finish_reason"] == "stop"
    p.release()
    assert run.join(30)


def test_a_run_ended_at_its_deadline_keeps_its_figures(tiny_line, probe):
    """Tokens put by the step that ended after the deadline are not the run's."""
    model, tokenizer = tiny_line
    p = probe(model)
    p.on_call = lambda calls: p.hold() if calls == 5 else None
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=LONG, budget_s=0.3)
    with pytest.raises(nbstream.GenerationFailed):
        run.wait()
    before = (run.metrics["tokens"], len(run.token_ids), run.record["metrics"]["tokens"])
    p.release()
    assert run.join(30)
    after = (run.metrics["tokens"], len(run.token_ids), run.record["metrics"]["tokens"])
    assert before == after
    assert before[0] == before[1]


def test_budget_of_a_run_that_ends_in_time_changes_nothing(tiny):
    model, tokenizer = tiny
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=3, budget_s=30)
    assert run.wait(60) is not None
    assert run.join(30)
    timers = [t for t in threading.enumerate() if t.name.startswith(f"{RUN_THREAD_PREFIX}budget")]
    wait_until(lambda: not any(t.is_alive() for t in timers), what="budget timers gone")


# -- case 11: the smaller ones -----------------------------------------------------------------


def test_an_iterator_does_not_sleep_on_chunks_another_reader_decoded(tiny_line, probe):
    """The loop body reads the run too (as a progress print does): nothing is held back."""
    model, tokenizer = tiny_line
    p = probe(model)
    p.on_call = lambda calls: p.hold() if calls == 30 else None
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=LONG)
    got: list[str] = []

    def follow() -> None:
        try:
            for chunk in run:
                got.append(chunk)
                run.partial_text  # noqa: B018 - decodes what has arrived meanwhile
        except nbstream.GenerationError:
            pass

    reader = threading.Thread(target=follow)
    reader.start()
    assert p.held.wait(30)
    # The model is held: every token it made is decodable, and the iterator must yield
    # all of it without waiting for a next token that will not come.
    wait_until(lambda: "".join(got) == run.partial_text and got, what="iterator caught up")
    run.stop()
    p.release()
    reader.join(30)
    assert "".join(got) == run.partial_text


def test_ctrl_c_while_iterating_stops_the_run(tiny_line, probe, monkeypatch):
    model, tokenizer = tiny_line
    p = probe(model)
    p.on_call = lambda calls: p.hold() if calls == 3 else None
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=LONG)
    assert p.held.wait(30)

    def interrupted(seen: int, timeout: float | None = None) -> bool:
        raise KeyboardInterrupt

    monkeypatch.setattr(run._buffer, "wait_for_more", interrupted)
    with pytest.raises(KeyboardInterrupt):
        for _ in run:
            pass
    p.release()
    with pytest.raises(nbstream.GenerationCancelled, match="interrupted \\(Ctrl-C"):
        run.wait(30)


def test_a_cancelled_async_for_stops_the_run(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    p.on_call = lambda calls: p.hold() if calls == 3 else None
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=LONG)

    async def main() -> None:
        async def follow() -> None:
            async for _ in run:
                pass

        task = asyncio.create_task(follow())
        await asyncio.to_thread(p.held.wait, 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    p.release()
    with pytest.raises(nbstream.GenerationCancelled):
        run.wait(30)


def test_many_awaited_runs_hold_no_executor_thread(tiny_line, probe):
    """Eight runs awaited at once; asyncio.to_thread still works (its pool has ~6 threads)."""
    model, tokenizer = tiny_line
    p = probe(model)
    p.hold()
    runs = [nbstream.stream(model, tokenizer, "Hello", max_new_tokens=3) for _ in range(8)]

    async def main() -> int:
        waits = [asyncio.ensure_future(run.wait_async()) for run in runs]
        await asyncio.sleep(0)
        helpers = [t for t in threading.enumerate() if t.name.startswith("asyncio_")]
        assert helpers == []  # nothing waits on a thread of the loop's executor
        value = await asyncio.wait_for(asyncio.to_thread(lambda: 42), 30)
        p.release()
        texts = await asyncio.gather(*waits)
        assert all(isinstance(text, str) for text in texts)
        return value

    assert asyncio.run(main()) == 42


def test_a_failed_thread_start_leaves_no_phantom_run(tiny, monkeypatch):
    model, tokenizer = tiny
    start = threading.Thread.start

    def no_threads(self: threading.Thread) -> None:
        if self.name.startswith(RUN_THREAD_PREFIX):
            raise RuntimeError("can't start new thread")
        start(self)

    monkeypatch.setattr(threading.Thread, "start", no_threads)
    with pytest.raises(RuntimeError, match="new thread"):
        nbstream.stream(model, tokenizer, "Hello", max_new_tokens=3)
    monkeypatch.setattr(threading.Thread, "start", start)
    assert [r for r in active_runs() if r._backend.model is model] == []
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=3)
    assert run.status != "queued"  # the model's queue is free
    assert run.wait(60) is not None


@pytest.mark.parametrize("seed, ok", [(2**64, False), (2**64 - 1, True), (2**63, True)])
def test_seeds_torch_cannot_take_are_refused_before_the_run(tiny, seed, ok):
    model, tokenizer = tiny
    if not ok:
        with pytest.raises(ValueError, match=r"seed must be at most 2\*\*64 - 1"):
            nbstream.stream(model, tokenizer, "Hello", max_new_tokens=3, temperature=0.8, seed=seed)
        return
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=3, temperature=0.8, seed=seed)
    assert run.wait(60) is not None


def test_active_runs_while_other_threads_start_runs(tiny, shaken):
    model, tokenizer = tiny
    errors: list[BaseException] = []
    halt = threading.Event()

    def poll() -> None:
        while not halt.is_set():
            try:
                active_runs()
            except BaseException as exc:
                errors.append(exc)
                return

    pollers = [threading.Thread(target=poll) for _ in range(2)]
    for t in pollers:
        t.start()
    runs = [nbstream.stream(model, tokenizer, "Hi", max_new_tokens=1) for _ in range(40)]
    for run in runs:
        run.wait(60)
    halt.set()
    for t in pollers:
        t.join(30)
    assert errors == []


def test_stop_strings_in_the_models_generation_config(tmp_path):
    """A config carrying stop_strings made every run fail (transformers wants a tokenizer)."""
    from nbstream.testing import forced_model

    model, tokenizer = forced_model("Hello there. END and more words after it")
    model.generation_config = copy.deepcopy(model.generation_config)
    model.generation_config.stop_strings = ["END"]
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=40)
    assert run.wait(60) == "Hello there. "
    assert run.metrics["finish_reason"] == "stop"
    assert run.record["settings"]["stop"] == ["END"]
    # The caller's own stop strings replace the model's, as any setting does.
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=40, stop=["there"])
    assert run.wait(60) == "Hello "


def test_the_stop_watch_and_the_stream_decode_alike():
    """A tokenizer that cleans up spaces by default: the stop string is still seen at once."""
    from nbstream.testing import forced_model

    model, tokenizer = forced_model("Well , here " + "and more " * 60)
    tokenizer = copy.copy(tokenizer)
    tokenizer.clean_up_tokenization_spaces = True
    # transformers 5 ignores the cleanup on BPE tokenizers unless told this as well (WordPiece
    # tokenizers, BERT's, clean up by default).
    tokenizer.clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output = True
    assert tokenizer.decode(tokenizer.encode("Well , x", add_special_tokens=False)) == "Well, x"
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=200, stop=[" ,"])
    run.join(60)  # nobody reads while it runs: only the generating thread's watch can stop it
    assert run.wait(0) == "Well"
    # Halted by the watch within a step of the stop string, not by a reader much later.
    assert run.metrics["tokens"] <= len(tokenizer.encode("Well , here", add_special_tokens=False))


def test_the_whole_text_is_not_rebuilt_per_chunk(monkeypatch, probe):
    """A long answer costs O(n): the joined text is built when read, not once per chunk
    (appending to one growing string copies the whole answer each time)."""
    from nbstream.testing import forced_model

    model, tokenizer = forced_model("word " * 100)
    p = probe(model)
    p.on_call = lambda calls: time.sleep(0.025)  # slower than the iterator's wake interval
    builds = {"n": 0}
    setattr_ = RunText.__setattr__

    def counting(self: Any, name: str, value: Any) -> None:
        if name in ("_text", "_joined"):
            builds["n"] += 1
        setattr_(self, name, value)

    monkeypatch.setattr(RunText, "__setattr__", counting)
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=400)
    chunks = list(run)  # follows the run chunk by chunk, never reading the whole text
    assert len(chunks) > 20  # many chunks (about one per token)
    assert run.wait(0).count("word") == 100
    # Built once per read of the whole text (the final decode, wait()), never per chunk.
    assert builds["n"] <= 5


# -- a reasoning model's thinking and a branch's trace, shaken ----------------------------------

THOUGHT = "Two and two make four; say it plainly."
ANSWER = "Four."


def _read_thinking(run: nbstream.Generation, problems: list[str]) -> None:
    """While it streams: the thinking only grows, the answer never shows a tag."""
    last_thinking = ""
    while True:
        done = run.done
        thinking = run.thinking or ""
        text = run.partial_text
        if not thinking.startswith(last_thinking) or not THOUGHT.startswith(thinking):
            problems.append(f"thinking went from {last_thinking!r} to {thinking!r}")
        if "<" in text or not ANSWER.startswith(text):
            problems.append(f"the answer showed {text!r}")
        last_thinking = thinking
        if done:
            return


def test_shaken_thinking_runs_keep_the_answer_and_the_thinking_apart(shaken):
    from nbstream.testing import forced_model

    model, tokenizer = forced_model(f"<think>{THOUGHT}</think>\n{ANSWER}")
    problems: list[str] = []
    for i in range(max(SHAKE_RUNS // 10, 5)):
        run = nbstream.stream(model, tokenizer, "2+2?", max_new_tokens=60)
        out: dict[str, Any] = {}
        readers = [
            threading.Thread(target=_read_thinking, args=(run, problems)),
            threading.Thread(target=_iterate, args=(run, out)),
        ]
        for reader in readers:
            reader.start()
        run.wait(60)
        for reader in readers:
            reader.join(60)
        if "".join(out.get("chunks", [])) != run.result or run.result != ANSWER:
            problems.append(f"run {i}: chunks {out.get('chunks')!r}, result {run.result!r}")
        if run.thinking != THOUGHT or run.metrics["thinking_tokens"] is None:
            problems.append(f"run {i}: thinking {run.thinking!r}")
    assert problems == [], problems[:10]


def test_shaken_branch_traces_stay_aligned_with_their_tokens(tiny_line, shaken):
    model, tokenizer = tiny_line
    parent = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=12, alternatives=3)
    parent.wait(60)
    problems: list[str] = []
    for i in range(max(SHAKE_RUNS // 20, 5)):
        step = i % 6
        branch = parent.branch(step, parent.trace[step].alternatives[1])
        while True:
            done = branch.done
            trace = branch.trace or []
            ids = branch.token_ids  # read after the trace: it can only be longer
            if [s.id for s in trace] != ids[: len(trace)]:
                problems.append(f"branch {i}: trace {[s.id for s in trace]} vs ids {ids}")
            if done:
                break
        if [s.id for s in branch.trace] != branch.token_ids:
            problems.append(f"branch {i}: the final trace is not aligned")
    assert problems == [], problems[:10]
