"""Attention benchmark: what one step's ``attention_at`` costs (the issue's target: ≤500 ms).

A greedy run of the default model, forced to ``--tokens`` new tokens (200 by default), then
:func:`nbstream.attention.attention_at` of its last step (the longest input: the prompt and
every answer token before it) and of its middle step, ``--tries`` times each, the model free.
Beside them, on the same input, the two parts it is made of, so a reader sees where the time
goes: the eager twin's copy (module objects and config, no weight) and a plain forward pass of
the model as loaded (SDPA): the floor no exact method without the run's cache can go under.
Reported: median, min and max of wall-clock milliseconds, and the median of the process's CPU
time (all threads), which a loaded machine inflates less.

Usage::

    python -m benchmarks.attention                  # ~1 min on 2 quiet cores
    python -m benchmarks.attention --quick          # 40 tokens, 2 tries: the script end to end
    python -m benchmarks.attention --tiny --quick   # the tiny random model: seconds
    python -m benchmarks.attention --threads 1 --json attention.json

The Markdown report goes to stdout, progress to stderr; exit status 1 only when a measurement is
invalid (a row of weights that does not sum to 1, or a shape that is not the input's).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.engine import PROMPT, _environment, _quiet_transformers, log, torch_threads

TARGET_MS = 500.0


def answer_ids(model: Any, tokenizer: Any, tokens: int) -> tuple[list[int], int]:
    """The prompt as templated, then a greedy answer of exactly ``tokens`` tokens."""
    import torch

    messages = [{"role": "user", "content": PROMPT}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        ids = model.generate(prompt, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)[
            0
        ].tolist()
    return ids, int(prompt.shape[-1])


def timed(call: Any, tries: int) -> dict[str, Any]:
    walls, cpus, result = [], [], None
    for _ in range(tries):
        begun, cpu_begun = time.perf_counter(), time.process_time()
        result = call()
        walls.append((time.perf_counter() - begun) * 1000)
        cpus.append((time.process_time() - cpu_begun) * 1000)
    return {
        "median_ms": statistics.median(walls),
        "min_ms": min(walls),
        "max_ms": max(walls),
        "cpu_ms": statistics.median(cpus),
        "result": result,
    }


def measure(model: Any, tokenizer: Any, tokens: int, tries: int) -> dict[str, Any]:
    import torch

    from nbstream.attention import _eager_twin, attention_at

    ids, prompt_len = answer_ids(model, tokenizer, tokens)
    attention_at(model, tokenizer, ids, prompt_len, 0)  # warm: first-call allocations
    rows: dict[str, Any] = {}
    for name, step in (("last", tokens - 1), ("middle", tokens // 2)):
        rows[name] = timed(lambda s=step: attention_at(model, tokenizer, ids, prompt_len, s), tries)
        rows[name]["step"], rows[name]["positions"] = step, prompt_len + step
    last = torch.tensor([ids[: prompt_len + tokens - 1]])

    def forward() -> None:
        with torch.no_grad():
            model.base_model(input_ids=last, use_cache=False)

    rows["twin"] = timed(lambda: _eager_twin(model), tries)
    rows["forward"] = timed(forward, tries)
    problems = []
    for name in ("last", "middle"):
        seen = rows[name].pop("result")
        shape = (model.config.num_hidden_layers, seen.heads, rows[name]["positions"])
        if tuple(seen.weights.shape) != shape:
            problems.append(f"{name}: weights of shape {tuple(seen.weights.shape)}, not {shape}")
        if not torch.allclose(seen.weights.sum(-1), torch.ones(()), atol=1e-4):
            problems.append(f"{name}: a row of weights does not sum to 1")
    rows["twin"].pop("result")
    rows["forward"].pop("result")
    return {"rows": rows, "prompt_tokens": prompt_len, "problems": problems}


def render(report: dict[str, Any]) -> str:
    rows, tokens = report["rows"], report["tokens"]
    last = rows["last"]
    verdict = "met" if last["median_ms"] <= TARGET_MS else "missed"
    label = {
        "last": f"attention_at, last step ({last['positions']} positions)",
        "middle": f"attention_at, middle step ({rows['middle']['positions']} positions)",
        "twin": "of which: the eager twin's copy",
        "forward": f"for scale: one SDPA forward pass, {last['positions']} positions",
    }
    lines = [
        f"### One step's attention ({report['model']}, a {tokens}-token greedy run, "
        f"{report['tries']} tries, torch threads: {report['threads'] or 'default'})",
        "",
        "| what | wall ms, median | min–max | CPU ms, median |",
        "|---|---|---|---|",
        *(
            f"| {label[name]} | {row['median_ms']:.0f} | {row['min_ms']:.0f}–{row['max_ms']:.0f}"
            f" | {row['cpu_ms']:.0f} |"
            for name, row in rows.items()
        ),
        "",
        f"Target ≤{TARGET_MS:.0f} ms for the last step: {verdict} on this machine "
        f"(load average before: {report['environment']['loadavg_before']}).",
    ]
    if report["problems"]:
        lines += ["", "**Invalid measurements:**", *(f"- {p}" for p in report["problems"])]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.attention",
        description="What one step's attention_at costs, against a plain forward pass.",
    )
    parser.add_argument("--tokens", type=int, default=200, help="answer tokens (default 200)")
    parser.add_argument("--tries", type=int, default=5, help="timings per row (default 5)")
    parser.add_argument("--quick", action="store_true", help="40 tokens, 2 tries")
    parser.add_argument("--tiny", action="store_true", help="the tiny random model")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if args.tokens < 2 or args.tries < 1:
        parser.error("--tokens must be at least 2 and --tries at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    environment = _environment()
    _quiet_transformers()
    import nbstream
    from nbstream.testing import tiny_model

    tokens, tries = (40, 2) if args.quick else (args.tokens, args.tries)
    model, tokenizer = tiny_model() if args.tiny else nbstream.load_model()
    name = "tiny random Llama" if args.tiny else "default model (SmolLM2-135M)"
    log(f"{name}: a {tokens}-token run, then {tries} tries of each row ...")
    with torch_threads(args.threads):
        measured = measure(model, tokenizer, tokens, tries)
    report: dict[str, Any] = {
        "environment": environment,
        "model": name,
        "tokens": tokens,
        "tries": tries,
        "threads": args.threads,
        "target_ms": TARGET_MS,
        **measured,
    }
    report["markdown"] = render(report)
    print(report["markdown"])
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
