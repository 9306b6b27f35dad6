// nbstream front end: copying text (the answer, a code block) to the clipboard, and saying
// on the button for a moment whether it worked.

import { h } from "./dom.js";

/** @typedef {import("./view_scope.js").ViewScope} ViewScope */

const COPY_FEEDBACK_MS = 1500;

/**
 * Copy text to the clipboard; falls back to execCommand where the API is missing or refused.
 * @param {string} text @param {HTMLElement} host where the fallback's hidden textarea goes
 * @returns {Promise<boolean>} whether it worked
 */
async function copyText(text, host) {
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return true;
    }
  } catch {
    // fall through to the legacy path
  }
  const ta = h("textarea", "nbstream-copy-buffer", { readonly: "", "aria-hidden": "true" });
  ta.value = text;
  host.append(ta);
  ta.select();
  let ok = false;
  try {
    ok = document.execCommand("copy");
  } catch {
    ok = false;
  }
  ta.remove();
  return ok;
}

/**
 * The Copy button of a code block was clicked: copy the code, and say on the button for a
 * moment whether it worked.
 * @param {ViewScope} scope @param {HTMLElement} btn @param {HTMLElement} host where the
 *   fallback's hidden textarea goes
 */
function copyCode(scope, btn, host) {
  const code = btn.parentElement?.querySelector("code, pre");
  copyAnswer(scope, btn, code ? code.textContent || "" : "", host);
}

/**
 * Copy `text`, and say on the button for a moment whether it worked (its accessible name
 * stays; its word comes back after COPY_FEEDBACK_MS).
 * @param {ViewScope} scope @param {HTMLElement} btn @param {string} text
 * @param {HTMLElement} host where the fallback's hidden textarea goes
 */
function copyAnswer(scope, btn, text, host) {
  const word = btn.getAttribute("data-word") ?? btn.textContent ?? "";
  btn.setAttribute("data-word", word);
  copyText(text, host).then((ok) => {
    if (scope.disposed) return;
    btn.textContent = ok ? "Copied \u2713" : "Copy failed";
    btn.classList.add("nbstream-copied");
    scope.later(() => {
      btn.textContent = word;
      btn.classList.remove("nbstream-copied");
    }, COPY_FEEDBACK_MS);
  });
}

/** The StreamWidget's Copy answer button (the chat has one per answer). */
function copyAnswerButton() {
  const b = h("button", "nbstream-copy-answer", { type: "button", "aria-label": "Copy answer" });
  b.textContent = "Copy answer";
  b.title = "Copy the answer's exact text";
  return b;
}

export { copyAnswer, copyAnswerButton, copyCode };
