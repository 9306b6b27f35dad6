// nbstream front end: a view's lifecycle. What one view adds to the page and the model
// (listeners, timers, animation frames) is kept so that its cleanup takes it all away; its
// id; and the page's log of what each frame cost (read by the tests and the benchmarks).

const RENDER_LOG_MAX = 10000;

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

export { logFrame, newViewId, viewScope };
