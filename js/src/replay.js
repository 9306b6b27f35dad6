// nbstream — a StreamWidget's last run without a kernel: a saved notebook reopened with no
// kernel, `jupyter nbconvert --to html`, a docs page.
//
// A live view gets the run's text from the kernel (custom messages), which no saved
// notebook keeps. When a run ends the kernel sets the `snapshot` trait (RunSnapshot in
// protocol.d.ts, nbstream/widgets/snapshot.py), which the saved widget state does keep. A
// view draws from it the messages the kernel would have sent (snapshotMessages), so the
// text, the token views and the thinking work as they do live. A view whose sync goes
// unanswered (kernelWatch) says so and offers Replay: the stream again, in the page, at the
// recorded pace (Replayer), ending on the same text.

import { h } from "./dom.js";

/** @typedef {import("./protocol.js").RunSnapshot} RunSnapshot */
/** @typedef {import("./view_scope.js").ViewScope} ViewScope */

/** The snapshot format this view draws. */
const SNAPSHOT_VERSION = 1;
/** How long a view waits for the kernel's answer to its sync before it draws as saved. */
const KERNEL_WAIT_MS = 1500;
/** What the kernel-less view says, beside its Replay button, in a notebook (No Kernel). */
const SAVED_NOTE = "Saved output: no running kernel holds this widget. Its last run shows as saved; run the cell again to use it.";
/** The same on a page that is no notebook (an HTML export, a docs page): it has no cell. */
const SAVED_PAGE_NOTE = "Saved output: this page has no kernel. It shows the last run as it was saved.";

/**
 * Whether the view is on a page made from a saved notebook (an HTML export, a docs page),
 * where no cell can be run: such a page carries the notebook's widget state for its widget
 * manager; JupyterLab, Notebook 7 and VS Code never put it in the page.
 */
function onStaticPage() {
  return document.querySelector('script[type="application/vnd.jupyter.widget-state+json"]') !== null;
}

/**
 * The snapshot of the model's current run, or null (none, another run's, or unknown format).
 * @param {any} model a StreamWidget's model (model.d.ts)
 * @returns {RunSnapshot | null}
 */
function currentSnapshot(model) {
  const s = model.get("snapshot");
  if (!s || typeof s !== "object" || s.v !== SNAPSHOT_VERSION) return null;
  if (Number(s.run_id) !== (Number(model.get("run_id")) || 0)) return null;
  if (typeof s.text !== "string" || !Array.isArray(s.steps)) return null;
  return s;
}

/**
 * The run's course: after each token, when (ms after the start), how long the answer is
 * (UTF-16 code units) and how many tokens there are.
 * @param {RunSnapshot} s
 * @returns {Array<{at: number, length: number, count: number}>}
 */
function timeline(s) {
  const out = [];
  let at = 0;
  let length = 0;
  const steps = s.steps;
  for (let i = 0; i + 1 < steps.length; i += 2) {
    at += Math.max(0, Number(steps[i]) || 0);
    length = Math.min(s.text.length, length + Math.max(0, Number(steps[i + 1]) || 0));
    out.push({ at, length, count: out.length + 1 });
  }
  return out;
}

/**
 * The messages the kernel sends a view for the run: its text (a `reset`, with the thinking)
 * and its tokens (from token `from` on, when the snapshot has them), cut at `length` text
 * and `count` tokens (a replay's point; the whole run by default).
 * @param {RunSnapshot} s
 * @param {{length?: number, count?: number, from?: number}} [at]
 */
function snapshotMessages(s, at = {}) {
  const length = at.length ?? s.text.length;
  const all = Array.isArray(s.tokens) ? s.tokens : null;
  const count = Math.min(at.count ?? Number.POSITIVE_INFINITY, all ? all.length : 0);
  /** @type {any} */
  const reset = { type: "reset", run_id: s.run_id, view: null, text: s.text.slice(0, length) };
  if (typeof s.thinking === "string") {
    reset.thinking = { text: s.thinking, tokens: null, elapsed_s: null, done: true };
  }
  /** @type {any} */
  let tokens = null;
  if (all) {
    const from = Math.min(at.from ?? 0, count);
    tokens = { type: "tokens", run_id: s.run_id, offset: from, tokens: all.slice(from, count) };
    if (typeof s.thinking_tokens === "number") tokens.thinking = s.thinking_tokens;
  }
  return { reset, tokens };
}

/**
 * Plays a snapshot again: `show` gets each point of its course at the recorded pace, from
 * an empty answer to the whole one; `ended` once it is over (played to the end or stopped,
 * and then the whole run is shown again).
 */
class Replayer {
  /**
   * @param {ViewScope} scope
   * @param {(at: {length: number, count: number, from: number}) => void} show
   * @param {() => void} ended
   */
  constructor(scope, show, ended) {
    this.scope = scope;
    this.show = show;
    this.ended = ended;
    /** @type {ReturnType<typeof setTimeout> | null} */
    this.timer = null;
    this.playing = false;
  }

  /** @param {RunSnapshot} s @param {number} [speed] how many times faster than recorded */
  start(s, speed = 1) {
    this.stop(false);
    const course = timeline(s);
    const t0 = performance.now();
    let next = 0;
    let shownCount = 0;
    this.playing = true;
    this.show({ length: 0, count: 0, from: 0 });
    const tick = () => {
      this.timer = null;
      if (!this.playing || this.scope.disposed) return;
      const now = (performance.now() - t0) * speed;
      let point = null;
      while (next < course.length && course[next].at <= now) point = course[next++];
      if (point) {
        this.show({ length: point.length, count: point.count, from: shownCount });
        shownCount = point.count;
      }
      if (next >= course.length) {
        this.stop(true);
        return;
      }
      this.timer = this.scope.later(tick, Math.max(16, (course[next].at - now) / speed));
    };
    tick();
  }

  /** @param {boolean} [showAll] show the whole run again (a stop before the end) */
  stop(showAll = true) {
    if (this.timer != null) this.scope.cancel(this.timer);
    this.timer = null;
    if (!this.playing) return;
    this.playing = false;
    if (showAll) this.ended();
  }
}

/**
 * Whether a kernel answers this view: `none` runs when, KERNEL_WAIT_MS after the view's
 * sync, nothing came from a kernel (no message, no change of the run's state: a cell that
 * blocks the kernel still lets its run's state through), and `some` when something comes
 * after that.
 * @param {ViewScope} scope
 * @param {{none: () => void, some: () => void}} on
 * @param {string[]} [also] more model events that only a kernel causes (a header's traits)
 */
function kernelWatch(scope, on, also = []) {
  let heard = false;
  let missing = false;
  const hear = () => {
    heard = true;
    if (missing) {
      missing = false;
      on.some();
    }
  };
  scope.onModel("msg:custom", hear);
  scope.onModel("change:run_id", hear);
  scope.onModel("change:status", hear);
  for (const event of also) scope.onModel(event, hear);
  scope.later(() => {
    if (heard || scope.disposed) return;
    missing = true;
    on.none();
  }, KERNEL_WAIT_MS);
}

/** The kernel-less view's row: what it is, and the Replay button. */
function replayRow() {
  const row = h("div", "nbstream-saved");
  row.hidden = true;
  const note = h("span", "nbstream-saved-note");
  note.textContent = onStaticPage() ? SAVED_PAGE_NOTE : SAVED_NOTE;
  const button = h("button", "nbstream-replay", { type: "button" });
  button.textContent = "▶ Replay";
  button.title = "Play the saved stream again, at its recorded pace";
  row.append(note, button);
  return { row, note, button };
}

export { KERNEL_WAIT_MS, Replayer, SNAPSHOT_VERSION, currentSnapshot, kernelWatch, onStaticPage, replayRow, snapshotMessages, timeline };
