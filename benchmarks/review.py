"""Review figures: the engine's promises under faults and races, measured as they are now.

Each figure is measured on the tiny random model (:mod:`nbstream.testing`) or on a small
``http.server`` on a loopback port; nothing is downloaded and the default model's weights
are never loaded.

1. Memory: KV caches and logits tensors still reachable, after ``gc.collect()``, from 20
   kept runs that failed (an exception raised inside a forward pass) and 20 complete ones.
2. A concurrent ``Endpoint``'s queue table: its size before and after 100 runs.
3. ``run.distribution``: the share of the last stage's probability on the tokens that the
   model's ``sequence_bias`` bans, at each step of a short sampled run.
4. ``generation_config.min_p = 0.999``: whether a seeded sampled run equals transformers'
   own greedy decode, and the worst rank (in the raw logits) of a token it sampled.
5. A branch with many forced tokens: its ``tokens_per_s`` and ``ttft_s`` beside its
   parent's, and ``forced_tokens``; a stop string completed by a branch's forced tokens.
6. A resolver that takes 8 s: ``stop()`` to the run's end, and how long ``stream()`` takes
   to return while the server probe waits on it (the probe gives up after 5 s).
7. A 500 whose body is a gzip bomb (50 MiB inflated), with an API key set: time to fail
   and peak memory traced by ``tracemalloc``.
8. Fresh interpreters: a script whose run is stopped while a 20 s resolver hangs, and one
   that ends right after ``cw.wait()`` on a ``CompareWidget``: exit status, and time from
   the script's last line to the process's exit.

Not measured here: Stop while the notebook cell that started the run blocks needs a browser
and a kernel (``tests/browser``).

Usage::

    python -m benchmarks.review                 # 3 repetitions of the timed figures
    python -m benchmarks.review --quick         # 1 repetition (the tests run this)
    python -m benchmarks.review --json review.json

The Markdown report goes to stdout, progress to stderr; exit status 1 only when the run
itself is invalid (an injected failure that did not fail a run, a script that timed out).
"""

from __future__ import annotations

import argparse
import copy
import gc
import gzip
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import tracemalloc
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from benchmarks.engine import _environment, _quiet_transformers, log

TIMEOUT_S = 120.0
KEPT = 20
QUEUE_RUNS = 100
SLOW_HOST = "slow.test"
# The tiny model is nearly flat: on some prompts two tokens pass min_p = 0.999 at a step and
# sampling rightly parts from greedy; on this one (the warper test's) only the favourite does.
MIN_P_PROMPT = "Hello there"
API_KEY = "sk-Wq8Zt3Vb7Nx2Lp5Rk9Jd"  # a made-up key: the scrubber has something to find
BOMB = gzip.compress(b"a" * (50 * 2**20), 9)
SSE = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}\n\n'


# -- a loopback server -------------------------------------------------------------------
class _Handler(BaseHTTPRequestHandler):
    """``/bomb/...``: a 500 with a gzip bomb body; anything else: a one-event answer."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.send_error(404)  # no model listing: the probe finds a generic server

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        bomb = self.path.startswith("/bomb/")
        self.send_response(500 if bomb else 200)
        if bomb:
            self.send_header("Content-Encoding", "gzip")
        else:
            self.send_header("Content-Type", "text/event-stream")
        body = BOMB if bomb else SSE
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def serving() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def slow_resolver(seconds: float) -> Iterator[None]:
    """``socket.getaddrinfo`` takes ``seconds`` for :data:`SLOW_HOST`, then gives loopback."""
    real = socket.getaddrinfo

    def slow(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host in (SLOW_HOST, SLOW_HOST.encode()):
            time.sleep(seconds)
            host = "127.0.0.1"
        return real(host, *args, **kwargs)

    socket.getaddrinfo = slow
    try:
        yield
    finally:
        socket.getaddrinfo = real


def spread(values: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(values), "max": max(values), "samples": values}


# -- 1. memory ---------------------------------------------------------------------------
def memory(model: Any, tokenizer: Any, problems: list[str]) -> dict[str, Any]:
    import nbstream

    refs: list[tuple[str, weakref.ref[Any]]] = []
    fail = [False]

    def hook(module: Any, args: Any, kwargs: Any, output: Any) -> None:
        cache = getattr(output, "past_key_values", None)
        if cache is not None:
            refs.append(("cache", weakref.ref(cache)))
        refs.append(("logits", weakref.ref(output.logits)))
        if fail[0] and kwargs["input_ids"].shape[1] == 1:  # a decode step: the cache is full
            raise RuntimeError("CUDA out of memory (injected)")

    def alive() -> dict[str, int]:
        gc.collect()
        counts = {"cache": 0, "logits": 0}
        for kind, ref in refs:
            counts[kind] += ref() is not None
        refs.clear()
        return counts

    def kept(failing: bool) -> dict[str, Any]:
        fail[0] = failing
        runs, caught = [], []
        for _ in range(KEPT):
            run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=6)
            try:
                run.wait(TIMEOUT_S)
            except nbstream.GenerationFailed as error:
                caught.append(error)  # kept too, as a user who caught it would
            runs.append(run)
        del run
        statuses = sorted({r.status for r in runs})
        return {"runs": len(runs), "statuses": statuses, "caught": len(caught), **alive()}

    handle = model.register_forward_hook(hook, with_kwargs=True)
    try:
        failed = kept(True)
        complete = kept(False)
    finally:
        handle.remove()
    log(f"memory: failed {failed}, complete {complete}")
    if failed["caught"] != KEPT:
        problems.append(f"the injected failure failed {failed['caught']} of {KEPT} runs")
    return {"failed": failed, "complete": complete}


# -- 2. the queue table ------------------------------------------------------------------
def queue_table(port: int) -> dict[str, Any]:
    import nbstream
    from nbstream import generation

    endpoint = nbstream.Endpoint(f"http://127.0.0.1:{port}/ok/v1", "m", concurrent=True)
    gc.collect()
    before = len(generation._queues) + len(generation._strong_queues)
    statuses = set()
    for _ in range(QUEUE_RUNS):
        run = nbstream.stream(endpoint, None, "Hi")
        run.wait_done(TIMEOUT_S)
        statuses.add(run.status)
    del run
    gc.collect()
    after = len(generation._queues) + len(generation._strong_queues)
    log(f"queue table: {before} -> {after}")
    return {"runs": QUEUE_RUNS, "before": before, "after": after, "statuses": sorted(statuses)}


# -- 3. banned mass ----------------------------------------------------------------------
def banned_mass(model: Any, tokenizer: Any) -> dict[str, Any]:
    import nbstream

    banned = [ids[0] for ids, v in model.generation_config.sequence_bias if v == float("-inf")]
    settings = {"temperature": 1.0, "top_k": 0, "top_p": 0.9, "seed": 2}
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=6, **settings)
    run.wait(TIMEOUT_S)
    masses, stage = [], ""
    for step in range(len(run.token_ids)):
        d = run.distribution(step)
        stage = d.stages[-1]
        masses.append(float(d.probs[stage][banned].sum()))
    log(f"banned mass: {masses}")
    return {"banned_tokens": len(banned), "stage": stage, "per_step": masses, "max": max(masses)}


# -- 4. min_p ----------------------------------------------------------------------------
def min_p(model: Any, tokenizer: Any) -> dict[str, Any]:
    import torch

    import nbstream

    steps, seed = 8, 1
    own = model.generation_config
    banned = [ids[0] for ids, v in own.sequence_bias if v == float("-inf")]
    model.generation_config = copy.deepcopy(own)
    model.generation_config.min_p = 0.999
    try:
        run = nbstream.stream(
            model, tokenizer, MIN_P_PROMPT, max_new_tokens=steps, temperature=1.0, seed=seed
        )
        run.wait(TIMEOUT_S)
        ids = tokenizer(run.prompt_text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        decoded = {}
        for name, options in (("greedy", {"do_sample": False}), ("sampled", {"do_sample": True})):
            torch.manual_seed(seed)
            with torch.no_grad():
                out = model.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=steps,
                    temperature=1.0,
                    **options,
                )
            decoded[name] = out[0, ids.shape[-1] :].tolist()
        ranks, kept = [], []
        for step, token in enumerate(run.token_ids):
            logits = run.step_logits(step)
            logits[banned] = float("-inf")  # the model's own bans: never candidates
            probs = logits.softmax(-1)
            ranks.append(int((logits > logits[token]).sum()))
            kept.append(int((probs >= 0.999 * probs.max()).sum()))
    finally:
        model.generation_config = own
    sampled = run.record is not None and run.record["settings"].get("do_sample") is True
    result = {
        "prompt": MIN_P_PROMPT,
        "steps": len(run.token_ids),
        "sampled": sampled,
        "equals_greedy": run.token_ids == decoded["greedy"],
        "equals_transformers_sampling": run.token_ids == decoded["sampled"],
        "worst_rank": max(ranks),
        "most_kept_by_min_p": max(kept),
    }
    log(f"min_p: {result}")
    return result


# -- 5. branches -------------------------------------------------------------------------
def branch_metrics(model: Any, tokenizer: Any) -> dict[str, Any]:
    import nbstream

    parent = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=120)
    parent.wait(TIMEOUT_S)
    branch = parent.branch(110, parent.token_ids[110] + 1)
    branch.wait(TIMEOUT_S)
    keys = ("tokens", "forced_tokens", "tokens_per_s", "ttft_s")
    return {
        "parent": {k: parent.metrics[k] for k in keys},
        "branch": {k: branch.metrics[k] for k in keys},
    }


def stop_in_forced(model: Any, tokenizer: Any) -> dict[str, Any]:
    import nbstream

    (newline,) = tokenizer.encode("\n", add_special_tokens=False)
    parent = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=200, stop=["\n"])
    parent.wait(TIMEOUT_S)
    branch = parent.branch(2, newline)
    branch.wait(TIMEOUT_S)
    return {
        "max_new_tokens": 200,
        "status": branch.status,
        "finish_reason": branch.metrics["finish_reason"],
        "token_ids": len(branch.token_ids),
    }


# -- 6. a slow resolver ------------------------------------------------------------------
def slow_dns(port: int) -> dict[str, Any]:
    import nbstream

    url = f"http://{SLOW_HOST}:{port}/ok/v1"
    with slow_resolver(8.0):
        run = nbstream.stream(nbstream.Endpoint(url, "m", server="vllm"), None, "Hi")
        time.sleep(1.0)
        run.stop()
        began = time.perf_counter()
        run.wait_done(TIMEOUT_S)
        stop_s = time.perf_counter() - began
        status = run.status
        began = time.perf_counter()
        probed = nbstream.stream(nbstream.Endpoint(url, "m"), None, "Hi")
        stream_s = time.perf_counter() - began
        probed.stop()
        probed.wait_done(TIMEOUT_S)
    log(f"8 s resolver: stop {stop_s:.3f} s ({status}), stream() {stream_s:.2f} s")
    return {"stop_s": stop_s, "status": status, "stream_s": stream_s}


# -- 7. a gzip bomb on an error ----------------------------------------------------------
def gzip_bomb(port: int) -> dict[str, Any]:
    import nbstream

    endpoint = nbstream.Endpoint(f"http://127.0.0.1:{port}/bomb/v1", "m", api_key=API_KEY)
    tracemalloc.start()
    try:
        began = time.perf_counter()
        run = nbstream.stream(endpoint, None, "Hi")
        run.wait_done(TIMEOUT_S)
        fail_s = time.perf_counter() - began
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    leaked = API_KEY in str(run.error) or API_KEY in json.dumps(run.record, default=str)
    log(f"gzip bomb: {run.status} after {fail_s:.2f} s, peak {peak / 2**20:.1f} MiB")
    return {"fail_s": fail_s, "status": run.status, "peak_mib": peak / 2**20, "key_shown": leaked}


# -- 8. scripts in fresh interpreters ----------------------------------------------------
_HANG_SCRIPT = """\
import socket, time
import nbstream
def hang(*args, **kwargs):
    time.sleep(20)
socket.getaddrinfo = hang
endpoint = nbstream.Endpoint("http://slowhost.invalid:9/v1", "m", server="vllm")
run = nbstream.stream(endpoint, None, "Hi")
time.sleep(0.5)
run.stop()
print(run.join(30), run.status)
print(time.time(), flush=True)
"""

_COMPARE_SCRIPT = """\
import time
import nbstream
from nbstream.testing import tiny_model
model, tokenizer = tiny_model()
cw = nbstream.CompareWidget(model, tokenizer, "Name two colors.", max_new_tokens=40,
                            settings=[{"temperature": 0}, {"temperature": 5.0, "seed": 3}])
cw.generate()
print(all(r is not None for r in cw.wait()), list(cw.statuses))
print(time.time(), flush=True)
"""


def script_exit(source: str, problems: list[str]) -> dict[str, Any]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    began = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-c", source], capture_output=True, text=True, env=env, timeout=120
        )
    except subprocess.TimeoutExpired:
        problems.append("a script did not exit within 120 s")
        return {"status": None, "exit_s": None, "total_s": None, "said": ""}
    exited = time.time()
    total = time.perf_counter() - began
    lines = done.stdout.strip().splitlines()
    try:
        exit_s: float | None = exited - float(lines[-1])
    except (IndexError, ValueError):
        exit_s = None
    said = lines[0] if lines and done.returncode == 0 else done.stderr.strip()[-300:]
    return {"status": done.returncode, "exit_s": exit_s, "total_s": total, "said": said}


def scripts(reps: int, problems: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, source in (("hung_lookup", _HANG_SCRIPT), ("compare", _COMPARE_SCRIPT)):
        samples = []
        for index in range(reps):
            log(f"script {name} {index + 1}/{reps} ...")
            samples.append(script_exit(source, problems))
        exits = [s["exit_s"] for s in samples if s["exit_s"] is not None]
        out[name] = {
            "statuses": [s["status"] for s in samples],
            "said": [s["said"] for s in samples],
            "exit_s": spread(exits) if exits else None,
            "total_s": spread([s["total_s"] for s in samples if s["total_s"] is not None]),
        }
    return out


# -- the report --------------------------------------------------------------------------
def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:,.1f} ms"


def _median(samples: list[dict[str, Any]], field: str) -> str:
    v = spread([x[field] for x in samples])
    return f"{v['median']:.3f} s (max {v['max']:.3f} s)"


def _statuses(samples: list[dict[str, Any]]) -> str:
    return ", ".join(sorted({x["status"] for x in samples}))


def render(r: dict[str, Any]) -> str:
    m, q, b, mp = r["memory"], r["queue_table"], r["banned_mass"], r["min_p"]
    sf, dns, bomb = r["stop_in_forced"], r["slow_dns"], r["gzip_bomb"]
    # The branch's figures: the median of the repetitions, field by field.
    parent, branch = (
        {key: statistics.median(x[side][key] for x in r["branch"]) for key in r["branch"][0][side]}
        for side in ("parent", "branch")
    )
    failed, complete = m["failed"], m["complete"]
    yes = {True: "yes", False: "no"}
    rows = [
        (
            "1",
            f"KV caches, logits tensors alive after gc: {KEPT} kept failed runs "
            f"({', '.join(failed['statuses'])}, exception raised in a forward pass)",
            f"{failed['cache']} caches, {failed['logits']} logits",
        ),
        (
            "1",
            f"same, {KEPT} kept complete runs ({', '.join(complete['statuses'])})",
            f"{complete['cache']} caches, {complete['logits']} logits",
        ),
        (
            "2",
            f"concurrent endpoint's queue table, before / after {q['runs']} runs "
            f"({', '.join(q['statuses'])})",
            f"{q['before']} / {q['after']} entries",
        ),
        (
            "3",
            f"probability of `distribution(step).probs['{b['stage']}']` (the last stage) on "
            f"the {b['banned_tokens']} tokens sequence_bias bans, worst of {len(b['per_step'])}"
            " steps",
            f"{b['max']:.4%}",
        ),
        (
            "4",
            f"min_p = 0.999: seeded sampled run ({mp['steps']} tokens, {mp['prompt']!r}) "
            "equals transformers' greedy decode",
            f"{yes[mp['equals_greedy']]} (and transformers' seeded sampling: "
            f"{yes[mp['equals_transformers_sampling']]})",
        ),
        (
            "4",
            "same run: worst rank of a sampled token (0 = the favourite, bans left out); "
            "most tokens min_p kept at a step",
            f"rank {mp['worst_rank']}; {mp['most_kept_by_min_p']} token(s)",
        ),
        (
            "5",
            f"parent: tokens_per_s, ttft_s ({parent['tokens']} tokens)",
            f"{parent['tokens_per_s']:,.0f} tok/s, {_ms(parent['ttft_s'])}",
        ),
        (
            "5",
            f"branch at step 110: tokens_per_s, ttft_s ({branch['tokens']} tokens, "
            f"forced_tokens {branch['forced_tokens']})",
            f"{branch['tokens_per_s']:,.0f} tok/s, {_ms(branch['ttft_s'])}",
        ),
        (
            "5",
            "stop string `\\n` forced at step 2 of a branch "
            f"(max_new_tokens {sf['max_new_tokens']})",
            f"{sf['status']}/{sf['finish_reason']} after {sf['token_ids']} tokens",
        ),
        ("6", f"8 s resolver: stop() → run ended ({_statuses(dns)})", _median(dns, "stop_s")),
        ("6", "8 s resolver: stream() returns (the probe's bound: 5 s)", _median(dns, "stream_s")),
        (
            "7",
            f"500 with a gzip bomb ({len(BOMB):,} B → 50 MiB), API key set: time to fail "
            f"({_statuses(bomb)})",
            _median(bomb, "fail_s"),
        ),
        (
            "7",
            "same: peak memory traced (tracemalloc)",
            f"{max(x['peak_mib'] for x in bomb):.1f} MiB; "
            f"key shown: {yes[any(x['key_shown'] for x in bomb)]}",
        ),
    ]
    labels = {
        "hung_lookup": "script, run stopped while a 20 s resolver hangs",
        "compare": "script ending right after `cw.wait()` (CompareWidget)",
    }
    for name, label in labels.items():
        s = r["scripts"][name]
        e = s["exit_s"]
        figure = "n/a" if e is None else f"{e['median']:.2f} s (max {e['max']:.2f} s)"
        rows.append(("8", f"{label}: exit status; last line → exit", f"{s['statuses']}; {figure}"))
    env = r["environment"]
    lines = [
        "# Review figures (`benchmarks/review.py`)",
        "",
        "Tiny model and loopback servers; timed figures: median of "
        f"{r['repetitions']} repetition(s). Load average {env.get('loadavg_before')}, "
        f"{env.get('cpus')} CPUs, {r['elapsed_s']:.0f} s in all.",
        "",
        "| item | measure | now |",
        "|---|---|---|",
        *(f"| {item} | {measure} | {now} |" for item, measure, now in rows),
        "",
        "Not measured here (item 9): Stop → `cancelled` while the cell that started the run "
        "blocks needs a browser and a kernel; see `tests/browser`.",
    ]
    if r["problems"]:
        lines += ["", "**Invalid run:** " + "; ".join(r["problems"])]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.review", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="1 repetition of the timed figures")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ["HF_HUB_OFFLINE"] = "1"
    reps = 1 if args.quick else 3
    _quiet_transformers()
    from nbstream.testing import tiny_model

    began = time.perf_counter()
    problems: list[str] = []
    model, tokenizer = tiny_model(one_line=True)
    report: dict[str, Any] = {"repetitions": reps}
    log("memory ...")
    report["memory"] = memory(model, tokenizer, problems)
    log("banned mass, min_p, branches ...")
    report["banned_mass"] = banned_mass(model, tokenizer)
    report["min_p"] = min_p(model, tokenizer)
    report["branch"] = [branch_metrics(model, tokenizer) for _ in range(reps)]
    report["stop_in_forced"] = stop_in_forced(model, tokenizer)
    with serving() as port:
        log("queue table ...")
        report["queue_table"] = queue_table(port)
        report["slow_dns"] = [slow_dns(port) for _ in range(reps)]
        report["gzip_bomb"] = [gzip_bomb(port) for _ in range(reps)]
    report["scripts"] = scripts(reps, problems)
    report["not_measured"] = ["Stop while the cell that started the run blocks: browser-only"]
    report["problems"] = problems
    report["elapsed_s"] = time.perf_counter() - began
    report["environment"] = _environment()
    text = render(report)
    report["markdown"] = text
    print(text)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
