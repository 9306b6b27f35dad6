// nbstream front end: the incremental block splitter. Finds stable block boundaries in a
// growing text, looking only at newly completed lines:
//  * a blank line outside a fenced code block, once the next non-blank line
//    has started without indentation (indented lines continue a list item or
//    an indented code block across blank lines);
//  * the closing line of a fenced code block opened at column 0.
// Text before a boundary never changes its rendering again. The fence rules are also the
// open code fence's (fence_mode.js).

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

/** @param {string} line @param {string} ch @param {number} len */
function closesFence(line, ch, len) {
  const m = FENCE_CLOSE.exec(line);
  return !!m && m[1][0] === ch && m[1].length >= len;
}

/** Whether an unfinished line could still become the closing fence. @param {string} line @param {string} ch */
function mayCloseFence(line, ch) {
  return (ch === "`" ? /^ {0,3}`*[ \t]*$/ : /^ {0,3}~*[ \t]*$/).test(line.replace(/\r$/, ""));
}

export { BlockSplitter, closesFence, mayCloseFence };
