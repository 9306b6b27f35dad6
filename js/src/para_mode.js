// nbstream front end: a long paragraph in the open block (open_block.js): a prefix that can
// no longer change is frozen, and markdown-it sees only the paragraph's tail.

import { lineStart, newlines, parseBlocks, renderTokens } from "./block_parse.js";
import { md, toFragment } from "./markdown.js";
import { countNodes, morph } from "./morph.js";

/**
 * @typedef {import("./block_parse.js").Block} Block
 * @typedef {import("./block_parse.js").FrameStats} FrameStats
 * @typedef {import("./block_parse.js").Token} Token
 * @typedef {import("./block_parse.js").Env} Env
 */

/** Incremental rendering starts once the live segment is longer than this. */
const FREEZE_MIN = 1024;
/** Characters of a paragraph left live after a frozen prefix. */
const FREEZE_KEEP = 160;
/**
 * Live paragraph text beyond which a prefix is frozen even with an inline
 * construct still open in it (shown unpaired until the full render).
 */
const FREEZE_FORCE = 4096;

/** After a failed freeze, the paragraph must grow this much before the next try. */
const FREEZE_RETRY = 256;
/** Put before a paragraph's tail so that it parses as the rest of a line. */
const LEAD = "x ";

/** Characters that can make up a whole line with a block meaning (---, ===, |-|). */
const LINE_MARKS = "-*_=|: \t";

/** Not whitespace (and not past the end). @param {number} c */
function solid(c) {
  return c > 32;
}

/**
 * Whether an inline parse left nothing open that text after it could still
 * close: an emphasis / strikethrough opener (the probe), a code span (an
 * unmatched backtick run stays literal), a link label or destination.
 * @param {any[]} kids inline tokens @param {{open: number}} probe
 */
function inlineClosed(kids, probe) {
  if (probe.open) return false;
  let depth = 0;
  for (const t of kids) {
    if (t.type === "image" && t.content.includes("`")) return false;
    if (t.type !== "text") continue;
    const c = t.content;
    if (c.includes("`") || c.includes("](")) return false;
    for (let i = 0; i < c.length; i++) {
      const ch = c.charCodeAt(i);
      if (ch === 0x5b) depth++;
      else if (ch === 0x5d && depth > 0) depth--;
    }
  }
  return depth === 0;
}

/**
 * Mark the start of parent's live children as frozen: `frag` is what they
 * already show (the frozen prefix rendered on its own). Text runs are matched
 * by their text, a text node split where the prefix ends inside it; nothing is
 * inserted again. If the DOM does not show `frag` (a forced freeze), the live
 * children are replaced by it. Returns the new last frozen node.
 * @param {Node} parent @param {Node | null} after @param {DocumentFragment} frag
 * @param {FrameStats} st
 */
function adopt(parent, after, frag, st) {
  const src = Array.from(frag.childNodes);
  let o = after ? after.nextSibling : parent.firstChild;
  let last = after;
  let ok = true;
  for (let i = 0; ok && i < src.length; i++) {
    const n = src[i];
    if (n.nodeType === 3) {
      let want = /** @type {Text} */ (n).data;
      while (i + 1 < src.length && src[i + 1].nodeType === 3) want += /** @type {Text} */ (src[++i]).data;
      let got = "";
      while (o && o.nodeType === 3 && got.length < want.length) {
        const t = /** @type {Text} */ (o);
        if (got.length + t.data.length > want.length) {
          t.splitText(want.length - got.length);
          st.nodes += 1;
        }
        got += t.data;
        last = t;
        o = t.nextSibling;
      }
      ok = got === want;
    } else {
      ok = !!o && o.nodeType === 1 && /** @type {Element} */ (o).outerHTML === /** @type {Element} */ (n).outerHTML;
      if (ok) {
        last = o;
        o = /** @type {ChildNode} */ (o).nextSibling;
      }
    }
  }
  if (ok) return last;
  for (let k = after ? after.nextSibling : parent.firstChild; k; ) {
    const next = k.nextSibling;
    parent.removeChild(k);
    k = next;
  }
  for (const n of src) st.nodes += countNodes(n);
  parent.appendChild(frag);
  return src.length ? src[src.length - 1] : after;
}

/**
 * A long paragraph. Its frozen part comes first; the live tail, from text
 * offset `pos`, is parsed as the rest of a paragraph line (LEAD before it)
 * and rendered into `box` after `after`. Blocks that follow the paragraph in
 * the segment are rendered after it until they can be committed.
 *
 * The browser lays out a paragraph as one piece: appending to a long one
 * costs layout time in proportion to its length. So the tail is cut where a
 * rendered line starts, and what follows the cut goes on in a new block-level
 * span (`nbstream-chunk`): the frozen lines keep their layout, and only the
 * last span is laid out again. Cut at a line start, the text wraps exactly as
 * in one piece. The spans are unwrapped by the full render at the end.
 * (Where nothing is laid out, e.g. in raw mode, the tail is cut at a split
 * point found in the text instead, with no span.)
 */
class ParaMode {
  /** @param {Block} ob @param {Element} p @param {number} pos @param {number} shown */
  constructor(ob, p, pos, shown) {
    this.ob = ob;
    this.p = p;
    /** @type {Element} */
    this.box = p; // holds the live nodes: p, then the last chunk span
    /** @type {Node | null} */
    this.after = null; // last frozen child of box
    this.pos = pos; // text offset where the live tail starts
    this.mid = false; // the tail starts inside a line (after a cut)
    this.shown = shown; // text.length when last rendered
    this.shownPara = -1; // chars of the tail's paragraph text shown (-1: not known)
    this.retryAt = 0;
    this.forced = false; // set by freeze: cut even where the line has a "|"
  }

  /**
   * markdown-it's view of the tail, or null if it is no longer a paragraph's tail.
   * @param {string} text @param {FrameStats} st
   */
  parse(text, st) {
    const R = text.slice(this.pos);
    /** @type {Env} */
    const env = {};
    const tokens = parseBlocks(this.mid ? LEAD + R : R, env, st);
    const t0 = tokens[0];
    if (!t0 || t0.type !== "paragraph_open" || t0.map[0] !== 0 || env.references) return null;
    // A paragraph's tokens: paragraph_open, inline (its text, as children), paragraph_close.
    const kids = /** @type {Token[]} */ (tokens[1].children);
    if (this.mid) {
      const t = kids[0];
      if (!t || t.type !== "text" || !t.content.startsWith(LEAD)) return null;
      t.content = t.content.slice(LEAD.length);
      if (!t.content) kids.shift();
    }
    const nl = newlines(R);
    const lines = t0.map[1];
    const paraEnd = lines - 1 < nl.length ? nl[lines - 1] : R.length; // end of the paragraph text
    return { R, env, tokens, nl, paraEnd };
  }

  /** @param {string} text @param {FrameStats} st */
  update(text, st) {
    let f = this.parse(text, st);
    if (!f) return false;
    if (f.paraEnd > FREEZE_MIN && f.paraEnd >= this.retryAt && this.freeze(f.R, f.paraEnd, st)) {
      f = this.parse(text, st);
      if (!f) return false;
    }
    const { env, tokens, nl } = f;
    const inline = md.renderer.renderInline(/** @type {Token[]} */ (tokens[1].children), md.options, env);
    st.nodes += morph(this.box, toFragment(inline), this.after);
    const sep = /** @type {Node} */ (this.p.nextSibling);
    const rest = tokens.slice(3);
    st.nodes += morph(this.ob.el, toFragment(renderTokens(rest, env)), sep);
    this.shown = text.length;
    this.shownPara = f.paraEnd;
    if (rest.length) {
      const line = rest[0].map[0];
      if (tokens[0].map[1] < line || line + 1 < nl.length) {
        this.ob.commit(sep, this.pos + lineStart(nl, line));
      }
    }
    return true;
  }

  /**
   * Freeze a prefix of the tail. Returns whether pos moved.
   * @param {string} R @param {number} paraEnd @param {FrameStats} st
   */
  freeze(R, paraEnd, st) {
    const forced = paraEnd > FREEZE_FORCE;
    this.forced = forced;
    if (this.box.isConnected && this.box.getClientRects().length) {
      // One text node per run, as in a one-shot rendering: text split over
      // nodes is shaped in pieces and can be a fraction of a pixel wider,
      // enough to wrap a line elsewhere (and the cut keeps that wrap).
      for (let k = this.after ? this.after.nextSibling : this.box.firstChild; k; ) {
        const next = k.nextSibling;
        if (k.nodeType === 3 && next && next.nodeType === 3) {
          /** @type {Text} */ (k).appendData(/** @type {Text} */ (next).data);
          next.remove();
        } else {
          k = next;
        }
      }
      const cut = this.lineCut(R);
      if (cut) {
        if (this.closed(R, cut.s, st) || forced) {
          this.cutAt(cut.node, cut.offset);
          this.moved(cut.s);
          return true;
        }
        this.retryAt = paraEnd + FREEZE_RETRY;
        return false;
      }
      if (!forced) {
        this.retryAt = paraEnd + 16; // no usable line start yet: look again soon
        return false;
      }
    }
    // Not laid out (or no line start found for long): a split point in the text.
    let s = this.split(R, Math.min(paraEnd - FREEZE_KEEP, this.shown - this.pos));
    for (let attempt = 0; s > 0 && attempt < 2; attempt++) {
      const env = { nbstreamProbe: { open: 0 } };
      st.parsed += s;
      const kids = /** @type {Token[]} */ (md.parseInline(R.slice(0, s), env)[0].children);
      if (inlineClosed(kids, env.nbstreamProbe) || (attempt === 0 && forced)) {
        const frag = toFragment(md.renderer.renderInline(kids, md.options, env));
        this.after = adopt(this.box, this.after, frag, st);
        this.moved(s);
        return true;
      }
      s = this.split(R, s >> 1);
    }
    this.retryAt = paraEnd + FREEZE_RETRY;
    return false;
  }

  /** @param {number} s */
  moved(s) {
    this.pos += s;
    this.mid = true;
    this.retryAt = 0;
    this.shownPara = -1;
    this.ob.incremental = true;
  }

  /** Whether R[0:s] leaves no inline construct open. @param {string} R @param {number} s @param {FrameStats} st */
  closed(R, s, st) {
    const env = { nbstreamProbe: { open: 0 } };
    st.parsed += s;
    return inlineClosed(/** @type {Token[]} */ (md.parseInline(R.slice(0, s), env)[0].children), env.nbstreamProbe);
  }

  /**
   * The start of one of the last rendered lines of the live text, as a text
   * offset s in R and a place in the trailing text nodes of box, where a cut
   * is allowed (see split); null if there is none.
   * @param {string} R
   * @returns {{s: number, node: Text, offset: number} | null}
   */
  lineCut(R) {
    if (this.shownPara < 0) return null;
    /** @type {Text[]} */
    const run = [];
    for (let k = this.box.lastChild; k && k !== this.after && k.nodeType === 3; k = k.previousSibling) {
      run.push(/** @type {Text} */ (k));
    }
    if (!run.length) return null;
    run.reverse();
    const X = run.map((t) => t.data).join("");
    const shown = R.slice(0, this.shownPara).replace(/[ \t\r\n]+$/, "");
    const range = document.createRange();
    /** Text offset i of X as a text node and an offset in it. @type {(i: number) => [Text, number]} */
    const place = (i) => {
      let k = 0;
      while (i >= run[k].data.length && k < run.length - 1) i -= run[k++].data.length;
      return [run[k], i];
    };
    /** @param {number} i */
    const top = (i) => {
      const [node, off] = place(i);
      range.setStart(node, off);
      range.setEnd(node, off + 1);
      return range.getBoundingClientRect().top;
    };
    let hi = X.replace(/\s+$/, "").length - 1; // the last visible character
    for (let lines = 0; hi > 1 && lines < 3; lines++) {
      const t = top(hi) - 1;
      let lo = 0;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (top(mid) >= t) hi = mid;
        else lo = mid + 1;
      }
      // hi: the first character of that line. What follows it is plain text
      // when the source ends with it, and then s maps it to the source. The
      // line's first word must be followed by another: if it is the last
      // word, the caret after it may be what pushed it to this line.
      const rest = X.length - hi;
      const s = shown.length - rest;
      if (
        hi > 1 &&
        top(hi - 2) < t &&
        /\s/.test(X.slice(hi).trimEnd()) &&
        shown.endsWith(X.slice(hi)) &&
        X.charCodeAt(hi - 1) === 32 &&
        R.charCodeAt(s - 1) === 32 &&
        this.cuttable(R, s)
      ) {
        const [node, offset] = place(hi);
        return { s, node, offset };
      }
      hi -= 1;
      while (hi > 0 && X.charCodeAt(hi) <= 32) hi--;
    }
    return null;
  }

  /** Cut box at (node, offset): what follows goes on in a new chunk span. @param {Text} node @param {number} offset */
  cutAt(node, offset) {
    let last = /** @type {Node} */ (node);
    if (offset > 0) node.splitText(offset);
    else last = /** @type {Node} */ (node.previousSibling);
    const span = document.createElement("span");
    span.className = "nbstream-chunk";
    while (last.nextSibling) span.appendChild(last.nextSibling);
    this.p.appendChild(span);
    this.box = span;
    this.after = null;
  }

  /**
   * Whether the tail may be cut at offset s: next to a single space (" |x"
   * or, from split, "x| "), in a line that cannot still change its block
   * meaning (it has a character no ---/===/|-| line has before s) and has no
   * "|" before s (the fragment would split its table cells otherwise).
   * @param {string} R @param {number} s
   */
  cuttable(R, s) {
    if (s < 2 || s > R.length - 2) return false;
    const a = R.charCodeAt(s - 1);
    const b = R.charCodeAt(s);
    const ok = a === 32 ? solid(b) && solid(R.charCodeAt(s - 2)) : b === 32 && solid(a) && solid(R.charCodeAt(s + 1));
    if (!ok) return false;
    const lineAt = R.lastIndexOf("\n", s - 1) + 1;
    const prefix = R.slice(lineAt, s);
    // A "|" line could still become a table's header row. Past FREEZE_FORCE the cut
    // is made anyway (random output is full of "|"): if a table does start, the
    // tail's parse is no longer a paragraph and the whole segment is rendered again.
    if (prefix.includes("|") && !this.forced) return false;
    if (this.mid && lineAt === 0) return true; // checked at the cut before
    for (let i = 0; i < prefix.length; i++) if (!LINE_MARKS.includes(prefix[i])) return true;
    return false;
  }

  /** The last offset s <= limit where the tail may be cut, or 0. @param {string} R @param {number} limit */
  split(R, limit) {
    let tries = 0;
    for (let s = Math.min(limit, R.length - 2); s >= 2 && tries < 64; s--) {
      if (R.charCodeAt(s - 1) !== 32 && R.charCodeAt(s) !== 32) continue;
      if (this.cuttable(R, s)) return s;
      tries++;
    }
    return 0;
  }
}

export { FREEZE_MIN, ParaMode };
