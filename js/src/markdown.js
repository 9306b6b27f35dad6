// nbstream front end: model output as Markdown, rendered to a sanitized, inert DOM.
// Shared by the StreamWidget view (stream.js) and the ChatWidget view (chat.js).

import MarkdownIt from "markdown-it";
import DOMPurify from "dompurify";

// ---------------------------------------------------------------------------
// Markdown → sanitized DOM
// ---------------------------------------------------------------------------

const md = new MarkdownIt({ html: false, linkify: true, typographer: false, breaks: false });
// Table alignment: markdown-it emits style="text-align:…", and style
// attributes are stripped by the sanitizer; carry it as a class instead.
md.core.ruler.push("nbstream_align", (state) => {
  for (const tok of state.tokens) {
    if (tok.type !== "th_open" && tok.type !== "td_open") continue;
    const m = /text-align:\s*(left|center|right)/.exec(/** @type {string} */ (tok.attrGet("style") || ""));
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

// Freeze probe (see ParaMode): when an inline parse is given
// env.nbstreamProbe, count the emphasis / strikethrough delimiters it left
// open. Such an opener could still pair with a closer that has not arrived.
md.inline.ruler2.push("nbstream_probe", (state) => {
  /** @type {{open: number} | undefined} */
  const probe = state.env && /** @type {any} */ (state.env).nbstreamProbe;
  if (!probe) return;
  for (const d of state.delimiters) if (d.open && d.end < 0) probe.open++;
});

/**
 * Render one Markdown block to a sanitized, inert DocumentFragment.
 * @param {string} src
 * @returns {DocumentFragment}
 */
function renderMarkdown(src) {
  return toFragment(md.render(src));
}

/**
 * markdown-it output → sanitized, inert DocumentFragment. markdown-it runs
 * with html:false; its output still goes through DOMPurify (model output is
 * untrusted), then links are made safe, images become links (a remote image
 * would be fetched without a click: a known exfiltration channel for
 * prompt-injected output), and code blocks get a copy button. Every piece of
 * rendered Markdown, whole blocks or parts of one, goes through here.
 * @param {string} rendered HTML from markdown-it
 * @returns {DocumentFragment}
 */
function toFragment(rendered) {
  const html = DOMPurify.sanitize(rendered, {
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


export { md, renderMarkdown, safeHref, toFragment };
