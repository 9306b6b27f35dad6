// nbstream front end: the current run's text as a view knows it, kept from the run
// protocol's `delta` and `reset` messages (offsets in code points; a gap asks for a `sync`),
// and a view's handler of those messages (onRunMessages).

import { isNum } from "./format.js";
import { PAGE_ID } from "./page.js";

/** @typedef {import("./view_scope.js").ViewScope} ViewScope */

const SYNC_RETRY_MS = 1500;

/** Number of Unicode code points in s. @param {string} s */
function codePoints(s) {
  let n = s.length;
  for (let i = 0; i < s.length - 1; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        n--;
        i++;
      }
    }
  }
  return n;
}

/** UTF-16 index where the last `k` code points of s start. @param {string} s @param {number} k */
function indexFromEnd(s, k) {
  let i = s.length;
  for (; k > 0 && i > 0; k--) {
    i--;
    const c = s.charCodeAt(i);
    if (c >= 0xdc00 && c <= 0xdfff && i > 0) {
      const p = s.charCodeAt(i - 1);
      if (p >= 0xd800 && p <= 0xdbff) i--;
    }
  }
  return i;
}

/** UTF-16 index of code point k of s, or -1 if s is shorter. @param {string} s @param {number} k */
function indexOfCodePoint(s, k) {
  let i = 0;
  for (; k > 0; k--) {
    if (i >= s.length) return -1;
    const c = s.charCodeAt(i);
    i += c >= 0xd800 && c <= 0xdbff && i + 1 < s.length ? 2 : 1;
  }
  return i;
}

/**
 * The text of the widget's current run as this view knows it. Deltas append at their
 * offset (code points); a gap (or a delta of a run this view does not know yet) sends a
 * `sync`, answered by a `reset` with the whole text so far.
 */
class LiveText {
  /**
   * @param {number} runId the model's run_id when the view is created
   * @param {string} viewId
   * @param {(msg: any) => void} send
   * @param {{clear: () => void, grew: () => void}} hooks output cleared / text added
   */
  constructor(runId, viewId, send, hooks) {
    this.text = ""; // the current run's text (UTF-16 string)
    this.cpLen = 0; // its length in code points
    this.runId = runId;
    /** @type {number | null} */
    this.liveTokens = null;
    /** @type {number | null} */
    this.liveElapsed = null;
    this.gapSyncAt = 0; // performance.now() of an unanswered gap sync, or 0
    this.viewId = viewId;
    this.send = send;
    this.hooks = hooks;
  }

  sync() {
    this.send({ type: "sync", view: this.viewId, page: PAGE_ID });
  }

  /** A gap: ask for the full text, once per gap (retried if no reset comes). */
  requestSync() {
    const now = performance.now();
    if (this.gapSyncAt && now - this.gapSyncAt < SYNC_RETRY_MS) return;
    this.gapSyncAt = now || 1;
    this.sync();
  }

  clear() {
    this.text = "";
    this.cpLen = 0;
    this.hooks.clear();
  }

  /** @param {string} more */
  append(more) {
    if (!more) return;
    this.text += more;
    this.cpLen += codePoints(more);
    this.hooks.grew();
  }

  /** A new run (run_id changed): forget the text. False if it is not newer. @param {number} rid */
  newRun(rid) {
    if (rid <= this.runId) return false; // already adopted (from a reset) or stale
    this.runId = rid;
    this.liveTokens = null;
    this.liveElapsed = null;
    this.clear();
    return true;
  }

  /**
   * @param {any} msg
   * @returns {"text" | "counters" | "stale" | "gap"} what changed
   */
  delta(msg) {
    const rid = Number(msg.run_id);
    if (rid === this.runId) {
      if (isNum(msg.tokens)) this.liveTokens = msg.tokens;
      if (isNum(msg.elapsed_s)) this.liveElapsed = msg.elapsed_s;
      const offset = Number(msg.offset);
      const piece = String(msg.text ?? "");
      if (offset === this.cpLen) {
        this.append(piece);
        return "text";
      }
      if (offset >= 0 && offset < this.cpLen) {
        // Overlap with text we already have (e.g. a reset that was ahead of
        // the deltas). The run's text only grows, so a delta that agrees with
        // it is no gap: keep what is new.
        const text = this.text;
        const have = text.slice(indexFromEnd(text, this.cpLen - offset));
        const cut = indexOfCodePoint(piece, this.cpLen - offset);
        if (cut < 0 ? have.startsWith(piece) : piece.slice(0, cut) === have) {
          if (cut >= 0) this.append(piece.slice(cut));
          return "text";
        }
      }
      this.requestSync(); // gap: ignore the delta, ask for the full text
      return "counters";
    } else if (rid < this.runId) {
      return "stale"; // a late delta of an old run: not a gap
    }
    this.requestSync();
    return "gap";
  }

  /**
   * @param {any} msg
   * @returns {boolean} whether the reset was for this view and applied
   */
  reset(msg) {
    if (msg.view != null && msg.view !== this.viewId) return false;
    const rid = Number(msg.run_id);
    if (rid < this.runId) return false; // stale
    const full = String(msg.text ?? "");
    this.gapSyncAt = 0;
    if (this.newRun(rid)) {
      this.append(full);
    } else if (full.startsWith(this.text)) {
      this.append(full.slice(this.text.length)); // usually: the view was merely behind
    } else {
      this.clear();
      this.append(full);
    }
    return true;
  }
}

/**
 * A view's part of the run protocol (`msg:custom`): `delta` and `reset` messages go to
 * `live`; the view then updates its chrome when text came, its metrics line when only the
 * counters did, and redraws after a reset. `tokens` messages go to `tokens`. A reasoning
 * model's `thinking` messages, and the resets this view applied (their thinking), go to
 * `thinking` (the view's LiveThinking, js/src/thinking.js); while the run thinks their
 * counters are the metrics line's (thinkingCounters).
 * @param {ViewScope} scope @param {LiveText} live
 * @param {{chrome: () => void, metrics: () => void, redraw: () => void,
 *          tokens: (msg: any) => void, thinking?: {receive: (msg: any) => void}}} view
 * @returns {(msg: any) => void} the handler, for messages that come another way (pulled)
 */
function onRunMessages(scope, live, view) {
  const receive = (/** @type {any} */ msg) => {
    if (scope.disposed || !msg || typeof msg !== "object") return;
    if (msg.type === "delta") {
      const what = live.delta(msg);
      if (what === "text") view.chrome();
      else if (what === "counters") view.metrics();
    } else if (msg.type === "reset" && live.reset(msg)) {
      view.thinking?.receive(msg); // a reasoning model's thinking so far
      view.redraw();
      view.chrome();
    } else if (msg.type === "thinking") {
      view.thinking?.receive(msg);
      if (thinkingCounters(live, msg)) view.metrics();
    } else if (msg.type === "tokens") {
      view.tokens(msg);
    }
  };
  scope.onModel("msg:custom", receive);
  return receive; // a pulled message goes the same way (pull.js)
}

/**
 * While a run thinks no answer delta comes: its `thinking` messages carry the live counters
 * of the metrics line instead (its `tokens` are then all the run's tokens). True if they did.
 * @param {{runId: number, liveTokens: number | null, liveElapsed: number | null}} live the answer's LiveText
 * @param {any} msg
 */
function thinkingCounters(live, msg) {
  if (msg.type !== "thinking" || msg.done === true || Number(msg.run_id) !== live.runId) return false;
  if (typeof msg.tokens === "number") live.liveTokens = msg.tokens;
  if (typeof msg.elapsed_s === "number") live.liveElapsed = msg.elapsed_s;
  return true;
}

export { LiveText, onRunMessages };
