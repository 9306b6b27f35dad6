// nbstream — browser front end of a prompt grid's table (`GridTable`,
// nbstream/widgets/grid_view.py; an anywidget): a prompt per row, and per column each cell's
// state, figures and text as it streams (grid_cell.js), where a row's answers part, Stop for a
// cell, a row or every cell, Run all, and Open, which shows a cell in full below the table
// (a StreamWidget view the kernel puts there, with the token views: stream.js).
//
// The text comes as one `grid_delta` message a frame for every cell that has new text (each
// from its own offset, never the whole text again), and a `grid_reset` answers this view's
// `sync` with every cell's text so far; a view is re-created from the traits and that reset
// alone. The page draws at most once per animation frame, only the cells that changed.
//
// Built by js/build.mjs into nbstream/static/grid.js (ESM, minified).
//
// ---------------------------------------------------------------------------
// Synced traits and messages: GridTableTraits, GridTableMessage and GridTableRequest of
// protocol.d.ts, which nbstream/protocol.py writes (the class `GridTable`,
// nbstream/widgets/grid_view.py).
// ---------------------------------------------------------------------------

/** @typedef {import("./protocol.js").GridTableTraits} GridTableTraits */
/** @typedef {import("./protocol.js").GridTableRequest} GridTableRequest */
/** @typedef {import("./model.js").Model<GridTableTraits, GridTableRequest>} GridModel */

import { announcer } from "./announce.js";
import { h } from "./dom.js";
import { GridCell, cellButton } from "./grid_cell.js";
import { PAGE_ID, VERSION } from "./page.js";
import { ACTIVE_PULL_MS, IDLE_PULL_MS, pullWhenUnpushed } from "./pull.js";
import { ACTIVE } from "./status.js";
import { newViewId, viewScope } from "./view_scope.js";

/** How long a sync waits for its reset before another may be sent (a gap in a cell's text). */
const SYNC_RETRY_MS = 1500;

/** The header: the summary line, Run all and Stop all. */
function gridHeader() {
  const summary = h("span", "nbstream-grid-summary");
  const runAll = cellButton("nbstream-grid-run-all", "\u25B6", "Run all", "Run all", "Run every cell that is not going");
  const stopAll = cellButton("nbstream-grid-stop-all", "\u25A0", "Stop all", "Stop all", "Stop every cell");
  const bar = h("div", "nbstream-grid-bar");
  const buttons = h("span", "nbstream-grid-bar-buttons");
  buttons.append(runAll, stopAll);
  bar.append(summary, buttons);
  return { bar, summary, runAll, stopAll };
}

/** The table of one view: its cells, its rows' Stop buttons, and what it sends. */
class GridView {
  /** @param {GridModel} model @param {HTMLElement} el */
  constructor(model, el) {
    this.model = model;
    this.viewId = newViewId();
    this.scope = viewScope(model);
    this.root = h("div", "nbstream nbstream-grid", { "data-version": VERSION, role: "group", "aria-label": "Prompt grid" });
    this.header = gridHeader();
    this.scroller = h("div", "nbstream-grid-scroll");
    this.root.append(this.header.bar, this.scroller);
    el.append(this.root);
    /** @type {GridCell[][]} */
    this.cells = [];
    /** @type {HTMLButtonElement[]} */
    this.rowStops = [];
    /** @type {Set<GridCell>} */
    this.dirty = new Set();
    this.lastSync = 0;
    this.frames = this.scope.frames(() => this.draw());
    this.announce = announcer(this.root, this.scope);
    this.wasActive = false;
    this.build();
    this.listen();
    // Where the kernel's pushes never arrive (Colab), the same messages, pulled: each
    // cell's run and text length held, answered with each cell's rest (PROTOCOL.md, Pulling).
    pullWhenUnpushed(this.scope, model, {
      viewId: this.viewId,
      root: this.root,
      held: () => ({ cells: this.cells.map((row) => row.map((c) => [c.live.runId, c.live.cpLen])) }),
      deliver: (msg) => this.receive(msg),
      resetType: "grid_reset",
      activity: {
        event: "change:cells",
        active: () => this.active(),
        pause: () => (this.active() ? ACTIVE_PULL_MS : IDLE_PULL_MS),
      },
    });
    this.sync();
  }

  /** Whether a cell is queued or running (the `cells` trait). */
  active() {
    const entries = this.model.get("cells") ?? [];
    return entries.some((row) => row.some((c) => ACTIVE.has(c.status)));
  }

  /** The table from `rows` and `columns` (each cell then from `cells`, `marks`, `texts`). */
  build() {
    const rows = this.model.get("rows") ?? [];
    const columns = this.model.get("columns") ?? [];
    const table = h("table", "nbstream-grid-table");
    const caption = h("caption", "nbstream-grid-caption");
    caption.textContent = `${rows.length} prompts \u00d7 ${columns.length} columns`;
    const headRow = h("tr");
    const corner = h("th", "nbstream-grid-corner", { scope: "col" });
    corner.textContent = "prompt";
    headRow.append(corner);
    for (const name of columns) {
      const th = h("th", "nbstream-grid-col", { scope: "col", title: name });
      th.textContent = name;
      headRow.append(th);
    }
    const thead = h("thead");
    thead.append(headRow);
    const tbody = h("tbody");
    this.cells = rows.map((prompt, i) => this.buildRow(tbody, prompt, i, columns));
    table.append(caption, thead, tbody);
    this.scroller.replaceChildren(table);
    this.takeTexts();
    this.update();
  }

  /** @param {HTMLElement} tbody @param {string} prompt @param {number} i @param {string[]} columns */
  buildRow(tbody, prompt, i, columns) {
    const tr = h("tr", "nbstream-grid-row");
    const th = h("th", "nbstream-grid-prompt", { scope: "row" });
    const words = h("div", "nbstream-grid-prompt-text", { title: prompt });
    words.textContent = prompt;
    const stop = cellButton("nbstream-grid-stop-row", "\u25A0", "Stop row", `Stop row ${i + 1}`);
    this.rowStops[i] = stop;
    this.scope.on(stop, "click", () => this.stop(i, null));
    th.append(words, stop);
    tr.append(th);
    const sync = () => this.sync();
    const dirty = () => this.schedule();
    const row = columns.map((name, j) => {
      const cell = new GridCell(i, j, `row ${i + 1}, ${name}`, this.viewId, sync, dirty);
      this.scope.on(cell.stopBtn, "click", () => this.stop(i, j));
      this.scope.on(cell.openBtn, "click", () => this.open(cell));
      tr.append(cell.td);
      return cell;
    });
    tbody.append(tr);
    return row;
  }

  listen() {
    const { onModel, on } = this.scope;
    onModel("change:cells", () => this.update());
    onModel("change:marks", () => this.update());
    onModel("change:opened", () => this.update());
    onModel("change:summary", () => this.update());
    onModel("change:texts", () => this.takeTexts());
    onModel("change:rows", () => this.build());
    onModel("change:columns", () => this.build());
    onModel("msg:custom", (/** @type {any} */ msg) => this.receive(msg));
    on(this.header.runAll, "click", () => this.send({ type: "run", row: null, col: null }));
    on(this.header.stopAll, "click", () => this.stop(null, null));
  }

  /** @param {GridTableRequest} msg */
  send(msg) {
    try {
      this.model.send(msg);
    } catch (err) {
      // A kernel gone (a restarted one's comm throws): nothing to send to.
      console.warn("nbstream: the grid could not reach the kernel", err);
    }
  }

  /** Ask for every cell's text (at render, and on a gap), at most once per SYNC_RETRY_MS. */
  sync() {
    const now = performance.now();
    if (this.lastSync && now - this.lastSync < SYNC_RETRY_MS) return;
    this.lastSync = now || 1;
    this.send({ type: "sync", view: this.viewId, page: PAGE_ID });
  }

  /** @param {any} msg */
  receive(msg) {
    if (this.scope.disposed || !msg || typeof msg !== "object") return;
    if (msg.type === "grid_delta" && Array.isArray(msg.cells)) {
      for (const d of msg.cells) {
        const cell = this.cells[d.row]?.[d.col];
        if (cell && cell.delta(d) !== "stale") this.dirty.add(cell);
      }
    } else if (msg.type === "grid_reset" && Array.isArray(msg.cells)) {
      if (msg.view != null && msg.view !== this.viewId) return;
      this.lastSync = 0;
      for (const t of msg.cells) {
        const cell = this.cells[t.row]?.[t.col];
        if (cell?.reset(t, msg.view)) this.dirty.add(cell);
      }
    }
    this.schedule();
  }

  /** The traits that change with the cells' states: every cell's entry, mark, Open state. */
  update() {
    const entries = this.model.get("cells") ?? [];
    const marks = this.model.get("marks") ?? [];
    const [oi, oj] = this.model.get("opened") ?? [];
    this.cells.forEach((row, i) => {
      for (const cell of row) {
        const entry = entries[i]?.[cell.col];
        if (entry) cell.set(entry);
        cell.setMark(marks[i] ?? null);
        cell.opened = cell.row === oi && cell.col === oj;
        this.dirty.add(cell);
      }
    });
    // A state change (a Stop acted on, an end) is drawn at once, not at the next frame:
    // it is rare, and a click waits for it. Only the text is coalesced per frame.
    this.frames.now();
  }

  /** A view no kernel answers (a saved notebook): each ended cell's text from `texts`. */
  takeTexts() {
    const texts = this.model.get("texts") ?? [];
    const entries = this.model.get("cells") ?? [];
    this.cells.forEach((row, i) => {
      for (const cell of row) {
        const text = texts[i]?.[cell.col];
        const entry = entries[i]?.[cell.col];
        if (typeof text !== "string" || !entry || cell.live.cpLen > 0) continue;
        cell.set(entry);
        cell.reset({ run_id: Number(entry.run_id), text }, null);
        this.dirty.add(cell);
      }
    });
    this.schedule();
  }

  schedule() {
    if (this.dirty.size) this.frames.schedule();
  }

  draw() {
    for (const cell of this.dirty) cell.draw();
    this.dirty.clear();
    const entries = this.model.get("cells") ?? [];
    this.rowStops.forEach((stop, i) => {
      stop.disabled = !(entries[i] ?? []).some((c) => ACTIVE.has(c.status));
    });
    const active = this.active();
    this.header.stopAll.disabled = !active;
    const summary = String(this.model.get("summary") ?? "");
    if (this.header.summary.textContent !== summary) this.header.summary.textContent = summary;
    // Said once when every cell has ended (this view saw them going), not at each cell's end.
    if (this.wasActive && !active) this.announce.say(`ended:${summary}`, `Grid: ${summary}`, this.model);
    this.wasActive = active;
  }

  /** @param {number | null} row @param {number | null} col */
  stop(row, col) {
    for (const r of this.cells) {
      for (const cell of r) {
        if ((row === null || cell.row === row) && (col === null || cell.col === col) && ACTIVE.has(cell.entry.status)) {
          cell.stopClicked();
          this.dirty.add(cell);
        }
      }
    }
    this.send({ type: "stop", row, col });
    this.schedule();
  }

  /** Open a cell in full below the table, or close it when it is the one open. @param {GridCell} cell */
  open(cell) {
    const closing = cell.opened;
    this.send({ type: "open", row: closing ? null : cell.row, col: closing ? null : cell.col });
  }
}

/**
 * @param {{model: GridModel, el: HTMLElement}} ctx
 * @returns {() => void} cleanup
 */
function render({ model, el }) {
  return new GridView(model, el).scope.dispose;
}

export default { render };
