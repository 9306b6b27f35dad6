"""Engine benchmark: streaming must cost the model nothing.

Compares, in one run with the variants interleaved round by round, the throughput of

1. ``model.generate`` with no streamer, in the calling thread;
2. transformers' ``TextIteratorStreamer`` recipe (``generate`` on a thread, the caller
   iterating the text chunks);
3. nbstream (``nbstream.stream``; the caller iterating the ``Generation``'s chunks);

plus a control, (1b): (1) on a worker thread that the caller joins. (2) and (3) generate on
a worker thread, and torch's OpenMP threads behave differently there: libgomp gives the
worker a team of its own beside the calling thread's idle one, and with more OpenMP threads
than CPUs each waiting thread sleeps in futexes instead of spinning (on 2 cores: ~70
voluntary context switches per token against under 1). Each variant starts as a notebook's
main thread is once it has loaded a model by hand: with an idle team (a parallel region run
on it, :func:`main_thread_team`). nbstream ends that team as it starts a run
(``nbstream.cpus.release_idle_openmp_threads``); (1b) and (2), as users write them, do not.
(1b) isolates what streaming itself costs. ``--no-control`` drops it.

Models: the embedded default model (300 new tokens, torch's default threads) and a tiny fast
model (1,500 new tokens on one line with newline and end tokens suppressed, one torch
thread: the regime of a real model on a GPU, where the model is fast and any per-token
overhead shows). All variants use the same prompt, greedy decoding and a forced length (end
tokens suppressed for the benchmark only, on a copy of the generation config, through a
precomputed ``sequence_bias``: see :func:`forced_length`), and each round checks they
generated the same number of tokens. Throughput is new tokens / wall time from the call to
the last chunk consumed. Each round times the variants back to back, in a rotating order,
and divides each by (1)'s throughput in that round; the table reports the median of those
per-round ratios (and against (1b)).

The headline is the stable measure: CPU time per token (process CPU time, every thread,
``time.process_time``; the generating thread's own from /proc), divided into (1)'s in the
same round, the median of those per-round ratios with their range, printed beside the
wall-clock ratio. On a shared machine wall time swings with other processes; CPU time per
token far less. (3w) is nbstream as a notebook shows it: a ``StreamWidget`` whose feed
thread reads the run at its frame rate (outside a kernel its comm is ipywidgets'
``DummyComm``: everything but the socket write). A further table says where the time goes
per token (the generating thread's time on a CPU, waiting for one, and blocked, from /proc).

Also measured: stop latency (``stop()`` to the worker thread's exit, against the model's
median decode step) and load time (a cached ``load_model()`` call, and ``load_model()`` of the
converted default model folder in a fresh subprocess, split into module imports and the rest).

Usage::

    python -m benchmarks.engine                  # full run: ~12 min on 2 slow cores
    python -m benchmarks.engine --no-control     # the three variants only: ~9 min
    python -m benchmarks.engine --quick          # ~30 s: checks the script end to end
    python -m benchmarks.engine --rounds 9 --models tiny --json engine.json
    python -m benchmarks.engine --models tiny --rounds 5 --parts   # where nbstream's cost goes
    python -m benchmarks.engine --models tiny --rounds 61 --only nbstream_widget  # one question
    python -m benchmarks.engine --device cuda --dtype bfloat16     # on a GPU (parts included)

The Markdown report goes to stdout, progress to stderr. The exit status is 1 when the
benchmark itself is invalid (the variants generated different numbers of tokens), not when a
target is missed.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

THROUGHPUT_TARGET = 0.97  # nbstream / (1), median of per-round ratios (tiny model)
DEFAULT_THROUGHPUT_TARGET = 0.99  # the same on the default model (a Binder user's CPU case)
CPU_TARGET = 0.98  # (1)'s CPU time per token / nbstream's, median of per-round ratios
ALTERNATIVES_CPU_TARGET = 1.15  # alternatives=5: CPU time per token, times (1)'s
STOP_SLACK_S = 0.020  # stop latency target: one decode step + this
LOAD_TARGET_S = 1.5  # fresh load_model() of the converted default model folder
# Generous: only there so a broken run fails instead of hanging the benchmark.
STREAM_TIMEOUT_S = 600.0

PROMPT = "Write a long, detailed story about a lighthouse keeper who finds a message in a bottle."

GENERATE, TEXT_ITERATOR, NBSTREAM = "generate", "TextIteratorStreamer", "nbstream"
GENERATE_THREAD = "generate_on_thread"
# Where nbstream's cost over (1b) goes, one part at a time (--parts): (1b) with nbstream's
# stopping criterion, (1b) with its token buffer as the streamer and no reader, and
# nbstream capturing run.trace (alternatives=5, the logits hook).
GENERATE_CRITERIA, GENERATE_BUFFER = "generate_with_criteria", "generate_with_buffer"
NBSTREAM_ALTERNATIVES = "nbstream_alternatives"
# nbstream with a StreamWidget showing the run: its feed thread reads it at its frame rate.
NBSTREAM_WIDGET = "nbstream_widget"
VARIANTS = (GENERATE, TEXT_ITERATOR, NBSTREAM, NBSTREAM_WIDGET)
# A control, not one of the three compared variants: (1) on a worker thread, where (2) and
# (3) run it (see the module docstring: OpenMP waits differently there).
CONTROL_VARIANTS = (GENERATE_THREAD,)
PART_VARIANTS = (GENERATE_CRITERIA, GENERATE_BUFFER, NBSTREAM_ALTERNATIVES)
#: What --only may add to (1) and (3).
ONLY_CHOICES = (
    GENERATE_THREAD,
    GENERATE_CRITERIA,
    GENERATE_BUFFER,
    TEXT_ITERATOR,
    NBSTREAM_WIDGET,
    NBSTREAM_ALTERNATIVES,
)
DISPLAY_ORDER = (
    GENERATE,
    GENERATE_THREAD,
    GENERATE_CRITERIA,
    GENERATE_BUFFER,
    TEXT_ITERATOR,
    NBSTREAM,
    NBSTREAM_WIDGET,
    NBSTREAM_ALTERNATIVES,
)
VARIANT_LABELS = {
    GENERATE: "(1) generate, no streamer, calling thread",
    GENERATE_THREAD: "(1b) control: (1) on a worker thread",
    GENERATE_CRITERIA: "(1c) part: (1b) + nbstream's stopping criterion",
    GENERATE_BUFFER: "(1d) part: (1b) + nbstream's token buffer, no reader",
    TEXT_ITERATOR: "(2) TextIteratorStreamer recipe",
    NBSTREAM: "(3) nbstream",
    NBSTREAM_WIDGET: "(3w) (3) shown in a StreamWidget, its feed at its frame rate",
    NBSTREAM_ALTERNATIVES: "(3a) part: (3) with alternatives=5 (run.trace)",
}

# Runs in a fresh interpreter: library imports first (timed apart), then load_model(). Module
# names given on stdin are imported before the timed load_model(), to split its time into
# importing transformers' code for this model and the rest (reading the folder, building).
_FRESH_LOAD_SCRIPT = """
import importlib, json, sys, time
t0 = time.perf_counter()
import torch, transformers
from transformers import AutoModelForCausalLM, AutoTokenizer
import nbstream
t1 = time.perf_counter()
for name in json.loads(sys.stdin.read() or "[]"):
    try:
        importlib.import_module(name)
    except Exception:
        pass
t2 = time.perf_counter()
before = set(sys.modules)
nbstream.load_model()
t3 = time.perf_counter()
new = sorted(set(sys.modules) - before)
print(json.dumps({"import_s": t1 - t0, "preload_s": t2 - t1, "load_s": t3 - t2, "modules": new}))
"""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the cases -------------------------------------------------------------------------------
@dataclass
class Case:
    """One model under test, with its prompt already encoded exactly as nbstream encodes it."""

    key: str
    label: str
    model: Any
    tokenizer: Any
    new_tokens: int
    rounds: int
    threads: int | None  # torch intra-op threads during this case; None leaves them as they are
    inputs: dict[str, Any] = field(init=False)
    prompt_len: int = field(init=False)

    def __post_init__(self) -> None:
        tokenizer = self.tokenizer
        if getattr(tokenizer, "chat_template", None):
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": PROMPT}], tokenize=False, add_generation_prompt=True
            )
            self.inputs = dict(tokenizer(text, add_special_tokens=False, return_tensors="pt"))
        else:
            self.inputs = dict(tokenizer(PROMPT, return_tensors="pt"))
        self.prompt_len = int(self.inputs["input_ids"].shape[-1])

    def generate_kwargs(self, new_tokens: int | None = None) -> dict[str, Any]:
        # What nbstream's local backend passes for greedy decoding (see backends/local.py).
        return {
            "max_new_tokens": new_tokens or self.new_tokens,
            "do_sample": False,
            "num_beams": 1,
            "num_return_sequences": 1,
        }


def _id_set(value: Any) -> set[int]:
    if isinstance(value, int):
        return {value}
    if isinstance(value, (list, tuple)):
        return {int(v) for v in value}
    return set()


@contextlib.contextmanager
def forced_length(case: Case, *, isin: bool = False) -> Iterator[None]:
    """Suppress the end tokens (benchmark only, on a copy of the generation config).

    Every variant then generates exactly ``max_new_tokens`` tokens. The tokens the model's
    config already suppresses (the tiny model's newlines and special tokens) stay suppressed.
    Unless ``isin``, all of them are suppressed through ``sequence_bias`` (a bias vector
    built once) instead of ``suppress_tokens``: transformers' SuppressTokensLogitsProcessor
    rebuilds a vocabulary-wide ``torch.isin`` mask on every step, which costs more than the
    tiny model's own forward pass and would dilute the per-token costs being compared. The
    generated tokens are the same either way. The original config object is put back after.
    """
    model = case.model
    original = model.generation_config
    config = copy.deepcopy(original)
    eos = _id_set(original.eos_token_id) | _id_set(getattr(case.tokenizer, "eos_token_id", None))
    suppressed = sorted(set(config.suppress_tokens or []) | eos)
    if isin:
        config.suppress_tokens = suppressed
    else:
        config.suppress_tokens = None
        bias = config.sequence_bias or {}
        if isinstance(bias, list):  # [[[ids...], bias], ...], as the tiny model sets it
            bias = {tuple(ids): value for ids, value in bias}
        bias = dict(bias)
        bias.update({(token,): float("-inf") for token in suppressed})
        config.sequence_bias = bias
    model.generation_config = config
    try:
        yield
    finally:
        model.generation_config = original


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    import torch

    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


# -- the three variants ----------------------------------------------------------------------
@dataclass
class Sample:
    ids: list[int]
    seconds: float  # wall time, call to last chunk consumed
    chunks: int
    cpu_s: float  # process CPU time (all threads) until the generating thread has exited
    caller_cpu_s: float  # CPU time of the calling thread (the reader, for (2) and (3))

    @property
    def tokens(self) -> int:
        return len(self.ids)

    @property
    def tok_per_s(self) -> float:
        return self.tokens / self.seconds

    @property
    def cpu_ms_per_token(self) -> float:
        return 1000 * self.cpu_s / max(self.tokens, 1)


class _Clock:
    """Wall time, process CPU time and the calling thread's CPU time, from one start."""

    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()
        self.caller = time.thread_time()

    def wall_s(self) -> float:
        return time.perf_counter() - self.wall

    def sample(self, ids: list[int], seconds: float, chunks: int) -> Sample:
        cpu = time.process_time() - self.cpu
        return Sample(ids, seconds, chunks, cpu, time.thread_time() - self.caller)


def run_generate(case: Case) -> Sample:
    kwargs = case.generate_kwargs()
    clock = _Clock()
    out = case.model.generate(**case.inputs, **kwargs)
    seconds = clock.wall_s()
    return clock.sample(out[0, case.prompt_len :].tolist(), seconds, chunks=1)


def run_generate_on_thread(case: Case) -> Sample:
    """(1) with generate on a fresh thread that the caller joins: no streamer, no reader."""
    return _generate_on_thread_with(case, {})


def _generate_on_thread_with(case: Case, extra: dict[str, Any]) -> Sample:
    kwargs = {**case.generate_kwargs(), **extra}
    holder: dict[str, Any] = {}

    def target() -> None:
        try:
            holder["out"] = case.model.generate(**case.inputs, **kwargs)
        except BaseException as exc:
            holder["error"] = exc

    clock = _Clock()
    thread = threading.Thread(target=target, name="benchmark-generate", daemon=True)
    thread.start()
    thread.join()
    seconds = clock.wall_s()
    if "error" in holder:
        raise RuntimeError("generate failed on its thread") from holder["error"]
    return clock.sample(holder["out"][0, case.prompt_len :].tolist(), seconds, chunks=1)


def run_generate_with_criteria(case: Case) -> Sample:
    """(1b) with the stopping criterion nbstream adds (Stop, budget and stop strings)."""
    from nbstream.backends.base import RunControl
    from nbstream.backends.local import _stop_criteria

    return _generate_on_thread_with(case, {"stopping_criteria": _stop_criteria(RunControl())})


def run_generate_with_buffer(case: Case) -> Sample:
    """(1b) handing each token to nbstream's buffer, as a run does, with nobody reading it."""
    from nbstream.streaming import TokenBuffer

    return _generate_on_thread_with(case, {"streamer": TokenBuffer()})


def run_text_iterator(case: Case) -> Sample:
    """transformers' documented recipe: generate on a thread, iterate the streamer."""
    from transformers import TextIteratorStreamer

    kwargs = case.generate_kwargs()
    holder: dict[str, Any] = {}
    clock = _Clock()
    streamer = TextIteratorStreamer(
        case.tokenizer, skip_prompt=True, skip_special_tokens=True, timeout=STREAM_TIMEOUT_S
    )

    def target() -> None:
        try:
            holder["out"] = case.model.generate(**case.inputs, **kwargs, streamer=streamer)
        except BaseException as exc:  # end the reader's loop instead of leaving it waiting
            holder["error"] = exc
            streamer.text_queue.put(streamer.stop_signal)

    thread = threading.Thread(target=target, name="benchmark-generate", daemon=True)
    thread.start()
    chunks = []
    for chunk in streamer:
        chunks.append(chunk)
    seconds = clock.wall_s()
    thread.join(STREAM_TIMEOUT_S)
    if "error" in holder:
        raise RuntimeError("generate failed on its thread") from holder["error"]
    ids = holder["out"][0, case.prompt_len :].tolist()
    return clock.sample(ids, seconds, chunks=len(chunks))


def run_nbstream(case: Case, alternatives: int = 0) -> Sample:
    import nbstream

    options = {"alternatives": alternatives} if alternatives else {}
    clock = _Clock()
    run = nbstream.stream(
        case.model,
        case.tokenizer,
        PROMPT,
        max_new_tokens=case.new_tokens,
        do_sample=False,
        **options,
    )
    chunks = []
    for chunk in run:
        chunks.append(chunk)
    seconds = clock.wall_s()
    run.join(STREAM_TIMEOUT_S)
    if run.prompt_tokens != case.prompt_len:
        raise RuntimeError(
            f"nbstream encoded the prompt as {run.prompt_tokens} tokens, the baselines as "
            f"{case.prompt_len}: the variants would not be comparable"
        )
    return clock.sample(run.token_ids, seconds, chunks=len(chunks))


_WIDGETS: dict[int, Any] = {}


def run_nbstream_widget(case: Case) -> Sample:
    """nbstream as a notebook shows it: a StreamWidget's run, its feed following the run.

    The feed's view thread reads the run at the widget's frame rate and sends deltas to the
    views; outside a kernel the widget's comm is ipywidgets' ``DummyComm``, so all of the
    kernel side runs except the socket write. Timed until the feed has sent the end.
    """
    import nbstream
    from nbstream.widgets.feed import view_threads

    widget = _WIDGETS.get(id(case.model))
    if widget is None:
        widget = _WIDGETS[id(case.model)] = nbstream.StreamWidget(case.model, case.tokenizer)
    clock = _Clock()
    run = widget.generate(PROMPT, max_new_tokens=case.new_tokens, do_sample=False)
    run.join(STREAM_TIMEOUT_S)
    for thread in view_threads():
        thread.join(STREAM_TIMEOUT_S)
    seconds = clock.wall_s()
    if run.prompt_tokens != case.prompt_len:
        raise RuntimeError(
            f"the widget's run encoded the prompt as {run.prompt_tokens} tokens, the "
            f"baselines as {case.prompt_len}: the variants would not be comparable"
        )
    return clock.sample(run.token_ids, seconds, chunks=1)


RUNNERS: dict[str, Callable[[Case], Sample]] = {
    GENERATE: run_generate,
    GENERATE_THREAD: run_generate_on_thread,
    TEXT_ITERATOR: run_text_iterator,
    NBSTREAM: run_nbstream,
    NBSTREAM_WIDGET: run_nbstream_widget,
    GENERATE_CRITERIA: run_generate_with_criteria,
    GENERATE_BUFFER: run_generate_with_buffer,
    NBSTREAM_ALTERNATIVES: lambda case: run_nbstream(case, alternatives=5),
}


def _thread_stats() -> dict[str, float] | None:
    """This thread's clocks from Linux's /proc: on-CPU and run-queue time, context switches."""
    try:
        cpu_ns, runq_ns, _ = (
            int(x) for x in Path("/proc/thread-self/schedstat").read_text().split()
        )
        status = Path("/proc/thread-self/status").read_text()
    except (OSError, ValueError):
        return None
    stats = {
        "wall_s": time.perf_counter(),
        "cpu_s": cpu_ns / 1e9,
        "runq_s": runq_ns / 1e9,
        "voluntary": 0.0,
        "involuntary": 0.0,
    }
    for line in status.splitlines():
        name, _, value = line.partition(":")
        if name == "voluntary_ctxt_switches":
            stats["voluntary"] = float(value)
        elif name == "nonvoluntary_ctxt_switches":
            stats["involuntary"] = float(value)
    return stats


@contextlib.contextmanager
def probe_generate(model: Any) -> Iterator[dict[str, Any]]:
    """Record where the generating thread's time goes during each ``model.generate`` call.

    Wraps ``generate`` on the instance (every variant calls it there, nbstream included),
    reading the calling thread's /proc clocks at entry and exit: time on a CPU, time runnable
    but waiting for one (other processes), and the rest of the wall time, when the thread was
    blocked (waiting for the GIL, a lock, or, with several torch threads, its OpenMP team).
    Streaming that costs the model nothing adds nothing to the blocked time. Two small file
    reads per call; nothing inside generate changes.
    """
    record: dict[str, Any] = {}
    had_own = "generate" in vars(model)
    previous = vars(model).get("generate")
    original = model.generate

    def generate(*args: Any, **kwargs: Any) -> Any:
        start = _thread_stats()
        try:
            return original(*args, **kwargs)
        finally:
            end = _thread_stats()
            if start is not None and end is not None:
                record["last"] = {key: end[key] - start[key] for key in start}

    model.generate = generate
    try:
        yield record
    finally:
        if had_own:
            model.generate = previous
        else:
            del model.generate


def cpu_pressure() -> float | None:
    """The kernel's CPU pressure (share of the last 10 s some task waited for a CPU), in %."""
    try:
        text = Path("/proc/pressure/cpu").read_text()
    except OSError:
        return None
    for part in text.split():
        if part.startswith("avg10="):
            return float(part.split("=", 1)[1])
    return None


def _per_token(stats: dict[str, float] | None, tokens: int) -> dict[str, float] | None:
    if stats is None or tokens <= 0:
        return None
    blocked = stats["wall_s"] - stats["cpu_s"] - stats["runq_s"]
    return {
        "wall_ms": 1000 * stats["wall_s"] / tokens,
        "cpu_ms": 1000 * stats["cpu_s"] / tokens,
        "runq_ms": 1000 * stats["runq_s"] / tokens,
        "blocked_ms": 1000 * max(blocked, 0.0) / tokens,
        "voluntary_switches": stats["voluntary"] / tokens,
        "involuntary_switches": stats["involuntary"] / tokens,
    }


def _outside_ms(sample: Sample, generating: dict[str, float]) -> float:
    """CPU per token outside the generating thread: the process's less that thread's, in ms."""
    return max(sample.cpu_ms_per_token - generating["cpu_ms"], 0.0)


def median_interval(values: list[float], level: float = 0.95) -> tuple[float, float] | None:
    """A distribution-free confidence interval of the median: two order statistics.

    ``[x_(j), x_(n+1-j)]`` of the sorted values covers the true median with probability
    ``1 - 2 P(B < j)``, ``B ~ Binomial(n, 1/2)``, whatever the distribution; ``j`` is the
    largest that still covers ``level``. It says whether a median's distance from a target
    is more than this machine's round-to-round noise.

    Args:
        values: The per-round values.
        level: The coverage asked for.

    Returns:
        ``(low, high)``, or None for too few values to reach ``level`` (five or fewer at 95%).

    Example:
        >>> median_interval([float(i) for i in range(1, 32)])
        (10.0, 22.0)
    """
    n = len(values)
    best = None
    for j in range(1, (n + 1) // 2 + 1):
        outside = 2 * sum(math.comb(n, i) for i in range(j)) / 2**n
        if 1 - outside < level:
            break
        best = j
    if best is None:
        return None
    ordered = sorted(values)
    return ordered[best - 1], ordered[n - best]


def _median_or_none(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _median_dicts(rows: list[dict[str, float] | None]) -> dict[str, float] | None:
    rows = [r for r in rows if r is not None]
    if not rows:
        return None
    return {key: statistics.median(r[key] for r in rows) for key in rows[0]}


# -- throughput ------------------------------------------------------------------------------
def main_thread_team() -> None:
    """Leave the calling thread an idle OpenMP team, as loading a model by hand does.

    One parallel region (an elementwise op over more elements than torch's grain size) when
    torch runs more than one thread; with one thread there is no team to leave.
    """
    import torch

    if torch.get_num_threads() > 1:
        torch.ones(1 << 20).add_(1.0)


def throughput(case: Case, warmup_tokens: int, variants: tuple[str, ...]) -> dict[str, Any]:
    """Interleaved rounds of the variants; per-round ratios against (1) (and the control)."""
    warm = copy.copy(case)
    warm.new_tokens = warmup_tokens
    for variant in variants:  # not recorded: first-call costs (allocations, lazy imports)
        RUNNERS[variant](warm)

    rounds: list[dict[str, Any]] = []
    problems: list[str] = []
    for index in range(case.rounds):
        shift = index % len(variants)
        order = variants[shift:] + variants[:shift]
        samples: dict[str, Sample] = {}
        pressure = cpu_pressure()
        threads: dict[str, dict[str, float] | None] = {}
        for variant in order:
            gc.collect()
            main_thread_team()
            with probe_generate(case.model) as record:
                samples[variant] = RUNNERS[variant](case)
            threads[variant] = _per_token(record.get("last"), samples[variant].tokens)
        base = samples[GENERATE].tok_per_s
        base_cpu = samples[GENERATE].cpu_ms_per_token
        control = samples[GENERATE_THREAD].tok_per_s if GENERATE_THREAD in samples else None
        counts = {v: s.tokens for v, s in samples.items()}
        counts_equal = len(set(counts.values())) == 1 and counts[GENERATE] == case.new_tokens
        same_ids = all(s.ids == samples[GENERATE].ids for s in samples.values())
        if not counts_equal:
            problems.append(
                f"{case.key} round {index + 1}: token counts differ or fall short of "
                f"{case.new_tokens}: {counts}"
            )
        rounds.append(
            {
                "order": list(order),
                "cpu_psi_some_avg10": pressure,
                "counts_equal": counts_equal,
                "same_ids": same_ids,
                "samples": {
                    v: {
                        "tokens": s.tokens,
                        "seconds": s.seconds,
                        "tok_per_s": s.tok_per_s,
                        "chunks": s.chunks,
                        "cpu_s": s.cpu_s,
                        "cpu_ms_per_token": s.cpu_ms_per_token,
                        "caller_cpu_s": s.caller_cpu_s,
                        "generating_thread_per_token": threads[v],
                        "ratio": s.tok_per_s / base,
                        # The stable measure: (1)'s CPU time per token over this variant's.
                        "cpu_ratio": base_cpu / s.cpu_ms_per_token,
                        # Streaming's own threads (the reader, the feed, the run's setup), as
                        # a share of (1)'s CPU per token: the model's noise is not in it.
                        "outside_share": _outside_ms(s, threads[v]) / base_cpu
                        if threads[v] is not None
                        else None,
                        "ratio_vs_control": s.tok_per_s / control if control else None,
                    }
                    for v, s in samples.items()
                },
            }
        )
        log(
            f"  {case.key} round {index + 1}/{case.rounds}: "
            + ", ".join(
                f"{v} {samples[v].tok_per_s:.1f} tok/s ({samples[v].tok_per_s / base:.3f}x, "
                f"CPU {base_cpu / samples[v].cpu_ms_per_token:.3f}x)"
                for v in variants
            )
            + ("" if counts_equal else f"  TOKEN COUNTS DIFFER {counts}")
        )

    summary = {}
    for variant in variants:
        values = [r["samples"][variant] for r in rounds]
        ratios = [v["ratio"] for v in values]
        vs_control = [v["ratio_vs_control"] for v in values if v["ratio_vs_control"] is not None]
        cpu_ratios = [v["cpu_ratio"] for v in values]
        summary[variant] = {
            "median_cpu_ratio": statistics.median(cpu_ratios),
            # How far the rounds' noise leaves the median free to be (95%, distribution-free).
            "cpu_ratio_interval": median_interval(cpu_ratios),
            "min_cpu_ratio": min(cpu_ratios),
            "max_cpu_ratio": max(cpu_ratios),
            "median_tok_per_s": statistics.median(v["tok_per_s"] for v in values),
            "median_ratio": statistics.median(ratios),
            "min_ratio": min(ratios),
            "max_ratio": max(ratios),
            "median_ratio_vs_control": statistics.median(vs_control) if vs_control else None,
            "median_chunks": statistics.median(v["chunks"] for v in values),
            "median_cpu_ms_per_token": statistics.median(v["cpu_ms_per_token"] for v in values),
            "median_caller_cpu_s": statistics.median(v["caller_cpu_s"] for v in values),
            "median_outside_share": _median_or_none([v["outside_share"] for v in values]),
            "generating_thread_per_token": _median_dicts(
                [v["generating_thread_per_token"] for v in values]
            ),
            "rounds": len(values),
        }
    pressures = [r["cpu_psi_some_avg10"] for r in rounds if r["cpu_psi_some_avg10"] is not None]
    return {
        "variants": list(variants),
        "rounds": rounds,
        "summary": summary,
        "median_cpu_psi_some_avg10": statistics.median(pressures) if pressures else None,
        "problems": problems,
    }


# -- decode step and stop latency ------------------------------------------------------------
class _Stamps:
    """A minimal streamer that only records when each new token arrives."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._prompt = True

    def put(self, value: Any) -> None:
        if self._prompt:  # generate() hands the prompt over first
            self._prompt = False
            return
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def decode_step_s(case: Case, tokens: int) -> float:
    """The model's median time per decode step (the prefill excluded).

    Measured with generate on a worker thread, where nbstream runs it (see the (1b) control).
    """
    stamps = _Stamps()
    kwargs = case.generate_kwargs(tokens)
    thread = threading.Thread(
        target=case.model.generate, kwargs={**case.inputs, **kwargs, "streamer": stamps}
    )
    thread.start()
    thread.join()
    gaps = [b - a for a, b in zip(stamps.times, stamps.times[1:], strict=False)]
    return statistics.median(gaps)


def stop_latency(case: Case, trials: int, warm_chunks: int) -> dict[str, Any]:
    """``stop()`` while the caller iterates a live run, to the worker thread's exit."""
    import nbstream

    latencies: list[float] = []
    after_stop: list[int] = []
    problems: list[str] = []
    for _ in range(trials):
        gc.collect()
        run = nbstream.stream(
            case.model,
            case.tokenizer,
            PROMPT,
            max_new_tokens=max(case.new_tokens, 1000),
            do_sample=False,
        )
        for seen, _chunk in enumerate(run, start=1):
            if seen >= warm_chunks:
                break
        before = run.metrics["tokens"]
        start = time.perf_counter()
        stopped = run.stop()
        exited = run.join(STREAM_TIMEOUT_S)
        latency = time.perf_counter() - start
        if not (stopped and exited and run.status == "cancelled"):
            problems.append(
                f"{case.key} stop trial: stop()={stopped}, thread exited={exited}, "
                f"status={run.status!r} (expected a cancelled run)"
            )
            continue
        latencies.append(latency)
        after_stop.append(run.metrics["tokens"] - before)
    step = decode_step_s(case, 64 if case.new_tokens >= 64 else max(case.new_tokens, 8))
    result: dict[str, Any] = {
        "trials": len(latencies),
        "latencies_ms": [x * 1000 for x in latencies],
        "tokens_after_stop": after_stop,
        "median_decode_step_ms": step * 1000,
        "target_ms": (step + STOP_SLACK_S) * 1000,
        "problems": problems,
    }
    if latencies:
        result["median_ms"] = statistics.median(latencies) * 1000
        result["max_ms"] = max(latencies) * 1000
        result["meets_target"] = result["median_ms"] <= result["target_ms"]
    return result


# -- load time -------------------------------------------------------------------------------
def cached_load_s(calls: int) -> float:
    import nbstream

    times = []
    for _ in range(calls):
        start = time.perf_counter()
        nbstream.load_model()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _fresh_process(preload: list[str]) -> tuple[dict[str, Any], float]:
    env = dict(os.environ, TRANSFORMERS_VERBOSITY="error", HF_HUB_DISABLE_PROGRESS_BARS="1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _FRESH_LOAD_SCRIPT],
        input=json.dumps(preload),
        capture_output=True,
        text=True,
        env=env,
        timeout=STREAM_TIMEOUT_S,
        check=False,
    )
    total = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"the fresh-load subprocess failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]), total


def fresh_load(trials: int, split: bool) -> dict[str, Any]:
    """``load_model()`` of the converted default model folder in new interpreters.

    With ``split``, one more process first imports the modules that ``load_model()`` imported
    in the first one, so the report can tell import time from the load proper.
    """
    loads, imports, totals = [], [], []
    modules: list[str] = []
    for _ in range(trials):
        numbers, total = _fresh_process([])
        totals.append(total)
        loads.append(numbers["load_s"])
        imports.append(numbers["import_s"])
        modules = modules or numbers["modules"]
    load = statistics.median(loads)
    result: dict[str, Any] = {
        "trials": trials,
        "load_s": loads,
        "import_s": imports,
        "process_s": totals,
        "median_load_s": load,
        "median_import_s": statistics.median(imports),
        "median_process_s": statistics.median(totals),
        "target_s": LOAD_TARGET_S,
        "meets_target": load <= LOAD_TARGET_S,
        "modules_imported_by_load": len(modules),
    }
    if split and modules:
        numbers, _ = _fresh_process(modules)
        result["split"] = {"module_import_s": numbers["preload_s"], "rest_s": numbers["load_s"]}
    return result


# -- report ----------------------------------------------------------------------------------
def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")


def _cpu_target(variant: str) -> str:
    if variant in (NBSTREAM, NBSTREAM_WIDGET):
        return f"≥ {CPU_TARGET}"
    if variant == NBSTREAM_ALTERNATIVES:
        return f"cost ≤ {ALTERNATIVES_CPU_TARGET}×"
    return ""


def render_headline(report: dict[str, Any]) -> list[str]:
    """The stable measure first: CPU time per token against (1), beside the wall-clock ratio."""
    lines = [
        "CPU time per token, the stable measure: process CPU time (every thread: the "
        "generating thread, the reader or the widget's feed) per generated token, divided "
        "into (1)'s in the same round; the median of the per-round ratios, their range in "
        "brackets. The wall-clock ratio (throughput against (1)) beside it. Outside the "
        "generating thread: the CPU of every other thread (the reader, the feed, the run's "
        "setup) per token, as a share of (1)'s CPU per token, median of the rounds: the part "
        "of the cost that the model's own noise is not in.",
        "",
        "| model | variant | CPU ms/token | CPU ratio (1)/variant | median's 95% interval "
        "| cost × (1) | target | wall ratio vs (1) | generating thread CPU ms/token "
        "| outside it, share of (1) | rounds |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for case in report["cases"]:
        summary = case["throughput"]["summary"]
        for variant in (v for v in DISPLAY_ORDER if v in summary):
            s = summary[variant]
            g = s["generating_thread_per_token"]
            generating = "–" if g is None else f"{g['cpu_ms']:.3f}"
            outside = s["median_outside_share"]
            outside_text = "–" if outside is None else f"{100 * outside:.2f}%"
            lines.append(
                f"| {case['key']} | {VARIANT_LABELS[variant]} "
                f"| {s['median_cpu_ms_per_token']:.3f} "
                f"| {s['median_cpu_ratio']:.3f} ({s['min_cpu_ratio']:.3f}–"
                f"{s['max_cpu_ratio']:.3f}) | {_interval_text(s.get('cpu_ratio_interval'))} "
                f"| {1 / s['median_cpu_ratio']:.3f} "
                f"| {_cpu_target(variant)} "
                f"| {s['median_ratio']:.3f} ({s['min_ratio']:.3f}–{s['max_ratio']:.3f}) "
                f"| {generating} | {outside_text} | {s['rounds']} |"
            )
    return [*lines, ""]


def _interval_text(interval: Any) -> str:
    return "–" if interval is None else f"{interval[0]:.3f}–{interval[1]:.3f}"


def _cost_interval(interval: Any) -> tuple[float, float] | None:
    """A CPU ratio's interval as a cost's, × (1): each end inverted."""
    return None if interval is None else (1 / interval[1], 1 / interval[0])


def _noise_note(interval: Any, target: float) -> str:
    """Said after a verdict whose median's interval holds the target: noise decides it."""
    if interval is None:
        return " (too few rounds for an interval of the median)"
    low, high = interval
    if low < target < high:
        return (
            f" (the median's 95% interval, {low:.3f}–{high:.3f}, holds the target: this "
            "machine's noise decides the verdict; more rounds or a quieter machine settle it)"
        )
    return ""


def _cpu_verdicts(case: dict[str, Any]) -> list[str]:
    summary = case["throughput"]["summary"]
    lines = []
    for variant in (NBSTREAM, NBSTREAM_WIDGET):
        if variant in summary:
            ratio = summary[variant]["median_cpu_ratio"]
            lines.append(
                f"- CPU time per token, {case['key']}, {VARIANT_LABELS[variant]}: "
                f"{ratio:.3f} of (1)'s efficiency (target >= {CPU_TARGET}): "
                f"{_verdict(ratio >= CPU_TARGET)}"
                + _noise_note(summary[variant].get("cpu_ratio_interval"), CPU_TARGET)
            )
    if NBSTREAM_ALTERNATIVES in summary:
        cost = 1 / summary[NBSTREAM_ALTERNATIVES]["median_cpu_ratio"]
        lines.append(
            f"- CPU time per token with alternatives=5, {case['key']}: {cost:.3f}x of (1)'s "
            f"(target <= {ALTERNATIVES_CPU_TARGET}): {_verdict(cost <= ALTERNATIVES_CPU_TARGET)}"
            + _noise_note(
                _cost_interval(summary[NBSTREAM_ALTERNATIVES].get("cpu_ratio_interval")),
                ALTERNATIVES_CPU_TARGET,
            )
        )
    return lines


def render(report: dict[str, Any]) -> str:
    lines = [
        "## nbstream engine benchmark",
        "",
        *render_headline(report),
        "| model | variant | median tok/s | median ratio vs (1) | ratio vs (1) min–max "
        "| median ratio vs (1b) | chunks/run | rounds |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for case in report["cases"]:
        summary = case["throughput"]["summary"]
        for variant in (v for v in DISPLAY_ORDER if v in summary):
            s = summary[variant]
            vs_control = s["median_ratio_vs_control"]
            lines.append(
                f"| {case['label']} | {VARIANT_LABELS[variant]} | {s['median_tok_per_s']:.1f} "
                f"| {s['median_ratio']:.3f} | {s['min_ratio']:.3f}–{s['max_ratio']:.3f} "
                f"| {'–' if vs_control is None else f'{vs_control:.3f}'} "
                f"| {s['median_chunks']:g} | {s['rounds']} |"
            )
    lines += [
        "",
        "Where the time goes, per token (medians; less sensitive to other processes than wall "
        "time). Process CPU: all threads, until generate's thread has exited. Generating "
        "thread: on a CPU, runnable but waiting for a CPU (other processes), and blocked "
        "(the GIL, locks, its OpenMP team): streaming that costs the model nothing adds no "
        "blocked time. Calling thread: CPU per run (the reader, for (2) and (3)).",
        "",
        "| model | variant | process CPU ms | vs (1b) | gen. thread on-CPU ms | waiting for a "
        "CPU ms | blocked ms | voluntary switches | calling-thread CPU ms/run |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case in report["cases"]:
        summary = case["throughput"]["summary"]
        control = summary.get(GENERATE_THREAD)
        for variant in (v for v in DISPLAY_ORDER if v in summary):
            s = summary[variant]
            cpu = s["median_cpu_ms_per_token"]
            vs = "–" if control is None else f"{cpu / control['median_cpu_ms_per_token']:.3f}"
            g = s["generating_thread_per_token"]
            thread = (
                "– | – | – | –"
                if g is None
                else f"{g['cpu_ms']:.3f} | {g['runq_ms']:.3f} | {g['blocked_ms']:.4f} "
                f"| {g['voluntary_switches']:.2f}"
            )
            lines.append(
                f"| {case['key']} | {VARIANT_LABELS[variant]} | {cpu:.3f} | {vs} | {thread} "
                f"| {1000 * s['median_caller_cpu_s']:.1f} |"
            )
    lines.append("")
    for case in report["cases"]:
        s = case["throughput"]["summary"][NBSTREAM]
        vs_control = s["median_ratio_vs_control"]
        control = "" if vs_control is None else f"; {vs_control:.3f}x of the (1b) control"
        lines.append(
            f"- Throughput, {case['key']}: nbstream at {s['median_ratio']:.3f}x of (1) "
            f"(range {s['min_ratio']:.3f}–{s['max_ratio']:.3f}; target >= "
            f"{case['throughput_target']}): {_verdict(case['throughput_ok'])}{control}"
        )
        lines.extend(_cpu_verdicts(case))
    for case in report["cases"]:
        stop = case["stop_latency"]
        if "median_ms" in stop:
            lines.append(
                f"- Stop latency, {case['key']} (stop() to worker exit, {stop['trials']} trials): "
                f"median {stop['median_ms']:.1f} ms, max {stop['max_ms']:.1f} ms; median decode "
                f"step {stop['median_decode_step_ms']:.1f} ms; target <= step + "
                f"{STOP_SLACK_S * 1000:.0f} ms = {stop['target_ms']:.1f} ms: "
                f"{_verdict(stop['meets_target'])}"
            )
        else:
            lines.append(f"- Stop latency, {case['key']}: no valid trial ({stop['problems']})")
    load = report.get("load")
    if load:
        lines.append(f"- load_model(), cached (second call, median): {load['cached_ms']:.3f} ms")
        if load.get("first_in_process_s") is not None:
            lines.append(
                f"- load_model(), first call in this process (libraries already imported): "
                f"{load['first_in_process_s']:.2f} s"
            )
        fresh = load.get("fresh")
        if fresh:
            lines.append(
                f"- load_model(), fresh subprocess (median of {fresh['trials']}): "
                f"{fresh['median_load_s']:.2f} s after importing torch + transformers "
                f"({fresh['median_import_s']:.2f} s; whole process "
                f"{fresh['median_process_s']:.2f} s); target <= {LOAD_TARGET_S} s: "
                f"{_verdict(fresh['meets_target'])}"
            )
            split = fresh.get("split")
            if split:
                lines.append(
                    f"  - of which importing the {fresh['modules_imported_by_load']} modules "
                    f"load_model() pulls in (transformers' model and tokenizer code): "
                    f"{split['module_import_s']:.2f} s; the rest (reading the folder, building "
                    f"tokenizer and model), with those imported first: {split['rest_s']:.2f} s"
                )
    env = report["environment"]
    lines.append("")
    pressures = [
        f"{c['key']} {c['throughput']['median_cpu_psi_some_avg10']:.0f}%"
        for c in report["cases"]
        if c["throughput"]["median_cpu_psi_some_avg10"] is not None
    ]
    if pressures:
        lines.append(
            "CPU pressure at the start of each round (median of /proc/pressure/cpu some "
            "avg10, the share of time some runnable task waited for a CPU, this benchmark's "
            f"own threads included): {', '.join(pressures)}."
        )
    settings = report["settings"]
    lines.append(
        f"Device {settings.get('device', 'cpu')}"
        f"{', ' + settings['dtype'] if settings.get('dtype') else ''}; "
        f"Python {env['python']}, torch {env['torch']}, transformers {env['transformers']}, "
        f"{env['cpus']} CPUs, load average before the run {env['loadavg_before']}; "
        f"{'quick run' if report['settings']['quick'] else 'full run'} in "
        f"{report['elapsed_s']:.0f} s."
    )
    if report["problems"]:
        lines.append("")
        lines.append("**Invalid measurements:**")
        lines.extend(f"- {p}" for p in report["problems"])
    return "\n".join(lines)


# -- main ------------------------------------------------------------------------------------
def _quiet_transformers() -> None:
    import transformers

    transformers.logging.set_verbosity_error()
    with contextlib.suppress(AttributeError):
        transformers.utils.logging.disable_progress_bar()


def _environment() -> dict[str, Any]:
    import torch
    import transformers

    try:
        loadavg = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        loadavg = "n/a"
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "loadavg_before": loadavg,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.engine",
        description="Throughput of generate vs TextIteratorStreamer vs nbstream, stop latency "
        "and load time.",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="interleaved rounds per model (default: 7)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a very short run (few tokens, 2 rounds) that checks the script end to end",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument(
        "--models",
        default="default,tiny",
        help="comma-separated subset of: default, tiny (default: both)",
    )
    parser.add_argument(
        "--no-control",
        action="store_true",
        help="skip the (1b) control (generate with no streamer on a worker thread)",
    )
    parser.add_argument(
        "--suppress-with-isin",
        action="store_true",
        help="suppress end/newline tokens with transformers' suppress_tokens (a torch.isin over "
        "the vocabulary every step) instead of a precomputed sequence_bias",
    )
    parser.add_argument(
        "--no-fresh-load", action="store_true", help="skip the fresh-subprocess load timing"
    )
    parser.add_argument(
        "--parts",
        action="store_true",
        help="also time nbstream's parts apart: (1b) with its stopping criterion, (1b) with "
        "its token buffer, and nbstream with alternatives=5 (on by default with --device cuda)",
    )
    parser.add_argument(
        "--device", default="cpu", help="where the models run: cpu (default) or cuda"
    )
    parser.add_argument(
        "--dtype",
        default=None,
        help="the models' weights type, e.g. float16 or bfloat16 (default: as stored)",
    )
    parser.add_argument(
        "--only",
        default=None,
        help="time only (1) and (3) and these (comma-separated; more rounds in the same time "
        f"for one question): any of {', '.join(ONLY_CHOICES)}, or none",
    )
    args = parser.parse_args(argv)
    if args.only is not None:
        names = [n.strip() for n in args.only.split(",") if n.strip() and n.strip() != "none"]
        wrong = [n for n in names if n not in ONLY_CHOICES]
        if wrong:
            parser.error(f"--only takes {', '.join(ONLY_CHOICES)} or none; got {wrong}")
        args.only = tuple(v for v in DISPLAY_ORDER if v in names)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = set(args.models) - {"default", "tiny"}
    if unknown or not args.models:
        parser.error(f"--models takes default and/or tiny, got {args.models}")
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.perf_counter()
    environment = _environment()
    _quiet_transformers()
    import torch

    import nbstream
    from nbstream.testing import tiny_model

    quick = args.quick
    if quick:
        plan = {"default": (8, 2), "tiny": (32, 2)}
        warmup, stop_trials, fresh_trials, cached_calls = 2, 1, 1, 3
    else:
        plan = {"default": (300, 7), "tiny": (1500, 7)}
        warmup, stop_trials, fresh_trials, cached_calls = 16, 5, 3, 5
    if args.rounds is not None:
        plan = {k: (tokens, args.rounds) for k, (tokens, _) in plan.items()}

    report: dict[str, Any] = {
        "environment": environment,
        "settings": {
            "quick": quick,
            "prompt": PROMPT,
            "plan": {k: {"new_tokens": t, "rounds": r} for k, (t, r) in plan.items()},
            "models": args.models,
            "control": not args.no_control,
            "suppression": "suppress_tokens" if args.suppress_with_isin else "sequence_bias",
        },
        "cases": [],
        "problems": [],
    }

    placement: dict[str, Any] = {}
    if args.device != "cpu":
        placement["device_map"] = args.device
    if args.dtype:
        placement["dtype"] = getattr(torch, args.dtype)
    report["settings"].update(device=args.device, dtype=args.dtype)
    log("loading the default model ...")
    start = time.perf_counter()
    model, tokenizer = nbstream.load_model(**placement)
    first_load = time.perf_counter() - start
    cached = cached_load_s(cached_calls)

    cases: list[Case] = []
    if "default" in args.models:
        tokens, rounds = plan["default"]
        cases.append(
            Case(
                "default",
                f"default (SmolLM2-135M, {tokens} tokens)",
                model,
                tokenizer,
                tokens,
                rounds,
                threads=None,
            )
        )
    if "tiny" in args.models:
        tokens, rounds = plan["tiny"]
        tiny, tiny_tokenizer = tiny_model(one_line=True)
        if placement:
            tiny = tiny.to(device=args.device, dtype=placement.get("dtype"))
        cases.append(
            Case(
                "tiny",
                f"tiny (2-layer, one line, {tokens} tokens, 1 thread)",
                tiny,
                tiny_tokenizer,
                tokens,
                rounds,
                threads=1,
            )
        )

    for case in cases:  # the prompt where the model is
        case.inputs = {k: v.to(case.model.device) for k, v in case.inputs.items()}
    variants = VARIANTS if args.no_control else (*VARIANTS, *CONTROL_VARIANTS)
    if args.parts or args.device != "cpu":
        variants = (*VARIANTS, *CONTROL_VARIANTS, *PART_VARIANTS)
    if args.only is not None:
        variants = (GENERATE, NBSTREAM, *args.only)
    for case in cases:
        log(f"{case.key}: {case.rounds} rounds of {case.new_tokens} tokens ...")
        with torch_threads(case.threads), forced_length(case, isin=args.suppress_with_isin):
            result = throughput(case, warmup, variants)
            log(f"{case.key}: stop latency ...")
            stop = stop_latency(case, stop_trials, warm_chunks=5)
            threads = torch.get_num_threads()
        ratio = result["summary"][NBSTREAM]["median_ratio"]
        target = DEFAULT_THROUGHPUT_TARGET if case.key == "default" else THROUGHPUT_TARGET
        report["cases"].append(
            {
                "key": case.key,
                "label": case.label,
                "new_tokens": case.new_tokens,
                "prompt_tokens": case.prompt_len,
                "torch_threads": threads,
                "throughput": result,
                "throughput_target": target,
                "throughput_ok": ratio >= target,
                "stop_latency": stop,
            }
        )
        report["problems"].extend(result["problems"])
        report["problems"].extend(stop["problems"])

    load: dict[str, Any] = {"cached_ms": cached * 1000, "first_in_process_s": first_load}
    if not args.no_fresh_load:
        log(f"fresh load_model() in {fresh_trials} subprocess(es) ...")
        load["fresh"] = fresh_load(fresh_trials, split=not quick)
    report["load"] = load
    report["elapsed_s"] = time.perf_counter() - began
    report["targets"] = {
        "throughput": {c["key"]: c["throughput_ok"] for c in report["cases"]},
        "cpu_per_token": {
            c["key"]: c["throughput"]["summary"][NBSTREAM]["median_cpu_ratio"] >= CPU_TARGET
            for c in report["cases"]
        },
        "stop_latency": {c["key"]: c["stop_latency"].get("meets_target") for c in report["cases"]},
        "fresh_load": load["fresh"]["meets_target"] if "fresh" in load else None,
    }

    text = render(report)
    report["markdown"] = text
    print(text)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        log(f"wrote {args.json}")
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
