// nbstream — a reasoning model's thinking, shown apart from the answer.
//
// Two parts: `LiveThinking`, the current run's thinking as this view knows it (from the
// kernel's `thinking` messages and the `thinking` of a `reset`, repaired like the answer's
// deltas: it is a LiveText of its own), and `ThinkingBox`, a collapsible "Thinking" section
// (<details>/<summary>: keyboard operable as it is) that shows one answer's thinking. The
// StreamWidget has one box, fed by its LiveThinking; the ChatWidget one per answer, fed by
// its LiveThinking while that answer streams and by the answer's message once it ended.
// The thinking is shown as text only (never as HTML), and never inside the answer's output.

import { h } from "./dom.js";
import { LiveText } from "./live_text.js";
import { ACTIVE } from "./status.js";

/**
 * A run's thinking as a view shows it: the `thinking` of a `reset`, of a chat answer's
 * message, or what the `thinking` messages added up to (protocol.d.ts).
 * @typedef {import("./protocol.js").ThinkingState} ThinkingState
 */

/** The current run's thinking, from `thinking` messages and resets (see LiveText). */
class LiveThinking {
  /**
   * @param {number} runId @param {string} viewId @param {(msg: any) => void} send
   * @param {() => void} changed called when the thinking or its counters changed
   */
  constructor(runId, viewId, send, changed) {
    this.changed = changed;
    this.has = false; // the run has thought (a message or a reset said so)
    this.done = false;
    this.live = new LiveText(runId, viewId, send, { clear: changed, grew: changed });
  }

  get runId() {
    return this.live.runId;
  }

  /** The thinking of the current run, or null (it did not think, or not yet). @returns {ThinkingState | null} */
  state() {
    if (!this.has) return null;
    return { text: this.live.text, tokens: this.live.liveTokens, elapsed_s: this.live.liveElapsed, done: this.done };
  }

  /** A new run: nothing thought yet. @param {number} rid */
  newRun(rid) {
    if (!this.live.newRun(rid)) return;
    this.has = false;
    this.done = false;
    this.changed();
  }

  /** A `thinking` message or a `reset` (see onRunMessages, live_text.js). @param {any} msg */
  receive(msg) {
    if (msg.type === "reset") this.reset(msg);
    else this.message(msg);
  }

  /** A `thinking` message. @param {any} msg */
  message(msg) {
    const rid = Number(msg.run_id);
    const what = this.live.delta(msg); // the text and the counters (tokens, elapsed_s)
    if (rid !== this.live.runId || what === "stale" || what === "gap") return;
    this.has = true;
    if (msg.done === true) this.done = true;
    this.changed();
  }

  /** A `reset` (its `thinking` absent: the run has not thought). @param {any} msg */
  reset(msg) {
    const t = msg.thinking && typeof msg.thinking === "object" ? msg.thinking : null;
    if (!this.live.reset({ run_id: msg.run_id, view: msg.view, text: t ? String(t.text ?? "") : "" })) return;
    this.has = !!t;
    this.done = !!t && t.done === true;
    this.live.liveTokens = t && typeof t.tokens === "number" ? t.tokens : null;
    this.live.liveElapsed = t && typeof t.elapsed_s === "number" ? t.elapsed_s : null;
    this.changed();
  }
}

/** @param {number | null} n */
function tokenCount(n) {
  return typeof n === "number" ? `${n} token${n === 1 ? "" : "s"}` : "";
}

/** @param {number | null} s */
function seconds(s) {
  return typeof s === "number" && Number.isFinite(s) ? `${s.toFixed(1)} s` : "";
}

/**
 * The words of the section's summary.
 * @param {ThinkingState} t @param {string} status the answer's status @param {boolean} answered
 */
function summaryOf(t, status, answered) {
  const count = tokenCount(t.tokens);
  if (!t.done && ACTIVE.has(status)) return count ? `Thinking… ${count}` : "Thinking…";
  const time = seconds(t.elapsed_s);
  const facts = [time, count].filter(Boolean);
  if (answered || status === "complete") {
    const head = time ? `Thought for ${time}` : "Thought";
    const rest = count ? ` · ${count}` : "";
    return `${head}${rest}${answered ? "" : " · no answer"}`;
  }
  const why = status === "failed" ? "Failed while thinking" : "Stopped while thinking";
  return [why, ...facts].join(" · ");
}

/**
 * One answer's collapsible Thinking section. Open while the model thinks, closed once the
 * answer starts, unless the user opened or closed it in the meantime (then it stays as the
 * user left it). A run that ended while thinking keeps it shown, marked "stopped".
 */
class ThinkingBox {
  constructor() {
    this.el = h("details", "nbstream-thinking", { "data-state": "none" });
    this.summary = h("summary", "nbstream-thinking-summary");
    this.label = h("span", "nbstream-thinking-label");
    this.summary.append(this.label);
    // Text only (white-space: pre-wrap): a model's thinking is never markup.
    this.body = h("div", "nbstream-thinking-text");
    this.el.append(this.summary, this.body);
    this.el.hidden = true;
    this.shown = "";
    this.started = false; // this answer's thinking has been shown
    this.answered = false;
    this.userSet = false; // the user opened or closed it: leave it so
    this.wantOpen = false; // what the code last set (a toggle event that differs: the user)
    this.suppressed = false; // hidden all the same (the token view shows the thinking)
    this.el.addEventListener("toggle", () => {
      if (this.el.open !== this.wantOpen) {
        this.userSet = true;
        this.wantOpen = this.el.open;
      }
    });
  }

  /** @param {boolean} open */
  setOpen(open) {
    this.wantOpen = open;
    if (this.el.open !== open) this.el.open = open;
  }

  /** A new run's thinking goes here: forget the old one and what the user did to it. */
  restart() {
    this.started = false;
    this.answered = false;
    this.userSet = false;
    this.shown = "";
    this.body.replaceChildren();
    this.setOpen(false);
    this.el.hidden = true;
    this.el.setAttribute("data-state", "none");
  }

  /**
   * Show `t` (null: no thinking), for an answer in state `status` whose text has begun or not.
   * @param {ThinkingState | null} t @param {string} status @param {boolean} answered
   */
  show(t, status, answered) {
    // An empty thinking section (some models emit `<think>\n\n</think>`) is not shown.
    const empty = !t || (t.done && !t.text.trim());
    if (!t || empty) {
      this.el.hidden = true;
      if (!t) this.el.setAttribute("data-state", "none");
      return;
    }
    this.el.hidden = this.suppressed;
    if (!this.started) {
      this.started = true;
      this.answered = answered;
      // Open while it streams (or when no answer followed it), closed once there is one.
      this.setOpen(!answered);
    } else if (answered && !this.answered) {
      this.answered = true;
      if (!this.userSet) this.setOpen(false);
    }
    const active = ACTIVE.has(status);
    const state = !t.done && active ? "thinking" : answered || status === "complete" ? "done" : "stopped";
    if (this.el.getAttribute("data-state") !== state) this.el.setAttribute("data-state", state);
    const words = summaryOf(t, status, answered);
    if (this.label.textContent !== words) this.label.textContent = words;
    this.summary.title = "The model's thinking before its answer: not part of the answer";
    if (t.text !== this.shown) {
      if (this.shown && t.text.startsWith(this.shown)) {
        this.body.append(t.text.slice(this.shown.length));
      } else {
        this.body.textContent = t.text;
      }
      this.shown = t.text;
    }
  }
}

// ---------------------------------------------------------------------------
// The token views (token_list.js): a reasoning model's run shows every token, its thinking's
// marked (data-thinking) and the answer's first token marked (data-answer-start): the
// boundary is visible, and the list is still the run's token_ids.
// ---------------------------------------------------------------------------

/**
 * Mark token element `span` (index `i`) for a run whose first `n` tokens are thinking.
 * @param {HTMLElement} span @param {number} i @param {number} n
 */
function thinkingMark(span, i, n) {
  if (i < n) span.setAttribute("data-thinking", "true");
  else span.removeAttribute("data-thinking");
  if (n > 0 && i === n) span.setAttribute("data-answer-start", "true");
  else span.removeAttribute("data-answer-start");
}

/**
 * A `tokens` message's thinking count (absent: none) for a token list that had `before`:
 * the tokens already shown whose mark changes are marked again. Returns the new count.
 * @param {{span: (i: number) => HTMLElement | undefined, dress: (s: HTMLElement, i: number) => void,
 *          thinking: number}} list
 * @param {unknown} value @param {number} before
 */
function markThinking(list, value, before) {
  const n = typeof value === "number" && Number.isInteger(value) && value > 0 ? value : 0;
  if (n === before) return n;
  list.thinking = n;
  const from = Math.max(0, Math.min(before, n) - 1);
  const to = Math.max(before, n) + 1;
  for (let i = from; i <= to; i++) {
    const span = list.span(i);
    if (!span) break;
    thinkingMark(span, i, n);
    list.dress(span, i);
  }
  return n;
}

export { LiveThinking, ThinkingBox, markThinking, summaryOf, thinkingMark };
