// nbstream front end: how the page writes its figures (a finite number, seconds).

/** A finite number. @param {unknown} x @returns {x is number} */
function isNum(x) {
  return typeof x === "number" && Number.isFinite(x);
}

/** @param {number} s */
function fmtSeconds(s) {
  const digits = s < 1 ? 2 : s < 100 ? 1 : 0;
  return `${s.toFixed(digits)} s`;
}

export { fmtSeconds, isNum };
