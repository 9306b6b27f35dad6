// nbstream front end: rendering a growing text incrementally (shared by stream.js and
// chat.js). A TextRenderer owns one output area: closed blocks are rendered once, the
// open (trailing) block is updated per frame at a cost that does not grow with its length,
// and the final DOM is the one-shot rendering of the whole text.

import { md, renderMarkdown, toFragment } from "./markdown.js";

// ---------------------------------------------------------------------------
// Minimal DOM morph: update `target` to look like `source` with the fewest
// insertions. Grown text becomes an appended text node (an "addition" for the
// live region) instead of a re-created paragraph.
// ---------------------------------------------------------------------------

/** @param {Node} n */
function countNodes(n) {
  let c = 1;
  for (let k = n.firstChild; k; k = k.nextSibling) c += countNodes(k);
  return c;
}

/** @param {Element} to @param {Element} from */
function syncAttributes(to, from) {
  for (const { name } of Array.from(to.attributes)) {
    if (!from.hasAttribute(name)) to.removeAttribute(name);
  }
  for (const { name, value } of Array.from(from.attributes)) {
    if (to.getAttribute(name) !== value) to.setAttribute(name, value);
  }
}

/**
 * Make target's children match source's children; source is consumed.
 * With `after`, only the children of target after that node are touched
 * (the ones before it are frozen).
 * @param {Node} target @param {Node} source @param {Node | null} [after]
 * @returns {number} nodes created
 */
function morph(target, source, after = null) {
  let created = 0;
  let o = after ? after.nextSibling : target.firstChild;
  let n = source.firstChild;
  while (n) {
    const nNext = n.nextSibling;
    if (!o) {
      created += countNodes(n);
      target.appendChild(n);
    } else if (o.nodeType === 3 && n.nodeType === 3) {
      // A run of adjacent text nodes in the target vs one text node in the source.
      let run = /** @type {Text} */ (o).data;
      let last = o;
      while (last.nextSibling && last.nextSibling.nodeType === 3) {
        last = last.nextSibling;
        run += /** @type {Text} */ (last).data;
      }
      const runEnd = last.nextSibling;
      const want = /** @type {Text} */ (n).data;
      if (run !== want) {
        if (want.startsWith(run)) {
          target.insertBefore(document.createTextNode(want.slice(run.length)), runEnd);
        } else {
          // The run's nodes: runEnd is the node after its last one (or null).
          for (let k = o; k !== runEnd; ) {
            const next = k.nextSibling;
            target.removeChild(k);
            k = /** @type {ChildNode} */ (next);
          }
          target.insertBefore(n, runEnd);
        }
        created += 1;
      }
      o = runEnd;
    } else if (o.nodeType === 1 && n.nodeType === 1 && o.nodeName === n.nodeName) {
      if (!o.isEqualNode(n)) {
        syncAttributes(/** @type {Element} */ (o), /** @type {Element} */ (n));
        created += morph(o, n);
      }
      o = o.nextSibling;
    } else {
      created += countNodes(n);
      target.insertBefore(n, o);
      const next = o.nextSibling;
      target.removeChild(o);
      o = next;
    }
    n = nNext;
  }
  while (o) {
    const next = o.nextSibling;
    target.removeChild(o);
    o = next;
  }
  return created;
}

// ---------------------------------------------------------------------------
// Incremental block splitter. Finds stable block boundaries in a growing
// text, looking only at newly completed lines:
//  * a blank line outside a fenced code block, once the next non-blank line
//    has started without indentation (indented lines continue a list item or
//    an indented code block across blank lines);
//  * the closing line of a fenced code block opened at column 0.
// Text before a boundary never changes its rendering again.
// ---------------------------------------------------------------------------

const FENCE_OPEN = /^( {0,3})(`{3,}|~{3,})(.*)$/;
const FENCE_CLOSE = /^ {0,3}(`{3,}|~{3,})[ \t]*$/;

class BlockSplitter {
  constructor() {
    this.reset();
  }

  reset() {
    /** @type {number} */
    this.pos = 0; // start of the first line not yet scanned
    /** @type {boolean} */
    this.inFence = false;
    /** @type {string} */
    this.fenceChar = "";
    /** @type {number} */
    this.fenceLen = 0;
    /** @type {boolean} */
    this.fenceTop = false;
    /** @type {number} */
    this.blankAt = -1; // start of a pending blank-line run, or -1
  }

  /**
   * Scan the complete lines added since the last call.
   * @param {string} text
   * @returns {Array<[number, number]>} boundaries as [blockEnd, nextBlockStart]
   */
  advance(text) {
    /** @type {Array<[number, number]>} */
    const out = [];
    for (;;) {
      const nl = text.indexOf("\n", this.pos);
      if (nl < 0) break;
      const start = this.pos;
      let line = text.slice(start, nl);
      if (line.endsWith("\r")) line = line.slice(0, -1);
      this.pos = nl + 1;
      if (this.inFence) {
        const m = FENCE_CLOSE.exec(line);
        if (m && m[1][0] === this.fenceChar && m[1].length >= this.fenceLen) {
          this.inFence = false;
          if (this.fenceTop) out.push([this.pos, this.pos]);
        }
        continue;
      }
      if (line.trim() === "") {
        if (this.blankAt < 0) this.blankAt = start;
        continue;
      }
      if (this.blankAt >= 0) {
        if (!/^[ \t]/.test(line)) out.push([this.blankAt, start]);
        this.blankAt = -1;
      }
      const f = FENCE_OPEN.exec(line);
      if (f && !(f[2][0] === "`" && f[3].includes("`"))) {
        this.inFence = true;
        this.fenceChar = f[2][0];
        this.fenceLen = f[2].length;
        this.fenceTop = f[1].length === 0;
      }
    }
    // The unfinished last line can already settle a pending boundary: its
    // first character tells whether it is indented.
    if (this.blankAt >= 0) {
      const c = text.charAt(this.pos);
      if (c !== "" && c !== " " && c !== "\t" && c !== "\r") {
        out.push([this.blankAt, this.pos]);
        this.blankAt = -1;
      }
    }
    return out;
  }
}

// ---------------------------------------------------------------------------
// The open block. Text after the last stable boundary is rendered again on
// every frame, at a cost that grows with its length: a long paragraph with no
// blank line (a one-line answer), a long code fence, list or table would make
// each frame slower as the answer grows. So, while a run is active, the parts
// of the open block that can no longer change are frozen, and only the rest is
// parsed again:
//  * segments: once a later top-level block has started and can no longer
//    change the ones before it, those are committed (kept as rendered);
//  * ParaMode: in a long paragraph, a prefix that ends at a single space and
//    leaves no inline construct open (code span, link, emphasis) is rendered
//    once and kept; markdown-it then only sees the paragraph's tail;
//  * FenceMode: in an open code fence, new text is appended to the <code> as
//    text nodes (markdown-it renders the fence's content as that very text);
//  * ContainerMode: in a long list or table, the items / rows before the last
//    one are kept; the rest is rendered from the last item's line on.
// Each mode checks markdown-it's parse of the live part and hands back to the
// whole-segment rendering on anything unexpected. When the block closes, or
// the run ends, the block is rendered once in full, so the final DOM is the
// one-shot rendering whatever was frozen on the way.
// ---------------------------------------------------------------------------

/** Incremental rendering starts once the live segment is longer than this. */
const FREEZE_MIN = 1024;
/** Characters of a paragraph left live after a frozen prefix. */
const FREEZE_KEEP = 160;
/**
 * Live paragraph text beyond which a prefix is frozen even with an inline
 * construct still open in it (shown unpaired until the full render).
 */
const FREEZE_FORCE = 4096;
/** Characters of code per block-level span in a long fence. */
const FENCE_CHUNK = 2048;
/** After a failed freeze, the paragraph must grow this much before the next try. */
const FREEZE_RETRY = 256;
/** Put before a paragraph's tail so that it parses as the rest of a line. */
const LEAD = "x ";
const BLANK_LINE = /(^|\n)[ \t]*\r?\n/;
/** Blocks whose end never depends on the line after them. */
const SELF_CLOSING = new Set(["heading_open", "hr", "fence", "code_block"]);
/** Characters that can make up a whole line with a block meaning (---, ===, |-|). */
const LINE_MARKS = "-*_=|: \t";

/**
 * @typedef {{parsed: number, nodes: number}} FrameStats
 * @typedef {{update: (text: string, st: FrameStats) => boolean}} Mode
 * @typedef {import("markdown-it").Token} Token
 * @typedef {import("markdown-it").Env & {nbstreamProbe?: {open: number}}} Env
 *   markdown-it's env: link reference definitions found by a parse; the freeze probe
 */

/**
 * markdown-it's block tokens of src. Every block token has a line map (`map`); the
 * checks below read it without testing for null.
 * @param {string} src @param {Env} env @param {FrameStats} st
 * @returns {Array<Token & {map: [number, number]}>}
 */
function parseBlocks(src, env, st) {
  st.parsed += src.length;
  return /** @type {Array<Token & {map: [number, number]}>} */ (md.parse(src, env));
}

/** @param {Token[]} tokens @param {Env} env */
function renderTokens(tokens, env) {
  return tokens.length ? md.renderer.render(tokens, md.options, env) : "";
}

/** Offsets of the "\n" characters of s. @param {string} s */
function newlines(s) {
  const out = [];
  for (let i = s.indexOf("\n"); i >= 0; i = s.indexOf("\n", i + 1)) out.push(i);
  return out;
}

/** Offset where line `line` starts, given newlines(). @param {number[]} nl @param {number} line */
function lineStart(nl, line) {
  return line === 0 ? 0 : nl[line - 1] + 1;
}

/**
 * The node n places after `after` among parent's children (or from its start).
 * @param {Node} parent @param {Node | null} after @param {number} n
 */
function nthAfter(parent, after, n) {
  let node = after;
  for (let i = 0; i < n; i++) node = node ? node.nextSibling : parent.firstChild;
  return node;
}

/** Indices of the top-level block tokens. @param {any[]} tokens */
function blockStarts(tokens) {
  const out = [];
  for (let i = 0; i < tokens.length; i++) {
    if (tokens[i].level === 0 && tokens[i].nesting >= 0) out.push(i);
  }
  return out;
}

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

/** @param {string} line @param {string} ch @param {number} len */
function closesFence(line, ch, len) {
  const m = FENCE_CLOSE.exec(line);
  return !!m && m[1][0] === ch && m[1].length >= len;
}

/** Whether an unfinished line could still become the closing fence. @param {string} line @param {string} ch */
function mayCloseFence(line, ch) {
  return (ch === "`" ? /^ {0,3}`*[ \t]*$/ : /^ {0,3}~*[ \t]*$/).test(line.replace(/\r$/, ""));
}

/** What markdown-it makes of code text (its normalize rule). @param {string} s */
function normalizeCode(s) {
  return s.replace(/\r\n?/g, "\n").replace(/\0/g, "\uFFFD");
}

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
  /** @param {OpenBlock} ob @param {Element} p @param {number} pos @param {number} shown */
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

/**
 * An open code fence (at column 0, the segment's only block): text after
 * `pos` is appended to the <code> as text nodes. An unfinished line that may
 * still become the closing fence is shown in `held` until it is decided.
 * As for paragraphs, the lines go into block-level spans of about
 * FENCE_CHUNK characters (cut after a newline), so that appending lays out
 * only the last one; the full render at the end unwraps them.
 */
class FenceMode {
  /** @param {OpenBlock} ob @param {any} tok @param {Element} node @param {string} S */
  static enter(ob, tok, node, S) {
    const code = node.nodeName === "DIV" ? node.querySelector("pre > code") : null;
    const ch = S[0];
    if (!code || (ch !== "`" && ch !== "~") || !tok.markup.startsWith(ch)) return null;
    const nl = newlines(S);
    if (!nl.length || S.endsWith("\r")) return null;
    const len = tok.markup.length;
    for (let i = 0; i < nl.length; i++) {
      const line = S.slice(nl[i] + 1, i + 1 < nl.length ? nl[i + 1] : S.length).replace(/\r$/, "");
      if (closesFence(line, ch, len)) return null;
    }
    const partial = S.slice(nl[nl.length - 1] + 1);
    if (partial && mayCloseFence(partial, ch)) return null;
    return new FenceMode(code, ob.seg + S.length, partial === "", ch, len);
  }

  /** @param {Element} code @param {number} pos @param {boolean} bol @param {string} ch @param {number} len */
  constructor(code, pos, bol, ch, len) {
    this.code = code;
    this.pos = pos; // text offset up to which the code shows the text
    this.bol = bol; // pos is at the start of a line
    this.ch = ch;
    this.len = len;
    this.held = document.createTextNode("");
    code.append(this.held);
    /** @type {Element} */
    this.box = code; // where new text goes: code, then the last chunk span
    this.boxLen = (code.textContent || "").length;
    this.boxEndsLine = bol;
  }

  /**
   * Append code text, starting a new chunk span after a newline once the box is full.
   * @param {string} out @param {FrameStats} st
   */
  append(out, st) {
    let head = out;
    let tail = "";
    if (this.boxLen >= FENCE_CHUNK) {
      const nl = this.boxEndsLine ? -1 : out.lastIndexOf("\n");
      if (this.boxEndsLine || nl >= 0) {
        head = out.slice(0, nl + 1);
        tail = out.slice(nl + 1);
      }
    }
    if (head) {
      this.box.insertBefore(document.createTextNode(head), this.box === this.code ? this.held : null);
      this.boxLen += head.length;
      st.nodes += 1;
    }
    if (head !== out) {
      const span = document.createElement("span");
      span.className = "nbstream-chunk";
      this.code.insertBefore(span, this.held);
      this.box = span;
      this.boxLen = 0;
      if (tail) {
        span.append(tail);
        this.boxLen = tail.length;
      }
      st.nodes += tail ? 2 : 1;
    }
    this.boxEndsLine = out.endsWith("\n");
  }

  /** @param {string} text @param {FrameStats} st */
  update(text, st) {
    const end = text.length;
    let pos = this.pos;
    let out = "";
    let hold = "";
    while (pos < end) {
      const nl = text.indexOf("\n", pos);
      if (this.bol) {
        const line = text.slice(pos, nl < 0 ? end : nl).replace(/\r$/, "");
        if (nl >= 0 && closesFence(line, this.ch, this.len)) return false; // the whole render takes over
        if (nl < 0 && mayCloseFence(line, this.ch)) {
          hold = closesFence(line, this.ch, this.len) ? "" : line;
          break;
        }
      }
      if (nl < 0) {
        const cut = text.charCodeAt(end - 1) === 13 ? end - 1 : end; // "\r" may be half of "\r\n"
        out += text.slice(pos, cut);
        if (cut > pos) this.bol = false;
        pos = cut;
        break;
      }
      out += text.slice(pos, nl + 1);
      pos = nl + 1;
      this.bol = true;
    }
    this.pos = pos;
    if (out) this.append(normalizeCode(out), st);
    if (this.held.data !== hold) this.held.data = hold;
    return true;
  }
}

/**
 * A long list or table (the segment's only block): items / rows before the
 * live one are frozen in `box` (up to `after`); the rest is parsed from the
 * live item's line on (for a table, after its header and delimiter lines).
 */
class ContainerMode {
  /**
   * @param {OpenBlock} ob @param {any} tok @param {Element} top @param {Element} box
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


// ---------------------------------------------------------------------------
// One output area: its rendered Markdown and its raw text.
// ---------------------------------------------------------------------------

/** Renders a text that only grows (or is cleared) into `rendered` and `rawPre`. */
class TextRenderer {
  /** @param {HTMLElement} rendered @param {HTMLElement} rawPre */
  constructor(rendered, rawPre) {
    this.rendered = rendered;
    this.rawPre = rawPre;
    this.splitter = new BlockSplitter();
    this.open = new OpenBlock(this.newTail(), 0); // the open (trailing) block
    this.rawLen = 0; // chars of the text already in rawPre
  }

  newTail() {
    const t = document.createElement("div");
    t.className = "nbstream-block nbstream-tail";
    this.rendered.append(t);
    return t;
  }

  clear() {
    this.splitter.reset();
    this.rendered.replaceChildren();
    this.open = new OpenBlock(this.newTail(), 0);
    this.rawPre.replaceChildren();
    this.rawLen = 0;
  }

  /** Whether parts of the open block are frozen (a full render is due when the run ends). */
  get frozen() {
    return !!(this.open.incremental || this.open.mode);
  }

  /**
   * Bring the DOM up to `text`, which extends the text of the last call.
   * @param {string} text @param {boolean} active the run is queued or running
   * @param {FrameStats} st
   */
  update(text, active, st) {
    if (this.rawLen < text.length) {
      this.rawPre.append(text.slice(this.rawLen));
      this.rawLen = text.length;
      st.nodes += 1;
    }
    for (const [end, next] of this.splitter.advance(text)) {
      const block = text.slice(this.open.start, end);
      if (block.trim() === "") {
        this.open = new OpenBlock(this.open.el, next);
        continue;
      }
      // A closed block is rendered once, in full.
      this.open.render(block, st);
      this.open.el.classList.remove("nbstream-tail");
      this.open = new OpenBlock(this.newTail(), next);
    }
    const open = this.open;
    if (!active) {
      // Not streaming: render the open block whole (once more if parts of it
      // were frozen while the run was active).
      if (open.len !== text.length || open.incremental || open.mode) open.renderAll(text, st);
    } else if (open.len !== text.length) {
      open.update(text, st);
    }
    open.len = text.length;
  }
}

export { BlockSplitter, TextRenderer, morph };
