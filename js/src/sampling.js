// nbstream front end: the sampling panel ("How was this picked?") and the compare
// columns' "where the columns part" line. Shared by the StreamWidget view (stream.js, and
// so the compare columns) and the ChatWidget view (chat.js), through token_views.js.
//
// The panel shows one step's next-token distribution as bars (the top 10 and the rest's
// mass), and three native range sliders (temperature, top-k, top-p) that start at the run's
// own settings (marked on each). Moving one asks the kernel (`distribution` message; the
// kernel keeps the step's logits, so only the first request runs the model) and redraws the
// bars from its reply: what each filter cut is greyed and named, and one sentence per
// settled change goes to a polite live region. Nothing here runs a generation.
//
// Token texts are model output: they go into the page with textContent only.

import { disconnected } from "./connection.js";
import { h } from "./dom.js";
import { isNum } from "./format.js";

// The messages (protocol.d.ts, written from nbstream/protocol.py; PROTOCOL.md says what
// they mean): the request a panel sends, without the slider values on a panel's first
// request (the kernel then uses the run's own settings), and the kernel's reply to the
// view that asked, with the probability of each of the `top` tokens at each stage.
/** @typedef {import("./protocol.js").DistributionRequest} DistributionRequest */
/** @typedef {import("./protocol.js").DistributionReply} DistributionReply */
/** @typedef {import("./protocol.js").SamplingSettings} Settings */
/** @typedef {import("./protocol.js").CompareMark} CompareMark */

/** The sliders: [setting, label, min, max, step, the value that turns it off]. */
const SLIDERS = /** @type {const} */ ([
  ["temperature", "Temperature", 0, 2, 0.05, null],
  ["top_k", "Top-k", 0, 100, 1, 0],
  ["top_p", "Top-p", 0.05, 1, 0.05, 1],
]);
const STAGE_WORDS = /** @type {Record<string, string>} */ ({
  temperature: "greedy (temperature 0)",
  top_k: "top-k",
  top_p: "top-p",
  min_p: "min-p",
  typical_p: "typical-p",
  top_h: "top-h",
  epsilon_cutoff: "the epsilon cutoff",
  eta_cutoff: "the eta cutoff",
  sequence_bias: "the model's sequence bias (a ban)",
  bad_words_ids: "a banned word (bad_words_ids)",
  no_repeat_ngram_size: "no repeated n-grams",
  min_length: "the minimum length",
  min_new_tokens: "the minimum length",
  suppress_tokens: "suppressed tokens",
  begin_suppress_tokens: "suppressed tokens",
  forced_bos_token_id: "a forced first token",
  forced_eos_token_id: "a forced last token",
});
/** The keys a range input moves with. */
const SLIDER_KEYS = new Set(["ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown", "Home", "End", "PageUp", "PageDown"]);
/** How long a slider rests before its change is said in words (one sentence per change). */
const SETTLE_MS = 450;
// Why the popover offers no panel, by where the token came from. Only a server's tokens
// come without ids (it sends none); tokens with ids but no logits are a recording's replay
// (the live model's tokens have logits), whose file kept only the alternatives it saved.
const UNAVAILABLE_SERVER =
  "How a token was picked needs the model's whole distribution (a local model): a server sends only its top few.";
const UNAVAILABLE_RECORDING =
  "How a token was picked needs the model's whole distribution, which only the live model has: a recording keeps just the top few alternatives it saved.";

let panelCount = 0;

/** @param {number} p */
function percent(p) {
  const v = p * 100;
  if (v <= 0) return "0%";
  if (v >= 100) return "100%";
  if (v < 0.1) return "<0.1%";
  if (v > 99.5) return ">99.5%";
  if (v < 10) return `${v.toFixed(1)}%`;
  return `${Math.round(v)}%`;
}

/** A slider's value in words. @param {string} name @param {number} v */
function valueText(name, v) {
  if (name === "temperature") return v === 0 ? "0 (greedy)" : String(+v.toFixed(2));
  if (name === "top_k") return v === 0 ? "off" : String(v);
  return v >= 1 ? "off (1)" : String(+v.toFixed(2));
}

/**
 * What a view gives its sampling panels.
 * @typedef {object} ExplainOptions
 * @property {import("./model.js").RunModel} model
 * @property {import("./view_scope.js").ViewScope} scope
 * @property {string} viewId
 * @property {(el: HTMLElement, text: string, kind: string) => void} pieces  a token's text, legibly
 * @property {() => boolean} local  whether the widget's model gives logits (can_explain)
 */

/** @typedef {{input: HTMLInputElement, out: HTMLElement, mark: HTMLElement, run: HTMLElement}} SliderControl */

/**
 * One slider's row: its label, the range input with the run's mark on its track, the value
 * and the run's own value in words.
 * @param {string} inputId @param {typeof SLIDERS[number]} slider
 * @returns {{row: HTMLElement, control: SliderControl}}
 */
function sliderRow(inputId, [name, label, min, max, step]) {
  const row = h("div", "nbstream-dist-slider", { "data-setting": name });
  const lab = h("label", "nbstream-dist-label", { for: inputId });
  lab.textContent = label;
  const track = h("span", "nbstream-dist-range");
  const input = /** @type {HTMLInputElement} */ (
    h("input", "nbstream-dist-input", {
      type: "range",
      id: inputId,
      min: String(min),
      max: String(max),
      step: String(step),
      "aria-describedby": `${inputId}-run`,
    })
  );
  const mark = h("span", "nbstream-dist-run-mark", { "aria-hidden": "true" });
  track.append(input, mark);
  const out = h("output", "nbstream-dist-value", { for: inputId });
  const run = h("span", "nbstream-dist-run", { id: `${inputId}-run` });
  row.append(lab, track, out, run);
  return { row, control: { input, out, mark, run } };
}

/**
 * A bar of the distribution: one of the top tokens, its probability after the last stage
 * (the model's own marked on the track), whether the run took it and what cut it.
 * @param {NonNullable<DistributionReply["top"]>[number]} entry @param {number} k its place
 * @param {number} last the last stage @param {number | null} chosen the token the run took
 * @param {ExplainOptions["pieces"]} pieces
 */
function barItem(entry, k, last, chosen, pieces) {
  const [tid, text, kind, probs, removed] = entry;
  const p = Number(probs[last]) || 0;
  const pm = Number(probs[0]) || 0;
  // data-p: the probability drawn (the last stage's), exactly as the kernel sent it.
  const li = h("li", "nbstream-dist-bar", { "data-token-id": String(tid), "data-p": String(p) });
  if (removed) {
    li.setAttribute("data-removed-by", removed);
    li.classList.add("nbstream-dist-cut");
  }
  const isChosen = Number(tid) === chosen;
  if (isChosen) li.setAttribute("data-chosen", "true");
  if (k >= 10) li.setAttribute("data-outside", "true");
  const tok = h("span", "nbstream-dist-token");
  pieces(tok, String(text), String(kind));
  const track = h("span", "nbstream-dist-track", { "aria-hidden": "true" });
  const fill = h("span", "nbstream-dist-fill");
  fill.style.width = `${(p * 100).toFixed(2)}%`;
  const ghost = h("span", "nbstream-dist-model");
  ghost.style.left = `${(pm * 100).toFixed(2)}%`;
  track.append(fill, ghost);
  const num = h("span", "nbstream-dist-pct");
  num.textContent = percent(p);
  num.title = `model: ${percent(pm)}`;
  const note = h("span", "nbstream-dist-mark");
  const bits = [];
  if (isChosen) bits.push(k >= 10 ? "\u2713 the run took this (outside the top 10)" : "\u2713 the run took this");
  if (removed) bits.push(`cut by ${STAGE_WORDS[removed] ?? removed}`);
  note.textContent = bits.join(" \u00b7 ");
  li.append(tok, track, num, note);
  return li;
}

/**
 * The last bar: the other tokens' mass, and how many tokens keep a chance.
 * @param {DistributionReply} msg @param {number} last the last stage
 */
function restItem(msg, last) {
  const rest = msg.rest ?? [];
  const others = Math.max(0, (msg.size ?? 0) - (msg.top ?? []).length);
  const li = h("li", "nbstream-dist-bar nbstream-dist-rest");
  const label = h("span", "nbstream-dist-token nbstream-dist-rest-label");
  label.textContent = `${others.toLocaleString("en-US")} other tokens`;
  const track = h("span", "nbstream-dist-track", { "aria-hidden": "true" });
  const fill = h("span", "nbstream-dist-fill");
  const pr = Number(rest[last]) || 0;
  fill.style.width = `${(pr * 100).toFixed(2)}%`;
  track.append(fill);
  const num = h("span", "nbstream-dist-pct");
  num.textContent = percent(pr);
  num.title = `model: ${percent(Number(rest[0]) || 0)}`;
  const kept = msg.kept ?? [];
  const note = h("span", "nbstream-dist-mark");
  note.textContent = `${Number(kept[last] ?? 0).toLocaleString("en-US")} token${kept[last] === 1 ? "" : "s"} keep a chance`;
  li.append(label, track, num, note);
  return li;
}

/**
 * The sampling panel of one view: one element, moved into the token list of the token it
 * explains (so at most one is open at a time), with what it shows and asks in one place.
 */
class ExplainPanel {
  /** @param {ExplainOptions} o */
  constructor(o) {
    this.o = o;
    const id = `nbstream-dist-${++panelCount}-${Math.random().toString(36).slice(2, 8)}`;
    this.panel = h("section", "nbstream-dist", {
      id,
      role: "region",
      "aria-label": "How this token was picked",
      "data-lm-suppress-shortcuts": "true",
    });
    this.panel.hidden = true;
    const head = h("div", "nbstream-dist-head");
    this.title = h("h3", "nbstream-dist-title", { tabindex: "-1" });
    this.closeBtn = h("button", "nbstream-dist-close", { type: "button", "aria-label": "Close" });
    this.closeBtn.textContent = "\u00d7";
    this.closeBtn.title = "Close (Escape)";
    head.append(this.title, this.closeBtn);
    const intro = h("p", "nbstream-dist-intro");
    intro.textContent =
      "The model's odds for this step, and what the sampling settings make of them. Moving a slider starts no run.";
    /** @type {Record<string, SliderControl>} */
    this.controls = {};
    const sliders = h("div", "nbstream-dist-sliders", { role: "group", "aria-label": "Sampling settings" });
    for (const slider of SLIDERS) {
      const { row, control } = sliderRow(`${id}-${slider[0]}`, slider);
      sliders.append(row);
      this.controls[slider[0]] = control;
    }
    this.resetBtn = /** @type {HTMLButtonElement} */ (h("button", "nbstream-dist-reset", { type: "button" }));
    this.resetBtn.textContent = "Reset to the run's settings";
    sliders.append(this.resetBtn);
    this.state = h("div", "nbstream-dist-state");
    this.bars = h("ol", "nbstream-dist-bars", { "aria-label": "Next-token probabilities, most likely first" });
    this.words = h("p", "nbstream-dist-words");
    this.noteEl = h("p", "nbstream-dist-note");
    this.errorEl = h("div", "nbstream-dist-error", { role: "alert" });
    this.live = h("div", "nbstream-dist-live", { "aria-live": "polite", role: "status" });
    this.panel.append(head, intro, sliders, this.state, this.bars, this.words, this.noteEl, this.errorEl, this.live);
    /** @type {import("./token_list.js").TokenList | null} the list it is open in */
    this.list = null;
    this.index = -1;
    this.runId = 0;
    /** the last request sent: a reply to an earlier one is stale */
    this.request = 0;
    /** @type {Settings | null} the run's own settings, once the first reply said them */
    this.runSettings = null;
    /** The slider moved last (its words are said once the reply settles), or "". */
    this.moved = "";
    /** @type {ReturnType<typeof setTimeout> | null} */
    this.settle = null;
    this.listen();
  }

  /** The sliders, Reset, Close, the panel's keys and the kernel's replies. */
  listen() {
    const { scope } = this.o;
    for (const [name] of SLIDERS) scope.on(this.controls[name].input, "input", () => this.slid(name));
    scope.on(this.resetBtn, "click", () => this.backToRun());
    scope.on(this.closeBtn, "click", () => this.close(true));
    scope.on(this.panel, "keydown", (/** @type {KeyboardEvent} */ e) => {
      if (SLIDER_KEYS.has(e.key) && /** @type {HTMLElement} */ (e.target).tagName === "INPUT") {
        // A slider's own keys: JupyterLab's notebook takes arrows (and prevents their default)
        // further up, and the slider would not move.
        e.stopPropagation();
        return;
      }
      if (e.key !== "Escape") return;
      e.preventDefault();
      e.stopPropagation();
      this.close(true);
    });
    scope.onModel("msg:custom", (/** @type {any} */ msg) => {
      if (msg?.type === "distribution") this.reply(msg);
    });
  }

  /** The sliders' values. */
  values() {
    /** @type {Record<string, number>} */
    const v = {};
    for (const [name] of SLIDERS) v[name] = Number(this.controls[name].input.value);
    return /** @type {Settings} */ (/** @type {unknown} */ (v));
  }

  /** Ask the kernel for the step's distribution. @param {Settings | null} s */
  ask(s) {
    this.request += 1;
    this.panel.setAttribute("data-request", String(this.request));
    // No kernel to answer: say so, rather than "Computing…" for ever.
    const gone = disconnected(this.panel);
    if (gone) {
      this.panel.setAttribute("data-state", "error");
      this.state.textContent = "";
      this.errorEl.textContent = gone;
      return;
    }
    this.panel.setAttribute("data-state", "loading");
    /** @type {DistributionRequest} */
    const msg = { type: "distribution", view: this.o.viewId, request: this.request, run_id: this.runId, step: this.index };
    if (s) Object.assign(msg, s);
    this.o.model.send(msg);
  }

  /** @param {Settings} s */
  setSliders(s) {
    for (const [name, , min, max] of SLIDERS) {
      const c = this.controls[name];
      const v = Number(s[/** @type {keyof Settings} */ (name)]);
      // A run's value past the slider's end (temperature 3) widens it, for this run only:
      // the next panel starts from the slider's own range again.
      const known = Number.isFinite(v);
      c.input.min = String(known ? Math.min(min, v) : min);
      c.input.max = String(known ? Math.max(max, v) : max);
      c.input.value = String(v);
      this.showValue(name);
    }
  }

  /** @param {string} name */
  showValue(name) {
    const c = this.controls[name];
    const text = valueText(name, Number(c.input.value));
    c.out.textContent = text;
    c.input.setAttribute("aria-valuetext", text);
  }

  /** Mark the run's own value on each slider. @param {Settings} s */
  markRun(s) {
    for (const [name] of SLIDERS) {
      const c = this.controls[name];
      const v = Number(s[/** @type {keyof Settings} */ (name)]);
      const min = Number(c.input.min);
      const max = Number(c.input.max);
      const at = max > min ? ((v - min) / (max - min)) * 100 : 0;
      c.mark.style.left = `${Math.min(100, Math.max(0, at)).toFixed(2)}%`;
      c.run.textContent = `run: ${valueText(name, v)}`;
      c.mark.title = `The run's own setting: ${valueText(name, v)}`;
    }
  }

  /** Open the panel on token i of `t`. @param {import("./token_list.js").TokenList} t @param {number} i */
  open(t, i) {
    if (this.list && this.list !== t) this.list.el.classList.remove("nbstream-dist-open");
    this.list = t;
    this.index = i;
    this.runId = Number(t.runId) || 0;
    this.runSettings = null;
    this.moved = "";
    this.o.scope.cancel(this.settle);
    t.close(); // the popover: the panel takes its place
    t.el.append(this.panel);
    t.el.classList.add("nbstream-dist-open");
    const tok = t.tokens[i];
    this.title.replaceChildren(`Step ${i + 1}: how `);
    const piece = h("span", "nbstream-dist-token");
    this.o.pieces(piece, String(tok?.[1] ?? ""), String(tok?.[2] ?? "text"));
    this.title.append(piece, " was picked");
    this.panel.setAttribute("aria-label", `How the token at step ${i + 1} was picked`);
    this.panel.setAttribute("data-step", String(i));
    this.panel.setAttribute("data-run-id", String(this.runId));
    this.blank();
    this.panel.hidden = false;
    this.ask(null);
    const first = this.controls.temperature.input;
    first.focus({ preventScroll: true });
    if (document.activeElement !== first) this.title.focus({ preventScroll: true });
    this.panel.scrollIntoView?.({ block: "nearest" });
  }

  /** Nothing shown yet: the step's distribution is being computed. */
  blank() {
    this.bars.replaceChildren();
    this.words.textContent = "";
    this.noteEl.hidden = true;
    this.errorEl.textContent = "";
    this.live.textContent = "";
    this.state.textContent = "Computing this step's distribution\u2026";
    // The sliders keep the focus they get (a disabled one could not take it): until the
    // first reply says the run's settings, a move is ignored (slid) and no value is shown.
    for (const [name] of SLIDERS) {
      this.controls[name].input.disabled = false;
      this.controls[name].input.removeAttribute("aria-disabled");
      this.controls[name].out.textContent = "\u2026";
    }
    this.resetBtn.disabled = true;
  }

  /** Close it; `refocus`: the token it explained takes the focus. @param {boolean} refocus */
  close(refocus) {
    if (this.panel.hidden) return;
    const t = this.list;
    const i = this.index;
    this.panel.hidden = true;
    this.o.scope.cancel(this.settle);
    this.request += 1; // a reply still on its way is stale now
    t?.el.classList.remove("nbstream-dist-open");
    if (refocus && t) {
      t.setCurrent(i);
      t.span(i)?.focus({ preventScroll: true });
    }
  }

  /** A reply from the kernel. @param {DistributionReply} msg */
  reply(msg) {
    if (this.panel.hidden || msg.view !== this.o.viewId || Number(msg.request) !== this.request) return; // stale
    this.panel.setAttribute("data-state", msg.error ? "error" : "ready");
    // aria-disabled, not disabled: a disabled slider that has the focus (open() put it
    // there) drops it to the page, and Esc would no longer reach the panel. A move is
    // ignored all the same while the run's settings are unknown (slid).
    for (const [name] of SLIDERS) {
      const off = !!msg.error && !this.runSettings;
      if (off) this.controls[name].input.setAttribute("aria-disabled", "true");
      else this.controls[name].input.removeAttribute("aria-disabled");
    }
    this.resetBtn.disabled = !this.runSettings && !msg.run_settings;
    if (msg.error) {
      this.state.textContent = "";
      this.errorEl.textContent = `Could not show this step: ${msg.error}`;
      return;
    }
    this.errorEl.textContent = "";
    this.state.textContent = "";
    if (!this.runSettings && msg.run_settings && msg.settings) {
      this.runSettings = msg.run_settings;
      this.setSliders(msg.settings);
      this.markRun(this.runSettings);
    }
    this.draw(msg);
    this.words.textContent = msg.words ?? "";
    this.noteEl.hidden = !msg.note;
    this.noteEl.textContent = msg.note ?? "";
    if (this.moved) this.sayLater(this.moved, msg.phrases ?? {});
  }

  /**
   * Once the sliders rest, say in words what the move of `said` did (one sentence per change).
   * @param {string} said @param {Record<string, string>} phrases
   */
  sayLater(said, phrases) {
    this.o.scope.cancel(this.settle);
    this.settle = this.o.scope.later(() => {
      this.live.textContent = [phrases[said], phrases.token].filter(Boolean).join("; ");
    }, SETTLE_MS);
  }

  /** The bars. @param {DistributionReply} msg */
  draw(msg) {
    const last = (msg.stages ?? []).length - 1;
    const chosen = msg.chosen ? Number(msg.chosen[0]) : null;
    const items = (msg.top ?? []).map((entry, k) => barItem(entry, k, last, chosen, this.o.pieces));
    this.bars.replaceChildren(...items, restItem(msg, last));
  }

  /** @param {string} name */
  slid(name) {
    if (!this.runSettings) {
      this.controls[name].out.textContent = "\u2026"; // the run's settings are not known yet
      return;
    }
    this.showValue(name);
    this.moved = name;
    this.o.scope.cancel(this.settle);
    this.ask(this.values());
  }

  /** Reset: the sliders go back to the run's own settings. */
  backToRun() {
    if (!this.runSettings) return;
    this.setSliders(this.runSettings);
    this.moved = "";
    this.o.scope.cancel(this.settle);
    this.live.textContent = "Back to the run's own settings.";
    this.ask(this.values());
  }
}

/**
 * The sampling panels of one view: at most one open at a time, in the token list of the
 * token it explains.
 * @param {ExplainOptions} o
 */
function explainPanels(o) {
  const p = new ExplainPanel(o);
  return {
    /** Open the panel on token i of `t`. @param {import("./token_list.js").TokenList} t @param {number} i */
    open(t, i) {
      p.open(t, i);
    },
    /** The list's run changed (a new run): a panel on it closes. @param {import("./token_list.js").TokenList} t */
    reset(t) {
      if (t === p.list) p.close(false);
    },
    /**
     * Why the popover offers no "How was this picked?" now, or "".
     * @param {boolean} fromServer  the token has no id: a server's
     */
    unavailable(fromServer) {
      if (o.local()) return "";
      return fromServer ? UNAVAILABLE_SERVER : UNAVAILABLE_RECORDING;
    },
  };
}

/**
 * A compare column's line "Columns part at token N: ...", and the mark on that token in the
 * token view (`compare_mark`, set by CompareWidget once every column has ended).
 * @param {object} o
 * @param {import("./model.js").StreamModel} o.model
 * @param {import("./view_scope.js").ViewScope} o.scope
 * @param {import("./token_list.js").TokenList} o.tokens
 * @returns {{line: HTMLElement, update: () => void}} the line (hidden while there is no
 *   mark), and what draws the mark again (call it once the token list changed)
 */
function compareMarkView({ model, scope, tokens }) {
  const line = h("div", "nbstream-parted", { role: "note" });
  line.hidden = true;
  function update() {
    /** @type {CompareMark | null} */
    const mark = model.get("compare_mark") ?? null;
    const step = mark && isNum(mark.step) ? mark.step : -1;
    line.hidden = step < 0;
    line.textContent = step < 0 ? "" : String(mark?.words ?? "");
    for (const el of tokens.list.querySelectorAll(".nbstream-token-parted")) {
      el.classList.remove("nbstream-token-parted");
    }
    if (step >= 0) tokens.span(step)?.classList.add("nbstream-token-parted");
  }
  scope.onModel("change:compare_mark", update);
  // The view calls `update` itself after a `tokens` message has filled or rebuilt its list
  // (its onTokens): a listener of our own could run before the view's (Backbone calls them
  // in the order they were added) and mark a list that is then rebuilt without the mark.
  update();
  return { line, update };
}

export { ExplainPanel, SLIDERS, UNAVAILABLE_RECORDING, UNAVAILABLE_SERVER, compareMarkView, explainPanels, percent, valueText };
