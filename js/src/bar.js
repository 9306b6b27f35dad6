// nbstream front end: the bar under the prompt (a status line and the tools), and the Raw
// text toggle among its tools.

import { h } from "./dom.js";

/** @typedef {import("./view_scope.js").ViewScope} ViewScope */

/**
 * The bar under the prompt: a status line (badge, metrics; what the run did) and the tools
 * (toggles and buttons). The status line's flex basis is fixed (not its content), so the
 * tools stay on the row they were on whatever the metrics say: a run that ends with a
 * longer metrics line wraps that line inside the status line, never the tools onto a new
 * row (the layout does not jump).
 * @param {HTMLElement[]} status @param {HTMLElement[]} tools
 */
function statusBar(status, tools) {
  const bar = h("div", "nbstream-bar");
  const statusLine = h("div", "nbstream-status-line");
  statusLine.append(...status);
  const toolsEl = h("div", "nbstream-tools");
  toolsEl.append(...tools);
  bar.append(statusLine, toolsEl);
  return { bar, statusLine, tools: toolsEl };
}

/**
 * The Raw text toggle: the exact text instead of rendered Markdown. `changed` runs after
 * each switch; block(why) turns it off and says why in its title ("" turns it on again).
 * @param {ViewScope} scope @param {string} title @param {() => void} changed
 * @returns {{button: HTMLButtonElement, raw: boolean, block: (why: string) => void}}
 */
function rawToggle(scope, title, changed) {
  const button = h("button", "nbstream-raw-toggle", {
    type: "button",
    "aria-label": "Raw text",
    "aria-pressed": "false",
  });
  button.textContent = "Raw text";
  button.title = title;
  const toggle = {
    button,
    raw: false,
    /** @param {string} why */
    block(why) {
      button.disabled = !!why;
      button.title = why || title;
    },
  };
  scope.on(button, "click", () => {
    if (button.disabled) return;
    toggle.raw = !toggle.raw;
    button.setAttribute("aria-pressed", String(toggle.raw));
    changed();
  });
  return toggle;
}

export { rawToggle, statusBar };
