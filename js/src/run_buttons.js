// nbstream front end: the Run and Stop buttons: their look (glyph and word), which of the
// two is live, and the notice when a Stop waits for a kernel busy with another cell.

import { h } from "./dom.js";

/** @typedef {import("./view_scope.js").ViewScope} ViewScope */

/**
 * A button with a glyph before its word; the glyph is decoration (aria-hidden), the word
 * is also its accessible name.
 * @param {string} cls @param {string} label @param {string} glyph @param {string} [title]
 */
function iconButton(cls, label, glyph, title) {
  const b = h("button", cls, { type: "button", "aria-label": label });
  b.innerHTML = `<span class="nbstream-btn-icon" aria-hidden="true">${glyph}</span>${label}`;
  if (title) b.title = title;
  return b;
}

/**
 * Set which of two buttons is live (the other disabled), and keep the keyboard user's
 * place: a focused button that disables itself drops the focus to the page body (where
 * JupyterLab's command-mode shortcuts would take the next key), so the focus moves to the
 * button that is live now (Run -> Stop -> Run).
 * @param {HTMLButtonElement} start Run / Send @param {HTMLButtonElement} stop
 * @param {boolean} active a run is queued or running (Stop is the live one)
 */
function swapButtons(start, stop, active) {
  const had = document.activeElement;
  start.disabled = active;
  stop.disabled = !active;
  const from = active ? start : stop;
  const to = active ? stop : start;
  if (had === from && !to.disabled) to.focus({ preventScroll: true });
}

/** How long the kernel has to act on a Stop before the view says why it has not. */
const STOP_GRACE_MS = 1000;
/** What the view says when a Stop is waiting for a kernel busy with another cell. */
const STOP_WAITING =
  "Stop is waiting: the kernel is busy with another cell, so the run stops when that cell " +
  "ends. Interrupt the kernel (\u25A0 in the notebook's toolbar) to stop now.";

/**
 * The notice under the Stop button when a Stop has not been acted on. The kernel handles
 * the Stop on its main thread, so while another cell blocks it the click waits, and the
 * run's own thread keeps streaming. The sign: STOP_GRACE_MS after the click the run is
 * still going and its text still arrives. A run the kernel did stop sends nothing more;
 * a step that merely takes long sends nothing either, so neither shows the notice. It goes
 * as soon as the run ends or a new one starts.
 * @param {ViewScope} scope @param {HTMLElement} after the notice goes after this element
 * @param {() => boolean} active whether the run is queued or running
 * @returns {{stopped: () => void, progress: () => void, update: () => void, hide: () => void,
 *   el: HTMLElement}} stopped(): Stop was clicked; progress(): the run's text (or counters)
 *   came; update(): the run's state may have changed; hide(): a new run started
 */
function stopNotice(scope, after, active) {
  const el = h("div", "nbstream-stop-waiting", { role: "status" });
  el.textContent = STOP_WAITING;
  /** @type {"idle" | "grace" | "waiting"} */
  let phase = "idle";
  /** @type {ReturnType<typeof setTimeout> | null} */
  let timer = null;
  const hide = () => {
    phase = "idle";
    scope.cancel(timer);
    timer = null;
    if (el.isConnected) el.remove();
  };
  return {
    el,
    hide,
    stopped() {
      if (!active() || phase !== "idle") return;
      phase = "grace";
      timer = scope.later(() => {
        timer = null;
        if (phase === "grace") phase = active() ? "waiting" : "idle";
      }, STOP_GRACE_MS);
    },
    progress() {
      if (phase === "waiting" && active() && !el.isConnected) after.after(el);
    },
    update() {
      if (!active()) hide();
    },
  };
}

export { iconButton, stopNotice, swapButtons };
