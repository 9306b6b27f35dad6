"""Steering benchmark: building a direction, and what steering costs a run's throughput.

1. ``Direction.from_examples`` from 8 ``toward`` and 8 ``away`` short prompts at the middle
   decoder layer of the default model, ``--tries`` times: median, min and max of wall-clock
   seconds (the issue's target: ≤10 s). Each prompt is one forward pass that stops at the
   layer read.
2. Side by side, interleaved round by round (the order alternating): a greedy run of
   ``nbstream.stream`` forced to ``--tokens`` new tokens (200 by default; the model's
   ``generation_config.min_new_tokens`` holds its end off), plain, against the same run with
   ``steer=(direction, 4.0)``: the path a user's run takes (the setting checked, the direction
   found, the hook entered on the run's thread). Reported: the per-round ratio steered /
   plain of tokens per CPU second of the process (all threads), median with min and max (the
   target: ≥0.95), and the same in wall-clock tokens/s. Before the rounds, a strength-0
   steered run is checked to make exactly the plain run's tokens.

Usage::

    python -m benchmarks.steering                  # ~3 min on 2 quiet cores
    python -m benchmarks.steering --quick          # 40 tokens, 2 rounds, 1 try
    python -m benchmarks.steering --tiny --quick   # the tiny random model: seconds
    python -m benchmarks.steering --threads 1 --rounds 6 --json steering.json

The Markdown report goes to stdout, progress to stderr; exit status 1 only when a measurement is
invalid (a strength-0 run that differs from the plain one, or a run of the wrong length).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.engine import PROMPT, _environment, _quiet_transformers, log, torch_threads

BUILD_TARGET_S = 10.0
RATIO_TARGET = 0.95
STRENGTH = 4.0
TOWARD = [
    "Tell me about the sea.",
    "Describe the ocean at dawn.",
    "What lives in deep water?",
    "Write about sailing ships.",
    "The waves crash on the shore.",
    "Explain how tides work.",
    "A whale swims past the boat.",
    "Salt spray and sea breeze.",
]
AWAY = [
    "Tell me about the desert.",
    "Describe a city at dawn.",
    "What lives in dry sand?",
    "Write about mountain trains.",
    "The wind blows over the dunes.",
    "Explain how rain forms.",
    "A camel walks past the tent.",
    "Dust and a hot breeze.",
]


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def build_times(model: Any, tokenizer: Any, layer: int, tries: int) -> tuple[Any, dict]:
    from nbstream.steering import Direction

    seconds, cpu, direction = [], [], None
    for _ in range(tries):
        begun, cpu_begun = time.perf_counter(), time.process_time()
        direction = Direction.from_examples(model, tokenizer, TOWARD, AWAY, layer=layer)
        seconds.append(time.perf_counter() - begun)
        cpu.append(time.process_time() - cpu_begun)
    return direction, {**spread(seconds), "cpu": statistics.median(cpu)}


def one_run(model: Any, tokenizer: Any, tokens: int, steer: tuple[Any, float] | None) -> dict:
    import nbstream

    settings: dict[str, Any] = {"max_new_tokens": tokens, "temperature": 0}
    if steer is not None:
        settings["steer"] = steer
    begun, cpu_begun = time.perf_counter(), time.process_time()
    run = nbstream.stream(model, tokenizer, PROMPT, **settings)
    run.wait()
    seconds, cpu = time.perf_counter() - begun, time.process_time() - cpu_begun
    ids = run.token_ids
    return {"ids": ids, "tok_per_s": len(ids) / seconds, "tok_per_cpu_s": len(ids) / cpu}


@contextlib.contextmanager
def forced_length(model: Any, tokens: int) -> Iterator[None]:
    """Every run makes exactly ``tokens`` tokens: the model's end token is held off."""
    config = model.generation_config
    before = config.min_new_tokens
    config.min_new_tokens = tokens
    try:
        yield
    finally:
        config.min_new_tokens = before


def side_by_side(model: Any, tokenizer: Any, direction: Any, tokens: int, rounds: int) -> dict:
    problems = []
    with forced_length(model, min(tokens, 20)):
        one_run(model, tokenizer, min(tokens, 20), None)  # warm
    with forced_length(model, tokens):
        plain = one_run(model, tokenizer, tokens, None)
        if one_run(model, tokenizer, tokens, (direction, 0.0))["ids"] != plain["ids"]:
            problems.append("a strength-0 steered run made other tokens than the plain run")
        rows = []
        for index in range(rounds):
            order = ("plain", "steered") if index % 2 == 0 else ("steered", "plain")
            got = {
                v: one_run(
                    model, tokenizer, tokens, (direction, STRENGTH) if v == "steered" else None
                )
                for v in order
            }
            if any(len(run["ids"]) != tokens for run in got.values()):
                problems.append(f"round {index + 1}: a run of the wrong length")
            rows.append(
                {
                    "plain": got["plain"]["tok_per_s"],
                    "steered": got["steered"]["tok_per_s"],
                    "ratio": got["steered"]["tok_per_s"] / got["plain"]["tok_per_s"],
                    "cpu_ratio": got["steered"]["tok_per_cpu_s"] / got["plain"]["tok_per_cpu_s"],
                }
            )
            last = rows[-1]
            log(
                f"round {index + 1}: plain {last['plain']:.1f}, steered {last['steered']:.1f} "
                f"tok/s; CPU ratio {last['cpu_ratio']:.3f}"
            )
    return {
        "rounds": rows,
        "plain_tok_per_s": statistics.median(r["plain"] for r in rows),
        "steered_tok_per_s": statistics.median(r["steered"] for r in rows),
        "ratio": spread([r["ratio"] for r in rows]),
        "cpu_ratio": spread([r["cpu_ratio"] for r in rows]),
        "problems": problems,
    }


def render(report: dict[str, Any]) -> str:
    build, runs, tokens = report["build"], report["runs"], report["tokens"]
    ratio, cpu, count = runs["ratio"], runs["cpu_ratio"], len(runs["rounds"])
    return "\n".join(
        [
            f"### Steering ({report['model']}, layer {report['layer']}, strength {STRENGTH}, "
            f"torch threads: {report['threads'] or 'default'})",
            "",
            "| what | median | min–max | target |",
            "|---|---|---|---|",
            f"| Direction.from_examples, 8 + 8 prompts ({report['tries']} tries) | "
            f"{build['median']:.2f} s | {build['min']:.2f}–{build['max']:.2f} s | "
            f"≤{BUILD_TARGET_S:.0f} s |",
            f"| the same in CPU seconds (all threads) | {build['cpu']:.2f} s | | |",
            f"| plain run (nbstream.stream), {tokens} tokens | "
            f"{runs['plain_tok_per_s']:.1f} tok/s | | |",
            f"| steered run (steer=(d, {STRENGTH})), {tokens} tokens | "
            f"{runs['steered_tok_per_s']:.1f} tok/s | | |",
            f"| steered / plain, per round, tokens per CPU second ({count} rounds) | "
            f"{cpu['median']:.3f} | {cpu['min']:.3f}–{cpu['max']:.3f} | ≥{RATIO_TARGET} |",
            f"| the same in wall-clock tokens/s | {ratio['median']:.3f} | "
            f"{ratio['min']:.3f}–{ratio['max']:.3f} | |",
            "",
            f"Load average before: {report['environment']['loadavg_before']}.",
            *(["", "**Invalid measurements:**"] if report["problems"] else []),
            *(f"- {p}" for p in report["problems"]),
        ]
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.steering",
        description="Building a direction; a steered run's throughput against a plain one.",
    )
    parser.add_argument("--tokens", type=int, default=200, help="tokens per run (default 200)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds side by side (default 4)")
    parser.add_argument("--tries", type=int, default=3, help="direction builds (default 3)")
    parser.add_argument("--quick", action="store_true", help="40 tokens, 2 rounds, 1 try")
    parser.add_argument("--tiny", action="store_true", help="the tiny random model")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if args.tokens < 2 or args.rounds < 1 or args.tries < 1:
        parser.error("--tokens must be at least 2, --rounds and --tries at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    environment = _environment()
    _quiet_transformers()
    import nbstream
    from nbstream.steering import decoder_layers
    from nbstream.testing import tiny_model

    tokens, rounds, tries = (40, 2, 1) if args.quick else (args.tokens, args.rounds, args.tries)
    model, tokenizer = tiny_model() if args.tiny else nbstream.load_model()
    name = "tiny random Llama" if args.tiny else "default model (SmolLM2-135M)"
    layer = len(decoder_layers(model)) // 2
    log(f"{name}: {tries} direction builds, then {rounds} rounds of {tokens} tokens ...")
    with torch_threads(args.threads):
        direction, build = build_times(model, tokenizer, layer, tries)
        runs = side_by_side(model, tokenizer, direction, tokens, rounds)
    report: dict[str, Any] = {
        "environment": environment,
        "model": name,
        "layer": layer,
        "tokens": tokens,
        "tries": tries,
        "threads": args.threads,
        "build": build,
        "runs": runs,
        "problems": runs["problems"],
    }
    report["markdown"] = render(report)
    print(report["markdown"])
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
