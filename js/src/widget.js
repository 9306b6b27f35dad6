// nbstream — browser front end of `nbstream.widget.StreamWidget` (an anywidget).
//
// Built by js/build.mjs into nbstream/static/widget.js (ESM, minified, with
// markdown-it and DOMPurify bundled: nothing is fetched at run time). The
// rendering (markdown.js, incremental.js) and the run-text protocol, badge and
// metrics line (common.js) are shared with the ChatWidget view (chat.js).
//
// ---------------------------------------------------------------------------
// Synced traits. Mirror of the Python class `StreamWidget` in
// nbstream/widget.py: keep the two in step when either side changes.
// ---------------------------------------------------------------------------

/**
 * Lifecycle state of the widget. Python owns it; the view only reads it.
 * @typedef {"idle" | "queued" | "running" | "complete" | "failed" | "cancelled"} Status
 */

/**
 * `StreamWidget.metrics` — set by Python at run start and at run end only.
 * Live token / elapsed counters travel on `delta` messages instead.
 * @typedef {object} Metrics
 * @property {number | null} [queued_s]       seconds between Run and the start of generation
 * @property {number | null} [ttft_s]         time to first token, seconds
 * @property {number | null} [first_chunk_s]  time to the first delta shown, seconds
 * @property {number | null} [tokens]         generated tokens
 * @property {number | null} [tokens_per_s]   decode rate
 * @property {number | null} [elapsed_s]      wall time of the run, seconds
 * @property {string | null} [finish_reason]  e.g. "eos", "length", "stop", "error"
 */

/**
 * `StreamWidget.error_info` — null / empty object when there is no error.
 * @typedef {{type: string, message: string} | null | {}} ErrorInfo
 */

/**
 * The synced traits of `StreamWidget` (nbstream/widget.py).
 * @typedef {object} StreamWidgetTraits
 * @property {Status} status        current state (Python → JS)
 * @property {string} prompt        the prompt box (two-way: JS saves it on input and before a run)
 * @property {Metrics} metrics      run metrics (Python → JS)
 * @property {ErrorInfo} error_info error of a failed run (Python → JS)
 * @property {string} [input_error] a problem with the input of the last Run click
 *                                  (nothing started), or "" (Python → JS)
 * @property {number} run_id        incremented by Python at each new run; a new run clears the output
 * @property {string | null} prompt_text   the exact text the model got for the current / last run
 * @property {number | null} prompt_tokens its token count
 * @property {any} max_new_tokens   settings (two-way; null: the model's default): also
 *   temperature, top_p, top_k, repetition_penalty, do_sample, seed, stop_sequences
 *   (see js/src/settings.js)
 * @property {Record<string, string>} settings_errors   Python's message per invalid setting
 * @property {Record<string, any>} settings_defaults    the model's defaults, for placeholders
 * @property {number | null} alternatives  a setting (two-way, the panel's "Alternatives (k)"):
 *   the k top candidates captured per step; null or 0 with Probabilities or Alternatives on
 *   (and a local model): the kernel captures k = 5 anyway
 * @property {boolean} show_tokens         Tokens view: the answer as its real tokens (two-way)
 * @property {boolean} show_probabilities  each token shaded by the model's probability, a
 *   legend, the rank of sampled picks (two-way)
 * @property {boolean} show_alternatives   clicking or focusing a token shows the top-k
 *   candidates at that step, with which the run's settings cut (two-way)
 * @property {boolean} can_trace   the model is a local transformers model (token ids and
 *   probabilities exist); false for a remote Endpoint: the token views show a note (Python → JS)
 * @property {string} label        shown at the start of the status bar when not "" (two-way;
 *   StreamWidget only, e.g. "temperature 0.7" in a compare column)
 * @property {boolean} show_prompt false hides the prompt box only; Run and Stop stay, and Run
 *   re-runs with the `prompt` trait (two-way; StreamWidget only)
 *
 * Any of show_tokens / show_probabilities / show_alternatives on: the output shows the token
 * view (plain text made of token spans, js/src/tokens.js) instead of rendered Markdown; all
 * off: the usual rendered view. The same traits (but label and show_prompt) are the
 * ChatWidget's, whose assistant messages show their tokens.
 */

/**
 * Custom messages, JS → Python (`model.send`).
 * @typedef {{type: "run", prompt: string}
 *   | {type: "stop"}
 *   | {type: "sync", view: string}} OutgoingMessage
 */

/**
 * Custom messages, Python → JS (`msg:custom`, received by every view).
 * `offset` counts Unicode code points (not UTF-16 units) of the run's text
 * before this delta.
 * @typedef {{type: "delta", run_id: number, offset: number, text: string,
 *            tokens: number | null, elapsed_s: number | null}
 *   | {type: "reset", run_id: number, view: string | null, text: string}
 *   | TokensMessage} IncomingMessage
 */

/**
 * The teaching views' message (issue 7): tokens `offset`, `offset` + 1, ... of the run
 * `run_id` (StreamWidget: the current run; ChatWidget: the assistant turn with that run_id
 * in the transcript). Offset 0 means "replace this run's token list"; an offset past the
 * tokens a view has is a gap: the view sends a `sync`.
 * Sent only while at least one show_* toggle is on: (a) by the follower thread, in the same
 * frames as the text deltas (at most 20 per second), (b) with offset 0 for every run shown
 * (chat: every turn that had a run) whenever a toggle changes and at least one is on,
 * (c) with offset 0 after answering a view's `sync` (after the `reset`).
 * @typedef {{type: "tokens", run_id: number, offset: number, tokens: Token[]}} TokensMessage
 */

/**
 * One token: [id, text, kind, logprob, rank, alts].
 * - id: the token id
 * - text: kind "text": the token decoded on its own (may hold spaces, "\n", "\t");
 *   kind "special": a special token shown as itself (e.g. "<|im_end|>"); kind "bytes": a
 *   token that is only part of a multi-byte character, its bytes in hex, e.g. "e2 80"
 * - logprob: natural log of the model's own probability (raw logits, 4 decimals), or null
 *   when the run captured no trace
 * - rank: 1 = the model's favourite, or null
 * - alts: null unless show_alternatives is on and the run captured a trace; else the top k
 *   as [id, text, kind, logprob, cut], best first; cut is true when the run's sampling
 *   settings (temperature / top-k / top-p, or greedy) gave that candidate no chance
 * @typedef {[number, string, "text" | "special" | "bytes", number | null, number | null,
 *            Array<[number, string, string, number | null, boolean]> | null]} Token
 */

/**
 * The part of the anywidget model this view uses.
 * @typedef {object} AnyModel
 * @property {(name: string) => any} get
 * @property {(name: string, value: any) => void} set
 * @property {() => void} save_changes
 * @property {(name: string, cb: Function) => void} on
 * @property {(name: string, cb: Function) => void} off
 * @property {(msg: OutgoingMessage) => void} send
 */


import {
  ACTIVE,
  COPY_FEEDBACK_MS,
  FOLLOW_SLACK_PX,
  LiveText,
  PARTIAL,
  RENDER_LOG_MAX,
  STATUSES,
  VERSION,
  copyText,
  h,
  makeBadge,
  newViewId,
  renderLog,
  setBadge,
  showMetrics,
  watchRemoval,
} from "./common.js";
import { TextRenderer } from "./incremental.js";
import { promptView, settingsPanel } from "./settings.js";
import { TokenList, canTrace, makeLegend, makeNote, tokenModes, tokenToggles } from "./tokens.js";

const PROMPT_DEBOUNCE_MS = 300;

/** @typedef {import("./incremental.js").FrameStats} FrameStats */

// ---------------------------------------------------------------------------
// The view
// ---------------------------------------------------------------------------

/**
 * @param {{model: AnyModel, el: HTMLElement}} ctx
 * @returns {() => void} cleanup
 */
function render({ model, el }) {
  const viewId = newViewId();
  const ac = new AbortController();
  const on = (target, type, fn, opts) =>
    target.addEventListener(type, fn, { ...opts, signal: ac.signal });
  /** @type {Array<[string, Function]>} */
  const modelHandlers = [];
  const onModel = (name, fn) => {
    model.on(name, fn);
    modelHandlers.push([name, fn]);
  };
  const timers = new Set();
  const later = (fn, ms) => {
    const t = setTimeout(() => {
      timers.delete(t);
      fn();
    }, ms);
    timers.add(t);
    return t;
  };
  let disposed = false;

  // ---- DOM ---------------------------------------------------------------
  const root = h("div", "nbstream", { "data-status": "idle", "data-version": VERSION });

  const prompt = h("textarea", "nbstream-prompt", {
    "aria-label": "Prompt",
    rows: "3",
    placeholder: "Ask the model… (Shift+Enter to run)",
    spellcheck: "true",
    // Lumino (JupyterLab / Notebook 7) skips its keyboard shortcuts for
    // events from inside this element: Shift+Enter must not run the cell.
    "data-lm-suppress-shortcuts": "true",
  });
  const runBtn = h("button", "nbstream-run", { type: "button", "aria-label": "Run" });
  runBtn.innerHTML = '<span class="nbstream-btn-icon" aria-hidden="true">▶</span>Run';
  runBtn.title = "Run (Shift+Enter)";
  const stopBtn = h("button", "nbstream-stop", { type: "button", "aria-label": "Stop" });
  stopBtn.innerHTML = '<span class="nbstream-btn-icon" aria-hidden="true">■</span>Stop';
  const actions = h("div", "nbstream-actions");
  actions.append(runBtn, stopBtn);
  const promptRow = h("div", "nbstream-prompt-row");
  promptRow.append(prompt, actions);
  const inputErrorId = `nbstream-input-error-${viewId}`;
  const inputErrorEl = h("div", "nbstream-input-error", { role: "alert", id: inputErrorId });

  const badge = makeBadge();
  const metricsEl = h("span", "nbstream-metrics");
  const rawBtn = h("button", "nbstream-raw-toggle", {
    type: "button",
    "aria-label": "Raw text",
    "aria-pressed": "false",
  });
  rawBtn.textContent = "Raw text";
  rawBtn.title = "Show the raw text instead of rendered Markdown";
  const settings = settingsPanel({
    model,
    viewId,
    chat: false,
    on,
    onModel,
    later,
    active: () => ACTIVE.has(status()),
  });
  const templated = promptView({ model, viewId, on, onModel });
  const toggles = tokenToggles({ model, on, onModel, changed: () => updateTokenView() });
  const labelEl = h("span", "nbstream-label");
  const bar = h("div", "nbstream-bar");
  bar.append(labelEl, badge, metricsEl, rawBtn, toggles.group, templated.toggle, settings.toggle);
  // The token views' legend and notes, between the bar and the output.
  const tokenHead = h("div", "nbstream-token-head");
  const legend = makeLegend();
  const captureNote = makeNote("capture");
  const remoteNote = makeNote("remote");

  const partialLabel = h("div", "nbstream-partial-label");
  const output = h("div", "nbstream-output", {
    role: "log",
    "aria-label": "Output",
    "aria-live": "polite",
    "aria-relevant": "additions",
    "aria-atomic": "false",
    "data-partial": "false",
    "data-empty": "true",
    tabindex: "0",
  });
  const rendered = h("div", "nbstream-rendered");
  const rawPre = h("pre", "nbstream-raw");
  output.append(rendered);
  const errorEl = h("div", "nbstream-error", { role: "alert" });

  root.append(promptRow, bar, settings.panel, templated.view, tokenHead, output);
  el.append(root);

  // ---- view state ----------------------------------------------------------
  let rawMode = false;
  let follow = true;
  const renderer = new TextRenderer(rendered, rawPre);
  let rafId = 0;
  let tokenView = false; // the output shows the token view
  const tokens = new TokenList(Number(model.get("run_id")) || 0, {
    label: "Answer tokens",
    changed: () => {
      updateTokenHead();
      schedule();
    },
    opened: () => {
      follow = false;
    },
  });

  const live = new LiveText(Number(model.get("run_id")) || 0, viewId, (m) => model.send(m), {
    clear() {
      renderer.clear();
      follow = true;
    },
    grew: schedule,
  });

  // ---- rendering (at most once per animation frame) ------------------------
  function schedule() {
    if (!rafId && !disposed) rafId = requestAnimationFrame(frame);
  }

  function frame() {
    rafId = 0;
    if (disposed) return;
    const t0 = performance.now();
    /** @type {FrameStats} */
    const st = { parsed: 0, nodes: 0 };
    const text = live.text;
    // The Markdown is brought up to date when it is shown again (it is incremental).
    if (!tokenView) renderer.update(text, ACTIVE.has(status()), st);
    const t1 = performance.now();
    if (follow) output.scrollTop = output.scrollHeight;

    const { parsed, nodes } = st;
    const log = renderLog();
    log.push({ ms: performance.now() - t0, js: t1 - t0, chars: text.length, parsed, nodes });
    if (log.length > RENDER_LOG_MAX + 1000) log.splice(0, log.length - RENDER_LOG_MAX);
  }

  // ---- chrome (status, buttons, badge, labels) -----------------------------
  function status() {
    const s = String(model.get("status") ?? "idle");
    return STATUSES.includes(s) ? s : "idle";
  }

  function updateChrome() {
    const s = status();
    root.setAttribute("data-status", s);
    setBadge(badge, s);

    const active = ACTIVE.has(s);
    runBtn.disabled = active;
    stopBtn.disabled = !active;
    settings.update();

    const hasText = live.text.length > 0;
    output.setAttribute("data-partial", String(hasText && PARTIAL.has(s)));
    output.setAttribute("data-empty", String(!hasText));
    output.setAttribute("aria-busy", String(active));

    if (hasText && (s === "cancelled" || s === "failed")) {
      partialLabel.textContent = `Partial output — run ${s}`;
      if (!partialLabel.isConnected) output.before(partialLabel);
    } else if (partialLabel.isConnected) {
      partialLabel.remove();
    }

    const inputError = String(model.get("input_error") ?? "");
    if (inputError) {
      inputErrorEl.textContent = inputError;
      if (!inputErrorEl.isConnected) promptRow.after(inputErrorEl);
      prompt.setAttribute("aria-invalid", "true");
      prompt.setAttribute("aria-describedby", inputErrorId);
    } else if (inputErrorEl.isConnected) {
      inputErrorEl.remove();
      prompt.removeAttribute("aria-invalid");
      prompt.removeAttribute("aria-describedby");
    }

    if (s === "failed") {
      const info = model.get("error_info") || {};
      const msg = [info.type, info.message].filter((x) => x).join(": ");
      errorEl.textContent = msg || "Run failed";
      if (!errorEl.isConnected) output.after(errorEl);
    } else if (errorEl.isConnected) {
      errorEl.remove();
    }
    updateMetrics();
  }

  function updateMetrics() {
    showMetrics(metricsEl, status(), model.get("metrics") || {}, live.liveTokens, live.liveElapsed);
  }

  // ---- protocol --------------------------------------------------------------
  onModel("msg:custom", (msg) => {
    if (disposed || !msg || typeof msg !== "object") return;
    if (msg.type === "delta") {
      const what = live.delta(msg);
      if (what === "text") updateChrome();
      else if (what === "counters") updateMetrics();
    } else if (msg.type === "reset" && live.reset(msg)) {
      schedule();
      updateChrome();
    } else if (msg.type === "tokens") {
      onTokens(msg);
    }
  });

  /** A `tokens` message: this run's (or a newer one's from the start), else stale. */
  function onTokens(msg) {
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
  }

  onModel("change:run_id", () => {
    const rid = Number(model.get("run_id")) || 0;
    if (rid > (tokens.runId ?? 0)) tokens.reset(rid);
    if (!live.newRun(rid)) return;
    schedule();
    updateChrome();
  });
  onModel("change:status", () => {
    if (!ACTIVE.has(status()) && renderer.frozen) {
      // The run ended: render the open block in full now, while the output
      // is still aria-busy, rather than in the next frame.
      if (rafId) cancelAnimationFrame(rafId);
      frame();
    }
    updateChrome();
    schedule();
  });
  onModel("change:metrics", updateMetrics);
  onModel("change:error_info", updateChrome);
  onModel("change:input_error", updateChrome);

  // ---- prompt ----------------------------------------------------------------
  let promptDirty = false;
  let promptTimer = null;
  prompt.value = String(model.get("prompt") ?? "");

  function savePrompt() {
    if (promptTimer) {
      clearTimeout(promptTimer);
      timers.delete(promptTimer);
      promptTimer = null;
    }
    promptDirty = false;
    model.set("prompt", prompt.value);
    model.save_changes();
  }

  onModel("change:prompt", () => {
    const v = String(model.get("prompt") ?? "");
    if (!promptDirty && prompt.value !== v) prompt.value = v;
  });
  on(prompt, "input", () => {
    promptDirty = true;
    if (promptTimer) {
      clearTimeout(promptTimer);
      timers.delete(promptTimer);
    }
    promptTimer = later(() => {
      promptTimer = null;
      savePrompt();
    }, PROMPT_DEBOUNCE_MS);
  });
  on(prompt, "blur", () => {
    if (promptDirty) savePrompt();
  });

  function run() {
    if (runBtn.disabled) return;
    savePrompt();
    // An invalid setting: the panel opens on it, and nothing is sent.
    if (settings.blocked()) return;
    // Without its prompt box (a compare column) the view sends no prompt: the kernel's
    // prompt trait (the shared one) is the prompt, not this view's hidden copy of it.
    const message = { type: "run", settings: settings.values() };
    if (model.get("show_prompt") !== false) message.prompt = prompt.value;
    model.send(message);
  }
  on(prompt, "keydown", (/** @type {KeyboardEvent} */ e) => {
    if (e.key !== "Enter" || e.isComposing) return;
    if (!(e.shiftKey || e.ctrlKey || e.metaKey)) return;
    e.preventDefault();
    e.stopPropagation();
    run();
  });
  on(runBtn, "click", run);
  on(stopBtn, "click", () => {
    if (!stopBtn.disabled) model.send({ type: "stop" });
  });

  // ---- label, prompt box shown or not --------------------------------------------
  function updateLabel() {
    const text = String(model.get("label") ?? "");
    if (labelEl.textContent !== text) labelEl.textContent = text;
    labelEl.hidden = !text;
    const shown = model.get("show_prompt") !== false;
    prompt.hidden = !shown;
    promptRow.setAttribute("data-prompt", shown ? "shown" : "hidden");
  }
  onModel("change:label", updateLabel);
  onModel("change:show_prompt", updateLabel);

  // ---- token views -----------------------------------------------------------------
  /** What the output shows: the token view, the raw text or the rendered Markdown. */
  function showOutput() {
    const want = tokenView ? tokens.el : rawMode ? rawPre : rendered;
    if (output.firstChild !== want || output.childNodes.length !== 1) output.replaceChildren(want);
    if (follow) output.scrollTop = output.scrollHeight;
  }

  function updateTokenHead() {
    const modes = tokenModes(model);
    const local = canTrace(model);
    const noCapture = local && (modes.probs || modes.alts) && tokens.noCapture;
    /** @type {HTMLElement[]} */
    const want = [];
    if (modes.any && !local) want.push(remoteNote);
    if (noCapture) want.push(captureNote);
    if (local && modes.probs && !tokens.noCapture) want.push(legend);
    const have = [...tokenHead.children];
    if (have.length !== want.length || have.some((e, k) => e !== want[k])) tokenHead.replaceChildren(...want);
    tokenHead.hidden = want.length === 0;
  }

  function updateTokenView() {
    const modes = tokenModes(model);
    const was = tokenView;
    tokenView = modes.any && canTrace(model);
    tokens.setModes(modes);
    root.setAttribute("data-token-view", String(tokenView));
    rawBtn.disabled = tokenView;
    rawBtn.title = tokenView
      ? "The token view is shown: turn Tokens, Probabilities and Alternatives off for the text"
      : "Show the raw text instead of rendered Markdown";
    updateTokenHead();
    if (was !== tokenView) {
      showOutput();
      schedule(); // the Markdown catches up with text that came while tokens were shown
    }
  }

  // ---- raw toggle, copy buttons, scrolling ---------------------------------
  on(rawBtn, "click", () => {
    if (tokenView) return;
    rawMode = !rawMode;
    rawBtn.setAttribute("aria-pressed", String(rawMode));
    showOutput();
  });

  on(output, "click", (/** @type {MouseEvent} */ e) => {
    const btn = /** @type {Element} */ (e.target).closest?.(".nbstream-copy");
    if (!btn || !output.contains(btn)) return;
    const code = btn.parentElement?.querySelector("code, pre");
    const src = code ? code.textContent || "" : "";
    copyText(src, root).then((ok) => {
      if (disposed) return;
      btn.textContent = ok ? "Copied ✓" : "Copy failed";
      btn.classList.add("nbstream-copied");
      later(() => {
        btn.textContent = "Copy";
        btn.classList.remove("nbstream-copied");
      }, COPY_FEEDBACK_MS);
    });
  });

  on(
    output,
    "scroll",
    () => {
      follow = output.scrollHeight - output.scrollTop - output.clientHeight <= FOLLOW_SLACK_PX;
    },
    { passive: true },
  );

  // ---- start ------------------------------------------------------------------
  updateLabel();
  updateTokenView();
  updateChrome();
  live.sync();
  const removed = watchRemoval(el, (m) => model.send(m), viewId);

  return () => {
    disposed = true;
    removed();
    tokens.dispose();
    for (const [name, fn] of modelHandlers) model.off(name, fn);
    modelHandlers.length = 0;
    ac.abort();
    if (rafId) cancelAnimationFrame(rafId);
    rafId = 0;
    for (const t of timers) clearTimeout(t);
    timers.clear();
    promptTimer = null;
  };
}

export default { render };
