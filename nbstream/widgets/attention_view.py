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
handler's (a Stop is handled there): the same rules as the lens's (``widgets/lens_view.py``):
requests answered in order, one overtaken by a newer request of its view skipped, the last few
(run, step) answers kept, nothing raised into the comm handler (a bad request, a run that cannot
show its attention, a server's or a replay's, or a failure is an ``error`` in words), and
``close`` waits at most :data:`CLOSE_WAIT_S` seconds for a pass under way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from ..protocol import AttentionData, AttentionReply

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
#: How many views' newest request ids are kept.
MAX_VIEWS = 64
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
        self._lock = threading.Lock()
        # (id(run), step) -> (run, fields); the entry holds the run, so its id is not reused.
        self._cache: OrderedDict[tuple[int, int], tuple[Any, dict[str, Any]]] = OrderedDict()
        self._latest: OrderedDict[str, int] = OrderedDict()
        self._pending: deque[dict[str, Any]] = deque()
        self._worker: threading.Thread | None = None
        self._closed = False
        #: How many steps were computed (not answered from the cache); tests read it.
        self.computed = 0

    # -- from the comm handler ------------------------------------------------------------
    def request(self, content: dict[str, Any]) -> None:
        """Queue a request (called on the comm handler's thread; never raises).

        Args:
            content: The ``attention`` message (PROTOCOL.md).
        """
        try:
            view, request = content.get("view"), content.get("request")
            if (
                not isinstance(view, str)
                or isinstance(request, bool)
                or not isinstance(request, int)
            ):
                logger.debug("attention request without a view or request id: ignored")
                return
            with self._lock:
                if self._closed or request < self._latest.get(view, -1):
                    return
                self._latest[view] = request
                self._latest.move_to_end(view)
                while len(self._latest) > MAX_VIEWS:
                    self._latest.popitem(last=False)
                self._pending.append(dict(content))
                if self._worker is None:
                    self._worker = threading.Thread(
                        target=self._drain, name=THREAD_NAME, daemon=True
                    )
                    self._worker.start()
        except Exception:  # the comm handler must never see an exception
            logger.exception("nbstream: queuing an attention request failed")

    def close(self, timeout: float = CLOSE_WAIT_S) -> bool:
        """Stop taking requests (the widget closed) and wait, at most ``timeout``, for the worker.

        Args:
            timeout: The longest wait, in seconds.

        Returns:
            True when no worker is left running.
        """
        with self._lock:
            self._closed = True
            self._pending.clear()
            self._cache.clear()
            self._latest.clear()
            worker = self._worker
        if worker is None or worker is threading.current_thread():
            return worker is None
        worker.join(timeout)
        return not worker.is_alive()

    # -- on the worker thread -------------------------------------------------------------
    def _drain(self) -> None:
        while True:
            with self._lock:
                if self._closed or not self._pending:
                    self._worker = None
                    return
                content = self._pending.popleft()
            self._answer(content)

    def _answer(self, content: dict[str, Any]) -> None:
        view, request = content["view"], content["request"]
        with self._lock:
            if self._closed or request < self._latest.get(view, -1):
                return  # overtaken while it waited
        run_id, step = content.get("run_id"), content.get("step")
        reply: AttentionReply = {
            "type": "attention",
            "view": view,
            "request": request,
            "run_id": run_id if isinstance(run_id, int) else None,
            "step": step if isinstance(step, int) else None,
            "error": None,
        }
        try:
            reply.update(self.answer(content))  # type: ignore[typeddict-item]
        except (TypeError, ValueError, LookupError) as exc:  # AttentionUnavailable: ValueError
            reply["error"] = str(exc)
        except Exception as exc:
            logger.exception("nbstream: the attention of a step failed")
            reply["error"] = f"the attention could not be computed: {type(exc).__name__}: {exc}"
        if self._closed:
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
        run_id, step = content.get("run_id"), content.get("step")
        if isinstance(run_id, bool) or not isinstance(run_id, int):
            raise TypeError(f"run_id must be a run's id, got {run_id!r:.40}")
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"step must be a whole number, got {step!r:.40}")
        refused = self._refusal()
        if refused:
            raise ValueError(refused)
        run = self._runs().get(run_id)
        if run is None:
            raise LookupError(
                "this answer is no longer shown by the widget (a newer run replaced it)"
            )
        key = (id(run), step)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] is run:
                self._cache.move_to_end(key)
                return hit[1]
        fields = attention_fields(run, step)
        with self._lock:
            self.computed += 1
            if not self._closed:
                self._cache[key] = (run, fields)
                while len(self._cache) > CACHE_STEPS:
                    self._cache.popitem(last=False)
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
