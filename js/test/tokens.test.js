// The token views' pure parts (js/src/shading.js, format.js, token_text.js): the probability
// shading, percentages and the real text of byte-piece tokens. Run with `node --test` (make check).
import assert from "node:assert/strict";
import { test } from "node:test";

import { pct } from "../src/format.js";
import { shade } from "../src/shading.js";
import { realText } from "../src/token_text.js";

/** WCAG relative luminance of "#rrggbb". @param {string} hex */
function luminance(hex) {
  const [r, g, b] = [1, 3, 5].map((i) => {
    const s = Number.parseInt(hex.slice(i, i + 2), 16) / 255;
    return s <= 0.04045 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
  });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}

/** @param {number} a @param {number} b luminances */
function contrast(a, b) {
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}

test("the ends of the scale are viridis' ends; out-of-range probabilities are clamped", () => {
  assert.deepEqual(shade(0), { bg: "#440154", fg: "#fff" });
  assert.deepEqual(shade(1), { bg: "#fde725", fg: "#000" });
  assert.deepEqual(shade(-0.5), shade(0));
  assert.deepEqual(shade(1.5), shade(1));
  assert.deepEqual(shade(0.5), { bg: "#21918c", fg: "#000" });
});

test("the text on every shade reads (WCAG AA contrast, 4.5:1)", () => {
  for (let k = 0; k <= 1000; k++) {
    const { bg, fg } = shade(k / 1000);
    assert.match(bg, /^#[0-9a-f]{6}$/);
    const ratio = contrast(luminance(bg), fg === "#000" ? 0 : 1);
    assert.ok(ratio >= 4.5, `p=${k / 1000}: ${fg} on ${bg} has contrast ${ratio.toFixed(2)}`);
  }
});

test("a likelier token is never a darker shade (up to interpolation between stops)", () => {
  let prev = -1;
  for (let k = 0; k <= 1000; k++) {
    const l = luminance(shade(k / 1000).bg);
    assert.ok(l > prev - 0.001, `p=${k / 1000}`);
    prev = Math.max(prev, l);
  }
});

test("percentages are never rounded to 0% or 100% when they are neither", () => {
  assert.equal(pct(0), "0%");
  assert.equal(pct(1), "100%");
  assert.equal(pct(0.5), "50.0%");
  assert.equal(pct(0.005), "0.50%");
  assert.equal(pct(0.00001), "<0.01%");
  assert.equal(pct(0.9999), ">99.9%");
  assert.equal(pct(0.999), "99.9%");
  for (const p of [1e-9, 1e-4, 0.0099, 0.99949, 0.9995, 1 - 1e-9]) {
    assert.ok(!["0%", "0.00%", "0.0%", "100%", "100.0%"].includes(pct(p)), `pct(${p}) = ${pct(p)}`);
  }
});

test("byte-piece tokens join back into their characters", () => {
  const tokens = [
    [1, "Dots", "text"],
    [2, "e2 80", "bytes"],
    [3, "a6", "bytes"],
    [4, " ok", "text"],
    [5, "<|im_end|>", "special"],
  ];
  assert.equal(realText(tokens), "Dots\u2026 ok<|im_end|>");
  assert.equal(realText([[1, "\u00e9\ud83d\ude00", "text"]]), "\u00e9\ud83d\ude00");
  assert.equal(realText([[1, null, "text"]]), "");
});
