// nbstream front end: the token popover's "Inside the model" section. Shared by the
// StreamWidget view and the ChatWidget view, through token_views.js.
//
// A disclosure button in the popover; expanded, it asks the kernel (`lens` message) for
// what each layer would have said at the step and which earlier tokens pushed toward the
// token, and draws: a compact chart of the chosen token's probability (or rank) across the
// layers, the layers where the top token changed with their top few, the tokens that pushed
// most, and a table of the same numbers for screen readers (the chart is a picture of it).
// The earlier tokens are shaded by their share in the answer and in the Prompt view, each
// share also written with its direction in words (toward the token, or away; a dashed
// underline marks away) and the strongest numbered: never colour alone. Once
// expanded it stays so for the view's next popovers. The kernel answers on a thread of its
// own: nothing here waits, and the stream and Stop go on.
//
// Token texts are model output: they go into the page with textContent only.

import { attentionView } from "./attention.js";
import { disconnected } from "./connection.js";
import { h } from "./dom.js";
import { isNum } from "./format.js";

/** @typedef {import("./protocol.js").LensReply} LensReply */
/** @typedef {import("./protocol.js").LensData} LensData */
/** @typedef {import("./protocol.js").AttributionData} AttributionData */
/** @typedef {import("./protocol.js").LensRequest} LensRequest */

const UNAVAILABLE =
  "Inside the model needs the model's layers (a local model): a server sends only its tokens.";
/** The chart's size in SVG units (it scales with the popover). */
const CHART = { w: 260, h: 84, pad: 6 };
/** How many of the tokens that pushed most are numbered and listed. */
const TOP_PUSHERS = 5;
/** How many top tokens are listed at a layer where the answer changed. */
const TOP_AT_CHANGE = 3;
/** How many changed layers are listed (the last ones: the answer's final form). */
const MAX_CHANGES = 6;
/** How many steps' replies a view keeps (a popover opened again draws at once). */
const KEEP = 8;

/** A probability in words, as the popover writes them. @param {number} p */
function percent(p) {
  const v = p * 100;
  if (!(v > 0)) return "0%";
  if (v >= 100) return "100%";
  if (v < 0.1) return "<0.1%";
  if (v > 99.9) return ">99.9%";
  return v < 10 ? `${v.toFixed(1)}%` : `${Math.round(v)}%`;
}

/** A rank as the kernel sends it and the page writes it (1: the favourite). @param {unknown} r */
function place(r) {
  return isNum(r) ? Number(r) : Number.NaN;
}

/** A signed share in words: its direction, then its size. @param {number} share */
function pushWords(share) {
  return `${share < 0 ? "away" : "toward"} ${percent(Math.abs(share))}`;
}

/** A token's text, whitespace visible (a heading or a table cell). @param {unknown} text */
function quoted(text) {
  return JSON.stringify(String(text ?? ""));
}

/**
 * The chart's points: one per layer, x evenly across, y the probability (0 at the bottom)
 * or the rank (1 at the top, on a log scale to the worst rank shown).
 * @param {LensData} lens @param {"prob" | "rank"} mode
 * @returns {Array<{x: number, y: number}>}
 */
function chartPoints(lens, mode) {
  const values = mode === "rank" ? (lens.ranks ?? []).map(place) : lens.probs ?? [];
  const n = values.length;
  const { w, h: ht, pad } = CHART;
  const worst = Math.max(2, ...values.map((v) => (isNum(v) ? v : 1)));
  return values.map((v, k) => {
    const x = n > 1 ? pad + ((w - 2 * pad) * k) / (n - 1) : w / 2;
    let t; // 0 at the bottom, 1 at the top
    if (mode === "rank") t = 1 - Math.log(Math.max(1, Number(v) || 1)) / Math.log(worst);
    else t = Math.min(1, Math.max(0, Number(v) || 0));
    return { x: +x.toFixed(2), y: +(ht - pad - t * (ht - 2 * pad)).toFixed(2) };
  });
}

/**
 * The layers where the top token changed (the last `max` of them), each with its top few.
 * @param {LensData} lens @param {number} [max]
 * @returns {Array<{layer: number, top: Array<[string, number]>}>}
 */
function changes(lens, max = MAX_CHANGES) {
  const top = lens.top ?? [];
  return (lens.changed ?? [])
    .filter((l) => Number.isInteger(l) && l >= 0 && l < top.length)
    .slice(-max)
    .map((layer) => ({ layer, top: (top[layer] ?? []).slice(0, TOP_AT_CHANGE) }));
}

/**
 * The shading of the earlier tokens: per token, its share, a level 0..3 (the share's size
 * beside the largest one's) and, for the few that pushed most, their place (1 the most).
 * @param {AttributionData} attr
 * @returns {Array<{share: number, level: number, place: number}>}
 */
function attributionLevels(attr) {
  const shares = (attr.shares ?? []).map((s) => (isNum(s) ? s : 0));
  const most = Math.max(0, ...shares.map(Math.abs));
  const order = shares
    .map((s, k) => [Math.abs(s), k])
    .filter(([a]) => a > 0)
    .sort((a, b) => b[0] - a[0] || a[1] - b[1])
    .slice(0, TOP_PUSHERS)
    .map(([, k]) => k);
  return shares.map((share, k) => {
    const r = most > 0 ? Math.abs(share) / most : 0;
    const level = r >= 0.66 ? 3 : r >= 0.33 ? 2 : r >= 0.1 ? 1 : 0;
    return { share, level, place: order.indexOf(k) + 1 };
  });
}

/**
 * A sentence on the lens: where the token first became the top one and stayed, and its
 * probability at the output.
 * @param {LensData} lens
 */
function lensSentence(lens) {
  const ranks = lens.ranks ?? [];
  const probs = lens.probs ?? [];
  const n = ranks.length;
  if (!n) return "";
  let from = n;
  while (from > 0 && ranks[from - 1] === 1) from -= 1;
  const token = quoted(lens.token);
  const p = percent(Number(probs[n - 1]) || 0);
  const out = `${p} at the output`;
  if (from === n) return `${token} is never the layers' favourite (at the output: rank ${place(ranks[n - 1])}, ${p}).`;
  if (from === 0) return `${token} is the favourite from the first layer on (${out}).`;
  return `${token} becomes the favourite at layer ${from + 1} of ${n} and stays so (${out}).`;
}

/** The SVG chart of one reply (aria-hidden: the table says the same). @param {LensData} lens @param {"prob" | "rank"} mode */
function chartSvg(lens, mode) {
  const ns = "http://www.w3.org/2000/svg";
  /** @param {string} tag @param {Record<string, string | number>} attrs */
  const el = (tag, attrs) => {
    const e = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
    return e;
  };
  const { w, h: ht, pad } = CHART;
  const svg = el("svg", { viewBox: `0 0 ${w} ${ht}`, class: "nbstream-lens-chart", "aria-hidden": "true", focusable: "false" });
  svg.append(el("line", { x1: pad, y1: ht - pad, x2: w - pad, y2: ht - pad, class: "nbstream-lens-axis" }));
  const pts = chartPoints(lens, mode);
  const changed = new Set(lens.changed ?? []);
  for (const layer of changed) {
    const p = pts[layer];
    if (p) svg.append(el("line", { x1: p.x, y1: pad, x2: p.x, y2: ht - pad, class: "nbstream-lens-change" }));
  }
  svg.append(el("polyline", { points: pts.map((p) => `${p.x},${p.y}`).join(" "), class: "nbstream-lens-line" }));
  pts.forEach((p, k) => {
    // A changed layer is a diamond, the others dots: the shape says it, not a colour.
    const mark = changed.has(k)
      ? el("rect", { x: p.x - 3, y: p.y - 3, width: 6, height: 6, transform: `rotate(45 ${p.x} ${p.y})`, class: "nbstream-lens-dot nbstream-lens-dot-changed" })
      : el("circle", { cx: p.x, cy: p.y, r: 2, class: "nbstream-lens-dot" });
    svg.append(mark);
  });
  return svg;
}

/** The table of the lens's numbers, one row per layer. @param {LensData} lens */
function lensTable(lens) {
  const table = h("table", "nbstream-lens-table");
  const caption = h("caption");
  caption.textContent = `${quoted(lens.token)} at each layer, read through the model's output layer`;
  const hr = h("tr");
  for (const label of ["Layer", "Probability", "Rank", "Layer's top token", "Top changed"]) {
    const th = h("th", "", { scope: "col" });
    th.textContent = label;
    hr.append(th);
  }
  const thead = h("thead");
  thead.append(hr);
  const tbody = h("tbody");
  const changed = new Set(lens.changed ?? []);
  const n = (lens.probs ?? []).length;
  for (let k = 0; k < n; k++) {
    const tr = h("tr", "", { "data-layer": String(k) });
    const first = (lens.top?.[k] ?? [])[0];
    const cells = [
      k === n - 1 ? `${k + 1} (output)` : String(k + 1),
      percent(Number(lens.probs[k]) || 0),
      isNum(lens.ranks?.[k]) ? String(place(lens.ranks[k])) : "?",
      first ? `${quoted(first[0])} ${percent(Number(first[1]) || 0)}` : "",
      changed.has(k) ? "yes" : "",
    ];
    for (const c of cells) {
      const td = h("td");
      td.textContent = c;
      tr.append(td);
    }
    tbody.append(tr);
  }
  table.append(caption, thead, tbody);
  return table;
}

/** The list of the layers where the top token changed. @param {LensData} lens */
function changesList(lens) {
  const list = h("ol", "nbstream-lens-changes", { "aria-label": "Where the top token changed" });
  for (const { layer, top } of changes(lens)) {
    const li = h("li", "", { "data-layer": String(layer) });
    const name = h("span", "nbstream-lens-layer");
    name.textContent = `Layer ${layer + 1}:`;
    li.append(name);
    top.forEach(([text, p], k) => {
      const tok = h("span", "nbstream-lens-tok");
      tok.textContent = quoted(text);
      li.append(k ? ", " : " ", tok, ` ${percent(Number(p) || 0)}`);
    });
    list.append(li);
  }
  return list;
}

/**
 * The tokens that pushed most, in words and numbers, with the method.
 * @param {AttributionData} attr @param {ReturnType<typeof attributionLevels>} levels
 */
function pushersList(attr, levels) {
  const wrap = h("div", "nbstream-lens-pushers");
  const list = h("ol", "nbstream-lens-pushers-list", { "aria-label": "The earlier tokens that pushed most" });
  const ranked = levels.map((l, k) => ({ ...l, k })).filter((l) => l.place > 0).sort((a, b) => a.place - b.place);
  for (const { k, share } of ranked) {
    const li = h("li", "", { "data-index": String(k) });
    const tok = h("span", "nbstream-lens-tok");
    tok.textContent = quoted(attr.tokens?.[k]);
    const where = k < attr.prompt_tokens ? "prompt" : "answer";
    li.append(tok, ` ${pushWords(share)} (${where})`);
    list.append(li);
  }
  const method = h("p", "nbstream-lens-method");
  method.textContent = `Method: ${attr.method}.`;
  wrap.append(list, method);
  return wrap;
}

/** The page's view of a reply: what one step's section shows. */
class LensSection {
  /** @param {string} id */
  constructor(id) {
    this.el = h("section", "nbstream-lens", { role: "region", "aria-label": "Inside the model" });
    this.toggle = h("button", "nbstream-lens-toggle", { type: "button", "aria-expanded": "false", "aria-controls": `${id}-body` });
    this.toggle.textContent = "Inside the model";
    this.toggle.title =
      "What each layer would have said, and which earlier tokens pushed toward this one (key: i on a token)";
    this.body = h("div", "nbstream-lens-body", { id: `${id}-body` });
    this.body.hidden = true;
    this.modeBtn = h("button", "nbstream-lens-mode", { type: "button", "aria-pressed": "false" });
    this.modeBtn.textContent = "Show rank";
    this.state = h("p", "nbstream-lens-state", { role: "status" });
    this.content = h("div", "nbstream-lens-content");
    this.body.append(this.state, this.content);
    this.el.append(this.toggle, this.body);
    /** @type {"prob" | "rank"} */
    this.mode = "prob";
    /** @type {LensReply | null} the reply drawn */
    this.last = null;
  }

  /** @param {boolean} open */
  expand(open) {
    this.toggle.setAttribute("aria-expanded", String(open));
    this.body.hidden = !open;
  }

  /** @param {string} words @param {"loading" | "error" | "ready"} state */
  say(words, state) {
    this.el.setAttribute("data-state", state);
    this.state.textContent = words;
    this.last = null;
    this.content.replaceChildren();
  }

  /** Draw a reply. @param {LensReply} msg */
  draw(msg) {
    this.last = msg;
    const lens = /** @type {LensData} */ (msg.lens);
    const mode = this.mode;
    this.modeBtn.setAttribute("aria-pressed", String(mode === "rank"));
    this.modeBtn.textContent = mode === "rank" ? "Show probability" : "Show rank";
    const head = h("div", "nbstream-lens-head");
    const what = h("span", "nbstream-lens-what");
    what.textContent = mode === "rank" ? "Its rank at each layer (top: first)" : "Its probability at each layer";
    head.append(what, this.modeBtn);
    const sentence = h("p", "nbstream-lens-sentence");
    sentence.textContent = lensSentence(lens);
    const axis = h("div", "nbstream-lens-axis-labels", { "aria-hidden": "true" });
    axis.append(h("span"), h("span"));
    axis.children[0].textContent = "layer 1";
    axis.children[1].textContent = `${lens.layers ?? (lens.probs ?? []).length} (output)`;
    const details = h("details", "nbstream-lens-details");
    const summary = h("summary");
    summary.textContent = "Table of the numbers";
    // A box of its own that scrolls (a model has dozens of layers), reachable by Tab.
    const box = h("div", "nbstream-lens-table-box", { tabindex: "0", role: "region", "aria-label": "Table of the numbers" });
    box.append(lensTable(lens));
    details.append(summary, box);
    this.content.replaceChildren(head, chartSvg(lens, mode), axis, sentence, changesList(lens));
    this.drawAttribution(msg);
    this.content.append(details);
    this.el.setAttribute("data-state", msg.pending ? "lens" : "ready");
    this.el.setAttribute("data-mode", mode);
    const took = `${Number(msg.elapsed_s ?? 0).toFixed(2)} s`;
    this.state.textContent = msg.pending ? `The layers, read in ${took}.` : `Computed in ${took}.`;
  }

  /** @param {LensReply} msg */
  drawAttribution(msg) {
    const title = h("p", "nbstream-lens-subtitle");
    title.textContent = "The earlier tokens that pushed most, toward it or away";
    if (msg.pending) {
      const note = h("p", "nbstream-lens-note nbstream-lens-pending");
      note.textContent = "Working out which earlier words pushed it\u2026";
      this.content.append(title, note);
      return;
    }
    if (!msg.attribution) {
      const note = h("p", "nbstream-lens-note");
      note.textContent = `Which words pushed it could not be computed: ${msg.attribution_error ?? "no reason given"}`;
      this.content.append(title, note);
      return;
    }
    this.content.append(title, pushersList(msg.attribution, attributionLevels(msg.attribution)));
  }
}

let sectionCount = 0;

/**
 * What a view gives its lens sections.
 * @typedef {object} LensOptions
 * @property {import("./model.js").RunModel} model
 * @property {import("./view_scope.js").ViewScope} scope
 * @property {string} viewId
 * @property {HTMLElement} root  the view's root (its Prompt view is shaded)
 */

/**
 * The "Inside the model" of one view's popovers: one section, moved into the popover that
 * is open, the requests it sends and the shading it puts on the earlier tokens.
 */
class LensPanel {
  /** @param {LensOptions} o */
  constructor(o) {
    this.o = o;
    this.section = new LensSection(`nbstream-lens-${++sectionCount}-${Math.random().toString(36).slice(2, 8)}`);
    this.expanded = false;
    this.request = 0;
    /** @type {import("./token_list.js").TokenList | null} */
    this.list = null;
    this.index = -1;
    this.sent = 0;
    /** @type {Map<string, LensReply>} the last replies, by run and step */
    this.kept = new Map();
    // "Where it looked" (attention.js), below the lens in the section's body.
    this.attention = attentionView({ model: o.model, scope: o.scope, viewId: o.viewId, changed: () => this.replace() });
    this.section.body.append(this.attention.el);
    const { scope } = o;
    scope.on(this.section.toggle, "click", () => this.flip());
    scope.on(this.section.modeBtn, "click", () => this.switchMode());
    // The table opened or closed: the popover changed size (toggle does not bubble).
    scope.on(this.section.el, "toggle", () => this.replace(), { capture: true });
    scope.onModel("msg:custom", (/** @type {any} */ msg) => {
      if (msg?.type === "lens") this.reply(msg);
    });
    scope.defer(() => this.unshade());
  }

  /** Put the section into the popover of token i of `t`. @param {import("./token_list.js").TokenList} t @param {number} i */
  fill(t, i) {
    if (this.list !== t || this.index !== i) this.unshade();
    this.list = t;
    this.index = i;
    this.section.el.setAttribute("data-step", String(i));
    this.section.el.setAttribute("aria-label", `Inside the model at step ${i + 1}`);
    t.pop.append(this.section.el);
    this.section.expand(this.expanded);
    if (this.expanded) this.ask();
    this.attention.fill(t, i, this.expanded);
  }

  flip() {
    this.expanded = !this.expanded;
    this.section.expand(this.expanded);
    if (this.expanded) this.ask();
    else this.unshade();
    this.attention.activate(this.expanded);
  }

  switchMode() {
    this.section.mode = this.section.mode === "prob" ? "rank" : "prob";
    const msg = this.section.last;
    if (msg) this.section.draw(msg);
    this.section.modeBtn.focus({ preventScroll: true });
  }

  key() {
    return `${this.list?.runId}:${this.index}`;
  }

  /** Ask the kernel, or draw a kept reply. */
  ask() {
    const t = this.list;
    if (!t) return;
    const kept = this.kept.get(this.key());
    if (kept) {
      this.show(kept);
      return;
    }
    this.request += 1;
    const gone = disconnected(t.el);
    if (gone) {
      this.section.say(gone, "error");
      return;
    }
    this.section.say("Reading the layers\u2026", "loading");
    this.section.el.removeAttribute("data-ms");
    this.section.el.removeAttribute("data-ms-all");
    this.sent = performance.now();
    /** @type {LensRequest} */
    const msg = { type: "lens", view: this.o.viewId, request: this.request, run_id: Number(t.runId) || 0, step: this.index };
    this.o.model.send(msg);
  }

  /** A reply from the kernel. @param {LensReply} msg */
  reply(msg) {
    if (msg.view !== this.o.viewId || Number(msg.request) !== this.request) return; // stale
    if (msg.error || !msg.lens) {
      this.section.say(`Could not look inside the model: ${msg.error ?? "no answer"}`, "error");
      return;
    }
    // The lens comes first (pending: the attribution follows in a second reply).
    if (!msg.pending) {
      this.kept.set(`${msg.run_id}:${msg.step}`, msg);
      while (this.kept.size > KEEP) this.kept.delete(/** @type {string} */ (this.kept.keys().next().value));
    }
    // How long the page waited: for the chart (data-ms) and for both (data-ms-all).
    const el = this.section.el;
    const ms = String(Math.round(performance.now() - this.sent));
    if (!el.hasAttribute("data-ms")) el.setAttribute("data-ms", ms);
    if (!msg.pending) el.setAttribute("data-ms-all", ms);
    if (Number(msg.step) === this.index && Number(msg.run_id) === Number(this.list?.runId)) this.show(msg);
  }

  /** Keep the open popover inside the view (its size changed). */
  replace() {
    const t = this.list;
    const s = t && t.openIndex === this.index ? t.span(this.index) : null;
    if (t && s) t.place(s);
  }

  /** Draw a reply, shade the earlier tokens, keep the popover in the view. @param {LensReply} msg */
  show(msg) {
    const t = this.list;
    if (!t || !this.expanded) return;
    this.section.draw(msg);
    this.unshade();
    if (msg.attribution) this.shade(t, msg.attribution);
    this.replace();
  }

  /** Shade the answer's earlier tokens and the Prompt view's. @param {import("./token_list.js").TokenList} t @param {AttributionData} attr */
  shade(t, attr) {
    const levels = attributionLevels(attr);
    const before = this.index;
    const first = attr.prompt_tokens;
    // The answer's tokens before the step are the attribution's after the prompt's.
    if (levels.length - first === before) {
      for (let k = 0; k < before; k++) {
        const s = t.span(k);
        if (s) markToken(s, levels[first + k]);
      }
      t.span(before)?.setAttribute("data-attr-target", "true");
      t.list.setAttribute("data-attr", "true");
    }
    const view = this.o.root.querySelector(".nbstream-prompt-view");
    if (view) view.append(promptStrip(attr, levels, before));
  }

  /** Take the shading away (collapsed, another step, the view gone). */
  unshade() {
    const t = this.list;
    if (t) {
      t.list.removeAttribute("data-attr");
      for (const s of t.list.querySelectorAll("[data-attr-level], [data-attr-target]")) unmarkToken(/** @type {HTMLElement} */ (s));
    }
    for (const el of this.o.root.querySelectorAll(".nbstream-lens-prompt")) el.remove();
  }

  /** The list's run changed or the list went: the section's shading goes. @param {import("./token_list.js").TokenList} t */
  reset(t) {
    this.attention.reset(t);
    if (t !== this.list) return;
    this.unshade();
    this.list = null;
    this.index = -1;
  }
}

/**
 * Mark one token with its share: a level (drawn as an underline that grows with it), a
 * number for the few that pushed most, the share in its title.
 * @param {HTMLElement} s @param {{share: number, level: number, place: number}} l
 */
function markToken(s, l) {
  s.setAttribute("data-attr-level", String(l.level));
  s.setAttribute("data-attr-share", l.share.toFixed(4));
  s.setAttribute("data-attr-sign", l.share < 0 ? "negative" : "positive");
  if (l.place > 0) s.setAttribute("data-attr-place", String(l.place));
  s.dataset.titleBeforeAttr = s.title;
  s.title = `${s.title}\n${percent(Math.abs(l.share))} of the push, ${l.share < 0 ? "away from this step's token" : "toward this step's token"}`;
}

/** @param {HTMLElement} s */
function unmarkToken(s) {
  for (const a of ["data-attr-level", "data-attr-share", "data-attr-sign", "data-attr-place", "data-attr-target"]) s.removeAttribute(a);
  if (s.dataset.titleBeforeAttr !== undefined) {
    s.title = s.dataset.titleBeforeAttr;
    delete s.dataset.titleBeforeAttr;
  }
}

/**
 * The prompt's tokens shaded by their share, for the Prompt view.
 * @param {AttributionData} attr @param {ReturnType<typeof attributionLevels>} levels @param {number} step
 */
function promptStrip(attr, levels, step) {
  const strip = h("div", "nbstream-lens-prompt", { role: "group", "aria-label": `Prompt tokens shaded by how much they pushed step ${step + 1}` });
  const title = h("p", "nbstream-lens-prompt-title");
  title.textContent = `Shaded by how much each prompt token pushed step ${step + 1}'s ${quoted(attr.token)} (numbered: the ${TOP_PUSHERS} that pushed most)`;
  const toks = h("div", "nbstream-lens-prompt-tokens");
  for (let k = 0; k < attr.prompt_tokens && k < levels.length; k++) {
    const s = h("span", "nbstream-lens-prompt-token");
    s.textContent = String(attr.tokens?.[k] ?? "");
    s.title = `${quoted(attr.tokens?.[k])}: ${pushWords(levels[k].share)}`;
    markToken(s, levels[k]);
    toks.append(s);
  }
  strip.append(title, toks);
  return strip;
}

/**
 * The "Inside the model" sections of one view's popovers.
 * @param {LensOptions} o
 */
function lensSections(o) {
  const p = new LensPanel(o);
  return {
    /** Add the section to the popover of token i of `t`. @param {import("./token_list.js").TokenList} t @param {number} i */
    fill(t, i) {
      const why = o.model.get("can_lens") === true ? "" : UNAVAILABLE;
      if (why) return;
      p.fill(t, i);
    },
    /** Open the section and move the focus to it (a key on a token). */
    focus() {
      if (!p.expanded) p.flip();
      p.section.toggle.focus({ preventScroll: true });
    },
    /** The list's run changed or it went. @param {import("./token_list.js").TokenList} t */
    reset(t) {
      p.reset(t);
    },
  };
}

export { UNAVAILABLE, attributionLevels, changes, chartPoints, lensSections, lensSentence, percent, pushWords };
