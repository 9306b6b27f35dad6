"""Pull benchmark: a view in a host that drops what the kernel sends unasked, against push.

Runs a real ipykernel and headless Chromium through the Colab-like router of the front-end
tests (``tests/frontend/colab_router.py``, imported), and compares, round by round
(interleaved; the figure is the median of the per-round ratios, since single timings on a
shared machine are noisy):

* click on Run -> first visible text in ``.nbstream-output``, in ``strict`` routing (the view
  pulls) against ``all`` (every message delivered, as JupyterLab does: the view is pushed
  to), with a model that decodes at a CPU's cadence (the tiny test model with a sleep of
  ``--step-ms`` in each forward pass; the default model takes ~70 ms a token here). Each
  strict round also checks that the view's whole answer equals ``w.result``;
* the kernel's throughput (``metrics["tokens_per_s"]`` of a run of the tiny model at full
  speed) while a view pulls against while a view is pushed to: pulling's cost.

Targets (issue 38): first text within 2x of the push path's; pulling costs <= 5%.

Usage (from the repository root)::

    python -m benchmarks.pull              # 7 rounds of each (about 2 minutes)
    python -m benchmarks.pull --rounds 3   # a quicker look
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


def _throughput(router: cr.ColabRouter, page: Any, name: str, tokens: int) -> float:
    """tokens_per_s of a full-speed run that a view follows (pushed or pulled)."""
    code = f"{name} = StreamWidget(*tiny_model(one_line=True), max_new_tokens={tokens})\n{name}"
    _, root = _view(router, page, code)
    page.wait_for_timeout(2000)
    router.execute(f'_ = {name}.generate("Name two colors.")')
    _ended(page, root)
    return float(router.eval(f'{name}.metrics["tokens_per_s"]'))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures (and a JSON line)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--step-ms", type=float, default=60.0)
    parser.add_argument("--tokens", type=int, default=40, help="of the paced runs")
    parser.add_argument("--fast-tokens", type=int, default=1500, help="of the throughput runs")
    args = parser.parse_args(argv)
    router = cr.ColabRouter().start()
    router.execute(_MODELS.format(step_s=args.step_ms / 1000), timeout=120)
    rows: dict[str, list[Any]] = {"first_ms": [], "tokens_per_s": [], "equal": []}
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
                    speed = _throughput(router, page, name + "_fast", args.fast_tokens)
                    pulls = sum(1 for m in router.page_sent if m.get("type") == "pull")
                    round_[mode] = {"first_ms": ms, "tokens_per_s": speed, "pulls": pulls}
                    if mode == "strict":
                        rows["equal"].append(equal)
                    page.close()
                rows["first_ms"].append(round_["strict"]["first_ms"] / round_["all"]["first_ms"])
                rows["tokens_per_s"].append(
                    round_["strict"]["tokens_per_s"] / round_["all"]["tokens_per_s"]
                )
                print(json.dumps({"round": k, **round_}), flush=True)
            browser.close()
    finally:
        router.stop()
    first = statistics.median(rows["first_ms"])
    speed = statistics.median(rows["tokens_per_s"])
    print(
        f"click -> first text, pulled (strict) / pushed: median ratio {first:.2f}x (target <= 2x)"
    )
    print(
        f"throughput while pulled / while pushed: median ratio {speed:.3f} "
        f"(cost {max(0.0, 1 - speed) * 100:.1f}%, target <= 5%)"
    )
    print(
        f"whole answer equal to w.result in strict routing: "
        f"{sum(rows['equal'])}/{len(rows['equal'])}"
    )
    print(json.dumps({"first_text_ratio": first, "throughput_ratio": speed, **rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
