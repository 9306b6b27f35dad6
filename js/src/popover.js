// nbstream front end: the popover of a token's alternatives (the token views' Alternatives):
// its head (the step, the chosen token, its probability and rank), the table of the step's
// top candidates, its place under the token, and its "How was this picked?". What other
// modules add to it: Continue (branches.js) and Inside the model (lens.js).
//
// Tokens are model output: every piece of text goes into the page with textContent
// (never as HTML), so a token reading `<img src=x onerror=...>` stays text.

import { disconnected, sayNoKernel } from "./connection.js";
import { h } from "./dom.js";
import { isNum, pct } from "./format.js";
import { NO_CAPTURE_NOTE } from "./token_notes.js";
import { appendPieces, describe, hasId } from "./token_text.js";

/** @typedef {import("./token_list.js").TokenList} TokenList */

const CUT_TITLE = "The run's settings gave it no chance (temperature / top-k / top-p, or greedy decoding)";

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

/**
 * Put the popover under the token (its first line box), inside the view. The view
 * makes room for it at its end (an output that scrolls would otherwise clip it), and
 * the popover is scrolled into sight, then the token: a popover taller than the output
 * box would push the token it explains out of the box's top, and the token comes first.
 * @param {TokenList} list @param {HTMLElement} s
 */
function placePopover(list, s) {
  list.el.style.paddingBottom = "";
  const box = list.el.getBoundingClientRect();
  const rects = s.getClientRects();
  const r = rects.length ? rects[0] : s.getBoundingClientRect();
  const top = r.bottom - box.top + 4;
  list.pop.style.top = `${top}px`;
  const width = list.pop.offsetWidth;
  const left = Math.max(0, Math.min(r.left - box.left, box.width - width));
  list.pop.style.left = `${left}px`;
  const below = top + list.pop.offsetHeight + 6 - box.height;
  if (below > 0) list.el.style.paddingBottom = `${Math.ceil(below)}px`;
  list.pop.scrollIntoView?.({ block: "nearest", inline: "nearest" });
  s.scrollIntoView?.({ block: "nearest", inline: "nearest" });
}

/**
 * The popover's content for token i of `list` (textContent only: tokens are model output).
 * @param {TokenList} list @param {number} i
 */
function fillPopover(list, i) {
  const [id, text, kind, logprob, rank, alts] = list.tokens[i];
  const pop = list.pop;
  pop.setAttribute("aria-label", `Alternatives at step ${i + 1}`);
  pop.replaceChildren(popHead(i, list.tokens[i]));
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
  list.branch?.fill(list, i); // "Continue" on each alternative (branches.js)
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
 * is not offered. @param {TokenList} list @param {number} i
 */
function explainAction(list, i) {
  const explain = list.explain;
  if (!explain) return;
  const gone = disconnected(list.el);
  if (gone) {
    sayNoKernel(list.pop, gone, (note) => list.pop.append(note));
    return;
  }
  const why = explain.unavailable(!hasId(list.tokens[i]?.[0]));
  if (why) {
    const note = h("div", "nbstream-token-note nbstream-alt-explain-note");
    note.textContent = why;
    list.pop.append(note);
    return;
  }
  const b = h("button", "nbstream-alt-explain", { type: "button" });
  b.textContent = "How was this picked?";
  b.title = "The step's odds as bars, and what temperature, top-k and top-p do to them";
  b.addEventListener("click", () => explain.open(list, i), { signal: list.ac.signal });
  list.pop.append(b);
}

export { explainAction, fillPopover, placePopover };
