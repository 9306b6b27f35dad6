// nbstream front end: the notes of the token views: a run made without probabilities, and
// a server's run that has no token probabilities.

import { h } from "./dom.js";

const NO_CAPTURE_NOTE = "This run was made without probabilities; run again to capture them";
/** The same, while that run is still going (it started before they were asked for). */
const NO_CAPTURE_RUNNING_NOTE =
  "This run is going without probabilities (it started before they were asked for); run again once it ends to capture them";
const REMOTE_NOTE =
  "Token views need a local model, or a run on a server made with alternatives=5: this one has no token probabilities (a server sends text, not tokens, unless asked).";

/** @param {"capture" | "remote"} which */
function makeNote(which) {
  const note = h("div", "nbstream-token-note", { "data-note": which, role: "note" });
  note.textContent = which === "remote" ? REMOTE_NOTE : NO_CAPTURE_NOTE;
  return note;
}

/**
 * Word the "made without probabilities" note for its run: still going, or ended.
 * @param {HTMLElement} note @param {boolean} running
 */
function sayCapture(note, running) {
  const words = running ? NO_CAPTURE_RUNNING_NOTE : NO_CAPTURE_NOTE;
  if (note.textContent !== words) note.textContent = words;
}

export { NO_CAPTURE_NOTE, makeNote, sayCapture };
