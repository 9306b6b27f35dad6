// nbstream — browser front end of the header of `nbstream.compare.CompareWidget` (an
// anywidget): the shared prompt, Run all, Stop all, the Same seed checkbox and a summary of
// the columns' states. The columns themselves are StreamWidget views (widget.js) inside an
// ipywidgets HBox; this view never touches them.
//
// Built by js/build.mjs into nbstream/static/compare.js (ESM, minified).
//
// ---------------------------------------------------------------------------
// Synced traits. Mirror of the Python class `_Header` in nbstream/compare.py:
// keep the two in step when either side changes.
// ---------------------------------------------------------------------------

/**
 * @typedef {"idle" | "queued" | "running" | "complete" | "failed" | "cancelled"} Status
 */

/**
 * The synced traits of the compare header (nbstream/compare.py, `_Header`).
 * @typedef {object} CompareHeaderTraits
 * @property {string} prompt        the shared prompt (two-way: saved on input and before Run all)
 * @property {boolean} same_seed    the Same seed checkbox (two-way)
 * @property {Status[]} statuses    each column's state, left to right (Python → JS)
 * @property {string} summary       one line on the columns' states (Python → JS)
 * @property {string} input_error   why the last Run all started nothing, or "" (Python → JS)
 */

/**
 * Custom messages, JS → Python (`model.send`).
 * @typedef {{type: "run", prompt: string, same_seed: boolean} | {type: "stop"}} OutgoingMessage
 */

import { ACTIVE, VERSION, h } from "./common.js";

const PROMPT_DEBOUNCE_MS = 300;

/**
 * @param {{model: any, el: HTMLElement}} ctx
 * @returns {() => void} cleanup
 */
function render({ model, el }) {
  const ac = new AbortController();
  const on = (target, type, fn, opts) =>
    target.addEventListener(type, fn, { ...opts, signal: ac.signal });
  /** @type {Array<[string, Function]>} */
  const modelHandlers = [];
  const onModel = (name, fn) => {
    model.on(name, fn);
    modelHandlers.push([name, fn]);
  };
  const uid = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;

  // ---- DOM ---------------------------------------------------------------
  const root = h("div", "nbstream-compare", { "data-status": "idle", "data-version": VERSION });
  const prompt = h("textarea", "nbstream-compare-prompt", {
    "aria-label": "Shared prompt",
    rows: "2",
    placeholder: "One prompt for every column… (Shift+Enter to run all)",
    spellcheck: "true",
    // Lumino skips its shortcuts for events from inside this element (Shift+Enter).
    "data-lm-suppress-shortcuts": "true",
  });
  const runBtn = h("button", "nbstream-compare-run", { type: "button", "aria-label": "Run all" });
  runBtn.innerHTML = '<span class="nbstream-btn-icon" aria-hidden="true">▶</span>Run all';
  runBtn.title = "Run every column on the prompt (Shift+Enter)";
  const stopBtn = h("button", "nbstream-compare-stop", { type: "button", "aria-label": "Stop all" });
  stopBtn.innerHTML = '<span class="nbstream-btn-icon" aria-hidden="true">■</span>Stop all';
  stopBtn.title = "Stop the running column and withdraw the queued ones";
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
  const summary = h("span", "nbstream-compare-summary", { role: "status" });
  const bar = h("div", "nbstream-compare-bar");
  bar.append(seedGroup, summary);
  const errorId = `nbstream-compare-error-${uid}`;
  const errorEl = h("div", "nbstream-compare-error", { role: "alert", id: errorId });
  root.append(promptRow, bar, errorEl);
  el.append(root);

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
    runBtn.disabled = active;
    stopBtn.disabled = !active;
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

  // ---- prompt (two-way; the kernel's value wins unless the user is typing) ---
  let promptDirty = false;
  /** @type {ReturnType<typeof setTimeout> | null} */
  let promptTimer = null;
  prompt.value = String(model.get("prompt") ?? "");
  const savePrompt = () => {
    if (promptTimer) clearTimeout(promptTimer);
    promptTimer = null;
    promptDirty = false;
    model.set("prompt", prompt.value);
    model.save_changes();
  };
  onModel("change:prompt", () => {
    const v = String(model.get("prompt") ?? "");
    if (!promptDirty && prompt.value !== v) prompt.value = v;
  });
  on(prompt, "input", () => {
    promptDirty = true;
    if (promptTimer) clearTimeout(promptTimer);
    promptTimer = setTimeout(savePrompt, PROMPT_DEBOUNCE_MS);
  });
  on(prompt, "blur", () => {
    if (promptDirty) savePrompt();
  });

  // ---- actions -----------------------------------------------------------
  const runAll = () => {
    if (busy()) return;
    savePrompt();
    // The prompt travels with the click: a state update may still be held back by
    // ipywidgets' throttle, a custom message is not.
    model.send({ type: "run", prompt: prompt.value, same_seed: seedBox.checked });
  };
  on(runBtn, "click", runAll);
  on(stopBtn, "click", () => model.send({ type: "stop" }));
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

  return () => {
    for (const [name, fn] of modelHandlers) model.off(name, fn);
    modelHandlers.length = 0;
    ac.abort();
    if (promptTimer) clearTimeout(promptTimer);
    promptTimer = null;
  };
}

export default { render };
