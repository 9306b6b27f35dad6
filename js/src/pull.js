// nbstream front end: pulling the run from the kernel where pushes never arrive.
//
// Some hosts deliver a kernel message to a view only when its parent is the view's own
// message or the cell that displayed it, while that runs (Colab routes each cell's output
// frame by parent header): a run's deltas and end state, sent from a kernel thread or under
// a later cell, never arrive there. The view finds out for itself: after answering its
// `sync` the kernel sends a `probe` from a thread; a view that has not seen it
// PROBE_WAIT_MS after the `reset` pulls: it sends `pull` with what it holds, and the kernel
// answers inside its handler (the one message such a host always delivers) with `pulled`:
// the synced traits changed since the version the view holds, applied here as a synced
// change is (model.set, never saved), and the feed's messages after its offsets, handled as
// if pushed (their offsets make a push that arrives too harmless). Where the probe arrives
// (JupyterLab, Notebook 7, Voila) nothing here sends anything. PROTOCOL.md: Pulling.

/** @typedef {import("./protocol.js").PullRequest} PullRequest */
/** @typedef {import("./protocol.js").PulledMessage} PulledMessage */
/** @typedef {import("./protocol.js").GridPullRequest} GridPullRequest */

/**
 * When a view other than a run widget's (a grid's table) has runs going, and its pace.
 * @typedef {{event: string, active: () => boolean, pause: () => number}} PullActivity
 *   event: the model event after which `active` may have changed (a pull then goes at
 *   once); pause: ms to wait after an answer before the next pull
 */

/** How long after the `reset` a view waits for the kernel's probe before it pulls. */
const PROBE_WAIT_MS = 1500;
/** Between pulls while a run is queued or running: 5 a second, live to the eye. A pull costs
 * the kernel about 0.8 ms of CPU, mostly ipykernel's handling of a message (its busy and
 * idle, the answer): beside a full-speed run's own thread, pulling added 2.3% to its kernel
 * CPU time at this pace, 4.8% at 7 a second (benchmarks/pull.py, medians). */
const ACTIVE_PULL_MS = 200;
/** Between pulls while a run has just started running and the view has none of its text
 * yet: its first words show as soon as they would pushed. */
const FIRST_TEXT_PULL_MS = 40;
/** How long after a run starts running its view may pull at the first-text pace: a long
 * prompt's prefill (seconds on a CPU) would otherwise share its core with 25 pulls a
 * second. */
const FIRST_TEXT_WINDOW_MS = 1000;
/** Between pulls while idle and visible: a run started from another cell shows within ~1 s. */
const IDLE_PULL_MS = 1000;
/** A pull with no answer for this long is sent again (the kernel was busy, or it was lost). */
const RETRY_MS = 3000;
// A trait that must land before the others (a new run's text is placed by its run id) and
// one after them (the view says a state once, with its metrics and error known).
const FIRST = "run_id";
const LAST = "status";

/**
 * The state a `pulled` answer carries, applied to the page's copy of the model as a synced
 * change is: each changed trait set and its change event fired, never saved back.
 * @param {any} model @param {Record<string, unknown>} state
 */
function applyState(model, state) {
  const names = Object.keys(state).sort(
    (a, b) => Number(b === FIRST) - Number(a === FIRST) || Number(a === LAST) - Number(b === LAST),
  );
  for (const name of names) {
    if (JSON.stringify(model.get(name)) !== JSON.stringify(state[name])) model.set(name, state[name]);
  }
}

/**
 * Whether `el` is on screen (an IntersectionObserver's last word; true until it speaks, and
 * where there is none).
 * @param {import("./view_scope.js").ViewScope} scope @param {HTMLElement} el
 */
function visibility(scope, el) {
  const seen = { visible: true };
  if (typeof IntersectionObserver === "undefined") return seen;
  const watch = new IntersectionObserver((entries) => {
    for (const entry of entries) seen.visible = entry.isIntersecting;
  });
  watch.observe(el);
  scope.defer(() => watch.disconnect());
  return seen;
}

/** @param {any} model */
function isActive(model) {
  return ["queued", "running"].includes(String(model.get("status")));
}

/**
 * How long to wait before the next pull: the live rate while a run is queued or running,
 * faster in the first second of its running while none of its text has come, slow while
 * idle. Not the fast rate while queued: a run may wait minutes behind another on the same
 * model (a compare's columns), and its view's pulls would take that run's kernel time.
 * @param {any} model @param {{text: number, thinking: number}} held
 * @param {number} running how long the run has been running (ms; Infinity if not known)
 */
function pullPause(model, held, running) {
  const first = !held.text && !held.thinking && running < FIRST_TEXT_WINDOW_MS;
  if (model.get("status") === "running" && first) return FIRST_TEXT_PULL_MS;
  return isActive(model) ? ACTIVE_PULL_MS : IDLE_PULL_MS;
}

/**
 * Pull the run from the kernel if its pushes never reach this view (see the module).
 * @param {import("./view_scope.js").ViewScope} scope
 * @param {any} model
 * @param {{viewId: string, root: HTMLElement,
 *          held: () => Record<string, unknown>,
 *          deliver: (msg: any) => void,
 *          resetType?: string, activity?: PullActivity}} view
 *   held: what the view holds of the feed (a run widget's `{run_id, text, tokens, thinking}`,
 *   offsets in code points; sent in the pull as they are); deliver: handle a feed message as
 *   if it was pushed; resetType: the type of the kernel's answer to the view's sync (after
 *   which the probe is awaited; default `reset`); activity: when the view's runs are going
 *   and how fast to pull (default: the model's `status`, see pullPause)
 * @returns {{pulling: () => boolean}}
 */
function pullWhenUnpushed(scope, model, view) {
  const { viewId, root } = view;
  const resetType = view.resetType ?? "reset";
  const activity = view.activity;
  const active = activity ? activity.active : () => isActive(model);
  const seen = visibility(scope, root);
  let probed = false; // the kernel's probe came: pushes arrive, never pull
  let pulling = false;
  let version = 0;
  let sentAt = 0; // performance.now() of the pull awaiting its answer, or 0
  let runningAt = 0; // performance.now() when the view saw its run start running, or 0
  /** @type {ReturnType<typeof setTimeout> | null} */
  let timer = null;

  const wait = (/** @type {number} */ ms) => {
    scope.cancel(timer);
    timer = scope.later(tick, ms);
  };
  const pull = () => {
    sentAt = performance.now() || 1;
    const held = view.held();
    const request = /** @type {PullRequest | GridPullRequest} */ ({ type: "pull", view: viewId, ...held, version });
    model.send(request);
  };
  function tick() {
    timer = null;
    if (scope.disposed || probed) return;
    const lost = root.getAttribute("data-connection") === "lost";
    const hidden = !seen.visible || (typeof document !== "undefined" && document.hidden);
    if (!lost && !hidden && (!sentAt || performance.now() - sentAt >= RETRY_MS)) pull();
    wait(sentAt ? RETRY_MS : IDLE_PULL_MS); // an answer reschedules sooner
  }
  /** @param {PulledMessage} msg */
  const answered = (msg) => {
    const since = sentAt ? performance.now() - sentAt : 0;
    sentAt = 0;
    if (msg.state) applyState(model, msg.state);
    if (Number.isInteger(msg.version)) version = msg.version;
    for (const m of Array.isArray(msg.messages) ? msg.messages : []) view.deliver(m);
    const running = runningAt ? performance.now() - runningAt : Number.POSITIVE_INFINITY;
    const pause = activity
      ? activity.pause()
      : pullPause(model, /** @type {any} */ (view.held()), running);
    if (pulling && !probed) wait(Math.max(0, pause - since));
  };

  scope.onModel("msg:custom", (/** @type {any} */ msg) => {
    if (scope.disposed || !msg || msg.view !== viewId) return;
    if (msg.type === "probe") {
      probed = true;
      pulling = false;
      scope.cancel(timer);
    } else if (msg.type === resetType && !probed && !pulling && timer === null) {
      timer = scope.later(() => {
        if (probed) return;
        pulling = true;
        tick();
      }, PROBE_WAIT_MS);
    } else if (msg.type === "pulled" && pulling) {
      answered(msg);
    }
  });
  // A run that starts (a pulled status, a click answered): pull at the live rate at once.
  scope.onModel(activity ? activity.event : "change:status", () => {
    const running = model.get("status") === "running";
    if (running && !runningAt) runningAt = performance.now() || 1;
    else if (!running) runningAt = 0;
    if (pulling && !probed && !sentAt && active()) wait(0);
  });
  return { pulling: () => pulling };
}

export {
  ACTIVE_PULL_MS,
  FIRST_TEXT_PULL_MS,
  FIRST_TEXT_WINDOW_MS,
  IDLE_PULL_MS,
  PROBE_WAIT_MS,
  RETRY_MS,
  applyState,
  isActive,
  pullPause,
  pullWhenUnpushed,
};
