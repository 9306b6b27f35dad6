// nbstream front end: the Settings panel's Steering slider (mounted by settings_panel.js).
//
// Synced traits it uses (SettingsWidget in nbstream/widgets/settings_traits.py):
//   steer_direction   {layer, size, norm, digest, limit} of the widget's direction, or null:
//                     no direction, no slider (JS reads; a Direction is set from Python)
//   steer_strength    the strength, or null: off (two-way: the slider writes it)
//   settings_errors   the kernel's message for steer_strength, if any (JS reads)
//
// The model holds the strength at every moment the slider moves (no debounce): a Run also
// carries it (values()), so a Run clicked before the state update arrived still uses it.

import { h } from "./dom.js";

/** The slider's step: fine enough for a direction of any norm, coarse enough for arrow keys. */
const STEP = 0.5;

/** A strength as the page says it: "+4", "-2.5", "0". @param {number} v */
function signed(v) {
  return v > 0 ? `+${v}` : String(v);
}

/**
 * What the slider's field says of the direction.
 * @param {import("./protocol.js").SteerDirectionInfo} d
 */
function directionWords(d) {
  return `adds strength \u00d7 a direction (length ${d.norm.toPrecision(3)}) to layer ${d.layer + 1}'s output`;
}

/**
 * The field's elements: an On checkbox, the strength slider and its value, under a label.
 * @param {string} viewId
 */
function steerElements(viewId) {
  const id = `nbstream-steer-${viewId}`;
  const el = h("div", "nbstream-field nbstream-field-steer", { "data-field": "steer_strength" });
  el.style.gridColumn = "1 / -1"; // the whole row: a slider needs the width
  const label = h("label", "nbstream-field-label", { for: id });
  label.textContent = "Steering";
  const hint = h("span", "nbstream-field-hint", { id: `${id}-hint` });
  const head = h("div", "nbstream-field-head");
  head.append(label, hint);
  const toggle = h("input", "nbstream-steer-on", { type: "checkbox", "aria-label": "Steer the next run" });
  const toggleLabel = h("label", "nbstream-steer-on-label");
  toggleLabel.append(toggle, " On");
  const slider = h("input", "nbstream-steer-strength", {
    id,
    type: "range",
    step: String(STEP),
    "aria-label": "Steering strength",
    "aria-describedby": `${id}-hint`,
    "data-lm-suppress-shortcuts": "true",
  });
  slider.style.flex = "1";
  const shown = h("output", "nbstream-steer-value", { for: id });
  const row = h("div", "nbstream-steer-row");
  Object.assign(row.style, { display: "flex", alignItems: "center", gap: "8px" });
  row.append(toggleLabel, slider, shown);
  const error = h("div", "nbstream-field-error", { id: `${id}-error`, "aria-live": "polite" });
  el.append(head, row, error);
  return { el, hint, toggle, slider, shown, error };
}

/**
 * What a view gives the slider: the panel's listeners, removed at its cleanup.
 * @typedef {object} SteerControlOptions
 * @property {import("./model.js").RunModel} model
 * @property {string} viewId
 * @property {Function} on       add a DOM listener removed at cleanup
 * @property {Function} onModel  add a model listener removed at cleanup
 */

/** The Steering field, hidden while the widget has no direction (see the top of this file). */
class SteerControl {
  /** @param {SteerControlOptions} opts */
  constructor({ model, viewId, on, onModel }) {
    this.model = model;
    const parts = steerElements(viewId);
    this.el = parts.el;
    on(parts.toggle, "change", () => this.send(parts.toggle.checked ? Number(parts.slider.value) : null));
    on(parts.slider, "input", () => this.send(Number(parts.slider.value)));
    for (const name of ["steer_direction", "steer_strength", "settings_errors"]) {
      onModel(`change:${name}`, () => this.render(parts));
    }
    this.render(parts);
  }

  /** The strength the model holds, or null (off, or not a number). */
  strength() {
    const v = this.model.get("steer_strength");
    return typeof v === "number" && Number.isFinite(v) ? v : null;
  }

  /** Put the strength in the model at once, and send it. @param {number | null} value */
  send(value) {
    if (value === (this.model.get("steer_strength") ?? null)) return;
    this.model.set("steer_strength", value);
    this.model.save_changes();
  }

  /**
   * Draw the field from the model: the one state (the slider never keeps its own).
   * @param {ReturnType<typeof steerElements>} parts
   */
  render({ el, hint, toggle, slider, shown, error }) {
    const direction = this.model.get("steer_direction");
    el.hidden = !direction;
    if (!direction) return;
    const limit = Math.max(direction.limit, STEP);
    slider.min = String(-limit);
    slider.max = String(limit);
    hint.textContent = directionWords(direction);
    const v = this.strength();
    toggle.checked = v !== null;
    slider.disabled = v === null;
    const position = String(v ?? 0);
    if (slider.value !== position) slider.value = position;
    shown.textContent = v === null ? "off" : signed(v);
    const said = v === null ? "off" : `${signed(v)} along layer ${direction.layer + 1}'s direction`;
    slider.setAttribute("aria-valuetext", said);
    const message = (this.model.get("settings_errors") || {}).steer_strength;
    error.textContent = message ? String(message) : "";
    if (message) slider.setAttribute("aria-invalid", "true");
    else slider.removeAttribute("aria-invalid");
  }

  /** What a Run carries: the strength, while there is a direction (else nothing). */
  values() {
    return this.model.get("steer_direction") ? { steer_strength: this.model.get("steer_strength") ?? null } : {};
  }

  /** Model defaults: steering off. */
  unset() {
    if (this.model.get("steer_direction")) this.send(null);
  }
}

export { SteerControl, directionWords, signed, steerElements };
