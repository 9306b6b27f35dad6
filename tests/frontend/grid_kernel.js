// A fake kernel for a prompt grid's table (nbstream/static/grid.js) on the static harness
// (tests/frontend/harness.html): it mounts the table on the harness's FakeModel and plays the
// kernel's side of the protocol (nbstream/protocol.py: GridTableTraits, grid_delta,
// grid_reset, and the page's stop, open, run and sync). Used by
// tests/frontend/test_grid_frontend.py and benchmarks/grid.py (--page), so the test and the
// benchmark drive the page the same way.
//
// Each streaming cell gets `chunk` characters every `everyMs` ms, all cells in one
// `grid_delta` a frame, as nbstream/widgets/grid_feed.py sends them. A Stop ends the chosen
// cells' text at once (the run's Stop: no token after the step in flight) and, `stepMs` ms
// later (the decode step that was running), says `cancelled` in the `cells` trait; with
// `confirm: false` it never does (a kernel busy elsewhere: the page must not say cancelled).

/** A cell entry as the kernel's `cells` trait holds it. */
function entry(status, runId, tokens, elapsed, reason) {
  return { status, run_id: runId, tokens, elapsed_s: elapsed, finish_reason: reason, error: null };
}

/** Mount the grid's table; returns `{model, el, cleanup}` (also `window.grid`). */
async function mountGrid(state) {
  if (!document.querySelector("link[data-grid-css]")) {
    const link = document.createElement("link");
    link.rel = "stylesheet";
    link.href = "/nbstream/static/grid.css";
    link.dataset.gridCss = "1";
    document.head.append(link);
    await new Promise((r) => link.addEventListener("load", r, { once: true }));
  }
  const widget = (await import("/nbstream/static/grid.js")).default;
  const rows = state.rows ?? [];
  const columns = state.columns ?? [];
  const model = new window.FakeModel({
    cells: rows.map(() => columns.map(() => entry("idle", 0, null, null, null))),
    marks: rows.map(() => null),
    summary: "",
    opened: [],
    texts: [],
    replay: false,
    ...state,
  });
  const el = document.createElement("div");
  el.className = "host grid-host";
  document.body.append(el);
  const cleanup = await widget.render({ model, el });
  window.grid = { model, el, cleanup };
  return window.grid;
}

class FakeGridKernel {
  /**
   * @param {any} model the table's FakeModel
   * @param {{chunk?: number, everyMs?: number, stepMs?: number, confirm?: boolean}} [opts]
   */
  constructor(model, opts = {}) {
    this.model = model;
    this.chunk = opts.chunk ?? 8;
    this.everyMs = opts.everyMs ?? 50;
    this.stepMs = opts.stepMs ?? 0;
    this.confirm = opts.confirm ?? true;
    const cells = model.get("cells");
    this.texts = cells.map((row) => row.map(() => ""));
    this.streaming = cells.map((row) => row.map(() => false));
    this.stopMessages = [];
    this.timer = null;
    this.t0 = performance.now();
    const send = model.send.bind(model);
    model.send = (msg) => {
      send(msg);
      this.receive(msg);
    };
  }

  /** Every cell starts running (run 1) and streams. */
  start() {
    const cells = this.model.get("cells").map((row) => row.map(() => entry("running", 1, 0, 0, null)));
    this.streaming = cells.map((row) => row.map(() => true));
    this.model.changeMany({ cells, summary: "streaming" });
    this.timer = setInterval(() => this.frame(), this.everyMs);
  }

  /** One frame: every streaming cell's next piece, in one grid_delta. */
  frame() {
    const deltas = [];
    const elapsed = Math.round(performance.now() - this.t0) / 1000;
    this.streaming.forEach((row, i) =>
      row.forEach((going, j) => {
        if (!going) return;
        const offset = this.texts[i][j].length;
        const piece = `r${i}c${j}:${offset} `.padEnd(this.chunk, ".").slice(0, this.chunk);
        this.texts[i][j] += piece;
        const tokens = this.texts[i][j].length / 4;
        deltas.push({ row: i, col: j, run_id: 1, offset, text: piece, tokens, elapsed_s: elapsed });
      }),
    );
    if (deltas.length) this.model.msg({ type: "grid_delta", cells: deltas });
  }

  /** @param {any} msg what the page sent */
  receive(msg) {
    if (msg.type === "sync") {
      const cells = [];
      this.texts.forEach((row, i) => row.forEach((text, j) => cells.push({ row: i, col: j, run_id: 1, text })));
      setTimeout(() => this.model.msg({ type: "grid_reset", view: msg.view, cells }), 0);
    } else if (msg.type === "stop") {
      this.stopMessages.push(msg);
      this.stop(msg.row, msg.col);
    }
  }

  /** The run's Stop for the chosen cells: no more text; cancelled after the step in flight. */
  stop(row, col) {
    const chosen = [];
    this.streaming.forEach((r, i) =>
      r.forEach((going, j) => {
        if (going && (row === null || row === i) && (col === null || col === j)) chosen.push([i, j]);
      }),
    );
    for (const [i, j] of chosen) this.streaming[i][j] = false;
    if (!this.confirm) return;
    setTimeout(() => {
      const cells = this.model.get("cells").map((r) => r.slice());
      for (const [i, j] of chosen) cells[i][j] = entry("cancelled", 1, this.texts[i][j].length / 4, 1, "cancelled");
      this.model.changeMany({ cells });
    }, this.stepMs);
  }

  close() {
    clearInterval(this.timer);
  }
}

export { FakeGridKernel, entry, mountGrid };
