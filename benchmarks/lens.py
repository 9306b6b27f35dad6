"""Lens benchmark: a run keeps streaming while ``run.lens`` and ``run.attribution`` are computed.

1. Side by side, interleaved round by round (the order alternating): a 500-token greedy run of
   the default model (``alternatives=5``, as the teaching views ask; a forced length, as in
   :mod:`benchmarks.engine`) left alone, against the same run during which, once it has made
   300 tokens, the calling thread computes ``run.lens(250)`` and ``run.attribution(250)`` (what
   the popover's "Inside the model" asks for a clicked token). Reported: each variant's tokens/s
   over the whole run and their ratio (median of rounds), and the run's rate during the lens's
   own window (tokens made while the lens and attribution were computed, over that time)
   against the undisturbed run's rate: on a CPU both compete for the same cores.
2. The time of one ``run.lens(step)`` and one ``run.attribution(step)`` at a mid step of a
   finished run (the model free), median of 3: wall-clock time and the process's CPU time
   (``time.process_time``, all threads), which a loaded machine inflates less. The lens is what
   the section shows first: it should take under a second on 2 cores.

Usage::

    python -m benchmarks.lens                       # ~4 min on 2 quiet cores
    python -m benchmarks.lens --quick               # ~30 s: checks the script end to end
    python -m benchmarks.lens --tokens 200 --threads 1 --rounds 2 --json lens.json

The Markdown report goes to stdout, progress to stderr; exit status 1 only when a measurement is
invalid (the two variants made different tokens, or the lens disagrees with the run's trace).
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
    forced_length,
    log,
    torch_threads,
)

ALTERNATIVES = 5


def one_run(case: Case, lens_at: tuple[int, int] | None) -> dict[str, Any]:
    """A run of ``case.new_tokens`` tokens; with ``lens_at = (after, step)``, a lens and an
    attribution of ``step`` once the run has made ``after`` tokens, while it streams."""
    import nbstream

    settings = {"max_new_tokens": case.new_tokens, "do_sample": False}
    start = time.perf_counter()
    run = nbstream.stream(case.model, case.tokenizer, PROMPT, alternatives=ALTERNATIVES, **settings)
    window: dict[str, Any] = {}
    if lens_at is not None:
        after, step = lens_at
        while run.progress < after and run.wait_for_progress(run.progress, STREAM_TIMEOUT_S):
            pass
        before, begun = run.progress, time.perf_counter()
        lens = run.lens(step)
        attribution = run.attribution(step)
        seconds = time.perf_counter() - begun
        made = run.progress - before
        window = {
            "seconds": seconds,
            "tokens": made,
            "tok_per_s": made / seconds,
            "still_running": run.status == "running",
            "lens": lens,
            "attribution_tokens": len(attribution.tokens),
        }
    run.wait(STREAM_TIMEOUT_S)
    seconds = time.perf_counter() - start
    ids = run.token_ids
    return {
        "run": run,
        "ids": ids,
        "seconds": seconds,
        "tok_per_s": len(ids) / seconds,
        "window": window,
    }


def side_by_side(case: Case, after: int, step: int) -> dict[str, Any]:
    warm = Case(case.key, case.label, case.model, case.tokenizer, min(case.new_tokens, 20), 1, None)
    one_run(warm, None)
    rounds, problems = [], []
    for index in range(case.rounds):
        order = ("off", "on") if index % 2 == 0 else ("on", "off")
        got = {v: one_run(case, (after, step) if v == "on" else None) for v in order}
        off, on = got["off"], got["on"]
        lens = on["window"]["lens"]
        record = on["run"].trace[step]
        if off["ids"] != on["ids"] or len(off["ids"]) != case.new_tokens:
            problems.append(f"round {index + 1}: the two runs made different tokens")
        if (lens.logprobs[-1], lens.ranks[-1], lens.token_id) != (
            record.logprob,
            record.rank,
            record.id,
        ):
            problems.append(f"round {index + 1}: the lens's last layer is not the run's trace")
        row = {
            "order": list(order),
            "off_tok_per_s": off["tok_per_s"],
            "on_tok_per_s": on["tok_per_s"],
            "ratio": on["tok_per_s"] / off["tok_per_s"],
            "window_s": on["window"]["seconds"],
            "window_tokens": on["window"]["tokens"],
            "window_ratio": on["window"]["tok_per_s"] / off["tok_per_s"],
            "window_while_running": on["window"]["still_running"],
        }
        rounds.append(row)
        log(
            f"round {index + 1}: off {row['off_tok_per_s']:.1f} tok/s, on "
            f"{row['on_tok_per_s']:.1f} tok/s; during the lens ({row['window_s']:.2f} s) "
            f"{row['window_tokens']} tokens"
        )

    def median(key: str) -> float:
        return statistics.median(row[key] for row in rounds)

    return {
        "rounds": rounds,
        "problems": problems,
        **{k: median(k) for k in ("off_tok_per_s", "on_tok_per_s", "ratio", "window_ratio")},
        "window_s": median("window_s"),
    }


def compute_times(case: Case, step: int, tries: int = 3) -> dict[str, float]:
    run = one_run(case, None)["run"]
    timings: dict[str, list[float]] = {"lens": [], "attribution": []}
    cpu: dict[str, list[float]] = {"lens": [], "attribution": []}
    for _ in range(tries):
        for name in timings:
            begun, cpu_begun = time.perf_counter(), time.process_time()
            getattr(run, name)(step)
            timings[name].append(time.perf_counter() - begun)
            cpu[name].append(time.process_time() - cpu_begun)
    out = {f"{name}_ms": statistics.median(t) * 1000 for name, t in timings.items()}
    out |= {f"{name}_cpu_ms": statistics.median(t) * 1000 for name, t in cpu.items()}
    out["both_ms"] = out["lens_ms"] + out["attribution_ms"]
    out["both_cpu_ms"] = out["lens_cpu_ms"] + out["attribution_cpu_ms"]
    out["input_tokens"] = run.prompt_tokens + step
    return out


def render(report: dict[str, Any]) -> str:
    s, t = report["side_by_side"], report["times"]
    tokens, step, after = report["tokens"], report["step"], report["after"]
    lines = [
        f"### Streaming while a lens is computed (default model, {tokens} tokens, greedy, "
        f"alternatives={ALTERNATIVES}; lens + attribution of step {step} once {after} tokens "
        "are out)",
        "",
        "| run | tok/s (median) | ratio to alone |",
        "|---|---|---|",
        f"| alone | {s['off_tok_per_s']:.1f} | 1 |",
        f"| with a lens + attribution | {s['on_tok_per_s']:.1f} | {s['ratio']:.3f} |",
        f"| during the lens's {s['window_s']:.2f} s only | "
        f"{s['window_ratio'] * s['off_tok_per_s']:.1f} | {s['window_ratio']:.3f} |",
        "",
        f"### Time to compute, step {step} of a finished run ({t['input_tokens']} tokens in)",
        "",
        "| what | wall ms (median of 3) | CPU ms, all threads (median of 3) |",
        "|---|---|---|",
        f"| run.lens({step}) | {t['lens_ms']:.0f} | {t['lens_cpu_ms']:.0f} |",
        f"| run.attribution({step}) | {t['attribution_ms']:.0f} | {t['attribution_cpu_ms']:.0f} |",
        f"| both | {t['both_ms']:.0f} | {t['both_cpu_ms']:.0f} |",
    ]
    if report["problems"]:
        lines += ["", "**Invalid measurements:**", *(f"- {p}" for p in report["problems"])]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.lens",
        description="A run's rate while run.lens/run.attribution are computed; their time.",
    )
    parser.add_argument("--rounds", type=int, default=4, help="rounds side by side (default 4)")
    parser.add_argument("--quick", action="store_true", help="40 tokens, 1 round")
    parser.add_argument("--tokens", type=int, default=500, help="tokens per run (default 500)")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: torch's own; 1 is steadier on a busy machine)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.tokens < 20:
        parser.error("--tokens must be at least 20")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    environment = _environment()
    _quiet_transformers()
    import nbstream

    tokens, rounds = (40, 1) if args.quick else (args.tokens, args.rounds)
    # The lens starts once 60% of the answer is out, on the step at half of it.
    after, step = tokens * 3 // 5, tokens // 2
    model, tokenizer = nbstream.load_model()
    case = Case("default", "default (SmolLM2-135M)", model, tokenizer, tokens, rounds, args.threads)
    log(f"{rounds} rounds of {tokens} tokens, alone and with a lens ...")
    with torch_threads(case.threads), forced_length(case):
        measured = side_by_side(case, after, step)
        times = compute_times(case, step)
    report: dict[str, Any] = {
        "environment": environment,
        "tokens": tokens,
        "after": after,
        "step": step,
        "threads": args.threads,
        "side_by_side": measured,
        "times": times,
        "problems": measured["problems"],
    }
    report["markdown"] = render(report)
    print(report["markdown"])
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
