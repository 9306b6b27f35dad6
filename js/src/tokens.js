// nbstream front end: the teaching views, shared by the StreamWidget view
// (stream.js) and the ChatWidget view (chat.js): the Tokens / Probabilities /
// Alternatives toggles, a run's token list, its legend and notes, the alternatives
// popover, and the controller that ties them into a view (tokenViews). The protocol (the
// `tokens` message, the show_* traits, can_trace) is in protocol.d.ts and PROTOCOL.md.
//
// Tokens are model output: every piece of text goes into the page with textContent
// (never as HTML), so a token reading `<img src=x onerror=...>` stays text.

import { disconnected, sayNoKernel } from "./connection.js";
import { h } from "./dom.js";
import { isNum } from "./format.js";
import { markThinking, thinkingMark } from "./thinking.js";
import { lensSections } from "./lens.js";
import { explainPanels } from "./sampling.js";

/**
 * The toggles: [trait, button name (its accessible name), what it does].
 * @type {Array<["show_tokens" | "show_probabilities" | "show_alternatives", string, string]>}
 */
const TOGGLES = [
  ["show_tokens", "Tokens", "Show the answer as its real tokens, boundaries visible"],
  [
    "show_probabilities",
    "Probabilities",
    "Shade each token by the probability the model gave it (and show the rank of sampled picks)",
  ],
  [
    "show_alternatives",
    "Alternatives",
    "Click or focus a token to see the model's top candidates at that step",
  ],
];

/**
 * Viridis (matplotlib's default map: perceptually uniform, readable with the common
 * colour-vision deficiencies and in greyscale), at 0, 0.1, ... 1.
 */
const VIRIDIS = [
  [0x44, 0x01, 0x54],
  [0x48, 0x24, 0x75],
  [0x41, 0x44, 0x87],
  [0x35, 0x5f, 0x8d],
  [0x2a, 0x78, 0x8e],
  [0x21, 0x91, 0x8c],
  [0x22, 0xa8, 0x84],
  [0x44, 0xbf, 0x70],
  [0x7a, 0xd1, 0x51],
  [0xbd, 0xdf, 0x26],
  [0xfd, 0xe7, 0x25],
];

const NO_CAPTURE_NOTE = "This run was made without probabilities; run again to capture them";
/** The same, while that run is still going (it started before they were asked for). */
const NO_CAPTURE_RUNNING_NOTE =
  "This run is going without probabilities (it started before they were asked for); run again once it ends to capture them";
const REMOTE_NOTE =
  "Token views need a local model, or a run on a server made with alternatives=5: this one has no token probabilities (a server sends text, not tokens, unless asked).";
const RAW_BLOCKED = "The token view is shown: turn Tokens, Probabilities and Alternatives off for the text";
const CUT_TITLE = "The run's settings gave it no chance (temperature / top-k / top-p, or greedy decoding)";

/** @param {number} c 0..255 */
const hex2 = (c) => Math.round(c).toString(16).padStart(2, "0");

/**
 * The colour of probability p on the scale, and the text colour that reads best on it.
 * @param {number} p 0..1
 * @returns {{bg: string, fg: string}}
 */
function shade(p) {
  const x = Math.min(1, Math.max(0, p)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  const t = x - i;
  const rgb = VIRIDIS[i].map((a, k) => a + (VIRIDIS[i + 1][k] - a) * t);
  // WCAG relative luminance; black or white text, whichever contrasts more.
  const lin = rgb.map((c) => {
    const s = c / 255;
    return s <= 0.04045 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
  });
  const lum = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2];
  const fg = (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) ? "#000" : "#fff";
  return { bg: `#${rgb.map(hex2).join("")}`, fg };
}

/** The scale as a CSS gradient (the legend's bar). */
function gradient() {
  const stops = VIRIDIS.map((c, i) => `#${c.map(hex2).join("")} ${i * 10}%`);
  return `linear-gradient(to right, ${stops.join(", ")})`;
}

/** A probability as a percentage, never rounded to 0% or 100% when it is neither. @param {number} p */
function pct(p) {
  const v = p * 100;
  if (v <= 0) return "0%";
  if (v >= 100) return "100%";
  if (v < 0.01) return "<0.01%";
  if (v < 1) return `${v.toFixed(2)}%`;
  if (v > 99.9) return ">99.9%";
  return `${v.toFixed(1)}%`;
}

/**
 * A token's text for hover and popover headings: JSON-escaped so whitespace shows.
 * @param {unknown} text @param {unknown} kind
 */
function describe(text, kind) {
  if (kind === "bytes") return `bytes ${text}`;
  if (kind === "special") return String(text);
  return JSON.stringify(String(text));
}

/**
 * Put a token's text into `el`, legibly: each space, newline, tab and carriage return is
 * its own span holding the real character (so copying gives the real text) with a marker
 * drawn by CSS (a faint middle dot over a space, a return arrow before a line break...);
 * a byte piece is a small hex badge, a special token a framed label.
 * @param {HTMLElement} el @param {string} text @param {string} kind
 */
function appendPieces(el, text, kind) {
  text = String(text ?? "");
  if (kind === "bytes") {
    const b = h("span", "nbstream-tok-bytes");
    b.textContent = text;
    el.append(b);
    return;
  }
  if (kind === "special") {
    const s = h("span", "nbstream-tok-special");
    s.textContent = text;
    el.append(s);
    return;
  }
  if (text === "") {
    el.setAttribute("data-empty", "true");
    return;
  }
  let run = "";
  for (const c of text) {
    const ws = c === " " ? "space" : c === "\n" ? "newline" : c === "\t" ? "tab" : c === "\r" ? "return" : "";
    if (!ws) {
      run += c;
      continue;
    }
    if (run) el.append(run);
    run = "";
    const w = h("span", "nbstream-ws", { "data-ws": ws });
    w.textContent = c;
    el.append(w);
  }
  if (run) el.append(run);
}

/**
 * The real text of some tokens (byte pieces joined back into their characters).
 * @param {any[][]} tokens [id, text, kind, ...] (TokenEntry in protocol.d.ts)
 */
function realText(tokens) {
  const enc = new TextEncoder();
  /** @type {number[]} */
  const bytes = [];
  for (const t of tokens) {
    const text = String(t[1] ?? "");
    if (t[2] === "bytes") {
      for (const x of text.split(/\s+/)) if (/^[0-9a-fA-F]{2}$/.test(x)) bytes.push(parseInt(x, 16));
    } else {
      for (const b of enc.encode(text)) bytes.push(b);
    }
  }
  return new TextDecoder().decode(new Uint8Array(bytes));
}

/**
 * The modes the show_* traits ask for.
 * @param {import("./model.js").RunModel} model
 */
function tokenModes(model) {
  const tokens = model.get("show_tokens") === true;
  const probs = model.get("show_probabilities") === true;
  const alts = model.get("show_alternatives") === true;
  return { tokens, probs, alts, any: tokens || probs || alts };
}

/** Whether the widget's model gives token ids and probabilities (absent: assume so). @param {import("./model.js").RunModel} model */
function canTrace(model) {
  return model.get("can_trace") !== false;
}

/**
 * Whether the widget's model gives its logits for the sampling panel: a local model, not a
 * server (absent: as can_trace, from a kernel that did not say).
 * @param {import("./model.js").RunModel} model
 */
function canExplain(model) {
  const v = model.get("can_explain");
  return v === undefined || v === null ? canTrace(model) : v === true;
}

/** A token's id, or null: a run on a server sends none (its tokens are keyed by position). @param {unknown} id */
const hasId = (id) => id !== null && id !== undefined;

/**
 * The three toggle buttons, in a group for the status bar. A click sets the trait
 * (Python follows, and sends the tokens); the buttons follow the traits.
 * @param {{model: import("./model.js").RunModel, on: Function, onModel: Function, changed: () => void}} opts
 * @returns {{group: HTMLElement, update: () => void}}
 */
function tokenToggles({ model, on, onModel, changed }) {
  const group = h("div", "nbstream-view-toggles", { role: "group", "aria-label": "Token views" });
  const buttons = TOGGLES.map(([trait, name, title]) => {
    const b = h("button", `nbstream-view-toggle nbstream-${trait.replace("show_", "")}-toggle`, {
      type: "button",
      "aria-label": name,
      "aria-pressed": "false",
      "data-trait": trait,
    });
    b.textContent = name;
    b.title = title;
    on(b, "click", () => {
      model.set(trait, model.get(trait) !== true);
      model.save_changes();
    });
    group.append(b);
    return b;
  });
  function update() {
    buttons.forEach((b, i) => {
      const pressed = String(model.get(TOGGLES[i][0]) === true);
      if (b.getAttribute("aria-pressed") !== pressed) b.setAttribute("aria-pressed", pressed);
    });
  }
  for (const [trait] of TOGGLES) {
    onModel(`change:${trait}`, () => {
      update();
      changed();
    });
  }
  onModel("change:can_trace", changed);
  update();
  return { group, update };
}

/** The legend of the probability shading. */
function makeLegend() {
  const legend = h("div", "nbstream-legend", { role: "group", "aria-label": "Probability legend" });
  const title = h("span", "nbstream-legend-title");
  title.textContent = "Probability the model gave each token";
  const scale = h("span", "nbstream-legend-scale");
  const lo = h("span", "nbstream-legend-label");
  lo.textContent = "0%";
  const bar = h("span", "nbstream-legend-bar", { "aria-hidden": "true" });
  bar.style.background = gradient();
  const mid = h("span", "nbstream-legend-mid", { "aria-hidden": "true" });
  mid.textContent = "50%";
  bar.append(mid);
  const hi = h("span", "nbstream-legend-label");
  hi.textContent = "100%";
  scale.append(lo, bar, hi);
  const rank = h("span", "nbstream-legend-rank");
  const sample = h("span", "nbstream-legend-rank-sample", { "data-rank": "3" });
  rank.append(sample, "rank of a pick that was not the model's favourite");
  legend.append(title, scale, rank);
  return legend;
}

/** @param {"capture" | "remote"} which */
function makeNote(which) {
  const note = h("div", "nbstream-token-note", { "data-note": which, role: "note" });
  note.textContent = which === "remote" ? REMOTE_NOTE : NO_CAPTURE_NOTE;
  return note;
}

/**
 * Word the "made without probabilities" note for its run: still going, or ended.
 * @param {HTMLElement} note @param {boolean} running
 */
function sayCapture(note, running) {
  const words = running ? NO_CAPTURE_RUNNING_NOTE : NO_CAPTURE_NOTE;
  if (note.textContent !== words) note.textContent = words;
}

/**
 * The popover's head: the step, the token it chose, its probability and rank, its id.
 * @param {number} i @param {any[]} token [id, text, kind, logprob, rank, ...]
 */
function popHead(i, [id, text, kind, logprob, rank]) {
  const head = h("div", "nbstream-alt-head");
  const step = h("span", "nbstream-alt-step");
  step.textContent = `Step ${i + 1}`;
  const chose = h("span", "nbstream-alt-chose");
  const piece = h("span", "nbstream-alt-token");
  appendPieces(piece, text, kind);
  chose.append("chose ", piece);
  head.append(step, chose);
  if (isNum(logprob)) {
    const p = h("span", "nbstream-alt-p");
    p.textContent = `${pct(Math.exp(logprob))}${isNum(rank) ? ` \u00b7 rank ${rank}` : ""}`;
    head.append(p);
  }
  if (hasId(id)) {
    const idEl = h("span", "nbstream-alt-id");
    idEl.textContent = `id ${id}`;
    head.append(idEl);
  }
  return head;
}

/** The alternatives table's columns: [heading, class]. */
const ALT_COLUMNS = [
  ["#", "nbstream-alt-rank"],
  ["Token", "nbstream-alt-text"],
  ["Probability", "nbstream-alt-prob"],
  ["", "nbstream-alt-mark"],
];

/**
 * The table of a step's alternatives, and whether the chosen token is among them and
 * whether the run's settings cut any.
 * @param {any[][]} alts [id, text, kind, logprob, cut] each, best first
 * @param {unknown} id the chosen token's id (null on a server) @param {any} rank its rank
 */
function altTable(alts, id, rank) {
  const table = h("table", "nbstream-alt-table");
  const caption = h("caption", "nbstream-alt-caption");
  // A server's tokens have no ids: its list is what the server sent, in its order.
  const server = !hasId(id);
  caption.textContent = `The ${server ? "server" : "model"}'s top ${alts.length} at this step`;
  const thead = h("thead");
  const hr = h("tr");
  for (const [label, cls] of ALT_COLUMNS) {
    const th = h("th", cls, { scope: "col" });
    th.textContent = label;
    if (!label) th.setAttribute("aria-label", "Note");
    hr.append(th);
  }
  thead.append(hr);
  const tbody = h("tbody");
  let chosenShown = false;
  let anyCut = false;
  alts.forEach((a, k) => {
    if (!Array.isArray(a)) return;
    // On a server, the chosen one is where its rank says (the server's list, best first).
    const chosen = server ? isNum(rank) && k === rank - 1 : Number(a[0]) === Number(id);
    chosenShown ||= chosen;
    anyCut ||= a[4] === true;
    tbody.append(altRow(a, k, chosen));
  });
  table.append(caption, thead, tbody);
  return { table, chosenShown, anyCut };
}

/**
 * One alternative's row: its rank, text, probability bar and marks (chosen, cut).
 * @param {any[]} a [id, text, kind, logprob, cut] @param {number} k its place
 * @param {boolean} chosen whether the run took it
 */
function altRow([aid, atext, akind, alp, cut], k, chosen) {
  const tr = h("tr", "nbstream-alt", { "data-index": String(k) });
  if (hasId(aid)) tr.setAttribute("data-token-id", String(aid));
  if (chosen) tr.classList.add("nbstream-alt-chosen");
  if (cut === true) tr.classList.add("nbstream-alt-cut");
  const tdRank = h("td", "nbstream-alt-rank");
  tdRank.textContent = String(k + 1);
  const tdText = h("td", "nbstream-alt-text");
  const ap = h("span", "nbstream-alt-token");
  appendPieces(ap, atext, akind === "bytes" || akind === "special" ? akind : "text");
  ap.title = describe(atext, akind);
  tdText.append(ap);
  const tdProb = h("td", "nbstream-alt-prob");
  const bar = h("span", "nbstream-alt-bar", { "aria-hidden": "true" });
  const fill = h("span", "nbstream-alt-bar-fill");
  const pv = isNum(alp) ? Math.exp(alp) : 0;
  fill.style.width = `${(pv * 100).toFixed(2)}%`;
  bar.append(fill);
  const num = h("span", "nbstream-alt-pct");
  num.textContent = isNum(alp) ? pct(pv) : "?";
  tdProb.append(bar, num);
  const tdMark = h("td", "nbstream-alt-mark");
  if (chosen) {
    const m = h("span", "nbstream-alt-chosen-label");
    m.textContent = "\u2713 chosen";
    tdMark.append(m);
  }
  if (cut === true) {
    const m = h("span", "nbstream-alt-cut-label");
    m.textContent = "cut";
    m.title = CUT_TITLE;
    tdMark.append(m);
  }
  tr.append(tdRank, tdText, tdProb, tdMark);
  return tr;
}

let popoverCount = 0;

/**
 * One run's tokens as the view shows them: `span.nbstream-token` elements in
 * `.nbstream-tokens`, appended as `tokens` messages arrive, and the popover of the
 * alternatives at a step.
 */
class TokenList {
  /**
   * @param {number | null} runId the run whose tokens these are
   * @param {{label?: string, changed?: () => void, opened?: () => void,
   *          closeOthers?: (list: TokenList) => void,
   *          branch?: {fill: (list: TokenList, i: number) => void} | null,
   *          explain?: ReturnType<typeof explainPanels> | null,
   *          lens?: ReturnType<typeof lensSections> | null}} [opts]
   *   changed: tokens came or went; opened: a popover opened (the view stops following
   *   the end of the output, so that streaming does not scroll it away)
   */
  constructor(runId, opts = {}) {
    this.runId = runId;
    /** @type {any[][]} one entry per token: [id, text, kind, logprob, rank, alts] */
    this.tokens = [];
    this.thinking = 0; // a reasoning model's: how many of the first tokens are its thinking
    this.modes = { tokens: false, probs: false, alts: false };
    this.current = 0; // the token that takes the focus (roving tabindex)
    this.openIndex = -1; // the token whose popover is open, or -1
    this.refocusing = false; // Escape gives the token back its focus: no popover then
    this.changed = opts.changed || (() => {});
    this.closeOthers = opts.closeOthers || (() => {});
    this.opened = opts.opened || (() => {});
    // The popover's "Continue with this token" (branches.js, branchAction), or null.
    this.branch = opts.branch || null;
    // The popover's "How was this picked?": the sampling panel (sampling.js), or null.
    this.explain = opts.explain || null;
    // The popover's "Inside the model" (lens.js), or null.
    this.lens = opts.lens || null;
    this.ac = new AbortController();

    this.el = h("div", "nbstream-tokens-view", {
      // Lumino (JupyterLab) leaves keys pressed in here to this element: the arrow keys
      // move between tokens rather than between cells, Escape closes the popover only.
      "data-lm-suppress-shortcuts": "true",
    });
    this.list = h("div", "nbstream-tokens", {
      role: "group", // a name needs a role (axe: aria-prohibited-attr)
      "aria-label": opts.label || "Tokens",
      "data-boundaries": "false",
      "data-probs": "false",
      "data-alts": "false",
    });
    this.popId = `nbstream-alternatives-${++popoverCount}-${Math.random().toString(36).slice(2, 8)}`;
    this.pop = h("div", "nbstream-alternatives", {
      id: this.popId,
      role: "dialog",
      tabindex: "-1",
      "aria-label": "Alternatives",
    });
    this.pop.hidden = true;
    this.el.append(this.list, this.pop);
    this.listen();
  }

  /** Clicks, focus, keys and copying in the list; a press outside closes the popover. */
  listen() {
    /**
     * A DOM listener removed by dispose().
     * @param {EventTarget} target @param {string} type @param {(e: Event) => void} fn
     * @param {AddEventListenerOptions} [o]
     */
    const on = (target, type, fn, o) => target.addEventListener(type, fn, { ...o, signal: this.ac.signal });
    on(this.list, "click", (e) => {
      const i = this.indexOf(e.target);
      if (i >= 0 && this.modes.alts) this.open(i);
    });
    on(this.list, "focusin", (e) => {
      const i = this.indexOf(e.target);
      if (i < 0 || !this.modes.alts) return;
      this.setCurrent(i);
      if (!this.refocusing) this.open(i);
    });
    on(this.el, "keydown", (e) => this.key(/** @type {KeyboardEvent} */ (e)));
    on(this.el, "focusout", (e) => {
      const to = /** @type {FocusEvent} */ (e).relatedTarget;
      if (to && !this.el.contains(/** @type {Node} */ (to))) this.close();
    });
    on(this.list, "copy", (e) => this.copy(/** @type {ClipboardEvent} */ (e)));
    on(document, "pointerdown", (e) => {
      if (this.openIndex >= 0 && !this.el.contains(/** @type {Node} */ (e.target))) this.close();
    }, { capture: true });
  }

  dispose() {
    // A sampling panel open on this list closes with it (a chat answer regenerated,
    // cleared or switched): it would go on taking replies for tokens no longer shown.
    this.explain?.reset(this);
    this.lens?.reset(this);
    this.ac.abort();
  }

  /** Whether the run's tokens came without probabilities (it ran without capture). */
  get noCapture() {
    return this.tokens.length > 0 && !isNum(this.tokens[0][3]);
  }

  /** @param {EventTarget | null} target @returns {number} */
  indexOf(target) {
    const t = /** @type {Element} */ (target)?.closest?.(".nbstream-token");
    if (!t || !this.list.contains(t)) return -1;
    return Number(t.getAttribute("data-index"));
  }

  /** @param {number} i @returns {HTMLElement | undefined} */
  span(i) {
    return /** @type {HTMLElement | undefined} */ (this.list.children[i]);
  }

  /** Forget the tokens (a new run). @param {number | null} runId */
  reset(runId) {
    this.runId = runId;
    this.tokens = [];
    this.thinking = 0;
    this.current = 0;
    this.close();
    this.explain?.reset(this);
    this.lens?.reset(this);
    this.list.replaceChildren();
    this.changed();
  }

  /**
   * A `tokens` message of this list's run.
   * @param {any} msg
   * @returns {"ok" | "gap"} gap: tokens are missing before these (ask for a sync)
   */
  apply(msg) {
    const offset = Number(msg.offset);
    const toks = Array.isArray(msg.tokens) ? msg.tokens.filter((/** @type {unknown} */ t) => Array.isArray(t)) : [];
    const n = this.tokens.length;
    // Before the tokens are made: they are marked as they are made (thinking.js).
    const before = this.thinking;
    if (offset === 0 || typeof msg.thinking === "number") this.thinking = markThinking(this, msg.thinking, before);
    if (offset === 0) {
      this.replace(toks);
    } else if (Number.isInteger(offset) && offset > 0 && offset <= n) {
      // At the end, or overlapping what we have (a reset's tokens were ahead of the
      // frames): a run's tokens never change, so only what is new is added.
      this.append(toks.slice(n - offset));
    } else {
      return "gap";
    }
    return "ok";
  }

  /** @param {any[][]} toks */
  replace(toks) {
    const open = this.openIndex;
    const hadFocus = this.list.contains(document.activeElement);
    this.tokens = [];
    this.list.replaceChildren();
    this.openIndex = -1;
    if (this.current >= toks.length) this.current = 0;
    this.append(toks);
    // The same step, with what the new tokens say about it (say, its alternatives).
    if (open >= 0 && open < this.tokens.length) {
      if (hadFocus) this.span(open)?.focus({ preventScroll: true });
      this.open(open);
    } else {
      this.pop.hidden = true;
    }
  }

  /** @param {any[][]} toks */
  append(toks) {
    if (!toks.length) return;
    const frag = document.createDocumentFragment();
    for (const t of toks) {
      this.tokens.push(t);
      frag.append(this.make(t, this.tokens.length - 1));
    }
    this.list.append(frag);
    this.changed();
  }

  /** The element of token i. @param {any[]} t @param {number} i */
  make(t, i) {
    const [id, text, kind, logprob, rank] = t;
    const k = kind === "bytes" || kind === "special" ? kind : "text";
    const s = h("span", "nbstream-token", { "data-index": String(i), "data-kind": k });
    if (hasId(id)) s.setAttribute("data-token-id", String(id));
    // t[6]: the run ended at a stop string and this token made it (or came after it):
    // generated, but not part of the answer.
    if (t[6] === true) s.setAttribute("data-after-stop", "true");
    thinkingMark(s, i, this.thinking);
    appendPieces(s, text, k);
    if (isNum(logprob)) {
      const p = Math.exp(logprob);
      const { bg, fg } = shade(p);
      s.style.setProperty("--nbs-tok-bg", bg);
      s.style.setProperty("--nbs-tok-fg", fg);
      s.setAttribute("data-p", p.toFixed(4));
    }
    if (isNum(rank)) {
      s.setAttribute("data-rank", String(rank));
      if (rank > 1) {
        // Drawn by CSS ("#" attr(data-rank)): the token's textContent stays its text.
        s.append(h("sup", "nbstream-token-rank", { "data-rank": String(rank), "aria-hidden": "true" }));
      }
    }
    this.dress(s, i);
    return s;
  }

  /** Title and focusability of token element s, for the current modes. @param {HTMLElement} s @param {number} i */
  dress(s, i) {
    const t = this.tokens[i];
    const [id, text, kind, logprob, rank] = t;
    // A server's token has no id: named by its step.
    let title = `${hasId(id) ? `token ${id}` : `step ${i + 1}`}: ${describe(text, kind)}`;
    if (t[6] === true) title += "\nafter the stop string: not part of the answer";
    if (i < this.thinking) title += "\nthinking: not part of the answer";
    if (this.modes.probs || this.modes.alts) {
      if (isNum(logprob)) {
        title += `\nprobability ${pct(Math.exp(logprob))}`;
        if (isNum(rank)) title += ` \u00b7 rank ${rank}${rank === 1 ? " (the model's favourite)" : ""}`;
      } else {
        title += "\nno probability: this run was made without capturing them";
      }
    }
    s.title = title;
    if (this.modes.alts) {
      s.setAttribute("tabindex", i === this.current ? "0" : "-1");
      s.setAttribute("role", "button");
      s.setAttribute("aria-haspopup", "dialog");
      s.setAttribute("aria-expanded", String(i === this.openIndex));
    } else {
      s.removeAttribute("tabindex");
      s.removeAttribute("role");
      s.removeAttribute("aria-haspopup");
      s.removeAttribute("aria-expanded");
    }
  }

  /** @param {{tokens: boolean, probs: boolean, alts: boolean}} modes */
  setModes(modes) {
    const m = { tokens: !!modes.tokens, probs: !!modes.probs, alts: !!modes.alts };
    const same = m.tokens === this.modes.tokens && m.probs === this.modes.probs && m.alts === this.modes.alts;
    if (same) return;
    const redress = m.probs !== this.modes.probs || m.alts !== this.modes.alts;
    this.modes = m;
    this.list.setAttribute("data-boundaries", String(m.tokens));
    this.list.setAttribute("data-probs", String(m.probs));
    this.list.setAttribute("data-alts", String(m.alts));
    if (!m.alts) this.close();
    if (redress) for (let i = 0; i < this.tokens.length; i++) this.dress(/** @type {HTMLElement} */ (this.span(i)), i);
  }

  /** Move the roving tab stop to token i. @param {number} i */
  setCurrent(i) {
    if (i === this.current) return;
    const old = this.span(this.current);
    if (old && this.modes.alts) old.setAttribute("tabindex", "-1");
    this.current = i;
    const s = this.span(i);
    if (s && this.modes.alts) s.setAttribute("tabindex", "0");
  }

  /** @param {KeyboardEvent} e */
  key(e) {
    if (!this.modes.alts) return;
    if (e.key === "Escape") {
      if (this.openIndex < 0) return;
      const i = this.openIndex;
      this.close();
      if (this.pop.contains(/** @type {Node} */ (e.target))) {
        // Back to the token, its popover left closed (focusin would open it again).
        this.refocusing = true;
        this.span(i)?.focus({ preventScroll: true });
        this.refocusing = false;
      }
      e.preventDefault();
      e.stopPropagation();
      return;
    }
    const i = this.indexOf(e.target);
    if (i < 0) return;
    const last = this.tokens.length - 1;
    let to = -1;
    if (e.key === "ArrowRight" || e.key === "ArrowDown") to = Math.min(last, i + 1);
    else if (e.key === "ArrowLeft" || e.key === "ArrowUp") to = Math.max(0, i - 1);
    else if (e.key === "Home") to = 0;
    else if (e.key === "End") to = last;
    else if (e.key === "Enter" || e.key === " " || (e.key === "i" && this.lens)) {
      e.preventDefault();
      e.stopPropagation();
      this.open(i);
      // i: straight to "Inside the model" (opened, with the focus on its button).
      if (e.key === "i" && this.openIndex === i) this.lens?.focus();
      return;
    } else return;
    e.preventDefault();
    e.stopPropagation();
    this.setCurrent(to);
    this.span(to)?.focus(); // focusin opens its popover
  }

  /** Show the alternatives of token i. @param {number} i */
  open(i) {
    const s = this.span(i);
    if (!s || !this.modes.alts) return;
    this.closeOthers(this);
    if (this.openIndex >= 0 && this.openIndex !== i) {
      const old = this.span(this.openIndex);
      old?.setAttribute("aria-expanded", "false");
      old?.classList.remove("nbstream-token-open");
    }
    this.openIndex = i;
    s.setAttribute("aria-expanded", "true");
    s.setAttribute("aria-controls", this.popId);
    s.classList.add("nbstream-token-open");
    this.fill(i);
    this.explainAction(i);
    this.lens?.fill(this, i);
    this.pop.hidden = false;
    this.opened();
    this.place(s);
  }

  close() {
    if (this.openIndex < 0) {
      this.pop.hidden = true;
      return;
    }
    const s = this.span(this.openIndex);
    if (s) {
      s.setAttribute("aria-expanded", "false");
      s.classList.remove("nbstream-token-open");
    }
    this.openIndex = -1;
    this.pop.hidden = true;
    this.el.style.paddingBottom = "";
  }

  /**
   * Put the popover under the token (its first line box), inside the view. The view
   * makes room for it at its end (an output that scrolls would otherwise clip it), and
   * the popover is scrolled into sight, then the token: a popover taller than the output
   * box would push the token it explains out of the box's top, and the token comes first.
   * @param {HTMLElement} s
   */
  place(s) {
    this.el.style.paddingBottom = "";
    const box = this.el.getBoundingClientRect();
    const rects = s.getClientRects();
    const r = rects.length ? rects[0] : s.getBoundingClientRect();
    const top = r.bottom - box.top + 4;
    this.pop.style.top = `${top}px`;
    const width = this.pop.offsetWidth;
    const left = Math.max(0, Math.min(r.left - box.left, box.width - width));
    this.pop.style.left = `${left}px`;
    const below = top + this.pop.offsetHeight + 6 - box.height;
    if (below > 0) this.el.style.paddingBottom = `${Math.ceil(below)}px`;
    this.pop.scrollIntoView?.({ block: "nearest", inline: "nearest" });
    s.scrollIntoView?.({ block: "nearest", inline: "nearest" });
  }

  /** The popover's content for token i (textContent only: tokens are model output). @param {number} i */
  fill(i) {
    const [id, text, kind, logprob, rank, alts] = this.tokens[i];
    const pop = this.pop;
    pop.setAttribute("aria-label", `Alternatives at step ${i + 1}`);
    pop.replaceChildren(popHead(i, this.tokens[i]));
    if (!Array.isArray(alts) || alts.length === 0) {
      const note = h("div", "nbstream-token-note");
      note.textContent = isNum(logprob)
        ? "No alternatives were captured for this step."
        : NO_CAPTURE_NOTE;
      pop.append(note);
      return;
    }
    const { table, chosenShown, anyCut } = altTable(alts, id, rank);
    pop.append(table);
    this.branch?.fill(this, i); // "Continue" on each alternative (branches.js)
    if (!chosenShown) {
      const out = h("div", "nbstream-alt-outside");
      const chosenPiece = h("span", "nbstream-alt-token");
      appendPieces(chosenPiece, text, kind);
      const where = isNum(rank) ? `rank ${rank}` : "rank unknown";
      const p = isNum(logprob) ? `, ${pct(Math.exp(logprob))}` : "";
      out.append("The chosen token ", chosenPiece, ` was not in the top ${alts.length}: ${where}${p}.`);
      pop.append(out);
    }
    if (anyCut) {
      const foot = h("div", "nbstream-alt-foot");
      const m = h("span", "nbstream-alt-cut-label");
      m.textContent = "cut";
      foot.append(m, " the run's settings gave it no chance (temperature, top-k, top-p, or greedy decoding)");
      pop.append(foot);
    }
  }

  /**
   * The popover's "How was this picked?" (the sampling panel, sampling.js), or why it
   * is not offered. @param {number} i
   */
  explainAction(i) {
    const explain = this.explain;
    if (!explain) return;
    const gone = disconnected(this.el);
    if (gone) {
      sayNoKernel(this.pop, gone, (note) => this.pop.append(note));
      return;
    }
    const why = explain.unavailable(!hasId(this.tokens[i]?.[0]));
    if (why) {
      const note = h("div", "nbstream-token-note nbstream-alt-explain-note");
      note.textContent = why;
      this.pop.append(note);
      return;
    }
    const b = h("button", "nbstream-alt-explain", { type: "button" });
    b.textContent = "How was this picked?";
    b.title = "The step's odds as bars, and what temperature, top-k and top-p do to them";
    b.addEventListener("click", () => explain.open(this, i), { signal: this.ac.signal });
    this.pop.append(b);
  }

  /** Copy the real text of the selected tokens (not the markers, badges or ranks). @param {ClipboardEvent} e */
  copy(e) {
    const sel = document.getSelection();
    if (!sel || sel.rangeCount === 0 || sel.isCollapsed || !e.clipboardData) return;
    const range = sel.getRangeAt(0);
    if (!this.list.contains(range.commonAncestorContainer)) return;
    const picked = [];
    for (let i = 0; i < this.tokens.length; i++) {
      const s = this.span(i);
      if (s && range.intersectsNode(s)) picked.push(this.tokens[i]);
    }
    if (!picked.length) return;
    e.clipboardData.setData("text/plain", realText(picked));
    e.preventDefault();
  }
}

// ---------------------------------------------------------------------------
// The token views in a view
// ---------------------------------------------------------------------------

/**
 * What a view gives its token views.
 * @typedef {object} TokenViewsOptions
 * @property {import("./model.js").RunModel} model
 * @property {import("./view_scope.js").ViewScope} scope
 * @property {HTMLElement} root  carries data-token-view
 * @property {{block: (why: string) => void}} raw  the Raw text toggle: off while tokens are shown
 * @property {() => Iterable<TokenList>} lists  the view's token lists (their modes follow the toggles)
 * @property {() => void} switched  the output switched between tokens and text: show the right one
 * @property {() => void} redraw  schedule a frame
 * @property {() => void} opened  a popover opened: stop following the end of the output
 * @property {string} [viewId]  the view's id: its token popovers offer the sampling panel
 *   ("How was this picked?", sampling.js), whose replies name this view
 * @property {{fill: (list: TokenList, i: number) => void}} [branch]  the popover's "Continue
 *   with this token" (branches.js, branchAction)
 * @property {() => boolean} [running]  for a view of one run: whether it is still going
 * @property {() => boolean} [noCapture]  for a view of one run: whether it ran without
 *   capturing probabilities; the note saying so is in the head, in place of the legend
 * @property {(modes: ReturnType<typeof tokenModes>) => void} [notes]  after the head: the
 *   view's own notes (chat: each answer's "made without probabilities")
 */

/**
 * The token views of one view (StreamWidget or ChatWidget): the toggles for its status bar,
 * the head that goes between the bar and the output (the legend, the remote-model note),
 * the view's token lists made alike, and whether its output shows tokens rather than text
 * (`shown`: the view's frame and outputs ask).
 */
class TokenViews {
  /** @param {TokenViewsOptions} o */
  constructor(o) {
    this.o = o;
    const { model, scope } = o;
    const toggles = tokenToggles({ model, on: scope.on, onModel: scope.onModel, changed: () => this.update() });
    this.group = toggles.group;
    this.head = h("div", "nbstream-token-head");
    this.legend = makeLegend();
    this.remoteNote = makeNote("remote");
    this.captureNote = o.noCapture ? makeNote("capture") : null;
    // The sampling panel of this view ("How was this picked?" in the popover; sampling.js).
    this.explain = o.viewId
      ? explainPanels({ model, scope, viewId: o.viewId, pieces: appendPieces, local: () => canExplain(model) })
      : null;
    // The popover's "Inside the model" of this view (lens.js).
    this.lens = o.viewId ? lensSections({ model, scope, viewId: o.viewId, root: o.root }) : null;
    this.tokensShown = false;
  }

  /** Whether the output shows tokens rather than text. */
  get shown() {
    return this.tokensShown;
  }

  /** The head (and the view's notes), after tokens came or a mode changed. */
  refresh() {
    const { model } = this.o;
    const modes = tokenModes(model);
    const local = canTrace(model);
    const noCapture = !!this.captureNote && !!this.o.noCapture?.();
    /** @type {HTMLElement[]} */
    const want = [];
    if (modes.any && !local) want.push(this.remoteNote);
    if (this.captureNote && local && (modes.probs || modes.alts) && noCapture) {
      sayCapture(this.captureNote, !!this.o.running?.());
      want.push(this.captureNote);
    }
    if (local && modes.probs && !noCapture) want.push(this.legend);
    const have = [...this.head.children];
    if (have.length !== want.length || have.some((e, k) => e !== want[k])) this.head.replaceChildren(...want);
    this.head.hidden = want.length === 0;
    this.o.notes?.(modes);
  }

  /** The toggles or can_trace changed: modes of every list, tokens or text, the head. */
  update() {
    const { o } = this;
    const modes = tokenModes(o.model);
    const was = this.tokensShown;
    this.tokensShown = modes.any && canTrace(o.model);
    for (const t of o.lists()) t.setModes(modes);
    o.root.setAttribute("data-token-view", String(this.tokensShown));
    o.raw.block(this.tokensShown ? RAW_BLOCKED : "");
    if (was !== this.tokensShown) {
      o.switched();
      o.redraw(); // the Markdown catches up with text that came while tokens were shown
    }
    this.refresh();
  }

  /**
   * A token list of run `runId`, in the view's modes, telling the view when tokens come.
   * @param {number | null} runId
   * @param {(list: TokenList) => void} [closeOthers] a view of several lists: one popover open
   */
  list(runId, closeOthers) {
    const t = new TokenList(runId, {
      label: "Answer tokens",
      changed: () => {
        this.refresh();
        this.o.redraw();
      },
      opened: this.o.opened,
      closeOthers,
      branch: this.o.branch,
      explain: this.explain,
      lens: this.lens,
    });
    t.setModes(tokenModes(this.o.model));
    return t;
  }
}

/**
 * The token views of one view (TokenViews).
 * @param {TokenViewsOptions} o
 */
function tokenViews(o) {
  return new TokenViews(o);
}

export {
  CUT_TITLE,
  NO_CAPTURE_NOTE,
  NO_CAPTURE_RUNNING_NOTE,
  REMOTE_NOTE,
  TOGGLES,
  TokenList,
  TokenViews,
  canExplain,
  canTrace,
  makeLegend,
  makeNote,
  sayCapture,
  pct,
  realText,
  shade,
  tokenModes,
  tokenToggles,
  tokenViews,
};
