// nbstream front end: this page load: its id, the front end's version, and a view removed
// from a notebook that stays open (the kernel closes a widget no page shows).

/** nbstream's version, put in by js/build.mjs from nbstream/_version.py. */
// eslint-disable-next-line no-undef
const VERSION = typeof __NBSTREAM_VERSION__ === "string" ? __NBSTREAM_VERSION__ : "unknown";

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

export { PAGE_ID, VERSION, watchRemoval };
