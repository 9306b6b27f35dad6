// nbstream — browser front end of `nbstream.widgets.stream.StreamWidget` (an anywidget).
//
// Built by js/build.mjs into nbstream/static/stream.js (ESM, minified, with
// markdown-it and DOMPurify bundled: nothing is fetched at run time). Shared with
// the ChatWidget view (chat.js): the rendering (markdown.js, text_renderer.js); the
// view's lifecycle (view_scope.js), the run's text (live_text.js), the badge (status.js),
// the metrics line (metrics.js) and the chrome both views have (prompt.js, bar.js,
// output.js, run_buttons.js, copy.js, connection.js, page.js); the token views (token_views.js,
// tokenViews). What is here is
// the StreamWidget's own: one prompt, one output, the label and show_prompt.
//
// ---------------------------------------------------------------------------
// Synced traits and messages: the types of protocol.d.ts, which nbstream/protocol.py writes
// (the classes `RunWidget`, nbstream/widgets/base.py, and `StreamWidget`,
// nbstream/widgets/stream.py); model.d.ts types the model with them. What each trait and
// message means is in PROTOCOL.md.
// ---------------------------------------------------------------------------

/** @typedef {import("./protocol.js").StreamWidgetRequest} OutgoingMessage */
/** @typedef {import("./protocol.js").TokensMessage} TokensMessage */
/** @typedef {import("./model.js").StreamModel} StreamModel */

import { rawToggle, statusBar } from "./bar.js";
import { watchConnection } from "./connection.js";
import { copyAnswer, copyAnswerButton, copyCode } from "./copy.js";
import { h } from "./dom.js";
import { isNum } from "./format.js";
import { LiveText, onRunMessages } from "./live_text.js";
import { showMetrics } from "./metrics.js";
import { follower, markCut, markOutput, outputArea } from "./output.js";
import { VERSION, watchRemoval } from "./page.js";
import { inputErrorView, onSubmitKey, promptBox, syncedText } from "./prompt.js";
import { iconButton, stopNotice, swapButtons } from "./run_buttons.js";
import { ACTIVE, isCut, makeBadge, modelStatus, setBadge } from "./status.js";
import { logFrame, newViewId, viewScope } from "./view_scope.js";
import { announcer, runAnnouncement, stopOnEscape } from "./announce.js";
import { branchAction, branchSwitcher } from "./branches.js";
import { Replayer, currentSnapshot, kernelWatch, replayRow, snapshotMessages } from "./replay.js";
import { compareMarkView } from "./sampling.js";
import { TextRenderer } from "./text_renderer.js";
import { pullWhenUnpushed } from "./pull.js";
import { promptView, settingsPanel } from "./settings_panel.js";
import { LiveThinking, ThinkingBox } from "./thinking.js";
import { tokenViews } from "./token_views.js";

/** @typedef {import("./text_renderer.js").FrameStats} FrameStats */
/** @typedef {import("./token_list.js").TokenList} TokenList */

// ---------------------------------------------------------------------------
// The view
// ---------------------------------------------------------------------------

/** The prompt box with Run and Stop beside it. */
function promptControls() {
  const prompt = promptBox("nbstream-prompt", "Prompt", 3, "Ask the model… (Shift+Enter to run)");
  const runBtn = iconButton("nbstream-run", "Run", "▶", "Run (Shift+Enter)");
  const stopBtn = iconButton("nbstream-stop", "Stop", "■");
  const actions = h("div", "nbstream-actions");
  actions.append(runBtn, stopBtn);
  const promptRow = h("div", "nbstream-prompt-row");
  promptRow.append(prompt, actions);
  return { prompt, runBtn, stopBtn, promptRow };
}

/** The output area, its rendered and raw forms, and its end-state marks (see markOutput). */
function outputParts() {
  const partialLabel = h("div", "nbstream-partial-label");
  const output = outputArea("Output");
  output.setAttribute("tabindex", "0");
  const rendered = h("div", "nbstream-rendered");
  const rawPre = h("pre", "nbstream-raw");
  output.append(rendered);
  // No role=alert: the view's announcer says "Failed: …" once (announce.js).
  const errorEl = h("div", "nbstream-error");
  const cutEl = h("div", "nbstream-cut");
  return { partialLabel, output, rendered, rawPre, errorEl, cutEl };
}

/**
 * One view of a StreamWidget: one prompt, one output, the bar between them. The state of
 * the view is the fields below; everything it adds to the page and the model is in
 * `scope`, whose dispose is the cleanup `render` returns. The order of the subscriptions
 * (the constructor's, then listen's) is the order in which the model's events reach them.
 */
class StreamView {
  /** @param {StreamModel} model @param {HTMLElement} el */
  constructor(model, el) {
    this.model = model;
    this.el = el;
    this.viewId = newViewId();
    this.scope = viewScope(model);
    const { on, onModel, later } = this.scope;
    this.root = h("div", "nbstream", { "data-status": "idle", "data-version": VERSION });
    this.controls = promptControls();
    const { prompt, promptRow } = this.controls;
    this.updateInputError = inputErrorView(model, this.viewId, prompt, promptRow, (m) => this.settings.blame(m));
    this.stopWaiting = stopNotice(this.scope, promptRow, () => this.active());
    this.badge = makeBadge();
    this.metricsEl = h("span", "nbstream-metrics");
    this.raw = rawToggle(this.scope, "Show the raw text instead of rendered Markdown", () => this.showOutput());
    const active = () => this.active();
    this.settings = settingsPanel({ model, viewId: this.viewId, chat: false, on, onModel, later, active });
    this.templated = promptView({ model, viewId: this.viewId, on, onModel });
    this.tv = this.makeTokenViews();
    // The answers of this prompt (the original and its branches), above the output.
    this.switcher = branchSwitcher({ model, onModel });
    this.labelEl = h("span", "nbstream-label");
    this.copyBtn = copyAnswerButton();
    // The bar: what the run did (status line), then what the user can do (tools); see
    // statusBar for why its layout cannot jump when a run ends.
    const { bar, statusLine } = statusBar(
      [this.labelEl, this.badge, this.metricsEl],
      [this.raw.button, this.tv.group, this.templated.toggle, this.settings.toggle, this.copyBtn],
    );
    this.statusLine = statusLine;
    this.out = outputParts();
    // A reasoning model's thinking: its own section above the answer (js/src/thinking.js).
    this.thinkBox = new ThinkingBox();
    const { output } = this.out;
    this.root.append(promptRow, bar, this.settings.panel, this.templated.view, this.tv.head);
    this.root.append(this.switcher.el, this.thinkBox.el, output);
    el.append(this.root);
    // What a screen reader hears: each state change once, the end once (announce.js).
    this.announce = announcer(this.root, this.scope);
    this.announce.seen(this.stateKey());
    this.announce.ran(this.runId(), this.status());
    // Before the first message (the sync below): a kernel already gone shows at once.
    watchConnection(this.scope, model, this.root);
    this.follow = follower(this.scope, output);
    this.renderer = new TextRenderer(this.out.rendered, this.out.rawPre);
    /** @type {TokenList} */
    this.tokens = this.tv.list(this.runId());
    this.scope.defer(() => this.tokens.dispose());
    // A compare column: where its tokens part from the other columns' (compare_mark).
    this.partMark = compareMarkView({ model, scope: this.scope, tokens: this.tokens });
    this.root.insertBefore(this.partMark.line, output);
    this.live = this.makeLiveText();
    this.thinking = new LiveThinking(this.runId(), this.viewId, (m) => model.send(m), () => this.updateThinking());
    this.thinkingRun = this.thinking.runId;
    this.frames = this.scope.frames(() => this.draw());
    this.savePrompt = syncedText(this.scope, model, prompt, "prompt");
    this.offline = false; // no kernel answers this view (a saved notebook): see setOffline
    this.saved = replayRow(); // the last run from its snapshot, and Replay
    promptRow.after(this.saved.row);
    this.replayer = this.makeReplayer();
  }

  // ---- without a kernel (js/src/replay.js) ----------------------------------------

  makeReplayer() {
    return new Replayer(
      this.scope,
      (at) => this.showSnapshot(at),
      () => this.replayEnded(),
    );
  }

  /**
   * Show the current run's snapshot as the kernel's messages would, up to `at` (a replay's
   * point; all of it by default). False when there is none for the current run.
   * @param {{length?: number, count?: number, from?: number}} [at]
   */
  showSnapshot(at) {
    const s = currentSnapshot(this.model);
    if (!s) return false;
    const { reset, tokens } = snapshotMessages(s, at);
    if ((at?.from ?? 0) === 0) this.thinking.receive(reset);
    this.live.reset(reset);
    if (tokens && this.tokens) {
      if (tokens.offset === 0) this.tokens.reset(s.run_id);
      this.onTokens(tokens);
    }
    this.schedule();
    this.updateChrome();
    return true;
  }

  /** An ended run with no text yet (no kernel has answered): drawn from its snapshot. */
  drawSnapshot() {
    if (this.active() || this.live.text.length > 0 || this.replayer.playing) return;
    if (this.showSnapshot()) this.frames.now();
  }

  /** @param {boolean} offline no kernel answers this view */
  setOffline(offline) {
    if (offline && !currentSnapshot(this.model)) return; // nothing saved to show
    this.offline = offline;
    if (!offline) this.replayer.stop();
    this.root.toggleAttribute("data-saved", offline);
    this.saved.row.hidden = !offline;
    this.controls.prompt.readOnly = offline;
    this.updateChrome();
  }

  toggleReplay() {
    if (this.replayer.playing) {
      this.replayer.stop();
      return;
    }
    const s = currentSnapshot(this.model);
    if (!s) return;
    this.tokens.close();
    this.follow.on = true;
    this.root.setAttribute("data-replay", "playing");
    this.out.output.setAttribute("aria-busy", "true");
    this.saved.button.textContent = "■ Stop replay";
    this.replayer.start(s);
  }

  replayEnded() {
    this.root.removeAttribute("data-replay");
    this.out.output.setAttribute("aria-busy", "false");
    this.saved.button.textContent = "▶ Replay";
    this.showSnapshot();
    this.frames.now();
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
   * The token views: toggles in the bar, the legend and notes between the bar and the output.
   * @returns {ReturnType<typeof tokenViews>}
   */
  makeTokenViews() {
    return tokenViews({
      model: this.model,
      scope: this.scope,
      viewId: this.viewId, // the sampling panel's replies name this view
      root: this.root,
      raw: this.raw,
      lists: () => [this.tokens],
      noCapture: () => this.tokens.noCapture,
      running: () => this.active(),
      switched: () => this.showOutput(),
      redraw: () => this.schedule(),
      opened: () => {
        this.follow.on = false;
      },
      branch: branchAction({ model: this.model, sent: () => this.switcher.expectNew() }),
    });
  }

  /** The run's text, as the deltas and resets of the current run make it. */
  makeLiveText() {
    return new LiveText(this.runId(), this.viewId, (m) => this.model.send(m), {
      clear: () => {
        this.renderer.clear();
        this.follow.on = true;
      },
      grew: () => this.schedule(),
    });
  }

  /** The Thinking section: the current run's, hidden while the token view shows it. */
  updateThinking() {
    if (this.thinking.runId !== this.thinkingRun) {
      this.thinkingRun = this.thinking.runId;
      this.thinkBox.restart();
    }
    this.thinkBox.suppressed = this.tv.shown;
    this.thinkBox.show(this.thinking.state(), this.status(), this.answered());
  }

  /**
   * Whether the current run's answer has begun. An ended run shown again (a switch: the
   * kernel sends its thinking before its text) says so in its metrics, which come with its
   * run_id and status: the text that has not arrived yet would have the section open, or
   * say "stopped while thinking", for a moment.
   */
  answered() {
    if (this.live.text.length > 0) return true;
    if (this.active()) return false;
    const m = this.model.get("metrics") || {};
    if (m.first_answer_s != null) return true;
    return isNum(m.tokens) && isNum(m.thinking_tokens) && m.tokens > m.thinking_tokens;
  }

  /** One frame (at most one per animation frame): the text rendered up to date. */
  draw() {
    const t0 = performance.now();
    /** @type {FrameStats} */
    const st = { parsed: 0, nodes: 0 };
    const text = this.live.text;
    // The Markdown is brought up to date when it is shown again (it is incremental).
    const streaming = this.active() || this.replayer.playing;
    if (!this.tv.shown) this.renderer.update(text, streaming, st);
    const t1 = performance.now();
    this.follow.stick();
    logFrame(t0, t1, text.length, st);
  }

  /** The chrome: status, buttons, badge, the output's marks, the metrics line. */
  updateChrome() {
    const s = this.status();
    this.root.setAttribute("data-status", s);
    // While a saved run plays again, its end ("complete · stopped at …") is not yet true.
    const replaying = this.replayer?.playing === true;
    const cut = !replaying && isCut(s, this.model.get("metrics"));
    setBadge(this.badge, replaying ? "replaying" : s, cut);

    const active = ACTIVE.has(s);
    swapButtons(this.controls.runBtn, this.controls.stopBtn, active);
    this.stopWaiting.update();
    this.settings.update();

    const { output, cutEl } = this.out;
    markOutput(this.out, s, this.live.text.length > 0, () => this.model.get("error_info"));
    markCut(output, cutEl, cut);
    this.copyBtn.disabled = this.live.text.length === 0;
    // No kernel: nothing can run; Replay plays the saved run instead.
    if (this.offline) {
      this.controls.runBtn.disabled = true;
      this.controls.stopBtn.disabled = true;
    }
    this.updateThinking();
    this.updateInputError();
    this.updateMetrics();
  }

  updateMetrics() {
    const { live } = this;
    showMetrics(this.metricsEl, this.status(), this.model.get("metrics") || {}, live.liveTokens, live.liveElapsed);
  }

  /** What the output shows: the token view, the raw text or the rendered Markdown. */
  showOutput() {
    const { output, rendered, rawPre } = this.out;
    const want = this.tv.shown ? this.tokens.el : this.raw.raw ? rawPre : rendered;
    if (output.firstChild !== want || output.childNodes.length !== 1) output.replaceChildren(want);
    this.updateThinking();
    this.follow.stick();
  }

  /** The label, and the prompt box shown or not. */
  updateLabel() {
    const { labelEl, statusLine } = this;
    const { prompt, promptRow } = this.controls;
    const text = String(this.model.get("label") ?? "");
    if (labelEl.textContent !== text) labelEl.textContent = text;
    labelEl.hidden = !text;
    const shown = this.model.get("show_prompt") !== false;
    prompt.hidden = !shown;
    // No prompt box (a compare column): the label goes beside Run and Stop, a row saved.
    if (shown && labelEl.parentElement !== statusLine) statusLine.prepend(labelEl);
    else if (!shown && labelEl.parentElement !== promptRow) promptRow.append(labelEl);
    promptRow.setAttribute("data-prompt", shown ? "shown" : "hidden");
  }

  // ---- protocol ------------------------------------------------------------------

  /**
   * A `tokens` message: this run's (or a newer one's from the start), else stale.
   * @param {TokensMessage} msg
   */
  onTokens(msg) {
    const { tokens, live } = this;
    const rid = Number(msg.run_id);
    if (!Number.isFinite(rid) || rid < (tokens.runId ?? 0)) return; // a late one of an old run
    if (rid > (tokens.runId ?? 0)) {
      if (Number(msg.offset) !== 0) {
        live.requestSync(); // a run this view has not seen start: ask for all of it
        return;
      }
      tokens.reset(rid);
    }
    if (tokens.apply(msg) === "gap") live.requestSync();
    this.partMark.update(); // the list may have been rebuilt: mark the parting token again
  }

  onRunId() {
    const rid = this.runId();
    if (rid > (this.tokens.runId ?? 0)) this.tokens.reset(rid);
    // The answer's text first: the thinking's redraw (thinkBox.restart) must not see the
    // previous run's text and take the new run as answered.
    const fresh = this.live.newRun(rid);
    this.thinking.newRun(rid);
    if (!fresh) return;
    this.stopWaiting.hide();
    this.schedule();
    this.updateChrome();
  }

  /** @param {unknown} shared */
  onStatus(shared) {
    const { model } = this;
    // A compare column's run that Run all started says nothing: the header says the Run
    // all's start and end once (announce.js). Its own run (its Run, a branch) it says,
    // with its label (no prompt box: a column).
    const column = model.get("show_prompt") === false;
    const words =
      model.get("in_run_all") === true
        ? ""
        : runAnnouncement(this.status(), model.get("metrics"), model.get("error_info"), {
            label: column ? String(model.get("label") ?? "") : "",
            liveTokens: this.live.liveTokens,
          });
    // A switch to another answer (an ended run never seen running) says nothing.
    const ran = this.announce.ran(this.runId(), this.status());
    this.announce.say(this.stateKey(), ran ? words : "", shared);
    // The run ended: render the open block in full now, while the output
    // is still aria-busy, rather than in the next frame.
    if (!this.active() && this.renderer.frozen) this.frames.now();
    // The run ended: an open popover of alternatives closes (the text under it is final
    // and may have moved), and the notes say the run in the past tense.
    if (!this.active()) this.tokens.close();
    this.tv.refresh();
    this.updateChrome();
    this.schedule();
  }

  /** Run with the prompt box's text and the settings panel's values. */
  run() {
    const { model, settings } = this;
    const { prompt, runBtn } = this.controls;
    if (runBtn.disabled) return;
    this.savePrompt();
    // An invalid setting: the panel opens on it, and nothing is sent.
    if (settings.blocked()) return;
    // Without its prompt box (a compare column) the view sends no prompt: the kernel's
    // prompt trait (the shared one) is the prompt, not this view's hidden copy of it.
    /** @type {OutgoingMessage & {type: "run"}} */
    const message = { type: "run", settings: settings.values() };
    if (model.get("show_prompt") !== false) message.prompt = prompt.value;
    model.send(message);
  }

  stop() {
    if (this.controls.stopBtn.disabled) return;
    this.model.send({ type: "stop" });
    this.stopWaiting.stopped();
  }

  /** The model's events and the user's, each to its handler. */
  listen() {
    const { scope, live, copyBtn, root } = this;
    const { on, onModel } = scope;
    const { prompt, runBtn, stopBtn } = this.controls;
    const { output } = this.out;
    const chrome = () => this.updateChrome();
    const receive = onRunMessages(scope, live, {
      chrome,
      metrics: () => this.updateMetrics(),
      redraw: () => this.schedule(),
      tokens: (msg) => this.onTokens(msg),
      thinking: this.thinking,
    });
    // The run's text still arriving after a Stop: the kernel has not acted on it (yet).
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
        tokens: this.tokens.runId === live.runId ? this.tokens.tokens.length : 0,
        thinking: this.thinking.runId === live.runId ? this.thinking.live.cpLen : 0,
      }),
      deliver: (msg) => {
        receive(msg);
        progress(msg);
      },
    });
    onModel("change:run_id", () => this.onRunId());
    onModel("change:status", (/** @type {unknown} */ shared) => this.onStatus(shared));
    onModel("change:metrics", chrome); // the badge says whether the answer was cut
    onModel("change:error_info", chrome);
    onModel("change:input_error", chrome);
    onSubmitKey(scope, prompt, () => this.run());
    on(runBtn, "click", () => this.run());
    const stop = () => this.stop();
    on(stopBtn, "click", stop);
    // Esc anywhere in the view stops the run (a popover or the settings panel open takes it first).
    stopOnEscape(scope, root, () => !stopBtn.disabled, stop);
    on(this.saved.button, "click", () => this.toggleReplay());
    onModel("change:snapshot", () => this.drawSnapshot());
    onModel("change:label", () => this.updateLabel());
    onModel("change:show_prompt", () => this.updateLabel());
    // The answer as the kernel holds it: the run's text, exactly (deltas only append to it).
    on(copyBtn, "click", () => {
      if (!copyBtn.disabled) copyAnswer(scope, copyBtn, live.text, root);
    });
    on(output, "click", (/** @type {MouseEvent} */ e) => {
      const btn = /** @type {Element} */ (e.target).closest?.(".nbstream-copy");
      if (btn && output.contains(btn)) copyCode(scope, /** @type {HTMLElement} */ (btn), root);
    });
  }

  /** Draw the view from the model's state, and ask the kernel for the run's text. */
  start() {
    this.updateLabel();
    this.tv.update();
    this.updateChrome();
    this.live.sync();
    this.drawSnapshot();
    kernelWatch(this.scope, { none: () => this.setOffline(true), some: () => this.setOffline(false) });
    this.scope.defer(watchRemoval(this.el, (m) => this.model.send(m), this.viewId));
  }
}

/**
 * @param {{model: StreamModel, el: HTMLElement}} ctx
 * @returns {() => void} cleanup
 */
function render({ model, el }) {
  const view = new StreamView(model, el);
  view.listen();
  view.start();
  return view.scope.dispose;
}

export default { render };
