// nbstream front end: a minimal DOM morph: update `target` to look like `source` with the
// fewest insertions. Grown text becomes an appended text node (an "addition" for the live
// region) instead of a re-created paragraph.

/** @param {Node} n */
function countNodes(n) {
  let c = 1;
  for (let k = n.firstChild; k; k = k.nextSibling) c += countNodes(k);
  return c;
}

/** @param {Element} to @param {Element} from */
function syncAttributes(to, from) {
  for (const { name } of Array.from(to.attributes)) {
    if (!from.hasAttribute(name)) to.removeAttribute(name);
  }
  for (const { name, value } of Array.from(from.attributes)) {
    if (to.getAttribute(name) !== value) to.setAttribute(name, value);
  }
}

/**
 * Make target's children match source's children; source is consumed.
 * With `after`, only the children of target after that node are touched
 * (the ones before it are frozen).
 * @param {Node} target @param {Node} source @param {Node | null} [after]
 * @returns {number} nodes created
 */
function morph(target, source, after = null) {
  let created = 0;
  let o = after ? after.nextSibling : target.firstChild;
  let n = source.firstChild;
  while (n) {
    const nNext = n.nextSibling;
    if (!o) {
      created += countNodes(n);
      target.appendChild(n);
    } else if (o.nodeType === 3 && n.nodeType === 3) {
      // A run of adjacent text nodes in the target vs one text node in the source.
      let run = /** @type {Text} */ (o).data;
      let last = o;
      while (last.nextSibling && last.nextSibling.nodeType === 3) {
        last = last.nextSibling;
        run += /** @type {Text} */ (last).data;
      }
      const runEnd = last.nextSibling;
      const want = /** @type {Text} */ (n).data;
      if (run !== want) {
        if (want.startsWith(run)) {
          target.insertBefore(document.createTextNode(want.slice(run.length)), runEnd);
        } else {
          // The run's nodes: runEnd is the node after its last one (or null).
          for (let k = o; k !== runEnd; ) {
            const next = k.nextSibling;
            target.removeChild(k);
            k = /** @type {ChildNode} */ (next);
          }
          target.insertBefore(n, runEnd);
        }
        created += 1;
      }
      o = runEnd;
    } else if (o.nodeType === 1 && n.nodeType === 1 && o.nodeName === n.nodeName) {
      if (!o.isEqualNode(n)) {
        syncAttributes(/** @type {Element} */ (o), /** @type {Element} */ (n));
        created += morph(o, n);
      }
      o = o.nextSibling;
    } else {
      created += countNodes(n);
      target.insertBefore(n, o);
      const next = o.nextSibling;
      target.removeChild(o);
      o = next;
    }
    n = nNext;
  }
  while (o) {
    const next = o.nextSibling;
    target.removeChild(o);
    o = next;
  }
  return created;
}

export { countNodes, morph };
