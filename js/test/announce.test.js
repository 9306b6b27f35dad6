// What a screen reader is told (js/src/announce.js): the words for a run's state and
// metrics, and for the compare header's columns. Run with `node --test` (make check).
import assert from "node:assert/strict";
import { test } from "node:test";

import { compareAnnouncement, comparePhase, runAllStatuses, runAnnouncement } from "../src/announce.js";

test("a complete run: its token count", () => {
  assert.equal(runAnnouncement("complete", { tokens: 234, finish_reason: "eos" }), "Answer complete, 234 tokens");
  assert.equal(runAnnouncement("complete", { tokens: 1 }), "Answer complete, 1 token");
});

test("a run cut at max_new_tokens says so", () => {
  assert.equal(
    runAnnouncement("complete", { tokens: 300, finish_reason: "length" }),
    "Stopped at max_new_tokens, 300 tokens",
  );
});

test("a stopped run: how far it got, from the metrics or the live count", () => {
  assert.equal(runAnnouncement("cancelled", { tokens: 40 }), "Stopped after 40 tokens");
  assert.equal(runAnnouncement("cancelled", {}, null, { liveTokens: 7 }), "Stopped after 7 tokens");
  assert.equal(runAnnouncement("cancelled", {}), "Stopped");
  // The final metrics win over what the view last counted.
  assert.equal(runAnnouncement("cancelled", { tokens: 9 }, null, { liveTokens: 7 }), "Stopped after 9 tokens");
});

test("a failed run: its message", () => {
  assert.equal(
    runAnnouncement("failed", { tokens: 3 }, { type: "RuntimeError", message: "out of memory" }),
    "Failed: out of memory",
  );
  assert.equal(runAnnouncement("failed", {}, { type: "RuntimeError", message: "" }), "Failed: RuntimeError");
  assert.equal(runAnnouncement("failed", {}, null), "Failed");
});

test("a server that sent no usage: chunks, never tokens", () => {
  assert.equal(runAnnouncement("complete", { tokens: null, text_chunks: 12 }), "Answer complete, 12 chunks");
  assert.equal(runAnnouncement("complete", null), "Answer complete");
});

test("state changes; none for idle; only the end when asked", () => {
  assert.equal(runAnnouncement("queued", {}), "Queued");
  assert.equal(runAnnouncement("running", {}), "Running");
  assert.equal(runAnnouncement("idle", {}), "");
  assert.equal(runAnnouncement("running", {}, null, { states: false }), "");
  assert.equal(runAnnouncement("bogus", {}), "");
});

test("a label goes first", () => {
  assert.equal(
    runAnnouncement("complete", { tokens: 5 }, null, { label: "temperature 0.7", states: false }),
    "temperature 0.7: Answer complete, 5 tokens",
  );
});

test("the compare header: running, then how the columns ended", () => {
  assert.equal(comparePhase(["idle", "idle"]), "idle");
  assert.equal(comparePhase(["complete", "queued"]), "active");
  assert.equal(comparePhase(["complete", "cancelled"]), "ended");
  assert.equal(compareAnnouncement(["running", "queued", "queued"]), "Running 3 columns");
  assert.equal(compareAnnouncement(["complete", "complete", "complete"]), "All 3 columns complete");
  assert.equal(compareAnnouncement(["complete"]), "The column is complete");
  assert.equal(compareAnnouncement(["complete", "cancelled", "cancelled"]), "3 columns ended: 1 complete, 2 stopped");
  assert.equal(compareAnnouncement(["failed", "complete"]), "2 columns ended: 1 complete, 1 failed");
  assert.equal(compareAnnouncement(["idle", "idle"]), "");
});

test("the compare header counts the columns a Run all started (in_run_all)", () => {
  const statuses = ["complete", "running", "cancelled"];
  assert.deepEqual(runAllStatuses(statuses, [true, false, true]), ["complete", "cancelled"]);
  assert.equal(comparePhase(runAllStatuses(statuses, [true, false, true])), "ended");
  assert.equal(compareAnnouncement(runAllStatuses(statuses, [true, false, true])), "2 columns ended: 1 complete, 1 stopped");
  // A column running alone is no Run all: nothing for the header to say.
  assert.deepEqual(runAllStatuses(statuses, [false, false, false]), []);
  assert.equal(comparePhase([]), "idle");
  assert.equal(compareAnnouncement([]), "");
  // A list that does not match the columns: every column counts.
  assert.deepEqual(runAllStatuses(statuses, undefined), statuses);
  assert.deepEqual(runAllStatuses(statuses, [true]), statuses);
});
