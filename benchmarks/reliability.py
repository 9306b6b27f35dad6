"""Reliability figures: the fault, cancel, contention, soak and hostile-input suites, run
once, with what they measured while asserting, as the first rows of the Reliability table
in docs/performance.md, in Markdown.

The figures come from the tests themselves (tests/test_reliability.py records them through
the `figures` fixture of tests/conftest.py), so the table shows exactly what `make test`
checks, on this machine, in this run.

Usage (from the repository root)::

    python -m benchmarks.reliability            # about two minutes; Markdown to stdout
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
SUITES = [
    "tests/test_reliability.py",
    "tests/test_hostile_input.py",
    "tests/browser/test_security_browser.py",
]


def run_suites() -> tuple[int, dict[str, Any], dict[str, str]]:
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
        cases: dict[str, str] = {}
        if junit.exists():
            for case in ET.parse(junit).getroot().iter("testcase"):
                suite = case.get("classname", "").rsplit(".", 1)[-1]
                name = case.get("name", "")
                if suite == "test_hostile_input":
                    name = f"hostile:{name}"
                outcome = "passed"
                for tag in ("failure", "error", "skipped"):
                    if case.find(tag) is not None:
                        outcome = tag
                cases[name] = outcome
    return proc.returncode, figures, cases


def _outcomes(cases: dict[str, str], prefix: str) -> tuple[int, int]:
    """(tried, passed) among the test cases whose name starts with prefix."""
    chosen = [outcome for name, outcome in cases.items() if name.startswith(prefix)]
    return len(chosen), sum(outcome == "passed" for outcome in chosen)


def markdown(figures: dict[str, Any], cases: dict[str, str]) -> str:
    rows = ["| what | tried | outcome |", "|---|---:|---|"]
    tried, ok = _outcomes(cases, "test_fault_matrix")
    cb_tried, cb_ok = _outcomes(cases, "test_a_raising_callback")
    rows.append(
        f"| faults injected (forward at step 0, 1, 50; tokenizer; budget; interrupt in "
        f"`wait()`; raising callbacks; engine and widget) | {tried + cb_tried} | "
        f"{ok + cb_ok} survived: the right end state and error, no thread left, the next "
        "run completes |"
    )
    rc = figures.get("random_cancels")
    if rc:
        by = rc["by_moment"]
        cancelled = sum(v["cancelled"] for v in by.values())
        complete = sum(v["complete"] for v in by.values())
        rows.append(
            f"| cancels at random moments (queued, before the first token, mid-stream, last "
            f"step, from a timer, after the end) | {cancelled + complete} | "
            f"{cancelled + complete} clean: {cancelled} `cancelled`, {complete} `complete` "
            f"(`result` = the full decode); threads left {rc['threads_left']} |"
        )
    ct = figures.get("contention")
    if ct:
        interleavings = ct["forward_blocks"] - ct["widgets"]
        rows.append(
            f"| contention: widgets sharing one model, started together | {ct['widgets']} "
            f"runs | {interleavings} interleavings; {ct['equal_to_solo']} of "
            f"{ct['widgets']} answers equal their solo greedy run |"
        )
    soak = figures.get("soak")
    if soak:
        rows.append(
            f"| soak: widget runs in one process | {soak['runs']} | leaked threads "
            f"{soak['threads_left']}; resident memory {soak['rss_growth_mb']:+.1f} MB after "
            f"a 20-run warm-up (target < 50 MB); largest message without its text "
            f"{soak['message_overhead_first_bytes']} B first, "
            f"{soak['message_overhead_last_bytes']} B last |"
        )
    h_tried, h_ok = _outcomes(
        {n: o for n, o in cases.items() if n.startswith("hostile:")}, "hostile:"
    )
    rows.append(
        f"| hostile inputs (1 MB prompt, control characters, lone surrogates, raising chat "
        f"templates, malformed view messages, wrong setting types, model folders with code) "
        f"| {h_tried} | {h_tried - h_ok} crashes: each a clear error before anything "
        "starts, the widget usable after |"
    )
    xss = figures.get("xss")
    if xss:
        rows.append(
            f"| XSS payloads in model output, rendered in JupyterLab (script, handlers, "
            f"`javascript:`/`data:` links and images, SVG script, style, overlays) | "
            f"{xss['payloads']} | {xss['executed']} executed, nothing outside the output area |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    args = parser.parse_args(argv)
    code, figures, cases = run_suites()
    print("## Reliability\n")
    print(markdown(figures, cases))
    if args.json:
        Path(args.json).write_text(json.dumps({"figures": figures, "cases": cases}, indent=2))
    return code


if __name__ == "__main__":
    sys.exit(main())
