// nbstream front end: the ChatWidget's controls beside the transcript: the composer (the
// message box, Send or Resend, Stop, the note of editing the last message) and Clear chat
// with the question it asks first. Their listeners are the chat view's (chat.js).

import { h } from "./dom.js";
import { promptBox } from "./prompt.js";
import { iconButton } from "./run_buttons.js";

/** The message box, Send (Resend while editing the last message) and Stop. */
class Composer {
  constructor() {
    this.message = promptBox("nbstream-prompt", "Message", 2, "Message the model… (Shift+Enter to send)");
    this.sendBtn = iconButton("nbstream-run nbstream-send", "Send", "▶", "Send (Shift+Enter)");
    this.stopBtn = iconButton("nbstream-stop", "Stop", "■");
    const actions = h("div", "nbstream-actions");
    actions.append(this.sendBtn, this.stopBtn);
    this.promptRow = h("div", "nbstream-prompt-row");
    this.promptRow.append(this.message, actions);
    this.editNote = h("div", "nbstream-edit-note");
    const editText = h("span");
    editText.textContent = "Editing your last message: Resend replaces it and its answer.";
    this.cancelEditBtn = h("button", "nbstream-cancel-edit", {
      type: "button",
      "aria-label": "Cancel edit",
    });
    this.cancelEditBtn.textContent = "Cancel edit";
    this.editNote.append(editText, this.cancelEditBtn);
    this.editing = false;
    /** @type {string | null} text this view sent, cleared from the box once its run starts */
    this.pending = null;
  }

  /** @param {boolean} value */
  setEditing(value) {
    this.editing = value;
    // The button's word (iconButton: the glyph, then the word) and its accessible name.
    const word = value ? "Resend" : "Send";
    /** @type {Text} */ (this.sendBtn.lastChild).textContent = word;
    this.sendBtn.setAttribute("aria-label", word);
    this.sendBtn.title = `${word} (Shift+Enter)`;
    if (value && !this.editNote.isConnected) this.promptRow.before(this.editNote);
    else if (!value && this.editNote.isConnected) this.editNote.remove();
  }

  /** Edit the last user message: its text in the box, Send becomes Resend. @param {string} text */
  edit(text) {
    this.message.value = text;
    this.setEditing(true);
    this.message.focus();
  }

  cancelEdit() {
    this.setEditing(false);
    this.message.value = "";
  }

  /** A run started: the message this view sent (still in the box) is in the transcript now. */
  runStarted() {
    if (this.pending !== null && this.message.value === this.pending) {
      this.message.value = "";
      this.setEditing(false);
    }
    this.pending = null;
  }
}

/**
 * Clear chat and its question. Clearing cannot be undone (the kernel forgets the turns): it
 * is asked for twice, in the page (no window.confirm: a modal the notebook's keyboard
 * handling does not expect).
 */
class ClearChat {
  constructor() {
    this.button = h("button", "nbstream-clear", { type: "button", "aria-label": "Clear chat" });
    this.button.textContent = "Clear chat";
    this.button.title = "Stop any answer and start the conversation afresh (asks first)";
    this.confirm = h("div", "nbstream-clear-confirm", {
      role: "group",
      "aria-label": "Clear the conversation?",
    });
    const question = h("span", "nbstream-clear-question");
    question.textContent = "Clear the whole conversation? It cannot be undone.";
    this.yes = h("button", "nbstream-clear-yes", { type: "button", "aria-label": "Yes, clear" });
    this.yes.textContent = "Yes, clear";
    this.no = h("button", "nbstream-clear-no", { type: "button", "aria-label": "Keep it" });
    this.no.textContent = "Keep it";
    this.confirm.append(question, this.yes, this.no);
    /** @type {HTMLElement | null} the question goes after it (the chat's bar) */
    this.anchor = null;
  }

  /** Show or hide the question under the bar. @param {boolean} open */
  setConfirming(open) {
    if (open && !this.confirm.isConnected) this.anchor?.after(this.confirm);
    else if (!open && this.confirm.isConnected) this.confirm.remove();
    this.button.setAttribute("aria-expanded", String(open));
  }

  /**
   * The buttons' and the question's listeners.
   * @param {import("./view_scope.js").ViewScope} scope
   * @param {HTMLElement} composer where the focus goes once the chat is cleared
   * @param {() => void} clear send the kernel the `clear`
   */
  listen(scope, composer, clear) {
    const { on } = scope;
    this.button.setAttribute("aria-expanded", "false");
    on(this.button, "click", () => {
      if (this.button.disabled) return;
      this.setConfirming(true);
      this.no.focus(); // the safe answer first: Enter twice must not erase the conversation
    });
    on(this.yes, "click", () => {
      this.setConfirming(false);
      composer.focus({ preventScroll: true });
      if (!this.button.disabled) clear();
    });
    on(this.no, "click", () => this.keep());
    on(this.confirm, "keydown", (/** @type {KeyboardEvent} */ e) => {
      if (e.key !== "Escape") return;
      e.preventDefault();
      e.stopPropagation();
      this.keep();
    });
  }

  /** "Keep it" (or Esc): the question goes, the focus back to Clear chat. */
  keep() {
    this.setConfirming(false);
    this.button.focus();
  }

  /**
   * Nothing to clear (cleared here, in another view or from code): no question left to
   * answer; if the focus was on it or on the button, it goes to `composer`.
   * @param {boolean} empty @param {HTMLElement} composer
   */
  update(empty, composer) {
    const hadFocus = document.activeElement;
    this.button.disabled = empty;
    if (!empty) return;
    const inside = hadFocus === this.button || this.confirm.contains(hadFocus);
    this.setConfirming(false);
    if (inside) composer.focus({ preventScroll: true });
  }
}

export { ClearChat, Composer };
