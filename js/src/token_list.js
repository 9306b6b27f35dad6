// nbstream front end: one run's tokens as the token views show them (TokenList): the
// token elements, their shading, titles and marks, the keys that move between them, copying
// their real text, and opening and closing the popover of a step's alternatives
// (popover.js).
//
// Tokens are model output: every piece of text goes into the page with textContent
// (never as HTML), so a token reading `<img src=x onerror=...>` stays text.

import { h } from "./dom.js";
import { isNum, pct } from "./format.js";
import { explainAction, fillPopover, placePopover } from "./popover.js";
import { shade } from "./shading.js";
import { markThinking, thinkingMark } from "./thinking.js";
import { appendPieces, describe, hasId, realText } from "./token_text.js";

let popoverCount = 0;

/**
 * One run's tokens as the view shows them: `span.nbstream-token` elements in
 * `.nbstream-tokens`, appended as `tokens` messages arrive, and the popover of the
 * alternatives at a step.
 */
class TokenList {
  /**
   * @param {number | null} runId the run whose tokens these are
   * @param {{label?: string, changed?: () => void, opened?: () => void,
   *          closeOthers?: (list: TokenList) => void,
   *          branch?: {fill: (list: TokenList, i: number) => void} | null,
   *          explain?: ReturnType<typeof import("./sampling.js").explainPanels> | null,
   *          lens?: ReturnType<typeof import("./lens.js").lensSections> | null}} [opts]
   *   changed: tokens came or went; opened: a popover opened (the view stops following
   *   the end of the output, so that streaming does not scroll it away)
   */
  constructor(runId, opts = {}) {
    this.runId = runId;
    /** @type {any[][]} one entry per token: [id, text, kind, logprob, rank, alts] */
    this.tokens = [];
    this.thinking = 0; // a reasoning model's: how many of the first tokens are its thinking
    this.modes = { tokens: false, probs: false, alts: false };
    this.current = 0; // the token that takes the focus (roving tabindex)
    this.openIndex = -1; // the token whose popover is open, or -1
    this.refocusing = false; // Escape gives the token back its focus: no popover then
    this.changed = opts.changed || (() => {});
    this.closeOthers = opts.closeOthers || (() => {});
    this.opened = opts.opened || (() => {});
    // The popover's "Continue with this token" (branches.js, branchAction), or null.
    this.branch = opts.branch || null;
    // The popover's "How was this picked?": the sampling panel (sampling.js), or null.
    this.explain = opts.explain || null;
    // The popover's "Inside the model" (lens.js), or null.
    this.lens = opts.lens || null;
    this.ac = new AbortController();

    this.el = h("div", "nbstream-tokens-view", {
      // Lumino (JupyterLab) leaves keys pressed in here to this element: the arrow keys
      // move between tokens rather than between cells, Escape closes the popover only.
      "data-lm-suppress-shortcuts": "true",
    });
    this.list = h("div", "nbstream-tokens", {
      role: "group", // a name needs a role (axe: aria-prohibited-attr)
      "aria-label": opts.label || "Tokens",
      "data-boundaries": "false",
      "data-probs": "false",
      "data-alts": "false",
    });
    this.popId = `nbstream-alternatives-${++popoverCount}-${Math.random().toString(36).slice(2, 8)}`;
    this.pop = h("div", "nbstream-alternatives", {
      id: this.popId,
      role: "dialog",
      tabindex: "-1",
      "aria-label": "Alternatives",
    });
    this.pop.hidden = true;
    this.el.append(this.list, this.pop);
    this.listen();
  }

  /** Clicks, focus, keys and copying in the list; a press outside closes the popover. */
  listen() {
    /**
     * A DOM listener removed by dispose().
     * @param {EventTarget} target @param {string} type @param {(e: Event) => void} fn
     * @param {AddEventListenerOptions} [o]
     */
    const on = (target, type, fn, o) => target.addEventListener(type, fn, { ...o, signal: this.ac.signal });
    on(this.list, "click", (e) => {
      const i = this.indexOf(e.target);
      if (i >= 0 && this.modes.alts) this.open(i);
    });
    on(this.list, "focusin", (e) => {
      const i = this.indexOf(e.target);
      if (i < 0 || !this.modes.alts) return;
      this.setCurrent(i);
      if (!this.refocusing) this.open(i);
    });
    on(this.el, "keydown", (e) => this.key(/** @type {KeyboardEvent} */ (e)));
    on(this.el, "focusout", (e) => {
      const to = /** @type {FocusEvent} */ (e).relatedTarget;
      if (to && !this.el.contains(/** @type {Node} */ (to))) this.close();
    });
    on(this.list, "copy", (e) => this.copy(/** @type {ClipboardEvent} */ (e)));
    on(document, "pointerdown", (e) => {
      if (this.openIndex >= 0 && !this.el.contains(/** @type {Node} */ (e.target))) this.close();
    }, { capture: true });
  }

  dispose() {
    // A sampling panel open on this list closes with it (a chat answer regenerated,
    // cleared or switched): it would go on taking replies for tokens no longer shown.
    this.explain?.reset(this);
    this.lens?.reset(this);
    this.ac.abort();
  }

  /** Whether the run's tokens came without probabilities (it ran without capture). */
  get noCapture() {
    return this.tokens.length > 0 && !isNum(this.tokens[0][3]);
  }

  /** @param {EventTarget | null} target @returns {number} */
  indexOf(target) {
    const t = /** @type {Element} */ (target)?.closest?.(".nbstream-token");
    if (!t || !this.list.contains(t)) return -1;
    return Number(t.getAttribute("data-index"));
  }

  /** @param {number} i @returns {HTMLElement | undefined} */
  span(i) {
    return /** @type {HTMLElement | undefined} */ (this.list.children[i]);
  }

  /** Forget the tokens (a new run). @param {number | null} runId */
  reset(runId) {
    this.runId = runId;
    this.tokens = [];
    this.thinking = 0;
    this.current = 0;
    this.close();
    this.explain?.reset(this);
    this.lens?.reset(this);
    this.list.replaceChildren();
    this.changed();
  }

  /**
   * A `tokens` message of this list's run.
   * @param {any} msg
   * @returns {"ok" | "gap"} gap: tokens are missing before these (ask for a sync)
   */
  apply(msg) {
    const offset = Number(msg.offset);
    const toks = Array.isArray(msg.tokens) ? msg.tokens.filter((/** @type {unknown} */ t) => Array.isArray(t)) : [];
    const n = this.tokens.length;
    // Before the tokens are made: they are marked as they are made (thinking.js).
    const before = this.thinking;
    if (offset === 0 || typeof msg.thinking === "number") this.thinking = markThinking(this, msg.thinking, before);
    if (offset === 0) {
      this.replace(toks);
    } else if (Number.isInteger(offset) && offset > 0 && offset <= n) {
      // At the end, or overlapping what we have (a reset's tokens were ahead of the
      // frames): a run's tokens never change, so only what is new is added.
      this.append(toks.slice(n - offset));
    } else {
      return "gap";
    }
    return "ok";
  }

  /** @param {any[][]} toks */
  replace(toks) {
    const open = this.openIndex;
    const hadFocus = this.list.contains(document.activeElement);
    this.tokens = [];
    this.list.replaceChildren();
    this.openIndex = -1;
    if (this.current >= toks.length) this.current = 0;
    this.append(toks);
    // The same step, with what the new tokens say about it (say, its alternatives).
    if (open >= 0 && open < this.tokens.length) {
      if (hadFocus) this.span(open)?.focus({ preventScroll: true });
      this.open(open);
    } else {
      this.pop.hidden = true;
    }
  }

  /** @param {any[][]} toks */
  append(toks) {
    if (!toks.length) return;
    const frag = document.createDocumentFragment();
    for (const t of toks) {
      this.tokens.push(t);
      frag.append(this.make(t, this.tokens.length - 1));
    }
    this.list.append(frag);
    this.changed();
  }

  /** The element of token i. @param {any[]} t @param {number} i */
  make(t, i) {
    const [id, text, kind, logprob, rank] = t;
    const k = kind === "bytes" || kind === "special" ? kind : "text";
    const s = h("span", "nbstream-token", { "data-index": String(i), "data-kind": k });
    if (hasId(id)) s.setAttribute("data-token-id", String(id));
    // t[6]: the run ended at a stop string and this token made it (or came after it):
    // generated, but not part of the answer.
    if (t[6] === true) s.setAttribute("data-after-stop", "true");
    thinkingMark(s, i, this.thinking);
    appendPieces(s, text, k);
    if (isNum(logprob)) {
      const p = Math.exp(logprob);
      const { bg, fg } = shade(p);
      s.style.setProperty("--nbs-tok-bg", bg);
      s.style.setProperty("--nbs-tok-fg", fg);
      s.setAttribute("data-p", p.toFixed(4));
    }
    if (isNum(rank)) {
      s.setAttribute("data-rank", String(rank));
      if (rank > 1) {
        // Drawn by CSS ("#" attr(data-rank)): the token's textContent stays its text.
        s.append(h("sup", "nbstream-token-rank", { "data-rank": String(rank), "aria-hidden": "true" }));
      }
    }
    this.dress(s, i);
    return s;
  }

  /** Title and focusability of token element s, for the current modes. @param {HTMLElement} s @param {number} i */
  dress(s, i) {
    const t = this.tokens[i];
    const [id, text, kind, logprob, rank] = t;
    // A server's token has no id: named by its step.
    let title = `${hasId(id) ? `token ${id}` : `step ${i + 1}`}: ${describe(text, kind)}`;
    if (t[6] === true) title += "\nafter the stop string: not part of the answer";
    if (i < this.thinking) title += "\nthinking: not part of the answer";
    if (this.modes.probs || this.modes.alts) {
      if (isNum(logprob)) {
        title += `\nprobability ${pct(Math.exp(logprob))}`;
        if (isNum(rank)) title += ` \u00b7 rank ${rank}${rank === 1 ? " (the model's favourite)" : ""}`;
      } else {
        title += "\nno probability: this run was made without capturing them";
      }
    }
    s.title = title;
    if (this.modes.alts) {
      s.setAttribute("tabindex", i === this.current ? "0" : "-1");
      s.setAttribute("role", "button");
      s.setAttribute("aria-haspopup", "dialog");
      s.setAttribute("aria-expanded", String(i === this.openIndex));
    } else {
      s.removeAttribute("tabindex");
      s.removeAttribute("role");
      s.removeAttribute("aria-haspopup");
      s.removeAttribute("aria-expanded");
    }
  }

  /** @param {{tokens: boolean, probs: boolean, alts: boolean}} modes */
  setModes(modes) {
    const m = { tokens: !!modes.tokens, probs: !!modes.probs, alts: !!modes.alts };
    const same = m.tokens === this.modes.tokens && m.probs === this.modes.probs && m.alts === this.modes.alts;
    if (same) return;
    const redress = m.probs !== this.modes.probs || m.alts !== this.modes.alts;
    this.modes = m;
    this.list.setAttribute("data-boundaries", String(m.tokens));
    this.list.setAttribute("data-probs", String(m.probs));
    this.list.setAttribute("data-alts", String(m.alts));
    if (!m.alts) this.close();
    if (redress) for (let i = 0; i < this.tokens.length; i++) this.dress(/** @type {HTMLElement} */ (this.span(i)), i);
  }

  /** Move the roving tab stop to token i. @param {number} i */
  setCurrent(i) {
    if (i === this.current) return;
    const old = this.span(this.current);
    if (old && this.modes.alts) old.setAttribute("tabindex", "-1");
    this.current = i;
    const s = this.span(i);
    if (s && this.modes.alts) s.setAttribute("tabindex", "0");
  }

  /** @param {KeyboardEvent} e */
  key(e) {
    if (!this.modes.alts) return;
    if (e.key === "Escape") {
      if (this.openIndex < 0) return;
      const i = this.openIndex;
      this.close();
      if (this.pop.contains(/** @type {Node} */ (e.target))) {
        // Back to the token, its popover left closed (focusin would open it again).
        this.refocusing = true;
        this.span(i)?.focus({ preventScroll: true });
        this.refocusing = false;
      }
      e.preventDefault();
      e.stopPropagation();
      return;
    }
    const i = this.indexOf(e.target);
    if (i < 0) return;
    const last = this.tokens.length - 1;
    let to = -1;
    if (e.key === "ArrowRight" || e.key === "ArrowDown") to = Math.min(last, i + 1);
    else if (e.key === "ArrowLeft" || e.key === "ArrowUp") to = Math.max(0, i - 1);
    else if (e.key === "Home") to = 0;
    else if (e.key === "End") to = last;
    else if (e.key === "Enter" || e.key === " " || (e.key === "i" && this.lens)) {
      e.preventDefault();
      e.stopPropagation();
      this.open(i);
      // i: straight to "Inside the model" (opened, with the focus on its button).
      if (e.key === "i" && this.openIndex === i) this.lens?.focus();
      return;
    } else return;
    e.preventDefault();
    e.stopPropagation();
    this.setCurrent(to);
    this.span(to)?.focus(); // focusin opens its popover
  }

  /** Show the alternatives of token i. @param {number} i */
  open(i) {
    const s = this.span(i);
    if (!s || !this.modes.alts) return;
    this.closeOthers(this);
    if (this.openIndex >= 0 && this.openIndex !== i) {
      const old = this.span(this.openIndex);
      old?.setAttribute("aria-expanded", "false");
      old?.classList.remove("nbstream-token-open");
    }
    this.openIndex = i;
    s.setAttribute("aria-expanded", "true");
    s.setAttribute("aria-controls", this.popId);
    s.classList.add("nbstream-token-open");
    fillPopover(this, i);
    explainAction(this, i);
    this.lens?.fill(this, i);
    this.pop.hidden = false;
    this.opened();
    this.place(s);
  }

  close() {
    if (this.openIndex < 0) {
      this.pop.hidden = true;
      return;
    }
    const s = this.span(this.openIndex);
    if (s) {
      s.setAttribute("aria-expanded", "false");
      s.classList.remove("nbstream-token-open");
    }
    this.openIndex = -1;
    this.pop.hidden = true;
    this.el.style.paddingBottom = "";
  }

  /** Put the popover under token element s, inside the view (popover.js). @param {HTMLElement} s */
  place(s) {
    placePopover(this, s);
  }

  /** Copy the real text of the selected tokens (not the markers, badges or ranks). @param {ClipboardEvent} e */
  copy(e) {
    const sel = document.getSelection();
    if (!sel || sel.rangeCount === 0 || sel.isCollapsed || !e.clipboardData) return;
    const range = sel.getRangeAt(0);
    if (!this.list.contains(range.commonAncestorContainer)) return;
    const picked = [];
    for (let i = 0; i < this.tokens.length; i++) {
      const s = this.span(i);
      if (s && range.intersectsNode(s)) picked.push(this.tokens[i]);
    }
    if (!picked.length) return;
    e.clipboardData.setData("text/plain", realText(picked));
    e.preventDefault();
  }
}

export { TokenList };
