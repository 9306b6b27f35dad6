// nbstream front end: what the StreamWidget view (widget.js) and the ChatWidget view
// (chat.js) share besides rendering: states and their badge, the metrics line, the
// delta / reset protocol of a run's text, and small DOM helpers.

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
/** nbstream's version, put in by js/build.mjs from nbstream/_version.py. */
// eslint-disable-next-line no-undef
const VERSION = typeof __NBSTREAM_VERSION__ === "string" ? __NBSTREAM_VERSION__ : "unknown";
const ACTIVE = new Set(["queued", "running"]);
const PARTIAL = new Set(["queued", "running", "failed", "cancelled"]);

const SYNC_RETRY_MS = 1500;
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
// Badge and metrics line
// ---------------------------------------------------------------------------

/** The status badge: word and glyph, so the state is never shown by colour alone. */
function makeBadge() {
  const badge = h("span", "nbstream-badge", { role: "status", "data-status": "idle" });
  const badgeText = h("span", "nbstream-badge-text");
  const badgeIcon = h("span", "nbstream-badge-icon", { "aria-hidden": "true" });
  badge.append(badgeText, badgeIcon);
  return badge;
}

/** @param {HTMLElement} badge @param {string} s */
function setBadge(badge, s) {
  badge.setAttribute("data-status", s);
  const [word, glyph] = BADGE[s];
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
  if (isNum(m.ttft_s)) parts.push(`first token ${fmtSeconds(m.ttft_s)}`);
  if (!live && isNum(m.tokens_per_s)) parts.push(`${m.tokens_per_s.toFixed(1)} tok/s`);
  if (isNum(elapsed)) parts.push(fmtSeconds(elapsed));
  if (isNum(m.queued_s) && m.queued_s >= 0.1) parts.push(`queued ${fmtSeconds(m.queued_s)}`);
  if (!live && m.finish_reason) parts.push(String(m.finish_reason));
  const line = parts.join(" · ");
  if (el.textContent !== line) el.textContent = line;
  const tip = [];
  if (isNum(m.queued_s)) tip.push(`queued ${fmtSeconds(m.queued_s)}`);
  if (isNum(m.first_chunk_s)) tip.push(`first chunk shown ${fmtSeconds(m.first_chunk_s)}`);
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

  /** A new run (run_id changed): forget the text. False if it is not newer. */
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
    if (rid !== this.runId) {
      this.runId = rid;
      this.liveTokens = null;
      this.liveElapsed = null;
      this.clear();
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
  COPY_FEEDBACK_MS,
  FOLLOW_SLACK_PX,
  LiveText,
  PARTIAL,
  RENDER_LOG_MAX,
  STATUSES,
  VERSION,
  copyText,
  fmtSeconds,
  h,
  isNum,
  makeBadge,
  newViewId,
  renderLog,
  setBadge,
  showMetrics,
  watchRemoval,
};
