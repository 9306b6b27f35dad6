// nbstream front end: what the open block (open_block.js) and its modes (para_mode.js,
// fence_mode.js, container_mode.js) share: markdown-it's block tokens of a piece of the
// text, their rendering, and line offsets in that text.

import { md } from "./markdown.js";

const BLANK_LINE = /(^|\n)[ \t]*\r?\n/;

/**
 * @typedef {{parsed: number, nodes: number}} FrameStats
 * @typedef {{update: (text: string, st: FrameStats) => boolean}} Mode
 * @typedef {import("markdown-it").Token} Token
 * @typedef {import("markdown-it").Env & {nbstreamProbe?: {open: number}}} Env
 *   markdown-it's env: link reference definitions found by a parse; the freeze probe
 */

/**
 * What a mode needs of its open block (OpenBlock, open_block.js).
 * @typedef {object} Block
 * @property {HTMLElement} el  the block's element
 * @property {number} seg  start of the live segment; the text before it is committed
 * @property {boolean} incremental  something was frozen: render in full at the end
 * @property {(node: Node | null, pos: number) => void} commit  commit el's children up to
 *   `node` and the text up to offset `pos`
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

export { BLANK_LINE, blockStarts, lineStart, newlines, nthAfter, parseBlocks, renderTokens };
