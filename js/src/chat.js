// nbstream — browser front end of `nbstream.widgets.chat.ChatWidget` (an anywidget).
//
// Built by js/build.mjs into nbstream/static/chat.js (ESM, minified, with
// markdown-it and DOMPurify bundled). The rendering (markdown.js, incremental.js),
// the view's lifecycle, run-text protocol, badge, metrics line and common chrome
// (common.js) and the token views (tokens.js) are the StreamWidget's (stream.js).
// What is here is the chat's own: the transcript, one output and token list per
// answer, the composer, editing, Keep partial and Regenerate.
//
// ---------------------------------------------------------------------------
// Synced traits. Mirror of the Python class `ChatWidget` in nbstream/widgets/chat.py (the traits
// of its base, `RunWidget` in nbstream/widgets/base.py, are RunWidgetTraits in stream.js):
// tests/test_protocol.py compares them both ways. The protocol as a whole is written down
// in PROTOCOL.md.
// ---------------------------------------------------------------------------

/**
 * @typedef {"idle" | "queued" | "running" | "complete" | "failed" | "cancelled"} Status
 */

/**
 * One message of the transcript (`ChatWidget._messages`). Set by Python when a
 * turn starts and when it ends, never per frame: the answer being generated
 * has `content` "" and its text comes as deltas of the current run.
 * @typedef {object} Message
 * @property {"user" | "assistant"} role
 * @property {string} content
 * @property {number} turn            index of the turn (a user message and its answer)
 * @property {boolean} in_history     false: the turn ended out of the conversation (stopped or
 *   failed, not kept); true otherwise, also while its answer is being generated
 * @property {Status} [status]        assistant: the answer's end state (or its state when it started)
 * @property {number | null} [run_id] assistant: the run that produced it (null: seeded from Python)
 * @property {boolean} [kept]         assistant: a partial answer the user kept in the history
 * @property {{type: string, message: string} | null} [error] assistant: why it failed
 * @property {string | null} [finish_reason] assistant: why its run ended ("eos", "length",
 *   "stop", "cancelled", "error", "timeout"; null while it runs and when seeded from Python);
 *   "length" on a complete answer: cut off at max_new_tokens
 * @property {import("./thinking.js").ThinkingState} [thinking] assistant: a reasoning
 *   model's thinking, once the answer ended (absent: it did not think; the live answer's
 *   comes as `thinking` messages)
 */

/**
 * The ChatWidget's own synced traits. With RunWidget's (status and metrics of the current,
 * newest run; run_id also incremented when the chat is cleared; the settings, the token
 * views' toggles: with a token view on, each assistant message that came from a run shows
 * its tokens).
 * @typedef {object} ChatWidgetOwnTraits
 * @property {Message[]} _messages    the transcript (Python → JS)
 * @property {string | null} system   the system message (two-way, the settings panel)
 */

/**
 * The synced traits of `ChatWidget`.
 * @typedef {import("./stream.js").RunWidgetTraits & import("./stream.js").BranchTraits & ChatWidgetOwnTraits} ChatWidgetTraits
 */

/**
 * Custom messages, JS → Python (`send`, `edit_last` and `regenerate` carry the settings
 * panel's values, as the StreamWidget's `run` does; `sync` and `removed` are the StreamWidget's).
 * @typedef {{type: "send", text: string, settings: Record<string, unknown>}
 *   | {type: "edit_last", text: string, settings: Record<string, unknown>}
 *   | {type: "regenerate", settings: Record<string, unknown>}
 *   | {type: "keep", turn: number}
 *   | {type: "clear"}
 *   | {type: "branch", run_id: number, step: number, token: number}
 *   | {type: "branch", run_id: number, step: number, alternative: number}
 *   | {type: "show_branch", index: number}
 *   | {type: "stop"}
 *   | {type: "distribution", view: string, request: number, run_id: number, step: number,
 *      temperature?: number, top_k?: number, top_p?: number}
 *   | {type: "sync", view: string, page: string}
 *   | {type: "removed", view: string, page: string}} OutgoingMessage
 * Python → JS: `delta` and `reset` of the current run, as for the StreamWidget, and
 * `tokens` of any turn's run (by its run_id; see TokensMessage in stream.js).
 */

import {
  ACTIVE,
  LiveText,
  STATUSES,
  VERSION,
  copyCode,
  follower,
  h,
  iconButton,
  inputErrorView,
  isCut,
  logFrame,
  makeBadge,
  markCut,
  markOutput,
  modelStatus,
  copyAnswer,
  statusBar,
  newViewId,
  onRunMessages,
  onSubmitKey,
  outputArea,
  promptBox,
  rawToggle,
  setBadge,
  showMetrics,
  stopNotice,
  swapButtons,
  viewScope,
  watchConnection,
  watchRemoval,
} from "./common.js";
import { announcer, runAnnouncement, stopOnEscape } from "./announce.js";
import { branchAction, branchSwitcher } from "./branches.js";
import { TextRenderer } from "./incremental.js";
import { promptView, settingsPanel } from "./settings_panel.js";
import { LiveThinking, ThinkingBox } from "./thinking.js";
import { makeNote, sayCapture, tokenViews } from "./tokens.js";

/** @typedef {import("./incremental.js").FrameStats} FrameStats */
/** @typedef {import("./stream.js").TokensMessage} TokensMessage */

/**
 * What the view keeps per message element.
 * @typedef {object} Entry
 * @property {string} key
 * @property {Message} msg
 * @property {HTMLElement} el
 * @property {HTMLElement} who              "You" / "Assistant"
 * @property {HTMLElement | null} text       user: the message's text
 * @property {HTMLElement | null} output   assistant: the output area
 * @property {TextRenderer | null} renderer
 * @property {string} shown                text in the renderer
 * @property {boolean} shownActive         rendered as streaming
 * @property {HTMLElement} partialLabel
 * @property {HTMLElement} errorEl
 * @property {HTMLElement} cutEl           assistant: "stopped at max_new_tokens"
 * @property {HTMLElement} actions
 * @property {HTMLElement} note             assistant: "made without probabilities"
 * @property {ThinkingBox | null} thinking  assistant: its Thinking section (thinking.js)
 */

/** Beside Regenerate when the next run is greedy (next_run_samples false). */
const GREEDY_NOTE = "Greedy decoding: Regenerate gives the same answer again. Set a temperature in Settings to sample.";

/** @param {Message} m */
function keyOf(m) {
  return `${m.turn}:${m.role}:${m.run_id ?? "-"}`;
}

/**
 * @param {{model: any, el: HTMLElement}} ctx
 * @returns {() => void} cleanup
 */
function render({ model, el }) {
  const viewId = newViewId();
  const scope = viewScope(model);
  const { on, onModel, later } = scope;
  const status = () => modelStatus(model);

  // ---- DOM ---------------------------------------------------------------
  const root = h("div", "nbstream nbstream-chat", {
    "data-status": "idle",
    "data-version": VERSION,
  });

  const badge = makeBadge();
  const metricsEl = h("span", "nbstream-metrics");
  const raw = rawToggle(scope, "Show the answers' raw text instead of rendered Markdown", () => {
    for (const e of entries) showOutput(e);
    follow.stick();
  });
  const clearBtn = h("button", "nbstream-clear", { type: "button", "aria-label": "Clear chat" });
  clearBtn.textContent = "Clear chat";
  clearBtn.title = "Stop any answer and start the conversation afresh (asks first)";
  // Clearing cannot be undone (the kernel forgets the turns): it is asked for twice, in
  // the page (no window.confirm: a modal the notebook's keyboard handling does not expect).
  const confirmClear = h("div", "nbstream-clear-confirm", {
    role: "group",
    "aria-label": "Clear the conversation?",
  });
  const confirmText = h("span", "nbstream-clear-question");
  confirmText.textContent = "Clear the whole conversation? It cannot be undone.";
  const clearYes = h("button", "nbstream-clear-yes", { type: "button", "aria-label": "Yes, clear" });
  clearYes.textContent = "Yes, clear";
  const clearNo = h("button", "nbstream-clear-no", { type: "button", "aria-label": "Keep it" });
  clearNo.textContent = "Keep it";
  confirmClear.append(confirmText, clearYes, clearNo);
  const settings = settingsPanel({
    model,
    viewId,
    chat: true,
    on,
    onModel,
    later,
    active: () => ACTIVE.has(status()),
  });
  const templated = promptView({ model, viewId, on, onModel });
  // The token views: toggles in the bar, the legend (one for the conversation) and the
  // remote-model note above the messages; each answer says itself when it ran without
  // probabilities.
  const tv = tokenViews({
    model,
    scope,
    viewId, // the sampling panel's replies name this view
    root,
    raw,
    lists: () => tokenLists.values(),
    switched: () => {
      for (const e of entries) showOutput(e);
    },
    redraw: () => schedule(),
    opened: () => {
      follow.on = false;
    },
    notes: updateNotes,
    branch: branchAction({ model, only: onlyLastAnswer, sent: () => switcher.expectNew() }),
  });
  // The last answer's variants (the original and its branches): a switcher in its bubble.
  const switcher = branchSwitcher({ model, onModel, label: "Answers to the last message" });
  const { bar } = statusBar([badge, metricsEl], [raw.button, tv.group, templated.toggle, settings.toggle, clearBtn]);

  // A named group (a name needs a role); focusable so that the keyboard can scroll it.
  const list = h("div", "nbstream-messages", { role: "group", "aria-label": "Conversation", tabindex: "0" });

  const message = promptBox("nbstream-prompt", "Message", 2, "Message the model… (Shift+Enter to send)");
  const sendBtn = iconButton("nbstream-run nbstream-send", "Send", "▶", "Send (Shift+Enter)");
  const stopBtn = iconButton("nbstream-stop", "Stop", "■");
  const actions = h("div", "nbstream-actions");
  actions.append(sendBtn, stopBtn);
  const promptRow = h("div", "nbstream-prompt-row");
  promptRow.append(message, actions);
  const editNote = h("div", "nbstream-edit-note");
  const editText = h("span");
  editText.textContent = "Editing your last message: Resend replaces it and its answer.";
  const cancelEditBtn = h("button", "nbstream-cancel-edit", {
    type: "button",
    "aria-label": "Cancel edit",
  });
  cancelEditBtn.textContent = "Cancel edit";
  editNote.append(editText, cancelEditBtn);
  const updateInputError = inputErrorView(model, viewId, message, promptRow, (m) => settings.blame(m));
  const stopWaiting = stopNotice(scope, promptRow, () => ACTIVE.has(status()));

  root.append(bar, settings.panel, templated.view, tv.head, list, promptRow);
  el.append(root);
  // What a screen reader hears: each answer's state changes once, its end once (announce.js).
  const announce = announcer(root, scope);
  const stateKey = () => `${Number(model.get("run_id")) || 0}:${status()}`;
  announce.seen(stateKey());
  announce.ran(Number(model.get("run_id")) || 0, status());
  // A restarted kernel: show the chat disconnected, its controls off (common.js).
  watchConnection(scope, model, root);

  // ---- view state ----------------------------------------------------------
  /** @type {Entry[]} */
  let entries = [];
  const follow = follower(scope, list);
  let editing = false;
  /** @type {string | null} text this view sent, cleared from the box once its run starts */
  let pending = null;
  /** @type {Map<number, import("./tokens.js").TokenList>} each run's tokens, by run_id */
  const tokenLists = new Map();
  scope.defer(() => {
    for (const t of tokenLists.values()) t.dispose();
    tokenLists.clear();
  });

  const live = new LiveText(Number(model.get("run_id")) || 0, viewId, (m) => model.send(m), {
    clear: () => schedule(),
    grew: () => schedule(),
  });

  // The streaming answer's thinking (an ended answer's is in its message).
  const liveThinking = new LiveThinking(Number(model.get("run_id")) || 0, viewId, (m) => model.send(m), () => {
    const i = entries.length - 1;
    if (i >= 0) updateThinking(entries[i], i);
  });

  /**
   * An answer's Thinking section: from its message once it ended, else (the answer being
   * generated) from the `thinking` messages; hidden while its tokens show it.
   * @param {Entry} e @param {number} i
   */
  function updateThinking(e, i) {
    if (!e.thinking) return;
    const m = e.msg;
    const t = m.thinking ?? (isLive(e, i) && liveThinking.runId === m.run_id ? liveThinking.state() : null);
    e.thinking.suppressed = tv.shown && !!listOf(e);
    e.thinking.show(t, statusOf(e, i), textOf(e, i).length > 0);
  }

  /** @returns {Message[]} */
  function messages() {
    const m = model.get("_messages");
    return Array.isArray(m) ? m : [];
  }

  /**
   * Whether entry i is the answer being streamed (the current run's, the newest).
   * @param {Entry} e @param {number} i
   */
  function isLive(e, i) {
    const rid = Number(model.get("run_id")) || 0;
    return e.msg.role === "assistant" && e.msg.run_id === rid && i === entries.length - 1;
  }

  /** The answer's state: the current run's for the live one, else its own. @param {Entry} e @param {number} i */
  function statusOf(e, i) {
    if (isLive(e, i)) return status();
    const s = String(e.msg.status ?? "complete");
    return STATUSES.includes(s) ? s : "complete";
  }

  /**
   * The text an answer shows: what streamed so far while it is live, its content after.
   * @param {Entry} e @param {number} i
   */
  function textOf(e, i) {
    if (isLive(e, i) && ACTIVE.has(status())) {
      return live.runId === e.msg.run_id ? live.text : "";
    }
    return String(e.msg.content ?? "");
  }

  // ---- messages ------------------------------------------------------------
  // An element is made once per key (turn, role, run) and reused while its message stays;
  // everything it shows from the message (text, role, state, marks) is written by
  // updateEntry at every change of `_messages`: an edited last message, or a history set
  // from code, keeps the keys of the messages it replaces.
  /** @param {Message} m @returns {Entry} */
  function makeEntry(m) {
    const key = keyOf(m);
    const elm = h("div", "nbstream-message");
    const who = h("div", "nbstream-message-role");
    elm.append(who);
    /** @type {Entry} */
    const e = {
      key,
      msg: m,
      el: elm,
      who,
      text: null,
      output: null,
      renderer: null,
      shown: "",
      shownActive: false,
      partialLabel: h("div", "nbstream-partial-label"),
      errorEl: h("div", "nbstream-error"), // no role=alert: the announcer says it (announce.js)
      cutEl: h("div", "nbstream-cut"),
      actions: h("div", "nbstream-message-actions"),
      note: makeNote("capture"),
      thinking: null,
    };
    if (m.role === "user") {
      e.text = h("div", "nbstream-message-text");
      elm.append(e.text);
    } else {
      const output = outputArea("Answer");
      const rendered = h("div", "nbstream-rendered");
      const rawPre = h("pre", "nbstream-raw");
      e.output = output;
      e.renderer = new TextRenderer(rendered, rawPre);
      // A reasoning model's thinking: its own section above the answer.
      e.thinking = new ThinkingBox();
      elm.append(e.thinking.el, output);
      showOutput(e);
    }
    elm.append(e.actions);
    return e;
  }

  // ---- token views ---------------------------------------------------------------
  /**
   * The tokens of run `rid` (made on first use: its tokens may come before its message).
   * @param {number} rid
   */
  function tokensOf(rid) {
    let t = tokenLists.get(rid);
    if (!t) {
      t = tv.list(rid, (keep) => {
        for (const other of tokenLists.values()) if (other !== keep) other.close();
      });
      tokenLists.set(rid, t);
    }
    return t;
  }

  /** The token list an answer shows, or null (no run made it: seeded from Python). @param {Entry} e */
  function listOf(e) {
    const rid = e.msg.run_id;
    return e.msg.role === "assistant" && typeof rid === "number" ? tokensOf(rid) : null;
  }

  /** What an answer's output shows: its tokens, its raw text or its rendered Markdown. @param {Entry} e */
  function showOutput(e) {
    if (!e.output || !e.renderer) return;
    const tl = tv.shown ? listOf(e) : null;
    const want = tl ? tl.el : raw.raw ? e.renderer.rawPre : e.renderer.rendered;
    if (e.output.firstChild !== want || e.output.childNodes.length !== 1) e.output.replaceChildren(want);
    const i = entries.indexOf(e);
    if (i >= 0) updateThinking(e, i); // the token view shows the thinking, or the section does
  }

  /**
   * Each answer's "made without probabilities" note (after the token views' head).
   * @param {{probs: boolean, alts: boolean}} modes
   */
  function updateNotes(modes) {
    for (const e of entries) {
      if (!e.output) continue;
      const tl = tv.shown ? listOf(e) : null;
      const show = !!tl && (modes.probs || modes.alts) && tl.noCapture;
      if (show) sayCapture(e.note, isLive(e, entries.indexOf(e)) && ACTIVE.has(status()));
      if (show && !e.note.isConnected) e.output.before(e.note);
      else if (!show && e.note.isConnected) e.note.remove();
    }
  }

  /** A `tokens` message: for the turn whose run it is. @param {TokensMessage} msg */
  function onTokens(msg) {
    const rid = Number(msg.run_id);
    if (!Number.isInteger(rid)) return;
    if (tokensOf(rid).apply(msg) === "gap") live.requestSync();
  }

  /**
   * The popover's "Continue" is for the last answer only (ChatWidget.branch): the reason
   * said in the popover of an earlier one. @param {import("./tokens.js").TokenList} tl
   */
  function onlyLastAnswer(tl) {
    const last = messages()[messages().length - 1];
    return last?.role === "assistant" && last.run_id === tl.runId
      ? ""
      : "only the last answer can be continued from another token.";
  }

  /**
   * The branch switcher goes in the last answer's bubble, above the answer and its Thinking
   * section, as in the StreamWidget: it says which answer (and whose thinking) is shown.
   */
  function placeSwitcher() {
    const last = entries[entries.length - 1];
    const answer = last?.msg.role === "assistant" ? last : null;
    const first = answer ? (answer.thinking?.el ?? answer.output) : null;
    if (first && switcher.el.nextSibling !== first) {
      const focused = switcher.el.contains(document.activeElement);
      first.before(switcher.el);
      switcher.update();
      if (focused) switcher.el.focus({ preventScroll: true });
    } else if (!first) switcher.el.remove();
  }

  /** Drop the token lists of runs gone from the transcript (cleared, regenerated). */
  function pruneTokens() {
    const keep = new Set(messages().map((m) => m.run_id));
    const current = Number(model.get("run_id")) || 0;
    for (const [rid, t] of tokenLists) {
      if (!keep.has(rid) && rid < current) {
        t.dispose();
        tokenLists.delete(rid);
      }
    }
  }

  /** Match the elements to the transcript (new ones made, gone ones removed, order kept). */
  function syncEntries() {
    const byKey = new Map(entries.map((e) => [e.key, e]));
    entries = messages().map((m) => {
      const e = byKey.get(keyOf(m)) || makeEntry(m);
      e.msg = m;
      return e;
    });
    pruneTokens();
    entries.forEach((e, i) => {
      if (list.children[i] !== e.el) list.insertBefore(e.el, list.children[i] || null);
    });
    placeSwitcher();
    while (list.children.length > entries.length) list.lastElementChild?.remove();
    tv.refresh();
    updateChrome();
    schedule();
  }

  /**
   * A message's attributes, labels and buttons.
   * @param {Entry} e @param {number} i @param {boolean} active a run is queued or running
   */
  function updateEntry(e, i, active) {
    const m = e.msg;
    if (e.el.getAttribute("data-role") !== m.role) e.el.setAttribute("data-role", m.role);
    const who = m.role === "user" ? "You" : "Assistant";
    if (e.who.textContent !== who) e.who.textContent = who;
    e.el.setAttribute("data-in-history", String(!!m.in_history));
    const buttons = [];
    const lastTurn = entries.length ? entries[entries.length - 1].msg.turn : -1;
    if (m.role === "user") {
      const content = String(m.content ?? "");
      if (e.text && e.text.textContent !== content) e.text.textContent = content;
      if (m.turn === lastTurn && !active) buttons.push(["Edit", "edit", "Edit this message and send it again"]);
    } else {
      const s = statusOf(e, i);
      e.el.setAttribute("data-status", s);
      const text = textOf(e, i);
      const output = /** @type {HTMLElement} */ (e.output);
      const error = () => (isLive(e, i) ? model.get("error_info") : m.error);
      const kept = m.kept ? " (kept in the conversation)" : "";
      markOutput({ output, partialLabel: e.partialLabel, errorEl: e.errorEl }, s, text.length > 0, error, kept);
      // A complete answer that reached max_new_tokens: a normal end, said in words.
      markCut(output, e.cutEl, isCut(s, m));
      updateThinking(e, i);
      if (!active && text && (s === "cancelled" || s === "failed") && !m.kept) {
        buttons.push(["Keep partial", "keep", "Keep this partial answer in the conversation"]);
      }
      if (!active && i === entries.length - 1) {
        buttons.push(["Regenerate", "regenerate", "Answer the last message again"]);
      }
      if (text && !(isLive(e, i) && active)) {
        buttons.push(["Copy answer", "copy-answer", "Copy this answer's text"]);
      }
    }
    // A greedy next run gives the same answer word for word: said where Regenerate is.
    const greedy = buttons.some((b) => b[1] === "regenerate") && model.get("next_run_samples") === false;
    const want = buttons.map((b) => b[1]).join(",") + (greedy ? ",greedy" : "");
    if (e.actions.dataset.buttons !== want) {
      e.actions.dataset.buttons = want;
      const noteId = `nbstream-greedy-${viewId}-${i}`;
      // A focused button that goes (Regenerate, Keep partial once a run starts) would drop
      // the focus to the page body: it moves to what is live now.
      const hadFocus = e.actions.contains(document.activeElement);
      e.actions.replaceChildren(
        ...buttons.map(([label, action, title]) => {
          const b = h("button", `nbstream-${action}`, {
            type: "button",
            "aria-label": label,
            "data-action": action,
          });
          b.textContent = label;
          b.title = title;
          if (action === "regenerate" && greedy) b.setAttribute("aria-describedby", noteId);
          return b;
        }),
      );
      if (greedy) {
        const note = h("span", "nbstream-greedy-note", { id: noteId });
        note.textContent = GREEDY_NOTE;
        e.actions.append(note);
      }
      if (hadFocus) {
        const same = /** @type {HTMLElement | null} */ (e.actions.querySelector("button"));
        (active ? stopBtn : (same ?? message)).focus({ preventScroll: true });
      }
    }
  }

  // ---- rendering (at most once per animation frame) ------------------------
  const frames = scope.frames(() => {
    const t0 = performance.now();
    /** @type {FrameStats} */
    const st = { parsed: 0, nodes: 0 };
    let chars = 0;
    entries.forEach((e, i) => {
      if (!e.renderer) return;
      // An answer showing its tokens: its Markdown is brought up to date when shown again.
      if (tv.shown && listOf(e)) return;
      const text = textOf(e, i);
      const active = isLive(e, i) && ACTIVE.has(status());
      if (text === e.shown && active === e.shownActive) return;
      if (!text.startsWith(e.shown)) e.renderer.clear();
      e.renderer.update(text, active, st);
      // The streaming caret belongs to the answer being generated only.
      if (!active) e.renderer.open.el.classList.remove("nbstream-tail");
      e.shown = text;
      e.shownActive = active;
      chars += text.length;
    });
    const t1 = performance.now();
    follow.stick();
    logFrame(t0, t1, chars, st);
  });
  const schedule = frames.schedule;

  // ---- chrome ----------------------------------------------------------------
  function updateChrome() {
    const s = status();
    root.setAttribute("data-status", s);
    // The badge is the current run's (the newest answer's): its metrics say why it ended.
    setBadge(badge, s, isCut(s, model.get("metrics")));
    const active = ACTIVE.has(s);
    swapButtons(sendBtn, stopBtn, active);
    stopWaiting.update();
    const hadFocus = document.activeElement;
    clearBtn.disabled = entries.length === 0;
    if (clearBtn.disabled) {
      // Cleared (here, in another view or from code): nothing left to confirm.
      const inside = hadFocus === clearBtn || confirmClear.contains(hadFocus);
      setConfirming(false);
      if (inside) message.focus({ preventScroll: true });
    }
    settings.update();
    entries.forEach((e, i) => {
      updateEntry(e, i, active);
    });
    if (editing && (active || !entries.some((e) => e.msg.role === "user"))) setEditing(false);
    updateInputError();
    updateMetrics();
  }

  function updateMetrics() {
    showMetrics(metricsEl, status(), model.get("metrics") || {}, live.liveTokens, live.liveElapsed);
  }

  /** @param {boolean} value */
  function setEditing(value) {
    editing = value;
    // The button's word (iconButton: the glyph, then the word) and its accessible name.
    const word = value ? "Resend" : "Send";
    /** @type {Text} */ (sendBtn.lastChild).textContent = word;
    sendBtn.setAttribute("aria-label", word);
    sendBtn.title = `${word} (Shift+Enter)`;
    if (value && !editNote.isConnected) promptRow.before(editNote);
    else if (!value && editNote.isConnected) editNote.remove();
  }

  // ---- protocol --------------------------------------------------------------
  onRunMessages(scope, live, {
    chrome: updateChrome,
    metrics: updateMetrics,
    redraw: schedule,
    tokens: onTokens,
    thinking: liveThinking,
  });
  // The answer's text still arriving after a Stop: the kernel has not acted on it (yet).
  onModel("msg:custom", (/** @type {any} */ msg) => {
    if (msg?.type === "delta" && Number(msg.run_id) === live.runId) stopWaiting.progress();
  });
  onModel("change:next_run_samples", updateChrome); // the note beside Regenerate
  onModel("change:run_id", () => {
    stopWaiting.hide();
    // A new answer streams in below: no popover of an older one stays open over it.
    for (const t of tokenLists.values()) {
      t.close();
      t.explain?.reset(t); // and its sampling panel
    }
    if (pending !== null && message.value === pending) {
      message.value = ""; // the message this view sent is in the transcript now
      setEditing(false);
    }
    pending = null;
    liveThinking.newRun(Number(model.get("run_id")) || 0);
    live.newRun(Number(model.get("run_id")) || 0);
    updateChrome();
    schedule();
  });
  onModel("change:_messages", syncEntries);
  onModel("change:status", (/** @type {unknown} */ shared) => {
    const words = runAnnouncement(status(), model.get("metrics"), model.get("error_info"), {
      liveTokens: live.liveTokens,
    });
    // A switch to another answer (an ended run never seen running) says nothing.
    const ran = announce.ran(Number(model.get("run_id")) || 0, status());
    announce.say(stateKey(), ran ? words : "", shared);
    // The run ended: render the answer in full now, while it is still aria-busy.
    if (!ACTIVE.has(status())) frames.now();
    // The run ended: open popovers of alternatives close (the text under them is final
    // and may have moved), and the notes say the run in the past tense.
    if (!ACTIVE.has(status())) for (const t of tokenLists.values()) t.close();
    tv.refresh();
    updateChrome();
    schedule();
  });
  onModel("change:metrics", () => {
    setBadge(badge, status(), isCut(status(), model.get("metrics")));
    updateMetrics();
  });
  onModel("change:error_info", updateChrome);
  onModel("change:input_error", () => {
    if (model.get("input_error")) pending = null;
    updateChrome();
  });

  // ---- composer ----------------------------------------------------------------
  function send() {
    if (sendBtn.disabled) return;
    // An invalid setting: the panel opens on it, and nothing is sent.
    if (settings.blocked()) return;
    const text = message.value;
    pending = text;
    const values = settings.values();
    model.send(editing ? { type: "edit_last", text, settings: values } : { type: "send", text, settings: values });
  }
  onSubmitKey(scope, message, send);
  on(sendBtn, "click", send);
  const stop = () => {
    if (stopBtn.disabled) return;
    model.send({ type: "stop" });
    stopWaiting.stopped();
  };
  on(stopBtn, "click", stop);
  // Esc anywhere in the chat stops the answer (a popover, the settings panel or the clear
  // question open takes it first).
  stopOnEscape(scope, root, () => !stopBtn.disabled, stop);

  /** Show or hide the question under the bar that Clear chat asks. @param {boolean} open */
  function setConfirming(open) {
    if (open && !confirmClear.isConnected) bar.after(confirmClear);
    else if (!open && confirmClear.isConnected) confirmClear.remove();
    clearBtn.setAttribute("aria-expanded", String(open));
  }
  clearBtn.setAttribute("aria-expanded", "false");
  on(clearBtn, "click", () => {
    if (clearBtn.disabled) return;
    setConfirming(true);
    clearNo.focus(); // the safe answer first: Enter twice must not erase the conversation
  });
  on(clearYes, "click", () => {
    setConfirming(false);
    message.focus({ preventScroll: true });
    if (!clearBtn.disabled) model.send({ type: "clear" });
  });
  on(clearNo, "click", () => {
    setConfirming(false);
    clearBtn.focus();
  });
  on(confirmClear, "keydown", (/** @type {KeyboardEvent} */ e) => {
    if (e.key !== "Escape") return;
    e.preventDefault();
    e.stopPropagation();
    setConfirming(false);
    clearBtn.focus();
  });
  on(cancelEditBtn, "click", () => {
    setEditing(false);
    message.value = "";
  });

  // ---- message buttons, copy buttons -------------------------------------------
  on(list, "click", (/** @type {MouseEvent} */ ev) => {
    const target = /** @type {Element} */ (ev.target);
    const btn = target.closest?.("button");
    if (!btn || !list.contains(btn)) return;
    if (btn.classList.contains("nbstream-copy")) {
      copyCode(scope, btn, root);
      return;
    }
    const entry = entries.find((e) => e.el.contains(btn));
    if (!entry) return;
    const action = btn.getAttribute("data-action");
    if (action === "copy-answer") {
      // The answer as the kernel holds it (its message's content, or the streamed text).
      copyAnswer(scope, btn, textOf(entry, entries.indexOf(entry)), root);
      return;
    }
    if (action === "keep") model.send({ type: "keep", turn: entry.msg.turn });
    else if (action === "regenerate") {
      if (settings.blocked()) return; // an invalid setting: the panel opens on it
      // Like Send, with the panel's settings (an edit may not have reached the kernel).
      model.send({ type: "regenerate", settings: settings.values() });
    }
    else if (action === "edit") {
      message.value = String(entry.msg.content ?? "");
      setEditing(true);
      message.focus();
    }
  });

  // ---- start ------------------------------------------------------------------
  tv.update();
  syncEntries();
  live.sync();
  scope.defer(watchRemoval(el, (m) => model.send(m), viewId));
  return scope.dispose;
}

export default { render };
