// nbstream — branches of an answer, shared by the StreamWidget and ChatWidget views.
//
// Two pieces: the "Continue with this token" action that the alternatives popover
// (popover.js, for a TokenList) shows on each alternative, and the switcher between the answers of
// one prompt (the original and its branches). The kernel is the source of truth: it says
// which branches exist and which one is shown (`_branches`, `branch_shown`), and why the
// action is not offered (`branch_unavailable`); the page only asks (`branch`,
// `show_branch`). See PROTOCOL.md, "Branches".

import { disconnected, sayNoKernel } from "./connection.js";
import { h } from "./dom.js";
import { ACTIVE } from "./status.js";

/**
 * One branch as the kernel describes it (`_branches`; protocol.d.ts).
 * @typedef {import("./protocol.js").BranchEntry} BranchEntry
 */

/** @typedef {import("./token_list.js").TokenList} TokenList */

/**
 * A token's text quoted so that spaces and line breaks show (' blue', '\n').
 * @param {unknown} text
 */
function quote(text) {
  const s = String(text ?? "")
    .replace(/\\/g, "\\\\")
    .replace(/\n/g, "\\n")
    .replace(/\r/g, "\\r")
    .replace(/\t/g, "\\t");
  return `'${s}'`;
}

/** @param {import("./model.js").RunModel} model @returns {BranchEntry[]} */
function entriesOf(model) {
  const b = model.get("_branches");
  return Array.isArray(b) ? b.filter((e) => e && typeof e === "object") : [];
}

/**
 * Where a branch left its parent, in words: "at token 7: ' red' → ' blue'".
 * @param {BranchEntry} e
 */
function whereWords(e) {
  const from = Number(e.parent) > 0 ? ` (from branch ${e.parent})` : "";
  return `at token ${Number(e.step) + 1}: ${quote(e.parent_text)} \u2192 ${quote(e.text)}${from}`;
}

/**
 * The popover's action: a "Continue" button on each alternative the run did not take, or
 * the reason it is not offered. Given to the view's token lists (tokenViews' `branch`);
 * TokenList calls `fill` after it has drawn the popover of token i.
 * @param {object} o
 * @param {import("./model.js").RunModel} o.model
 * @param {(list: TokenList) => string} [o.only] the view's own reason for this list ("" if
 *   none): a chat branches its last answer only
 * @param {() => void} [o.sent] a branch was asked for (the view moves the focus)
 */
function branchAction(o) {
  return {
    /** @param {TokenList} list @param {number} i */
    fill(list, i) {
      const pop = list.pop;
      pop.classList.remove("nbstream-can-branch");
      const alts = list.tokens[i]?.[5];
      const table = pop.querySelector(".nbstream-alt-table");
      if (!table || !Array.isArray(alts) || alts.length === 0) return;
      const gone = disconnected(list.el);
      const why = gone || String(o.model.get("branch_unavailable") || "") || (o.only ? o.only(list) : "");
      // Room for the Continue column (branches.css): the popover is otherwise narrower.
      pop.classList.toggle("nbstream-can-branch", !why);
      if (gone) {
        sayNoKernel(pop, gone, (note) => table.after(note));
        return;
      }
      if (why) {
        const note = h("div", "nbstream-branch-unavailable", { role: "note" });
        note.textContent = `Continue with another token is not offered: ${why}`;
        table.after(note);
        return;
      }
      const headRow = table.querySelector("thead tr");
      if (headRow) {
        const th = h("th", "nbstream-alt-action", { scope: "col" });
        th.textContent = "Branch";
        headRow.append(th);
      }
      for (const tr of table.querySelectorAll("tbody tr.nbstream-alt")) {
        const td = h("td", "nbstream-alt-action");
        const b = continueButton(o, list, i, Number(tr.getAttribute("data-index")));
        if (b) td.append(b);
        tr.append(td);
      }
    },
  };
}

/**
 * The Continue button of the alternative at `place` in token i's list, or null for the
 * one the run took (or an alternative without an id, on a local model).
 * @param {{model: import("./model.js").RunModel, sent?: () => void}} o @param {TokenList} list @param {number} i
 * @param {number} place
 */
function continueButton(o, list, i, place) {
  const [chosen, , , , rank, alts] = list.tokens[i];
  const a = alts[place];
  const id = Number(a?.[0]);
  // A run on a server has no token ids: an alternative is named by its place in the
  // list, and the chosen one is where its rank says.
  const server = chosen === null || chosen === undefined;
  const other = server
    ? Number.isInteger(place) && !(typeof rank === "number" && place === rank - 1)
    : id !== Number(chosen) && Number.isInteger(id);
  if (!Array.isArray(a) || !other) return null;
  const name = a[2] === "bytes" ? `bytes ${a[1]}` : quote(a[1]);
  const b = h("button", "nbstream-branch-continue", {
    type: "button",
    "aria-label": `Continue with ${name}`,
  });
  b.setAttribute(server ? "data-alternative" : "data-token-id", String(server ? place : id));
  b.textContent = "Continue";
  b.title = `Continue the answer from step ${i + 1} with ${name} instead (a new branch)`;
  b.addEventListener("click", () => {
    if (ACTIVE.has(String(o.model.get("status")))) return;
    // A list with tokens is a run's: its run_id is a number.
    const runId = /** @type {number} */ (list.runId);
    o.model.send(
      server
        ? { type: "branch", run_id: runId, step: i, alternative: place }
        : { type: "branch", run_id: runId, step: i, token: id },
    );
    o.sent?.();
  });
  return b;
}

/**
 * The switcher between the answers of the current prompt: "Original" and one button per
 * branch (where it left its parent), the shown one pressed. Hidden without branches.
 */
class BranchSwitcher {
  /**
   * @param {object} o
   * @param {import("./model.js").RunModel} o.model
   * @param {(name: string, cb: Function) => void} o.onModel
   * @param {string} [o.label]
   */
  constructor(o) {
    this.model = o.model;
    this.el = h("div", "nbstream-branches", {
      role: "group",
      "aria-label": o.label || "Answers of this prompt",
      tabindex: "-1",
    });
    this.title = h("span", "nbstream-branches-title");
    this.title.textContent = "Branches";
    this.list = h("div", "nbstream-branches-list");
    // A model that cannot branch (a remote endpoint) has no popover to say so in: said here
    // while the Alternatives view is on.
    this.note = h("div", "nbstream-branch-unavailable", { role: "note" });
    this.el.append(this.title, this.list);
    this.el.hidden = true;
    /** the index whose button takes the focus once the kernel shows it, or -1 */
    this.focusWanted = -1;
    for (const name of ["_branches", "branch_shown", "status", "branch_unavailable", "can_trace", "show_alternatives"]) {
      o.onModel(`change:${name}`, () => this.update());
    }
    // The kernel refused the Continue or the switch (input_error): nothing to follow.
    o.onModel("change:input_error", () => {
      if (String(this.model.get("input_error") || "")) this.focusWanted = -1;
    });
    this.update();
  }

  /** Draw what the kernel says: the answers, the one shown, whether one is being made. */
  update() {
    const { model } = this;
    const entries = entriesOf(model);
    const shown = Number(model.get("branch_shown")) || 0;
    const busy = ACTIVE.has(String(model.get("status")));
    const noModel = this.sayUnavailable();
    this.title.hidden = this.list.hidden = entries.length === 0;
    this.el.hidden = entries.length === 0 && !noModel;
    this.drawButtons(entries);
    [...this.list.children].forEach((child, k) => {
      const b = /** @type {HTMLButtonElement} */ (child);
      const pressed = String(k === shown);
      if (b.getAttribute("aria-pressed") !== pressed) b.setAttribute("aria-pressed", pressed);
      b.disabled = busy;
      b.title = busy
        ? "An answer is being generated: switch when it has ended"
        : k === shown
          ? "This answer is shown"
          : "Show this answer";
    });
    // Live: the widget's run, or the shown branch's own (the kernel's traits of one update
    // reach the view one change at a time, so the branch may be shown while the widget's
    // status still says the parent's "complete"; its button, focused then, would be
    // disabled under the focus a moment later, which drops it to the page).
    this.followFocus(shown, busy || (shown > 0 && ACTIVE.has(String(entries[shown - 1]?.status))));
  }

  /** The note of a model that cannot branch, while Alternatives is on: whether it shows. */
  sayUnavailable() {
    const { model, note } = this;
    const why = String(model.get("branch_unavailable") || "");
    const noModel = !!why && model.get("can_trace") === false && model.get("show_alternatives") === true;
    if (noModel) {
      const words = `Continue with another token is not offered: ${why}`;
      if (note.textContent !== words) note.textContent = words;
      if (!note.isConnected) this.el.append(note);
    } else if (note.isConnected) note.remove();
    return noModel;
  }

  /** One button per answer, made again only when the answers changed. @param {BranchEntry[]} entries */
  drawButtons(entries) {
    const labels = ["Original", ...entries.map((e, k) => `Branch ${k + 1} ${whereWords(e)}`)];
    const want = labels.join("\u0000");
    if (this.list.dataset.labels === want) return;
    this.list.dataset.labels = want;
    this.list.replaceChildren(
      ...labels.map((label, k) => {
        const b = h("button", "nbstream-branch", { type: "button", "data-index": String(k) });
        if (k === 0) {
          b.textContent = label;
        } else {
          const n = h("span", "nbstream-branch-name");
          n.textContent = `Branch ${k}`;
          const where = h("span", "nbstream-branch-where");
          where.textContent = whereWords(entries[k - 1]);
          b.append(n, " ", where);
        }
        b.addEventListener("click", () => {
          if (/** @type {HTMLButtonElement} */ (b).disabled || b.getAttribute("aria-pressed") === "true") return;
          this.focusWanted = k;
          this.model.send({ type: "show_branch", index: k });
        });
        return b;
      }),
    );
  }

  /**
   * The focus follows a switch or a new branch (the popover button it was on is gone),
   * unless the user has moved it elsewhere meanwhile: the group while the branch streams
   * (`live`), then the answer's button. Still "free" when it sits in this view's answer: a
   * popover that closes gives it back to its token, before or after this runs (which one
   * comes first depends on how the kernel's messages fall), and a token is not a choice.
   * @param {number} shown @param {boolean} live
   */
  followFocus(shown, live) {
    const { el } = this;
    const active = document.activeElement;
    const root = el.closest(".nbstream");
    const inAnswer = !!active && !!root && root.contains(active) && !!active.closest(".nbstream-output");
    const free = active === document.body || el.contains(active) || inAnswer;
    if (this.focusWanted >= 0 && this.focusWanted === shown && el.isConnected && free) {
      if (live) el.focus({ preventScroll: true });
      else {
        /** @type {HTMLElement | undefined} */ (this.list.children[shown])?.focus({ preventScroll: true });
        this.focusWanted = -1;
      }
    }
  }

  /** A branch was asked for: its button takes the focus once it is shown. */
  expectNew() {
    this.focusWanted = entriesOf(this.model).length + 1;
  }
}

/**
 * The switcher between the answers of the current prompt (BranchSwitcher).
 * @param {object} o
 * @param {import("./model.js").RunModel} o.model
 * @param {(name: string, cb: Function) => void} o.onModel
 * @param {string} [o.label]
 */
function branchSwitcher(o) {
  return new BranchSwitcher(o);
}

export { BranchSwitcher, branchAction, branchSwitcher, quote, whereWords };
