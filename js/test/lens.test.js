// The "Inside the model" section's pure parts (js/src/lens.js): the chart's points, the
// layers where the answer changed, the shading levels of the earlier tokens and the sentence.
// Run with `node --test` (make check).
import assert from "node:assert/strict";
import { test } from "node:test";

import { attributionLevels, changes, chartPoints, lensSentence, percent, pushWords } from "../src/lens.js";

/** A lens of four layers: " Paris" becomes the favourite at layer 3. */
const LENS = {
  step: 2,
  token: " Paris",
  layers: 4,
  probs: [0.01, 0.05, 0.4, 0.9],
  ranks: [40, 7, 1, 1],
  top: [
    [[" the", 0.2], [" a", 0.1]],
    [[" France", 0.3], [" the", 0.1]],
    [[" Paris", 0.4], [" France", 0.2]],
    [[" Paris", 0.9], [" Lyon", 0.01]],
  ],
  changed: [1, 2],
};

test("probabilities run from the bottom (0) to the top (1), layers evenly across", () => {
  const pts = chartPoints(LENS, "prob");
  assert.equal(pts.length, 4);
  const xs = pts.map((p) => p.x);
  assert.deepEqual(xs, [...xs].sort((a, b) => a - b));
  const gaps = xs.slice(1).map((x, k) => +(x - xs[k]).toFixed(1));
  assert.ok(gaps.every((g) => g === gaps[0]), `uneven: ${gaps}`);
  // SVG's y grows downwards: a likelier layer is higher up.
  const ys = pts.map((p) => p.y);
  assert.deepEqual(ys, [...ys].sort((a, b) => b - a));
  assert.equal(chartPoints({ ...LENS, probs: [0, 1] }, "prob")[1].y, 6);
  assert.equal(chartPoints({ ...LENS, probs: [0, 1] }, "prob")[0].y, 84 - 6);
});

test("rank 1 is at the top, the worst rank at the bottom", () => {
  const pts = chartPoints(LENS, "rank");
  assert.equal(pts[2].y, pts[3].y);
  assert.equal(pts[3].y, 6);
  assert.equal(pts[0].y, 84 - 6);
  assert.ok(pts[1].y < pts[0].y && pts[1].y > pts[2].y);
});

test("a lens of one layer, or of odd values, still draws inside the chart", () => {
  const one = chartPoints({ ...LENS, probs: [2], ranks: [-1] }, "prob");
  assert.deepEqual(one, [{ x: 130, y: 6 }]);
  for (const mode of /** @type {const} */ (["prob", "rank"])) {
    for (const p of chartPoints({ ...LENS, probs: [Number.NaN, -1], ranks: [null, -5] }, mode)) {
      assert.ok(p.y >= 6 && p.y <= 78, `${mode}: ${p.y}`);
    }
  }
});

test("the changed layers come with their top few, out-of-range layers dropped", () => {
  assert.deepEqual(changes(LENS), [
    { layer: 1, top: [[" France", 0.3], [" the", 0.1]] },
    { layer: 2, top: [[" Paris", 0.4], [" France", 0.2]] },
  ]);
  assert.deepEqual(changes({ ...LENS, changed: [9, -1, 2] }).map((c) => c.layer), [2]);
  assert.deepEqual(changes({ ...LENS, changed: [0, 1, 2, 3] }, 2).map((c) => c.layer), [2, 3]);
});

test("shading levels follow each share beside the largest; the five largest are numbered", () => {
  const attr = {
    step: 2,
    token: " Paris",
    tokens: ["a", "b", "c", "d", "e", "f", "g"],
    shares: [0.5, 0.2, 0.04, -0.3, 0, 0.01, 0.02],
    prompt_tokens: 5,
    method: "gradient · input",
  };
  const levels = attributionLevels(attr);
  assert.deepEqual(
    levels.map((l) => l.level),
    [3, 2, 0, 2, 0, 0, 0],
  );
  assert.deepEqual(
    levels.map((l) => l.place),
    [1, 3, 4, 2, 0, 0, 5],
  );
  assert.equal(levels[3].share, -0.3);
  assert.deepEqual(attributionLevels({ ...attr, shares: [0, 0] }).map((l) => l.level), [0, 0]);
});

test("the sentence says where the token became the favourite and stayed", () => {
  assert.equal(lensSentence(LENS), '" Paris" becomes the favourite at layer 3 of 4 and stays so (90% at the output).');
  assert.match(lensSentence({ ...LENS, ranks: [1, 1, 1, 1] }), /from the first layer on/);
  assert.match(lensSentence({ ...LENS, ranks: [1, 2, 3, 2] }), /never the layers' favourite \(at the output: rank 2, 90%\)/);
  assert.equal(lensSentence({ ...LENS, ranks: [] }), "");
});

test("percentages are never rounded to 0% or 100% when they are neither", () => {
  assert.equal(percent(0), "0%");
  assert.equal(percent(0.0001), "<0.1%");
  assert.equal(percent(0.05), "5.0%");
  assert.equal(percent(0.9995), ">99.9%");
  assert.equal(percent(1), "100%");
  assert.equal(percent(Number.NaN), "0%");
});

test("a share's direction is written in words, not only drawn", () => {
  assert.equal(pushWords(0.3), "toward 30%");
  assert.equal(pushWords(-0.05), "away 5.0%");
  assert.equal(pushWords(0), "toward 0%");
});
