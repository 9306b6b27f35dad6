"""Page responsiveness of a prompt grid: a click on Stop with 30 cells streaming, against a
single StreamWidget streaming one answer.

Both run in headless Chromium on the front-end tests' static harness
(``tests/frontend/harness.html``) with a fake kernel in the page: the grid's is
``tests/frontend/grid_kernel.js`` (every streaming cell gets ``--chunk`` characters every
``--every-ms`` ms, all cells in one ``grid_delta`` a frame, as the kernel's feed sends them);
the single widget's sends one ``delta`` at the same pace. A Stop makes the fake kernel send no
more text for the stopped run and, ``--step-ms`` later (the decode step in flight when a real
run is stopped), say ``cancelled``. So the kernel's part is the same constant on both sides,
and what differs is the page: a busier page (30 cells drawing) would take longer to dispatch
the click, to send the stop, and to draw ``cancelled``.

Each trial streams for ``--warm-s`` seconds (every cell has text by then), clicks one Stop
with Playwright, and times, in the page's own clock, from the click event's timestamp (when
the input arrived, so waiting behind a long frame counts) to ``cancelled`` in the DOM
(a MutationObserver) and to the frame after it. It also times the page's own share: click to
the stop message reaching the kernel, plus the kernel's ``cancelled`` to the DOM. The grid
and the single widget alternate, trial by trial; the figures are medians with their spread,
and the ratio grid / single widget of the medians. Long tasks (over 50 ms, Chromium's
``longtask`` entries) while streaming are counted too.

Target (issue 42): a Stop acts within the same bound as a single widget's (the single
widget's Stop bound, benchmarks/widget.py: a decode step + 150 ms).

Usage::

    python -m benchmarks.grid_page              # 9 trials each
    python -m benchmarks.grid_page --trials 5 --step-ms 0
    python -m benchmarks.grid --page            # the same, after the grid's timing
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

REPO_ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
#: The single widget's Stop bound over a decode step (benchmarks/widget.py's STOP_SLACK_S).
STOP_SLACK_MS = 150.0

# What both sides record: the click event's timestamp, the stop message at the kernel, the
# kernel's `cancelled`, `cancelled` in the DOM and the frame after it, and long tasks.
_TIMING_JS = """
window.__t = {click: null, sent: null, confirm: null, dom: null, frame: null, longTasks: 0};
new PerformanceObserver((list) => { window.__t.longTasks += list.getEntries().length; })
  .observe({type: "longtask", buffered: false});
document.addEventListener("click", (e) => {
  if (window.__t.click === null && e.target.closest && e.target.closest("button")) {
    window.__t.click = e.timeStamp;
  }
}, true);
window.__watchCancelled = (el) => {
  const seen = () => {
    if (window.__t.dom !== null || el.getAttribute("data-status") !== "cancelled") return;
    window.__t.dom = performance.now();
    requestAnimationFrame(() => { window.__t.frame = performance.now(); });
  };
  new MutationObserver(seen).observe(el, {attributes: true, attributeFilter: ["data-status"]});
};
0;  // (a script whose value is a function would be called by page.evaluate)
"""

_GRID_JS = """async ([o]) => {
  const gk = await import("/tests/frontend/grid_kernel.js");
  const rows = Array.from({length: o.rows}, (_, i) => `Translate to French: phrase ${i}`);
  const columns = Array.from({length: o.cols}, (_, j) => `column ${j}`);
  const {model} = await gk.mountGrid({rows, columns});
  const kernel = new gk.FakeGridKernel(model, {chunk: o.chunk, everyMs: o.everyMs,
                                                stepMs: o.stepMs});
  const receive = kernel.receive.bind(kernel);
  kernel.receive = (msg) => { if (msg.type === "stop") window.__t.sent = performance.now();
                              receive(msg); };
  const changeMany = model.changeMany.bind(model);
  model.changeMany = (v) => {
    const t = window.__t;
    if (t.sent !== null && t.confirm === null) t.confirm = performance.now();
    changeMany(v);
  };
  window.kernel = kernel;
  kernel.start();
  const target = document.querySelectorAll(".nbstream-grid-row")[o.row]
    .querySelectorAll(".nbstream-grid-cell")[o.col];
  window.__watchCancelled(target);
}"""

_SINGLE_JS = """async ([o]) => {
  const i = await window.mount({status: "running", run_id: 1, metrics: {}});
  const model = window.views[i].model;
  let text = "", going = true;
  const t0 = performance.now();
  const timer = setInterval(() => {
    if (!going) return;
    const piece = `w:${text.length} `.padEnd(o.chunk, ".").slice(0, o.chunk);
    model.msg({type: "delta", run_id: 1, offset: text.length, text: piece,
               tokens: text.length / 4, elapsed_s: (performance.now() - t0) / 1000});
    text += piece;
  }, o.everyMs);
  const send = model.send.bind(model);
  model.send = (msg) => {
    send(msg);
    if (msg.type !== "stop") return;
    window.__t.sent = performance.now();
    going = false;
    setTimeout(() => {
      window.__t.confirm = performance.now();
      const metrics = {tokens: text.length / 4, elapsed_s: 1, finish_reason: "cancelled"};
      model.changeMany({status: "cancelled", metrics});
      clearInterval(timer);
    }, o.stepMs);
  };
  window.__watchCancelled(document.querySelector(".host .nbstream"));
}"""


@contextlib.contextmanager
def serving(folder: Path) -> Iterator[str]:
    """Serve ``folder`` on 127.0.0.1 while the block runs; yields the base URL."""

    class Quiet(SimpleHTTPRequestHandler):
        extensions_map = {**SimpleHTTPRequestHandler.extensions_map, ".js": "text/javascript"}  # noqa: RUF012

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def trial(browser: Any, url: str, kind: str, opts: dict[str, Any]) -> dict[str, Any]:
    """One Stop click on a streaming page (``kind``: "grid" or "single"); its timings in ms."""
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    try:
        page.goto(f"{url}/tests/frontend/harness.html")
        page.wait_for_function("window.__ready === true")
        page.evaluate(_TIMING_JS)
        page.evaluate(_GRID_JS if kind == "grid" else _SINGLE_JS, [opts])
        page.wait_for_timeout(opts["warm_s"] * 1000)
        long_before = page.evaluate("window.__t.longTasks")
        if kind == "grid":
            row, col = opts["row"], opts["col"]
            button = page.locator(".nbstream-grid-row").nth(row).locator(".nbstream-grid-stop")
            button.nth(col).click()
        else:
            page.locator(".nbstream-stop").click()
        page.wait_for_function("window.__t.frame !== null", timeout=10_000)
        t = page.evaluate("window.__t")
        chars = page.evaluate("document.querySelector('.host').innerText.length")
    finally:
        page.close()
    return {
        "kind": kind,
        "click_to_cancelled_ms": t["dom"] - t["click"],
        "click_to_frame_ms": t["frame"] - t["click"],
        "page_share_ms": (t["sent"] - t["click"]) + (t["dom"] - t["confirm"]),
        "click_to_sent_ms": t["sent"] - t["click"],
        "long_tasks_streaming": long_before,
        "chars_shown": chars,
    }


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure(trials: int, opts: dict[str, Any]) -> dict[str, Any]:
    """``trials`` Stop clicks on each side, alternating; medians, spreads and ratios."""
    from playwright.sync_api import sync_playwright

    runs: dict[str, list[dict[str, Any]]] = {"grid": [], "single": []}
    with serving(REPO_ROOT) as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for k in range(trials):
                for kind in ("grid", "single") if k % 2 == 0 else ("single", "grid"):
                    runs[kind].append(trial(browser, url, kind, opts))
                    print(json.dumps(runs[kind][-1]), file=sys.stderr, flush=True)
        finally:
            browser.close()
    keys = ("click_to_cancelled_ms", "click_to_frame_ms", "page_share_ms", "click_to_sent_ms")
    result: dict[str, Any] = {"options": opts, "trials": runs}
    for kind, found in runs.items():
        result[kind] = {key: _stats([r[key] for r in found]) for key in keys}
        result[kind]["long_tasks_streaming"] = sum(r["long_tasks_streaming"] for r in found)
    result["ratio"] = {
        key: result["grid"][key]["median"] / result["single"][key]["median"] for key in keys[:3]
    }
    bound = opts["step_ms"] + STOP_SLACK_MS
    result["bound_ms"] = bound
    result["within_bound"] = result["grid"]["click_to_frame_ms"]["max"] <= bound
    return result


def report(result: dict[str, Any]) -> str:
    opts = result["options"]
    lines = [
        f"## Page responsiveness: Stop with {opts['rows'] * opts['cols']} grid cells streaming, "
        "against one StreamWidget",
        "",
        f"Headless Chromium, static harness, fake kernel: {opts['chunk']} characters every "
        f"{opts['every_ms']} ms per streaming cell, `cancelled` {opts['step_ms']} ms after the "
        f"stop (a decode step); {len(result['trials']['grid'])} trials each, alternating.",
        "",
        "| ms (median, min to max) | grid | single widget | grid / single |",
        "| --- | --- | --- | --- |",
    ]
    names = {
        "click_to_cancelled_ms": "click -> `cancelled` in the DOM",
        "click_to_frame_ms": "click -> the frame after it",
        "page_share_ms": "the page's own share",
    }
    for key, name in names.items():
        g, s = result["grid"][key], result["single"][key]
        lines.append(
            f"| {name} | {g['median']:.1f} ({g['min']:.1f} to {g['max']:.1f}) | "
            f"{s['median']:.1f} ({s['min']:.1f} to {s['max']:.1f}) | {result['ratio'][key]:.2f} |"
        )
    lines += [
        "",
        f"Long tasks (> 50 ms) while streaming: grid {result['grid']['long_tasks_streaming']}, "
        f"single {result['single']['long_tasks_streaming']}.",
        f"Bound: the decode step + {STOP_SLACK_MS:.0f} ms = {result['bound_ms']:.0f} ms; the "
        f"grid's slowest click -> frame is within it: {result['within_bound']}.",
    ]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--trials", type=int, default=9)
    p.add_argument("--rows", type=int, default=10)
    p.add_argument("--cols", type=int, default=3)
    p.add_argument("--chunk", type=int, default=8, help="characters per cell per frame")
    p.add_argument("--every-ms", type=float, default=50.0, help="a frame of the kernel's feed")
    p.add_argument("--step-ms", type=float, default=60.0, help="the decode step in flight")
    p.add_argument("--warm-s", type=float, default=1.5, help="streaming before the click")
    p.add_argument("--json", type=Path, help="write the figures here too")
    return p


def options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "rows": args.rows, "cols": args.cols, "chunk": args.chunk, "everyMs": args.every_ms,
        "every_ms": args.every_ms, "stepMs": args.step_ms, "step_ms": args.step_ms,
        "warm_s": args.warm_s, "row": args.rows // 2, "col": args.cols // 2,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    result = measure(args.trials, options(args))
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
