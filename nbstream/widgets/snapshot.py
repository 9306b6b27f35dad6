"""A widget's last run, kept in its synced state so that a saved notebook shows it without a kernel.

The run's text reaches a live view as custom messages, which no saved notebook keeps: the
widget state a notebook stores (JupyterLab, ``nbconvert --execute
--ExecutePreprocessor.store_widget_state=True``) holds synced traits only. When a run ends,
the widget sets one trait, ``snapshot``, to a compact copy of what the views showed: the
answer's text, its thinking, where each token ended in the text and when it came (for the
page's Replay), and the token views' entries when a token view was on. A view that gets no
answer from a kernel draws from it (js/src/replay.js). PROTOCOL.md defines the fields.
"""

from __future__ import annotations

import logging
from itertools import accumulate
from typing import Any, cast

from .._tokens import TokenPieces, token_entries
from ..generation import Generation
from ..protocol import RunSnapshot, TokenEntry

__all__ = ["SNAPSHOT_VERSION", "run_snapshot"]

logger = logging.getLogger(__name__)

#: The snapshot's format; a view ignores one whose ``v`` it does not know.
SNAPSHOT_VERSION = 1


def _utf16_len(text: str) -> int:
    # The page slices the text as a JavaScript string: lengths in UTF-16 code units.
    return len(text.encode("utf-16-le")) // 2


def _steps(text: str, pieces: list[str], times_s: list[float]) -> list[int]:
    """``[dt_ms, grown, ...]``: per token, the ms since the one before and how much the answer grew.

    The pieces are the stream as the model made it (a thinking model's thinking first, a
    stop string last); the answer is the part of it that ``text`` is, so each token's end
    is placed in the answer and clamped to it.
    """
    stream = "".join(pieces)
    # Most answers are ASCII: then every length is len(), without encoding each piece.
    size = len if stream.isascii() and text.isascii() else _utf16_len
    start = size(stream) - size(text) if stream.endswith(text) else 0
    total = size(text)
    if len(pieces) != len(times_s):
        raise ValueError(f"{len(pieces)} pieces but {len(times_s)} times")
    # Where each token's end falls in the answer, and when it came in whole ms, never
    # before the token ahead of it (the replay plays forwards).
    ends = [min(total, max(0, at - start)) for at in accumulate(map(size, pieces))]
    stamps = list(accumulate((round(time_s * 1000) for time_s in times_s), max, initial=0))
    steps: list[int] = []
    shown = 0
    for before_ms, ms, now in zip(stamps, stamps[1:], ends, strict=False):
        steps += (ms - before_ms, now - shown)
        shown = now
    if shown < total:  # text the pieces do not account for: shown with the last token
        steps += [0, total - shown]
    return steps


def run_snapshot(
    run: Generation, run_id: int, tokenizer: Any, *, tokens: bool, alternatives: bool
) -> RunSnapshot | None:
    """The ``snapshot`` trait of an ended run; None if its recording cannot be read back.

    Args:
        run: A run that has ended.
        run_id: The widget's run id for it (a view uses the snapshot of its run only).
        tokenizer: The run's tokenizer, for the token views' entries.
        tokens: Include the token entries (a token view is on and the run has tokens).
        alternatives: Include each token's alternatives (the Alternatives view is on).

    Returns:
        The snapshot, or None.

    Example:
        >>> run_snapshot(run, 1, tokenizer, tokens=False, alternatives=False)["text"]
        'Red and blue.'
    """
    text = run.partial_text
    try:
        pieces, times = run.timeline()
    except (OSError, ValueError, RuntimeError):
        logger.warning("nbstream: no snapshot of the run for a saved notebook", exc_info=True)
        return None
    snapshot: RunSnapshot = {
        "v": SNAPSHOT_VERSION,
        "run_id": run_id,
        "text": text,
        "thinking": run.thinking,
        "steps": _steps(text, pieces, times),
        "tokens": None,
    }
    trace = run.trace
    if tokens and tokenizer is not None and (trace is None or isinstance(trace, list)):
        ids = run.token_ids
        stop = len(ids) if trace is None else min(len(ids), len(trace))
        entries = token_entries(TokenPieces(tokenizer), ids, trace, 0, stop, alternatives)
        snapshot["tokens"] = cast("list[TokenEntry]", entries)
        thinking = run.metrics["thinking_tokens"]
        if thinking is not None:
            snapshot["thinking_tokens"] = thinking
    return snapshot
