// "Where it looked"'s pure parts (js/src/attention.js): the weights as the page writes them,
// a head's row and the layer's mean, the shading levels, what a position is to the step, and
// the sentences (the pick, the cap, the sink). Run with `node --test` (make check).
import assert from "node:assert/strict";
import { test } from "node:test";

import { MEAN, capWords, headRow, relation, rowSentence, shadeLevels, sinkWords, weightPercent } from "../src/attention.js";

/** Two layers of two heads over four positions; the query is position 3. */
const A = {
  step: 1,
  token: " b",
  layers: 2,
  heads: 2,
  positions: 4,
  prompt_tokens: 3,
  shown: [0, 1, 2, 3],
  tokens: ["<s>", "x", "y", " a"],
  scale: 10000,
  weights: [
    [
      [7000, 1000, 1000, 1000],
      [1000, 1000, 7000, 1000],
    ],
    [
      [2500, 2500, 2500, 2500],
      [0, 0, 0, 10000],
    ],
  ],
  rest: [
    [0, 0],
    [0, 0],
  ],
  cap: 256,
  sink: true,
  sink_share: 0.2625,
  sink_heads: 2,
  strongest: [],
};

test("a weight is written to the payload's precision", () => {
  assert.equal(weightPercent(6000, 10000), "60.00%");
  assert.equal(weightPercent(1, 10000), "0.01%");
  assert.equal(weightPercent(0, 10000), "0.00%");
  assert.equal(weightPercent(5, 1000), "0.5%");
});

test("a head's row is its weights; the layer's mean averages its heads", () => {
  assert.deepEqual(headRow(A, 0, 1).row, [1000, 1000, 7000, 1000]);
  assert.deepEqual(headRow(A, 0, MEAN).row, [4000, 1000, 4000, 1000]);
  assert.equal(headRow(A, 1, MEAN).rest, 0);
});

test("the shading grows with the weight beside the heaviest, the three heaviest numbered", () => {
  const levels = shadeLevels([7000, 1000, 600, 2000]);
  assert.deepEqual(
    levels.map((l) => l.level),
    [4, 1, 0, 2],
  );
  assert.deepEqual(
    levels.map((l) => l.place),
    [1, 3, 0, 2],
  );
  assert.deepEqual(
    shadeLevels([0, 0]).map((l) => l.place),
    [0, 0],
  );
});

test("positions are named for what they are to the step", () => {
  assert.equal(relation(A, 0), "first token: attention sink");
  assert.equal(relation({ ...A, sink: false }, 0), "first token");
  assert.equal(relation(A, 2), "previous token");
  assert.equal(relation(A, 3), "itself");
  assert.equal(relation(A, 1), "");
});

test("the sentence names the heaviest position", () => {
  assert.equal(rowSentence(A, 0, 1, headRow(A, 0, 1).row), 'Layer 1, head 2 looks most at "y" (previous token, position 3, prompt): 70.00%.');
  assert.match(rowSentence(A, 1, MEAN, headRow(A, 1, MEAN).row), /^Layer 2, all heads look most at " a" \(itself, position 4, answer\): 62.50%/);
});

test("the cap is said only when positions are left out", () => {
  assert.equal(capWords(A, 0), "");
  const capped = { ...A, positions: 10, shown: [0, 8, 9], cap: 3 };
  assert.match(capWords(capped, 2500), /the last 2 of the 10 positions \(a cap of 3/);
  assert.match(capWords(capped, 2500), /The 7 between \(positions 2 to 8\).*25\.00%/);
});

test("the sink is explained when there is one", () => {
  assert.match(sinkWords(A), /^Attention sink: the first token \("<s>"\) is where 2 of 4 heads look most, and it takes 26% /);
  assert.equal(sinkWords({ ...A, sink: false }), "");
});
