"""Prompt grid benchmark: a 10 x 3 grid against the same 30 runs in a plain loop.

Both run on the tiny model (``nbstream.testing.tiny_model(one_line=True)``: exactly
``--tokens`` tokens per run) with three settings columns on one model, so the grid's cells
wait in one queue, as the loop's runs do one after the other: the ratio is what the grid
costs over the loop (its 30 worker threads, the queue's hand-overs). The two alternate in
each repeat (loop first, then grid first) so that neither always runs warm. The target
is a ratio of at most 1.1; the median is reported with its spread (min and max), in
wall time and in this process's CPU time (on a machine other work loads, the wall time
measures that load as much as the grid; the CPU time does not).

``--size`` also measures the saved folder of a 10 x 3 grid of 200-token answers with
``alternatives=5`` (``Grid.save``), against its 3 MB target.

``--widget`` also times the grid with its table widget made (``g.widget``: its feed thread
reads every cell each frame, as when the grid is shown), against the same loop.

``--page`` also measures the page's responsiveness with 30 cells streaming: a click on Stop
to ``cancelled`` shown, against a single widget's, as a ratio (benchmarks/grid_page.py, in
headless Chromium; its options there).

Usage::

    python -m benchmarks.grid                  # 7 repeats of 10 x 3, 32 tokens a cell
    python -m benchmarks.grid --repeats 11 --tokens 64
    python -m benchmarks.grid --size           # also the saved folder's size
    python -m benchmarks.grid --only-size      # the saved folder alone
    python -m benchmarks.grid --widget         # also the grid with its table widget
    python -m benchmarks.grid --page           # also Stop's latency in the page
    python -m benchmarks.grid --quick          # a 3 x 3 grid, 2 repeats: checks the script
    python -m benchmarks.grid --json out.json

The Markdown report goes to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

COLUMNS = ({"temperature": 0}, {"do_sample": True, "seed": 1}, {"do_sample": True, "seed": 2})


def cpu_s() -> float:
    """This process's CPU time: unlike the wall time, other processes' load does not move it."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _prompts(rows: int) -> list[str]:
    return [f"Write a line about the number {i}." for i in range(rows)]


def time_loop(model: Any, tokenizer: Any, rows: int, tokens: int) -> tuple[float, float]:
    """The 30 runs one after another, each waited for: what a user's loop does.

    Returns the wall time and the process's CPU time, in seconds.
    """
    import nbstream

    start, cpu = time.perf_counter(), cpu_s()
    for prompt in _prompts(rows):
        for settings in COLUMNS:
            nbstream.stream(model, tokenizer, prompt, max_new_tokens=tokens, **settings).wait()
    return time.perf_counter() - start, cpu_s() - cpu


def time_grid(
    model: Any, tokenizer: Any, rows: int, tokens: int, widget: bool = False
) -> tuple[float, float]:
    """The same runs as a grid: every cell started at once, then waited for (wall, CPU).

    ``widget``: with its table widget made first (its feed follows every cell).
    """
    import nbstream

    start, cpu = time.perf_counter(), cpu_s()
    grid = nbstream.Grid(
        _prompts(rows), model=model, tokenizer=tokenizer, settings=list(COLUMNS),
        max_new_tokens=tokens,
    )  # fmt: skip
    shown = grid.widget if widget else None
    grid.generate()
    grid.wait()
    seconds = time.perf_counter() - start, cpu_s() - cpu
    if shown is not None:
        shown.close()
    assert all(s == "complete" for row in grid.statuses for s in row), grid.statuses
    return seconds


def measure(rows: int, tokens: int, repeats: int, widget: bool = False) -> dict[str, Any]:
    """Loop and grid times per repeat, alternating which goes first.

    ``widget``: the grid with its table widget too, after the plain grid in each repeat.
    """
    from nbstream.testing import tiny_model

    model, tokenizer = tiny_model(one_line=True)
    time_loop(model, tokenizer, 1, 4)  # warm-up: first-call costs count for neither
    loops, grids, shown = [], [], []
    for repeat in range(repeats):
        if repeat % 2 == 0:
            loops.append(time_loop(model, tokenizer, rows, tokens))
            grids.append(time_grid(model, tokenizer, rows, tokens))
        else:
            grids.append(time_grid(model, tokenizer, rows, tokens))
            loops.append(time_loop(model, tokenizer, rows, tokens))
        if widget:
            shown.append(time_grid(model, tokenizer, rows, tokens, widget=True))
        log(f"repeat {repeat + 1}: loop {loops[-1]} s, grid {grids[-1]} s (wall, CPU)")
    result: dict[str, Any] = {"rows": rows, "columns": len(COLUMNS), "tokens": tokens}
    for at, kind in ((0, "wall"), (1, "cpu")):
        result[kind] = {"loop_s": [lo[at] for lo in loops], "grid_s": [g[at] for g in grids]}
        result[kind]["ratio"] = _ratios([g[at] for g in grids], result[kind]["loop_s"])
        if widget:
            result[kind]["widget_s"] = [w[at] for w in shown]
            result[kind]["widget_ratio"] = _ratios(result[kind]["widget_s"], result[kind]["loop_s"])
    return result


def _ratios(values: list[float], loops: list[float]) -> dict[str, Any]:
    ratios = [v / lo for v, lo in zip(values, loops, strict=True)]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
            "all": ratios}  # fmt: skip


def saved_size(rows: int, tokens: int) -> dict[str, Any]:
    """The bytes of a saved grid of ``tokens``-token answers with ``alternatives=5``."""
    import nbstream
    from nbstream.testing import tiny_model

    model, tokenizer = tiny_model(one_line=True)
    grid = nbstream.Grid(
        _prompts(rows), model=model, tokenizer=tokenizer, settings=list(COLUMNS),
        max_new_tokens=tokens, alternatives=5,
    )  # fmt: skip
    grid.generate()
    grid.wait()
    with tempfile.TemporaryDirectory() as folder:
        grid.save(folder)
        sizes = [f.stat().st_size for f in Path(folder).rglob("*") if f.is_file()]
        start = time.perf_counter()
        loaded = nbstream.load(folder)
        load_s = time.perf_counter() - start
        same = loaded.results == grid.results
    return {
        "rows": rows,
        "columns": len(COLUMNS),
        "tokens": tokens,
        "files": len(sizes),
        "bytes": sum(sizes),
        "load_s": load_s,
        "same_results": same,
    }


def report(result: dict[str, Any], size: dict[str, Any] | None) -> str:
    lines = [
        f"## Prompt grid: {result['rows']} x {result['columns']}, {result['tokens']} tokens "
        "a cell, tiny model",
        "",
        "| metric | median | min | max |",
        "| --- | --- | --- | --- |",
    ]
    for kind in ("wall", "cpu"):
        part = result[kind]
        series = [("loop", part["loop_s"]), ("grid", part["grid_s"])]
        if "widget_s" in part:
            series.append(("grid + widget", part["widget_s"]))
        for name, values in series:
            lines.append(
                f"| {name} {kind} (s) | {statistics.median(values):.3f} | "
                f"{min(values):.3f} | {max(values):.3f} |"
            )
        ratios = [("grid / loop", part["ratio"])]
        if "widget_ratio" in part:
            ratios.append(("grid + widget / loop", part["widget_ratio"]))
        for name, ratio in ratios:
            lines.append(
                f"| {name}, {kind} | {ratio['median']:.3f} | {ratio['min']:.3f} | "
                f"{ratio['max']:.3f} |"
            )
    lines += ["", "Target: grid / loop <= 1.1."]
    if size is not None:
        lines += [
            "",
            f"Saved folder of {size['rows']} x {size['columns']} cells of {size['tokens']} "
            f"tokens with alternatives=5: {size['bytes'] / 1e6:.2f} MB in {size['files']} "
            f"files (target <= 3 MB); loaded in {size['load_s']:.2f} s, same results: "
            f"{size['same_results']}.",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--size", action="store_true", help="also the saved folder's size")
    parser.add_argument("--only-size", action="store_true", help="only the saved folder")
    parser.add_argument("--quick", action="store_true", help="3 rows, 2 repeats")
    parser.add_argument("--widget", action="store_true", help="also the grid with its widget")
    parser.add_argument("--page", action="store_true", help="also Stop's latency in the page")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    rows, repeats = (3, 2) if args.quick else (args.rows, args.repeats)
    size = saved_size(rows, 20 if args.quick else 200) if args.size or args.only_size else None
    if args.only_size:
        assert size is not None
        print(f"{size['bytes'] / 1e6:.3f} MB in {size['files']} files: {size}")
        return 0
    result = measure(rows, args.tokens, repeats, widget=args.widget)
    print(report(result, size))
    page = None
    if args.page:
        from . import grid_page

        page_args = grid_page.parser().parse_args(["--trials", "3"] if args.quick else [])
        page = grid_page.measure(page_args.trials, grid_page.options(page_args))
        print()
        print(grid_page.report(page))
    if args.json:
        args.json.write_text(json.dumps({"timing": result, "size": size, "page": page}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
