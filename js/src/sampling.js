// nbstream front end: the sampling panel ("How was this picked?", issue 16) and the compare
// columns' "where the columns part" line. Shared by the StreamWidget view (stream.js, and
// so the compare columns) and the ChatWidget view (chat.js), through tokens.js.
//
// The panel shows one step's next-token distribution as bars (the top 10 and the rest's
// mass), and three native range sliders (temperature, top-k, top-p) that start at the run's
// own settings (marked on each). Moving one asks the kernel (`distribution` message; the
// kernel keeps the step's logits, so only the first request runs the model) and redraws the
// bars from its reply: what each filter cut is greyed and named, and one sentence per
// settled change goes to a polite live region. Nothing here runs a generation.
//
// Token texts are model output: they go into the page with textContent only.

import { disconnected, h, isNum } from "./common.js";

/**
 * The request a panel sends (JS → Python). The slider values are absent on the first
 * request of a panel (the kernel then uses the run's own settings).
 * @typedef {{type: "distribution", view: string, request: number, run_id: number, step: number,
 *            temperature?: number, top_k?: number, top_p?: number}} DistributionRequest
 */

/**
 * The kernel's reply, to the view that asked (Python → JS). Each entry of `top` is
 * `[id, text, kind, probs, removed_by]`: `probs` the token's probability at each of
 * `stages` ("model", then each processor the run applied, by its setting's name; temperature,
 * top_k and top_p always), `removed_by` the first stage that gave it no
 * chance (null: it survives). `rest` and `kept` are per stage too. `error` is set (and the
 * rest absent) when the kernel could not answer.
 * @typedef {{type: "distribution", view: string, request: number, run_id: number,
 *            step: number, error: string | null, chosen?: [number, string, string],
 *            settings?: Settings, run_settings?: Settings, stages?: string[],
 *            top?: [number, string, string, number[], string | null][], rest?: number[],
 *            kept?: number[], size?: number, words?: string,
 *            phrases?: Record<string, string>, note?: string | null}} DistributionReply
 */

/** @typedef {{temperature: number, top_k: number, top_p: number}} Settings */

/**
 * A compare column's mark (the StreamWidget trait `compare_mark`, set by CompareWidget):
 * the first step where this column's tokens differ from the other columns', and the words.
 * @typedef {{step: number, words: string}} CompareMark
 */

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
const UNAVAILABLE =
  "How a token was picked needs the model's whole distribution (a local model): a server sends only its top few.";

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
 * The sampling panels of one view: at most one open at a time, in the token list of the
 * token it explains.
 * @param {object} o
 * @param {any} o.model
 * @param {import("./common.js").ViewScope} o.scope
 * @param {string} o.viewId
 * @param {(el: HTMLElement, text: string, kind: string) => void} o.pieces  a token's text, legibly
 * @param {() => boolean} o.local  whether the widget's model gives logits (can_explain)
 */
function explainPanels(o) {
  const { model, scope, viewId } = o;
  const id = `nbstream-dist-${++panelCount}-${Math.random().toString(36).slice(2, 8)}`;
  const panel = h("section", "nbstream-dist", {
    id,
    role: "region",
    "aria-label": "How this token was picked",
    "data-lm-suppress-shortcuts": "true",
  });
  panel.hidden = true;

  const head = h("div", "nbstream-dist-head");
  const title = h("h3", "nbstream-dist-title", { tabindex: "-1" });
  const closeBtn = h("button", "nbstream-dist-close", { type: "button", "aria-label": "Close" });
  closeBtn.textContent = "\u00d7";
  closeBtn.title = "Close (Escape)";
  head.append(title, closeBtn);

  const intro = h("p", "nbstream-dist-intro");
  intro.textContent =
    "The model's odds for this step, and what the sampling settings make of them. Moving a slider starts no run.";

  const sliders = h("div", "nbstream-dist-sliders", { role: "group", "aria-label": "Sampling settings" });
  /** @type {Record<string, {input: HTMLInputElement, out: HTMLElement, mark: HTMLElement, run: HTMLElement}>} */
  const controls = {};
  for (const [name, label, min, max, step] of SLIDERS) {
    const row = h("div", "nbstream-dist-slider", { "data-setting": name });
    const inputId = `${id}-${name}`;
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
    sliders.append(row);
    controls[name] = { input, out, mark, run };
  }
  const resetBtn = h("button", "nbstream-dist-reset", { type: "button" });
  resetBtn.textContent = "Reset to the run's settings";
  sliders.append(resetBtn);

  const state = h("div", "nbstream-dist-state");
  const bars = h("ol", "nbstream-dist-bars", { "aria-label": "Next-token probabilities, most likely first" });
  const words = h("p", "nbstream-dist-words");
  const noteEl = h("p", "nbstream-dist-note");
  const errorEl = h("div", "nbstream-dist-error", { role: "alert" });
  const live = h("div", "nbstream-dist-live", { "aria-live": "polite", role: "status" });
  panel.append(head, intro, sliders, state, bars, words, noteEl, errorEl, live);

  /** @type {import("./tokens.js").TokenList | null} */
  let list = null;
  let index = -1;
  let runId = 0;
  let request = 0;
  /** @type {Settings | null} */
  let runSettings = null;
  /** The slider moved last (its words are said once the reply settles), or "". */
  let moved = "";
  /** @type {ReturnType<typeof setTimeout> | null} */
  let settle = null;

  /** @param {DistributionRequest} msg */
  const send = (msg) => model.send(msg);

  function values() {
    /** @type {Record<string, number>} */
    const v = {};
    for (const [name] of SLIDERS) v[name] = Number(controls[name].input.value);
    return /** @type {Settings} */ (/** @type {unknown} */ (v));
  }

  /** @param {Settings | null} s */
  function ask(s) {
    request += 1;
    panel.setAttribute("data-request", String(request));
    // No kernel to answer: say so, rather than "Computing…" for ever.
    const gone = disconnected(panel);
    if (gone) {
      panel.setAttribute("data-state", "error");
      state.textContent = "";
      errorEl.textContent = gone;
      return;
    }
    panel.setAttribute("data-state", "loading");
    /** @type {DistributionRequest} */
    const msg = { type: "distribution", view: viewId, request, run_id: runId, step: index };
    if (s) Object.assign(msg, s);
    send(msg);
  }

  /** @param {Settings} s */
  function setSliders(s) {
    for (const [name, , min, max] of SLIDERS) {
      const c = controls[name];
      const v = Number(s[/** @type {keyof Settings} */ (name)]);
      // A run's value past the slider's end (temperature 3) widens it, for this run only:
      // the next panel starts from the slider's own range again.
      const known = Number.isFinite(v);
      c.input.min = String(known ? Math.min(min, v) : min);
      c.input.max = String(known ? Math.max(max, v) : max);
      c.input.value = String(v);
      showValue(name);
    }
  }

  /** @param {string} name */
  function showValue(name) {
    const c = controls[name];
    const v = Number(c.input.value);
    const text = valueText(name, v);
    c.out.textContent = text;
    c.input.setAttribute("aria-valuetext", text);
  }

  /** Mark the run's own value on each slider. @param {Settings} s */
  function markRun(s) {
    for (const [name] of SLIDERS) {
      const c = controls[name];
      const v = Number(s[/** @type {keyof Settings} */ (name)]);
      const min = Number(c.input.min);
      const max = Number(c.input.max);
      const at = max > min ? ((v - min) / (max - min)) * 100 : 0;
      c.mark.style.left = `${Math.min(100, Math.max(0, at)).toFixed(2)}%`;
      c.run.textContent = `run: ${valueText(name, v)}`;
      c.mark.title = `The run's own setting: ${valueText(name, v)}`;
    }
  }

  /** Open the panel on token i of `t`. @param {import("./tokens.js").TokenList} t @param {number} i */
  function open(t, i) {
    if (list && list !== t) list.el.classList.remove("nbstream-dist-open");
    list = t;
    index = i;
    runId = Number(t.runId) || 0;
    runSettings = null;
    moved = "";
    scope.cancel(settle);
    t.close(); // the popover: the panel takes its place
    t.el.append(panel);
    t.el.classList.add("nbstream-dist-open");
    const tok = t.tokens[i];
    title.replaceChildren(`Step ${i + 1}: how `);
    const piece = h("span", "nbstream-dist-token");
    o.pieces(piece, String(tok?.[1] ?? ""), String(tok?.[2] ?? "text"));
    title.append(piece, " was picked");
    panel.setAttribute("aria-label", `How the token at step ${i + 1} was picked`);
    panel.setAttribute("data-step", String(i));
    panel.setAttribute("data-run-id", String(runId));
    bars.replaceChildren();
    words.textContent = "";
    noteEl.hidden = true;
    errorEl.textContent = "";
    live.textContent = "";
    state.textContent = "Computing this step's distribution\u2026";
    // The sliders keep the focus they get (a disabled one could not take it): until the
    // first reply says the run's settings, a move is ignored (slid) and no value is shown.
    for (const [name] of SLIDERS) {
      controls[name].input.disabled = false;
      controls[name].input.removeAttribute("aria-disabled");
      controls[name].out.textContent = "\u2026";
    }
    resetBtn.disabled = true;
    panel.hidden = false;
    ask(null);
    controls.temperature.input.focus({ preventScroll: true });
    if (document.activeElement !== controls.temperature.input) title.focus({ preventScroll: true });
    panel.scrollIntoView?.({ block: "nearest" });
  }

  /** Close it; `refocus`: the token it explained takes the focus. @param {boolean} refocus */
  function close(refocus) {
    if (panel.hidden) return;
    const t = list;
    const i = index;
    panel.hidden = true;
    scope.cancel(settle);
    request += 1; // a reply still on its way is stale now
    t?.el.classList.remove("nbstream-dist-open");
    if (refocus && t) {
      t.setCurrent(i);
      t.span(i)?.focus({ preventScroll: true });
    }
  }

  /** A reply from the kernel. @param {DistributionReply} msg */
  function reply(msg) {
    if (panel.hidden || msg.view !== viewId || Number(msg.request) !== request) return; // stale
    panel.setAttribute("data-state", msg.error ? "error" : "ready");
    // aria-disabled, not disabled: a disabled slider that has the focus (open() put it
    // there) drops it to the page, and Esc would no longer reach the panel. A move is
    // ignored all the same while the run's settings are unknown (slid).
    for (const [name] of SLIDERS) {
      const off = !!msg.error && !runSettings;
      if (off) controls[name].input.setAttribute("aria-disabled", "true");
      else controls[name].input.removeAttribute("aria-disabled");
    }
    resetBtn.disabled = !runSettings && !msg.run_settings;
    if (msg.error) {
      state.textContent = "";
      errorEl.textContent = `Could not show this step: ${msg.error}`;
      return;
    }
    errorEl.textContent = "";
    state.textContent = "";
    if (!runSettings && msg.run_settings && msg.settings) {
      runSettings = msg.run_settings;
      setSliders(msg.settings);
      markRun(runSettings);
    }
    draw(msg);
    words.textContent = msg.words ?? "";
    noteEl.hidden = !msg.note;
    noteEl.textContent = msg.note ?? "";
    if (moved) {
      const said = moved;
      scope.cancel(settle);
      settle = scope.later(() => {
        const p = msg.phrases ?? {};
        live.textContent = [p[said], p.token].filter(Boolean).join("; ");
      }, SETTLE_MS);
    }
  }

  /** The bars. @param {DistributionReply} msg */
  function draw(msg) {
    const stages = msg.stages ?? [];
    const last = stages.length - 1;
    const chosen = msg.chosen ? Number(msg.chosen[0]) : null;
    const top = msg.top ?? [];
    const items = top.map((entry, k) => {
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
      o.pieces(tok, String(text), String(kind));
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
    });
    const rest = msg.rest ?? [];
    const others = Math.max(0, (msg.size ?? 0) - top.length);
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
    bars.replaceChildren(...items, li);
  }

  /** @param {string} name */
  function slid(name) {
    if (!runSettings) {
      controls[name].out.textContent = "\u2026"; // the run's settings are not known yet
      return;
    }
    showValue(name);
    moved = name;
    scope.cancel(settle);
    ask(values());
  }

  for (const [name] of SLIDERS) scope.on(controls[name].input, "input", () => slid(name));
  scope.on(resetBtn, "click", () => {
    if (!runSettings) return;
    setSliders(runSettings);
    moved = "";
    scope.cancel(settle);
    live.textContent = "Back to the run's own settings.";
    ask(values());
  });
  scope.on(closeBtn, "click", () => close(true));
  scope.on(panel, "keydown", (/** @type {KeyboardEvent} */ e) => {
    if (SLIDER_KEYS.has(e.key) && /** @type {HTMLElement} */ (e.target).tagName === "INPUT") {
      // A slider's own keys: JupyterLab's notebook takes arrows (and prevents their default)
      // further up, and the slider would not move.
      e.stopPropagation();
      return;
    }
    if (e.key !== "Escape") return;
    e.preventDefault();
    e.stopPropagation();
    close(true);
  });
  scope.onModel("msg:custom", (/** @type {any} */ msg) => {
    if (msg?.type === "distribution") reply(msg);
  });

  return {
    open,
    /** The list's run changed (a new run): a panel on it closes. @param {import("./tokens.js").TokenList} t */
    reset(t) {
      if (t === list) close(false);
    },
    /** Why the popover offers no "How was this picked?" now, or "". */
    unavailable() {
      return o.local() ? "" : UNAVAILABLE;
    },
  };
}

/**
 * A compare column's line "Columns part at token N: ...", and the mark on that token in the
 * token view (`compare_mark`, set by CompareWidget once every column has ended).
 * @param {object} o
 * @param {any} o.model
 * @param {import("./common.js").ViewScope} o.scope
 * @param {import("./tokens.js").TokenList} o.tokens
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

export { SLIDERS, UNAVAILABLE, compareMarkView, explainPanels, percent, valueText };
