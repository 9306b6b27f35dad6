// nbstream front end: the open block. Text after the last stable boundary is rendered
// again on every frame, at a cost that grows with its length: a long paragraph with no
// blank line (a one-line answer), a long code fence, list or table would make
// each frame slower as the answer grows. So, while a run is active, the parts
// of the open block that can no longer change are frozen, and only the rest is
// parsed again:
//  * segments: once a later top-level block has started and can no longer
//    change the ones before it, those are committed (kept as rendered);
//  * ParaMode (para_mode.js): in a long paragraph, a prefix that ends at a single space
//    and leaves no inline construct open (code span, link, emphasis) is rendered
//    once and kept; markdown-it then only sees the paragraph's tail;
//  * FenceMode (fence_mode.js): in an open code fence, new text is appended to the <code>
//    as text nodes (markdown-it renders the fence's content as that very text);
//  * ContainerMode (container_mode.js): in a long list or table, the items / rows before
//    the last one are kept; the rest is rendered from the last item's line on.
// Each mode checks markdown-it's parse of the live part and hands back to the
// whole-segment rendering on anything unexpected. When the block closes, or
// the run ends, the block is rendered once in full, so the final DOM is the
// one-shot rendering whatever was frozen on the way.

import { BLANK_LINE, blockStarts, lineStart, newlines, nthAfter, parseBlocks, renderTokens } from "./block_parse.js";
import { ContainerMode } from "./container_mode.js";
import { FenceMode } from "./fence_mode.js";
import { renderMarkdown, toFragment } from "./markdown.js";
import { morph } from "./morph.js";
import { FREEZE_MIN, ParaMode } from "./para_mode.js";

/**
 * @typedef {import("./block_parse.js").FrameStats} FrameStats
 * @typedef {import("./block_parse.js").Mode} Mode
 * @typedef {import("./block_parse.js").Token} Token
 * @typedef {import("./block_parse.js").Env} Env
 */

/** Blocks whose end never depends on the line after them. */
const SELF_CLOSING = new Set(["heading_open", "hr", "fence", "code_block"]);

/** The open (trailing) block of the output and its rendering. */
class OpenBlock {
  /** @param {HTMLElement} el @param {number} start offset of the block in the text */
  constructor(el, start) {
    this.el = el;
    this.start = start;
    this.len = -1; // text.length when last rendered
    this.reset();
  }

  reset() {
    /** @type {number} */
    this.seg = this.start; // start of the live segment; the text before it is committed
    /** @type {Node | null} */
    this.segAfter = null; // last committed child of el
    /** @type {Mode | null} */
    this.mode = null;
    /** @type {boolean} */
    this.incremental = false; // something was frozen: render in full at the end
  }

  /** Render the whole block at once, dropping every frozen part. @param {string} text @param {FrameStats} st */
  renderAll(text, st) {
    this.render(text.slice(this.start), st);
    this.reset();
  }

  /** Render `src` (the block's text) in full into el. @param {string} src @param {FrameStats} st */
  render(src, st) {
    // Layout chunks are unwrapped first: their nodes are then what the
    // rendering shows (if the frozen parts were exact), and morph keeps them.
    for (const span of Array.from(this.el.querySelectorAll("span.nbstream-chunk"))) {
      span.replaceWith(...Array.from(span.childNodes));
    }
    st.parsed += src.length;
    st.nodes += morph(this.el, renderMarkdown(src));
  }

  /** Commit el's children up to `node` and the text up to offset `pos`. @param {Node | null} node @param {number} pos */
  commit(node, pos) {
    this.segAfter = node;
    this.seg = pos;
    this.mode = null;
    this.incremental = true;
  }

  /** @param {string} text @param {FrameStats} st */
  update(text, st) {
    if (this.mode && this.mode.update(text, st)) return;
    this.mode = null;
    this.renderSegment(text, st);
  }

  /** Render the live segment whole; commit finished blocks; pick a mode. @param {string} text @param {FrameStats} st */
  renderSegment(text, st) {
    const S = text.slice(this.seg);
    /** @type {Env} */
    const env = {};
    const tokens = parseBlocks(S, env, st);
    const starts = blockStarts(tokens);
    const long = S.length > FREEZE_MIN && !env.references;
    if (long && starts.length > 1) {
      const nl = newlines(S);
      for (let j = starts.length - 1; j >= 1; j--) {
        const prev = tokens[starts[j - 1]];
        const line = tokens[starts[j]].map[0];
        // Block j starts for good: the block before it ends on its own, or
        // blank lines separate them, or two lines of block j are complete.
        if (SELF_CLOSING.has(prev.type) || prev.map[1] < line || line + 1 < nl.length) {
          const frag = toFragment(renderTokens(tokens.slice(0, starts[j]), env));
          const n = frag.childNodes.length;
          frag.append(toFragment(renderTokens(tokens.slice(starts[j]), env)));
          st.nodes += morph(this.el, frag, this.segAfter);
          this.commit(nthAfter(this.el, this.segAfter, n), this.seg + lineStart(nl, line));
          return;
        }
      }
    }
    st.nodes += morph(this.el, toFragment(renderTokens(tokens, env)), this.segAfter);
    if (long && starts.length === 1) this.mode = this.enter(tokens, S, text);
  }

  /**
   * A mode for the segment's only block, or null.
   * @param {Array<Token & {map: [number, number]}>} tokens @param {string} S @param {string} text
   * @returns {Mode | null}
   */
  enter(tokens, S, text) {
    const first = tokens[0];
    // The block's element (markdown-it's output of a block starts with its tag).
    const node = /** @type {Element | null} */ (this.segAfter ? this.segAfter.nextSibling : this.el.firstChild);
    const sep = node && node.nextSibling;
    if (!node || !sep || sep.nodeType !== 3 || first.map[0] !== 0) return null;
    switch (first.type) {
      case "paragraph_open":
        if (node.nodeName !== "P") return null;
        // Could still turn out to be a link reference definition.
        if (/^ {0,3}\[/.test(S) && S.slice(0, 1100).includes("]:")) return null;
        return new ParaMode(this, node, this.seg + /** @type {RegExpExecArray} */ (/^ */.exec(S))[0].length, text.length);
      case "fence":
        return FenceMode.enter(this, first, node, S);
      case "bullet_list_open":
      case "ordered_list_open":
        if (node.nodeName !== "UL" && node.nodeName !== "OL") return null;
        if (BLANK_LINE.test(S)) return null; // a loose list: all items may change
        return new ContainerMode(this, first, node, node, "", this.seg);
      case "table_open": {
        const body = node.nodeName === "DIV" ? node.querySelector("table > tbody") : null;
        const nl = newlines(S);
        if (!body || nl.length < 2 || BLANK_LINE.test(S)) return null;
        return new ContainerMode(this, first, node, body, S.slice(0, nl[1] + 1), this.seg + nl[1] + 1);
      }
      default:
        return null;
    }
  }
}

export { OpenBlock };
