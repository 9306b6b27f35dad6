// nbstream — what a screen reader hears, and the Esc key.
//
// A streamed answer changes many times a second: announcing each fragment (what a live
// log does) buries the user in half-sentences. So the output is a log that is aria-busy
// and silent while a run streams (output.js, outputArea), and each view has one
// visually hidden live region (role=status, polite) that says:
//   - each state change once: "Queued", "Running";
//   - the end once: "Answer complete, 234 tokens" / "Stopped after 40 tokens" /
//     "Failed: <message>" / "Stopped at max_new_tokens, 300 tokens";
//   - the compare header, for a Run all: "Running 3 columns" once, then one summary once
//     every column it started has ended: "All 3 columns complete", "3 columns ended:
//     2 complete, 1 stopped" (Stop all too: its stopped columns are in that summary).
// A Run all is one action, so a screen-reader user hears it start once and end once, from
// the header; its columns say nothing of it (each column's own end, "temperature 0.7:
// Answer complete, 34 tokens", would make N+1 ends of one click; what each column did is
// in the column, where the user can go and read it). A column run alone (its own Run, a
// branch from its popover) is the other way round: the column says its states and its
// end with its label, and the header says nothing. The page cannot tell the two apart from
// the states alone (the header and the columns are separate widgets whose states arrive in
// separate messages), so the kernel says it: the column's `in_run_all` trait, set before
// its run's first state, and the header's copy of every column's (`in_run_all`, a list,
// with `statuses`); see PROTOCOL.md, "CompareWidget column". The header says a Run all's
// end only after it saw that Run all active (`in_run_all` set on columns still showing an
// earlier run's end is not an end).
// Announcements come from a change of the run's state only, never from a re-render, a
// reset, a view that opens on a run already going, or a switch to another answer (the
// switcher, `w.show`: an ended run this view never saw queued or running, see `ran`); two views of one widget in the page
// say it once between them (the dedupe key is kept per widget model, see `announcer`).
//
// Esc (stopOnEscape): pressed with the focus anywhere in a widget, it stops the run (Stop
// all in the compare header). Whatever opened a popover, a panel or a question keeps Esc
// for itself while open (the token popover, the settings panel, the chat's clear
// question): there Esc closes that, and the run goes on; the next Esc stops it.
//
// The words are made by pure functions (runAnnouncement, compareAnnouncement) that the Node
// tests check (js/test/announce.test.js); the DOM parts are tested in the browser
// (tests/browser/test_a11y_browser.py, test_keyboard_browser.py).

/** @param {unknown} x */
function isNum(x) {
  return typeof x === "number" && Number.isFinite(x);
}

/** "1 token", "234 tokens". @param {number} n @param {string} word */
function count(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

/**
 * What to say when a run's state becomes `status`: "" for nothing.
 * @param {string} status the run's state (idle, queued, running, complete, failed, cancelled)
 * @param {any} [metrics] the metrics trait (tokens, finish_reason, text_chunks)
 * @param {any} [errorInfo] the error_info trait ({type, message}) of a failed run
 * @param {{label?: string, liveTokens?: number | null, states?: boolean}} [opts]
 *   label: said first ("temperature 0.7: Answer complete, …"); liveTokens: the count the
 *   view last saw, used where the metrics have none; states: false says the end only (no
 *   "Queued" / "Running")
 * @returns {string}
 */
function runAnnouncement(status, metrics, errorInfo, opts = {}) {
  const m = metrics && typeof metrics === "object" ? metrics : {};
  const tokens = isNum(m.tokens) ? m.tokens : isNum(opts.liveTokens) ? opts.liveTokens : null;
  const states = opts.states !== false;
  let words = "";
  if (status === "queued") words = states ? "Queued" : "";
  else if (status === "running") words = states ? "Running" : "";
  else if (status === "complete") {
    const cut = m.finish_reason === "length";
    const head = cut ? "Stopped at max_new_tokens" : "Answer complete";
    if (tokens !== null) words = `${head}, ${count(tokens, "token")}`;
    // A server that sent no usage: pieces of text, never called tokens.
    else if (isNum(m.text_chunks)) words = `${head}, ${count(m.text_chunks, "chunk")}`;
    else words = head;
  } else if (status === "cancelled") {
    words = tokens !== null ? `Stopped after ${count(tokens, "token")}` : "Stopped";
  } else if (status === "failed") {
    const info = errorInfo && typeof errorInfo === "object" ? errorInfo : {};
    const message = String(info.message || info.type || "").trim();
    words = message ? `Failed: ${message}` : "Failed";
  }
  if (!words) return "";
  return opts.label ? `${opts.label}: ${words}` : words;
}

const ACTIVE = new Set(["queued", "running"]);

/**
 * The compare header's phase: "active" while any column is queued or running, "ended" once
 * every column that ran has ended, "idle" before any ran.
 * @param {string[]} statuses
 */
function comparePhase(statuses) {
  if (statuses.some((s) => ACTIVE.has(s))) return "active";
  if (statuses.length === 0 || statuses.every((s) => s === "idle")) return "idle";
  return "ended";
}

/**
 * The states of the columns whose current run a Run all started (the header's `in_run_all`);
 * every column's when that list does not match the columns.
 * @param {string[]} statuses each column's state, left to right
 * @param {unknown} inRunAll each column's `in_run_all`
 * @returns {string[]}
 */
function runAllStatuses(statuses, inRunAll) {
  if (!Array.isArray(inRunAll) || inRunAll.length !== statuses.length) return statuses;
  return statuses.filter((_, i) => inRunAll[i] === true);
}

/**
 * What the compare header says for its columns' states: "" for nothing.
 * @param {string[]} statuses each column's state, left to right
 */
function compareAnnouncement(statuses) {
  const phase = comparePhase(statuses);
  const n = statuses.length;
  const columns = count(n, "column");
  if (phase === "active") return `Running ${columns}`;
  if (phase !== "ended") return "";
  const ran = statuses.filter((s) => s !== "idle");
  if (ran.length === n && ran.every((s) => s === "complete")) {
    return n === 1 ? "The column is complete" : `All ${columns} complete`;
  }
  const words = { complete: "complete", cancelled: "stopped", failed: "failed", idle: "not run" };
  const parts = Object.entries(words)
    .map(([s, word]) => [statuses.filter((x) => x === s).length, word])
    .filter(([k]) => Number(k) > 0)
    .map(([k, word]) => `${k} ${word}`);
  return `${columns} ended: ${parts.join(", ")}`;
}

/**
 * The last thing said per widget model, shared by every view (and every bundle: each
 * widget's bundle has its own copy of this module) in the page.
 * @returns {WeakMap<object, string>}
 */
function saidPerModel() {
  const g = /** @type {any} */ (globalThis);
  if (!(g.__nbstreamAnnounced instanceof WeakMap)) g.__nbstreamAnnounced = new WeakMap();
  return g.__nbstreamAnnounced;
}

/** How long the region stays empty before new words (so that the same words are said again). */
const CLEAR_MS = 60;

/**
 * A view's live region: visually hidden (it is for screen readers), polite, read whole.
 * `say(key, words, shared)` announces `words` unless this view or another view of the same
 * widget already said `key` last: `key` names the state (e.g. "7:complete", run 7 ended
 * complete). `shared` is the widget's model object as change events give it (one object per
 * widget, where anywidget gives each view its own wrapper); without one, the view's own
 * memory only. `seen(key)` records a state as said without saying it (a view that opens
 * on a run already going).
 * @param {HTMLElement} root where the region goes (its last child)
 * @param {{later: (fn: () => void, ms: number) => any, cancel: (t: any) => void}} timers
 *   the view's timers (they end with the view)
 */
function announcer(root, timers) {
  const el = document.createElement("div");
  el.className = "nbstream-announcer";
  el.setAttribute("role", "status");
  el.setAttribute("aria-live", "polite");
  el.setAttribute("aria-atomic", "true");
  // Visually hidden, still in the accessibility tree (not display:none / hidden).
  el.style.cssText =
    "position:absolute;width:1px;height:1px;margin:-1px;padding:0;border:0;overflow:hidden;" +
    "clip:rect(0 0 0 0);clip-path:inset(50%);white-space:nowrap;";
  root.append(el);
  let last = "";
  /** @type {any} */
  let pending = null;
  /** The runs (run ids) this view saw queued or running: only their ends are said. */
  const active = new Set();
  return {
    el,
    /**
     * Whether run `rid` in state `status` is one whose state this view says: a run it saw
     * queued or running (also one going when the view opened). An ended run that was
     * never active here is a switch to another answer (the kernel shows a branch or the
     * original again with its end state): nothing ended then.
     * @param {number} rid @param {string} status
     */
    ran(rid, status) {
      if (ACTIVE.has(status)) active.add(rid);
      return active.has(rid);
    },
    /** @param {string} key */
    seen(key) {
      last = key;
    },
    /** @param {string} key @param {string} words @param {unknown} [shared] */
    say(key, words, shared) {
      const said = saidPerModel();
      const owner = shared && typeof shared === "object" ? shared : null;
      if (key === last || (owner && said.get(owner) === key)) {
        last = key;
        return;
      }
      last = key;
      // A view not shown (its output collapsed: JupyterLab detaches it; a hidden tab) would
      // say it where nobody hears it: it does not claim the widget's key, so a view that is
      // shown says it.
      if (!root.isConnected || root.getClientRects().length === 0) return;
      if (owner) said.set(owner, key);
      if (!words) return;
      if (!el.isConnected) root.append(el);
      timers.cancel(pending);
      // Emptied first: words equal to the last ones are then a change, and are said.
      el.textContent = "";
      pending = timers.later(() => {
        pending = null;
        el.textContent = words;
      }, CLEAR_MS);
    },
  };
}

/**
 * Esc anywhere in `root` calls `stop` while `active()`: what has a popover, a panel or a
 * question open handles Esc first and stops it there (stopPropagation / preventDefault), so
 * Esc closes that and the run goes on. An IME composing keeps its Esc.
 * @param {{on: (target: EventTarget, type: string, fn: (e: any) => void) => void}} scope
 * @param {HTMLElement} root @param {() => boolean} active @param {() => void} stop
 */
function stopOnEscape(scope, root, active, stop) {
  scope.on(root, "keydown", (/** @type {KeyboardEvent} */ e) => {
    if (e.key !== "Escape" || e.defaultPrevented || e.isComposing) return;
    if (!active()) return;
    e.preventDefault();
    // Not on to the notebook (which would leave edit mode or move the cell focus).
    e.stopPropagation();
    stop();
  });
}

export { announcer, compareAnnouncement, comparePhase, runAllStatuses, runAnnouncement, stopOnEscape };
