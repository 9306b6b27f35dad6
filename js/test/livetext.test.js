// A view's copy of the run's text (LiveText, js/src/live_text.js): deltas at code-point offsets,
// gaps answered by a `sync`, resets with the whole text. Run with `node --test` (make check).
import assert from "node:assert/strict";
import { test } from "node:test";

import { LiveText } from "../src/live_text.js";

function make(runId = 1) {
  const sent = [];
  const events = [];
  const live = new LiveText(runId, "view-1", (m) => sent.push(m), {
    clear: () => events.push("clear"),
    grew: () => events.push("grew"),
  });
  return { live, sent, events };
}

const delta = (run_id, offset, text, extra = {}) => ({ type: "delta", run_id, offset, text, ...extra });

test("deltas in order append; their counters are kept", () => {
  const { live, sent } = make();
  assert.equal(live.delta(delta(1, 0, "Hello", { tokens: 1, elapsed_s: 0.5 })), "text");
  assert.equal(live.delta(delta(1, 5, ", world")), "text");
  assert.equal(live.text, "Hello, world");
  assert.equal(live.liveTokens, 1);
  assert.equal(live.liveElapsed, 0.5);
  assert.deepEqual(sent, []);
});

test("offsets count code points, not UTF-16 units", () => {
  const { live, sent } = make();
  live.delta(delta(1, 0, "\ud83d\ude00a")); // one emoji (two UTF-16 units) and "a": 2 code points
  assert.equal(live.delta(delta(1, 2, "b")), "text");
  assert.equal(live.text, "\ud83d\ude00ab");
  assert.deepEqual(sent, []);
});

test("a gap is ignored and asks once for the whole text", () => {
  const { live, sent } = make();
  live.delta(delta(1, 0, "abc"));
  assert.equal(live.delta(delta(1, 10, "xyz")), "counters");
  assert.equal(live.delta(delta(1, 13, "more")), "counters"); // still a gap: no second sync
  assert.equal(live.text, "abc");
  assert.equal(sent.length, 1);
  assert.equal(sent[0].type, "sync");
  assert.equal(sent[0].view, "view-1");
  assert.equal(typeof sent[0].page, "string");
});

test("a delta that overlaps the text it agrees with adds only what is new", () => {
  const { live, sent } = make();
  live.delta(delta(1, 0, "abcdef"));
  assert.equal(live.delta(delta(1, 4, "efgh")), "text");
  assert.equal(live.text, "abcdefgh");
  assert.equal(live.delta(delta(1, 2, "cd")), "text"); // wholly known already
  assert.equal(live.text, "abcdefgh");
  assert.equal(live.delta(delta(1, 2, "XY")), "counters"); // disagrees: a gap
  assert.equal(sent.length, 1);
});

test("a late delta of an old run is stale; one of an unknown newer run asks for a sync", () => {
  const { live, sent } = make(3);
  assert.equal(live.delta(delta(2, 0, "old")), "stale");
  assert.deepEqual(sent, []);
  assert.equal(live.delta(delta(4, 7, "new")), "gap");
  assert.equal(sent.length, 1);
  assert.equal(live.text, "");
});

test("a reset replaces or extends the text; a newer run's reset adopts that run", () => {
  const { live, events } = make();
  live.delta(delta(1, 0, "abc"));
  assert.equal(live.reset({ type: "reset", run_id: 1, view: null, text: "abcdef" }), true);
  assert.equal(live.text, "abcdef");
  assert.equal(live.reset({ type: "reset", run_id: 1, view: "view-1", text: "xyz" }), true);
  assert.equal(live.text, "xyz");
  assert.equal(live.reset({ type: "reset", run_id: 1, view: "another-view", text: "nope" }), false);
  assert.equal(live.reset({ type: "reset", run_id: 0, view: null, text: "stale" }), false);
  assert.equal(live.reset({ type: "reset", run_id: 2, view: null, text: "second run" }), true);
  assert.equal(live.runId, 2);
  assert.equal(live.text, "second run");
  assert.ok(events.includes("clear"));
});

test("a new run clears the text and the counters, once", () => {
  const { live } = make();
  live.delta(delta(1, 0, "abc", { tokens: 3 }));
  assert.equal(live.newRun(2), true);
  assert.equal(live.text, "");
  assert.equal(live.liveTokens, null);
  assert.equal(live.newRun(2), false);
  assert.equal(live.newRun(1), false);
});
