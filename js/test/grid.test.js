// A prompt grid's cell (js/src/grid_cell.js): its figures in words, live and ended, a Stop not
// yet acted on, and where a kernel's character offset (code points) falls in a page string.
// Run with `node --test` (make check).
import assert from "node:assert/strict";
import { test } from "node:test";

import { cellFigures, codePointIndex } from "../src/grid_cell.js";

const entry = (status, extra = {}) => ({
  status,
  run_id: 1,
  tokens: null,
  elapsed_s: null,
  finish_reason: null,
  error: null,
  ...extra,
});

test("a running cell shows its live counters; an ended one its end's figures and why", () => {
  assert.equal(cellFigures(entry("running", { tokens: 1 }), 7, 0.5, false), "7 tokens \u00b7 0.50 s");
  assert.equal(cellFigures(entry("queued"), null, null, false), "");
  const ended = entry("complete", { tokens: 12, elapsed_s: 0.84, finish_reason: "eos" });
  assert.equal(cellFigures(ended, 11, 0.8, false), "12 tokens \u00b7 0.84 s \u00b7 ended by the model");
  const cut = entry("complete", { tokens: 1, elapsed_s: 120, finish_reason: "length" });
  assert.equal(cellFigures(cut, null, null, false), "1 token \u00b7 120 s \u00b7 cut at max_new_tokens");
});

test("a Stop not yet acted on says stopping, never cancelled; the kernel's end says stopped", () => {
  assert.equal(cellFigures(entry("running", { tokens: 3 }), 4, 0.2, true), "4 tokens \u00b7 0.20 s \u00b7 stopping\u2026");
  const stopped = entry("cancelled", { tokens: 4, elapsed_s: 0.25, finish_reason: "cancelled" });
  assert.equal(cellFigures(stopped, 4, 0.2, true), "4 tokens \u00b7 0.25 s \u00b7 stopped");
});

test("a code point offset counts an astral character once", () => {
  assert.equal(codePointIndex("Le chat", 3), 3);
  assert.equal(codePointIndex("\u{1F600}ab", 1), 2);
  assert.equal(codePointIndex("\u{1F600}ab", 2), 3);
  assert.equal(codePointIndex("ab", 9), 2);
});
