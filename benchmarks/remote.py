"""Remote benchmark: how fast a Stop stops a run on a server, on both sides of the wire.

Starts a real ``transformers serve`` of the embedded default model on a loopback port
(through ``nbstream.testing.servers``, whose probe logs, on the server, the moment its generation is
aborted), streams a long answer from it with ``nbstream.stream(nbstream.Endpoint(...))``,
and after a few chunks calls ``run.stop()``. Per trial:

- **Stop → cancelled** (client): ``stop()`` to the run's end state ``cancelled`` (its worker
  closed the connection and the lifecycle ended the run); target ≤ 200 ms;
- **Stop → server stopped**: ``stop()`` to the server's log line saying its ``generate`` was
  aborted (wall clock in both processes, same machine); at most about one decode step, since
  the server notices a closed connection when it sends its next token;
- the server's decode step (median time between chunks) for scale, and how many tokens the
  server generated in all, against the ``max_new_tokens`` asked (it must stop far short).

Also: time to first chunk (``metrics["ttft_s"]``) of a short greedy run, for reference.

Usage::

    python -m benchmarks.remote                 # 9 Stop trials: about 1 minute
    python -m benchmarks.remote --quick         # 2 trials: about 20 s
    python -m benchmarks.remote --trials 20 --json remote.json

The Markdown report goes to stdout, progress to stderr. The exit status is 1 only when the
run is invalid (a stopped run did not end cancelled, or the server did not stop generating),
never because a target was missed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

STOP_TARGET_S = 0.200
PROMPT = "Write a long, detailed story about a lighthouse keeper who finds a message in a bottle."
MAX_NEW_TOKENS = 4000
WARM_CHUNKS = 8  # chunks to receive before each Stop
TIMEOUT_S = 120.0  # only so a broken run fails instead of hanging the benchmark


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def stop_trial(server: Any, index: int) -> dict[str, Any]:
    import nbstream

    seen = len(server.lines)
    run = nbstream.stream(server.endpoint(), None, PROMPT, max_new_tokens=MAX_NEW_TOKENS)
    chunk_times: list[float] = []
    deadline = time.monotonic() + TIMEOUT_S
    for _ in run:  # each chunk as the reader gets it
        chunk_times.append(time.perf_counter())
        if len(chunk_times) >= WARM_CHUNKS or time.monotonic() > deadline:
            break
    wall, start = time.time(), time.perf_counter()
    run.stop()
    run.wait_done(TIMEOUT_S)
    client_s = time.perf_counter() - start
    problems = []
    if run.status != "cancelled":
        problems.append(f"trial {index}: the run ended {run.status}, not cancelled ({run.error})")
    try:
        _, how, tokens, at = server.generation_end(MAX_NEW_TOKENS, after=seen, timeout=TIMEOUT_S)
    except TimeoutError:
        how, tokens, at = "never", None, None
    if how != "cancelled":
        problems.append(f"trial {index}: the server's generation was {how}, not cancelled")
    steps = [b - a for a, b in itertools.pairwise(chunk_times)]
    return {
        "client_s": client_s,
        "server_s": None if at is None else at - wall,
        "server_tokens": tokens,
        "chunks_before_stop": len(chunk_times),
        "step_s": statistics.median(steps) if steps else None,
        "problems": problems,
    }


def summary(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "max": None, "min": None}
    return {"median": statistics.median(values), "max": max(values), "min": min(values)}


def render(report: dict[str, Any]) -> str:
    ms = lambda value: "-" if value is None else f"{value * 1000:.0f} ms"  # noqa: E731
    client, server, step = report["client"], report["server"], report["step"]
    lines = [
        "## Remote: Stop against a real `transformers serve`",
        "",
        f"{report['trials']} trials; the default model on `transformers serve --device cpu`, "
        f"Stop after {WARM_CHUNKS} chunks of a {MAX_NEW_TOKENS}-token request.",
        "",
        "| measure | median | max | target |",
        "|---|---|---|---|",
        f"| Stop → `cancelled` (client; target on every trial) | {ms(client['median'])} | "
        f"{ms(client['max'])} | "
        f"≤ {STOP_TARGET_S * 1000:.0f} ms: {'met' if report['meets_target'] else 'MISSED'} |",
        f"| Stop → the server's generation aborted | {ms(server['median'])} | "
        f"{ms(server['max'])} | about one decode step |",
        f"| the server's decode step (between chunks) | {ms(step['median'])} | "
        f"{ms(step['max'])} | |",
        "",
        f"Tokens the server generated per stopped request: {report['server_tokens']} "
        f"(of {MAX_NEW_TOKENS} asked), against the chunks received before Stop: "
        f"{[r['chunks_before_stop'] for r in report['samples']]}. Time to first chunk of a "
        f"short greedy run: {ms(report['ttft_s'])}. Load average (1, 5, 15 min) at the end: "
        f"{', '.join(f'{x:.2f}' for x in report['loadavg'])} on {report['cpus']} CPUs.",
    ]
    if report["problems"]:
        lines += ["", "**Invalid run:**", *(f"- {p}" for p in report["problems"])]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.remote", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--trials", type=int, default=9, help="Stop trials (default 9)")
    parser.add_argument("--quick", action="store_true", help="2 trials: checks the script")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    trials = 2 if args.quick else args.trials
    import nbstream
    from nbstream.testing.servers import LocalServer

    began = time.perf_counter()
    log("starting transformers serve ...")
    with LocalServer() as server:
        log(f"up on {server.base_url}; warm-up ...")
        warm = nbstream.stream(server.endpoint(), None, "Hi", max_new_tokens=8, temperature=0)
        warm.wait(TIMEOUT_S)
        first = nbstream.stream(
            server.endpoint(), None, "Name two colors.", max_new_tokens=8, temperature=0
        )
        first.wait(TIMEOUT_S)
        results = []
        for index in range(trials):
            log(f"Stop trial {index + 1}/{trials} ...")
            results.append(stop_trial(server, index))
    client = summary([r["client_s"] for r in results])
    report: dict[str, Any] = {
        "trials": trials,
        "client": client,
        "server": summary([r["server_s"] for r in results if r["server_s"] is not None]),
        "step": summary([r["step_s"] for r in results if r["step_s"] is not None]),
        "server_tokens": [r["server_tokens"] for r in results],
        "ttft_s": first.metrics["ttft_s"],
        "meets_target": client["max"] is not None and client["max"] <= STOP_TARGET_S,
        "samples": results,
        "problems": [p for r in results for p in r["problems"]],
    }
    report["elapsed_s"] = time.perf_counter() - began
    report["loadavg"] = list(os.getloadavg())
    report["cpus"] = os.cpu_count()
    text = render(report)
    report["markdown"] = text
    print(text)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        log(f"wrote {args.json}")
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
