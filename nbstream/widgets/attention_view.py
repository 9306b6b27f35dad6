"""The kernel side of the popover's attention view ("Where it looked", in "Inside the model").

A view sends an ``attention`` request when a token's attention view opens; the reply, to that
view only, carries :meth:`nbstream.Generation.attention` of the step as a compact payload
(:func:`attention_data`): every layer's and head's weights over the positions, each an integer
count of ten-thousandths (``round(weight * 10000)``), the sharpest heads, the attention sink,
and ``describe()``'s words. A long input is capped (:data:`CAP` positions: the first, where a
sink sits, and the last ``CAP - 1``), with the weight of the positions left out given per head,
so the page can say what it does not show and stays quick on a long run.

It costs one forward pass with eager attention, so it is computed on a worker thread of its own
(``nbstream-attention``, started on demand and ended once no request waits), never on the comm
handler's (a Stop is handled there), by the rules the lens's requests follow too
(``widgets/step_requests.py``): requests answered in order, one overtaken by a newer request of
its view skipped, the last few (run, step) answers kept, nothing raised into the comm handler (a
bad request, a run that cannot show its attention, a server's or a replay's, or a failure is an
``error`` in words), and ``close`` waits at most :data:`CLOSE_WAIT_S` seconds for a pass under
way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, cast

from ..protocol import AttentionData, AttentionReply
from .step_requests import StepRequests, reply_head, shown_step

__all__ = ["CAP", "SCALE", "THREAD_NAME", "AttentionViewer", "attention_data", "attention_fields"]

logger = logging.getLogger(__name__)

#: The most positions a reply carries: the first and the last ``CAP - 1`` of a longer input.
CAP = 256
#: A weight travels as ``round(weight * SCALE)``: ten-thousandths (0.01 percentage points).
SCALE = 10_000
#: How many of the sharpest heads a reply names.
STRONGEST = 5
#: How many (run, step) answers are kept per widget.
CACHE_STEPS = 16
#: The longest ``close`` waits for a pass under way (seconds).
CLOSE_WAIT_S = 5.0
#: The worker thread's name (tests look for leftovers by it).
THREAD_NAME = "nbstream-attention"


class AttentionViewer:
    """Answers one widget's ``attention`` requests, on a worker thread.

    Args:
        runs: Gives the runs the views show, as ``{run_id: run}``.
        send: Sends a message to the widget's views (the reply names its view).
        refusal: Why the widget shows no attention now (a blind round before Reveal), or
            None; asked for each request.

    Example:
        >>> viewer = AttentionViewer(lambda: {}, print, lambda: None)
        >>> viewer.answer({"run_id": 1, "step": 0})
        Traceback (most recent call last):
        ...
        LookupError: this answer is no longer shown by the widget (a newer run replaced it)
        >>> viewer.close()
        True
    """

    def __init__(
        self,
        runs: Callable[[], dict[int, Any]],
        send: Callable[[AttentionReply], None],
        refusal: Callable[[], str | None],
    ) -> None:
        self._runs = runs
        self._send = send
        self._refusal = refusal
        self._requests = StepRequests(
            self._answer, kind="attention", thread_name=THREAD_NAME, cache_steps=CACHE_STEPS
        )

    @property
    def computed(self) -> int:
        """How many steps were computed (not answered from the kept ones); tests read it."""
        return self._requests.computed

    def request(self, content: dict[str, Any]) -> None:
        """Queue a request (called on the comm handler's thread; never raises).

        Args:
            content: The ``attention`` message (PROTOCOL.md).
        """
        self._requests.request(content)

    def close(self, timeout: float = CLOSE_WAIT_S) -> bool:
        """Stop taking requests (the widget closed) and wait, at most ``timeout``, for the worker.

        Args:
            timeout: The longest wait, in seconds.

        Returns:
            True when no worker is left running.
        """
        return self._requests.close(timeout)

    # -- on the worker thread -------------------------------------------------------------
    def _answer(self, content: dict[str, Any]) -> None:
        reply = cast(AttentionReply, reply_head("attention", content))
        try:
            reply.update(self.answer(content))  # type: ignore[typeddict-item]
        except (TypeError, ValueError, LookupError) as exc:  # AttentionUnavailable: ValueError
            reply["error"] = str(exc)
        except Exception as exc:
            logger.exception("nbstream: the attention of a step failed")
            reply["error"] = f"the attention could not be computed: {type(exc).__name__}: {exc}"
        if self._requests.closed:
            return  # the widget is gone
        try:
            self._send(reply)
        except Exception:
            logger.exception("nbstream: sending an attention reply failed")

    def answer(self, content: dict[str, Any]) -> dict[str, Any]:
        """The reply's fields for a request: its attention, words and time (kept per step).

        Args:
            content: The request: its ``run_id`` and ``step``.

        Returns:
            ``attention`` (:func:`attention_data`), ``words`` and ``elapsed_s``.

        Raises:
            TypeError: A ``run_id`` or ``step`` of the wrong type.
            LookupError: The run is no longer shown.
            ValueError: The widget shows no attention now, or the run cannot show its own
                (a server's, a replay's, a step out of range: the run's words).
        """
        run, step = shown_step(content, self._runs, self._refusal)
        kept = self._requests.kept(run, step)
        if kept is not None:
            return kept
        fields = attention_fields(run, step)
        self._requests.count_computed()
        self._requests.keep(run, step, fields)
        return fields


def attention_fields(run: Any, step: int, cap: int = CAP) -> dict[str, Any]:
    """The attention of one step of ``run``, as a reply's fields.

    Args:
        run: A :class:`nbstream.Generation`.
        step: The step, 0-based.
        cap: The most positions sent (see :func:`attention_data`).

    Returns:
        ``attention``, ``words`` (its ``describe()``) and ``elapsed_s``.

    Raises:
        ValueError: The run refused (its message says why).

    Example:
        >>> attention_fields(object(), 0)
        Traceback (most recent call last):
        ...
        ValueError: this run cannot show where its tokens looked (it has no attention)
    """
    if not callable(getattr(run, "attention", None)):  # a run object of another kind
        raise ValueError("this run cannot show where its tokens looked (it has no attention)")
    start = time.perf_counter()
    seen = run.attention(step)
    data = attention_data(seen, cap)
    return {
        "attention": data,
        "words": str(seen.describe()),
        "elapsed_s": round(time.perf_counter() - start, 4),
    }


def shown_positions(positions: int, cap: int = CAP) -> list[int]:
    """The positions a reply carries: all of them, or the first and the last ``cap - 1``.

    The first stays, capped or not: it is where an attention sink sits, which the view labels.

    Example:
        >>> shown_positions(5, cap=3)
        [0, 3, 4]
    """
    if positions <= cap:
        return list(range(positions))
    return [0, *range(positions - cap + 1, positions)]


def attention_data(seen: Any, cap: int = CAP) -> AttentionData:
    """What the view draws of an :class:`nbstream.attention.Attention`, JSON-ready and compact.

    Args:
        seen: ``run.attention(step)``.
        cap: The most positions sent (at least 2).

    Returns:
        The weights of the shown positions and of the rest, in ten-thousandths
        (``round(weight * SCALE)``), the sharpest heads beyond the first position (as
        ``describe()`` finds them, over every position), and the sink's numbers.

    Example:
        >>> data = attention_data(run.attention(3))
        >>> data["weights"][5][3]  # layer 6, head 4 (0-based here): one int per shown position
    """
    import torch

    weights = seen.weights
    positions = int(seen.positions)
    shown = shown_positions(positions, max(2, cap))
    kept = weights[..., torch.tensor(shown, dtype=torch.long)]
    left_out = weights[..., 1 : positions - len(shown) + 1].sum(-1)
    tokens = seen.tokens
    return {
        "step": int(seen.step),
        "token": str(seen.token),
        "layers": int(seen.layers),
        "heads": int(seen.heads),
        "positions": positions,
        "prompt_tokens": int(seen.prompt_tokens),
        "shown": shown,
        "tokens": [str(tokens[p]) for p in shown],
        "scale": SCALE,
        "weights": (kept * SCALE).round().to(torch.long).tolist(),
        "rest": (left_out * SCALE).round().to(torch.long).tolist(),
        "cap": max(2, cap),
        "sink": bool(seen.sink),
        "sink_share": round(float(seen.sink_share), 4),
        "sink_heads": int(seen.sink_heads),
        "strongest": _strongest(weights, tokens),
    }


def _strongest(weights: Any, tokens: list[str]) -> list[tuple[int, int, int, int, str]]:
    """The sharpest heads beyond the first position: ``(layer, head, position, weight, text)``."""
    if weights.shape[-1] < 2:
        return []
    heads = int(weights.shape[1])
    best, where = weights[..., 1:].max(dim=-1)
    values, order = best.flatten().topk(min(STRONGEST, best.numel()))
    sent = (values * SCALE).round().long().tolist()  # as the weights are sent
    found = []
    for i, value in zip(order.tolist(), sent, strict=True):
        position = int(where.flatten()[i]) + 1
        found.append((i // heads, i % heads, position, int(value), str(tokens[position])))
    return found
