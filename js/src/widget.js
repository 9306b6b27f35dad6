// nbstream — browser front end of `nbstream.widget.StreamWidget` (an anywidget).
//
// Built by js/build.mjs into nbstream/static/widget.js (ESM, minified, with
// markdown-it and DOMPurify bundled: nothing is fetched at run time).
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
 *   | {type: "reset", run_id: number, view: string | null, text: string}} IncomingMessage
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

import MarkdownIt from "markdown-it";
import DOMPurify from "dompurify";

const STATUSES = ["idle", "queued", "running", "complete", "failed", "cancelled"];
/** Word and glyph per status: the state is shown by word AND look, never colour alone. */
const BADGE = {
  idle: ["idle", "○"],
  queued: ["queued…", "◌"],
  running: ["running…", ""], // the glyph is a CSS spinner
  complete: ["complete", "✓"],
  failed: ["failed", "✕"],
  cancelled: ["cancelled", "■"],
};
const ACTIVE = new Set(["queued", "running"]);
const PARTIAL = new Set(["queued", "running", "failed", "cancelled"]);

const PROMPT_DEBOUNCE_MS = 300;
const SYNC_RETRY_MS = 1500;
const COPY_FEEDBACK_MS = 1500;
const FOLLOW_SLACK_PX = 12;
const RENDER_LOG_MAX = 10000;

// ---------------------------------------------------------------------------
// Markdown → sanitized DOM
// ---------------------------------------------------------------------------

const md = new MarkdownIt({ html: false, linkify: true, typographer: false, breaks: false });
// Table alignment: markdown-it emits style="text-align:…", and style
// attributes are stripped by the sanitizer; carry it as a class instead.
md.core.ruler.push("nbstream_align", (state) => {
  for (const tok of state.tokens) {
    if (tok.type !== "th_open" && tok.type !== "td_open") continue;
    const m = /text-align:\s*(left|center|right)/.exec(tok.attrGet("style") || "");
    tok.attrs = m ? [["class", `nbstream-align-${m[1]}`]] : null;
  }
});

const SAFE_PROTOCOLS = new Set(["http:", "https:", "mailto:"]);

/** @param {string} href */
function safeHref(href) {
  try {
    const url = new URL(href, document.baseURI);
    return SAFE_PROTOCOLS.has(url.protocol) ? url.href : null;
  } catch {
    return null;
  }
}

/**
 * Render one Markdown block to a sanitized, inert DocumentFragment.
 * markdown-it runs with html:false; its output still goes through DOMPurify
 * (model output is untrusted), then links are made safe, images become links
 * (a remote image would be fetched without a click: a known exfiltration
 * channel for prompt-injected output), and code blocks get a copy button.
 * @param {string} src
 * @returns {DocumentFragment}
 */
function renderMarkdown(src) {
  const html = DOMPurify.sanitize(md.render(src), {
    USE_PROFILES: { html: true },
    FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe"],
    FORBID_ATTR: ["style", "id", "name"],
  });
  const tpl = document.createElement("template"); // inert: nothing loads or runs
  tpl.innerHTML = html;
  const frag = tpl.content;

  for (const img of frag.querySelectorAll("img")) {
    const alt = img.getAttribute("alt") || "image";
    const href = safeHref(img.getAttribute("src") || "");
    const a = document.createElement(href ? "a" : "span");
    a.className = "nbstream-image-link";
    a.textContent = `[image: ${alt}]`;
    if (href) a.setAttribute("href", href);
    img.replaceWith(a);
  }
  for (const a of frag.querySelectorAll("a")) {
    const raw = a.getAttribute("href");
    const href = raw === null ? null : safeHref(raw);
    if (href === null) {
      a.removeAttribute("href");
    } else {
      a.setAttribute("href", href);
      a.setAttribute("target", "_blank");
      a.setAttribute("rel", "noopener noreferrer");
    }
  }
  for (const pre of frag.querySelectorAll("pre")) {
    const wrap = document.createElement("div");
    wrap.className = "nbstream-code";
    const btn = document.createElement("button");
    btn.type = "button";
    btn.className = "nbstream-copy";
    btn.setAttribute("aria-label", "Copy code");
    btn.title = "Copy code";
    btn.textContent = "Copy";
    pre.replaceWith(wrap);
    wrap.append(btn, pre);
  }
  for (const table of frag.querySelectorAll("table")) {
    const wrap = document.createElement("div");
    wrap.className = "nbstream-table";
    table.replaceWith(wrap);
    wrap.append(table);
  }
  return frag;
}

// ---------------------------------------------------------------------------
// Minimal DOM morph: update `target` to look like `source` with the fewest
// insertions. Grown text becomes an appended text node (an "addition" for the
// live region) instead of a re-created paragraph.
// ---------------------------------------------------------------------------

/** @param {Node} n */
function countNodes(n) {
  let c = 1;
  for (let k = n.firstChild; k; k = k.nextSibling) c += countNodes(k);
  return c;
}

/** @param {Element} to @param {Element} from */
function syncAttributes(to, from) {
  for (const { name } of Array.from(to.attributes)) {
    if (!from.hasAttribute(name)) to.removeAttribute(name);
  }
  for (const { name, value } of Array.from(from.attributes)) {
    if (to.getAttribute(name) !== value) to.setAttribute(name, value);
  }
}

/**
 * Make target's children match source's children; source is consumed.
 * @param {Node} target @param {Node} source @returns {number} nodes created
 */
function morph(target, source) {
  let created = 0;
  let o = target.firstChild;
  let n = source.firstChild;
  while (n) {
    const nNext = n.nextSibling;
    if (!o) {
      created += countNodes(n);
      target.appendChild(n);
    } else if (o.nodeType === 3 && n.nodeType === 3) {
      // A run of adjacent text nodes in the target vs one text node in the source.
      let run = o.data;
      let last = o;
      while (last.nextSibling && last.nextSibling.nodeType === 3) {
        last = last.nextSibling;
        run += last.data;
      }
      const after = last.nextSibling;
      const want = n.data;
      if (run !== want) {
        if (want.startsWith(run)) {
          target.insertBefore(document.createTextNode(want.slice(run.length)), after);
        } else {
          for (let k = o; k !== after; ) {
            const next = k.nextSibling;
            target.removeChild(k);
            k = next;
          }
          target.insertBefore(n, after);
        }
        created += 1;
      }
      o = after;
    } else if (o.nodeType === 1 && n.nodeType === 1 && o.nodeName === n.nodeName) {
      if (!o.isEqualNode(n)) {
        syncAttributes(/** @type {Element} */ (o), /** @type {Element} */ (n));
        created += morph(o, n);
      }
      o = o.nextSibling;
    } else {
      created += countNodes(n);
      target.insertBefore(n, o);
      const next = o.nextSibling;
      target.removeChild(o);
      o = next;
    }
    n = nNext;
  }
  while (o) {
    const next = o.nextSibling;
    target.removeChild(o);
    o = next;
  }
  return created;
}

// ---------------------------------------------------------------------------
// Incremental block splitter. Finds stable block boundaries in a growing
// text, looking only at newly completed lines:
//  * a blank line outside a fenced code block, once the next non-blank line
//    has started without indentation (indented lines continue a list item or
//    an indented code block across blank lines);
//  * the closing line of a fenced code block opened at column 0.
// Text before a boundary never changes its rendering again.
// ---------------------------------------------------------------------------

const FENCE_OPEN = /^( {0,3})(`{3,}|~{3,})(.*)$/;
const FENCE_CLOSE = /^ {0,3}(`{3,}|~{3,})[ \t]*$/;

class BlockSplitter {
  constructor() {
    this.reset();
  }

  reset() {
    this.pos = 0; // start of the first line not yet scanned
    this.inFence = false;
    this.fenceChar = "";
    this.fenceLen = 0;
    this.fenceTop = false;
    this.blankAt = -1; // start of a pending blank-line run, or -1
  }

  /**
   * Scan the complete lines added since the last call.
   * @param {string} text
   * @returns {Array<[number, number]>} boundaries as [blockEnd, nextBlockStart]
   */
  advance(text) {
    /** @type {Array<[number, number]>} */
    const out = [];
    for (;;) {
      const nl = text.indexOf("\n", this.pos);
      if (nl < 0) break;
      const start = this.pos;
      let line = text.slice(start, nl);
      if (line.endsWith("\r")) line = line.slice(0, -1);
      this.pos = nl + 1;
      if (this.inFence) {
        const m = FENCE_CLOSE.exec(line);
        if (m && m[1][0] === this.fenceChar && m[1].length >= this.fenceLen) {
          this.inFence = false;
          if (this.fenceTop) out.push([this.pos, this.pos]);
        }
        continue;
      }
      if (line.trim() === "") {
        if (this.blankAt < 0) this.blankAt = start;
        continue;
      }
      if (this.blankAt >= 0) {
        if (!/^[ \t]/.test(line)) out.push([this.blankAt, start]);
        this.blankAt = -1;
      }
      const f = FENCE_OPEN.exec(line);
      if (f && !(f[2][0] === "`" && f[3].includes("`"))) {
        this.inFence = true;
        this.fenceChar = f[2][0];
        this.fenceLen = f[2].length;
        this.fenceTop = f[1].length === 0;
      }
    }
    // The unfinished last line can already settle a pending boundary: its
    // first character tells whether it is indented.
    if (this.blankAt >= 0) {
      const c = text.charAt(this.pos);
      if (c !== "" && c !== " " && c !== "\t" && c !== "\r") {
        out.push([this.blankAt, this.pos]);
        this.blankAt = -1;
      }
    }
    return out;
  }
}

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

/** @param {unknown} x */
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

/** @returns {Array<{ms: number, chars: number, parsed: number, nodes: number}>} */
function renderLog() {
  const g = /** @type {any} */ (globalThis);
  if (!Array.isArray(g.__nbstreamRenderTimes)) g.__nbstreamRenderTimes = [];
  return g.__nbstreamRenderTimes;
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

/** Copy text to the clipboard; falls back to execCommand where the API is missing or refused. */
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
  const root = h("div", "nbstream", { "data-status": "idle" });

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

  const badge = h("span", "nbstream-badge", { role: "status", "data-status": "idle" });
  const badgeText = h("span", "nbstream-badge-text");
  const badgeIcon = h("span", "nbstream-badge-icon", { "aria-hidden": "true" });
  badge.append(badgeText, badgeIcon);
  const metricsEl = h("span", "nbstream-metrics");
  const rawBtn = h("button", "nbstream-raw-toggle", {
    type: "button",
    "aria-label": "Raw text",
    "aria-pressed": "false",
  });
  rawBtn.textContent = "Raw text";
  rawBtn.title = "Show the raw text instead of rendered Markdown";
  const bar = h("div", "nbstream-bar");
  bar.append(badge, metricsEl, rawBtn);

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

  root.append(promptRow, bar, output);
  el.append(root);

  // ---- view state ----------------------------------------------------------
  let text = ""; // the current run's text (UTF-16 string)
  let cpLen = 0; // its length in code points
  let runId = Number(model.get("run_id")) || 0;
  let liveTokens = null;
  let liveElapsed = null;
  let gapSyncAt = 0; // performance.now() of an unanswered gap sync, or 0
  let rawMode = false;
  let follow = true;

  const splitter = new BlockSplitter();
  let blockStart = 0; // start of the open (trailing) block in `text`
  let tail = newTail(); // DOM node of the open block
  let tailText = null; // text the tail was last rendered from
  let rawLen = 0; // chars of `text` already in rawPre
  let rafId = 0;

  function newTail() {
    const t = h("div", "nbstream-block nbstream-tail");
    rendered.append(t);
    return t;
  }

  function clearOutput() {
    text = "";
    cpLen = 0;
    blockStart = 0;
    splitter.reset();
    rendered.replaceChildren();
    tail = newTail();
    tailText = null;
    rawPre.replaceChildren();
    rawLen = 0;
    follow = true;
  }

  // ---- rendering (at most once per animation frame) ------------------------
  function schedule() {
    if (!rafId && !disposed) rafId = requestAnimationFrame(frame);
  }

  function frame() {
    rafId = 0;
    if (disposed) return;
    const t0 = performance.now();
    let parsed = 0;
    let nodes = 0;

    if (rawLen < text.length) {
      rawPre.append(text.slice(rawLen));
      rawLen = text.length;
      nodes += 1;
    }
    for (const [end, next] of splitter.advance(text)) {
      const block = text.slice(blockStart, end);
      blockStart = next;
      if (block.trim() === "") continue;
      parsed += block.length;
      nodes += morph(tail, renderMarkdown(block));
      tail.classList.remove("nbstream-tail");
      tail = newTail();
      tailText = null;
    }
    const open = text.slice(blockStart);
    if (open !== tailText) {
      parsed += open.length;
      nodes += morph(tail, renderMarkdown(open));
      tailText = open;
    }
    if (follow) output.scrollTop = output.scrollHeight;

    const log = renderLog();
    log.push({ ms: performance.now() - t0, chars: text.length, parsed, nodes });
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
    badge.setAttribute("data-status", s);
    const [word, glyph] = BADGE[s];
    if (badgeText.textContent !== word) badgeText.textContent = word;
    if (badgeIcon.textContent !== glyph) badgeIcon.textContent = glyph;

    const active = ACTIVE.has(s);
    runBtn.disabled = active;
    stopBtn.disabled = !active;

    const hasText = text.length > 0;
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
    const s = status();
    const m = model.get("metrics") || {};
    const live = ACTIVE.has(s);
    const tokens = live ? (liveTokens ?? m.tokens) : (m.tokens ?? liveTokens);
    const elapsed = live ? (liveElapsed ?? m.elapsed_s) : (m.elapsed_s ?? liveElapsed);
    const parts = [];
    if (isNum(tokens)) parts.push(`${tokens} ${tokens === 1 ? "token" : "tokens"}`);
    if (isNum(m.ttft_s)) parts.push(`first token ${fmtSeconds(m.ttft_s)}`);
    if (!live && isNum(m.tokens_per_s)) parts.push(`${m.tokens_per_s.toFixed(1)} tok/s`);
    if (isNum(elapsed)) parts.push(fmtSeconds(elapsed));
    if (isNum(m.queued_s) && m.queued_s >= 0.1) parts.push(`queued ${fmtSeconds(m.queued_s)}`);
    if (!live && m.finish_reason) parts.push(String(m.finish_reason));
    const line = parts.join(" · ");
    if (metricsEl.textContent !== line) metricsEl.textContent = line;
    const tip = [];
    if (isNum(m.queued_s)) tip.push(`queued ${fmtSeconds(m.queued_s)}`);
    if (isNum(m.first_chunk_s)) tip.push(`first chunk shown ${fmtSeconds(m.first_chunk_s)}`);
    metricsEl.title = tip.join(" · ");
  }

  // ---- protocol --------------------------------------------------------------
  function sendSync() {
    model.send({ type: "sync", view: viewId });
  }

  /** A gap: ask for the full text, once per gap (retried if no reset comes). */
  function requestSync() {
    const now = performance.now();
    if (gapSyncAt && now - gapSyncAt < SYNC_RETRY_MS) return;
    gapSyncAt = now || 1;
    sendSync();
  }

  /** @param {string} more */
  function append(more) {
    if (!more) return;
    text += more;
    cpLen += codePoints(more);
    schedule();
  }

  /** @param {any} msg */
  function onDelta(msg) {
    const rid = Number(msg.run_id);
    if (rid === runId) {
      if (isNum(msg.tokens)) liveTokens = msg.tokens;
      if (isNum(msg.elapsed_s)) liveElapsed = msg.elapsed_s;
      const offset = Number(msg.offset);
      const piece = String(msg.text ?? "");
      if (offset === cpLen) {
        append(piece);
        updateChrome();
        return;
      }
      if (offset >= 0 && offset < cpLen) {
        // Overlap with text we already have (e.g. a reset that was ahead of
        // the deltas). The run's text only grows, so a delta that agrees with
        // it is no gap: keep what is new.
        const have = text.slice(indexFromEnd(text, cpLen - offset));
        const cut = indexOfCodePoint(piece, cpLen - offset);
        if (cut < 0 ? have.startsWith(piece) : piece.slice(0, cut) === have) {
          if (cut >= 0) append(piece.slice(cut));
          updateChrome();
          return;
        }
      }
      updateMetrics();
    } else if (rid < runId) {
      return; // a late delta of an old run: not a gap
    }
    requestSync(); // gap: ignore the delta, ask for the full text
  }

  /** @param {any} msg */
  function onReset(msg) {
    if (msg.view != null && msg.view !== viewId) return;
    const rid = Number(msg.run_id);
    if (rid < runId) return; // stale
    const full = String(msg.text ?? "");
    gapSyncAt = 0;
    if (rid !== runId) {
      runId = rid;
      liveTokens = null;
      liveElapsed = null;
      clearOutput();
      append(full);
    } else if (full.startsWith(text)) {
      append(full.slice(text.length)); // usually: the view was merely behind
    } else {
      clearOutput();
      append(full);
    }
    schedule();
    updateChrome();
  }

  onModel("msg:custom", (msg) => {
    if (disposed || !msg || typeof msg !== "object") return;
    if (msg.type === "delta") onDelta(msg);
    else if (msg.type === "reset") onReset(msg);
  });

  onModel("change:run_id", () => {
    const rid = Number(model.get("run_id")) || 0;
    if (rid <= runId) return; // already adopted (from a reset) or stale
    runId = rid;
    liveTokens = null;
    liveElapsed = null;
    clearOutput();
    schedule();
    updateChrome();
  });
  onModel("change:status", () => {
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
    model.send({ type: "run", prompt: prompt.value });
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

  // ---- raw toggle, copy buttons, scrolling ---------------------------------
  on(rawBtn, "click", () => {
    rawMode = !rawMode;
    rawBtn.setAttribute("aria-pressed", String(rawMode));
    output.replaceChildren(rawMode ? rawPre : rendered);
    if (follow) output.scrollTop = output.scrollHeight;
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
  updateChrome();
  sendSync();

  return () => {
    disposed = true;
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
