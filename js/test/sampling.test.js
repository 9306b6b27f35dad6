// The sampling panel's words (js/src/sampling.js): a slider's value as its value text
// (what a screen reader reads), and a bar's percentage. Run with `node --test` (make check).
import assert from "node:assert/strict";
import { test } from "node:test";

import { percent, valueText } from "../src/sampling.js";

test("each slider says when it is off, and temperature 0 that it is greedy", () => {
  assert.equal(valueText("temperature", 0), "0 (greedy)");
  assert.equal(valueText("temperature", 0.7000000001), "0.7");
  assert.equal(valueText("top_k", 0), "off");
  assert.equal(valueText("top_k", 40), "40");
  assert.equal(valueText("top_p", 1), "off (1)");
  assert.equal(valueText("top_p", 0.9), "0.9");
});

test("a bar's percentage is never rounded to 0% or 100% when it is neither", () => {
  assert.equal(percent(0), "0%");
  assert.equal(percent(1), "100%");
  assert.equal(percent(0.0004), "<0.1%");
  assert.equal(percent(0.0186), "1.9%");
  assert.equal(percent(0.3412), "34%");
  assert.equal(percent(0.9996), ">99.5%");
});
