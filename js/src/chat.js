// nbstream — browser front end of `nbstream.chat.ChatWidget` (an anywidget).
//
// Built by js/build.mjs into nbstream/static/chat.js (ESM, minified, with
// markdown-it and DOMPurify bundled). The rendering (markdown.js,
// incremental.js), the run-text protocol, badge and metrics line (common.js)
// are the StreamWidget's (widget.js).
//
// ---------------------------------------------------------------------------
// Synced traits. Mirror of the Python class `ChatWidget` in nbstream/chat.py
// (status, metrics, error_info, input_error and run_id come from its base,
// `RunWidget` in nbstream/_widget_base.py): keep them in step.
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
 * @property {boolean} in_history     whether the next send gives it to the model
 * @property {Status} [status]        assistant: the answer's end state (or its state when it started)
 * @property {number | null} [run_id] assistant: the run that produced it (null: seeded from Python)
 * @property {boolean} [kept]         assistant: a partial answer the user kept in the history
 * @property {{type: string, message: string} | null} [error] assistant: why it failed
 */

/**
 * The synced traits of `ChatWidget`.
 * @typedef {object} ChatWidgetTraits
 * @property {Status} status          state of the current (newest) run, or idle
 * @property {object} metrics         its metrics (set at start and end)
 * @property {{type: string, message: string} | null} error_info its error
 * @property {string} input_error     a problem with the last request of a view (nothing started)
 * @property {number} run_id          incremented at each run (and when the chat is cleared)
 * @property {Message[]} _messages    the transcript
 * @property {string | null} system   the system message (two-way, the settings panel)
 * Also the settings (alternatives included), settings_errors, settings_defaults,
 * prompt_text, prompt_tokens, show_tokens, show_probabilities, show_alternatives and
 * can_trace of the StreamWidget (widget.js, js/src/settings.js, js/src/tokens.js): with a
 * token view on, each assistant message that came from a run shows its tokens.
 */

/**
 * Custom messages, JS → Python.
 * @typedef {{type: "send", text: string}
 *   | {type: "edit_last", text: string}
 *   | {type: "regenerate"}
 *   | {type: "keep", turn: number}
 *   | {type: "clear"}
 *   | {type: "stop"}
 *   | {type: "sync", view: string}} OutgoingMessage
 * Python → JS: `delta` and `reset` of the current run, as for the StreamWidget, and
 * `tokens` of any turn's run (by its run_id; see TokensMessage in widget.js).
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

/** @typedef {import("./incremental.js").FrameStats} FrameStats */

/**
 * What the view keeps per message element.
 * @typedef {object} Entry
 * @property {string} key
 * @property {Message} msg
 * @property {HTMLElement} el
 * @property {HTMLElement | null} output   assistant: the output area
 * @property {TextRenderer | null} renderer
 * @property {string} shown                text in the renderer
 * @property {boolean} shownActive         rendered as streaming
 * @property {HTMLElement} partialLabel
 * @property {HTMLElement} errorEl
 * @property {HTMLElement} actions
 * @property {HTMLElement} note             assistant: "made without probabilities"
 */

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
  const root = h("div", "nbstream nbstream-chat", {
    "data-status": "idle",
    "data-version": VERSION,
  });

  const badge = makeBadge();
  const metricsEl = h("span", "nbstream-metrics");
  const rawBtn = h("button", "nbstream-raw-toggle", {
    type: "button",
    "aria-label": "Raw text",
    "aria-pressed": "false",
  });
  rawBtn.textContent = "Raw text";
  rawBtn.title = "Show the answers' raw text instead of rendered Markdown";
  const clearBtn = h("button", "nbstream-clear", { type: "button", "aria-label": "Clear chat" });
  clearBtn.textContent = "Clear chat";
  clearBtn.title = "Stop any answer and start the conversation afresh";
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
  const toggles = tokenToggles({ model, on, onModel, changed: () => updateTokenView() });
  const bar = h("div", "nbstream-bar");
  bar.append(badge, metricsEl, rawBtn, toggles.group, templated.toggle, settings.toggle, clearBtn);
  // The token views' legend (one for the conversation) and the remote-model note.
  const tokenHead = h("div", "nbstream-token-head");
  const legend = makeLegend();
  const remoteNote = makeNote("remote");

  const list = h("div", "nbstream-messages", { "aria-label": "Conversation", tabindex: "0" });

  const message = h("textarea", "nbstream-prompt", {
    "aria-label": "Message",
    rows: "2",
    placeholder: "Message the model… (Shift+Enter to send)",
    spellcheck: "true",
    // Lumino (JupyterLab / Notebook 7) skips its keyboard shortcuts for
    // events from inside this element: Shift+Enter must not run the cell.
    "data-lm-suppress-shortcuts": "true",
  });
  const sendBtn = h("button", "nbstream-run nbstream-send", { type: "button", "aria-label": "Send" });
  sendBtn.innerHTML = '<span class="nbstream-btn-icon" aria-hidden="true">▶</span>Send';
  sendBtn.title = "Send (Shift+Enter)";
  const stopBtn = h("button", "nbstream-stop", { type: "button", "aria-label": "Stop" });
  stopBtn.innerHTML = '<span class="nbstream-btn-icon" aria-hidden="true">■</span>Stop';
  const actions = h("div", "nbstream-actions");
  actions.append(sendBtn, stopBtn);
  const promptRow = h("div", "nbstream-prompt-row");
  promptRow.append(message, actions);
  const editNote = h("div", "nbstream-edit-note");
  const editText = h("span");
  editText.textContent = "Editing your last message: Send replaces it and its answer.";
  const cancelEditBtn = h("button", "nbstream-cancel-edit", {
    type: "button",
    "aria-label": "Cancel edit",
  });
  cancelEditBtn.textContent = "Cancel edit";
  editNote.append(editText, cancelEditBtn);
  const inputErrorId = `nbstream-input-error-${viewId}`;
  const inputErrorEl = h("div", "nbstream-input-error", { role: "alert", id: inputErrorId });

  root.append(bar, settings.panel, templated.view, tokenHead, list, promptRow);
  el.append(root);

  // ---- view state ----------------------------------------------------------
  /** @type {Entry[]} */
  let entries = [];
  let rawMode = false;
  let follow = true;
  let editing = false;
  /** @type {string | null} text this view sent, cleared from the box once its run starts */
  let pending = null;
  let rafId = 0;
  let tokenView = false; // answers show their tokens
  /** @type {Map<number, TokenList>} each run's tokens, by run_id */
  const tokenLists = new Map();

  const live = new LiveText(Number(model.get("run_id")) || 0, viewId, (m) => model.send(m), {
    clear: schedule,
    grew: schedule,
  });

  function status() {
    const s = String(model.get("status") ?? "idle");
    return STATUSES.includes(s) ? s : "idle";
  }

  /** @returns {Message[]} */
  function messages() {
    const m = model.get("_messages");
    return Array.isArray(m) ? m : [];
  }

  /** Whether entry i is the answer being streamed (the current run's, the newest). */
  function isLive(e, i) {
    const rid = Number(model.get("run_id")) || 0;
    return e.msg.role === "assistant" && e.msg.run_id === rid && i === entries.length - 1;
  }

  /** The answer's state: the current run's for the live one, else its own. */
  function statusOf(e, i) {
    if (isLive(e, i)) return status();
    const s = String(e.msg.status ?? "complete");
    return STATUSES.includes(s) ? s : "complete";
  }

  /** The text an answer shows: what streamed so far while it is live, its content after. */
  function textOf(e, i) {
    if (isLive(e, i) && ACTIVE.has(status())) {
      return live.runId === e.msg.run_id ? live.text : "";
    }
    return String(e.msg.content ?? "");
  }

  // ---- messages ------------------------------------------------------------
  /** @param {Message} m @returns {Entry} */
  function makeEntry(m) {
    const key = keyOf(m);
    const elm = h("div", "nbstream-message", { "data-role": m.role });
    const who = h("div", "nbstream-message-role");
    who.textContent = m.role === "user" ? "You" : "Assistant";
    elm.append(who);
    /** @type {Entry} */
    const e = {
      key,
      msg: m,
      el: elm,
      output: null,
      renderer: null,
      shown: "",
      shownActive: false,
      partialLabel: h("div", "nbstream-partial-label"),
      errorEl: h("div", "nbstream-error", { role: "alert" }),
      actions: h("div", "nbstream-message-actions"),
      note: makeNote("capture"),
    };
    if (m.role === "user") {
      const text = h("div", "nbstream-message-text");
      text.textContent = String(m.content ?? "");
      elm.append(text);
    } else {
      const output = h("div", "nbstream-output", {
        role: "log",
        "aria-label": "Answer",
        "aria-live": "polite",
        "aria-relevant": "additions",
        "aria-atomic": "false",
        "data-partial": "false",
        "data-empty": "true",
      });
      const rendered = h("div", "nbstream-rendered");
      const rawPre = h("pre", "nbstream-raw");
      e.output = output;
      e.renderer = new TextRenderer(rendered, rawPre);
      elm.append(output);
      showOutput(e);
    }
    elm.append(e.actions);
    return e;
  }

  // ---- token views ---------------------------------------------------------------
  /** The tokens of run `rid` (made on first use: its tokens may come before its message). */
  function tokensOf(rid) {
    let t = tokenLists.get(rid);
    if (!t) {
      t = new TokenList(rid, {
        label: "Answer tokens",
        changed: () => {
          updateNotes();
          schedule();
        },
        opened: () => {
          follow = false;
        },
        closeOthers: (keep) => {
          for (const other of tokenLists.values()) if (other !== keep) other.close();
        },
      });
      t.setModes(tokenModes(model));
      tokenLists.set(rid, t);
    }
    return t;
  }

  /** The token list an answer shows, or null (no run made it: seeded from Python). */
  function listOf(e) {
    const rid = e.msg.run_id;
    return e.msg.role === "assistant" && typeof rid === "number" ? tokensOf(rid) : null;
  }

  /** What an answer's output shows: its tokens, its raw text or its rendered Markdown. */
  function showOutput(e) {
    if (!e.output || !e.renderer) return;
    const tl = tokenView ? listOf(e) : null;
    const want = tl ? tl.el : rawMode ? e.renderer.rawPre : e.renderer.rendered;
    if (e.output.firstChild !== want || e.output.childNodes.length !== 1) e.output.replaceChildren(want);
  }

  /** The legend, the remote note, and each answer's "made without probabilities" note. */
  function updateNotes() {
    const modes = tokenModes(model);
    const local = canTrace(model);
    /** @type {HTMLElement[]} */
    const want = [];
    if (modes.any && !local) want.push(remoteNote);
    if (local && modes.probs) want.push(legend);
    const have = [...tokenHead.children];
    if (have.length !== want.length || have.some((x, k) => x !== want[k])) tokenHead.replaceChildren(...want);
    tokenHead.hidden = want.length === 0;
    for (const e of entries) {
      if (!e.output) continue;
      const tl = tokenView ? listOf(e) : null;
      const show = !!tl && (modes.probs || modes.alts) && tl.noCapture;
      if (show && !e.note.isConnected) e.output.before(e.note);
      else if (!show && e.note.isConnected) e.note.remove();
    }
  }

  function updateTokenView() {
    const modes = tokenModes(model);
    const was = tokenView;
    tokenView = modes.any && canTrace(model);
    for (const t of tokenLists.values()) t.setModes(modes);
    root.setAttribute("data-token-view", String(tokenView));
    rawBtn.disabled = tokenView;
    rawBtn.title = tokenView
      ? "The token view is shown: turn Tokens, Probabilities and Alternatives off for the text"
      : "Show the answers' raw text instead of rendered Markdown";
    if (was !== tokenView) {
      for (const e of entries) showOutput(e);
      schedule(); // the Markdown catches up with text that came while tokens were shown
    }
    updateNotes();
  }

  /** A `tokens` message: for the turn whose run it is. */
  function onTokens(msg) {
    const rid = Number(msg.run_id);
    if (!Number.isInteger(rid)) return;
    if (tokensOf(rid).apply(msg) === "gap") live.requestSync();
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
    while (list.children.length > entries.length) list.lastElementChild?.remove();
    updateNotes();
    updateChrome();
    schedule();
  }

  /** A message's attributes, labels and buttons. @param {Entry} e @param {number} i */
  function updateEntry(e, i, active) {
    const m = e.msg;
    e.el.setAttribute("data-in-history", String(!!m.in_history));
    const buttons = [];
    const lastTurn = entries.length ? entries[entries.length - 1].msg.turn : -1;
    if (m.role === "user") {
      if (m.turn === lastTurn && !active) buttons.push(["Edit", "edit", "Edit this message and send it again"]);
    } else {
      const s = statusOf(e, i);
      e.el.setAttribute("data-status", s);
      const text = textOf(e, i);
      const output = /** @type {HTMLElement} */ (e.output);
      output.setAttribute("data-partial", String(text.length > 0 && PARTIAL.has(s)));
      output.setAttribute("data-empty", String(!text));
      output.setAttribute("aria-busy", String(ACTIVE.has(s)));
      if (text && (s === "cancelled" || s === "failed")) {
        const kept = m.kept ? " (kept in the conversation)" : "";
        e.partialLabel.textContent = `Partial output — run ${s}${kept}`;
        if (!e.partialLabel.isConnected) output.before(e.partialLabel);
      } else if (e.partialLabel.isConnected) {
        e.partialLabel.remove();
      }
      if (s === "failed") {
        const info = (isLive(e, i) ? model.get("error_info") : m.error) || {};
        const msg = [info.type, info.message].filter((x) => x).join(": ");
        e.errorEl.textContent = msg || "Run failed";
        if (!e.errorEl.isConnected) output.after(e.errorEl);
      } else if (e.errorEl.isConnected) {
        e.errorEl.remove();
      }
      if (!active && text && (s === "cancelled" || s === "failed") && !m.kept) {
        buttons.push(["Keep partial", "keep", "Keep this partial answer in the conversation"]);
      }
      if (!active && i === entries.length - 1) {
        buttons.push(["Regenerate", "regenerate", "Answer the last message again"]);
      }
    }
    const want = buttons.map((b) => b[1]).join(",");
    if (e.actions.dataset.buttons !== want) {
      e.actions.dataset.buttons = want;
      e.actions.replaceChildren(
        ...buttons.map(([label, action, title]) => {
          const b = h("button", `nbstream-${action}`, {
            type: "button",
            "aria-label": label,
            "data-action": action,
          });
          b.textContent = label;
          b.title = title;
          return b;
        }),
      );
    }
  }

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
    let chars = 0;
    entries.forEach((e, i) => {
      if (!e.renderer) return;
      // An answer showing its tokens: its Markdown is brought up to date when shown again.
      if (tokenView && listOf(e)) return;
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
    if (follow) list.scrollTop = list.scrollHeight;
    const log = renderLog();
    log.push({ ms: performance.now() - t0, js: t1 - t0, chars, parsed: st.parsed, nodes: st.nodes });
    if (log.length > RENDER_LOG_MAX + 1000) log.splice(0, log.length - RENDER_LOG_MAX);
  }

  // ---- chrome ----------------------------------------------------------------
  function updateChrome() {
    const s = status();
    root.setAttribute("data-status", s);
    setBadge(badge, s);
    const active = ACTIVE.has(s);
    sendBtn.disabled = active;
    stopBtn.disabled = !active;
    clearBtn.disabled = entries.length === 0;
    settings.update();
    entries.forEach((e, i) => updateEntry(e, i, active));
    if (editing && (active || !entries.some((e) => e.msg.role === "user"))) setEditing(false);

    const inputError = String(model.get("input_error") ?? "");
    if (inputError) {
      inputErrorEl.textContent = inputError;
      if (!inputErrorEl.isConnected) promptRow.after(inputErrorEl);
      message.setAttribute("aria-invalid", "true");
      message.setAttribute("aria-describedby", inputErrorId);
    } else if (inputErrorEl.isConnected) {
      inputErrorEl.remove();
      message.removeAttribute("aria-invalid");
      message.removeAttribute("aria-describedby");
    }
    updateMetrics();
  }

  function updateMetrics() {
    showMetrics(metricsEl, status(), model.get("metrics") || {}, live.liveTokens, live.liveElapsed);
  }

  /** @param {boolean} value */
  function setEditing(value) {
    editing = value;
    sendBtn.lastChild.textContent = value ? "Resend" : "Send";
    if (value && !editNote.isConnected) promptRow.before(editNote);
    else if (!value && editNote.isConnected) editNote.remove();
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
  onModel("change:run_id", () => {
    if (pending !== null && message.value === pending) {
      message.value = ""; // the message this view sent is in the transcript now
      setEditing(false);
    }
    pending = null;
    live.newRun(Number(model.get("run_id")) || 0);
    updateChrome();
    schedule();
  });
  onModel("change:_messages", syncEntries);
  onModel("change:status", () => {
    if (!ACTIVE.has(status())) {
      // The run ended: render the answer in full now, while it is still aria-busy.
      if (rafId) cancelAnimationFrame(rafId);
      frame();
    }
    updateChrome();
    schedule();
  });
  onModel("change:metrics", updateMetrics);
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
  on(message, "keydown", (/** @type {KeyboardEvent} */ e) => {
    if (e.key !== "Enter" || e.isComposing) return;
    if (!(e.shiftKey || e.ctrlKey || e.metaKey)) return;
    e.preventDefault();
    e.stopPropagation();
    send();
  });
  on(sendBtn, "click", send);
  on(stopBtn, "click", () => {
    if (!stopBtn.disabled) model.send({ type: "stop" });
  });
  on(clearBtn, "click", () => {
    if (!clearBtn.disabled) model.send({ type: "clear" });
  });
  on(cancelEditBtn, "click", () => {
    setEditing(false);
    message.value = "";
  });

  // ---- message buttons, copy buttons, raw toggle, scrolling ------------------
  on(list, "click", (/** @type {MouseEvent} */ ev) => {
    const target = /** @type {Element} */ (ev.target);
    const btn = target.closest?.("button");
    if (!btn || !list.contains(btn)) return;
    if (btn.classList.contains("nbstream-copy")) {
      const code = btn.parentElement?.querySelector("code, pre");
      copyText(code ? code.textContent || "" : "", root).then((ok) => {
        if (disposed) return;
        btn.textContent = ok ? "Copied ✓" : "Copy failed";
        btn.classList.add("nbstream-copied");
        later(() => {
          btn.textContent = "Copy";
          btn.classList.remove("nbstream-copied");
        }, COPY_FEEDBACK_MS);
      });
      return;
    }
    const entry = entries.find((e) => e.el.contains(btn));
    if (!entry) return;
    const action = btn.getAttribute("data-action");
    if (action === "keep") model.send({ type: "keep", turn: entry.msg.turn });
    else if (action === "regenerate") model.send({ type: "regenerate" });
    else if (action === "edit") {
      message.value = String(entry.msg.content ?? "");
      setEditing(true);
      message.focus();
    }
  });

  on(rawBtn, "click", () => {
    if (tokenView) return;
    rawMode = !rawMode;
    rawBtn.setAttribute("aria-pressed", String(rawMode));
    for (const e of entries) showOutput(e);
    if (follow) list.scrollTop = list.scrollHeight;
  });

  on(
    list,
    "scroll",
    () => {
      follow = list.scrollHeight - list.scrollTop - list.clientHeight <= FOLLOW_SLACK_PX;
    },
    { passive: true },
  );

  // ---- start ------------------------------------------------------------------
  updateTokenView();
  syncEntries();
  live.sync();
  const removed = watchRemoval(el, (m) => model.send(m), viewId);

  return () => {
    disposed = true;
    removed();
    for (const t of tokenLists.values()) t.dispose();
    tokenLists.clear();
    for (const [name, fn] of modelHandlers) model.off(name, fn);
    modelHandlers.length = 0;
    ac.abort();
    if (rafId) cancelAnimationFrame(rafId);
    rafId = 0;
    for (const t of timers) clearTimeout(t);
    timers.clear();
  };
}

export default { render };
