// nbstream front end: a view's output area: its element, following its end while a run
// streams into it, and its end-state marks (partial, empty, busy, cut, the error).

import { h } from "./dom.js";
import { ACTIVE, CUT } from "./status.js";

/** @typedef {import("./view_scope.js").ViewScope} ViewScope */

const PARTIAL = new Set(["queued", "running", "failed", "cancelled"]);
const FOLLOW_SLACK_PX = 12;

/**
 * An output area: a log (aria-busy while a run streams, see markOutput) that does not
 * announce its fragments (aria-live off: a screen reader cannot follow a stream said a
 * piece at a time); the view's announcer says the end once (announce.js). data-partial /
 * data-empty are kept by markOutput.
 * @param {string} label its accessible name
 */
function outputArea(label) {
  return h("div", "nbstream-output", {
    role: "log",
    "aria-label": label,
    "aria-live": "off",
    "data-partial": "false",
    "data-empty": "true",
  });
}

/**
 * Whether a scrolling element follows the end of what streams in: yes until the user
 * scrolls up (more than FOLLOW_SLACK_PX from the end), again once they scroll back down.
 * @param {ViewScope} scope @param {HTMLElement} el
 * @returns {{on: boolean, stick: () => void}} stick(): bring the end into sight if following
 */
function follower(scope, el) {
  const follow = {
    on: true,
    stick() {
      if (follow.on) el.scrollTop = el.scrollHeight;
    },
  };
  scope.on(
    el,
    "scroll",
    () => {
      follow.on = el.scrollHeight - el.scrollTop - el.clientHeight <= FOLLOW_SLACK_PX;
    },
    { passive: true },
  );
  return follow;
}

/**
 * An output area's end-state marks: data-partial, data-empty and aria-busy on it; the
 * "Partial output" label above it (it has text, and the run was cancelled or failed); the
 * error below it (failed).
 * @param {{output: HTMLElement, partialLabel: HTMLElement, errorEl: HTMLElement}} els
 * @param {string} s the run's status @param {boolean} hasText
 * @param {() => any} errorInfo the error ({type, message}), asked for only when failed
 * @param {string} [more] said after "Partial output — <what happened>"
 */
function markOutput({ output, partialLabel, errorEl }, s, hasText, errorInfo, more = "") {
  output.setAttribute("data-partial", String(hasText && PARTIAL.has(s)));
  output.setAttribute("data-empty", String(!hasText));
  output.setAttribute("aria-busy", String(ACTIVE.has(s)));
  if (hasText && (s === "cancelled" || s === "failed")) {
    // The badge already says "cancelled": here, what it means for the text.
    const why = s === "cancelled" ? "stopped before its end" : "run failed";
    partialLabel.textContent = `Partial output — ${why}${more}`;
    if (!partialLabel.isConnected) output.before(partialLabel);
  } else if (partialLabel.isConnected) {
    partialLabel.remove();
  }
  if (s === "failed") {
    const info = errorInfo() || {};
    const msg = [info.type, info.message].filter((x) => x).join(": ");
    errorEl.textContent = msg || "Run failed";
    if (!errorEl.isConnected) output.after(errorEl);
  } else if (errorEl.isConnected) {
    errorEl.remove();
  }
}

/**
 * The mark under an output whose answer was cut off at max_new_tokens (see isCut): the
 * element `cutEl` (class nbstream-cut) after `output` while `cut`, and data-cut on it.
 * @param {HTMLElement} output @param {HTMLElement} cutEl @param {boolean} cut
 */
function markCut(output, cutEl, cut) {
  output.setAttribute("data-cut", String(cut));
  if (cut) {
    const words = `Answer ${CUT}: it may end mid-sentence (raise max_new_tokens for more)`;
    if (cutEl.textContent !== words) cutEl.textContent = words;
    if (!cutEl.isConnected) output.after(cutEl);
  } else if (cutEl.isConnected) {
    cutEl.remove();
  }
}

export { follower, markCut, markOutput, outputArea };
