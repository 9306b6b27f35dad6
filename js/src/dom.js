// nbstream front end: making an element, the one DOM helper every page module uses.

/**
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag @param {string} [cls] @param {Record<string, string>} [attrs]
 * @returns {HTMLElementTagNameMap[K]}
 */
function h(tag, cls, attrs) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (attrs) for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

export { h };
