// nbstream front end: one message of the ChatWidget's transcript as the page shows it (its
// element, and for an answer its output, renderer, marks, Thinking section and buttons).
// What it shows is decided by the chat view (chat.js), which knows the run and the other
// messages; a ChatMessage keeps the elements and what they show now.

import { h } from "./dom.js";
import { outputArea } from "./output.js";
import { TextRenderer } from "./text_renderer.js";
import { ThinkingBox } from "./thinking.js";
import { makeNote } from "./token_notes.js";

/** @typedef {import("./chat.js").Message} Message */

/**
 * A message's button: its label (also its accessible name), its action (class
 * `nbstream-<action>`, `data-action`) and its title.
 * @typedef {[label: string, action: string, title: string]} MessageButton
 */

/** Beside Regenerate when the next run is greedy (next_run_samples false). */
const GREEDY_NOTE = "Greedy decoding: Regenerate gives the same answer again. Set a temperature in Settings to sample.";

/** What an answer replayed from a recording is, in words (its mark's title and hidden text). */
const REPLAYED = "replayed from a recording, not a live model";

/**
 * The key of a message's element: the element is made once per key and reused while its
 * message stays (an edited last message, or a history set from code, keeps the keys of the
 * messages it replaces).
 * @param {Message} m
 */
function keyOf(m) {
  return `${m.turn}:${m.role}:${m.run_id ?? "-"}`;
}

/** One message's element: "You" or "Assistant", the text or the answer, the buttons. */
class ChatMessage {
  /** @param {Message} m */
  constructor(m) {
    this.key = keyOf(m);
    this.msg = m;
    this.el = h("div", "nbstream-message");
    this.who = h("div", "nbstream-message-role");
    this.whoText = h("span"); // "You" / "Assistant"
    this.who.append(this.whoText);
    /** @type {HTMLElement | null} assistant: "replay", shown for an answer replayed from a recording */
    this.replayMark = null;
    this.el.append(this.who);
    /** @type {HTMLElement | null} user: the message's text */
    this.text = null;
    /** @type {HTMLElement | null} assistant: the output area */
    this.output = null;
    /** @type {TextRenderer | null} */
    this.renderer = null;
    this.shown = ""; // text in the renderer
    this.shownActive = false; // rendered as streaming
    this.partialLabel = h("div", "nbstream-partial-label");
    this.errorEl = h("div", "nbstream-error"); // no role=alert: the announcer says it (announce.js)
    this.cutEl = h("div", "nbstream-cut"); // assistant: "stopped at max_new_tokens"
    this.actions = h("div", "nbstream-message-actions");
    this.note = makeNote("capture"); // assistant: "made without probabilities"
    /** @type {ThinkingBox | null} assistant: its Thinking section (thinking.js) */
    this.thinking = null;
    if (m.role === "user") {
      this.text = h("div", "nbstream-message-text");
      this.el.append(this.text);
    } else {
      this.output = outputArea("Answer");
      this.renderer = new TextRenderer(h("div", "nbstream-rendered"), h("pre", "nbstream-raw"));
      // A reasoning model's thinking: its own section above the answer.
      this.thinking = new ThinkingBox();
      this.el.append(this.thinking.el, this.output);
    }
    this.el.append(this.actions);
  }

  /** Its role, its "You" / "Assistant", whether it is in the history, a user's text. */
  markRole() {
    const m = this.msg;
    if (this.el.getAttribute("data-role") !== m.role) this.el.setAttribute("data-role", m.role);
    const who = m.role === "user" ? "You" : "Assistant";
    if (this.whoText.textContent !== who) this.whoText.textContent = who;
    this.el.setAttribute("data-in-history", String(!!m.in_history));
    this.markReplay(m.role === "assistant" && m.replayed === true);
    if (m.role === "user") {
      const content = String(m.content ?? "");
      if (this.text && this.text.textContent !== content) this.text.textContent = content;
    }
  }

  /**
   * An answer replayed from a recording says so beside "Assistant" (its accessible name
   * too): a replay is never passed off as a live model's answer.
   * @param {boolean} replayed
   */
  markReplay(replayed) {
    this.el.toggleAttribute("data-replayed", replayed);
    if (replayed && !this.replayMark) {
      this.replayMark = h("span", "nbstream-replayed", { title: REPLAYED });
      // Hidden words around "replay": read after "Assistant", they make a sentence.
      const [comma, why] = [h("span", "nbstream-replayed-why"), h("span", "nbstream-replayed-why")];
      comma.textContent = ", ";
      why.textContent = ` (${REPLAYED})`;
      this.replayMark.append(comma, "replay", why);
    }
    if (!this.replayMark) return;
    if (replayed && !this.replayMark.isConnected) this.who.append(this.replayMark);
    else if (!replayed && this.replayMark.isConnected) this.replayMark.remove();
  }

  /** Show `want` (the token list, the raw text or the rendered Markdown) in the output. @param {Node} want */
  showInOutput(want) {
    const { output } = this;
    if (output && (output.firstChild !== want || output.childNodes.length !== 1)) output.replaceChildren(want);
  }

  /**
   * Bring the rendered answer up to date (a text that does not continue what is shown is
   * rendered afresh); false if nothing changed.
   * @param {string} text @param {boolean} active it is streaming
   * @param {import("./text_renderer.js").FrameStats} st
   */
  draw(text, active, st) {
    const { renderer } = this;
    if (!renderer || (text === this.shown && active === this.shownActive)) return false;
    if (!text.startsWith(this.shown)) renderer.clear();
    renderer.update(text, active, st);
    // The streaming caret belongs to the answer being generated only.
    if (!active) renderer.open.el.classList.remove("nbstream-tail");
    this.shown = text;
    this.shownActive = active;
    return true;
  }

  /**
   * Set its buttons (and, beside Regenerate, the note that a greedy run gives the same answer
   * again), unless they are the ones it has. True when a focused button was among those
   * replaced: the caller moves the focus to what is live now.
   * @param {MessageButton[]} buttons @param {boolean} greedy @param {string} noteId
   */
  setButtons(buttons, greedy, noteId) {
    const { actions } = this;
    const want = buttons.map((b) => b[1]).join(",") + (greedy ? ",greedy" : "");
    if (actions.dataset.buttons === want) return false;
    actions.dataset.buttons = want;
    const hadFocus = actions.contains(document.activeElement);
    actions.replaceChildren(
      ...buttons.map(([label, action, title]) => {
        const b = h("button", `nbstream-${action}`, {
          type: "button",
          "aria-label": label,
          "data-action": action,
        });
        b.textContent = label;
        b.title = title;
        if (action === "regenerate" && greedy) b.setAttribute("aria-describedby", noteId);
        return b;
      }),
    );
    if (greedy) {
      const note = h("span", "nbstream-greedy-note", { id: noteId });
      note.textContent = GREEDY_NOTE;
      actions.append(note);
    }
    return hadFocus;
  }
}

export { ChatMessage, keyOf };
