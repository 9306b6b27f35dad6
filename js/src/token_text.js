// nbstream front end: a token's text as the token views show it: legibly (whitespace
// marked, byte pieces and special tokens badged), JSON-escaped for titles, and the real
// text of byte pieces joined back into their characters.
//
// Tokens are model output: every piece of text goes into the page with textContent
// (never as HTML), so a token reading `<img src=x onerror=...>` stays text.

import { h } from "./dom.js";

/** A token's id, or null: a run on a server sends none (its tokens are keyed by position). @param {unknown} id */
const hasId = (id) => id !== null && id !== undefined;

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

export { appendPieces, describe, hasId, realText };
