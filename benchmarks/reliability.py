"""Reliability figures: the fault, cancel, contention, soak and hostile-input suites, run
once, with what they measured while asserting, as the README's Markdown table.

The figures come from the tests themselves (tests/test_reliability.py records them through
the `figures` fixture of tests/conftest.py), so the table shows exactly what `make test`
checks, on this machine, in this run.

Usage (from the repository root)::

    python -m benchmarks.reliability            # about a minute; Markdown to stdout
    python -m benchmarks.reliability --json reliability.json

The exit status is pytest's: a failing suite is reported, not hidden.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
SUITES = ["tests/test_reliability.py", "tests/test_hostile_input.py"]


def run_suites() -> tuple[int, dict[str, Any], dict[str, dict[str, int]]]:
    with tempfile.TemporaryDirectory() as tmp:
        figures_path = Path(tmp) / "figures.json"
        junit = Path(tmp) / "junit.xml"
        env = {**os.environ, "NBSTREAM_FIGURES": str(figures_path), "HF_HUB_OFFLINE": "1"}
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                f"--junitxml={junit}",
                *SUITES,
            ],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        sys.stderr.write(proc.stdout[-3000:])
        figures = json.loads(figures_path.read_text()) if figures_path.exists() else {}
        counts: dict[str, dict[str, int]] = {}
        if junit.exists():
            for case in ET.parse(junit).getroot().iter("testcase"):
                suite = case.get("classname", "").rsplit(".", 1)[-1]
                outcome = "passed"
                for tag in ("failure", "error", "skipped"):
                    if case.find(tag) is not None:
                        outcome = tag
                c = counts.setdefault(suite, {})
                c[outcome] = c.get(outcome, 0) + 1
    return proc.returncode, figures, counts


def markdown(figures: dict[str, Any], counts: dict[str, dict[str, int]]) -> str:
    rows = ["| check | what happened | target |", "|---|---|---|"]
    faults = figures.get("faults", {})
    if faults:
        right = sum(f["threads_left"] == 0 and f["next_run"] == "complete" for f in faults.values())
        ends = sorted(
            {f"{f['status']} ({f['error'] or f['finish_reason']})" for f in faults.values()}
        )
        rows.append(
            f"| fault matrix: forward raising at step 0, 1, 50; tokenizer; budget; interrupt in "
            f"`wait()` (engine and widget) | {len(faults)} cases: {', '.join(ends)}; "
            f"{right} of {len(faults)} left no thread and the next run completed | the right "
            "end state and error, no thread left, the model free |"
        )
    rc = figures.get("random_cancels")
    if rc:
        by = rc["by_moment"]
        cancelled = sum(v["cancelled"] for v in by.values())
        complete = sum(v["complete"] for v in by.values())
        rows.append(
            f"| random cancels (tiny model, seeded) | {cancelled + complete} runs stopped at "
            f"random moments (queued, before the first token, mid-stream, at the last step, "
            f"from a timer, after the end): {cancelled} ended `cancelled`, {complete} "
            f"`complete` (the stop came as or after they finished; `result` = the full "
            f"decode); {rc['runs']} runs checked in all; threads left: {rc['threads_left']} "
            "| `cancelled` or `complete`, `result` only for complete, no thread left |"
        )
    ct = figures.get("contention")
    if ct:
        rows.append(
            f"| {ct['widgets']} widgets, one model, started together | forward calls in "
            f"{ct['forward_blocks']} unbroken blocks (never overlapping); "
            f"{ct['equal_to_solo']} of {ct['widgets']} answers equal their solo greedy run | "
            "serialized, each as if alone |"
        )
    soak = figures.get("soak")
    if soak:
        rows.append(
            f"| soak: {soak['runs']} widget runs in one process | resident memory "
            f"{soak['rss_growth_mb']:+.1f} MB after a 20-run warm-up; threads left after "
            f"each run: {soak['threads_left']}; messages per run ≤ "
            f"{soak['max_messages_per_run']}; largest message without its text "
            f"{soak['message_overhead_first_bytes']} B in the first runs, "
            f"{soak['message_overhead_last_bytes']} B in the last | < 50 MB, back to "
            "baseline, no growth per run |"
        )
    for suite, c in sorted(counts.items()):
        summary = ", ".join(f"{n} {k}" for k, n in sorted(c.items()))
        rows.append(f"| `{suite}` | {summary} | all pass, none skipped |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    args = parser.parse_args(argv)
    code, figures, counts = run_suites()
    print("## Reliability\n")
    print(markdown(figures, counts))
    if args.json:
        Path(args.json).write_text(json.dumps({"figures": figures, "counts": counts}, indent=2))
    return code


if __name__ == "__main__":
    sys.exit(main())
