// nbstream front end: what the StreamWidget view (stream.js) and the ChatWidget view
// (chat.js) share besides rendering: a view's lifecycle (listeners, timers and frames its
// cleanup takes away), states and their badge, the metrics line, the delta / reset protocol
// of a run's text, the parts of the chrome both have, and small DOM helpers. The
// CompareWidget header (compare.js) uses the lifecycle and the prompt box.

const STATUSES = ["idle", "queued", "running", "complete", "failed", "cancelled"];
/**
 * Word and glyph per status: the state is shown by word AND look, never colour alone.
 * @type {Record<string, [string, string]>}
 */
const BADGE = {
  idle: ["idle", "○"],
  queued: ["queued…", "◌"],
  running: ["running…", ""], // the glyph is a CSS spinner
  complete: ["complete", "✓"],
  failed: ["failed", "✕"],
  cancelled: ["cancelled", "■"],
  // Not a run's state: the view lost its kernel (see watchConnection).
  disconnected: ["disconnected", "⚠"],
  // Not a run's state: a saved run played again in the page (replay.js).
  replaying: ["replaying…", "▶"],
};
/** A complete run that ended at max_new_tokens (finish_reason "length"): a normal end, but
 * not the model's own; nbstream/widgets/display.py's CUT says the same in saved outputs. */
const CUT = "stopped at max_new_tokens";
/**
 * How the metrics line says why a run ended, in words for a beginner (the raw
 * finish_reason is in its tooltip). An end the badge or the error already says (cut at
 * max_new_tokens, cancelled, failed) is not said again.
 * @type {Record<string, string>}
 */
const FINISH_WORDS = {
  eos: "ended by the model",
  stop: "ended at a stop string",
};
/** What a view shows once its kernel has gone (see watchConnection). */
const DISCONNECTED = "the kernel restarted: run the cell again";
/** nbstream's version, put in by js/build.mjs from nbstream/_version.py. */
// eslint-disable-next-line no-undef
const VERSION = typeof __NBSTREAM_VERSION__ === "string" ? __NBSTREAM_VERSION__ : "unknown";
const ACTIVE = new Set(["queued", "running"]);
const PARTIAL = new Set(["queued", "running", "failed", "cancelled"]);

const SYNC_RETRY_MS = 1500;
const PROMPT_DEBOUNCE_MS = 300;
const COPY_FEEDBACK_MS = 1500;
const FOLLOW_SLACK_PX = 12;
const RENDER_LOG_MAX = 10000;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/** Number of Unicode code points in s. @param {string} s */
function codePoints(s) {
  let n = s.length;
  for (let i = 0; i < s.length - 1; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        n--;
        i++;
      }
    }
  }
  return n;
}

/** UTF-16 index where the last `k` code points of s start. @param {string} s @param {number} k */
function indexFromEnd(s, k) {
  let i = s.length;
  for (; k > 0 && i > 0; k--) {
    i--;
    const c = s.charCodeAt(i);
    if (c >= 0xdc00 && c <= 0xdfff && i > 0) {
      const p = s.charCodeAt(i - 1);
      if (p >= 0xd800 && p <= 0xdbff) i--;
    }
  }
  return i;
}

/** UTF-16 index of code point k of s, or -1 if s is shorter. @param {string} s @param {number} k */
function indexOfCodePoint(s, k) {
  let i = 0;
  for (; k > 0; k--) {
    if (i >= s.length) return -1;
    const c = s.charCodeAt(i);
    i += c >= 0xd800 && c <= 0xdbff && i + 1 < s.length ? 2 : 1;
  }
  return i;
}

/** A finite number. @param {unknown} x @returns {x is number} */
function isNum(x) {
  return typeof x === "number" && Number.isFinite(x);
}

/** @param {number} s */
function fmtSeconds(s) {
  const digits = s < 1 ? 2 : s < 100 ? 1 : 0;
  return `${s.toFixed(digits)} s`;
}

function newViewId() {
  const c = globalThis.crypto;
  if (c && typeof c.randomUUID === "function") return c.randomUUID();
  return `v${Math.random().toString(36).slice(2)}${Date.now().toString(36)}`;
}

/** @returns {Array<{ms: number, js: number, chars: number, parsed: number, nodes: number}>} */
function renderLog() {
  const g = /** @type {any} */ (globalThis);
  if (!Array.isArray(g.__nbstreamRenderTimes)) g.__nbstreamRenderTimes = [];
  return g.__nbstreamRenderTimes;
}

/**
 * Record the cost of one frame in the page's render log (read by the tests and the
 * benchmarks; bounded, so a long session does not grow it without end).
 * @param {number} t0 performance.now() at the frame's start @param {number} t1 after its JS work
 * @param {number} chars text length rendered @param {{parsed: number, nodes: number}} st
 */
function logFrame(t0, t1, chars, st) {
  const log = renderLog();
  log.push({ ms: performance.now() - t0, js: t1 - t0, chars, parsed: st.parsed, nodes: st.nodes });
  if (log.length > RENDER_LOG_MAX + 1000) log.splice(0, log.length - RENDER_LOG_MAX);
}

/**
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag @param {string} [cls] @param {Record<string, string>} [attrs]
 * @returns {HTMLElementTagNameMap[K]}
 */
function h(tag, cls, attrs) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (attrs) for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

/**
 * Copy text to the clipboard; falls back to execCommand where the API is missing or refused.
 * @param {string} text @param {HTMLElement} host where the fallback's hidden textarea goes
 * @returns {Promise<boolean>} whether it worked
 */
async function copyText(text, host) {
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return true;
    }
  } catch {
    // fall through to the legacy path
  }
  const ta = h("textarea", "nbstream-copy-buffer", { readonly: "", "aria-hidden": "true" });
  ta.value = text;
  host.append(ta);
  ta.select();
  let ok = false;
  try {
    ok = document.execCommand("copy");
  } catch {
    ok = false;
  }
  ta.remove();
  return ok;
}

// ---------------------------------------------------------------------------
// A view's lifecycle
// ---------------------------------------------------------------------------

/**
 * @typedef {object} ViewScope
 * @property {boolean} disposed  true once the view is gone (late promises check it)
 * @property {(target: EventTarget, type: string, fn: (e: any) => void, opts?: AddEventListenerOptions) => void} on
 *   a DOM listener
 * @property {(name: string, fn: Function) => void} onModel  a model listener
 * @property {(fn: () => void, ms: number) => ReturnType<typeof setTimeout>} later  a timer
 * @property {(t: ReturnType<typeof setTimeout> | null) => void} cancel  a timer of `later`
 * @property {(draw: () => void) => {schedule: () => void, now: () => void}} frames
 *   drawing at most once per animation frame: schedule() asks for a frame, now() draws at
 *   once (a pending frame is dropped)
 * @property {(fn: () => void) => void} defer  more to do at cleanup (run first, in order)
 * @property {() => void} dispose  the view's cleanup
 */

/**
 * What one view adds to the page and to the model, kept so that its cleanup (anywidget
 * calls what render returns) takes all of it away: nothing of a view keeps running, or
 * answers the model, after it is gone. The functions need no `this`: pass them on as they
 * are (the settings panel takes on / onModel / later).
 * @param {any} model
 * @returns {ViewScope}
 */
function viewScope(model) {
  const ac = new AbortController();
  /** @type {Array<[string, Function]>} */
  const handlers = [];
  /** @type {Set<ReturnType<typeof setTimeout>>} */
  const timers = new Set();
  /** @type {Array<() => void>} */
  const deferred = [];
  /** @type {ViewScope} */
  const scope = {
    disposed: false,
    on(target, type, fn, opts) {
      target.addEventListener(type, fn, { ...opts, signal: ac.signal });
    },
    onModel(name, fn) {
      model.on(name, fn);
      handlers.push([name, fn]);
    },
    later(fn, ms) {
      const t = setTimeout(() => {
        timers.delete(t);
        fn();
      }, ms);
      timers.add(t);
      return t;
    },
    cancel(t) {
      if (t == null) return;
      clearTimeout(t);
      timers.delete(t);
    },
    frames: (draw) => animationFrames(scope, draw),
    defer(fn) {
      deferred.push(fn);
    },
    dispose() {
      scope.disposed = true;
      for (const fn of deferred.splice(0)) fn();
      for (const [name, fn] of handlers) model.off(name, fn);
      handlers.length = 0;
      ac.abort();
      for (const t of timers) clearTimeout(t);
      timers.clear();
    },
  };
  return scope;
}

/**
 * A view's drawing, at most once per animation frame (ViewScope.frames): a frame pending
 * when the view goes is cancelled, and none draws once it is gone.
 * @param {ViewScope} scope @param {() => void} draw
 */
function animationFrames(scope, draw) {
  let rafId = 0;
  const frame = () => {
    rafId = 0;
    if (!scope.disposed) draw();
  };
  scope.defer(() => {
    if (rafId) cancelAnimationFrame(rafId);
    rafId = 0;
  });
  return {
    schedule() {
      if (!rafId && !scope.disposed) rafId = requestAnimationFrame(frame);
    },
    now() {
      if (rafId) cancelAnimationFrame(rafId);
      frame();
    },
  };
}

/**
 * The status trait, one of STATUSES (anything else reads as idle).
 * @param {any} model
 */
function modelStatus(model) {
  const s = String(model.get("status") ?? "idle");
  return STATUSES.includes(s) ? s : "idle";
}

/**
 * A view's part of the run protocol (`msg:custom`): `delta` and `reset` messages go to
 * `live`; the view then updates its chrome when text came, its metrics line when only the
 * counters did, and redraws after a reset. `tokens` messages go to `tokens`. A reasoning
 * model's `thinking` messages, and the resets this view applied (their thinking), go to
 * `thinking` (the view's LiveThinking, js/src/thinking.js); while the run thinks their
 * counters are the metrics line's (thinkingCounters).
 * @param {ViewScope} scope @param {LiveText} live
 * @param {{chrome: () => void, metrics: () => void, redraw: () => void,
 *          tokens: (msg: any) => void, thinking?: {receive: (msg: any) => void}}} view
 * @returns {(msg: any) => void} the handler, for messages that come another way (pulled)
 */
function onRunMessages(scope, live, view) {
  const receive = (/** @type {any} */ msg) => {
    if (scope.disposed || !msg || typeof msg !== "object") return;
    if (msg.type === "delta") {
      const what = live.delta(msg);
      if (what === "text") view.chrome();
      else if (what === "counters") view.metrics();
    } else if (msg.type === "reset" && live.reset(msg)) {
      view.thinking?.receive(msg); // a reasoning model's thinking so far
      view.redraw();
      view.chrome();
    } else if (msg.type === "thinking") {
      view.thinking?.receive(msg);
      if (thinkingCounters(live, msg)) view.metrics();
    } else if (msg.type === "tokens") {
      view.tokens(msg);
    }
  };
  scope.onModel("msg:custom", receive);
  return receive; // a pulled message goes the same way (pull.js)
}

/**
 * While a run thinks no answer delta comes: its `thinking` messages carry the live counters
 * of the metrics line instead (its `tokens` are then all the run's tokens). True if they did.
 * @param {{runId: number, liveTokens: number | null, liveElapsed: number | null}} live the answer's LiveText
 * @param {any} msg
 */
function thinkingCounters(live, msg) {
  if (msg.type !== "thinking" || msg.done === true || Number(msg.run_id) !== live.runId) return false;
  if (typeof msg.tokens === "number") live.liveTokens = msg.tokens;
  if (typeof msg.elapsed_s === "number") live.liveElapsed = msg.elapsed_s;
  return true;
}

// ---------------------------------------------------------------------------
// Chrome both views have
// ---------------------------------------------------------------------------

/**
 * A prompt box. Lumino (JupyterLab / Notebook 7) skips its keyboard shortcuts for events
 * from inside it: Shift+Enter must not run the cell.
 * @param {string} cls @param {string} label @param {number} rows @param {string} placeholder
 */
function promptBox(cls, label, rows, placeholder) {
  return h("textarea", cls, {
    "aria-label": label,
    rows: String(rows),
    placeholder,
    spellcheck: "true",
    "data-lm-suppress-shortcuts": "true",
  });
}

/**
 * An output area: a log (aria-busy while a run streams, see markOutput) that does not
 * announce its fragments (aria-live off: a screen reader cannot follow a stream said a
 * piece at a time); the view's announcer says the end once (announce.js). data-partial /
 * data-empty are kept by markOutput.
 * @param {string} label its accessible name
 */
function outputArea(label) {
  return h("div", "nbstream-output", {
    role: "log",
    "aria-label": label,
    "aria-live": "off",
    "data-partial": "false",
    "data-empty": "true",
  });
}

/**
 * A button with a glyph before its word; the glyph is decoration (aria-hidden), the word
 * is also its accessible name.
 * @param {string} cls @param {string} label @param {string} glyph @param {string} [title]
 */
function iconButton(cls, label, glyph, title) {
  const b = h("button", cls, { type: "button", "aria-label": label });
  b.innerHTML = `<span class="nbstream-btn-icon" aria-hidden="true">${glyph}</span>${label}`;
  if (title) b.title = title;
  return b;
}

/**
 * Shift+Enter (or Ctrl / Cmd+Enter) in `box` calls `fn`; the key goes no further (not to
 * the notebook). Enter alone types a newline; nothing happens while an IME composes.
 * @param {ViewScope} scope @param {HTMLElement} box @param {() => void} fn
 */
function onSubmitKey(scope, box, fn) {
  scope.on(box, "keydown", (/** @type {KeyboardEvent} */ e) => {
    if (e.key !== "Enter" || e.isComposing) return;
    if (!(e.shiftKey || e.ctrlKey || e.metaKey)) return;
    e.preventDefault();
    e.stopPropagation();
    fn();
  });
}

/**
 * Keep a text box and a string trait in step both ways: typing saves the trait (debounced,
 * at once on blur); the kernel's value shows unless the user is typing (their words win
 * until saved).
 * @param {ViewScope} scope @param {any} model
 * @param {HTMLTextAreaElement} box @param {string} trait
 * @returns {() => void} save now (before a run: the run must see what was typed)
 */
function syncedText(scope, model, box, trait) {
  let dirty = false;
  /** @type {ReturnType<typeof setTimeout> | null} */
  let timer = null;
  box.value = String(model.get(trait) ?? "");
  const save = () => {
    scope.cancel(timer);
    timer = null;
    dirty = false;
    model.set(trait, box.value);
    model.save_changes();
  };
  scope.onModel(`change:${trait}`, () => {
    const v = String(model.get(trait) ?? "");
    if (!dirty && box.value !== v) box.value = v;
  });
  scope.on(box, "input", () => {
    dirty = true;
    scope.cancel(timer);
    timer = scope.later(() => {
      timer = null;
      save();
    }, PROMPT_DEBOUNCE_MS);
  });
  scope.on(box, "blur", () => {
    if (dirty) save();
  });
  return save;
}

/**
 * The Raw text toggle: the exact text instead of rendered Markdown. `changed` runs after
 * each switch; block(why) turns it off and says why in its title ("" turns it on again).
 * @param {ViewScope} scope @param {string} title @param {() => void} changed
 * @returns {{button: HTMLButtonElement, raw: boolean, block: (why: string) => void}}
 */
function rawToggle(scope, title, changed) {
  const button = h("button", "nbstream-raw-toggle", {
    type: "button",
    "aria-label": "Raw text",
    "aria-pressed": "false",
  });
  button.textContent = "Raw text";
  button.title = title;
  const toggle = {
    button,
    raw: false,
    /** @param {string} why */
    block(why) {
      button.disabled = !!why;
      button.title = why || title;
    },
  };
  scope.on(button, "click", () => {
    if (button.disabled) return;
    toggle.raw = !toggle.raw;
    button.setAttribute("aria-pressed", String(toggle.raw));
    changed();
  });
  return toggle;
}

/**
 * Whether a scrolling element follows the end of what streams in: yes until the user
 * scrolls up (more than FOLLOW_SLACK_PX from the end), again once they scroll back down.
 * @param {ViewScope} scope @param {HTMLElement} el
 * @returns {{on: boolean, stick: () => void}} stick(): bring the end into sight if following
 */
function follower(scope, el) {
  const follow = {
    on: true,
    stick() {
      if (follow.on) el.scrollTop = el.scrollHeight;
    },
  };
  scope.on(
    el,
    "scroll",
    () => {
      follow.on = el.scrollHeight - el.scrollTop - el.clientHeight <= FOLLOW_SLACK_PX;
    },
    { passive: true },
  );
  return follow;
}

/**
 * The Copy button of a code block was clicked: copy the code, and say on the button for a
 * moment whether it worked.
 * @param {ViewScope} scope @param {HTMLElement} btn @param {HTMLElement} host where the
 *   fallback's hidden textarea goes
 */
function copyCode(scope, btn, host) {
  const code = btn.parentElement?.querySelector("code, pre");
  copyAnswer(scope, btn, code ? code.textContent || "" : "", host);
}

/**
 * Copy `text`, and say on the button for a moment whether it worked (its accessible name
 * stays; its word comes back after COPY_FEEDBACK_MS).
 * @param {ViewScope} scope @param {HTMLElement} btn @param {string} text
 * @param {HTMLElement} host where the fallback's hidden textarea goes
 */
function copyAnswer(scope, btn, text, host) {
  const word = btn.getAttribute("data-word") ?? btn.textContent ?? "";
  btn.setAttribute("data-word", word);
  copyText(text, host).then((ok) => {
    if (scope.disposed) return;
    btn.textContent = ok ? "Copied \u2713" : "Copy failed";
    btn.classList.add("nbstream-copied");
    scope.later(() => {
      btn.textContent = word;
      btn.classList.remove("nbstream-copied");
    }, COPY_FEEDBACK_MS);
  });
}

/** The StreamWidget's Copy answer button (the chat has one per answer). */
function copyAnswerButton() {
  const b = h("button", "nbstream-copy-answer", { type: "button", "aria-label": "Copy answer" });
  b.textContent = "Copy answer";
  b.title = "Copy the answer's exact text";
  return b;
}

/**
 * The bar under the prompt: a status line (badge, metrics; what the run did) and the tools
 * (toggles and buttons). The status line's flex basis is fixed (not its content), so the
 * tools stay on the row they were on whatever the metrics say: a run that ends with a
 * longer metrics line wraps that line inside the status line, never the tools onto a new
 * row (the layout does not jump).
 * @param {HTMLElement[]} status @param {HTMLElement[]} tools
 */
function statusBar(status, tools) {
  const bar = h("div", "nbstream-bar");
  const statusLine = h("div", "nbstream-status-line");
  statusLine.append(...status);
  const toolsEl = h("div", "nbstream-tools");
  toolsEl.append(...tools);
  bar.append(statusLine, toolsEl);
  return { bar, statusLine, tools: toolsEl };
}

/**
 * The figures of a refusal because the prompt plus max_new_tokens is over the model's
 * context (nbstream/backends/local.py's ContextLengthError, and the chat's wording of it),
 * or null for any other message.
 * @param {string} message
 * @returns {{prompt: number, maxNew: number, context: number} | null}
 */
function contextOverflow(message) {
  const m = /(\d+) tokens\)?,? plus max_new_tokens \((\d+)\)[\s\S]*?context of (\d+) tokens/.exec(message);
  return m ? { prompt: Number(m[1]), maxNew: Number(m[2]), context: Number(m[3]) } : null;
}

/**
 * The input_error trait (what was wrong with the last Run / Send; nothing started) under
 * the prompt row, tied by aria-describedby to what caused it: the prompt box, unless
 * `blame` takes it (the settings panel, for a max_new_tokens the context cannot hold).
 * @param {any} model @param {string} viewId @param {HTMLElement} box @param {HTMLElement} row
 * @param {(message: string | null) => boolean} [blame] called with the message (null once
 *   it is gone); true: a settings field shows it, the box is not marked
 * @returns {() => void} update
 */
function inputErrorView(model, viewId, box, row, blame) {
  const id = `nbstream-input-error-${viewId}`;
  const el = h("div", "nbstream-input-error", { role: "alert", id });
  return () => {
    const inputError = String(model.get("input_error") ?? "");
    const elsewhere = blame ? blame(inputError || null) : false;
    if (inputError) {
      el.textContent = inputError;
      if (!el.isConnected) row.after(el);
    } else if (el.isConnected) {
      el.remove();
    }
    if (inputError && !elsewhere) {
      box.setAttribute("aria-invalid", "true");
      box.setAttribute("aria-describedby", id);
    } else if (box.hasAttribute("aria-invalid")) {
      box.removeAttribute("aria-invalid");
      box.removeAttribute("aria-describedby");
    }
  };
}

/**
 * An output area's end-state marks: data-partial, data-empty and aria-busy on it; the
 * "Partial output" label above it (it has text, and the run was cancelled or failed); the
 * error below it (failed).
 * @param {{output: HTMLElement, partialLabel: HTMLElement, errorEl: HTMLElement}} els
 * @param {string} s the run's status @param {boolean} hasText
 * @param {() => any} errorInfo the error ({type, message}), asked for only when failed
 * @param {string} [more] said after "Partial output — <what happened>"
 */
function markOutput({ output, partialLabel, errorEl }, s, hasText, errorInfo, more = "") {
  output.setAttribute("data-partial", String(hasText && PARTIAL.has(s)));
  output.setAttribute("data-empty", String(!hasText));
  output.setAttribute("aria-busy", String(ACTIVE.has(s)));
  if (hasText && (s === "cancelled" || s === "failed")) {
    // The badge already says "cancelled": here, what it means for the text.
    const why = s === "cancelled" ? "stopped before its end" : "run failed";
    partialLabel.textContent = `Partial output — ${why}${more}`;
    if (!partialLabel.isConnected) output.before(partialLabel);
  } else if (partialLabel.isConnected) {
    partialLabel.remove();
  }
  if (s === "failed") {
    const info = errorInfo() || {};
    const msg = [info.type, info.message].filter((x) => x).join(": ");
    errorEl.textContent = msg || "Run failed";
    if (!errorEl.isConnected) output.after(errorEl);
  } else if (errorEl.isConnected) {
    errorEl.remove();
  }
}

/**
 * Set which of two buttons is live (the other disabled), and keep the keyboard user's
 * place: a focused button that disables itself drops the focus to the page body (where
 * JupyterLab's command-mode shortcuts would take the next key), so the focus moves to the
 * button that is live now (Run -> Stop -> Run).
 * @param {HTMLButtonElement} start Run / Send @param {HTMLButtonElement} stop
 * @param {boolean} active a run is queued or running (Stop is the live one)
 */
function swapButtons(start, stop, active) {
  const had = document.activeElement;
  start.disabled = active;
  stop.disabled = !active;
  const from = active ? start : stop;
  const to = active ? stop : start;
  if (had === from && !to.disabled) to.focus({ preventScroll: true });
}

/** How long the kernel has to act on a Stop before the view says why it has not. */
const STOP_GRACE_MS = 1000;
/** What the view says when a Stop is waiting for a kernel busy with another cell. */
const STOP_WAITING =
  "Stop is waiting: the kernel is busy with another cell, so the run stops when that cell " +
  "ends. Interrupt the kernel (\u25A0 in the notebook's toolbar) to stop now.";

/**
 * The notice under the Stop button when a Stop has not been acted on. The kernel handles
 * the Stop on its main thread, so while another cell blocks it the click waits, and the
 * run's own thread keeps streaming. The sign: STOP_GRACE_MS after the click the run is
 * still going and its text still arrives. A run the kernel did stop sends nothing more;
 * a step that merely takes long sends nothing either, so neither shows the notice. It goes
 * as soon as the run ends or a new one starts.
 * @param {ViewScope} scope @param {HTMLElement} after the notice goes after this element
 * @param {() => boolean} active whether the run is queued or running
 * @returns {{stopped: () => void, progress: () => void, update: () => void, hide: () => void,
 *   el: HTMLElement}} stopped(): Stop was clicked; progress(): the run's text (or counters)
 *   came; update(): the run's state may have changed; hide(): a new run started
 */
function stopNotice(scope, after, active) {
  const el = h("div", "nbstream-stop-waiting", { role: "status" });
  el.textContent = STOP_WAITING;
  /** @type {"idle" | "grace" | "waiting"} */
  let phase = "idle";
  /** @type {ReturnType<typeof setTimeout> | null} */
  let timer = null;
  const hide = () => {
    phase = "idle";
    scope.cancel(timer);
    timer = null;
    if (el.isConnected) el.remove();
  };
  return {
    el,
    hide,
    stopped() {
      if (!active() || phase !== "idle") return;
      phase = "grace";
      timer = scope.later(() => {
        timer = null;
        if (phase === "grace") phase = active() ? "waiting" : "idle";
      }, STOP_GRACE_MS);
    },
    progress() {
      if (phase === "waiting" && active() && !el.isConnected) after.after(el);
    },
    update() {
      if (!active()) hide();
    },
  };
}

// ---------------------------------------------------------------------------
// Badge and metrics line
// ---------------------------------------------------------------------------

/**
 * The status badge: word and glyph, so the state is never shown by colour alone. Not a live
 * region: the view's announcer says each state once (announce.js).
 */
function makeBadge() {
  const badge = h("span", "nbstream-badge", { "data-status": "idle" });
  const badgeText = h("span", "nbstream-badge-text");
  const badgeIcon = h("span", "nbstream-badge-icon", { "aria-hidden": "true" });
  badge.append(badgeText, badgeIcon);
  return badge;
}

/**
 * Whether a run in state `s` with these metrics was cut off at max_new_tokens.
 * @param {string} s @param {any} metrics
 */
function isCut(s, metrics) {
  return s === "complete" && !!metrics && metrics.finish_reason === "length";
}

/**
 * @param {HTMLElement} badge @param {string} s
 * @param {boolean} [cut] a complete run cut off at max_new_tokens (see isCut): said in words
 */
function setBadge(badge, s, cut = false) {
  badge.setAttribute("data-status", s);
  badge.classList.toggle("nbstream-cut", cut);
  const [state, glyph] = BADGE[s];
  const word = cut ? `${state} · ${CUT}` : state;
  const badgeText = /** @type {HTMLElement} */ (badge.firstChild);
  const badgeIcon = /** @type {HTMLElement} */ (badge.lastChild);
  if (badgeText.textContent !== word) badgeText.textContent = word;
  if (badgeIcon.textContent !== glyph) badgeIcon.textContent = glyph;
}

/**
 * Write the metrics line of a run into `el`: live counters (from deltas) while it is
 * active, the final metrics after.
 * @param {HTMLElement} el @param {string} s status @param {any} m metrics
 * @param {number | null} liveTokens @param {number | null} liveElapsed
 */
function showMetrics(el, s, m, liveTokens, liveElapsed) {
  const live = ACTIVE.has(s);
  const tokens = live ? (liveTokens ?? m.tokens) : (m.tokens ?? liveTokens);
  const elapsed = live ? (liveElapsed ?? m.elapsed_s) : (m.elapsed_s ?? liveElapsed);
  const parts = [];
  if (isNum(tokens)) parts.push(`${tokens} ${tokens === 1 ? "token" : "tokens"}`);
  // A server that sent no usage: pieces of text, never called tokens.
  else if (!live && isNum(m.text_chunks))
    parts.push(`${m.text_chunks} ${m.text_chunks === 1 ? "chunk" : "chunks"} (no token count)`);
  if (isNum(m.ttft_s)) parts.push(`first token ${fmtSeconds(m.ttft_s)}`);
  if (!live && isNum(m.tokens_per_s)) parts.push(`${m.tokens_per_s.toFixed(1)} tok/s`);
  if (isNum(elapsed)) parts.push(fmtSeconds(elapsed));
  if (isNum(m.queued_s) && m.queued_s >= 0.1) parts.push(`queued ${fmtSeconds(m.queued_s)}`);
  const ending = live ? undefined : FINISH_WORDS[String(m.finish_reason)];
  if (ending) parts.push(ending);
  const line = parts.join(" · ");
  if (el.textContent !== line) {
    // Each figure in one piece: the line wraps between them, never inside "12.3 tok/s".
    el.replaceChildren();
    parts.forEach((part, i) => {
      if (i) el.append(" · ");
      const span = h("span", "nbstream-metric");
      span.textContent = part;
      el.append(span);
    });
  }
  const tip = [];
  if (isNum(m.queued_s)) tip.push(`queued ${fmtSeconds(m.queued_s)}`);
  if (isNum(m.first_chunk_s)) tip.push(`first chunk shown ${fmtSeconds(m.first_chunk_s)}`);
  if (m.tokens_note) tip.push(String(m.tokens_note));
  if (!live && m.finish_reason) tip.push(`finish_reason: ${m.finish_reason}`);
  el.title = tip.join(" · ");
}

// ---------------------------------------------------------------------------
// The current run's text, from deltas and resets
// ---------------------------------------------------------------------------

/**
 * The text of the widget's current run as this view knows it. Deltas append at their
 * offset (code points); a gap (or a delta of a run this view does not know yet) sends a
 * `sync`, answered by a `reset` with the whole text so far.
 */
class LiveText {
  /**
   * @param {number} runId the model's run_id when the view is created
   * @param {string} viewId
   * @param {(msg: any) => void} send
   * @param {{clear: () => void, grew: () => void}} hooks output cleared / text added
   */
  constructor(runId, viewId, send, hooks) {
    this.text = ""; // the current run's text (UTF-16 string)
    this.cpLen = 0; // its length in code points
    this.runId = runId;
    /** @type {number | null} */
    this.liveTokens = null;
    /** @type {number | null} */
    this.liveElapsed = null;
    this.gapSyncAt = 0; // performance.now() of an unanswered gap sync, or 0
    this.viewId = viewId;
    this.send = send;
    this.hooks = hooks;
  }

  sync() {
    this.send({ type: "sync", view: this.viewId, page: PAGE_ID });
  }

  /** A gap: ask for the full text, once per gap (retried if no reset comes). */
  requestSync() {
    const now = performance.now();
    if (this.gapSyncAt && now - this.gapSyncAt < SYNC_RETRY_MS) return;
    this.gapSyncAt = now || 1;
    this.sync();
  }

  clear() {
    this.text = "";
    this.cpLen = 0;
    this.hooks.clear();
  }

  /** @param {string} more */
  append(more) {
    if (!more) return;
    this.text += more;
    this.cpLen += codePoints(more);
    this.hooks.grew();
  }

  /** A new run (run_id changed): forget the text. False if it is not newer. @param {number} rid */
  newRun(rid) {
    if (rid <= this.runId) return false; // already adopted (from a reset) or stale
    this.runId = rid;
    this.liveTokens = null;
    this.liveElapsed = null;
    this.clear();
    return true;
  }

  /**
   * @param {any} msg
   * @returns {"text" | "counters" | "stale" | "gap"} what changed
   */
  delta(msg) {
    const rid = Number(msg.run_id);
    if (rid === this.runId) {
      if (isNum(msg.tokens)) this.liveTokens = msg.tokens;
      if (isNum(msg.elapsed_s)) this.liveElapsed = msg.elapsed_s;
      const offset = Number(msg.offset);
      const piece = String(msg.text ?? "");
      if (offset === this.cpLen) {
        this.append(piece);
        return "text";
      }
      if (offset >= 0 && offset < this.cpLen) {
        // Overlap with text we already have (e.g. a reset that was ahead of
        // the deltas). The run's text only grows, so a delta that agrees with
        // it is no gap: keep what is new.
        const text = this.text;
        const have = text.slice(indexFromEnd(text, this.cpLen - offset));
        const cut = indexOfCodePoint(piece, this.cpLen - offset);
        if (cut < 0 ? have.startsWith(piece) : piece.slice(0, cut) === have) {
          if (cut >= 0) this.append(piece.slice(cut));
          return "text";
        }
      }
      this.requestSync(); // gap: ignore the delta, ask for the full text
      return "counters";
    } else if (rid < this.runId) {
      return "stale"; // a late delta of an old run: not a gap
    }
    this.requestSync();
    return "gap";
  }

  /**
   * @param {any} msg
   * @returns {boolean} whether the reset was for this view and applied
   */
  reset(msg) {
    if (msg.view != null && msg.view !== this.viewId) return false;
    const rid = Number(msg.run_id);
    if (rid < this.runId) return false; // stale
    const full = String(msg.text ?? "");
    this.gapSyncAt = 0;
    if (this.newRun(rid)) {
      this.append(full);
    } else if (full.startsWith(this.text)) {
      this.append(full.slice(this.text.length)); // usually: the view was merely behind
    } else {
      this.clear();
      this.append(full);
    }
    return true;
  }
}

/**
 * The mark under an output whose answer was cut off at max_new_tokens (see isCut): the
 * element `cutEl` (class nbstream-cut) after `output` while `cut`, and data-cut on it.
 * @param {HTMLElement} output @param {HTMLElement} cutEl @param {boolean} cut
 */
function markCut(output, cutEl, cut) {
  output.setAttribute("data-cut", String(cut));
  if (cut) {
    const words = `Answer ${CUT}: it may end mid-sentence (raise max_new_tokens for more)`;
    if (cutEl.textContent !== words) cutEl.textContent = words;
    if (!cutEl.isConnected) output.after(cutEl);
  } else if (cutEl.isConnected) {
    cutEl.remove();
  }
}

// ---------------------------------------------------------------------------
// A view whose kernel is gone
// ---------------------------------------------------------------------------

/**
 * Say in a token's popover, once, that its actions need a kernel (`why`: disconnected's
 * words): Continue and "How was this picked?" would each say it otherwise.
 * @param {HTMLElement} pop the popover @param {string} why @param {(note: HTMLElement) => void} place
 */
function sayNoKernel(pop, why, place) {
  if (pop.querySelector(".nbstream-no-kernel-note")) return;
  const note = h("div", "nbstream-token-note nbstream-no-kernel-note", { role: "note" });
  // `why` names the kernel already: the note says what follows for the token, once.
  note.textContent = `${why}, so a token's actions (Continue, How was this picked?) are not offered.`;
  place(note);
}

/**
 * Why `el` (in a view) can ask the kernel nothing, or "": its view is disconnected
 * (watchConnection marks the root data-connection="lost"), or it shows a saved run that no
 * running kernel holds (replay.js: the root has data-saved).
 * @param {Element} el
 */
function disconnected(el) {
  if (el.closest('[data-connection="lost"]')) return `Disconnected: ${DISCONNECTED}`;
  return el.closest("[data-saved]") ? "Saved output: no running kernel holds this widget" : "";
}

/**
 * Show the view as disconnected once its kernel is gone, and never let a message to a gone
 * kernel throw. Two signs, as @jupyter-widgets/base and JupyterLab's widget manager give
 * them: the manager sets every model's `comm_live` to false when the kernel restarts (the
 * setter triggers `comm_live_update`; after a view exists nothing sets it back to true),
 * and `model.send` on a comm whose kernel was restarted throws "Cannot send"
 * (@jupyterlab/services' Comm.send). Wraps `model.send` of this view's model (anywidget
 * gives each view its own model object), so every send of the view goes through the check,
 * also those made after the view is gone (its `removed`). Then: the root gets
 * data-connection="lost", the badge says "disconnected", a notice says DISCONNECTED, and
 * every control but the Raw text toggle and the output's Copy buttons is disabled.
 * @param {ViewScope} scope @param {any} model @param {HTMLElement} root the view's root
 * @returns {{lost: boolean}} whether the kernel is gone
 */
function watchConnection(scope, model, root) {
  const state = { lost: false };
  const notice = h("div", "nbstream-disconnected", { role: "alert" });
  notice.textContent = `Disconnected: ${DISCONNECTED}`;
  // Idempotent (it writes only what differs): it runs again on its own mutations.
  const apply = () => {
    if (root.getAttribute("data-connection") !== "lost") root.setAttribute("data-connection", "lost");
    const badge = root.querySelector(".nbstream-badge");
    if (badge instanceof HTMLElement && badge.getAttribute("data-status") !== "disconnected") {
      setBadge(badge, "disconnected");
    }
    for (const busy of root.querySelectorAll("[aria-busy=true]")) busy.setAttribute("aria-busy", "false");
    for (const c of root.querySelectorAll("button, input, textarea, select")) {
      // What still works without the kernel: the Raw text toggle, the Copy buttons, and
      // the sampling panel's Close. Not the token popover's Continue or "How was this
      // picked?" (inside the output too): they ask the kernel.
      if (c.matches(".nbstream-raw-toggle, .nbstream-copy, .nbstream-dist-close")) continue;
      const control = /** @type {HTMLButtonElement} */ (c);
      if (!control.disabled) control.disabled = true;
    }
    if (!notice.isConnected) root.prepend(notice);
  };
  const lose = () => {
    if (state.lost) return;
    state.lost = true;
    if (scope.disposed) return;
    apply();
    // Whatever the view redraws later (its chrome after a change made in the page) is put
    // back to disconnected.
    const watch = new MutationObserver(apply);
    watch.observe(root, {
      subtree: true,
      childList: true,
      attributes: true,
      attributeFilter: ["disabled", "data-status", "aria-busy"],
    });
    scope.defer(() => watch.disconnect());
  };
  scope.onModel("comm_live_update", lose);
  const send = model.send;
  if (typeof send === "function") {
    try {
      model.send = (/** @type {any[]} */ ...args) => {
        if (state.lost) return;
        try {
          send.apply(model, args);
        } catch (err) {
          console.warn("nbstream: the kernel is gone; the view is disconnected", err);
          lose();
        }
      };
    } catch {
      // a model object that cannot take it: the comm_live_update sign still works
    }
  }
  return state;
}

// ---------------------------------------------------------------------------
// A view removed from a notebook that stays open
// ---------------------------------------------------------------------------

/** This page load: the kernel counts a widget's views per page (see watchRemoval). */
const PAGE_ID = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`;
let unloading = false;
if (typeof window !== "undefined") {
  window.addEventListener("pagehide", () => {
    unloading = true;
  });
  window.addEventListener("beforeunload", () => {
    unloading = true;
    // A "leave this page?" dialog the user answers with Stay: the page lives on, and a
    // page that really unloads never runs this timer.
    setTimeout(() => {
      unloading = false;
    }, 3000);
  });
}

/**
 * Tell the kernel when this view is removed from a notebook that stays open: the user
 * cleared the cell's output or deleted the cell. When a page has no view of the widget
 * left, the kernel closes it, so its run stops instead of streaming on where nobody can
 * see it or press Stop. A page that unloads (reload, browser closed) or a notebook tab
 * closed in JupyterLab sends nothing: the widget lives on in the kernel and shows again
 * when the notebook is reopened. Only views inside a JupyterLab / Notebook 7 notebook
 * (.jp-Notebook) take part: other front ends may dispose views for their own reasons.
 * @param {HTMLElement} el the view's element
 * @param {(msg: any) => void} send
 * @param {string} viewId
 * @returns {() => void} call from the view's cleanup
 */
function watchRemoval(el, send, viewId) {
  /** @type {Element | null} */
  let notebook = null;
  let tries = 0;
  let raf = 0;
  const find = () => {
    raf = 0;
    notebook = el.closest(".jp-Notebook");
    // The element is attached after render returns; look for a few frames.
    if (!notebook && !el.isConnected && ++tries < 120) raf = requestAnimationFrame(find);
  };
  find();
  return () => {
    if (raf) cancelAnimationFrame(raf);
    // Disposed with its output (the element is already detached): the notebook is still
    // in the page unless the tab or the page is going away.
    if (notebook && notebook.isConnected && !unloading) {
      send({ type: "removed", view: viewId, page: PAGE_ID });
    }
  };
}

export {
  ACTIVE,
  BADGE,
  CUT,
  DISCONNECTED,
  disconnected,
  LiveText,
  sayNoKernel,
  STATUSES,
  STOP_WAITING,
  VERSION,
  copyAnswer,
  copyAnswerButton,
  contextOverflow,
  copyCode,
  fmtSeconds,
  follower,
  h,
  iconButton,
  inputErrorView,
  isCut,
  isNum,
  logFrame,
  makeBadge,
  markCut,
  markOutput,
  modelStatus,
  newViewId,
  onRunMessages,
  thinkingCounters,
  onSubmitKey,
  outputArea,
  promptBox,
  rawToggle,
  setBadge,
  showMetrics,
  statusBar,
  stopNotice,
  swapButtons,
  syncedText,
  viewScope,
  watchConnection,
  watchRemoval,
};
