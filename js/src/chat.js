// nbstream — browser front end of `nbstream.widgets.chat.ChatWidget` (an anywidget).
//
// Built by js/build.mjs into nbstream/static/chat.js (ESM, minified, with
// markdown-it and DOMPurify bundled). The rendering (markdown.js, text_renderer.js),
// the view's lifecycle (view_scope.js), the run's text (live_text.js), the badge
// (status.js), the metrics line (metrics.js), the chrome both views have (prompt.js,
// bar.js, output.js, run_buttons.js, copy.js, connection.js, page.js) and the token views
// (token_views.js) are the StreamWidget's (stream.js).
// What is here is the chat's own view (ChatView): the transcript, one token list per
// answer's run, what each message shows, Keep partial and Regenerate. One message's
// element is a ChatMessage (chat_message.js); the composer and Clear chat are in
// chat_composer.js.
//
// ---------------------------------------------------------------------------
// Synced traits and messages: the types of protocol.d.ts, which nbstream/protocol.py writes
// (the class `ChatWidget`, nbstream/widgets/chat.py, and its base `RunWidget`,
// nbstream/widgets/base.py); model.d.ts types the model with them. What each trait and
// message means is in PROTOCOL.md.
// ---------------------------------------------------------------------------

/** @typedef {import("./protocol.js").ChatMessage} Message  one message of `_messages` */
/** @typedef {import("./model.js").ChatModel} ChatModel */

import { rawToggle, statusBar } from "./bar.js";
import { watchConnection } from "./connection.js";
import { copyAnswer, copyCode } from "./copy.js";
import { h } from "./dom.js";
import { LiveText, onRunMessages } from "./live_text.js";
import { showMetrics } from "./metrics.js";
import { follower, markCut, markOutput } from "./output.js";
import { VERSION, watchRemoval } from "./page.js";
import { inputErrorView, onSubmitKey } from "./prompt.js";
import { stopNotice, swapButtons } from "./run_buttons.js";
import { ACTIVE, isCut, makeBadge, modelStatus, setBadge, STATUSES } from "./status.js";
import { logFrame, newViewId, viewScope } from "./view_scope.js";
import { announcer, runAnnouncement, stopOnEscape } from "./announce.js";
import { branchAction, branchSwitcher } from "./branches.js";
import { ChatMessage, keyOf } from "./chat_message.js";
import { ClearChat, Composer } from "./chat_composer.js";
import { kernelWatch, onStaticPage, replayRow } from "./replay.js";
import { promptView, settingsPanel } from "./settings_panel.js";
import { LiveThinking } from "./thinking.js";
import { pullWhenUnpushed } from "./pull.js";
import { sayCapture } from "./token_notes.js";
import { tokenViews } from "./token_views.js";

/** @typedef {import("./text_renderer.js").FrameStats} FrameStats */
/** @typedef {import("./protocol.js").TokensMessage} TokensMessage */
/** @typedef {import("./token_list.js").TokenList} TokenList */
/** @typedef {import("./chat_message.js").MessageButton} MessageButton */

/**
 * One view of a ChatWidget: the bar, the transcript (one ChatMessage per message, and the
 * token list of each run, by run_id), the composer. The state of the view is the fields
 * below; everything it adds to the page and the model is in `scope`, whose dispose is the
 * cleanup `render` returns. The order of the subscriptions (the constructor's, then
 * listen's) is the order in which the model's events reach them.
 */
class ChatView {
  /** @param {ChatModel} model @param {HTMLElement} el */
  constructor(model, el) {
    this.model = model;
    this.el = el;
    this.viewId = newViewId();
    this.scope = viewScope(model);
    const { on, onModel, later } = this.scope;
    this.root = h("div", "nbstream nbstream-chat", { "data-status": "idle", "data-version": VERSION });
    this.badge = makeBadge();
    this.metricsEl = h("span", "nbstream-metrics");
    this.raw = rawToggle(this.scope, "Show the answers' raw text instead of rendered Markdown", () => {
      for (const e of this.entries) this.showOutput(e);
      this.follow.stick();
    });
    this.clear = new ClearChat();
    const active = () => this.active();
    this.settings = settingsPanel({ model, viewId: this.viewId, chat: true, on, onModel, later, active });
    this.templated = promptView({ model, viewId: this.viewId, on, onModel });
    this.tv = this.makeTokenViews();
    // The last answer's variants (the original and its branches): a switcher in its bubble.
    this.switcher = branchSwitcher({ model, onModel, label: "Answers to the last message" });
    const tools = [this.raw.button, this.tv.group, this.templated.toggle, this.settings.toggle, this.clear.button];
    this.bar = statusBar([this.badge, this.metricsEl], tools).bar;
    this.clear.anchor = this.bar;
    // A named group (a name needs a role); focusable so that the keyboard can scroll it.
    this.list = h("div", "nbstream-messages", { role: "group", "aria-label": "Conversation", tabindex: "0" });
    this.composer = new Composer();
    const { message, promptRow } = this.composer;
    this.updateInputError = inputErrorView(model, this.viewId, message, promptRow, (m) => this.settings.blame(m));
    this.stopWaiting = stopNotice(this.scope, promptRow, active);
    this.root.append(this.bar, this.settings.panel, this.templated.view, this.tv.head, this.list, promptRow);
    this.saved = savedRow();
    promptRow.after(this.saved.row);
    this.offline = false;
    el.append(this.root);
    // What a screen reader hears: each answer's state changes once, its end once (announce.js).
    this.announce = announcer(this.root, this.scope);
    this.announce.seen(this.stateKey());
    this.announce.ran(this.runId(), this.status());
    // A restarted kernel: show the chat disconnected, its controls off (connection.js).
    watchConnection(this.scope, model, this.root);
    /** @type {ChatMessage[]} */
    this.entries = [];
    this.follow = follower(this.scope, this.list);
    /** @type {Map<number, TokenList>} each run's tokens, by run_id */
    this.tokenLists = new Map();
    this.scope.defer(() => {
      for (const t of this.tokenLists.values()) t.dispose();
      this.tokenLists.clear();
    });
    const send = (/** @type {any} */ m) => model.send(m);
    const redraw = () => this.schedule();
    this.live = new LiveText(this.runId(), this.viewId, send, { clear: redraw, grew: redraw });
    // The streaming answer's thinking (an ended answer's is in its message).
    this.liveThinking = new LiveThinking(this.runId(), this.viewId, send, () => {
      const i = this.entries.length - 1;
      if (i >= 0) this.updateThinking(this.entries[i], i);
    });
    this.frames = this.scope.frames(() => this.draw());
  }

  status() {
    return modelStatus(this.model);
  }

  /** A run is queued or running. */
  active() {
    return ACTIVE.has(this.status());
  }

  runId() {
    return Number(this.model.get("run_id")) || 0;
  }

  stateKey() {
    return `${this.runId()}:${this.status()}`;
  }

  schedule() {
    this.frames.schedule();
  }

  /**
   * The token views: toggles in the bar, the legend (one for the conversation) and the
   * remote-model note above the messages; each answer says itself when it ran without
   * probabilities.
   * @returns {ReturnType<typeof tokenViews>}
   */
  makeTokenViews() {
    const { model } = this;
    return tokenViews({
      model,
      scope: this.scope,
      viewId: this.viewId, // the sampling panel's replies name this view
      root: this.root,
      raw: this.raw,
      lists: () => this.tokenLists.values(),
      switched: () => {
        for (const e of this.entries) this.showOutput(e);
      },
      redraw: () => this.schedule(),
      opened: () => {
        this.follow.on = false;
      },
      notes: (modes) => this.updateNotes(modes),
      branch: branchAction({ model, only: (tl) => this.onlyLastAnswer(tl), sent: () => this.switcher.expectNew() }),
    });
  }

  // ---- the transcript ---------------------------------------------------------

  /** @returns {import("./chat.js").Message[]} */
  messages() {
    const m = this.model.get("_messages");
    return Array.isArray(m) ? m : [];
  }

  /**
   * Whether entry i is the answer being streamed (the current run's, the newest).
   * @param {ChatMessage} e @param {number} i
   */
  isLive(e, i) {
    return e.msg.role === "assistant" && e.msg.run_id === this.runId() && i === this.entries.length - 1;
  }

  /** The answer's state: the current run's for the live one, else its own. @param {ChatMessage} e @param {number} i */
  statusOf(e, i) {
    if (this.isLive(e, i)) return this.status();
    const s = String(e.msg.status ?? "complete");
    return STATUSES.includes(s) ? s : "complete";
  }

  /**
   * The text an answer shows: what streamed so far while it is live, its content after.
   * @param {ChatMessage} e @param {number} i
   */
  textOf(e, i) {
    if (this.isLive(e, i) && this.active()) {
      return this.live.runId === e.msg.run_id ? this.live.text : "";
    }
    return String(e.msg.content ?? "");
  }

  /**
   * An answer's Thinking section: from its message once it ended, else (the answer being
   * generated) from the `thinking` messages; hidden while its tokens show it.
   * @param {ChatMessage} e @param {number} i
   */
  updateThinking(e, i) {
    if (!e.thinking) return;
    const m = e.msg;
    const live = this.liveThinking;
    const t = m.thinking ?? (this.isLive(e, i) && live.runId === m.run_id ? live.state() : null);
    e.thinking.suppressed = this.tv.shown && !!this.listOf(e);
    e.thinking.show(t, this.statusOf(e, i), this.textOf(e, i).length > 0);
  }

  /**
   * Match the elements to the transcript (new ones made, gone ones removed, order kept).
   * Everything an element shows from its message (text, role, state, marks) is written by
   * updateEntry at every change of `_messages`.
   */
  syncEntries() {
    const { list } = this;
    const byKey = new Map(this.entries.map((e) => [e.key, e]));
    this.entries = this.messages().map((m) => {
      const e = byKey.get(keyOf(m)) || this.makeEntry(m);
      e.msg = m;
      return e;
    });
    this.pruneTokens();
    this.entries.forEach((e, i) => {
      if (list.children[i] !== e.el) list.insertBefore(e.el, list.children[i] || null);
    });
    this.placeSwitcher();
    while (list.children.length > this.entries.length) list.lastElementChild?.remove();
    this.tv.refresh();
    this.updateChrome();
    this.schedule();
  }

  /** @param {import("./chat.js").Message} m */
  makeEntry(m) {
    const e = new ChatMessage(m);
    if (e.output) this.showOutput(e);
    return e;
  }

  /**
   * The branch switcher goes in the last answer's bubble, above the answer and its Thinking
   * section, as in the StreamWidget: it says which answer (and whose thinking) is shown.
   */
  placeSwitcher() {
    const { switcher } = this;
    const last = this.entries[this.entries.length - 1];
    const answer = last?.msg.role === "assistant" ? last : null;
    const first = answer ? (answer.thinking?.el ?? answer.output) : null;
    if (first && switcher.el.nextSibling !== first) {
      const focused = switcher.el.contains(document.activeElement);
      first.before(switcher.el);
      switcher.update();
      if (focused) switcher.el.focus({ preventScroll: true });
    } else if (!first) switcher.el.remove();
  }

  /**
   * A message's attributes, labels and buttons.
   * @param {ChatMessage} e @param {number} i @param {boolean} active a run is queued or running
   */
  updateEntry(e, i, active) {
    e.markRole();
    const buttons = e.msg.role === "user" ? this.userButtons(e, active) : this.updateAnswer(e, i, active);
    // A greedy next run gives the same answer word for word: said where Regenerate is.
    const greedy = buttons.some((b) => b[1] === "regenerate") && this.model.get("next_run_samples") === false;
    // A focused button that goes (Regenerate, Keep partial once a run starts) would drop
    // the focus to the page body: it moves to what is live now.
    if (e.setButtons(buttons, greedy, `nbstream-greedy-${this.viewId}-${i}`)) {
      const same = /** @type {HTMLElement | null} */ (e.actions.querySelector("button"));
      (active ? this.composer.stopBtn : (same ?? this.composer.message)).focus({ preventScroll: true });
    }
  }

  /** @param {ChatMessage} e @param {boolean} active @returns {MessageButton[]} */
  userButtons(e, active) {
    const last = this.entries[this.entries.length - 1];
    const lastTurn = last ? last.msg.turn : -1;
    return e.msg.turn === lastTurn && !active ? [["Edit", "edit", "Edit this message and send it again"]] : [];
  }

  /**
   * An answer's state, marks and Thinking section; returns its buttons.
   * @param {ChatMessage} e @param {number} i @param {boolean} active
   * @returns {MessageButton[]}
   */
  updateAnswer(e, i, active) {
    const m = e.msg;
    const s = this.statusOf(e, i);
    e.el.setAttribute("data-status", s);
    const text = this.textOf(e, i);
    const output = /** @type {HTMLElement} */ (e.output);
    const error = () => (this.isLive(e, i) ? this.model.get("error_info") : m.error);
    const kept = m.kept ? " (kept in the conversation)" : "";
    markOutput({ output, partialLabel: e.partialLabel, errorEl: e.errorEl }, s, text.length > 0, error, kept);
    // A complete answer that reached max_new_tokens: a normal end, said in words.
    markCut(output, e.cutEl, isCut(s, m));
    this.updateThinking(e, i);
    /** @type {MessageButton[]} */
    const buttons = [];
    if (!active && text && (s === "cancelled" || s === "failed") && !m.kept) {
      buttons.push(["Keep partial", "keep", "Keep this partial answer in the conversation"]);
    }
    if (!active && i === this.entries.length - 1) {
      buttons.push(["Regenerate", "regenerate", "Answer the last message again"]);
    }
    if (text && !(this.isLive(e, i) && active)) {
      buttons.push(["Copy answer", "copy-answer", "Copy this answer's text"]);
    }
    return buttons;
  }

  // ---- token views ---------------------------------------------------------------

  /**
   * The tokens of run `rid` (made on first use: its tokens may come before its message).
   * @param {number} rid
   */
  tokensOf(rid) {
    const { tokenLists } = this;
    let t = tokenLists.get(rid);
    if (!t) {
      t = this.tv.list(rid, (keep) => {
        for (const other of tokenLists.values()) if (other !== keep) other.close();
      });
      tokenLists.set(rid, t);
    }
    return t;
  }

  /** The token list an answer shows, or null (no run made it: seeded from Python). @param {ChatMessage} e */
  listOf(e) {
    const rid = e.msg.run_id;
    return e.msg.role === "assistant" && typeof rid === "number" ? this.tokensOf(rid) : null;
  }

  /** What an answer's output shows: its tokens, its raw text or its rendered Markdown. @param {ChatMessage} e */
  showOutput(e) {
    if (!e.output || !e.renderer) return;
    const tl = this.tv.shown ? this.listOf(e) : null;
    e.showInOutput(tl ? tl.el : this.raw.raw ? e.renderer.rawPre : e.renderer.rendered);
    const i = this.entries.indexOf(e);
    if (i >= 0) this.updateThinking(e, i); // the token view shows the thinking, or the section does
  }

  /**
   * Each answer's "made without probabilities" note (after the token views' head).
   * @param {{probs: boolean, alts: boolean}} modes
   */
  updateNotes(modes) {
    for (const [i, e] of this.entries.entries()) {
      if (!e.output) continue;
      const tl = this.tv.shown ? this.listOf(e) : null;
      const show = !!tl && (modes.probs || modes.alts) && tl.noCapture;
      if (show) sayCapture(e.note, this.isLive(e, i) && this.active());
      if (show && !e.note.isConnected) e.output.before(e.note);
      else if (!show && e.note.isConnected) e.note.remove();
    }
  }

  /** A `tokens` message: for the turn whose run it is. @param {TokensMessage} msg */
  onTokens(msg) {
    const rid = Number(msg.run_id);
    if (!Number.isInteger(rid)) return;
    if (this.tokensOf(rid).apply(msg) === "gap") this.live.requestSync();
  }

  /**
   * The popover's "Continue" is for the last answer only (ChatWidget.branch): the reason
   * said in the popover of an earlier one. @param {TokenList} tl
   */
  onlyLastAnswer(tl) {
    const messages = this.messages();
    const last = messages[messages.length - 1];
    return last?.role === "assistant" && last.run_id === tl.runId
      ? ""
      : "only the last answer can be continued from another token.";
  }

  /** Drop the token lists of runs gone from the transcript (cleared, regenerated). */
  pruneTokens() {
    const keep = new Set(this.messages().map((m) => m.run_id));
    const current = this.runId();
    for (const [rid, t] of this.tokenLists) {
      if (!keep.has(rid) && rid < current) {
        t.dispose();
        this.tokenLists.delete(rid);
      }
    }
  }

  // ---- drawing ---------------------------------------------------------------------

  /** One frame (at most one per animation frame): each answer's text rendered up to date. */
  draw() {
    const t0 = performance.now();
    /** @type {FrameStats} */
    const st = { parsed: 0, nodes: 0 };
    let chars = 0;
    this.entries.forEach((e, i) => {
      if (!e.renderer) return;
      // An answer showing its tokens: its Markdown is brought up to date when shown again.
      if (this.tv.shown && this.listOf(e)) return;
      const text = this.textOf(e, i);
      if (e.draw(text, this.isLive(e, i) && this.active(), st)) chars += text.length;
    });
    const t1 = performance.now();
    this.follow.stick();
    logFrame(t0, t1, chars, st);
  }

  /** The chrome: status, badge, buttons, every message's marks, the metrics line. */
  updateChrome() {
    const s = this.status();
    this.root.setAttribute("data-status", s);
    // The badge is the current run's (the newest answer's): its metrics say why it ended.
    setBadge(this.badge, s, isCut(s, this.model.get("metrics")));
    const active = ACTIVE.has(s);
    const { composer } = this;
    swapButtons(composer.sendBtn, composer.stopBtn, active);
    this.stopWaiting.update();
    this.clear.update(this.entries.length === 0, composer.message);
    this.settings.update();
    this.entries.forEach((e, i) => {
      this.updateEntry(e, i, active);
    });
    const editing = composer.editing;
    if (editing && (active || !this.entries.some((e) => e.msg.role === "user"))) composer.setEditing(false);
    this.updateInputError();
    this.updateMetrics();
    // No kernel: the saved turns show, and nothing can be sent.
    if (this.offline) {
      composer.sendBtn.disabled = true;
      composer.stopBtn.disabled = true;
    }
  }

  /** @param {boolean} offline no kernel answers this view (a saved notebook) */
  setOffline(offline) {
    if (offline && this.entries.length === 0) return; // an empty chat: nothing saved to show
    this.offline = offline;
    this.root.toggleAttribute("data-saved", offline);
    this.saved.row.hidden = !offline;
    this.composer.message.readOnly = offline;
    this.updateChrome();
  }

  updateMetrics() {
    const { live } = this;
    showMetrics(this.metricsEl, this.status(), this.model.get("metrics") || {}, live.liveTokens, live.liveElapsed);
  }

  // ---- protocol --------------------------------------------------------------------

  onRunId() {
    this.stopWaiting.hide();
    // A new answer streams in below: no popover of an older one stays open over it.
    for (const t of this.tokenLists.values()) {
      t.close();
      t.explain?.reset(t); // and its sampling panel
    }
    this.composer.runStarted();
    this.liveThinking.newRun(this.runId());
    this.live.newRun(this.runId());
    this.updateChrome();
    this.schedule();
  }

  /** @param {unknown} shared */
  onStatus(shared) {
    const { model } = this;
    const words = runAnnouncement(this.status(), model.get("metrics"), model.get("error_info"), {
      liveTokens: this.live.liveTokens,
    });
    // A switch to another answer (an ended run never seen running) says nothing.
    const ran = this.announce.ran(this.runId(), this.status());
    this.announce.say(this.stateKey(), ran ? words : "", shared);
    // The run ended: render the answer in full now, while it is still aria-busy.
    if (!this.active()) this.frames.now();
    // The run ended: open popovers of alternatives close (the text under them is final
    // and may have moved), and the notes say the run in the past tense.
    if (!this.active()) for (const t of this.tokenLists.values()) t.close();
    this.tv.refresh();
    this.updateChrome();
    this.schedule();
  }

  /** Send the message box's text (or, editing, resend it in place of the last message). */
  send() {
    const { composer, settings } = this;
    if (composer.sendBtn.disabled) return;
    // An invalid setting: the panel opens on it, and nothing is sent.
    if (settings.blocked()) return;
    const text = composer.message.value;
    composer.pending = text;
    const values = settings.values();
    this.model.send(composer.editing ? { type: "edit_last", text, settings: values } : { type: "send", text, settings: values });
  }

  stop() {
    if (this.composer.stopBtn.disabled) return;
    this.model.send({ type: "stop" });
    this.stopWaiting.stopped();
  }

  /** A click on a message's button, or on a code block's Copy. @param {MouseEvent} ev */
  onListClick(ev) {
    const { entries, scope, root } = this;
    const target = /** @type {Element} */ (ev.target);
    const btn = target.closest?.("button");
    if (!btn || !this.list.contains(btn)) return;
    if (btn.classList.contains("nbstream-copy")) {
      copyCode(scope, btn, root);
      return;
    }
    const entry = entries.find((e) => e.el.contains(btn));
    if (!entry) return;
    const action = btn.getAttribute("data-action");
    if (action === "copy-answer") {
      // The answer as the kernel holds it (its message's content, or the streamed text).
      copyAnswer(scope, btn, this.textOf(entry, entries.indexOf(entry)), root);
      return;
    }
    if (action === "keep") this.model.send({ type: "keep", turn: entry.msg.turn });
    else if (action === "regenerate") {
      if (this.settings.blocked()) return; // an invalid setting: the panel opens on it
      // Like Send, with the panel's settings (an edit may not have reached the kernel).
      this.model.send({ type: "regenerate", settings: this.settings.values() });
    } else if (action === "edit") this.composer.edit(String(entry.msg.content ?? ""));
  }

  /** The model's events and the user's, each to its handler. */
  listen() {
    const { scope, live, composer, root } = this;
    const { on, onModel } = scope;
    const chrome = () => this.updateChrome();
    const receive = onRunMessages(scope, live, {
      chrome,
      metrics: () => this.updateMetrics(),
      redraw: () => this.schedule(),
      tokens: (msg) => this.onTokens(msg),
      thinking: this.liveThinking,
    });
    // The answer's text still arriving after a Stop: the kernel has not acted on it (yet).
    const progress = (/** @type {any} */ msg) => {
      if (msg?.type === "delta" && Number(msg.run_id) === live.runId) this.stopWaiting.progress();
    };
    onModel("msg:custom", progress);
    // Where the kernel's pushes never arrive (Colab), the same messages, pulled.
    pullWhenUnpushed(scope, this.model, {
      viewId: this.viewId,
      root,
      held: () => ({
        run_id: live.runId,
        text: live.cpLen,
        tokens: this.tokenLists.get(live.runId)?.tokens.length ?? 0,
        thinking: this.liveThinking.runId === live.runId ? this.liveThinking.live.cpLen : 0,
      }),
      deliver: (msg) => {
        receive(msg);
        progress(msg);
      },
    });
    onModel("change:next_run_samples", chrome); // the note beside Regenerate
    onModel("change:run_id", () => this.onRunId());
    onModel("change:_messages", () => this.syncEntries());
    onModel("change:status", (/** @type {unknown} */ shared) => this.onStatus(shared));
    onModel("change:metrics", () => {
      setBadge(this.badge, this.status(), isCut(this.status(), this.model.get("metrics")));
      this.updateMetrics();
    });
    onModel("change:error_info", chrome);
    onModel("change:input_error", () => {
      if (this.model.get("input_error")) composer.pending = null;
      this.updateChrome();
    });
    onSubmitKey(scope, composer.message, () => this.send());
    on(composer.sendBtn, "click", () => this.send());
    const stop = () => this.stop();
    on(composer.stopBtn, "click", stop);
    // Esc anywhere in the chat stops the answer (a popover, the settings panel or the clear
    // question open takes it first).
    stopOnEscape(scope, root, () => !composer.stopBtn.disabled, stop);
    this.clear.listen(scope, composer.message, () => this.model.send({ type: "clear" }));
    on(composer.cancelEditBtn, "click", () => composer.cancelEdit());
    on(this.list, "click", (/** @type {MouseEvent} */ ev) => this.onListClick(ev));
  }

  /** Draw the view from the model's state, and ask the kernel for the run's text. */
  start() {
    this.tv.update();
    this.syncEntries();
    this.live.sync();
    kernelWatch(this.scope, { none: () => this.setOffline(true), some: () => this.setOffline(false) });
    this.scope.defer(watchRemoval(this.el, (m) => this.model.send(m), this.viewId));
  }
}

/** The saved chat's note (js/src/replay.js's row, without Replay: a chat's turns show whole). */
function savedRow() {
  const saved = replayRow();
  saved.button.remove();
  saved.note.textContent = onStaticPage()
    ? "Saved output: this page has no kernel. The chat's turns show as they were saved."
    : "Saved output: no running kernel holds this chat. Its turns show as saved; run the cell again to chat.";
  return saved;
}

/**
 * @param {{model: ChatModel, el: HTMLElement}} ctx
 * @returns {() => void} cleanup
 */
function render({ model, el }) {
  const view = new ChatView(model, el);
  view.listen();
  view.start();
  return view.scope.dispose;
}

export default { render };
