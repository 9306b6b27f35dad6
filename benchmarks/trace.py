"""Trace benchmark: what capturing ``run.trace`` (``alternatives=5``) costs the stream.

Compares, in one run with the two variants interleaved round by round (the order alternating),
``nbstream.stream`` with ``alternatives=5`` against the same call without it: same prompt,
greedy decoding, a forced length (end tokens suppressed on a copy of the generation config,
as in :mod:`benchmarks.engine`), each round checking both produced the same tokens and the
trace one record per token. Throughput is new tokens / wall time from the call to the last
chunk consumed, the trace read once at the end (as a view would after the run). The table
reports the median of the per-round ratios (capture on / off), and the cost per token
(1/on − 1/off, median of the rounds).

Then the same through a ``StreamWidget`` (not displayed; what it sends to its views is
serialized to JSON and counted instead): the teaching views all on (``show_tokens``,
``show_probabilities``, ``show_alternatives``, so the run captures ``alternatives=5`` and
every token goes to the views with its probability and five candidates) against all off,
interleaved the same way; and the payload each view costs on the wire, in bytes per token
(JSON of the ``tokens`` messages; Jupyter's envelope per message is extra and shared with the
text deltas of the same frame).

Models: the embedded default model (300 new tokens, torch's default threads; the target is a
median ratio ≥ 0.9) and, unless ``--models default``, the tiny model (1,500 tokens, one
thread: a fast model, where a per-step cost shows most).

Usage::

    python -m benchmarks.trace                  # full run: a few minutes on 2 slow cores
    python -m benchmarks.trace --quick          # ~20 s: checks the script end to end
    python -m benchmarks.trace --rounds 9 --models default --json trace.json

The Markdown report goes to stdout, progress to stderr. The exit status is 1 when the
benchmark itself is invalid (different tokens, or a trace not aligned with them), not when a
target is missed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
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
    cpu_pressure,
    forced_length,
    log,
    torch_threads,
)

TARGET = 0.9  # capture on / off, median of per-round ratios (default model)
ALTERNATIVES = 5
OFF, ON = "off", "on"


def run_stream(case: Case, alternatives: int) -> dict[str, Any]:
    import nbstream

    settings: dict[str, Any] = {"max_new_tokens": case.new_tokens, "do_sample": False}
    if alternatives:
        settings["alternatives"] = alternatives
    start = time.perf_counter()
    run = nbstream.stream(case.model, case.tokenizer, PROMPT, **settings)
    chunks = sum(1 for _ in run)
    trace = run.trace  # read once, as a view would after the run
    seconds = time.perf_counter() - start
    run.join(STREAM_TIMEOUT_S)
    ids = run.token_ids
    return {
        "ids": ids,
        "tokens": len(ids),
        "seconds": seconds,
        "tok_per_s": len(ids) / seconds,
        "chunks": chunks,
        "trace_ok": trace is None if not alternatives else [s.id for s in trace] == ids,
    }


def measure(case: Case, warmup_tokens: int) -> dict[str, Any]:
    warm = Case(case.key, case.label, case.model, case.tokenizer, warmup_tokens, 1, case.threads)
    run_stream(warm, 0)
    run_stream(warm, ALTERNATIVES)
    rounds: list[dict[str, Any]] = []
    problems: list[str] = []
    for index in range(case.rounds):
        order = (OFF, ON) if index % 2 == 0 else (ON, OFF)
        pressure = cpu_pressure()
        samples: dict[str, dict[str, Any]] = {}
        for variant in order:
            gc.collect()
            samples[variant] = run_stream(case, ALTERNATIVES if variant == ON else 0)
        off, on = samples[OFF], samples[ON]
        valid = (
            off["ids"] == on["ids"]
            and off["tokens"] == case.new_tokens
            and off["trace_ok"]
            and on["trace_ok"]
        )
        if not valid:
            problems.append(f"{case.key} round {index + 1}: tokens differ or trace misaligned")
        ratio = on["tok_per_s"] / off["tok_per_s"]
        cost_ms = 1000 * (on["seconds"] - off["seconds"]) / max(off["tokens"], 1)
        rounds.append(
            {
                "order": list(order),
                "cpu_psi_some_avg10": pressure,
                "valid": valid,
                "ratio": ratio,
                "cost_ms_per_token": cost_ms,
                "samples": {
                    v: {k: s[k] for k in ("tokens", "seconds", "tok_per_s", "chunks")}
                    for v, s in samples.items()
                },
            }
        )
        log(
            f"  {case.key} round {index + 1}/{case.rounds}: off {off['tok_per_s']:.1f} tok/s, "
            f"on {on['tok_per_s']:.1f} tok/s ({ratio:.3f}x)" + ("" if valid else "  INVALID")
        )
    ratios = [r["ratio"] for r in rounds]
    return {
        "rounds": rounds,
        "median_ratio": statistics.median(ratios),
        "min_ratio": min(ratios),
        "max_ratio": max(ratios),
        "median_off_tok_per_s": statistics.median(r["samples"][OFF]["tok_per_s"] for r in rounds),
        "median_on_tok_per_s": statistics.median(r["samples"][ON]["tok_per_s"] for r in rounds),
        "median_cost_ms_per_token": statistics.median(r["cost_ms_per_token"] for r in rounds),
        "problems": problems,
    }


VIEWS = ("show_tokens", "show_probabilities", "show_alternatives")


def run_widget(case: Case, views: tuple[str, ...]) -> dict[str, Any]:
    """One widget run with ``views`` on; what it sends is JSON-encoded and counted."""
    import nbstream

    w = nbstream.StreamWidget(
        case.model,
        case.tokenizer,
        max_new_tokens=case.new_tokens,
        do_sample=False,
        **dict.fromkeys(views, True),
    )
    payload = {"delta": 0, "tokens": 0}
    messages = {"delta": 0, "tokens": 0}

    def send(content: dict[str, Any], buffers: Any = None) -> None:
        kind = content.get("type", "")
        if kind in payload:
            payload[kind] += len(json.dumps(content, separators=(",", ":")).encode())
            messages[kind] += 1

    w.send = send  # type: ignore[method-assign]
    try:
        start = time.perf_counter()
        run = w.generate(PROMPT)
        w.wait(STREAM_TIMEOUT_S)
        seconds = time.perf_counter() - start
        ids = run.token_ids
    finally:
        w.close()
    return {
        "ids": ids,
        "tokens": len(ids),
        "seconds": seconds,
        "tok_per_s": len(ids) / seconds,
        "payload": payload,
        "messages": messages,
    }


def measure_views(case: Case) -> dict[str, Any]:
    """Widget throughput with every view on against none, and each view's bytes per token."""
    rounds: list[dict[str, Any]] = []
    problems: list[str] = []
    for index in range(case.rounds):
        order = (OFF, ON) if index % 2 == 0 else (ON, OFF)
        samples: dict[str, dict[str, Any]] = {}
        for variant in order:
            gc.collect()
            samples[variant] = run_widget(case, VIEWS if variant == ON else ())
        off, on = samples[OFF], samples[ON]
        if off["ids"] != on["ids"] or off["tokens"] != case.new_tokens:
            problems.append(f"{case.key} widget round {index + 1}: tokens differ")
        rounds.append({"ratio": on["tok_per_s"] / off["tok_per_s"], "off": off, "on": on})
        log(
            f"  {case.key} widget round {index + 1}/{case.rounds}: views off "
            f"{off['tok_per_s']:.1f} tok/s, on {on['tok_per_s']:.1f} tok/s "
            f"({rounds[-1]['ratio']:.3f}x)"
        )
    # Bytes per token of each view alone (one run each; the payload does not depend on load).
    per_view: dict[str, float] = {}
    for views in (("show_tokens",), ("show_probabilities",), VIEWS):
        sample = run_widget(case, views)
        per_view["+".join(v.removeprefix("show_") for v in views)] = sample["payload"][
            "tokens"
        ] / max(sample["tokens"], 1)
    ratios = [r["ratio"] for r in rounds]
    return {
        "median_ratio": statistics.median(ratios),
        "min_ratio": min(ratios),
        "max_ratio": max(ratios),
        "median_off_tok_per_s": statistics.median(r["off"]["tok_per_s"] for r in rounds),
        "median_on_tok_per_s": statistics.median(r["on"]["tok_per_s"] for r in rounds),
        "text_bytes_per_token": statistics.median(
            r["off"]["payload"]["delta"] / max(r["off"]["tokens"], 1) for r in rounds
        ),
        "token_messages": statistics.median(r["on"]["messages"]["tokens"] for r in rounds),
        "bytes_per_token": per_view,
        "rounds": [
            {"ratio": r["ratio"], **{v: r[v]["tok_per_s"] for v in (OFF, ON)}} for r in rounds
        ],
        "problems": problems,
    }


def render(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        f"Trace capture (alternatives={ALTERNATIVES}) vs none, greedy, interleaved rounds "
        f"(torch {env['torch']}, transformers {env['transformers']}, {env['cpus']} CPUs, "
        f"load average {env['loadavg_before']} before, {report['loadavg_after']} after)",
        "",
        "| model | off tok/s | on tok/s | median ratio on/off | min–max | cost per token "
        "| rounds | target |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case in report["cases"]:
        r = case["result"]
        target = f"≥ {TARGET}: {'met' if r['median_ratio'] >= TARGET else 'missed'}"
        lines.append(
            f"| {case['label']} | {r['median_off_tok_per_s']:.1f} | {r['median_on_tok_per_s']:.1f} "
            f"| {r['median_ratio']:.3f} | {r['min_ratio']:.3f}–{r['max_ratio']:.3f} "
            f"| {r['median_cost_ms_per_token']:+.3f} ms | {len(r['rounds'])} "
            f"| {target if case['key'] == 'default' else 'info'} |"
        )
    lines += [
        "",
        "StreamWidget, every teaching view on (tokens, probabilities, alternatives: k = "
        f"{ALTERNATIVES} captured and sent) vs every view off; payload of the views' "
        "messages in bytes per token (JSON; the text deltas alone shown for scale)",
        "",
        "| model | views off tok/s | views on tok/s | median ratio on/off | min–max "
        "| tokens msgs | text B/token | tokens B/token | + probabilities | + alternatives "
        "| target |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case in report["cases"]:
        v = case.get("views")
        if v is None:
            continue
        b = v["bytes_per_token"]
        target = f"≥ {TARGET}: {'met' if v['median_ratio'] >= TARGET else 'missed'}"
        lines.append(
            f"| {case['label']} | {v['median_off_tok_per_s']:.1f} "
            f"| {v['median_on_tok_per_s']:.1f} | {v['median_ratio']:.3f} "
            f"| {v['min_ratio']:.3f}–{v['max_ratio']:.3f} | {v['token_messages']:.0f} "
            f"| {v['text_bytes_per_token']:.1f} | {b['tokens']:.1f} | {b['probabilities']:.1f} "
            f"| {b['tokens+probabilities+alternatives']:.1f} "
            f"| {target if case['key'] == 'default' else 'info'} |"
        )
    if report["problems"]:
        lines += ["", "**Invalid measurements:**", *(f"- {p}" for p in report["problems"])]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.trace",
        description="Throughput with run.trace captured (alternatives=5) against without.",
    )
    parser.add_argument("--rounds", type=int, default=None, help="rounds per model (default 6)")
    parser.add_argument("--quick", action="store_true", help="few tokens, 2 rounds")
    parser.add_argument("--models", default="default,tiny", help="default and/or tiny")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads for the default model (default: torch's own; 1 is steadier on a "
        "busy machine, where OpenMP teams spin against other processes)",
    )
    args = parser.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    if set(args.models) - {"default", "tiny"} or not args.models:
        parser.error(f"--models takes default and/or tiny, got {args.models}")
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    environment = _environment()
    _quiet_transformers()
    import nbstream
    from nbstream.testing import tiny_model

    plan = {"default": (300, 6), "tiny": (1500, 6)}
    warmup = 16
    if args.quick:
        plan, warmup = {"default": (8, 2), "tiny": (32, 2)}, 2
    if args.rounds is not None:
        plan = {k: (tokens, args.rounds) for k, (tokens, _) in plan.items()}

    cases: list[Case] = []
    if "default" in args.models:
        model, tokenizer = nbstream.load_model()
        tokens, rounds = plan["default"]
        label = f"default (SmolLM2-135M, {tokens} tokens)"
        threads = args.threads
        if threads is not None:
            label += f", {threads} thread{'s' if threads > 1 else ''}"
        cases.append(Case("default", label, model, tokenizer, tokens, rounds, threads=threads))
    if "tiny" in args.models:
        tiny, tiny_tokenizer = tiny_model(one_line=True)
        tokens, rounds = plan["tiny"]
        label = f"tiny (2-layer, {tokens} tokens, 1 thread)"
        cases.append(Case("tiny", label, tiny, tiny_tokenizer, tokens, rounds, threads=1))

    report: dict[str, Any] = {"environment": environment, "cases": [], "problems": []}
    for case in cases:
        log(f"{case.key}: {case.rounds} rounds of {case.new_tokens} tokens ...")
        with torch_threads(case.threads), forced_length(case):
            result = measure(case, warmup)
            views = measure_views(case)
        report["cases"].append(
            {"key": case.key, "label": case.label, "result": result, "views": views}
        )
        report["problems"].extend(result["problems"] + views["problems"])
    report["loadavg_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    text = render(report)
    report["markdown"] = text
    print(text)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
