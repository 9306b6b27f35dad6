// nbstream front end: the settings panel and the prompt view, shared by the
// StreamWidget view (stream.js) and the ChatWidget view (chat.js).
//
// Synced traits they use (RunWidget in nbstream/widgets/base.py; `system` is the
// ChatWidget's, nbstream/widgets/chat.py; all of them in PROTOCOL.md):
//   max_new_tokens, temperature, top_p, top_k, repetition_penalty, do_sample, seed,
//   stop_sequences, alternatives, [system]   two-way; null means "the model's default"
//   settings_schema            {trait: SettingSchema}: each setting's type, range and the
//                              kernel's own messages (JS reads; set once by Python)
//   settings_errors            {trait: message} from Python's validate_settings (JS reads)
//   settings_defaults          {setting: the model's default} for placeholders (JS reads)
//   next_run_samples           whether the next run samples (true), is greedy (false) or
//                              cannot be said (null), by Python's one rule (JS reads)
//   prompt_text, prompt_tokens what the model got for the current / last run (JS reads)
//
// The browser checks a field as it is typed in, against the types and ranges the kernel
// sent (settings_schema, from nbstream/settings.py's settings_schema()): an instant hint.
// Whatever was typed is sent all the same (a number even when out of range, the text when
// it is not a number), so that the kernel holds what the field shows: Python checks it
// again, and once its word (settings_errors) arrives, that is what the field shows. Nothing
// here repeats a range: only labels and words.

import { h } from "./dom.js";
import { contextOverflow } from "./prompt.js";
import { SteerControl } from "./steer_control.js";

const SAVE_DEBOUNCE_MS = 300;
/** The settings a greedy run does not use. */
const SAMPLING_PARAMETERS = ["temperature", "top_p", "top_k"];
/** What the Sampling field says of the next run (next_run_samples). @type {Record<string, string>} */
const SAMPLING_NOTE = {
  true: "the next run samples",
  false: "the next run is greedy: temperature, top-p and top-k are not used",
  null: "",
};
const INT_RE = /^[+-]?\d+$/;
const NUM_RE = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

/**
 * One setting as the kernel describes it (`settings_schema[trait]`; nbstream/settings.py,
 * settings_schema()).
 * @typedef {import("./protocol.js").SettingSchema} SettingSchema
 */

/**
 * The trait a field edits: a setting of the RunWidget, or the ChatWidget's system prompt.
 * @typedef {keyof import("./protocol.js").RunWidgetTraits | "system"} FieldTrait
 */

/**
 * One field of the panel: how it looks (FIELDS) and what it takes (the schema).
 * @typedef {object} FieldSpec
 * @property {FieldTrait} name the trait
 * @property {string} label    its accessible name
 * @property {"int" | "float" | "bool" | "lines" | "text"} kind
 * @property {string} [hint]   what is allowed, under the label
 * @property {(v: number | bigint) => string | null} [check] a range check: the problem, or null
 */

/**
 * How a field looks, in the panel's order: its trait, label and hint (made from the
 * setting's schema: its bounds are the kernel's, the words are the panel's).
 * @typedef {object} FieldLook
 * @property {FieldTrait} name
 * @property {string} label
 * @property {(s: SettingSchema) => string} [hint]
 */

/** ">= 0", "> 0": a lower bound. @param {SettingSchema} s */
const lower = (s) => `${s.min_exclusive ? ">" : ">="} ${s.min}`;

/** @type {FieldLook[]} */
const FIELDS = [
  { name: "max_new_tokens", label: "Max new tokens", hint: lower },
  { name: "temperature", label: "Temperature", hint: (s) => `${lower(s)}; 0 is greedy` },
  {
    name: "top_p",
    label: "Top-p",
    hint: (s) => `${s.min} ${s.min_exclusive ? "<" : "<="} p ${s.max_exclusive ? "<" : "<="} ${s.max}`,
  },
  { name: "top_k", label: "Top-k", hint: (s) => `${lower(s)}; 0 disables` },
  { name: "repetition_penalty", label: "Repetition penalty", hint: (s) => `${lower(s)}; 1 is none` },
  { name: "do_sample", label: "Sampling" },
  { name: "seed", label: "Seed", hint: (s) => `${lower(s)}; reproducible sampling` },
  {
    name: "alternatives",
    label: "Alternatives (k)",
    hint: (s) => `${s.min}\u2013${s.max}; top candidates per token`,
  },
  { name: "stop_sequences", label: "Stop sequences", hint: () => "one per line; \\n is a newline" },
];

/** @type {Record<SettingSchema["type"], FieldSpec["kind"]>} */
const KIND_OF_TYPE = { int: "int", float: "float", bool: "bool", strings: "lines", string: "text" };

/**
 * The range check of a number field: the kernel's message for a value out of range. A
 * whole number past 2**53 - 1 (a seed up to 2**64 - 1) is checked as a BigInt.
 * @param {string} name @param {SettingSchema} s
 * @returns {(v: number | bigint) => string | null}
 */
function rangeCheck(name, s) {
  /** @param {string | undefined} template @param {number | bigint} v */
  const say = (template, v) =>
    (template ?? `${name} is out of range, got {value}`).replaceAll("{value}", String(v));
  /** @param {number | bigint} v @param {number} bound @returns {number} v - bound's sign */
  const cmp = (v, bound) => {
    if (typeof v === "number") return Math.sign(v - bound);
    const b = Number.isInteger(bound) ? BigInt(bound) : null;
    if (b === null) return Math.sign(Number(v) - bound);
    return v < b ? -1 : v > b ? 1 : 0;
  };
  return (v) => {
    if (s.min != null && cmp(v, s.min) < (s.min_exclusive ? 1 : 0)) return say(s.messages?.below, v);
    if (s.max != null && cmp(v, s.max) > (s.max_exclusive ? -1 : 0)) return say(s.messages?.above, v);
    return null;
  };
}

/**
 * Whether `value` (as sent) is so near a bound JSON rounded (past 2**53 - 1: the seed's
 * 2**64 - 1 arrives as 2**64) that the page cannot tell which side of it it is on.
 * @param {SettingSchema | undefined} s @param {any} value
 */
function nearInexactBound(s, value) {
  if (!s || s.type !== "int" || typeof value !== "string" || !/^-?\d+$/.test(value)) return false;
  const v = BigInt(value);
  return [s.min, s.max].some((b) => {
    if (typeof b !== "number" || !Number.isInteger(b) || Number.isSafeInteger(b)) return false;
    const d = v - BigInt(b);
    // Half the spacing of doubles at |b|: the bound the kernel meant is within it.
    const slack = BigInt(2 ** Math.max(0, Math.ceil(Math.log2(Math.abs(b))) - 53));
    return d <= slack && d >= -slack;
  });
}

/**
 * The panel's fields for the kernel's `settings_schema`: those of FIELDS the kernel has
 * (an unknown or missing schema shows none), each with its kind and range from the schema.
 * @param {any} schema the `settings_schema` trait
 * @returns {FieldSpec[]}
 */
function fieldSpecs(schema) {
  /** @type {FieldSpec[]} */
  const specs = [];
  for (const look of FIELDS) {
    /** @type {SettingSchema | undefined} */
    const s = schema && typeof schema === "object" ? schema[look.name] : undefined;
    const kind = s ? KIND_OF_TYPE[s.type] : undefined;
    if (!s || !kind) continue;
    /** @type {FieldSpec} */
    const spec = { name: look.name, label: look.label, kind };
    if (look.hint) spec.hint = look.hint(s);
    if (kind === "int" || kind === "float") spec.check = rangeCheck(look.name, s);
    specs.push(spec);
  }
  return specs;
}

/** @type {FieldSpec} */
const SYSTEM_FIELD = { name: "system", label: "System prompt", kind: "text" };

/**
 * The setting a trait stands for (the model's defaults are keyed by setting).
 * @param {any} schema @param {string} trait
 */
function settingOf(schema, trait) {
  const setting = schema?.[trait]?.setting;
  return typeof setting === "string" ? setting : trait;
}

/**
 * A stop string on one line: a newline is written \n, a tab \t, a backslash \\.
 * @param {string} v
 */
function escapeLine(v) {
  return v.replace(
    /[\\\n\r\t]/g,
    (c) => /** @type {Record<string, string>} */ ({ "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t" })[c],
  );
}

/** The inverse of escapeLine (an unknown escape stays as typed). @param {string} line */
function unescapeLine(line) {
  return line.replace(
    /\\([\\nrt])/g,
    (_, /** @type {string} */ c) => /** @type {Record<string, string>} */ ({ "\\": "\\", n: "\n", r: "\r", t: "\t" })[c],
  );
}

/**
 * A string as Python's repr writes it (the kernel's messages quote a value that way).
 * @param {string} s
 */
function pyRepr(s) {
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  return quote + s.replaceAll("\\", "\\\\").replaceAll(quote, `\\${quote}`) + quote;
}

/**
 * The field's text as a trait value: {value} or {error}. An empty field is null (unset).
 * @param {FieldSpec} spec @param {string} text
 * @returns {{value: any} | {error: string}}
 */
function parseField(spec, text) {
  const parsed = parse(spec, text);
  return "error" in parsed ? { error: parsed.error } : parsed;
}

/**
 * What a field sends to the kernel: its value, or for text the browser refuses, the number
 * when the text is one of the field's kind (even out of range), else the text itself. The
 * kernel checks it and reports it in `settings_errors`: both sides hold what the field shows.
 * @param {FieldSpec} spec @param {string} text
 */
function sentValue(spec, text) {
  const parsed = parse(spec, text);
  return "error" in parsed ? parsed.sent : parsed.value;
}

/**
 * parseField, with what is sent for a refused text.
 * @param {FieldSpec} spec @param {string} text
 * @returns {{value: any} | {error: string, sent: any}}
 */
function parse(spec, text) {
  if (spec.kind === "bool") {
    return { value: text === "" ? null : text === "true" };
  }
  if (spec.kind === "text") return { value: text === "" ? null : text };
  if (spec.kind === "lines") {
    const lines = text.split(/\r?\n/).filter((line) => line !== "").map(unescapeLine);
    return { value: lines.length ? [...new Set(lines)] : null };
  }
  const s = text.trim();
  if (s === "") return { value: null };
  // Not a number of the field's kind: the text itself is sent (the kernel says the same).
  if (spec.kind === "int" && !INT_RE.test(s)) {
    return { error: `${spec.name} must be an int, got ${pyRepr(s)}`, sent: s };
  }
  if (spec.kind === "float" && !NUM_RE.test(s)) {
    return { error: `${spec.name} must be a number, got ${pyRepr(s)}`, sent: s };
  }
  const v = Number(s);
  // JSON has no Infinity: the text.
  if (!Number.isFinite(v)) return { error: `${spec.name} must be a finite number, got ${s}`, sent: s };
  if (spec.kind === "int" && !Number.isSafeInteger(v)) {
    // A whole number JSON cannot carry exactly (a seed up to 2**64 - 1): its digits, which
    // the kernel reads as that integer (nbstream/widgets/settings_panel.py, setting_trait).
    const big = BigInt(s.replace(/^\+/, ""));
    const digits = big.toString();
    const problem = spec.check ? spec.check(big) : null;
    return problem ? { error: problem, sent: digits } : { value: digits };
  }
  const problem = spec.check ? spec.check(v) : null;
  return problem ? { error: problem, sent: v } : { value: v };
}

/** A trait value as the field's text. @param {FieldSpec} spec @param {any} value */
function formatField(spec, value) {
  if (value === null || value === undefined) return "";
  if (spec.kind === "bool") return value === true ? "true" : value === false ? "false" : String(value);
  if (spec.kind === "lines") {
    return Array.isArray(value) ? value.map((v) => escapeLine(String(v))).join("\n") : String(value);
  }
  if (typeof value === "string") return value;
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}


/** A bool field's choices (a <select>): [value, text]. */
const BOOL_CHOICES = [
  ["", "Model default"],
  ["true", "On (sample)"],
  ["false", "Off (greedy)"],
];

/**
 * A field's input: a <select> for a bool, a <textarea> for lines or text, else a text
 * <input> (the browser's number inputs would refuse what the kernel must see typed).
 * @param {FieldSpec} spec @param {string} id
 * @returns {HTMLInputElement | HTMLTextAreaElement | HTMLSelectElement}
 */
function fieldInput(spec, id) {
  /** @type {any} */
  let input;
  if (spec.kind === "bool") {
    input = h("select", "nbstream-field-input", { id, "data-field": spec.name });
    for (const [value, text] of BOOL_CHOICES) {
      const opt = h("option", "", { value });
      opt.textContent = text;
      input.append(opt);
    }
  } else if (spec.kind === "lines" || spec.kind === "text") {
    input = h("textarea", "nbstream-field-input", {
      id,
      rows: spec.kind === "text" ? "3" : "2",
      spellcheck: "false",
      "data-field": spec.name,
      "data-lm-suppress-shortcuts": "true",
    });
  } else {
    input = h("input", "nbstream-field-input", {
      id,
      type: "text",
      inputmode: spec.kind === "int" ? "numeric" : "decimal",
      autocomplete: "off",
      spellcheck: "false",
      "data-field": spec.name,
      "data-lm-suppress-shortcuts": "true",
    });
  }
  if (spec.kind === "lines") input.placeholder = "One per line (none set)";
  if (spec.kind === "text") input.placeholder = "None (the chat template's default)";
  return input;
}

/** One field of the panel: its elements, and what the page knows of what was typed in it. */
class Field {
  /**
   * Make the field's elements and append them to the panel's grid.
   * @param {FieldSpec} spec @param {string} viewId @param {HTMLElement} grid
   */
  constructor(spec, viewId, grid) {
    const id = `nbstream-field-${spec.name}-${viewId}`;
    const wrap = h("div", `nbstream-field nbstream-field-${spec.kind}`, { "data-field": spec.name });
    const label = h("label", "nbstream-field-label", { for: id });
    label.textContent = spec.label;
    this.spec = spec;
    this.input = fieldInput(spec, id);
    this.errorEl = h("div", "nbstream-field-error", { id: `${id}-error`, "aria-live": "polite" });
    const head = h("div", "nbstream-field-head");
    head.append(label);
    /** the id of its hint, or "" */
    this.hintId = "";
    /** @type {HTMLElement | null} its hint */
    this.hintEl = null;
    // The Sampling field's hint says what the next run does (the kernel's next_run_samples).
    if (spec.hint || spec.kind === "bool") {
      this.hintId = `${id}-hint`;
      const hint = h("span", `nbstream-field-hint${spec.kind === "bool" ? " nbstream-sampling-note" : ""}`, {
        id: this.hintId,
      });
      hint.textContent = spec.hint ?? "";
      this.hintEl = hint;
      head.append(hint);
      this.input.setAttribute("aria-describedby", this.hintId);
    }
    wrap.append(head, this.input, this.errorEl);
    grid.append(wrap);
    /** @type {string | null} the browser's problem with what was typed */
    this.local = null;
    /** typed in, not saved yet */
    this.dirty = false;
    /** saved since Python last reported on it */
    this.edited = false;
    /** inside its own model.set (not a change from elsewhere) */
    this.saving = false;
    /** what was typed is too near a bound JSON could not carry exactly (a seed near
     * 2**64 - 1): the kernel's verdict is taken whatever it is */
    this.unsure = false;
    /** @type {string | null} the kernel refused a Run because of this field's value
     * (input_error: max_new_tokens over the model's context), until it is edited */
    this.blamed = null;
    /** @type {ReturnType<typeof setTimeout> | null} the pending save */
    this.timer = null;
  }
}

/**
 * What a view gives the settings panel.
 * @typedef {object} SettingsPanelOptions
 * @property {import("./model.js").RunModel} model
 * @property {string} viewId
 * @property {boolean} chat          add the system prompt field
 * @property {Function} on           add a DOM listener removed at cleanup
 * @property {Function} onModel      add a model listener removed at cleanup
 * @property {Function} later        a timer cleared at cleanup
 * @property {() => boolean} active  whether a run is queued or running
 */

/**
 * The collapsible settings panel: a toggle for the status bar, and the panel of fields,
 * each two-way with its trait (see the top of this file).
 */
class SettingsPanel {
  /** @param {SettingsPanelOptions} opts */
  constructor({ model, viewId, chat, on, onModel, later, active }) {
    this.model = model;
    this.later = later;
    this.active = active;
    const panelId = `nbstream-settings-${viewId}`;
    this.toggle = /** @type {HTMLButtonElement} */ (
      h("button", "nbstream-settings-toggle", {
        type: "button",
        "aria-label": "Settings",
        "aria-expanded": "false",
        "aria-controls": panelId,
      })
    );
    this.toggle.innerHTML = '<span class="nbstream-btn-icon" aria-hidden="true">\u2699</span>Settings';
    this.toggle.title = "Generation settings";
    this.panel = h("div", "nbstream-settings", { id: panelId, role: "group", "aria-label": "Settings" });
    this.panel.hidden = true;
    const grid = h("div", "nbstream-settings-grid");
    this.panel.append(grid);
    this.schema = model.get("settings_schema");
    const settingFields = fieldSpecs(this.schema);
    const specs = chat ? [SYSTEM_FIELD, ...settingFields] : settingFields;
    this.fields = specs.map((spec) => new Field(spec, viewId, grid));
    this.steer = new SteerControl({ model, viewId, on, onModel }); // shown with a direction
    grid.append(this.steer.el);
    this.resetBtn = h("button", "nbstream-settings-reset", { type: "button", "aria-label": "Model defaults" });
    this.resetBtn.textContent = "Model defaults";
    this.resetBtn.title = "Unset every setting: the model's defaults apply";
    const foot = h("div", "nbstream-settings-foot");
    foot.append(this.resetBtn);
    this.panel.append(foot);
    for (const f of this.fields) this.listenField(f, on, onModel);
    this.listenPanel(on, onModel);
    this.placeholders();
    this.update();
  }

  /**
   * A field's listeners: typed (checked at once, saved once typing rests), left or Enter
   * (saved), Esc (the panel closes), and its trait changed by the kernel.
   * @param {Field} f @param {Function} on @param {Function} onModel
   */
  listenField(f, on, onModel) {
    f.input.value = formatField(f.spec, this.model.get(f.spec.name));
    const changed = () => {
      f.dirty = true;
      this.check(f);
      if (f.timer) clearTimeout(f.timer);
      f.timer = this.later(() => {
        f.timer = null;
        this.save(f);
      }, SAVE_DEBOUNCE_MS);
    };
    on(f.input, f.spec.kind === "bool" ? "change" : "input", changed);
    on(f.input, "blur", () => this.save(f));
    on(f.input, "keydown", (/** @type {KeyboardEvent} */ e) => {
      if (e.key === "Enter" && f.input.tagName === "INPUT") this.save(f);
      if (e.key === "Escape") {
        // Esc closes the panel only; the next one stops the run (announce.js, stopOnEscape).
        e.preventDefault();
        e.stopPropagation();
        this.setOpen(false);
        this.toggle.focus();
      }
    });
    onModel(`change:${f.spec.name}`, () => this.fromModel(f));
  }

  /**
   * The panel's own listeners: the kernel's reports and defaults, Model defaults, the
   * toggle, and Esc in the open panel.
   * @param {Function} on @param {Function} onModel
   */
  listenPanel(on, onModel) {
    onModel("change:settings_errors", () => this.reported());
    onModel("change:settings_defaults", () => this.placeholders());
    onModel("change:next_run_samples", () => this.placeholders());
    on(this.resetBtn, "click", () => this.unsetAll());
    on(this.toggle, "click", () => this.setOpen(/** @type {boolean} */ (this.panel.hidden)));
    // Esc with the focus in the open panel (or on its toggle) closes it, and goes no further:
    // the run goes on (the next Esc stops it: announce.js, stopOnEscape).
    for (const where of [this.panel, this.toggle]) {
      on(where, "keydown", (/** @type {KeyboardEvent} */ e) => {
        if (e.key !== "Escape" || e.defaultPrevented || this.panel.hidden) return;
        e.preventDefault();
        e.stopPropagation();
        this.setOpen(false);
        this.toggle.focus();
      });
    }
  }

  /** Python's message per invalid setting (settings_errors). @returns {Record<string, any>} */
  pythonErrors() {
    const e = this.model.get("settings_errors");
    return e && typeof e === "object" ? e : {};
  }

  /**
   * The message next to a field: while what was typed has not been reported on by Python
   * (typed, or sent and Python's word still coming), the browser's own check, an instant
   * hint; after that, Python's (the kernel holds the value and decides).
   * @param {Field} f
   */
  errorOf(f) {
    if (f.dirty || f.edited) return f.local;
    const msg = this.pythonErrors()[f.spec.name];
    return msg ? String(msg) : f.blamed;
  }

  /** The model's context in tokens (settings_defaults.context_length), or null. */
  contextLength() {
    const c = (this.model.get("settings_defaults") || {}).context_length;
    return Number.isSafeInteger(c) && c > 0 ? c : null;
  }

  /**
   * What the field refuses beyond the schema: a max_new_tokens over the model's context
   * could never run (the prompt takes some of it too).
   * @param {Field} f @param {any} value
   */
  limitOf(f, value) {
    const context = this.contextLength();
    if (f.spec.name !== "max_new_tokens" || context === null || typeof value !== "number") return null;
    if (value <= context) return null;
    return `max_new_tokens=${value} is more than the model's whole context (${context} tokens, the prompt included); use less than ${context}`;
  }

  /** @param {Field} f */
  showField(f) {
    const msg = this.errorOf(f);
    if (msg) {
      if (f.errorEl.textContent !== msg) f.errorEl.textContent = msg;
      f.input.setAttribute("aria-invalid", "true");
      f.input.setAttribute("aria-describedby", `${f.errorEl.id} ${f.hintId}`.trim());
    } else {
      if (f.errorEl.textContent) f.errorEl.textContent = "";
      f.input.removeAttribute("aria-invalid");
      if (f.hintId) f.input.setAttribute("aria-describedby", f.hintId);
      else f.input.removeAttribute("aria-describedby");
    }
    // The system prompt cannot change while the chat answers (Python refuses it).
    if (f.spec.name === "system") f.input.disabled = this.active();
  }

  /** What the next run does, as the kernel says: true samples, false greedy, null unknown. */
  nextRunSamples() {
    const v = this.model.get("next_run_samples");
    return typeof v === "boolean" ? v : null;
  }

  /** Each field's placeholder: the model's default, or what the next run does instead. */
  placeholders() {
    const d = this.model.get("settings_defaults") || {};
    const samples = this.nextRunSamples();
    for (const f of this.fields) placeholder(f, d[settingOf(this.schema, f.spec.name)], samples);
  }

  update() {
    let invalid = false;
    for (const f of this.fields) {
      this.showField(f);
      if (this.errorOf(f)) invalid = true;
    }
    this.toggle.setAttribute("data-invalid", String(invalid));
  }

  /** Put the trait's value in the field (unless the user is typing in it). @param {Field} f */
  fromModel(f) {
    if (f.dirty || f.saving) return; // its own save: the text stays as typed
    const text = formatField(f.spec, this.model.get(f.spec.name));
    if (f.input.value !== text) f.input.value = text;
    f.local = null;
    f.edited = false;
    this.showField(f);
  }

  /** @param {Field} f */
  save(f) {
    if (f.timer) {
      clearTimeout(f.timer);
      f.timer = null;
    }
    if (!f.dirty) return;
    f.dirty = false;
    // A refused value is sent too: the kernel holds what the field shows and reports it.
    const value = sentValue(f.spec, f.input.value);
    const current = this.model.get(f.spec.name);
    if (JSON.stringify(current ?? null) === JSON.stringify(value)) return;
    f.edited = true;
    f.saving = true;
    try {
      this.model.set(f.spec.name, value);
    } finally {
      f.saving = false;
    }
    this.model.save_changes();
  }

  /** @param {Field} f */
  check(f) {
    const parsed = parseField(f.spec, f.input.value);
    f.local = "error" in parsed ? parsed.error : this.limitOf(f, parsed.value);
    f.unsure = nearInexactBound(this.schema?.[f.spec.name], sentValue(f.spec, f.input.value));
    f.blamed = null;
    this.update();
  }

  /** The kernel reported on the settings (settings_errors). */
  reported() {
    const errors = this.pythonErrors();
    for (const f of this.fields) {
      if (f.dirty) continue;
      // A report the kernel made before this field's value reached it (after another
      // field's) can still hold the old verdict; the browser's check and the kernel's agree
      // on what is valid (one schema), so wait for a report that agrees, then show it.
      if (f.edited && !f.unsure && Boolean(errors[f.spec.name]) !== Boolean(f.local)) continue;
      f.edited = false;
    }
    this.update();
  }

  /** Model defaults: every field unset (the system prompt too, unless the chat answers). */
  unsetAll() {
    for (const f of this.fields) {
      if (f.spec.name === "system" && f.input.disabled) continue;
      f.input.value = "";
      f.dirty = true;
      f.local = null;
      this.save(f);
    }
    this.steer.unset();
    this.update();
  }

  /**
   * A Run refused because of a setting (input_error): the field that caused it shows the
   * message, and the panel opens on it. Only max_new_tokens over what the context leaves
   * is blamed on a field (the prompt alone fitting the context); null clears it.
   * @param {string | null} message
   * @returns {boolean} whether a field shows the message
   */
  blame(message) {
    const f = this.fields.find((x) => x.spec.name === "max_new_tokens");
    const over = message ? contextOverflow(message) : null;
    const take = !!f && !!over && over.prompt < over.context;
    if (f && !take && f.blamed !== null) {
      f.blamed = null;
      this.update();
    } else if (f && take && f.blamed !== message) {
      f.blamed = message;
      this.setOpen(true);
      this.update();
    }
    return take;
  }

  /** @param {boolean} open */
  setOpen(open) {
    this.panel.hidden = !open;
    this.toggle.setAttribute("aria-expanded", String(open));
  }

  /** Save what was typed (before a run). */
  flush() {
    for (const f of this.fields) this.save(f);
  }

  /**
   * The panel's values as the model holds them, to send with a Run / Send message:
   * ipywidgets throttles state updates (held until the kernel answers the previous one)
   * but not custom messages, so a Run clicked right after an edit could reach the kernel
   * before the edit did and run with the old settings.
   */
  values() {
    /** @type {Record<string, unknown>} */
    const out = {};
    for (const f of this.fields) {
      if (f.spec.name === "system") continue; // the chat's own trait, not a setting
      const v = this.model.get(f.spec.name);
      // A trait the kernel's widget does not have (an older kernel) is not sent.
      if (v === undefined) continue;
      out[f.spec.name] = v;
    }
    return { ...out, ...this.steer.values() };
  }

  /** Whether a field is invalid; if so the panel opens on it and Run / Send must not go. */
  blocked() {
    this.flush();
    this.update();
    const bad = this.fields.find((f) => this.errorOf(f));
    if (!bad) return false;
    this.setOpen(true);
    bad.input.focus();
    return true;
  }
}

/**
 * A field's placeholder: its setting's default (`fallback`, from settings_defaults), or
 * what the next run does instead (`samples`: true samples, false greedy, null unknown).
 * @param {Field} f @param {unknown} fallback @param {boolean | null} samples
 */
function placeholder(f, fallback, samples) {
  // A number field is a text <input> (a bool one a <select>).
  const input = /** @type {HTMLInputElement} */ (f.input);
  if (f.spec.name === "alternatives") {
    // Unset: none, or 5 when Probabilities or Alternatives is on (the kernel's choice); short
    // enough for the narrowest column, the whole rule on hover.
    input.placeholder = "auto (5 if shown)";
    input.title = "Unset: none, or 5 while Probabilities or Alternatives is on";
  } else if (samples === false && SAMPLING_PARAMETERS.includes(f.spec.name)) {
    input.placeholder = "not used (greedy)";
  } else if (f.spec.kind === "int" || f.spec.kind === "float") {
    const unset = f.spec.name === "seed" ? "random" : "model default";
    input.placeholder = fallback === undefined || fallback === null ? unset : `${fallback} (model default)`;
  } else if (f.spec.kind === "bool") {
    // Unset, the run's sampling follows the temperature, then the model's default: say
    // what the next run does, never the model's default alone.
    const opt = /** @type {HTMLOptionElement} */ (f.input.firstChild);
    opt.textContent = samples === null ? "Auto (model default)" : `Auto: ${samples ? "samples" : "greedy"}`;
    if (f.hintEl) {
      f.hintEl.textContent = SAMPLING_NOTE[String(samples)];
      f.hintEl.setAttribute("data-samples", String(samples));
    }
  }
}

/**
 * The collapsible settings panel of a view (SettingsPanel), as the view uses it.
 * @param {SettingsPanelOptions} opts
 * @returns {{toggle: HTMLButtonElement, panel: HTMLElement, flush: () => void,
 *            blocked: () => boolean, update: () => void,
 *            values: () => Record<string, unknown>,
 *            blame: (message: string | null) => boolean}}
 */
function settingsPanel(opts) {
  const p = new SettingsPanel(opts);
  return {
    toggle: p.toggle,
    panel: p.panel,
    flush: () => p.flush(),
    blocked: () => p.blocked(),
    update: () => p.update(),
    values: () => p.values(),
    blame: (message) => p.blame(message),
  };
}

/**
 * The prompt view: the exact text the model got for the current / last run, as
 * plain text, with its token count.
 * @param {object} opts
 * @param {import("./model.js").RunModel} opts.model
 * @param {string} opts.viewId
 * @param {Function} opts.on
 * @param {Function} opts.onModel
 * @returns {{toggle: HTMLButtonElement, view: HTMLElement}}
 */
function promptView({ model, viewId, on, onModel }) {
  const id = `nbstream-prompt-view-${viewId}`;
  const toggle = h("button", "nbstream-prompt-toggle", {
    type: "button",
    "aria-label": "Prompt view",
    "aria-pressed": "false",
    "aria-controls": id,
  });
  toggle.textContent = "Prompt";
  toggle.title = "Show the exact text the model gets: its chat template's output, special tokens included";
  const view = h("div", "nbstream-prompt-view", { id, role: "region", "aria-label": "Prompt as the model sees it" });
  view.hidden = true;
  const head = h("div", "nbstream-prompt-view-head");
  const title = h("span", "nbstream-prompt-view-title");
  title.textContent = "Prompt as the model sees it";
  const count = h("span", "nbstream-prompt-tokens");
  head.append(title, count);
  const pre = h("pre", "nbstream-templated", { tabindex: "0", "aria-label": "Templated prompt" });
  view.append(head, pre);

  function update() {
    const text = model.get("prompt_text");
    const n = model.get("prompt_tokens");
    const has = typeof text === "string";
    // A run on a model server: the server applies its own chat template, so the text the
    // model got is not known here (it is not "no run yet").
    const remote = !has && (model.get("run_id") || 0) > 0;
    // textContent, never HTML: the template's tokens (<|im_start|>) are shown as typed.
    const shown = has
      ? text
      : remote
        ? "This run's server applies its own chat template: the exact text the model got is not known here (run.record has the messages sent)."
        : "No run yet: the prompt appears here when a run starts.";
    if (pre.textContent !== shown) pre.textContent = shown;
    pre.setAttribute("data-empty", String(!has));
    const words = typeof n === "number" ? `${n} prompt ${n === 1 ? "token" : "tokens"}` : "";
    if (count.textContent !== words) count.textContent = words;
    if (typeof n === "number") count.setAttribute("data-tokens", String(n));
    else count.removeAttribute("data-tokens");
  }
  on(toggle, "click", () => {
    const open = view.hidden;
    view.hidden = !open;
    toggle.setAttribute("aria-pressed", String(open));
  });
  onModel("change:prompt_text", update);
  onModel("change:prompt_tokens", update);
  onModel("change:run_id", update);
  update();
  return { toggle, view };
}

export { FIELDS, SettingsPanel, fieldSpecs, formatField, parseField, promptView, sentValue, settingsPanel };
