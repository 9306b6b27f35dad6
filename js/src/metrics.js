// nbstream front end: a run's metrics line (tokens, first token, speed, time, why it ended),
// live counters while it streams, the final metrics after.

import { h } from "./dom.js";
import { fmtSeconds, isNum } from "./format.js";
import { ACTIVE } from "./status.js";

/**
 * How the metrics line says why a run ended, in words for a beginner (the raw
 * finish_reason is in its tooltip). An end the badge or the error already says (cut at
 * max_new_tokens, cancelled, failed) is not said again.
 * @type {Record<string, string>}
 */
const FINISH_WORDS = {
  eos: "ended by the model",
  stop: "ended at a stop string",
};

/**
 * Write the metrics line of a run into `el`: live counters (from deltas) while it is
 * active, the final metrics after.
 * @param {HTMLElement} el @param {string} s status @param {any} m metrics
 * @param {number | null} liveTokens @param {number | null} liveElapsed
 */
function showMetrics(el, s, m, liveTokens, liveElapsed) {
  const live = ACTIVE.has(s);
  const tokens = live ? (liveTokens ?? m.tokens) : (m.tokens ?? liveTokens);
  const elapsed = live ? (liveElapsed ?? m.elapsed_s) : (m.elapsed_s ?? liveElapsed);
  const parts = [];
  if (isNum(tokens)) parts.push(`${tokens} ${tokens === 1 ? "token" : "tokens"}`);
  // A server that sent no usage: pieces of text, never called tokens.
  else if (!live && isNum(m.text_chunks))
    parts.push(`${m.text_chunks} ${m.text_chunks === 1 ? "chunk" : "chunks"} (no token count)`);
  if (isNum(m.ttft_s)) parts.push(`first token ${fmtSeconds(m.ttft_s)}`);
  if (!live && isNum(m.tokens_per_s)) parts.push(`${m.tokens_per_s.toFixed(1)} tok/s`);
  if (isNum(elapsed)) parts.push(fmtSeconds(elapsed));
  if (isNum(m.queued_s) && m.queued_s >= 0.1) parts.push(`queued ${fmtSeconds(m.queued_s)}`);
  const ending = live ? undefined : FINISH_WORDS[String(m.finish_reason)];
  if (ending) parts.push(ending);
  const line = parts.join(" · ");
  if (el.textContent !== line) {
    // Each figure in one piece: the line wraps between them, never inside "12.3 tok/s".
    el.replaceChildren();
    parts.forEach((part, i) => {
      if (i) el.append(" · ");
      const span = h("span", "nbstream-metric");
      span.textContent = part;
      el.append(span);
    });
  }
  const tip = [];
  if (isNum(m.queued_s)) tip.push(`queued ${fmtSeconds(m.queued_s)}`);
  if (isNum(m.first_chunk_s)) tip.push(`first chunk shown ${fmtSeconds(m.first_chunk_s)}`);
  if (m.tokens_note) tip.push(String(m.tokens_note));
  if (!live && m.finish_reason) tip.push(`finish_reason: ${m.finish_reason}`);
  el.title = tip.join(" · ");
}

export { showMetrics };
