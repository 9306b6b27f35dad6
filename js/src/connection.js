// nbstream front end: a view that can ask its kernel nothing: the kernel is gone (the view
// shows itself disconnected, its controls off), or it shows a saved run no kernel holds.

import { h } from "./dom.js";
import { setBadge } from "./status.js";

/** @typedef {import("./view_scope.js").ViewScope} ViewScope */

/** What a view shows once its kernel has gone (see watchConnection). */
const DISCONNECTED = "the kernel restarted: run the cell again";

/**
 * Say in a token's popover, once, that its actions need a kernel (`why`: disconnected's
 * words): Continue and "How was this picked?" would each say it otherwise.
 * @param {HTMLElement} pop the popover @param {string} why @param {(note: HTMLElement) => void} place
 */
function sayNoKernel(pop, why, place) {
  if (pop.querySelector(".nbstream-no-kernel-note")) return;
  const note = h("div", "nbstream-token-note nbstream-no-kernel-note", { role: "note" });
  // `why` names the kernel already: the note says what follows for the token, once.
  note.textContent = `${why}, so a token's actions (Continue, How was this picked?) are not offered.`;
  place(note);
}

/**
 * Why `el` (in a view) can ask the kernel nothing, or "": its view is disconnected
 * (watchConnection marks the root data-connection="lost"), or it shows a saved run that no
 * running kernel holds (replay.js: the root has data-saved).
 * @param {Element} el
 */
function disconnected(el) {
  if (el.closest('[data-connection="lost"]')) return `Disconnected: ${DISCONNECTED}`;
  return el.closest("[data-saved]") ? "Saved output: no running kernel holds this widget" : "";
}

/**
 * Show the view as disconnected once its kernel is gone, and never let a message to a gone
 * kernel throw. Two signs, as @jupyter-widgets/base and JupyterLab's widget manager give
 * them: the manager sets every model's `comm_live` to false when the kernel restarts (the
 * setter triggers `comm_live_update`; after a view exists nothing sets it back to true),
 * and `model.send` on a comm whose kernel was restarted throws "Cannot send"
 * (@jupyterlab/services' Comm.send). Wraps `model.send` of this view's model (anywidget
 * gives each view its own model object), so every send of the view goes through the check,
 * also those made after the view is gone (its `removed`). Then: the root gets
 * data-connection="lost", the badge says "disconnected", a notice says DISCONNECTED, and
 * every control but the Raw text toggle and the output's Copy buttons is disabled.
 * @param {ViewScope} scope @param {any} model @param {HTMLElement} root the view's root
 * @returns {{lost: boolean}} whether the kernel is gone
 */
function watchConnection(scope, model, root) {
  const state = { lost: false };
  const notice = h("div", "nbstream-disconnected", { role: "alert" });
  notice.textContent = `Disconnected: ${DISCONNECTED}`;
  // Idempotent (it writes only what differs): it runs again on its own mutations.
  const apply = () => {
    if (root.getAttribute("data-connection") !== "lost") root.setAttribute("data-connection", "lost");
    const badge = root.querySelector(".nbstream-badge");
    if (badge instanceof HTMLElement && badge.getAttribute("data-status") !== "disconnected") {
      setBadge(badge, "disconnected");
    }
    for (const busy of root.querySelectorAll("[aria-busy=true]")) busy.setAttribute("aria-busy", "false");
    for (const c of root.querySelectorAll("button, input, textarea, select")) {
      // What still works without the kernel: the Raw text toggle, the Copy buttons, and
      // the sampling panel's Close. Not the token popover's Continue or "How was this
      // picked?" (inside the output too): they ask the kernel.
      if (c.matches(".nbstream-raw-toggle, .nbstream-copy, .nbstream-dist-close")) continue;
      const control = /** @type {HTMLButtonElement} */ (c);
      if (!control.disabled) control.disabled = true;
    }
    if (!notice.isConnected) root.prepend(notice);
  };
  const lose = () => {
    if (state.lost) return;
    state.lost = true;
    if (scope.disposed) return;
    apply();
    // Whatever the view redraws later (its chrome after a change made in the page) is put
    // back to disconnected.
    const watch = new MutationObserver(apply);
    watch.observe(root, {
      subtree: true,
      childList: true,
      attributes: true,
      attributeFilter: ["disabled", "data-status", "aria-busy"],
    });
    scope.defer(() => watch.disconnect());
  };
  scope.onModel("comm_live_update", lose);
  const send = model.send;
  if (typeof send === "function") {
    try {
      model.send = (/** @type {any[]} */ ...args) => {
        if (state.lost) return;
        try {
          send.apply(model, args);
        } catch (err) {
          console.warn("nbstream: the kernel is gone; the view is disconnected", err);
          lose();
        }
      };
    } catch {
      // a model object that cannot take it: the comm_live_update sign still works
    }
  }
  return state;
}

export { disconnected, sayNoKernel, watchConnection };
