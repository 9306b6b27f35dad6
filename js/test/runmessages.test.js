// The run protocol both views share (onRunMessages, js/src/live_text.js): deltas and resets go
// to the view's LiveText, a reasoning model's `thinking` messages (and a reset's thinking)
// to its LiveThinking, once, for the StreamWidget and the ChatWidget alike; while the run
// thinks, those messages' counters are the metrics line's. Run with `node --test`.
import assert from "node:assert/strict";
import { test } from "node:test";

import { LiveText, onRunMessages } from "../src/live_text.js";

function make() {
  /** @type {Map<string, Function>} */
  const handlers = new Map();
  const scope = { disposed: false, onModel: (name, fn) => handlers.set(name, fn) };
  const live = new LiveText(1, "view-1", () => {}, { clear() {}, grew() {} });
  const calls = { chrome: 0, metrics: 0, redraw: 0 };
  const received = [];
  onRunMessages(/** @type {any} */ (scope), live, {
    chrome: () => calls.chrome++,
    metrics: () => calls.metrics++,
    redraw: () => calls.redraw++,
    tokens: () => {},
    thinking: { receive: (m) => received.push(m) },
  });
  const emit = (m) => handlers.get("msg:custom")(m);
  return { live, calls, received, emit };
}

const thinking = (extra = {}) => ({
  type: "thinking",
  run_id: 1,
  offset: 0,
  text: "Hmm.",
  tokens: 4,
  elapsed_s: 0.5,
  done: false,
  ...extra,
});

test("a thinking message reaches the view's thinking and the metrics line's counters", () => {
  const { live, calls, received, emit } = make();
  emit(thinking());
  assert.equal(received.length, 1);
  assert.equal(live.liveTokens, 4);
  assert.equal(live.liveElapsed, 0.5);
  assert.equal(calls.metrics, 1);
});

test("the thinking's last message, or another run's, leaves the counters to the answer", () => {
  const { live, calls, received, emit } = make();
  emit(thinking({ done: true, tokens: 9 }));
  emit(thinking({ run_id: 7, tokens: 12 }));
  assert.equal(received.length, 2); // the view's thinking decides what they are
  assert.equal(live.liveTokens, null);
  assert.equal(calls.metrics, 0);
});

test("a reset the view applies gives the thinking its part too", () => {
  const { calls, received, emit } = make();
  const reset = { type: "reset", run_id: 1, view: "view-1", text: "Red.", thinking: { text: "Hmm." } };
  emit(reset);
  assert.deepEqual(received, [reset]);
  assert.equal(calls.redraw, 1);
  // A reset for another view is not this view's: its thinking is not either.
  emit({ ...reset, view: "view-2" });
  assert.equal(received.length, 1);
});
