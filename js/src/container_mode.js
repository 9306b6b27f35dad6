// nbstream front end: a long list or table in the open block (open_block.js): the items or
// rows before the live one are frozen.

import { BLANK_LINE, lineStart, newlines, nthAfter, parseBlocks, renderTokens } from "./block_parse.js";
import { toFragment } from "./markdown.js";
import { morph } from "./morph.js";

/**
 * @typedef {import("./block_parse.js").Block} Block
 * @typedef {import("./block_parse.js").FrameStats} FrameStats
 * @typedef {import("./block_parse.js").Env} Env
 */

/**
 * A long list or table (the segment's only block): items / rows before the
 * live one are frozen in `box` (up to `after`); the rest is parsed from the
 * live item's line on (for a table, after its header and delimiter lines).
 */
class ContainerMode {
  /**
   * @param {Block} ob @param {any} tok @param {Element} top @param {Element} box
   * @param {string} prefix @param {number} pos
   */
  constructor(ob, tok, top, box, prefix, pos) {
    this.ob = ob;
    this.type = tok.type;
    this.markup = tok.markup;
    this.top = top; // child of ob.el
    this.box = box; // the element whose children are the items / rows
    this.prefix = prefix;
    this.pos = pos; // text offset of the first live item / row
    /** @type {Node | null} */
    this.after = null;
    this.table = tok.type === "table_open";
  }

  /** @param {string} text @param {FrameStats} st */
  update(text, st) {
    const body = text.slice(this.pos);
    if (BLANK_LINE.test(body)) return false;
    const F = this.prefix + body;
    /** @type {Env} */
    const env = {};
    const tokens = parseBlocks(F, env, st);
    const t0 = tokens[0];
    if (!t0 || t0.type !== this.type || t0.markup !== this.markup || t0.map[0] !== 0 || env.references) {
      return false;
    }
    let close = 1;
    while (close < tokens.length && !(tokens[close].level === 0 && tokens[close].nesting < 0)) close++;
    const kids = [];
    for (let i = 1; i < close; i++) {
      const t = tokens[i];
      if (this.table ? t.type === "tr_open" && t.map[0] >= 2 : t.type === "list_item_open" && t.level === 1) {
        kids.push(i);
      }
    }
    const frag = toFragment(renderTokens(tokens.slice(0, close + 1), env));
    const top = frag.firstChild;
    if (!top || top.nodeName !== this.top.nodeName) return false;
    const box = this.table ? /** @type {Element} */ (top).querySelector("table > tbody") : top;
    if (!box) return false;
    const nodes = Array.from(box.childNodes);
    if (this.after && nodes.length && nodes[0].nodeType === 3) nodes.shift(); // its "\n" is frozen
    const nl = newlines(F);
    const base = this.pos - this.prefix.length; // text offset of F[0]
    let keep = 0;
    let pos = this.pos;
    for (let j = kids.length - 1; j >= 1 && !keep; j--) {
      const line = tokens[kids[j]].map[0];
      if (line >= nl.length) continue; // its first line may still change
      for (let k = 0, e = 0; k < nodes.length; k++) {
        if (nodes[k].nodeType === 1 && e++ === j) {
          keep = k;
          pos = base + lineStart(nl, line);
          break;
        }
      }
    }
    const src = document.createDocumentFragment();
    src.append(...nodes);
    st.nodes += morph(this.box, src, this.after);
    if (keep) {
      this.after = nthAfter(this.box, this.after, keep);
      this.pos = pos;
      this.ob.incremental = true;
    }
    const sep = /** @type {Node} */ (this.top.nextSibling);
    const rest = tokens.slice(close + 1);
    st.nodes += morph(this.ob.el, toFragment(renderTokens(rest, env)), sep);
    if (rest.length) {
      const line = rest[0].map[0];
      if (t0.map[1] < line || line + 1 < nl.length) this.ob.commit(sep, base + lineStart(nl, line));
    }
    return true;
  }
}

export { ContainerMode };
