"""Cold start: a fresh process to the first token, nbstream against the bare recipe.

What a classroom's "Restart & Run All" pays before the first word appears. Each sample is a
new interpreter, started by this script, running one of two programs on the default model's
converted folder:

- nbstream: ``import nbstream; m, t = nbstream.load_model();
  nbstream.stream(m, t, "Hi", max_new_tokens=1).wait()``;
- bare: ``import torch; from transformers import LlamaForCausalLM, PreTrainedTokenizerFast``,
  ``from_pretrained`` of the same folder, the same chat prompt encoded, and
  ``model.generate(max_new_tokens=1)``.

The two run as interleaved pairs (the order alternating), and each pair gives a ratio,
nbstream / bare, of the wall time from starting the process to the first token (the process's
exit is not counted). The table reports the median of those ratios: the target is ≤ 1.0.

Then one more process of each, under ``python -X importtime``, splits that time into phases
(interpreter start, then each program's import, load and first-token lines) and says how much
of each phase was spent importing modules (the sum of the top-level imports' cumulative
times; importtime itself slows imports a little, so these runs are not the timed ones). What
is left of the load phase is reading the files and building the model; what is left of the
first-token phase is the prompt and one forward pass. It also lists the modules nbstream's
process imports that the bare one does not, by cost.

Usage::

    python -m benchmarks.coldstart                   # 7 pairs and the breakdown: ~2 min
    python -m benchmarks.coldstart --pairs 11 --json coldstart.json
    python -m benchmarks.coldstart --quick           # 1 pair: checks the script end to end
    python -m benchmarks.coldstart --device cuda --dtype bfloat16   # on a GPU

With ``--device cuda`` both programs pass ``device_map="cuda"`` (and ``--dtype`` its
``dtype``) to their loads. The Markdown report goes to stdout, progress to stderr. The exit
status is 1 when a process failed, never because the target was missed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TARGET = 1.0  # nbstream / bare, median of the pairs' ratios
PROCESS_TIMEOUT_S = 600.0
MARK = "COLDSTART-MARK "
NBSTREAM, BARE = "nbstream", "bare"
LABELS = {NBSTREAM: "nbstream", BARE: "bare recipe (concrete Llama classes, generate)"}

# Each program prints, on stderr, a mark line after each phase (its time since the epoch,
# so that the parent can subtract the moment it started the process) and, on stdout, the
# marks as JSON. Under -X importtime the marks split the import lines into phases.
_PRELUDE = """
import json, sys, time
_marks = {"start": time.time()}
def mark(name):
    _marks[name] = time.time()
    _marks["cpu_" + name] = time.process_time()
    print(MARK + name, file=sys.stderr, flush=True)
MARK = {mark!r}
options = json.loads(sys.argv[1])
""".replace("{mark!r}", repr(MARK))

_NBSTREAM_PROGRAM = (
    _PRELUDE
    + """
import nbstream
mark("import")
model, tokenizer = nbstream.load_model(**options["load"])
mark("load")
nbstream.stream(model, tokenizer, "Hi", max_new_tokens=1).wait()
mark("first_token")
print(json.dumps(_marks))
"""
)

_BARE_PROGRAM = (
    _PRELUDE
    + """
import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast
mark("import")
folder = options["folder"]
tokenizer = PreTrainedTokenizerFast.from_pretrained(folder)
model = LlamaForCausalLM.from_pretrained(folder, **options["load"])
mark("load")
text = tokenizer.apply_chat_template(
    [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
)
inputs = tokenizer(text, add_special_tokens=False, return_tensors="pt").to(model.device)
model.generate(**inputs, max_new_tokens=1)
mark("first_token")
print(json.dumps(_marks))
"""
)

PROGRAMS = {NBSTREAM: _NBSTREAM_PROGRAM, BARE: _BARE_PROGRAM}
PHASES = ("startup", "import", "load", "first_token")
PHASE_LABELS = {
    "startup": "interpreter start",
    "import": "the import line(s)",
    "load": "load (tokenizer and model)",
    "first_token": "first token (prompt, one step)",
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_program(variant: str, options: dict[str, Any], *, importtime: bool) -> dict[str, Any]:
    """One fresh process of ``variant``: its marks, relative to the moment it was started."""
    env = dict(os.environ, TRANSFORMERS_VERBOSITY="error", HF_HUB_DISABLE_PROGRESS_BARS="1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    flags = ["-X", "importtime"] if importtime else []
    command = [sys.executable, *flags, "-c", PROGRAMS[variant], json.dumps(options)]
    spawned = time.time()
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=env,
        timeout=PROCESS_TIMEOUT_S,
        check=False,
    )
    exited = time.time()
    if done.returncode != 0:
        raise RuntimeError(f"the {variant} process failed:\n{done.stderr[-3000:]}")
    marks = json.loads(done.stdout.strip().splitlines()[-1])
    result = {
        "first_token_s": marks["first_token"] - spawned,
        # CPU time of all the process's threads to the first token: what other processes
        # on a busy machine change far less than the wall time.
        "first_token_cpu_s": marks["cpu_first_token"],
        "process_s": exited - spawned,
        "phases_s": {
            "startup": marks["start"] - spawned,
            "import": marks["import"] - marks["start"],
            "load": marks["load"] - marks["import"],
            "first_token": marks["first_token"] - marks["load"],
        },
    }
    if importtime:
        result["imports"] = parse_importtime(done.stderr)
    return result


def parse_importtime(stderr: str) -> dict[str, Any]:
    """Per phase, the seconds spent importing and the top-level modules imported.

    ``-X importtime`` writes one line per module as its import ends, nested imports first and
    indented; a top-level line's cumulative time includes everything it imported. The marks
    the program writes between phases go to the same stream, so each import line falls in
    the phase during which it happened.
    """
    phases: dict[str, dict[str, Any]] = {
        name: {"import_s": 0.0, "modules": {}} for name in PHASES[1:]
    }
    order = iter(PHASES[1:])
    current = next(order)
    every: dict[str, float] = {}
    for line in stderr.splitlines():
        if line.startswith(MARK):
            current = next(order, current)
            continue
        if not line.startswith("import time:"):
            continue
        parts = line.split("|")
        if len(parts) != 3:
            continue
        try:
            cumulative_us = int(parts[1])
        except ValueError:  # the header line
            continue
        name = parts[2]
        module = name.strip()
        every[module] = cumulative_us / 1e6
        # " name" is top level; nested imports are indented two more spaces per level.
        if name.startswith(" ") and not name.startswith("   "):
            phase = phases[current]
            phase["import_s"] += cumulative_us / 1e6
            phase["modules"][module] = cumulative_us / 1e6
    return {"phases": phases, "all_modules": every}


def breakdown(sample: dict[str, Any]) -> dict[str, float]:
    """Imports, weights and first token (and interpreter start) of one importtime sample."""
    phases = sample["phases_s"]
    imports = sample["imports"]["phases"]
    return {
        "startup_s": phases["startup"],
        "imports_s": sum(imports[name]["import_s"] for name in PHASES[1:]),
        "weights_s": phases["load"] - imports["load"]["import_s"],
        "first_token_s": phases["first_token"] - imports["first_token"]["import_s"],
        "rest_of_import_lines_s": phases["import"] - imports["import"]["import_s"],
        "total_s": sample["first_token_s"],
    }


def pairs(count: int, options: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rounds = []
    for index in range(count):
        order = (NBSTREAM, BARE) if index % 2 == 0 else (BARE, NBSTREAM)
        samples = {v: run_program(v, options[v], importtime=False) for v in order}
        ours, bare = samples[NBSTREAM], samples[BARE]
        ratio = ours["first_token_s"] / bare["first_token_s"]
        cpu_ratio = ours["first_token_cpu_s"] / bare["first_token_cpu_s"]
        rounds.append(
            {"order": list(order), "samples": samples, "ratio": ratio, "cpu_ratio": cpu_ratio}
        )
        log(
            f"  pair {index + 1}/{count}: nbstream {ours['first_token_s']:.2f} s "
            f"(CPU {ours['first_token_cpu_s']:.2f} s), bare {bare['first_token_s']:.2f} s "
            f"(CPU {bare['first_token_cpu_s']:.2f} s), ratio {ratio:.3f} (CPU {cpu_ratio:.3f})"
        )
    return rounds


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    ratios = [r["ratio"] for r in rounds]
    cpu_ratios = [r["cpu_ratio"] for r in rounds]
    summary: dict[str, Any] = {
        "median_ratio": statistics.median(ratios),
        "min_ratio": min(ratios),
        "max_ratio": max(ratios),
        "median_cpu_ratio": statistics.median(cpu_ratios),
        "min_cpu_ratio": min(cpu_ratios),
        "max_cpu_ratio": max(cpu_ratios),
        "pairs": len(rounds),
    }
    for variant in (NBSTREAM, BARE):
        values = [r["samples"][variant] for r in rounds]
        summary[variant] = {
            "median_first_token_s": statistics.median(v["first_token_s"] for v in values),
            "median_first_token_cpu_s": statistics.median(v["first_token_cpu_s"] for v in values),
            "median_phases_s": {
                phase: statistics.median(v["phases_s"][phase] for v in values) for phase in PHASES
            },
        }
    summary["meets_target"] = summary["median_ratio"] <= TARGET
    return summary


def extra_modules(ours: dict[str, Any], bare: dict[str, Any], top: int = 12) -> list[Any]:
    """The costliest modules nbstream's process imports and the bare one does not.

    Only the outermost of them: one whose importer is also new is counted in it.
    """
    ours_all, bare_all = ours["all_modules"], bare["all_modules"]
    new = {name: seconds for name, seconds in ours_all.items() if name not in bare_all}
    outer = {
        name: seconds
        for name, seconds in new.items()
        if not any(name != other and name.startswith(other + ".") for other in new)
    }
    return sorted(outer.items(), key=lambda item: -item[1])[:top]


def render(report: dict[str, Any]) -> str:
    summary = report["summary"]
    lines = [
        "## Cold start: a fresh process to the first token",
        "",
        f"Default model, {report['settings']['device']}"
        f"{', ' + report['settings']['dtype'] if report['settings']['dtype'] else ''}; "
        f"{summary['pairs']} interleaved pairs.",
        "",
        "| program | median to first token | its CPU time | interpreter start | import line(s) "
        "| load | first token |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for variant in (NBSTREAM, BARE):
        s = summary[variant]
        p = s["median_phases_s"]
        lines.append(
            f"| {LABELS[variant]} | {s['median_first_token_s']:.2f} s "
            f"| {s['median_first_token_cpu_s']:.2f} s | {p['startup']:.2f} s "
            f"| {p['import']:.2f} s | {p['load']:.2f} s | {p['first_token']:.2f} s |"
        )
    verdict = "met" if summary["meets_target"] else "missed"
    lines += [
        "",
        f"- nbstream / bare, median of the pairs' ratios: **{summary['median_ratio']:.3f}** "
        f"(min {summary['min_ratio']:.3f}, max {summary['max_ratio']:.3f}); target <= "
        f"{TARGET:.1f}: {verdict}"
        + (
            f", nbstream {100 * (1 - summary['median_ratio']):.1f}% faster"
            if summary["meets_target"]
            else ""
        ),
        f"- The same in CPU time (all threads; less sensitive to other processes): "
        f"**{summary['median_cpu_ratio']:.3f}** (min {summary['min_cpu_ratio']:.3f}, max "
        f"{summary['max_cpu_ratio']:.3f})",
    ]
    split = report.get("breakdown")
    if split:
        lines += [
            "",
            "Where the time goes, one `python -X importtime` process each (imports: the "
            "top-level imports' cumulative time, whichever line triggered them; weights: the "
            "load phase less its imports; first token: that phase less its imports):",
            "",
            "| program | total | interpreter start | imports | weights | first token |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for variant in (NBSTREAM, BARE):
            b = split[variant]
            lines.append(
                f"| {LABELS[variant]} | {b['total_s']:.2f} s | {b['startup_s']:.2f} s "
                f"| {b['imports_s']:.2f} s | {b['weights_s']:.2f} s "
                f"| {b['first_token_s']:.2f} s |"
            )
        extra = split.get("extra_modules") or []
        if extra:
            lines += [
                "",
                "Imported by nbstream's process and not by the bare one (outermost, "
                "cumulative): " + ", ".join(f"`{name}` {1000 * s:.0f} ms" for name, s in extra),
            ]
    env = report["environment"]
    lines += [
        "",
        f"Python {env['python']}, {env['cpus']} CPUs, load average before the run "
        f"{env['loadavg_before']}; {report['elapsed_s']:.0f} s in all.",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.coldstart",
        description="A fresh process to the first token: nbstream against the bare recipe.",
    )
    parser.add_argument("--pairs", type=int, default=None, help="interleaved pairs (default 7)")
    parser.add_argument("--quick", action="store_true", help="one pair and the breakdown")
    parser.add_argument(
        "--no-breakdown", action="store_true", help="skip the -X importtime processes"
    )
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument(
        "--dtype", default=None, help="the weights' type for both loads, e.g. bfloat16"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if args.pairs is not None and args.pairs < 1:
        parser.error("--pairs must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.perf_counter()
    from nbstream.models import default_model_dir

    folder = str(default_model_dir())
    load: dict[str, Any] = {}
    if args.device != "cpu":
        load["device_map"] = args.device
    if args.dtype:
        load["dtype"] = args.dtype
    options = {NBSTREAM: {"load": load}, BARE: {"load": load, "folder": folder}}
    count = args.pairs or (1 if args.quick else 7)
    try:
        loadavg = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        loadavg = "n/a"
    report: dict[str, Any] = {
        "settings": {"pairs": count, "device": args.device, "dtype": args.dtype, "folder": folder},
        "environment": {
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "loadavg_before": loadavg,
        },
    }
    # One of each first, not counted: the files' pages into the page cache, as on any
    # machine where the model was used before.
    log("warming the page cache ...")
    for variant in (NBSTREAM, BARE):
        run_program(variant, options[variant], importtime=False)
    log(f"{count} interleaved pairs ...")
    rounds = pairs(count, options)
    report["rounds"] = rounds
    report["summary"] = summarize(rounds)
    if not args.no_breakdown:
        log("the breakdown (-X importtime) ...")
        samples = {v: run_program(v, options[v], importtime=True) for v in (NBSTREAM, BARE)}
        report["breakdown"] = {v: breakdown(samples[v]) for v in samples}
        report["breakdown"]["extra_modules"] = extra_modules(
            samples[NBSTREAM]["imports"], samples[BARE]["imports"]
        )
        report["breakdown"]["phase_imports"] = {
            v: {
                phase: {
                    "import_s": samples[v]["imports"]["phases"][phase]["import_s"],
                    "top_modules": sorted(
                        samples[v]["imports"]["phases"][phase]["modules"].items(),
                        key=lambda item: -item[1],
                    )[:8],
                }
                for phase in PHASES[1:]
            }
            for v in samples
        }
    report["elapsed_s"] = time.perf_counter() - began
    text = render(report)
    report["markdown"] = text
    print(text)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as error:  # a process failed: the run is invalid
        log(str(error))
        sys.exit(1)
