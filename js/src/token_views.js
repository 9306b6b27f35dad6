// nbstream front end: the teaching views of a view, shared by the StreamWidget view
// (stream.js) and the ChatWidget view (chat.js): the Tokens / Probabilities / Alternatives
// toggles, the head between the bar and the output (the legend, the notes), and the
// controller that ties them and the view's token lists (token_list.js) into a view
// (tokenViews). The protocol (the `tokens` message, the show_* traits, can_trace) is in
// protocol.d.ts and PROTOCOL.md.

import { h } from "./dom.js";
import { lensSections } from "./lens.js";
import { explainPanels } from "./sampling.js";
import { makeLegend } from "./shading.js";
import { TokenList } from "./token_list.js";
import { makeNote, sayCapture } from "./token_notes.js";
import { appendPieces } from "./token_text.js";

/**
 * The toggles: [trait, button name (its accessible name), what it does].
 * @type {Array<["show_tokens" | "show_probabilities" | "show_alternatives", string, string]>}
 */
const TOGGLES = [
  ["show_tokens", "Tokens", "Show the answer as its real tokens, boundaries visible"],
  [
    "show_probabilities",
    "Probabilities",
    "Shade each token by the probability the model gave it (and show the rank of sampled picks)",
  ],
  [
    "show_alternatives",
    "Alternatives",
    "Click or focus a token to see the model's top candidates at that step",
  ],
];

const RAW_BLOCKED = "The token view is shown: turn Tokens, Probabilities and Alternatives off for the text";

/**
 * The modes the show_* traits ask for.
 * @param {import("./model.js").RunModel} model
 */
function tokenModes(model) {
  const tokens = model.get("show_tokens") === true;
  const probs = model.get("show_probabilities") === true;
  const alts = model.get("show_alternatives") === true;
  return { tokens, probs, alts, any: tokens || probs || alts };
}

/** Whether the widget's model gives token ids and probabilities (absent: assume so). @param {import("./model.js").RunModel} model */
function canTrace(model) {
  return model.get("can_trace") !== false;
}

/**
 * Whether the widget's model gives its logits for the sampling panel: a local model, not a
 * server (absent: as can_trace, from a kernel that did not say).
 * @param {import("./model.js").RunModel} model
 */
function canExplain(model) {
  const v = model.get("can_explain");
  return v === undefined || v === null ? canTrace(model) : v === true;
}

/**
 * The three toggle buttons, in a group for the status bar. A click sets the trait
 * (Python follows, and sends the tokens); the buttons follow the traits.
 * @param {{model: import("./model.js").RunModel, on: Function, onModel: Function, changed: () => void}} opts
 * @returns {{group: HTMLElement, update: () => void}}
 */
function tokenToggles({ model, on, onModel, changed }) {
  const group = h("div", "nbstream-view-toggles", { role: "group", "aria-label": "Token views" });
  const buttons = TOGGLES.map(([trait, name, title]) => {
    const b = h("button", `nbstream-view-toggle nbstream-${trait.replace("show_", "")}-toggle`, {
      type: "button",
      "aria-label": name,
      "aria-pressed": "false",
      "data-trait": trait,
    });
    b.textContent = name;
    b.title = title;
    on(b, "click", () => {
      model.set(trait, model.get(trait) !== true);
      model.save_changes();
    });
    group.append(b);
    return b;
  });
  function update() {
    buttons.forEach((b, i) => {
      const pressed = String(model.get(TOGGLES[i][0]) === true);
      if (b.getAttribute("aria-pressed") !== pressed) b.setAttribute("aria-pressed", pressed);
    });
  }
  for (const [trait] of TOGGLES) {
    onModel(`change:${trait}`, () => {
      update();
      changed();
    });
  }
  onModel("change:can_trace", changed);
  update();
  return { group, update };
}

/**
 * What a view gives its token views.
 * @typedef {object} TokenViewsOptions
 * @property {import("./model.js").RunModel} model
 * @property {import("./view_scope.js").ViewScope} scope
 * @property {HTMLElement} root  carries data-token-view
 * @property {{block: (why: string) => void}} raw  the Raw text toggle: off while tokens are shown
 * @property {() => Iterable<TokenList>} lists  the view's token lists (their modes follow the toggles)
 * @property {() => void} switched  the output switched between tokens and text: show the right one
 * @property {() => void} redraw  schedule a frame
 * @property {() => void} opened  a popover opened: stop following the end of the output
 * @property {string} [viewId]  the view's id: its token popovers offer the sampling panel
 *   ("How was this picked?", sampling.js), whose replies name this view
 * @property {{fill: (list: TokenList, i: number) => void}} [branch]  the popover's "Continue
 *   with this token" (branches.js, branchAction)
 * @property {() => boolean} [running]  for a view of one run: whether it is still going
 * @property {() => boolean} [noCapture]  for a view of one run: whether it ran without
 *   capturing probabilities; the note saying so is in the head, in place of the legend
 * @property {(modes: ReturnType<typeof tokenModes>) => void} [notes]  after the head: the
 *   view's own notes (chat: each answer's "made without probabilities")
 */

/**
 * The token views of one view (StreamWidget or ChatWidget): the toggles for its status bar,
 * the head that goes between the bar and the output (the legend, the remote-model note),
 * the view's token lists made alike, and whether its output shows tokens rather than text
 * (`shown`: the view's frame and outputs ask).
 */
class TokenViews {
  /** @param {TokenViewsOptions} o */
  constructor(o) {
    this.o = o;
    const { model, scope } = o;
    const toggles = tokenToggles({ model, on: scope.on, onModel: scope.onModel, changed: () => this.update() });
    this.group = toggles.group;
    this.head = h("div", "nbstream-token-head");
    this.legend = makeLegend();
    this.remoteNote = makeNote("remote");
    this.captureNote = o.noCapture ? makeNote("capture") : null;
    // The sampling panel of this view ("How was this picked?" in the popover; sampling.js).
    this.explain = o.viewId
      ? explainPanels({ model, scope, viewId: o.viewId, pieces: appendPieces, local: () => canExplain(model) })
      : null;
    // The popover's "Inside the model" of this view (lens.js).
    this.lens = o.viewId ? lensSections({ model, scope, viewId: o.viewId, root: o.root }) : null;
    this.tokensShown = false;
  }

  /** Whether the output shows tokens rather than text. */
  get shown() {
    return this.tokensShown;
  }

  /** The head (and the view's notes), after tokens came or a mode changed. */
  refresh() {
    const { model } = this.o;
    const modes = tokenModes(model);
    const local = canTrace(model);
    const noCapture = !!this.captureNote && !!this.o.noCapture?.();
    /** @type {HTMLElement[]} */
    const want = [];
    if (modes.any && !local) want.push(this.remoteNote);
    if (this.captureNote && local && (modes.probs || modes.alts) && noCapture) {
      sayCapture(this.captureNote, !!this.o.running?.());
      want.push(this.captureNote);
    }
    if (local && modes.probs && !noCapture) want.push(this.legend);
    const have = [...this.head.children];
    if (have.length !== want.length || have.some((e, k) => e !== want[k])) this.head.replaceChildren(...want);
    this.head.hidden = want.length === 0;
    this.o.notes?.(modes);
  }

  /** The toggles or can_trace changed: modes of every list, tokens or text, the head. */
  update() {
    const { o } = this;
    const modes = tokenModes(o.model);
    const was = this.tokensShown;
    this.tokensShown = modes.any && canTrace(o.model);
    for (const t of o.lists()) t.setModes(modes);
    o.root.setAttribute("data-token-view", String(this.tokensShown));
    o.raw.block(this.tokensShown ? RAW_BLOCKED : "");
    if (was !== this.tokensShown) {
      o.switched();
      o.redraw(); // the Markdown catches up with text that came while tokens were shown
    }
    this.refresh();
  }

  /**
   * A token list of run `runId`, in the view's modes, telling the view when tokens come.
   * @param {number | null} runId
   * @param {(list: TokenList) => void} [closeOthers] a view of several lists: one popover open
   */
  list(runId, closeOthers) {
    const t = new TokenList(runId, {
      label: "Answer tokens",
      changed: () => {
        this.refresh();
        this.o.redraw();
      },
      opened: this.o.opened,
      closeOthers,
      branch: this.o.branch,
      explain: this.explain,
      lens: this.lens,
    });
    t.setModes(tokenModes(this.o.model));
    return t;
  }
}

/**
 * The token views of one view (TokenViews).
 * @param {TokenViewsOptions} o
 */
function tokenViews(o) {
  return new TokenViews(o);
}

export { tokenViews };
