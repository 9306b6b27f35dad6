// A reasoning model's thinking as a view knows it (LiveThinking, js/src/thinking.js): the
// `thinking` messages placed at their offsets, gaps answered by a `sync` and repaired by the
// `reset`'s thinking, and the words of the Thinking section's summary. Run with `node --test`.
import assert from "node:assert/strict";
import { test } from "node:test";

import { LiveThinking, summaryOf } from "../src/thinking.js";

function make(runId = 1) {
  const sent = [];
  let changes = 0;
  const t = new LiveThinking(runId, "view-1", (m) => sent.push(m), () => changes++);
  return { t, sent, changes: () => changes };
}

const thinking = (run_id, offset, text, extra = {}) => ({
  type: "thinking",
  run_id,
  offset,
  text,
  tokens: null,
  elapsed_s: null,
  done: false,
  ...extra,
});

test("no thinking until a message says so: a run that does not think shows nothing", () => {
  const { t, sent } = make();
  assert.equal(t.state(), null);
  t.receive({ type: "reset", run_id: 1, view: "view-1", text: "an answer" });
  assert.equal(t.state(), null);
  assert.deepEqual(sent, []);
});

test("thinking messages append, carry the counters, and the last one ends it", () => {
  const { t, sent, changes } = make();
  t.receive(thinking(1, 0, "Let me", { tokens: 3, elapsed_s: 0.2 }));
  t.receive(thinking(1, 6, " think.", { tokens: 5, elapsed_s: 0.4 }));
  assert.deepEqual(t.state(), { text: "Let me think.", tokens: 5, elapsed_s: 0.4, done: false });
  t.receive(thinking(1, 13, "", { tokens: 6, elapsed_s: 0.5, done: true }));
  assert.deepEqual(t.state(), { text: "Let me think.", tokens: 6, elapsed_s: 0.5, done: true });
  assert.ok(changes() >= 3);
  assert.deepEqual(sent, []);
});

test("a gap is ignored and asks for a sync; the reset's thinking repairs it", () => {
  const { t, sent } = make();
  t.receive(thinking(1, 0, "abc"));
  t.receive(thinking(1, 10, "xyz")); // 7 characters missed
  assert.equal(t.state()?.text, "abc");
  assert.equal(sent.length, 1);
  assert.equal(sent[0].type, "sync");
  t.receive({
    type: "reset",
    run_id: 1,
    view: "view-1",
    text: "",
    thinking: { text: "abcdefghijxyz", tokens: 9, elapsed_s: 1.2, done: false },
  });
  assert.deepEqual(t.state(), { text: "abcdefghijxyz", tokens: 9, elapsed_s: 1.2, done: false });
  t.receive(thinking(1, 13, "!"));
  assert.equal(t.state()?.text, "abcdefghijxyz!");
});

test("another view's reset, and a late message of an older run, change nothing", () => {
  const { t } = make(2);
  t.receive(thinking(2, 0, "mine"));
  t.receive({ type: "reset", run_id: 2, view: "view-2", text: "", thinking: { text: "x", done: true } });
  t.receive(thinking(1, 0, "old"));
  assert.equal(t.state()?.text, "mine");
});

test("a new run forgets the thinking; a reset of a newer run adopts it", () => {
  const { t } = make();
  t.receive(thinking(1, 0, "first"));
  t.newRun(2);
  assert.equal(t.state(), null);
  assert.equal(t.runId, 2);
  t.receive({ type: "reset", run_id: 3, view: null, text: "Hi", thinking: { text: "third", tokens: 4, elapsed_s: 0.3, done: true } });
  assert.equal(t.runId, 3);
  assert.deepEqual(t.state(), { text: "third", tokens: 4, elapsed_s: 0.3, done: true });
});

test("the summary: thinking, thought, stopped or failed while thinking", () => {
  const t = { text: "…", tokens: 12, elapsed_s: 3.21, done: false };
  assert.equal(summaryOf(t, "running", false), "Thinking… 12 tokens");
  assert.equal(summaryOf({ ...t, tokens: 1 }, "running", false), "Thinking… 1 token");
  assert.equal(summaryOf({ ...t, done: true }, "running", true), "Thought for 3.2 s · 12 tokens");
  assert.equal(summaryOf({ ...t, done: true }, "complete", true), "Thought for 3.2 s · 12 tokens");
  assert.equal(summaryOf({ ...t, done: true }, "cancelled", false), "Stopped while thinking · 3.2 s · 12 tokens");
  assert.equal(summaryOf({ ...t, done: true }, "failed", false), "Failed while thinking · 3.2 s · 12 tokens");
  // It thought until max_new_tokens ran out: no answer came.
  assert.equal(summaryOf({ ...t, done: true }, "complete", false), "Thought for 3.2 s · 12 tokens · no answer");
});
