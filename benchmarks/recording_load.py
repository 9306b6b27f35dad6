"""Recording load benchmark: the time and peak memory of ``nbstream.load`` on a large file.

Writes a recording of the usual shape (a run with ``alternatives=5``: each token with its
log-probability, rank, five candidates and their cut flags) of about the given size, then
loads it in a fresh interpreter and reports the wall time of ``nbstream.load`` and the
process's resident memory before it and its peak during it (``VmRSS`` and ``VmHWM`` of
``/proc/self/status``, the peak reset after the imports), and the peak of what
Python allocated during the load (``tracemalloc``, which slows the load: its time is taken
in a run of its own). A second shape, ``--shape small``, is the costliest per byte: each
candidate one character, so a file holds as many Python objects as its bytes allow.

Usage::

    python -m benchmarks.recording_load                     # the file at nbstream's limit
    python -m benchmarks.recording_load --mib 30 --mib 16   # files of 30 and 16 MiB
    python -m benchmarks.recording_load --shape small
    python -m benchmarks.recording_load --quick             # a 1 MiB file: checks the script

To measure another checkout, put its package first on the path:
``PYTHONPATH=/path/to/checkout python -m benchmarks.recording_load --mib 30``. A file over
that nbstream's limit is reported as refused, with the time the refusal took.

The Markdown report goes to stdout, progress to stderr. The exit status is 1 only when the
benchmark itself is invalid (a file that loads with the wrong number of tokens).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ALTERNATIVES = 5
_WORDS = (" the", " best", " thing", " about", " autumn", " is", " colour", ",", " and", ".")

# Run in the child: the load alone, measured from inside.
_CHILD = r"""
import json, sys, time, tracemalloc
import nbstream

def status(name):
    for line in open("/proc/self/status"):
        if line.startswith(name + ":"):
            return int(line.split()[1]) / 1024

path, traced = sys.argv[1], sys.argv[2] == "1"
# Peak RSS from here on: the imports' own peak is not the load's.
with open("/proc/self/clear_refs", "w") as refs:
    refs.write("5")
before = status("VmRSS")
if traced:
    tracemalloc.start()
start = time.perf_counter()
try:
    loaded = nbstream.load(path)
    tokens, refused = len(loaded.tokens), None
except ValueError as exc:
    tokens, refused = None, str(exc)
seconds = time.perf_counter() - start
peak_traced = tracemalloc.get_traced_memory()[1] / 2**20 if traced else None
after = status("VmHWM")
print(json.dumps({
    "seconds": seconds, "rss_before_mib": before, "rss_peak_mib": after,
    "traced_peak_mib": peak_traced, "tokens": tokens, "refused": refused,
    "limit": getattr(nbstream.recording, "MAX_BYTES", None),
}))
"""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _row(index: int, shape: str) -> list[Any]:
    word = _WORDS[index % len(_WORDS)]
    if shape == "small":
        alts = [[i, chr(97 + i), -1.0 - i] for i in range(ALTERNATIVES)]
        return [index % 50_000, "a", index, -1.0, 1, alts, [0] * ALTERNATIVES, None]
    alts = [
        [(index * 7 + i) % 49_152, _WORDS[(index + i) % len(_WORDS)], round(-0.5 - 1.37 * i, 4)]
        for i in range(ALTERNATIVES)
    ]
    return [(index * 7) % 49_152, word, 20 * index, -0.5817, 1, alts, [0] * ALTERNATIVES, None]


def write_recording(path: Path, mib: float, shape: str, max_tokens: int) -> int:
    """A valid recording of about ``mib`` MiB; returns its token count."""
    target = int(mib * 2**20)
    row_bytes = len(json.dumps(_row(10**5, shape), ensure_ascii=False, separators=(",", ":")))
    count = min(max_tokens, max(1, target // (row_bytes + 1)))
    rows = [_row(i, shape) for i in range(count)]
    text = "".join(row[1] for row in rows)
    # What the tokens cannot fill (the token limit) goes into the prompt: one long string.
    filler = max(0, target - count * (row_bytes + 1) - len(text.encode()) - 2048)
    document = {
        "format": "nbstream.recording/1",
        "minor": 0,
        "nbstream": "bench",
        "prompt": "Describe autumn." + " autumn" * (filler // 7),
        "prompt_text": None,
        "thinking_tags": None,
        "settings": {"max_new_tokens": count, "alternatives": ALTERNATIVES},
        "alternatives": ALTERNATIVES,
        "text": text,
        "tokens": rows,
        "record": {
            "status": "complete",
            "metrics": {"finish_reason": "length", "tokens": count},
            "error": None,
            "cancel_reason": None,
            "thinking": None,
        },
    }
    path.write_text(json.dumps(document, ensure_ascii=False, separators=(",", ":")), "utf-8")
    return count


def measure(path: Path, traced: bool) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), "1" if traced else "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=float, action="append", help="file size (repeatable)")
    parser.add_argument("--shape", choices=("run", "small"), default="run")
    parser.add_argument("--max-tokens", type=int, default=200_000)
    parser.add_argument("--quick", action="store_true", help="a 1 MiB file, no tracemalloc")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        sizes = [1.0]
    elif args.mib:
        sizes = args.mib
    else:
        from nbstream.recording import MAX_BYTES

        sizes = [MAX_BYTES / 2**20 - 0.01]
    results = []
    invalid = []
    with tempfile.TemporaryDirectory() as folder:
        for mib in sizes:
            path = Path(folder) / f"recording-{mib:g}.json"
            count = write_recording(path, mib, args.shape, args.max_tokens)
            size = path.stat().st_size / 2**20
            log(f"{size:.2f} MiB, {count} tokens: loading")
            plain = measure(path, traced=False)
            traced = None if args.quick else measure(path, traced=True)
            if plain["refused"] is None and plain["tokens"] != count:
                invalid.append(f"{size:.2f} MiB: loaded {plain['tokens']} of {count} tokens")
            results.append({"mib": size, "tokens": count, "plain": plain, "traced": traced})
    print("| file | tokens | load s | peak RSS MiB (RSS before) | tracemalloc peak MiB |")
    print("|---:|---:|---:|---:|---:|")
    for r in results:
        plain, traced = r["plain"], r["traced"]
        peak = "" if traced is None else f"{traced['traced_peak_mib']:.0f}"
        outcome = "refused" if plain["refused"] else f"{plain['seconds']:.2f}"
        print(
            f"| {r['mib']:.1f} MiB ({args.shape}) | {r['tokens']:,} | {outcome} | "
            f"{plain['rss_peak_mib']:.0f} ({plain['rss_before_mib']:.0f}) | {peak} |"
        )
    for r in results:
        if r["plain"]["refused"]:
            print(f"\n{r['mib']:.1f} MiB refused: {r['plain']['refused']}")
    if args.json:
        args.json.write_text(json.dumps({"results": results, "invalid": invalid}, indent=1))
    for problem in invalid:
        log(f"INVALID: {problem}")
    return 1 if invalid else 0


if __name__ == "__main__":
    sys.exit(main())
