// nbstream front end: the probability shading of the token views: the colour scale
// (viridis), the colour of a probability on it with the text colour that reads best, and
// the legend.

import { h } from "./dom.js";

/**
 * Viridis (matplotlib's default map: perceptually uniform, readable with the common
 * colour-vision deficiencies and in greyscale), at 0, 0.1, ... 1.
 */
const VIRIDIS = [
  [0x44, 0x01, 0x54],
  [0x48, 0x24, 0x75],
  [0x41, 0x44, 0x87],
  [0x35, 0x5f, 0x8d],
  [0x2a, 0x78, 0x8e],
  [0x21, 0x91, 0x8c],
  [0x22, 0xa8, 0x84],
  [0x44, 0xbf, 0x70],
  [0x7a, 0xd1, 0x51],
  [0xbd, 0xdf, 0x26],
  [0xfd, 0xe7, 0x25],
];

/** @param {number} c 0..255 */
const hex2 = (c) => Math.round(c).toString(16).padStart(2, "0");

/**
 * The colour of probability p on the scale, and the text colour that reads best on it.
 * @param {number} p 0..1
 * @returns {{bg: string, fg: string}}
 */
function shade(p) {
  const x = Math.min(1, Math.max(0, p)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  const t = x - i;
  const rgb = VIRIDIS[i].map((a, k) => a + (VIRIDIS[i + 1][k] - a) * t);
  // WCAG relative luminance; black or white text, whichever contrasts more.
  const lin = rgb.map((c) => {
    const s = c / 255;
    return s <= 0.04045 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
  });
  const lum = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2];
  const fg = (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) ? "#000" : "#fff";
  return { bg: `#${rgb.map(hex2).join("")}`, fg };
}

/** The scale as a CSS gradient (the legend's bar). */
function gradient() {
  const stops = VIRIDIS.map((c, i) => `#${c.map(hex2).join("")} ${i * 10}%`);
  return `linear-gradient(to right, ${stops.join(", ")})`;
}

/** The legend of the probability shading. */
function makeLegend() {
  const legend = h("div", "nbstream-legend", { role: "group", "aria-label": "Probability legend" });
  const title = h("span", "nbstream-legend-title");
  title.textContent = "Probability the model gave each token";
  const scale = h("span", "nbstream-legend-scale");
  const lo = h("span", "nbstream-legend-label");
  lo.textContent = "0%";
  const bar = h("span", "nbstream-legend-bar", { "aria-hidden": "true" });
  bar.style.background = gradient();
  const mid = h("span", "nbstream-legend-mid", { "aria-hidden": "true" });
  mid.textContent = "50%";
  bar.append(mid);
  const hi = h("span", "nbstream-legend-label");
  hi.textContent = "100%";
  scale.append(lo, bar, hi);
  const rank = h("span", "nbstream-legend-rank");
  const sample = h("span", "nbstream-legend-rank-sample", { "data-rank": "3" });
  rank.append(sample, "rank of a pick that was not the model's favourite");
  legend.append(title, scale, rank);
  return legend;
}

export { makeLegend, shade };
