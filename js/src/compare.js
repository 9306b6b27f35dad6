// nbstream — browser front end of the header of `nbstream.widgets.compare.CompareWidget` (an
// anywidget): the shared prompt, Run all, Stop all, the Same seed and Blind checkboxes, a
// summary of the columns' states, and (models compared, or blind) a vote button per column
// and Tie, the round's votes, Reveal and what it revealed. The columns themselves are StreamWidget
// views (stream.js) inside an ipywidgets HBox; this view never touches them. Everything it
// shows is in the model's traits, so a view made again (a re-render) shows the same votes.
//
// Built by js/build.mjs into nbstream/static/compare.js (ESM, minified).
//
// ---------------------------------------------------------------------------
// Synced traits and messages: CompareHeaderTraits and CompareHeaderRequest of protocol.d.ts,
// which nbstream/protocol.py writes (the class `_Header`, nbstream/widgets/compare.py);
// model.d.ts types the model with them. What each means is in PROTOCOL.md.
// ---------------------------------------------------------------------------

/** @typedef {import("./protocol.js").WidgetStatus} Status */
/** @typedef {import("./model.js").CompareHeaderModel} CompareHeaderModel */

import { watchConnection } from "./connection.js";
import { h } from "./dom.js";
import { VERSION } from "./page.js";
import { promptBox, syncedText } from "./prompt.js";
import { iconButton, swapButtons } from "./run_buttons.js";
import { ACTIVE } from "./status.js";
import { viewScope } from "./view_scope.js";
import { announcer, compareAnnouncement, comparePhase, runAllStatuses, stopOnEscape } from "./announce.js";
import { kernelWatch } from "./replay.js";

/** The vote for neither answer: the Tie button's `label` in a `vote` message. */
const TIE = "tie";

/** What the header's controls say when no kernel holds the compare (a saved notebook). */
const SAVED_TITLE = "No running kernel holds this compare (a saved notebook): run its cells again to use it";

/**
 * The Same seed checkbox and its label.
 * @param {string} seedId
 */
function seedControl(seedId) {
  const box = /** @type {HTMLInputElement} */ (h("input", "nbstream-compare-same-seed", { type: "checkbox", id: seedId }));
  const label = h("label", "nbstream-compare-seed-label", { for: seedId });
  label.textContent = "Same seed";
  label.title = "Sampled columns share one seed, so they can be reproduced and compared";
  const group = h("span", "nbstream-compare-seed");
  group.append(box, label);
  return { group, box };
}

/**
 * The Blind checkbox and its label.
 * @param {string} blindId
 */
function blindControl(blindId) {
  const box = /** @type {HTMLInputElement} */ (h("input", "nbstream-compare-blind", { type: "checkbox", id: blindId }));
  const label = h("label", "nbstream-compare-blind-label", { for: blindId });
  label.textContent = "Blind";
  label.title = "Name the columns only A, B, C, each running a model drawn anew per round, until Reveal";
  const group = h("span", "nbstream-compare-seed");
  group.append(box, label);
  return { group, box };
}

/**
 * The vote row: a button per column (its label and count), Reveal, and what was revealed.
 * Drawn from the model's traits alone (`labels`, `votes`, `can_vote`, `revealed`).
 */
class VoteRow {
  /** @param {CompareHeaderModel} model @param {string} uid */
  constructor(model, uid) {
    this.model = model;
    this.root = h("div", "nbstream-compare-vote", { role: "group", "aria-label": "Vote for the better answer" });
    this.lead = h("span", "nbstream-compare-vote-lead");
    this.lead.textContent = "Better answer:";
    this.buttons = h("span", "nbstream-compare-vote-buttons");
    this.revealBtn = /** @type {HTMLButtonElement} */ (h("button", "nbstream-compare-reveal", { type: "button" }));
    this.revealBtn.textContent = "Reveal";
    this.revealBtn.title = "Show which model each label was (final for this round)";
    this.revealed = h("div", "nbstream-compare-revealed", { role: "status" });
    this.errorId = `nbstream-compare-vote-error-${uid}`;
    this.error = h("div", "nbstream-compare-error", { role: "alert", id: this.errorId });
    this.root.append(this.lead, this.buttons, this.revealBtn, this.revealed, this.error);
    /** @type {Map<string, HTMLButtonElement>} */
    this.byLabel = new Map();
  }

  /** @param {string} label */
  button(label) {
    let btn = this.byLabel.get(label);
    if (!btn) {
      btn = /** @type {HTMLButtonElement} */ (h("button", "nbstream-compare-vote-btn", { type: "button", "data-label": label }));
      this.byLabel.set(label, btn);
    }
    return btn;
  }

  update() {
    const { model } = this;
    this.root.hidden = !model.get("voting");
    const labels = model.get("labels") ?? [];
    const votes = /** @type {Record<string, number>} */ (model.get("votes") ?? {});
    const open = Boolean(model.get("can_vote"));
    const revealed = /** @type {Record<string, string>} */ (model.get("revealed") ?? {});
    // A button per letter, then Tie: a vote for neither answer (the kernel's "tie").
    const choices = labels.length ? [...labels, TIE] : [];
    const wanted = choices.map((label) => this.button(label));
    if (wanted.length !== this.buttons.children.length || wanted.some((b, i) => this.buttons.children[i] !== b)) {
      this.buttons.replaceChildren(...wanted);
    }
    for (const label of choices) {
      const btn = this.button(label);
      const count = Number(votes[label] ?? 0);
      const counted = `${count} vote${count === 1 ? "" : "s"}`;
      const text = `${label === TIE ? "Tie" : label} · ${count}`;
      if (btn.textContent !== text) btn.textContent = text;
      btn.setAttribute("aria-label", label === TIE ? `Vote a tie (${counted})` : `Vote for ${label} (${counted})`);
      btn.disabled = !open;
      const what = label === TIE ? "Neither answer is better: a tie" : `Vote for answer ${label}`;
      btn.title = open ? what : "Votes open once every answer has ended (closed after Reveal)";
    }
    const mapping = Object.entries(revealed);
    // Reveal is for a blind round: once one ran (every column idle: nothing to reveal yet).
    const statuses = model.get("statuses") ?? [];
    this.revealBtn.hidden = !model.get("blind") && mapping.length === 0;
    this.revealBtn.disabled = mapping.length > 0 || statuses.every((s) => s === "idle");
    const line = mapping.length ? `Revealed: ${mapping.map(([k, v]) => `${k} = ${v}`).join(" · ")}` : "";
    if (this.revealed.textContent !== line) this.revealed.textContent = line;
    this.revealed.hidden = !line;
    const error = String(model.get("vote_error") ?? "");
    if (this.error.textContent !== error) this.error.textContent = error;
    this.error.hidden = !error;
  }
}

/** The shared prompt and the Run all / Stop all buttons. */
function headerInputs() {
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
  return { prompt, runBtn, stopBtn };
}

/**
 * The header's view: its elements, and what it has said (announce.js), in one place.
 */
class CompareHeader {
  /** @param {CompareHeaderModel} model @param {HTMLElement} el */
  constructor(model, el) {
    this.model = model;
    this.scope = viewScope(model);
    const uid = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
    this.root = h("div", "nbstream-compare", { "data-status": "idle", "data-version": VERSION });
    const inputs = headerInputs();
    this.prompt = inputs.prompt;
    this.runBtn = inputs.runBtn;
    this.stopBtn = inputs.stopBtn;
    const seed = seedControl(`nbstream-compare-seed-${uid}`);
    this.seedBox = seed.box;
    const blind = blindControl(`nbstream-compare-blind-${uid}`);
    this.blindBox = blind.box;
    this.vote = new VoteRow(model, uid);
    const actions = h("div", "nbstream-compare-actions");
    actions.append(this.runBtn, this.stopBtn);
    const promptRow = h("div", "nbstream-compare-prompt-row");
    promptRow.append(this.prompt, actions);
    // Not a live region: it changes at each column's step; the announcer says the start and
    // the end once (announce.js).
    this.summary = h("span", "nbstream-compare-summary");
    const bar = h("div", "nbstream-compare-bar");
    bar.append(seed.group, blind.group, this.summary);
    this.errorId = `nbstream-compare-error-${uid}`;
    this.errorEl = h("div", "nbstream-compare-error", { role: "alert", id: this.errorId });
    this.root.append(promptRow, bar, this.errorEl, this.vote.root);
    el.append(this.root);
    // What a screen reader hears: the columns' start once, their end once (announce.js). The
    // key is the phase (active / ended / idle): a run goes active then ended, so each of its
    // phases is said once, also between two views of the header.
    this.announce = announcer(this.root, this.scope);
    watchConnection(this.scope, model, this.root);
    // A Run all's start once, its end once (announce.js): only the columns it started count
    // (`in_run_all`, in the same state message as `statuses`), and its end only once this
    // view saw it active. A column run alone says itself; the header says nothing of it.
    this.sawActive = comparePhase(this.ranAll()) === "active";
    this.listenModel();
    // The prompt: two-way, the kernel's value wins unless the user is typing.
    this.savePrompt = syncedText(this.scope, model, this.prompt, "prompt");
    this.listenPage();
    // A saved notebook: no kernel answers the sync, and the controls are turned off (the
    // columns show their saved runs, each with its Replay).
    this.offline = false;
    model.send({ type: "sync" });
    this.scope.onModel("msg:custom", (/** @type {{type?: unknown}} */ msg) => {
      if (msg?.type === "synced" && this.offline) this.setOffline(false);
    });
    // The columns' states reach the header only from a kernel: one that is busy with a cell
    // still sends them, before it gets to the sync.
    const fromKernel = ["change:statuses", "change:in_run_all", "change:summary"];
    kernelWatch(this.scope, { none: () => this.setOffline(true), some: () => this.setOffline(false) }, fromKernel);
    this.updateChrome();
    this.announce.seen(comparePhase(this.ranAll()));
  }

  /** The kernel's traits: the header's chrome, and what the announcer says. */
  listenModel() {
    const names = ["statuses", "summary", "same_seed", "input_error", "blind"];
    names.push("voting", "labels", "votes", "can_vote", "revealed", "vote_error");
    for (const name of names) {
      this.scope.onModel(`change:${name}`, () => this.updateChrome());
    }
    this.scope.onModel("change:statuses", (/** @type {unknown} */ shared) => this.statusesChanged(shared));
  }

  /** Run all, Stop all, Esc, Shift+Enter in the prompt, and Same seed. */
  listenPage() {
    const { scope, model } = this;
    const stopAll = () => model.send({ type: "stop" });
    scope.on(this.runBtn, "click", () => this.runAll());
    scope.on(this.stopBtn, "click", stopAll);
    // Esc anywhere in the header: Stop all.
    stopOnEscape(scope, this.root, () => !this.stopBtn.disabled, stopAll);
    scope.on(this.prompt, "keydown", (/** @type {KeyboardEvent} */ e) => {
      if (e.key === "Enter" && e.shiftKey) {
        e.preventDefault();
        e.stopPropagation();
        this.runAll();
      }
    });
    scope.on(this.seedBox, "change", () => {
      model.set("same_seed", this.seedBox.checked);
      model.save_changes();
    });
    scope.on(this.blindBox, "change", () => {
      model.set("blind", this.blindBox.checked);
      model.save_changes();
    });
    scope.on(this.vote.buttons, "click", (/** @type {MouseEvent} */ e) => {
      const btn = /** @type {HTMLElement | null} */ (e.target instanceof HTMLElement ? e.target.closest("button") : null);
      const label = btn?.getAttribute("data-label");
      if (label && !(/** @type {HTMLButtonElement} */ (btn).disabled)) model.send({ type: "vote", label });
    });
    scope.on(this.vote.revealBtn, "click", () => model.send({ type: "reveal" }));
  }

  /** @returns {Status[]} */
  statuses() {
    return this.model.get("statuses") ?? [];
  }

  busy() {
    return this.statuses().some((s) => ACTIVE.has(s));
  }

  /** The statuses of the columns the current Run all started. */
  ranAll() {
    return runAllStatuses(this.statuses(), this.model.get("in_run_all"));
  }

  overall() {
    const s = this.statuses();
    if (s.some((x) => x === "running")) return "running";
    if (s.some((x) => x === "queued")) return "queued";
    if (s.length === 0 || s.every((x) => x === "idle")) return "idle";
    return "done";
  }

  /** @param {boolean} offline no kernel answers this view (a saved notebook) */
  setOffline(offline) {
    this.offline = offline;
    this.root.toggleAttribute("data-saved", offline);
    this.prompt.readOnly = offline;
    if (!offline) {
      // A kernel answered after all (it was busy): the controls as they were.
      for (const c of this.root.querySelectorAll("[data-online-title]")) {
        c.setAttribute("title", c.getAttribute("data-online-title") ?? "");
        c.removeAttribute("data-online-title");
      }
      this.seedBox.disabled = false;
      this.blindBox.disabled = false;
    }
    this.updateChrome();
  }

  /** Off while no kernel answers: every control that would ask it for something. */
  applyOffline() {
    // Not Stop all: harmless without a kernel, and never withheld from a busy one.
    const controls = [this.runBtn, this.seedBox, this.blindBox, this.vote.revealBtn];
    for (const control of [...controls, ...this.vote.buttons.querySelectorAll("button")]) {
      const c = /** @type {HTMLButtonElement | HTMLInputElement} */ (control);
      c.disabled = true;
      if (!c.hasAttribute("data-online-title")) c.setAttribute("data-online-title", c.title);
      c.title = SAVED_TITLE;
    }
  }

  updateChrome() {
    const { model, prompt, errorEl } = this;
    this.root.setAttribute("data-status", this.overall());
    this.root.setAttribute("data-statuses", this.statuses().join(" "));
    swapButtons(this.runBtn, this.stopBtn, this.busy());
    const line = String(model.get("summary") ?? "");
    if (this.summary.textContent !== line) this.summary.textContent = line;
    const checked = Boolean(model.get("same_seed"));
    if (this.seedBox.checked !== checked) this.seedBox.checked = checked;
    const blind = Boolean(model.get("blind"));
    if (this.blindBox.checked !== blind) this.blindBox.checked = blind;
    this.vote.update();
    if (this.offline) this.applyOffline();
    const error = String(model.get("input_error") ?? "");
    if (errorEl.textContent !== error) errorEl.textContent = error;
    errorEl.hidden = !error;
    if (error) {
      prompt.setAttribute("aria-invalid", "true");
      prompt.setAttribute("aria-describedby", this.errorId);
    } else {
      prompt.removeAttribute("aria-invalid");
      prompt.removeAttribute("aria-describedby");
    }
  }

  /** Say a Run all's start, and its end once this view saw it active. @param {unknown} shared */
  statusesChanged(shared) {
    const phase = comparePhase(this.ranAll());
    if (phase === "active" || (phase === "ended" && this.sawActive)) {
      this.announce.say(phase, compareAnnouncement(this.ranAll()), shared);
    }
    this.sawActive = phase === "active";
  }

  runAll() {
    if (this.busy() || this.offline) return;
    this.savePrompt();
    // The prompt travels with the click: a state update may still be held back by
    // ipywidgets' throttle, a custom message is not.
    this.model.send({ type: "run", prompt: this.prompt.value, same_seed: this.seedBox.checked });
  }
}

/**
 * @param {{model: CompareHeaderModel, el: HTMLElement}} ctx
 * @returns {() => void} cleanup
 */
function render({ model, el }) {
  return new CompareHeader(model, el).scope.dispose;
}

export default { render };
