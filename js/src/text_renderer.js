// nbstream front end: rendering a growing text incrementally (shared by stream.js and
// chat.js). A TextRenderer owns one output area: closed blocks are rendered once (the block
// splitter, block_splitter.js, says where they end), the open (trailing) block is updated
// per frame at a cost that does not grow with its length (open_block.js), and the final
// DOM is the one-shot rendering of the whole text.

import { BlockSplitter } from "./block_splitter.js";
import { OpenBlock } from "./open_block.js";

/** @typedef {import("./block_parse.js").FrameStats} FrameStats */

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

export { TextRenderer };
