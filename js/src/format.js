// nbstream front end: how the page writes its figures (a finite number, seconds, a
// probability as a percentage).

/** A finite number. @param {unknown} x @returns {x is number} */
function isNum(x) {
  return typeof x === "number" && Number.isFinite(x);
}

/** @param {number} s */
function fmtSeconds(s) {
  const digits = s < 1 ? 2 : s < 100 ? 1 : 0;
  return `${s.toFixed(digits)} s`;
}

/** A probability as a percentage, never rounded to 0% or 100% when it is neither. @param {number} p */
function pct(p) {
  const v = p * 100;
  if (v <= 0) return "0%";
  if (v >= 100) return "100%";
  if (v < 0.01) return "<0.01%";
  if (v < 1) return `${v.toFixed(2)}%`;
  if (v > 99.9) return ">99.9%";
  return `${v.toFixed(1)}%`;
}

export { fmtSeconds, isNum, pct };
