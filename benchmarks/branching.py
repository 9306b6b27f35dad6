"""Branching benchmark: what ``run.distribution`` costs, and how soon a branch streams.

1. ``run.distribution(step)``: the time of one call (a forward pass over the prompt and the
   tokens before the step, then transformers' warpers over the vocabulary) at steps spread
   over a 300-token answer, against the model's median decode step (a call costs about one
   prefill, so it grows with the step).
2. A branch of that answer at a late step (``branch(step, the model's second choice)``): the
   time from the ``branch`` call to its first visible chunk, against the parent's time from
   its ``stream`` call to its first chunk; the branch re-reads the prompt and the kept tokens
   (a longer prefill) but shows those tokens at once. Interleaved round by round with a
   fresh parent run, the ratio (branch / parent) is the median of the rounds; the target is
   ≤ 1 (the branch starts streaming no later than its parent did).
3. The sampling panel's reply (``nbstream/widgets/sampling.py``, what a page waits for after it
   opens the panel on a token or moves a slider): the first request of a step (the forward
   pass) against a slider move (the step's logits are kept: softmax, warpers, top 10), from
   the request to the reply handed to the comm, at the same steps as 1. Printed, never
   asserted.

The default model, greedy, a forced length (end tokens suppressed, as in
:mod:`benchmarks.engine`).

Usage::

    python -m benchmarks.branching            # ~3 min on 2 slow cores
    python -m benchmarks.branching --quick    # ~30 s: checks the script end to end

The Markdown report goes to stdout, progress to stderr; exit status 1 only when the run
itself is invalid (a branch whose tokens do not start with the kept prefix).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.engine import (
    PROMPT,
    STREAM_TIMEOUT_S,
    Case,
    _environment,
    _quiet_transformers,
    decode_step_s,
    forced_length,
    log,
)

TARGET = 1.0  # branch first chunk / parent first chunk, median of rounds


def _first_chunk_s(run: Any, started: float) -> float:
    for _ in run:
        return time.perf_counter() - started
    raise RuntimeError("the run produced no text")


def measure(case: Case, rounds: int, steps: list[int]) -> dict[str, Any]:
    import nbstream

    settings = {"max_new_tokens": case.new_tokens, "do_sample": False, "alternatives": 2}
    step_s = decode_step_s(case, 40)
    parent = nbstream.stream(case.model, case.tokenizer, PROMPT, **settings)
    parent.wait(STREAM_TIMEOUT_S)
    parent.distribution(steps[0])  # warm
    calls: dict[int, float] = {}
    for step in steps:
        times = []
        for _ in range(3):
            start = time.perf_counter()
            parent.distribution(step, temperature=0.7, top_k=50, top_p=0.9)
            times.append(time.perf_counter() - start)
        calls[step] = statistics.median(times)
        log(f"distribution({step}): {calls[step] * 1000:.0f} ms")

    panel = panel_replies(parent, steps)

    at = steps[-1]
    ratios, problems, samples = [], [], []
    for index in range(rounds):
        started = time.perf_counter()
        fresh = nbstream.stream(case.model, case.tokenizer, PROMPT, **settings)
        parent_first = _first_chunk_s(fresh, started)
        fresh.wait(STREAM_TIMEOUT_S)
        token = fresh.trace[at].alternatives[1]
        started = time.perf_counter()
        branch = fresh.branch(at, token, max_new_tokens=case.new_tokens)
        branch_first = _first_chunk_s(branch, started)
        branch.stop()
        branch.join(STREAM_TIMEOUT_S)
        if branch.token_ids[: at + 1] != [*fresh.token_ids[:at], token.id]:
            problems.append(f"round {index + 1}: the branch does not start with its prefix")
        ratios.append(branch_first / parent_first)
        samples.append({"parent_first_s": parent_first, "branch_first_s": branch_first})
        log(
            f"round {index + 1}: parent first chunk {parent_first * 1000:.0f} ms, "
            f"branch at {at}: {branch_first * 1000:.0f} ms"
        )
    return {
        "decode_step_ms": step_s * 1000,
        "distribution_ms": {str(k): v * 1000 for k, v in calls.items()},
        "panel_ms": panel,
        "branch_step": at,
        "ratio": statistics.median(ratios),
        "rounds": samples,
        "problems": problems,
    }


def panel_replies(run: Any, steps: list[int], moves: int = 5) -> dict[str, dict[str, float]]:
    """The sampling panel's reply time at each step: its first request (a forward pass)
    and the median of ``moves`` slider moves after it (cached logits)."""
    import threading

    from nbstream.widgets.sampling import Explainer

    replies: dict[int, threading.Event] = {}

    def send(content: dict[str, Any]) -> None:
        if content.get("error"):
            raise RuntimeError(f"the panel's request failed: {content['error']}")
        replies[content["request"]].set()

    explainer = Explainer(lambda: {1: run}, send, run._backend.tokenizer)
    request = 0

    def ask(step: int, **sliders: Any) -> float:
        nonlocal request
        request += 1
        replies[request] = threading.Event()
        started = time.perf_counter()
        explainer.request(
            {"view": "bench", "request": request, "run_id": 1, "step": step, **sliders}
        )
        if not replies[request].wait(STREAM_TIMEOUT_S):
            raise RuntimeError("the panel's request got no reply")
        return time.perf_counter() - started

    out: dict[str, dict[str, float]] = {}
    try:
        for step in steps:
            first = ask(step)
            moved = [
                ask(step, temperature=0.5 + 0.1 * i, top_p=0.9 - 0.05 * i) for i in range(moves)
            ]
            cached = statistics.median(moved)
            out[str(step)] = {"first_ms": first * 1000, "move_ms": cached * 1000}
            log(f"panel at step {step}: first {first * 1000:.0f} ms, move {cached * 1000:.1f} ms")
    finally:
        explainer.close()
    if explainer.forward_passes != len(steps):
        raise RuntimeError(
            f"the panel ran {explainer.forward_passes} forward passes for {len(steps)} steps"
        )
    return out


def render(report: dict[str, Any]) -> str:
    step = report["decode_step_ms"]
    lines = [
        "## Branching: what `run.distribution` costs, and how soon a branch streams",
        "",
        f"Default model, greedy, {report['new_tokens']} tokens; median decode step {step:.0f} ms.",
        "",
        "| `distribution(step)` at step | time | in decode steps |",
        "|---|---|---|",
    ]
    for at, ms in report["distribution_ms"].items():
        lines.append(f"| {at} | {ms:.0f} ms | {ms / step:.1f} |")
    lines += [
        "",
        "Sampling panel reply (request to reply): a step's first request (forward pass) and a "
        "slider move after it (cached logits)",
        "",
        "| step | first request | slider move | move / first |",
        "|---|---|---|---|",
    ]
    for at, panel in report["panel_ms"].items():
        first, move = panel["first_ms"], panel["move_ms"]
        lines.append(f"| {at} | {first:.0f} ms | {move:.1f} ms | {move / first:.2f} |")
    ratio = report["ratio"]
    verdict = "✓" if ratio <= TARGET else "✗"
    lines += [
        "",
        f"Branch at step {report['branch_step']}: first chunk after the `branch` call / the "
        f"parent's first chunk after its `stream` call, median of {len(report['rounds'])} "
        f"rounds: **{ratio:.2f}** (target ≤ {TARGET:g}) {verdict}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run, to check the script")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    _quiet_transformers()
    import nbstream

    model, tokenizer = nbstream.load_model()
    new_tokens = 40 if args.quick else 300
    rounds = 1 if args.quick else args.rounds
    steps = [5, 20, 35] if args.quick else [10, 100, 200, 290]
    case = Case("default", "SmolLM2-135M-Instruct", model, tokenizer, new_tokens, rounds, None)
    with forced_length(case):
        report = measure(case, rounds, steps)
    report["new_tokens"] = new_tokens
    report["environment"] = _environment()
    print(render(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    for problem in report["problems"]:
        log(f"INVALID: {problem}")
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
