// nbstream front end: a run's status as a view shows it: the states, which of them are
// active, the badge (word and glyph, never colour alone), and a run cut at max_new_tokens.

import { h } from "./dom.js";

const STATUSES = ["idle", "queued", "running", "complete", "failed", "cancelled"];
/**
 * Word and glyph per status: the state is shown by word AND look, never colour alone.
 * @type {Record<string, [string, string]>}
 */
const BADGE = {
  idle: ["idle", "○"],
  queued: ["queued…", "◌"],
  running: ["running…", ""], // the glyph is a CSS spinner
  complete: ["complete", "✓"],
  failed: ["failed", "✕"],
  cancelled: ["cancelled", "■"],
  // Not a run's state: the view lost its kernel (see watchConnection).
  disconnected: ["disconnected", "⚠"],
  // Not a run's state: a saved run played again in the page (replay.js).
  replaying: ["replaying…", "▶"],
};
/** A complete run that ended at max_new_tokens (finish_reason "length"): a normal end, but
 * not the model's own; nbstream/widgets/display.py's CUT says the same in saved outputs. */
const CUT = "stopped at max_new_tokens";

const ACTIVE = new Set(["queued", "running"]);

/**
 * The status trait, one of STATUSES (anything else reads as idle).
 * @param {any} model
 */
function modelStatus(model) {
  const s = String(model.get("status") ?? "idle");
  return STATUSES.includes(s) ? s : "idle";
}

/**
 * The status badge: word and glyph, so the state is never shown by colour alone. Not a live
 * region: the view's announcer says each state once (announce.js).
 */
function makeBadge() {
  const badge = h("span", "nbstream-badge", { "data-status": "idle" });
  const badgeText = h("span", "nbstream-badge-text");
  const badgeIcon = h("span", "nbstream-badge-icon", { "aria-hidden": "true" });
  badge.append(badgeText, badgeIcon);
  return badge;
}

/**
 * Whether a run in state `s` with these metrics was cut off at max_new_tokens.
 * @param {string} s @param {any} metrics
 */
function isCut(s, metrics) {
  return s === "complete" && !!metrics && metrics.finish_reason === "length";
}

/**
 * @param {HTMLElement} badge @param {string} s
 * @param {boolean} [cut] a complete run cut off at max_new_tokens (see isCut): said in words
 */
function setBadge(badge, s, cut = false) {
  badge.setAttribute("data-status", s);
  badge.classList.toggle("nbstream-cut", cut);
  const [state, glyph] = BADGE[s];
  const word = cut ? `${state} · ${CUT}` : state;
  const badgeText = /** @type {HTMLElement} */ (badge.firstChild);
  const badgeIcon = /** @type {HTMLElement} */ (badge.lastChild);
  if (badgeText.textContent !== word) badgeText.textContent = word;
  if (badgeIcon.textContent !== glyph) badgeIcon.textContent = glyph;
}

export { ACTIVE, CUT, STATUSES, isCut, makeBadge, modelStatus, setBadge };
