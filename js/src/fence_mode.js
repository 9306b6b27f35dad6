// nbstream front end: an open code fence in the open block (open_block.js): new text is
// appended to its <code> as text nodes.

import { closesFence, mayCloseFence } from "./block_splitter.js";
import { newlines } from "./block_parse.js";

/**
 * @typedef {import("./block_parse.js").Block} Block
 * @typedef {import("./block_parse.js").FrameStats} FrameStats
 */

/** Characters of code per block-level span in a long fence. */
const FENCE_CHUNK = 2048;

/** What markdown-it makes of code text (its normalize rule). @param {string} s */
function normalizeCode(s) {
  return s.replace(/\r\n?/g, "\n").replace(/\0/g, "\uFFFD");
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
  /** @param {Block} ob @param {any} tok @param {Element} node @param {string} S */
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

export { FenceMode };
