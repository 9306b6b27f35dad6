// Pulling where the kernel's pushes never arrive (pullWhenUnpushed, js/src/pull.js): a view
// that gets no probe after its `reset` pulls, at the pace of its run's state, one pull at a
// time, never while hidden or disconnected; a probe keeps it (or puts it back) on pushes; an
// answer's state lands as a synced change, and its messages go through the same offset rules
// as a push, so a push that also arrives never shows text twice. PROTOCOL.md: Pulling.
// Time is a virtual clock: the view's timers and performance.now() both follow it.
import assert from "node:assert/strict";
import { afterEach, beforeEach, mock, test } from "node:test";

import { LiveText, onRunMessages } from "../src/live_text.js";
import {
  ACTIVE_PULL_MS,
  FIRST_TEXT_PULL_MS,
  FIRST_TEXT_WINDOW_MS,
  IDLE_PULL_MS,
  PROBE_WAIT_MS,
  RETRY_MS,
  pullWhenUnpushed,
} from "../src/pull.js";

const VIEW = "view-1";

/** A virtual clock: timers of the fake scope, and what performance.now() says. */
const clock = {
  now: 1000,
  /** @type {Array<{at: number, seq: number, fn: () => void}>} */
  timers: [],
  seq: 0,
  /** Move time on by `ms`, running each timer that falls due, in order, at its own time. */
  advance(ms) {
    const end = clock.now + ms;
    for (;;) {
      clock.timers.sort((a, b) => a.at - b.at || a.seq - b.seq);
      const next = clock.timers[0];
      if (!next || next.at > end) break;
      clock.timers.shift();
      clock.now = Math.max(clock.now, next.at);
      next.fn();
    }
    clock.now = end;
  },
};

beforeEach(() => {
  clock.now = 1000;
  clock.timers = [];
  mock.method(performance, "now", () => clock.now);
});

afterEach(() => {
  mock.restoreAll();
  delete globalThis.IntersectionObserver;
  delete globalThis.document;
});

/** A model as @jupyter-widgets/base's looks to a view: set() fires change:<name>. */
function fakeModel(state = {}) {
  /** @type {Map<string, Set<Function>>} */
  const handlers = new Map();
  const sent = [];
  const changes = [];
  const model = {
    state: { run_id: 0, status: "idle", ...state },
    get: (name) => model.state[name],
    set(name, value) {
      model.state[name] = value;
      changes.push(name);
      model.fire(`change:${name}`, model, value);
    },
    send: (msg) => sent.push(msg),
    on(name, fn) {
      if (!handlers.has(name)) handlers.set(name, new Set());
      handlers.get(name).add(fn);
    },
    off: (name, fn) => handlers.get(name)?.delete(fn),
    fire(name, ...args) {
      for (const fn of [...(handlers.get(name) ?? [])]) fn(...args);
    },
    /** A custom message from the kernel. */
    msg: (content) => model.fire("msg:custom", content, []),
  };
  return { model, sent, changes };
}

/** The part of a ViewScope pull.js uses, on the virtual clock. */
function fakeScope(model) {
  const deferred = [];
  const listeners = [];
  const scope = {
    disposed: false,
    onModel(name, fn) {
      model.on(name, fn);
      listeners.push([name, fn]);
    },
    later(fn, ms) {
      const timer = { at: clock.now + ms, seq: clock.seq++, fn };
      clock.timers.push(timer);
      return timer;
    },
    cancel(timer) {
      clock.timers = clock.timers.filter((t) => t !== timer);
    },
    defer: (fn) => deferred.push(fn),
    dispose() {
      scope.disposed = true;
      for (const fn of deferred.splice(0)) fn();
      for (const [name, fn] of listeners) model.off(name, fn);
      clock.timers = [];
    },
  };
  return scope;
}

/** A view root: only data-connection is read. */
function fakeRoot() {
  const attrs = new Map();
  return {
    getAttribute: (name) => attrs.get(name) ?? null,
    setAttribute: (name, value) => attrs.set(name, String(value)),
  };
}

/**
 * A view wired as stream.js wires one: its LiveText takes pushed and pulled messages alike.
 * @param {Record<string, unknown>} [state] the model's state
 */
function makeView(state = {}) {
  const { model, sent, changes } = fakeModel(state);
  const scope = fakeScope(model);
  const root = fakeRoot();
  const live = new LiveText(Number(model.get("run_id")), VIEW, (m) => sent.push(m), {
    clear() {},
    grew() {},
  });
  const receive = onRunMessages(/** @type {any} */ (scope), live, {
    chrome() {},
    metrics() {},
    redraw() {},
    tokens() {},
  });
  // A new run_id starts the view's text afresh (stream.js: onRunId).
  scope.onModel("change:run_id", () => live.newRun(Number(model.get("run_id"))));
  const handle = pullWhenUnpushed(/** @type {any} */ (scope), model, {
    viewId: VIEW,
    root: /** @type {any} */ (root),
    held: () => ({ run_id: live.runId, text: live.cpLen, tokens: 0, thinking: 0 }),
    deliver: receive,
  });
  const pulls = () => sent.filter((m) => m.type === "pull");
  /** The kernel's answer to the pull awaiting one. */
  const answer = (extra = {}) => model.msg({ type: "pulled", view: VIEW, version: 0, messages: [], ...extra });
  return { model, scope, root, live, handle, sent, changes, pulls, answer };
}

/** The view's first reset (its sync answered): the probe's deadline starts. */
const reset = (view, text = "", run_id = 0) => view.model.msg({ type: "reset", view: VIEW, run_id, text });

/** A view that got no probe and has just sent its first pull. */
function pullingView(state = {}) {
  const view = makeView(state);
  reset(view);
  clock.advance(PROBE_WAIT_MS);
  assert.equal(view.pulls().length, 1);
  return view;
}

/** The times (ms after `from`) of the pulls sent within `ms`, each answered at once. */
function pullTimes(view, ms, answer = {}) {
  const from = clock.now;
  const times = [];
  let seen = view.pulls().length;
  const end = clock.now + ms;
  while (clock.now < end) {
    clock.advance(1);
    if (view.pulls().length > seen) {
      seen = view.pulls().length;
      times.push(clock.now - from);
      view.answer({ version: view.pulls().at(-1).version, ...answer });
    }
  }
  return times;
}

const gaps = (times) => times.slice(1).map((t, i) => t - times[i]);

test("no probe within PROBE_WAIT_MS of the reset: the view pulls what it holds", () => {
  const view = makeView({ run_id: 3 });
  reset(view, "Hi", 3);
  clock.advance(PROBE_WAIT_MS - 1);
  assert.deepEqual(view.pulls(), []);
  assert.equal(view.handle.pulling(), false);
  clock.advance(1);
  assert.equal(view.handle.pulling(), true);
  assert.deepEqual(view.pulls(), [
    { type: "pull", view: VIEW, run_id: 3, text: 2, tokens: 0, thinking: 0, version: 0 },
  ]);
});

test("the probe before the deadline: the view never pulls", () => {
  const view = makeView();
  reset(view);
  clock.advance(PROBE_WAIT_MS - 100);
  view.model.msg({ type: "probe", view: VIEW });
  view.model.set("status", "running"); // a run starts: still pushed
  reset(view, "", 0); // a gap's sync answered: pushes arrive, no new deadline
  clock.advance(30_000);
  assert.deepEqual(view.pulls(), []);
  assert.equal(view.handle.pulling(), false);
});

test("a probe that overtakes the reset counts as well", () => {
  const view = makeView();
  view.model.msg({ type: "probe", view: VIEW });
  reset(view);
  clock.advance(30_000);
  assert.deepEqual(view.pulls(), []);
});

test("a probe that comes late stops the pulls", () => {
  const view = pullingView();
  view.answer();
  view.model.msg({ type: "probe", view: VIEW });
  assert.equal(view.handle.pulling(), false);
  clock.advance(30_000);
  assert.equal(view.pulls().length, 1);
  view.answer({ messages: [{ type: "delta", run_id: 0, offset: 0, text: "late" }] });
  assert.equal(view.live.text, ""); // an answer to a pull is not taken once pushes arrive
});

test("another view's reset and probe change nothing here", () => {
  const view = makeView();
  view.model.msg({ type: "reset", view: "view-2", run_id: 0, text: "" });
  clock.advance(10_000);
  assert.deepEqual(view.pulls(), []); // no reset of its own: the deadline never started
  reset(view);
  view.model.msg({ type: "probe", view: "view-2" });
  clock.advance(PROBE_WAIT_MS);
  assert.equal(view.pulls().length, 1);
});

test("idle and visible: a pull a second", () => {
  const view = pullingView();
  view.answer();
  const times = pullTimes(view, 5000);
  assert.deepEqual(gaps(times), [IDLE_PULL_MS, IDLE_PULL_MS, IDLE_PULL_MS, IDLE_PULL_MS]);
});

test("queued: the live pace; running: faster until the run's first text, then the live pace", () => {
  const view = pullingView();
  view.answer({ state: { run_id: 1, status: "queued" } }); // behind another run, maybe for long
  const queued = pullTimes(view, 1000);
  assert.ok(queued.length >= 1000 / ACTIVE_PULL_MS - 1, `${queued}`);
  for (const gap of gaps(queued)) assert.equal(gap, ACTIVE_PULL_MS);
  const first = pullTimes(view, ACTIVE_PULL_MS + 5 * FIRST_TEXT_PULL_MS, {
    state: { status: "running" },
  });
  assert.ok(first.length >= 4, `${first}`);
  for (const gap of gaps(first)) assert.equal(gap, FIRST_TEXT_PULL_MS);
  clock.advance(FIRST_TEXT_PULL_MS);
  view.answer({ messages: [{ type: "delta", run_id: 1, offset: 0, text: "Red" }] });
  assert.equal(view.live.text, "Red");
  const live = pullTimes(view, 1000, {
    messages: [{ type: "delta", run_id: 1, offset: 3, text: "" }],
  });
  for (const gap of gaps(live)) assert.equal(gap, ACTIVE_PULL_MS);
  assert.ok(live.length >= 1000 / ACTIVE_PULL_MS - 1, `${live}`);
});

test("a run with no text after its first second of running: the live pace (a long prefill)", () => {
  const view = pullingView();
  view.answer({ state: { run_id: 1, status: "running" } });
  const times = pullTimes(view, FIRST_TEXT_WINDOW_MS + 1000);
  const late = times.filter((t) => t > FIRST_TEXT_WINDOW_MS + ACTIVE_PULL_MS);
  assert.ok(late.length >= 3, `${times}`);
  for (const gap of gaps(late)) assert.equal(gap, ACTIVE_PULL_MS);
  assert.ok(times.length < FIRST_TEXT_WINDOW_MS / FIRST_TEXT_PULL_MS + 1000 / ACTIVE_PULL_MS + 2);
});

test("the pace counts from the pull, not from its answer", () => {
  const view = pullingView({ status: "running" });
  view.answer({ messages: [{ type: "delta", run_id: 0, offset: 0, text: "Red" }] });
  const sent = view.pulls().length;
  clock.advance(ACTIVE_PULL_MS);
  assert.equal(view.pulls().length, sent + 1);
  clock.advance(100); // the kernel takes 100 ms to answer
  view.answer();
  clock.advance(ACTIVE_PULL_MS - 100 - 1);
  assert.equal(view.pulls().length, sent + 1);
  clock.advance(1);
  assert.equal(view.pulls().length, sent + 2);
});

test("a run that starts while the view idles is pulled at once", () => {
  const view = pullingView();
  view.answer();
  clock.advance(200);
  const sent = view.pulls().length;
  view.model.set("status", "queued"); // e.g. its own Run, answered with a state
  clock.advance(0);
  assert.equal(view.pulls().length, sent + 1);
});

test("one pull at a time: an unanswered one is sent again after RETRY_MS", () => {
  const view = pullingView();
  view.model.set("status", "running"); // a run starts while the pull awaits its answer
  clock.advance(RETRY_MS - 1);
  assert.equal(view.pulls().length, 1);
  clock.advance(1);
  assert.equal(view.pulls().length, 2);
});

test("hidden (off screen or a hidden tab): no pulls; shown again: pulls within a second", () => {
  /** @type {Array<(entries: Array<{isIntersecting: boolean}>) => void>} */
  const observers = [];
  globalThis.IntersectionObserver = class {
    constructor(cb) {
      observers.push(cb);
    }
    observe() {}
    disconnect() {}
  };
  const view = pullingView({ status: "running" });
  view.answer();
  observers[0]([{ isIntersecting: false }]);
  clock.advance(ACTIVE_PULL_MS); // the pull that was due
  const sent = view.pulls().length;
  clock.advance(10_000);
  assert.equal(view.pulls().length, sent);
  observers[0]([{ isIntersecting: true }]);
  globalThis.document = { hidden: true };
  clock.advance(10_000);
  assert.equal(view.pulls().length, sent);
  globalThis.document.hidden = false;
  clock.advance(IDLE_PULL_MS);
  assert.equal(view.pulls().length, sent + 1);
});

test("a view whose kernel is gone sends nothing", () => {
  const view = pullingView();
  view.answer();
  view.root.setAttribute("data-connection", "lost");
  clock.advance(10_000);
  assert.equal(view.pulls().length, 1);
});

test("a view that is gone pulls no more", () => {
  const view = pullingView();
  view.answer();
  view.scope.dispose();
  clock.advance(10_000);
  assert.equal(view.pulls().length, 1);
});

test("an answer's state lands as a synced change: run_id first, status last, the same skipped", () => {
  const view = pullingView({ run_id: 1, status: "running", metrics: { tokens: 3 } });
  view.answer({
    version: 7,
    state: { status: "complete", metrics: { tokens: 9 }, run_id: 2, prompt: "" },
  });
  assert.equal(view.changes[0], "run_id");
  assert.equal(view.changes.at(-1), "status");
  assert.deepEqual(view.model.get("metrics"), { tokens: 9 });
  view.answer({ version: 7, state: { metrics: { tokens: 9 } } }); // unchanged: no event
  assert.equal(view.changes.filter((n) => n === "metrics").length, 1);
  clock.advance(IDLE_PULL_MS);
  assert.equal(view.pulls().at(-1).version, 7); // the next pull says what it holds
});

test("a pulled delta and the same text pushed as well: shown once", () => {
  const view = pullingView({ status: "running" });
  view.answer({ messages: [{ type: "delta", run_id: 0, offset: 0, text: "Red and" }] });
  view.model.msg({ type: "delta", run_id: 0, offset: 0, text: "Red" }); // a push, late
  view.model.msg({ type: "delta", run_id: 0, offset: 3, text: " and blue" }); // ahead
  assert.equal(view.live.text, "Red and blue");
  // The next answer was cut at what the view held when it pulled ("Red and").
  clock.advance(ACTIVE_PULL_MS);
  assert.equal(view.pulls().at(-1).text, "Red and blue".length);
  view.answer({ messages: [{ type: "delta", run_id: 0, offset: 7, text: " blue" }] });
  assert.equal(view.live.text, "Red and blue");
  assert.deepEqual(
    view.sent.filter((m) => m.type === "sync"),
    [],
  ); // and no gap was seen
});

test("a pulled reset of a newer run replaces the text; a late push of the old run is dropped", () => {
  const view = pullingView({ status: "running" });
  view.answer({ messages: [{ type: "delta", run_id: 0, offset: 0, text: "Old" }] });
  view.answer({
    state: { run_id: 1 },
    messages: [{ type: "reset", view: VIEW, run_id: 1, text: "New text" }],
  });
  view.model.msg({ type: "delta", run_id: 0, offset: 3, text: " answer" });
  view.model.msg({ type: "delta", run_id: 1, offset: 0, text: "New" });
  assert.equal(view.live.runId, 1);
  assert.equal(view.live.text, "New text");
});
