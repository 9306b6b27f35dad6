// nbstream front end: one cell of a prompt grid's table (grid.js): its state (the stream
// widget's badge: the same words, glyphs and colours), its figures (tokens, time, why it
// ended), its text as it streams (kept by a LiveText from the grid's deltas, drawn as plain
// text: a model's output is never parsed as markup here), where its row's answers part, and
// its Stop and Open buttons. Stop says "stopping…" until the kernel says how the run ended:
// a cell says cancelled only once its run did stop.

import { h } from "./dom.js";
import { fmtSeconds, isNum } from "./format.js";
import { LiveText } from "./live_text.js";
import { ACTIVE, makeBadge, setBadge } from "./status.js";

/** @typedef {import("./protocol.js").GridCell} GridCellEntry */
/** @typedef {import("./protocol.js").GridMark} GridMark */

/**
 * Why a cell's run ended, in a few words (a cell is narrow; its tooltip has the raw value).
 * @type {Record<string, string>}
 */
const FINISH_WORDS = {
  eos: "ended by the model",
  length: "cut at max_new_tokens",
  stop: "ended at a stop string",
  timeout: "over its time budget",
  cancelled: "stopped",
  error: "failed",
};

/** A cell before its first run. @type {GridCellEntry} */
const IDLE = { status: "idle", run_id: 0, tokens: null, elapsed_s: null, finish_reason: null, error: null };

/**
 * The UTF-16 index of code point `k` of `s` (its length if `s` is shorter): the kernel
 * counts characters in code points, a string here in UTF-16 units.
 * @param {string} s @param {number} k
 */
function codePointIndex(s, k) {
  let i = 0;
  for (; k > 0 && i < s.length; k--) {
    const c = s.charCodeAt(i);
    i += c >= 0xd800 && c <= 0xdbff && i + 1 < s.length ? 2 : 1;
  }
  return i;
}

/**
 * A cell's figures in words: tokens, time, and (once it ended) why; live counters while it
 * streams. "stopping…" after a Stop the kernel has not acted on yet.
 * @param {GridCellEntry} entry @param {number | null} liveTokens @param {number | null} liveElapsed
 * @param {boolean} stopping
 */
function cellFigures(entry, liveTokens, liveElapsed, stopping) {
  const live = ACTIVE.has(entry.status);
  const tokens = live ? (liveTokens ?? entry.tokens) : (entry.tokens ?? liveTokens);
  const elapsed = live ? (liveElapsed ?? entry.elapsed_s) : (entry.elapsed_s ?? liveElapsed);
  const parts = [];
  if (isNum(tokens)) parts.push(`${tokens} ${tokens === 1 ? "token" : "tokens"}`);
  if (isNum(elapsed)) parts.push(fmtSeconds(elapsed));
  const reason = entry.finish_reason;
  if (!live && reason && FINISH_WORDS[reason]) parts.push(FINISH_WORDS[reason]);
  if (live && stopping) parts.push("stopping\u2026");
  return parts.join(" \u00b7 ");
}

/**
 * A small button with a glyph before its word; the accessible name says which cell or row.
 * @param {string} cls @param {string} glyph @param {string} word @param {string} name
 * @param {string} [title] its tooltip (its name by default)
 */
function cellButton(cls, glyph, word, name, title = name) {
  const b = h("button", `nbstream-grid-btn ${cls}`, { type: "button", "aria-label": name, title });
  const icon = h("span", "nbstream-btn-icon", { "aria-hidden": "true" });
  icon.textContent = glyph;
  b.append(icon);
  if (word) b.append(word);
  return b;
}

/** One cell: its element, its text as this view knows it, and what it shows. */
class GridCell {
  /**
   * @param {number} row @param {number} col @param {string} where the cell in words ("row 2, temperature=0")
   * @param {string} viewId @param {(msg: any) => void} sync asks the kernel for every cell's text
   * @param {() => void} dirty asks for a frame
   */
  constructor(row, col, where, viewId, sync, dirty) {
    this.row = row;
    this.col = col;
    this.td = h("td", "nbstream-grid-cell", { "data-status": "idle" });
    this.badge = makeBadge();
    this.figures = h("span", "nbstream-grid-figures");
    // Glyphs only (a cell is narrow): their names say which cell, their tooltips too.
    this.stopBtn = cellButton("nbstream-grid-stop", "\u25A0", "", `Stop ${where}`);
    this.openBtn = cellButton("nbstream-grid-open", "\u2197", "", `Open ${where} in full, with its tokens`);
    this.openBtn.setAttribute("aria-pressed", "false");
    const head = h("div", "nbstream-grid-cell-head");
    const buttons = h("span", "nbstream-grid-cell-buttons");
    buttons.append(this.stopBtn, this.openBtn);
    head.append(this.badge, buttons);
    this.before = document.createTextNode("");
    this.after = document.createTextNode("");
    this.differs = h("span", "nbstream-grid-differs");
    this.differs.append(this.after);
    this.text = h("div", "nbstream-grid-text", { tabindex: "0", "aria-label": `Answer of ${where}` });
    this.text.append(this.before, this.differs);
    this.error = h("div", "nbstream-grid-error");
    this.markEl = h("div", "nbstream-grid-mark");
    this.markEl.hidden = true;
    this.td.append(head, this.figures, this.error, this.text, this.markEl);
    this.live = new LiveText(0, viewId, sync, { clear: dirty, grew: dirty });
    /** @type {GridCellEntry} */
    this.entry = IDLE;
    /** @type {{char: number, words: string} | null} */
    this.mark = null;
    this.stopping = false;
    this.opened = false;
    // What the state part of the cell was last drawn from (draw() redraws it on a change).
    /** @type {GridCellEntry | null} */
    this.stateDrawn = null;
    this.stoppingDrawn = false;
    this.openedDrawn = false;
  }

  /** The kernel's entry for the cell (the `cells` trait). @param {GridCellEntry} entry */
  set(entry) {
    const rid = Number(entry.run_id);
    if (rid > this.live.runId) this.live.newRun(rid);
    if (!ACTIVE.has(entry.status) || rid !== Number(this.entry.run_id)) this.stopping = false;
    this.entry = entry;
  }

  /** A `grid_delta`'s part for this cell. @param {any} d @returns {string} what changed */
  delta(d) {
    // A new run's first text may come before its entry: it starts the new run's text.
    if (Number(d.run_id) > this.live.runId && Number(d.offset) === 0) this.live.newRun(Number(d.run_id));
    return this.live.delta(d);
  }

  /** A `grid_reset`'s part for this cell. @param {{run_id: number, text: string}} t @param {string | null} view */
  reset(t, view) {
    return this.live.reset({ view, run_id: t.run_id, text: t.text });
  }

  /** Where the row's answers part, and this cell's words for it. @param {GridMark | null} mark */
  setMark(mark) {
    const words = mark?.words?.[this.col];
    this.mark = mark && isNum(mark.char) ? { char: mark.char, words: String(words ?? "") } : null;
  }

  /** Stop was clicked: the cell says so until its state changes. */
  stopClicked() {
    this.stopping = true;
  }

  draw() {
    const { entry, live } = this;
    if (this.stateDrawn !== entry || this.stoppingDrawn !== this.stopping || this.openedDrawn !== this.opened) {
      // Only when the state changed: a streaming frame touches the text and figures alone.
      this.drawState();
      this.stateDrawn = entry;
      this.stoppingDrawn = this.stopping;
      this.openedDrawn = this.opened;
    }
    const figures = cellFigures(entry, live.liveTokens, live.liveElapsed, this.stopping);
    if (this.figures.textContent !== figures) this.figures.textContent = figures;
    this.drawText();
  }

  drawState() {
    const { entry } = this;
    const status = entry.status;
    this.td.setAttribute("data-status", status);
    setBadge(this.badge, status);
    this.figures.title = entry.finish_reason ? `finish_reason: ${entry.finish_reason}` : "";
    const error = status === "failed" ? String(entry.error ?? "failed") : "";
    if (this.error.textContent !== error) this.error.textContent = error;
    this.error.hidden = !error;
    this.drawButtons();
  }

  /** The text, split where the row's answers part (the rest marked). */
  drawText() {
    const text = this.live.text;
    const at = this.mark ? codePointIndex(text, this.mark.char) : text.length;
    setData(this.before, text.slice(0, at));
    setData(this.after, text.slice(at));
    const marked = Boolean(this.mark) && at < text.length;
    if (this.td.hasAttribute("data-differs") !== marked) this.td.toggleAttribute("data-differs", marked);
    const words = marked && this.mark ? this.mark.words : "";
    if (this.markEl.textContent !== words) {
      this.markEl.textContent = words;
      this.markEl.hidden = !words;
      this.differs.title = words;
    }
  }

  drawButtons() {
    const had = document.activeElement;
    const canStop = ACTIVE.has(this.entry.status) && !this.stopping;
    this.stopBtn.disabled = !canStop;
    this.openBtn.disabled = this.entry.status === "idle";
    this.openBtn.setAttribute("aria-pressed", String(this.opened));
    this.td.toggleAttribute("data-opened", this.opened);
    // A focused Stop that disables itself would drop the focus to the page (where the
    // notebook's shortcuts take the next key): it moves to the cell's Open.
    if (had === this.stopBtn && !canStop) this.openBtn.focus({ preventScroll: true });
  }
}

/**
 * Set a text node's data, appending where it only grew (a streaming cell's usual frame).
 * @param {Text} node @param {string} text
 */
function setData(node, text) {
  const now = node.data;
  if (now === text) return;
  if (text.length > now.length && text.startsWith(now)) node.appendData(text.slice(now.length));
  else node.data = text;
}

export { FINISH_WORDS, GridCell, cellButton, cellFigures, codePointIndex };
