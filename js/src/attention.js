// nbstream front end: "Where it looked", the attention view inside the token popover's
// "Inside the model" section (lens.js mounts it there).
//
// A disclosure button; expanded, it asks the kernel (`attention` message) for the step's
// attention (`run.attention(step)`: every layer's and head's weights from the position that
// chose the token over the earlier ones) and draws, for the layer and head picked (or the
// layer's heads averaged): the earlier tokens shaded by weight, the heaviest numbered; a
// sentence saying where it looked most (the previous token, the first one); the sharpest heads
// of the model, each a button that picks it; the first token's attention sink labelled and
// explained; and a table of the same numbers for screen readers. A long input comes capped
// (the first token and the last ones), and the view says what it leaves out. Never colour
// alone: a level's underline grows with it, and every weight is written somewhere.
//
// Token texts are model output: they go into the page with textContent only.

import { disconnected } from "./connection.js";
import { h } from "./dom.js";

/** @typedef {import("./protocol.js").AttentionData} AttentionData */
/** @typedef {import("./protocol.js").AttentionReply} AttentionReply */
/** @typedef {import("./protocol.js").AttentionRequest} AttentionRequest */
/** @typedef {import("./token_list.js").TokenList} TokenList */

/** How many steps' replies a view keeps (a popover opened again draws at once). */
const KEEP = 8;
/** How many of the heaviest positions are numbered in the shading. */
const NUMBERED = 3;
/** The Head picker's choice for the layer's heads averaged. */
const MEAN = -1;

const SINK_WHY =
  "A head with nothing worth reading parks its weight there (the weights must sum to 1, and that token adds little), so it says where a head rests, not what it reads: the other positions' weights are the informative part.";

/** A token's text, whitespace visible. @param {unknown} text */
function quoted(text) {
  return JSON.stringify(String(text ?? ""));
}

/**
 * A weight as the kernel sent it (an integer count of 1/scale), written as a percentage to
 * the payload's precision: 10000ths are 0.01 points.
 * @param {number} v @param {number} scale
 */
function weightPercent(v, scale) {
  const digits = Math.max(0, Math.round(Math.log10(scale)) - 2);
  return `${((Number(v) || 0) * (100 / scale)).toFixed(digits)}%`;
}

/**
 * The weights of one head of a layer over the shown positions, or the layer's heads
 * averaged (head MEAN), in the payload's units; and the left-out positions' weight.
 * @param {AttentionData} a @param {number} layer @param {number} head
 * @returns {{row: number[], rest: number}}
 */
function headRow(a, layer, head) {
  const heads = a.weights?.[layer] ?? [];
  const rests = a.rest?.[layer] ?? [];
  if (head !== MEAN) return { row: (heads[head] ?? []).map(Number), rest: Number(rests[head]) || 0 };
  const n = Math.max(1, heads.length);
  const row = (a.shown ?? []).map((_, k) => heads.reduce((s, r) => s + (Number(r[k]) || 0), 0) / n);
  return { row, rest: rests.reduce((s, r) => s + (Number(r) || 0), 0) / n };
}

/**
 * The shading of a row: per shown position, a level 0..4 (its weight beside the row's
 * largest) and, for the NUMBERED heaviest, their place (1 the heaviest).
 * @param {number[]} row
 * @returns {Array<{level: number, place: number}>}
 */
function shadeLevels(row) {
  const most = Math.max(0, ...row);
  const order = row
    .map((w, k) => [w, k])
    .filter(([w]) => w > 0)
    .sort((a, b) => b[0] - a[0] || a[1] - b[1])
    .slice(0, NUMBERED)
    .map(([, k]) => k);
  return row.map((w, k) => {
    const r = most > 0 ? w / most : 0;
    const level = r >= 0.75 ? 4 : r >= 0.5 ? 3 : r >= 0.25 ? 2 : r >= 0.1 ? 1 : 0;
    return { level, place: order.indexOf(k) + 1 };
  });
}

/**
 * What a position is to the step, in words: the first token (a sink, when it is one), the
 * previous token, or the position reading (itself).
 * @param {AttentionData} a @param {number} position
 */
function relation(a, position) {
  const query = a.positions - 1;
  if (position === 0) return a.sink ? "first token: attention sink" : "first token";
  if (position === query) return "itself";
  if (position === query - 1) return "previous token";
  return "";
}

/** Where a position is: the prompt or the answer. @param {AttentionData} a @param {number} position */
function part(a, position) {
  return position < a.prompt_tokens ? "prompt" : "answer";
}

/** A layer and head as the page names them, counted from 1. @param {number} layer @param {number} head */
function headName(layer, head) {
  return head === MEAN ? `Layer ${layer + 1}, all heads` : `Layer ${layer + 1}, head ${head + 1}`;
}

/**
 * The sentence for a row: where that head (or layer) looked most.
 * @param {AttentionData} a @param {number} layer @param {number} head @param {number[]} row
 */
function rowSentence(a, layer, head, row) {
  if (!row.length) return "";
  let k = 0;
  row.forEach((w, j) => {
    if (w > row[k]) k = j;
  });
  const p = a.shown[k];
  const what = relation(a, p);
  const said = `${quoted(a.tokens?.[k])} (${what ? `${what}, ` : ""}position ${p + 1}, ${part(a, p)})`;
  const verb = head === MEAN ? "look" : "looks";
  return `${headName(layer, head)} ${verb} most at ${said}: ${weightPercent(row[k], a.scale)}.`;
}

/**
 * What the cap leaves out, in words ("" when nothing is).
 * @param {AttentionData} a @param {number} rest the left-out positions' weight for the row
 */
function capWords(a, rest) {
  const shown = (a.shown ?? []).length;
  if (shown >= a.positions) return "";
  const out = a.positions - shown;
  const last = shown - 1;
  return `A long input: the view shows the first token and the last ${last} of the ${a.positions} positions (a cap of ${a.cap} keeps the page quick). The ${out} between (positions 2 to ${out + 1}) are left out here; they hold ${weightPercent(rest, a.scale)} of this row's attention.`;
}

/** The sink's label and explanation ("" when the first token is no sink). @param {AttentionData} a */
function sinkWords(a) {
  if (!a.sink) return "";
  const total = a.layers * a.heads;
  const share = `${Math.round(a.sink_share * 100)}%`;
  return `Attention sink: the first token (${quoted(a.tokens?.[0])}) is where ${a.sink_heads} of ${total} heads look most, and it takes ${share} of all attention on average. ${SINK_WHY}`;
}

/** The words of one of the sharpest heads. @param {AttentionData} a @param {[number, number, number, number, string]} s */
function strongWords(a, [layer, head, position, weight, text]) {
  const what = relation(a, position);
  return `${headName(layer, head)} \u2192 ${quoted(text)} ${weightPercent(weight, a.scale)}${what ? ` (${what})` : ""}`;
}

/** A labelled <select> of the picker. @param {string} id @param {string} label @param {Array<[number, string]>} options */
function picker(id, label, options) {
  const wrap = h("span", "nbstream-attn-pick");
  const name = h("label", "", { for: id });
  name.textContent = label;
  const select = h("select", "nbstream-attn-select", { id });
  for (const [value, text] of options) {
    const o = h("option", "", { value: String(value) });
    o.textContent = text;
    select.append(o);
  }
  wrap.append(name, select);
  return { wrap, select };
}

/**
 * The shaded tokens of a row, with the left-out positions as one marker where they were.
 * @param {AttentionData} a @param {number[]} row @param {number} rest
 */
function shadedTokens(a, row, rest) {
  const box = h("div", "nbstream-attn-tokens", { role: "group", tabindex: "0", "aria-label": "The earlier tokens, shaded by weight" });
  const levels = shadeLevels(row);
  (a.shown ?? []).forEach((p, k) => {
    if (k > 0 && p > a.shown[k - 1] + 1) {
      const gap = h("span", "nbstream-attn-gap");
      gap.textContent = ` \u2026 ${p - a.shown[k - 1] - 1} left out (${weightPercent(rest, a.scale)}) \u2026 `;
      box.append(gap);
    }
    const s = h("span", "nbstream-attn-token", { "data-position": String(p), "data-attn-level": String(levels[k].level) });
    s.textContent = String(a.tokens?.[k] ?? "");
    if (levels[k].place > 0) s.setAttribute("data-attn-place", String(levels[k].place));
    const what = relation(a, p);
    if (what) s.setAttribute("data-attn-role", what === "itself" ? "query" : what === "previous token" ? "previous" : "first");
    s.title = `${quoted(a.tokens?.[k])}: position ${p + 1} (${part(a, p)}${what ? `, ${what}` : ""}), ${weightPercent(row[k], a.scale)}`;
    box.append(s);
    if (p === 0 && a.sink) {
      const label = h("span", "nbstream-attn-sink-label");
      label.textContent = "sink";
      box.append(label);
    }
  });
  return box;
}

/** One row of the table. @param {string[]} cells @param {Record<string, string>} [attrs] */
function tableRow(cells, attrs) {
  const tr = h("tr", "", attrs);
  for (const c of cells) {
    const td = h("td");
    td.textContent = c;
    tr.append(td);
  }
  return tr;
}

/**
 * The table of a row's numbers: one line per shown position, and one for the left-out ones.
 * @param {AttentionData} a @param {number} layer @param {number} head @param {number[]} row @param {number} rest
 */
function weightTable(a, layer, head, row, rest) {
  const table = h("table", "nbstream-attn-table");
  const caption = h("caption");
  caption.textContent = `${headName(layer, head)}: the weight on each earlier position, from step ${a.step + 1}'s ${quoted(a.token)}`;
  const hr = h("tr");
  for (const label of ["Position", "Token", "Part", "Weight", "Note"]) {
    const th = h("th", "", { scope: "col" });
    th.textContent = label;
    hr.append(th);
  }
  const thead = h("thead");
  thead.append(hr);
  const tbody = h("tbody");
  (a.shown ?? []).forEach((p, k) => {
    if (k > 0 && p > a.shown[k - 1] + 1) {
      const range = `${a.shown[k - 1] + 2}\u2013${p}`;
      tbody.append(tableRow([range, "(left out)", "", weightPercent(rest, a.scale), "not shown: the cap"], { "data-left-out": "true" }));
    }
    const cells = [String(p + 1), quoted(a.tokens?.[k]), part(a, p), weightPercent(row[k], a.scale), relation(a, p)];
    tbody.append(tableRow(cells, { "data-position": String(p) }));
  });
  table.append(caption, thead, tbody);
  return table;
}

/** The page's view of one view's attention: the button, the picker, what a reply draws. */
class AttentionSection {
  /** @param {string} id */
  constructor(id) {
    this.id = id;
    this.el = h("div", "nbstream-attn", { role: "group", "aria-label": "Where it looked (attention)" });
    this.toggle = h("button", "nbstream-attn-toggle", { type: "button", "aria-expanded": "false", "aria-controls": `${id}-body` });
    this.toggle.textContent = "Where it looked";
    this.toggle.title = "Attention: how much each earlier token weighed, for a layer and head you pick";
    this.body = h("div", "nbstream-attn-body", { id: `${id}-body` });
    this.body.hidden = true;
    this.state = h("p", "nbstream-attn-state", { role: "status" });
    this.content = h("div", "nbstream-attn-content");
    this.body.append(this.state, this.content);
    this.el.append(this.toggle, this.body);
    /** @type {AttentionData | null} */
    this.data = null;
    this.layer = 0;
    this.head = MEAN;
    /** @type {{layer: HTMLSelectElement, head: HTMLSelectElement} | null} */
    this.pick = null;
    this.view = h("div", "nbstream-attn-view");
  }

  /** @param {boolean} open */
  expand(open) {
    this.toggle.setAttribute("aria-expanded", String(open));
    this.body.hidden = !open;
  }

  /** @param {string} words @param {"loading" | "error"} state */
  say(words, state) {
    this.el.setAttribute("data-state", state);
    this.state.textContent = words;
    this.data = null;
    this.pick = null;
    this.content.replaceChildren();
  }

  /** Draw a reply: the picker, the sink, the sharpest heads, then the picked row. @param {AttentionReply} msg */
  draw(msg) {
    const a = /** @type {AttentionData} */ (msg.attention);
    const changedModel = !this.data || this.data.layers !== a.layers || this.data.heads !== a.heads;
    this.data = a;
    if (changedModel) {
      // First the sharpest head (a picture with something in it); kept from step to step.
      const [layer, head] = a.strongest?.[0] ?? [0, MEAN];
      this.layer = layer;
      this.head = head;
    }
    const layers = picker(`${this.id}-layer`, "Layer", Array.from({ length: a.layers }, (_, k) => [k, `${k + 1} of ${a.layers}`]));
    const heads = picker(`${this.id}-head`, "Head", [[MEAN, "All (mean)"], ...Array.from({ length: a.heads }, (_, k) => /** @type {[number, string]} */ ([k, String(k + 1)]))]);
    layers.select.value = String(this.layer);
    heads.select.value = String(this.head);
    this.pick = { layer: layers.select, head: heads.select };
    const row = h("div", "nbstream-attn-picker");
    row.append(layers.wrap, heads.wrap);
    // The picker, then the heads worth picking, then what the pick shows.
    /** @type {HTMLElement[]} */
    const parts = [row, strongestList(a)];
    const sink = sinkWords(a);
    if (sink) {
      const p = h("p", "nbstream-attn-sink");
      p.textContent = sink;
      parts.push(p);
    }
    parts.push(this.view);
    const words = h("details", "nbstream-attn-words");
    const summary = h("summary");
    summary.textContent = "In words";
    const text = h("p");
    text.textContent = String(msg.words ?? "");
    words.append(summary, text);
    parts.push(words);
    this.content.replaceChildren(...parts);
    this.drawRow();
    this.el.setAttribute("data-state", "ready");
    this.state.textContent = `${a.layers} layers \u00d7 ${a.heads} heads over ${a.positions} positions, computed in ${Number(msg.elapsed_s ?? 0).toFixed(2)} s.`;
  }

  /** Draw the picked layer's and head's row: sentence, cap, shading, table. */
  drawRow() {
    const a = this.data;
    if (!a) return;
    const { row, rest } = headRow(a, this.layer, this.head);
    const sentence = h("p", "nbstream-attn-sentence");
    sentence.textContent = rowSentence(a, this.layer, this.head, row);
    /** @type {HTMLElement[]} */
    const parts = [sentence];
    const cap = capWords(a, rest);
    if (cap) {
      const p = h("p", "nbstream-attn-cap");
      p.textContent = cap;
      parts.push(p);
    }
    const details = h("details", "nbstream-attn-details");
    const summary = h("summary");
    summary.textContent = "Table of the weights";
    const box = h("div", "nbstream-attn-table-box", { tabindex: "0", role: "region", "aria-label": "Table of the attention weights" });
    box.append(weightTable(a, this.layer, this.head, row, rest));
    details.append(summary, box);
    parts.push(shadedTokens(a, row, rest), details);
    const open = this.view.querySelector("details[open]") !== null;
    details.open = open;
    this.view.replaceChildren(...parts);
    this.el.setAttribute("data-layer", String(this.layer));
    this.el.setAttribute("data-head", String(this.head));
  }
}

/** The sharpest heads, each a button that picks it. @param {AttentionData} a */
function strongestList(a) {
  const wrap = h("div", "nbstream-attn-strongest");
  const title = h("p", "nbstream-attn-subtitle");
  title.textContent = "The sharpest heads (beyond the first token)";
  const list = h("ol", "nbstream-attn-strongest-list", { "aria-label": "The sharpest heads" });
  for (const s of a.strongest ?? []) {
    const li = h("li");
    const b = h("button", "nbstream-attn-head", { type: "button", "data-layer": String(s[0]), "data-head": String(s[1]) });
    b.textContent = strongWords(a, s);
    b.title = "Show this head";
    li.append(b);
    list.append(li);
  }
  wrap.append(title, list);
  return wrap;
}

let sectionCount = 0;

/**
 * What a view gives its attention view.
 * @typedef {object} AttentionOptions
 * @property {import("./model.js").RunModel} model
 * @property {import("./view_scope.js").ViewScope} scope
 * @property {string} viewId
 * @property {() => void} changed  the view changed size (the popover keeps it in the view)
 */

/** One view's attention view: one section, moved with "Inside the model", its requests. */
class AttentionPanel {
  /** @param {AttentionOptions} o */
  constructor(o) {
    this.o = o;
    this.section = new AttentionSection(`nbstream-attn-${++sectionCount}-${Math.random().toString(36).slice(2, 8)}`);
    this.expanded = false;
    this.active = false;
    this.request = 0;
    /** @type {TokenList | null} */
    this.list = null;
    this.index = -1;
    /** @type {Map<string, AttentionReply>} the last replies, by run and step */
    this.kept = new Map();
    const { scope } = o;
    const s = this.section;
    scope.on(s.toggle, "click", () => this.flip());
    scope.on(s.content, "change", (/** @type {Event} */ e) => this.picked(e.target));
    scope.on(s.content, "click", (/** @type {MouseEvent} */ e) => this.chose(e.target));
    scope.onModel("msg:custom", (/** @type {any} */ msg) => {
      if (msg?.type === "attention") this.reply(msg);
    });
  }

  /** The step shown, and whether "Inside the model" is open. @param {TokenList} t @param {number} i @param {boolean} active */
  fill(t, i, active) {
    const moved = this.list !== t || this.index !== i;
    this.list = t;
    this.index = i;
    this.section.el.setAttribute("data-step", String(i));
    this.activate(active, moved);
  }

  /** "Inside the model" opened or closed. @param {boolean} active @param {boolean} [moved] */
  activate(active, moved = false) {
    const was = this.active;
    this.active = active;
    this.section.expand(this.expanded);
    if (active && this.expanded && (moved || !was || !this.section.data)) this.ask();
  }

  flip() {
    this.expanded = !this.expanded;
    this.section.expand(this.expanded);
    if (this.expanded && this.active) this.ask();
    this.o.changed();
  }

  /** A picker changed. @param {EventTarget | null} target */
  picked(target) {
    const pick = this.section.pick;
    if (!pick || (target !== pick.layer && target !== pick.head)) return;
    this.section.layer = Number(pick.layer.value);
    this.section.head = Number(pick.head.value);
    this.section.drawRow();
    this.o.changed();
  }

  /** One of the sharpest heads chosen: the picker follows. @param {EventTarget | null} target */
  chose(target) {
    const b = target instanceof HTMLElement ? target.closest(".nbstream-attn-head") : null;
    const pick = this.section.pick;
    if (!b || !pick) return;
    pick.layer.value = b.getAttribute("data-layer") ?? "0";
    pick.head.value = b.getAttribute("data-head") ?? String(MEAN);
    this.picked(pick.layer);
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
    this.section.say("Reading where it looked\u2026", "loading");
    /** @type {AttentionRequest} */
    const msg = { type: "attention", view: this.o.viewId, request: this.request, run_id: Number(t.runId) || 0, step: this.index };
    this.o.model.send(msg);
  }

  /** A reply from the kernel. @param {AttentionReply} msg */
  reply(msg) {
    if (msg.view !== this.o.viewId || Number(msg.request) !== this.request) return; // stale
    if (msg.error || !msg.attention) {
      this.section.say(`Could not show where it looked: ${msg.error ?? "no answer"}`, "error");
      this.o.changed();
      return;
    }
    this.kept.set(`${msg.run_id}:${msg.step}`, msg);
    while (this.kept.size > KEEP) this.kept.delete(/** @type {string} */ (this.kept.keys().next().value));
    if (Number(msg.step) === this.index && Number(msg.run_id) === Number(this.list?.runId)) this.show(msg);
  }

  /** @param {AttentionReply} msg */
  show(msg) {
    if (!this.expanded || !this.active) return;
    this.section.draw(msg);
    this.o.changed();
  }

  /** The list's run changed or the list went. @param {TokenList} t */
  reset(t) {
    if (t !== this.list) return;
    this.list = null;
    this.index = -1;
  }
}

/**
 * The attention view of one view's "Inside the model" sections.
 * @param {AttentionOptions} o
 */
function attentionView(o) {
  const p = new AttentionPanel(o);
  return {
    el: p.section.el,
    /** The step of token i of `t`; `active`: "Inside the model" is open. @param {TokenList} t @param {number} i @param {boolean} active */
    fill: (t, i, active) => p.fill(t, i, active),
    /** "Inside the model" opened or closed. @param {boolean} active */
    activate: (active) => p.activate(active),
    /** The list's run changed or it went. @param {TokenList} t */
    reset: (t) => p.reset(t),
  };
}

export { MEAN, attentionView, capWords, headRow, relation, rowSentence, shadeLevels, sinkWords, weightPercent };
