"""Pull benchmark: a view in a host that drops what the kernel sends unasked, against push.

Runs a real ipykernel and headless Chromium through the Colab-like router of the front-end
tests (``tests/frontend/colab_router.py``, imported), and compares, round by round
(interleaved; each figure is the median of the per-round ratios, with their spread, since
single timings on a shared machine are noisy):

* click on Run -> first visible text in ``.nbstream-output``, in ``strict`` routing (the view
  pulls) against ``all`` (every message delivered, as JupyterLab does: the view is pushed
  to), with a model that decodes at a CPU's cadence (the tiny test model with a sleep of
  ``--step-ms`` in each forward pass; the default model takes ~70 ms a token here). Each
  strict round also checks that the view's whole answer equals ``w.result``;
* pulling's cost to the kernel: the kernel process's CPU time per token (``time.process_time``,
  all its threads, from ``generate`` to the run's end) of a run of the tiny model at full
  speed (one torch thread) that a view pulls, against one that a view is pushed to. CPU
  time, not tokens per second: on a shared machine a run's wall-clock speed measures
  whatever else runs on its cores (here also the Chromium and the router that the pulls keep
  busy), so the wall-clock ratio is printed too, but only as that;
* the kernel's CPU time per pull (ipykernel's dispatch and the answer, measured over bursts
  of pulls sent to an idle widget), and what the pulls of each pulled run cost at that
  price, as a share of that run's CPU time: the same cost estimated without comparing two
  runs.

Targets (issue 38): first text within 2x of the push path's; pulling costs <= 5%.

Usage (from the repository root)::

    python -m benchmarks.pull              # 7 rounds of each (about 6 minutes here)
    python -m benchmarks.pull --rounds 3   # a quicker look (the spread says how much)
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from playwright.sync_api import sync_playwright

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests" / "frontend"))

import colab_router as cr  # noqa: E402  (the test harness, imported, not copied)

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

_MODELS = """
import torch
torch.set_num_threads(1)  # one thread: a steadier figure on a shared machine
_m, _tok = tiny_model(one_line=True)
paced = type(_m)(_m.config)
paced.load_state_dict(_m.state_dict())
paced.eval()
paced.generation_config = _m.generation_config
paced.register_forward_hook(lambda *_: time.sleep({step_s}))
# name -> CPU seconds from generate() to the run's end: the kernel's, and its run thread's
# (the done callback runs on that thread, which each run starts afresh).
_cpu = {{}}

def _timed_generate(name, w, prompt):
    start = time.process_time()
    run = w.generate(prompt)
    run.add_done_callback(
        lambda _: _cpu.__setitem__(name, [time.process_time() - start, time.thread_time()])
    )
"""

# A widget with a finished run, for the price of a pull.
_IDLE = """
_priced = StreamWidget(*tiny_model(one_line=True), max_new_tokens=40)
_ = _priced.generate("Name two colors.")
_priced.wait()
"""

# Click on Run, then the page's time of the first text in the output (ms after the click).
_CLICK_TO_TEXT = """async (host) => {
  const root = document.querySelectorAll('.host')[host].querySelector('.nbstream');
  const out = root.querySelector('.nbstream-output');
  const t0 = performance.now();
  root.querySelector('.nbstream-run').click();
  while (!out.textContent.trim()) await new Promise((r) => setTimeout(r, 2));
  return performance.now() - t0;
}"""


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def _serving(folder: Path) -> Iterator[str]:
    """Serve ``folder`` on 127.0.0.1 (the routed page and the bundles); yields its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=folder))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _view(router: cr.ColabRouter, page: Any, code: str) -> tuple[int, Any]:
    before = page.locator(".host").count()
    router.execute(code)
    root = page.locator(".host").nth(before).locator(".nbstream")
    root.wait_for(timeout=30_000)
    return before, root


def _ended(page: Any, root: Any) -> str:
    root.locator('.nbstream-badge[data-status="complete"]').wait_for(timeout=120_000)
    page.wait_for_timeout(300)  # the last frame drawn
    return root.locator(".nbstream-output").inner_text()


def _first_text(router: cr.ColabRouter, page: Any, name: str, tokens: int) -> tuple[float, bool]:
    """One click -> first text (ms) and whether the whole answer equals ``w.result``."""
    host, root = _view(
        router, page, f"{name} = StreamWidget(paced, _tok, max_new_tokens={tokens})\n{name}"
    )
    page.wait_for_timeout(2000)  # past the probe's deadline: a strict view pulls by now
    root.locator(".nbstream-prompt").fill("Name two colors.")
    ms = page.evaluate(_CLICK_TO_TEXT, host)
    shown = _ended(page, root)
    return ms, shown.strip() == str(router.eval(f"{name}.result")).strip()


def _run_cost(router: cr.ColabRouter, page: Any, name: str, tokens: int) -> dict[str, float]:
    """A full-speed run that a view follows (pushed or pulled): its kernel CPU and speed."""
    code = f"{name} = StreamWidget(*tiny_model(one_line=True), max_new_tokens={tokens})\n{name}"
    _, root = _view(router, page, code)
    page.wait_for_timeout(2000)
    pulls = _pulls(router)
    router.execute(f'_timed_generate("{name}", {name}, "Name two colors.")')
    _ended(page, root)
    pulls = _pulls(router) - pulls
    cpu = None
    for _ in range(50):  # the done callback runs on the run's thread, just after its end
        if (cpu := router.eval(f'_cpu.get("{name}")')) is not None:
            break
        page.wait_for_timeout(100)
    if cpu is None:
        raise RuntimeError(f"{name}: the run's done callback never came")
    made = int(router.eval(f'{name}.metrics["tokens"]'))
    speed = float(router.eval(f'{name}.metrics["tokens_per_s"]'))
    kernel, worker = cpu
    return {
        "cpu_ms_per_token": kernel * 1000 / made,
        # Everything but the model's own work: the comm, the feed, ipykernel's threads.
        "rest_ms_per_token": (kernel - worker) * 1000 / made,
        "cpu_s": kernel,
        "tokens_per_s": speed,
        "pulls_per_s": pulls * speed / made,
        "pulls": pulls,
    }


def _pulls(router: cr.ColabRouter) -> int:
    return sum(1 for m in router.page_sent if m.get("type") == "pull")


def _cpu_per_pull(router: cr.ColabRouter, pulls: int, bursts: int) -> list[float]:
    """The kernel's CPU ms per pull, per burst of ``pulls`` sent to an idle widget.

    Each pull asks from the middle of the run's text (its answer carries a delta, as a
    running view's does) and holds the latest version (no traits), less a burst of none.
    """
    router.execute(_IDLE, timeout=120)
    comm = router.eval("_priced.comm.comm_id")
    run_id, length = router.eval("[_priced.run_id, len(_priced.run.partial_text)]")
    pull = {"type": "pull", "view": "priced", "run_id": run_id, "text": length // 2}
    pull |= {"tokens": 0, "thinking": 0, "version": 10**9}

    def burst(n: int) -> float:
        router.execute("_c0 = time.process_time()")
        for _ in range(n):
            router.send(comm, pull)
        router.execute("_c1 = time.process_time()")  # handled after every pull before it
        return float(router.eval("_c1 - _c0"))

    out = []
    for _ in range(bursts):
        out.append((burst(pulls) - burst(0)) * 1000 / pulls)
    return out


def _spread(values: list[float], fmt: str = "{:.3f}") -> str:
    """The median, then the range, of ``values``."""
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return f"{fmt.format(statistics.median(values))} (range {low} to {high}, n={len(values)})"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures (and a JSON line)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--step-ms", type=float, default=60.0)
    parser.add_argument("--tokens", type=int, default=40, help="of the paced runs")
    parser.add_argument("--fast-tokens", type=int, default=1500, help="of the full-speed runs")
    parser.add_argument("--pulls", type=int, default=200, help="in each burst priced")
    args = parser.parse_args(argv)
    router = cr.ColabRouter().start()
    router.execute(_MODELS.format(step_s=args.step_ms / 1000), timeout=120)
    rounds: list[dict[str, Any]] = []
    try:
        with _serving(REPO_ROOT) as server, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            for k in range(args.rounds):
                round_: dict[str, Any] = {}
                for mode in ("all", "strict") if k % 2 else ("strict", "all"):
                    router.mode = mode
                    page = browser.new_page()
                    router.attach(page, server)
                    name = f"w_{mode}_{k}"
                    ms, equal = _first_text(router, page, name, args.tokens)
                    round_[mode] = {"first_ms": ms, "equal": equal}
                    round_[mode] |= _run_cost(router, page, name + "_fast", args.fast_tokens)
                    page.close()
                rounds.append(round_)
                print(json.dumps({"round": k, **round_}), flush=True)
            browser.close()
        per_pull = _cpu_per_pull(router, args.pulls, bursts=max(3, args.rounds // 2))
    finally:
        router.stop()
    _report(rounds, per_pull)
    return 0


def _report(rounds: list[dict[str, Any]], per_pull: list[float]) -> None:
    """Print the figures of ``rounds`` (each a ``strict`` and an ``all`` run) and the JSON."""

    def ratio(key: str) -> list[float]:
        return [r["strict"][key] / r["all"][key] for r in rounds]

    first, cpu, speed = ratio("first_ms"), ratio("cpu_ms_per_token"), ratio("tokens_per_s")
    price_s = statistics.median(per_pull) / 1000
    pulled = [r["strict"] for r in rounds]
    share = [p["pulls"] * price_s / p["cpu_s"] for p in pulled]
    rate = [p["pulls_per_s"] for p in pulled]
    equal = [p["equal"] for p in pulled]
    cost = [(c - 1) * 100 for c in cpu]
    # Beside the run's thread only: what pulling adds to the comm and ipykernel's threads.
    rest = [
        (r["strict"]["rest_ms_per_token"] - r["all"]["rest_ms_per_token"])
        / r["all"]["cpu_ms_per_token"]
        * 100
        for r in rounds
    ]
    print(
        f"click -> first text, pulled (strict) / pushed: {_spread(first, '{:.2f}x')} (target <= 2x)"
    )
    print(
        f"kernel CPU per token, pulled / pushed: {_spread(cpu)}; "
        f"pulling's cost {_spread(cost, '{:+.1f}%')} (target <= 5%)"
    )
    print(
        "the same beside the run's own thread (the comm, the feed, ipykernel), pulled - "
        f"pushed, per token, as a share of a pushed run's: {_spread(rest, '{:+.1f}%')}"
    )
    print(
        f"kernel CPU per pull: {_spread(per_pull, '{:.2f} ms')}; "
        f"pulls while a run streams: {_spread(rate, '{:.1f}/s')}; "
        f"their share of the run's kernel CPU: {_spread([x * 100 for x in share], '{:.1f}%')}"
    )
    print(
        f"wall-clock tokens/s, pulled / pushed: {_spread(speed)} "
        "(moves with the machine's load and the browser's work: not the cost)"
    )
    print(f"whole answer equal to w.result in strict routing: {sum(equal)}/{len(equal)}")
    figures = {"first_text_ratio": statistics.median(first), "cpu_ratio": statistics.median(cpu)}
    figures |= {"cost_beside_run": statistics.median(rest)}
    figures |= {"cpu_ms_per_pull": statistics.median(per_pull), "pull_share": share}
    print(json.dumps({**figures, "rounds": rounds}))


if __name__ == "__main__":
    raise SystemExit(main())
