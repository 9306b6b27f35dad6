"""Prompt grid benchmark: a 10 x 3 grid against the same 30 runs in a plain loop.

Both run on the tiny model (``nbstream.testing.tiny_model(one_line=True)``: exactly
``--tokens`` tokens per run) with three settings columns on one model, so the grid's cells
wait in one queue, as the loop's runs do one after the other: the ratio is what the grid
costs over the loop (its 30 worker threads, the queue's hand-overs). The two alternate in
each repeat (loop first, then grid first) so that neither always runs warm. The target
is a ratio of at most 1.1; the median is reported with its spread (min and max).

Usage::

    python -m benchmarks.grid                  # 7 repeats of 10 x 3, 32 tokens a cell
    python -m benchmarks.grid --repeats 11 --tokens 64
    python -m benchmarks.grid --quick          # a 3 x 3 grid, 2 repeats: checks the script
    python -m benchmarks.grid --json out.json

The Markdown report goes to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

COLUMNS = ({"temperature": 0}, {"do_sample": True, "seed": 1}, {"do_sample": True, "seed": 2})


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _prompts(rows: int) -> list[str]:
    return [f"Write a line about the number {i}." for i in range(rows)]


def time_loop(model: Any, tokenizer: Any, rows: int, tokens: int) -> float:
    """The 30 runs one after another, each waited for: what a user's loop does."""
    import nbstream

    start = time.perf_counter()
    for prompt in _prompts(rows):
        for settings in COLUMNS:
            nbstream.stream(model, tokenizer, prompt, max_new_tokens=tokens, **settings).wait()
    return time.perf_counter() - start


def time_grid(model: Any, tokenizer: Any, rows: int, tokens: int) -> float:
    """The same runs as a grid: every cell started at once, then waited for."""
    import nbstream

    start = time.perf_counter()
    grid = nbstream.Grid(
        _prompts(rows), model=model, tokenizer=tokenizer, settings=list(COLUMNS),
        max_new_tokens=tokens,
    )  # fmt: skip
    grid.generate()
    grid.wait()
    seconds = time.perf_counter() - start
    assert all(s == "complete" for row in grid.statuses for s in row), grid.statuses
    return seconds


def measure(rows: int, tokens: int, repeats: int) -> dict[str, Any]:
    """Loop and grid times per repeat, alternating which goes first."""
    from nbstream.testing import tiny_model

    model, tokenizer = tiny_model(one_line=True)
    time_loop(model, tokenizer, 1, 4)  # warm-up: first-call costs count for neither
    loops, grids = [], []
    for repeat in range(repeats):
        if repeat % 2 == 0:
            loops.append(time_loop(model, tokenizer, rows, tokens))
            grids.append(time_grid(model, tokenizer, rows, tokens))
        else:
            grids.append(time_grid(model, tokenizer, rows, tokens))
            loops.append(time_loop(model, tokenizer, rows, tokens))
        log(f"repeat {repeat + 1}: loop {loops[-1]:.2f} s, grid {grids[-1]:.2f} s")
    ratios = [g / lo for g, lo in zip(grids, loops, strict=True)]
    return {
        "rows": rows,
        "columns": len(COLUMNS),
        "tokens": tokens,
        "loop_s": loops,
        "grid_s": grids,
        "ratio": {
            "median": statistics.median(ratios),
            "min": min(ratios),
            "max": max(ratios),
            "all": ratios,
        },
    }


def report(result: dict[str, Any]) -> str:
    ratio = result["ratio"]
    lines = [
        f"## Prompt grid: {result['rows']} x {result['columns']}, {result['tokens']} tokens "
        "a cell, tiny model",
        "",
        "| metric | median | min | max |",
        "| --- | --- | --- | --- |",
    ]
    for name, values in (("loop (s)", result["loop_s"]), ("grid (s)", result["grid_s"])):
        lines.append(
            f"| {name} | {statistics.median(values):.3f} | {min(values):.3f} | {max(values):.3f} |"
        )
    lines.append(
        f"| grid / loop | {ratio['median']:.3f} | {ratio['min']:.3f} | {ratio['max']:.3f} |"
    )
    lines.append("")
    lines.append(f"Target: grid / loop <= 1.1 (median {ratio['median']:.3f}).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="3 rows, 2 repeats")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    rows, repeats = (3, 2) if args.quick else (args.rows, args.repeats)
    result = measure(rows, args.tokens, repeats)
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps({"timing": result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
