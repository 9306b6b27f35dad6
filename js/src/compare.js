// nbstream — browser front end of the header of `nbstream.widgets.compare.CompareWidget` (an
// anywidget): the shared prompt, Run all, Stop all, the Same seed checkbox and a summary of
// the columns' states. The columns themselves are StreamWidget views (stream.js) inside an
// ipywidgets HBox; this view never touches them.
//
// Built by js/build.mjs into nbstream/static/compare.js (ESM, minified).
//
// ---------------------------------------------------------------------------
// Synced traits. Mirror of the Python class `_Header` in nbstream/widgets/compare.py:
// tests/test_protocol.py compares the two both ways. The protocol as a whole is written
// down in PROTOCOL.md.
// ---------------------------------------------------------------------------

/**
 * @typedef {"idle" | "queued" | "running" | "complete" | "failed" | "cancelled"} Status
 */

/**
 * The synced traits of the compare header (nbstream/widgets/compare.py, `_Header`).
 * @typedef {object} CompareHeaderTraits
 * @property {string} prompt        the shared prompt (two-way: saved on input and before Run all)
 * @property {boolean} same_seed    the Same seed checkbox (two-way)
 * @property {Status[]} statuses    each column's state, left to right (Python → JS)
 * @property {string} summary       one line on the columns' states (Python → JS)
 * @property {string} input_error   why the last Run all started nothing, or "" (Python → JS)
 * @property {boolean[]} in_run_all each column's `in_run_all`: whether its current run was
 *   started by Run all (the header says those runs' start and end once) (Python → JS)
 */

/**
 * Custom messages, JS → Python (`model.send`).
 * @typedef {{type: "run", prompt: string, same_seed: boolean} | {type: "stop"}} OutgoingMessage
 */

import {
  ACTIVE,
  VERSION,
  h,
  iconButton,
  promptBox,
  swapButtons,
  syncedText,
  viewScope,
  watchConnection,
} from "./common.js";
import { announcer, compareAnnouncement, comparePhase, runAllStatuses, stopOnEscape } from "./announce.js";

/**
 * @param {{model: any, el: HTMLElement}} ctx
 * @returns {() => void} cleanup
 */
function render({ model, el }) {
  const scope = viewScope(model);
  const { on, onModel } = scope;
  const uid = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;

  // ---- DOM ---------------------------------------------------------------
  const root = h("div", "nbstream-compare", { "data-status": "idle", "data-version": VERSION });
  const prompt = promptBox(
    "nbstream-compare-prompt",
    "Shared prompt",
    2,
    "One prompt for every column… (Shift+Enter to run all)",
  );
  const runBtn = iconButton("nbstream-compare-run", "Run all", "▶", "Run every column on the prompt (Shift+Enter)");
  const stopBtn = iconButton(
    "nbstream-compare-stop",
    "Stop all",
    "■",
    "Stop the running column and withdraw the queued ones",
  );
  const seedId = `nbstream-compare-seed-${uid}`;
  const seedBox = h("input", "nbstream-compare-same-seed", { type: "checkbox", id: seedId });
  const seedLabel = h("label", "nbstream-compare-seed-label", { for: seedId });
  seedLabel.textContent = "Same seed";
  seedLabel.title = "Sampled columns share one seed, so they can be reproduced and compared";
  const seedGroup = h("span", "nbstream-compare-seed");
  seedGroup.append(seedBox, seedLabel);
  const actions = h("div", "nbstream-compare-actions");
  actions.append(runBtn, stopBtn);
  const promptRow = h("div", "nbstream-compare-prompt-row");
  promptRow.append(prompt, actions);
  // Not a live region: it changes at each column's step; the announcer says the start and
  // the end once (announce.js).
  const summary = h("span", "nbstream-compare-summary");
  const bar = h("div", "nbstream-compare-bar");
  bar.append(seedGroup, summary);
  const errorId = `nbstream-compare-error-${uid}`;
  const errorEl = h("div", "nbstream-compare-error", { role: "alert", id: errorId });
  root.append(promptRow, bar, errorEl);
  el.append(root);
  // What a screen reader hears: the columns' start once, their end once (announce.js). The
  // key is the phase (active / ended / idle): a run goes active then ended, so each of its
  // phases is said once, also between two views of the header.
  const announce = announcer(root, scope);
  watchConnection(scope, model, root);

  // ---- state -------------------------------------------------------------
  /** @returns {Status[]} */
  const statuses = () => /** @type {Status[]} */ (model.get("statuses") ?? []);
  const busy = () => statuses().some((s) => ACTIVE.has(s));

  function overall() {
    const s = statuses();
    if (s.some((x) => x === "running")) return "running";
    if (s.some((x) => x === "queued")) return "queued";
    if (s.length === 0 || s.every((x) => x === "idle")) return "idle";
    return "done";
  }

  function updateChrome() {
    const active = busy();
    root.setAttribute("data-status", overall());
    root.setAttribute("data-statuses", statuses().join(" "));
    swapButtons(runBtn, stopBtn, active);
    const line = String(model.get("summary") ?? "");
    if (summary.textContent !== line) summary.textContent = line;
    const checked = Boolean(model.get("same_seed"));
    if (seedBox.checked !== checked) seedBox.checked = checked;
    const error = String(model.get("input_error") ?? "");
    if (errorEl.textContent !== error) errorEl.textContent = error;
    errorEl.hidden = !error;
    if (error) {
      prompt.setAttribute("aria-invalid", "true");
      prompt.setAttribute("aria-describedby", errorId);
    } else {
      prompt.removeAttribute("aria-invalid");
      prompt.removeAttribute("aria-describedby");
    }
  }
  for (const name of ["statuses", "summary", "same_seed", "input_error"]) {
    onModel(`change:${name}`, updateChrome);
  }
  // A Run all's start once, its end once (announce.js): only the columns it started count
  // (`in_run_all`, in the same state message as `statuses`), and its end only once this
  // view saw it active. A column run alone says itself; the header says nothing of it.
  const ranAll = () => runAllStatuses(statuses(), model.get("in_run_all"));
  let sawActive = comparePhase(ranAll()) === "active";
  onModel("change:statuses", (/** @type {unknown} */ shared) => {
    const phase = comparePhase(ranAll());
    if (phase === "active" || (phase === "ended" && sawActive)) {
      announce.say(phase, compareAnnouncement(ranAll()), shared);
    }
    sawActive = phase === "active";
  });

  // ---- prompt (two-way; the kernel's value wins unless the user is typing) ---
  const savePrompt = syncedText(scope, model, prompt, "prompt");

  // ---- actions -----------------------------------------------------------
  const runAll = () => {
    if (busy()) return;
    savePrompt();
    // The prompt travels with the click: a state update may still be held back by
    // ipywidgets' throttle, a custom message is not.
    model.send({ type: "run", prompt: prompt.value, same_seed: seedBox.checked });
  };
  on(runBtn, "click", runAll);
  const stopAll = () => model.send({ type: "stop" });
  on(stopBtn, "click", stopAll);
  // Esc anywhere in the header: Stop all.
  stopOnEscape(scope, root, () => !stopBtn.disabled, stopAll);
  on(prompt, "keydown", (/** @type {KeyboardEvent} */ e) => {
    if (e.key === "Enter" && e.shiftKey) {
      e.preventDefault();
      e.stopPropagation();
      runAll();
    }
  });
  on(seedBox, "change", () => {
    model.set("same_seed", seedBox.checked);
    model.save_changes();
  });

  updateChrome();
  announce.seen(comparePhase(ranAll()));
  return scope.dispose;
}

export default { render };
