"""A run's end is published in one order that every reader sees, local and remote.

The invariant: a terminal status means the run is ``done``, and ``result`` and ``record``
are as the status says (complete: both set; failed or cancelled: no result, a record). It
must hold for every reader: ``status``, ``done``, ``result``, ``record``, ``wait()``,
iteration, done callbacks and a chat's ``history``, whatever the thread switches. Many runs,
each ending complete, cancelled or failed, with the interpreter switching threads about
every bytecode (``shaken``) while readers look at them.

``NBSTREAM_END_ORDER_RUNS`` sets how many runs each test makes (default 80).
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
from typing import Any

import pytest

import nbstream
from nbstream.conversation import Conversation

pytestmark = pytest.mark.usefixtures("no_leftover_runs")

RUNS = int(os.environ.get("NBSTREAM_END_ORDER_RUNS", "80"))
TERMINAL = {"complete", "failed", "cancelled"}
HANG_S = 60.0


def as_the_status_says(run: nbstream.Generation, status: str, where: str) -> list[str]:
    """What must hold once a reader has seen ``status``, read after it."""
    if status not in TERMINAL:
        return []
    problems = []
    done, result, record = run.done, run.result, run.record
    if not done:
        problems.append(f"{where}: status {status} but not done")
    if status == "complete" and result is None:
        problems.append(f"{where}: status complete but result is None")
    if status != "complete" and result is not None:
        problems.append(f"{where}: status {status} but a result")
    if record is None:
        problems.append(f"{where}: status {status} but record is None")
    elif record["status"] != status:
        problems.append(f"{where}: status {status} but the record says {record['status']}")
    return problems


def look(
    run: nbstream.Generation, chat: Conversation | None, halt: threading.Event, out: list[str]
) -> None:
    """Read the run as a notebook does, in a loop, until it is done (and once more)."""
    try:
        while True:
            over = halt.is_set()
            status = run.status
            out.extend(as_the_status_says(run, status, "status"))
            if run.done and run.status not in TERMINAL:
                out.append(f"done, but status {run.status}")
            if run.result is not None and run.status != "complete":
                out.append(f"a result, but status {run.status}")
            if run.record is not None and run.status not in TERMINAL:
                out.append(f"a record, but status {run.status}")
            if chat is not None:
                status = run.status
                answered = {"role": "assistant", "content": run.partial_text}
                if status == "complete" and answered not in chat.history:
                    out.append("the turn completed but is not in the chat's history")
            if over:
                return
            if run.done:
                halt.set()  # one more look after the end
    except Exception as exc:  # a reader that raises is a broken promise too
        out.append(f"a reader raised {type(exc).__name__}: {exc}")


def follow(run: nbstream.Generation, out: list[str]) -> None:
    with contextlib.suppress(nbstream.GenerationError):
        for _ in run:
            pass
    out.extend(as_the_status_says(run, run.status, "after iteration"))
    if run.status not in TERMINAL:
        out.append(f"iteration ended with status {run.status}")


def await_end(run: nbstream.Generation, out: list[str]) -> None:
    with contextlib.suppress(nbstream.GenerationError):
        run.wait(HANG_S)
    out.extend(as_the_status_says(run, run.status, "after wait()"))
    if run.status not in TERMINAL:
        out.append(f"wait() returned with status {run.status}")


def shake(start: Any, runs: int, seed: int) -> dict[str, int]:
    """Start ``runs`` runs (``start(i, rng)`` returns the run, its chat or None, and after
    how many tokens to stop it or None), each read by every kind of reader while it ends;
    returns how many ended each way."""
    rng = random.Random(seed)
    problems: list[str] = []
    ends: dict[str, int] = {}
    for i in range(runs):
        run, chat, stop_after = start(i, rng)
        called: list[str] = []
        back = threading.Event()

        def on_done(
            ended: nbstream.Generation, called: list[str] = called, back: Any = back
        ) -> None:
            try:
                called.extend(as_the_status_says(ended, ended.status, "in a done callback"))
                if ended.status not in TERMINAL:
                    called.append(f"done callback with status {ended.status}")
            except Exception as exc:
                called.append(f"a done callback's reads raised {type(exc).__name__}: {exc}")
            finally:
                called.append("called")
                back.set()

        halt = threading.Event()
        out: list[str] = []
        readers = [
            threading.Thread(target=look, args=(run, chat, halt, out)),
            threading.Thread(target=look, args=(run, chat, halt, out)),
            threading.Thread(target=follow, args=(run, out)),
            threading.Thread(target=await_end, args=(run, out)),
        ]
        for reader in readers:
            reader.start()
        run.add_done_callback(on_done)
        if stop_after is not None:
            run.wait_for_progress(stop_after, HANG_S)
            run.stop()
        assert run.wait_done(HANG_S), f"run {i} never ended"
        assert back.wait(HANG_S), f"run {i}: the done callback never ran"
        for reader in readers:
            reader.join(HANG_S)
        halt.set()
        assert not any(reader.is_alive() for reader in readers), f"run {i}: a reader hung"
        if called.count("called") != 1:
            out.append(f"the done callback ran {called.count('called')} times")
        problems += [f"run {i} ({run.status}): {p}" for p in out + called if p != "called"]
        ends[run.status] = ends.get(run.status, 0) + 1
    assert problems == [], problems[:10]
    return ends


def test_every_local_reader_sees_the_end_in_one_order(tiny, tiny_line, shaken):
    """Complete, cancelled, budget-failed runs and chat turns on a local model."""

    def start(i: int, rng: random.Random) -> tuple[Any, Any, int | None]:
        kind = i % 4
        if kind == 0:  # a chat's turn: its history must hold it once it is complete
            conversation = Conversation()
            model, tokenizer = tiny
            run = conversation.start(model, tokenizer, f"Say {i}", {"max_new_tokens": 4})
            return run, conversation, None
        if kind == 1:
            run = nbstream.stream(*tiny, f"Say {i}", max_new_tokens=rng.randint(1, 6))
            return run, None, None
        if kind == 2:  # stopped after a few tokens
            return nbstream.stream(*tiny_line, "Hi", max_new_tokens=400), None, rng.randint(0, 3)
        # failed: its budget runs out (between steps, or in one, by the budget's timer)
        run = nbstream.stream(*tiny_line, "Hi", max_new_tokens=400, budget_s=rng.uniform(0, 0.02))
        return run, None, None

    ends = shake(start, RUNS, seed=26)
    assert ends.get("complete", 0) >= RUNS // 2
    assert ends.get("cancelled", 0) > 0 and ends.get("failed", 0) > 0


def test_every_remote_reader_sees_the_end_in_one_order(fake, shaken):
    """The same on an OpenAI-format server on loopback: complete, cancelled, failed runs
    and chat turns."""
    ok = nbstream.Endpoint(fake.url("ok"), "fake-model")
    broken = nbstream.Endpoint(fake.url("garbage"), "fake-model")
    stalls = nbstream.Endpoint(fake.url("stall"), "fake-model")

    def start(i: int, rng: random.Random) -> tuple[Any, Any, int | None]:
        kind = i % 4
        if kind == 3:  # stopped while the server sends nothing more
            return nbstream.stream(stalls, None, f"Say {i}"), None, rng.randint(0, 2)
        if kind == 0:
            conversation = Conversation()
            run = conversation.start(ok, None, f"Say {i}", {})
            return run, conversation, None
        if kind == 1:
            return nbstream.stream(ok, None, f"Say {i}"), None, None
        return nbstream.stream(broken, None, f"Say {i}"), None, None

    ends = shake(start, RUNS, seed=27)
    assert ends.get("complete", 0) >= RUNS // 2
    assert ends.get("cancelled", 0) > 0 and ends.get("failed", 0) > 0
