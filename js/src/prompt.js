// nbstream front end: the prompt box both views (and the compare header) have: its element,
// its submit keys, its trait kept in step with what is typed, and the error of the last Run
// or Send shown under it (with the figures of a prompt too long for the context).

import { h } from "./dom.js";

/** @typedef {import("./view_scope.js").ViewScope} ViewScope */

const PROMPT_DEBOUNCE_MS = 300;

/**
 * A prompt box. Lumino (JupyterLab / Notebook 7) skips its keyboard shortcuts for events
 * from inside it: Shift+Enter must not run the cell.
 * @param {string} cls @param {string} label @param {number} rows @param {string} placeholder
 */
function promptBox(cls, label, rows, placeholder) {
  return h("textarea", cls, {
    "aria-label": label,
    rows: String(rows),
    placeholder,
    spellcheck: "true",
    "data-lm-suppress-shortcuts": "true",
  });
}

/**
 * Shift+Enter (or Ctrl / Cmd+Enter) in `box` calls `fn`; the key goes no further (not to
 * the notebook). Enter alone types a newline; nothing happens while an IME composes.
 * @param {ViewScope} scope @param {HTMLElement} box @param {() => void} fn
 */
function onSubmitKey(scope, box, fn) {
  scope.on(box, "keydown", (/** @type {KeyboardEvent} */ e) => {
    if (e.key !== "Enter" || e.isComposing) return;
    if (!(e.shiftKey || e.ctrlKey || e.metaKey)) return;
    e.preventDefault();
    e.stopPropagation();
    fn();
  });
}

/**
 * Keep a text box and a string trait in step both ways: typing saves the trait (debounced,
 * at once on blur); the kernel's value shows unless the user is typing (their words win
 * until saved).
 * @param {ViewScope} scope @param {any} model
 * @param {HTMLTextAreaElement} box @param {string} trait
 * @returns {() => void} save now (before a run: the run must see what was typed)
 */
function syncedText(scope, model, box, trait) {
  let dirty = false;
  /** @type {ReturnType<typeof setTimeout> | null} */
  let timer = null;
  box.value = String(model.get(trait) ?? "");
  const save = () => {
    scope.cancel(timer);
    timer = null;
    dirty = false;
    model.set(trait, box.value);
    model.save_changes();
  };
  scope.onModel(`change:${trait}`, () => {
    const v = String(model.get(trait) ?? "");
    if (!dirty && box.value !== v) box.value = v;
  });
  scope.on(box, "input", () => {
    dirty = true;
    scope.cancel(timer);
    timer = scope.later(() => {
      timer = null;
      save();
    }, PROMPT_DEBOUNCE_MS);
  });
  scope.on(box, "blur", () => {
    if (dirty) save();
  });
  return save;
}

/**
 * The figures of a refusal because the prompt plus max_new_tokens is over the model's
 * context (nbstream/backends/local.py's ContextLengthError, and the chat's wording of it),
 * or null for any other message.
 * @param {string} message
 * @returns {{prompt: number, maxNew: number, context: number} | null}
 */
function contextOverflow(message) {
  const m = /(\d+) tokens\)?,? plus max_new_tokens \((\d+)\)[\s\S]*?context of (\d+) tokens/.exec(message);
  return m ? { prompt: Number(m[1]), maxNew: Number(m[2]), context: Number(m[3]) } : null;
}

/**
 * The input_error trait (what was wrong with the last Run / Send; nothing started) under
 * the prompt row, tied by aria-describedby to what caused it: the prompt box, unless
 * `blame` takes it (the settings panel, for a max_new_tokens the context cannot hold).
 * @param {any} model @param {string} viewId @param {HTMLElement} box @param {HTMLElement} row
 * @param {(message: string | null) => boolean} [blame] called with the message (null once
 *   it is gone); true: a settings field shows it, the box is not marked
 * @returns {() => void} update
 */
function inputErrorView(model, viewId, box, row, blame) {
  const id = `nbstream-input-error-${viewId}`;
  const el = h("div", "nbstream-input-error", { role: "alert", id });
  return () => {
    const inputError = String(model.get("input_error") ?? "");
    const elsewhere = blame ? blame(inputError || null) : false;
    if (inputError) {
      el.textContent = inputError;
      if (!el.isConnected) row.after(el);
    } else if (el.isConnected) {
      el.remove();
    }
    if (inputError && !elsewhere) {
      box.setAttribute("aria-invalid", "true");
      box.setAttribute("aria-describedby", id);
    } else if (box.hasAttribute("aria-invalid")) {
      box.removeAttribute("aria-invalid");
      box.removeAttribute("aria-describedby");
    }
  };
}

export { contextOverflow, inputErrorView, onSubmitKey, promptBox, syncedText };
