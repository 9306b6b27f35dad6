"""The kernel side of the popover's "Inside the model" section.

A view sends a ``lens`` request when a token's section opens; the replies, to that view only,
carry :meth:`nbstream.Generation.lens` and :meth:`nbstream.Generation.attribution` of the
step as dicts (``to_dict()``), their words, and how long they took: the lens first (with
``pending`` true), then both. See PROTOCOL.md.

They cost a forward pass with hidden states and a backward pass, so they are computed on one
worker thread of their own (``nbstream-lens``, started on demand and ended once no request
waits), never on the comm handler's (a Stop is handled there, and the stream's frames are sent
by the view thread: neither waits for a lens). The queue, the worker and the kept answers are
``widgets/step_requests.py``'s, which the attention view shares. Closing the widget drops the
waiting requests and skips an attribution not yet started; a pass already under way cannot be
cut short (torch has no way to), so ``close`` waits for it at most :data:`CLOSE_WAIT_S` seconds
and its reply is dropped. Requests are answered in order; one that a newer request of the same
view has overtaken is skipped (its page would drop the reply). The replies of the last few
(run, step) pairs are kept, so a section opened again on a step is answered at once. Nothing
raises into the comm handler: a bad request, a run that cannot be read (a server, an
architecture the lens does not know, a replay) or a failure is answered with an ``error`` the
section shows in words; an attribution that fails alone leaves the lens shown, with
``attribution_error``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, cast

from ..protocol import AttributionData, LensData, LensReply
from .step_requests import StepRequests, reply_head, shown_step

__all__ = ["LensViewer"]

logger = logging.getLogger(__name__)

#: How many (run, step) answers are kept per widget.
CACHE_STEPS = 16
#: The longest ``close`` waits for a lens or an attribution under way (seconds).
CLOSE_WAIT_S = 5.0
#: The worker thread's name (tests look for leftovers by it).
THREAD_NAME = "nbstream-lens"


class LensViewer:
    """Answers one widget's ``lens`` requests, on a worker thread.

    Args:
        runs: Gives the runs the views show, as ``{run_id: run}``.
        send: Sends a message to the widget's views (the reply names its view).

    Example:
        >>> sent = []
        >>> viewer = LensViewer(lambda: {}, sent.append)
        >>> viewer.answer({"run_id": 1, "step": 0})
        Traceback (most recent call last):
        ...
        LookupError: this answer is no longer shown by the widget (a newer run replaced it)
        >>> viewer.close()
        True
    """

    def __init__(
        self, runs: Callable[[], dict[int, Any]], send: Callable[[LensReply], None]
    ) -> None:
        self._runs = runs
        self._send = send
        self._requests = StepRequests(
            self._answer, kind="lens", thread_name=THREAD_NAME, cache_steps=CACHE_STEPS
        )

    @property
    def computed(self) -> int:
        """How many steps were computed (not answered from the kept ones); tests read it."""
        return self._requests.computed

    def request(self, content: dict[str, Any]) -> None:
        """Queue a request (called on the comm handler's thread; never raises).

        Args:
            content: The ``lens`` message (PROTOCOL.md).
        """
        self._requests.request(content)

    def close(self, timeout: float = CLOSE_WAIT_S) -> bool:
        """Stop taking requests (the widget closed) and wait, at most ``timeout``, for the worker.

        Waiting requests are dropped and an attribution not yet started is skipped; a pass
        under way ends on its own (its reply is dropped).

        Args:
            timeout: The longest wait, in seconds.

        Returns:
            True when no worker is left running.
        """
        return self._requests.close(timeout)

    # -- on the worker thread -------------------------------------------------------------
    def _answer(self, content: dict[str, Any]) -> None:
        view, request = content["view"], content["request"]
        reply = cast(LensReply, reply_head("lens", content))
        try:
            # The lens first (the chart), then the attribution (a backward pass) in a
            # second reply to the same request, unless a newer request came meanwhile.
            run, fields = self.answer(content)
            self._reply({**reply, **fields})  # type: ignore[typeddict-item]
            if fields.get("pending") and not self._requests.overtaken(view, request):
                fields = merged(fields, attribution_fields(run, content["step"]))
                self._requests.keep(run, content["step"], fields)
                self._reply({**reply, **fields})  # type: ignore[typeddict-item]
        except (TypeError, ValueError, LookupError) as exc:  # LensUnavailable is a ValueError
            self._reply({**reply, "error": str(exc)})
        except Exception as exc:
            logger.exception("nbstream: the lens of a step failed")
            self._reply(
                {**reply, "error": f"the lens could not be computed: {type(exc).__name__}: {exc}"}
            )

    def _reply(self, reply: LensReply) -> None:
        if self._requests.closed:
            return  # the widget is gone
        try:
            self._send(reply)
        except Exception:
            logger.exception("nbstream: sending a lens reply failed")

    def answer(self, content: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The run and the first reply's fields for a request.

        Args:
            content: The request: its ``run_id`` and ``step``.

        Returns:
            ``(run, fields)``: the fields kept for this step (both parts), or the lens's
            with ``pending`` true (the attribution is still to come).

        Raises:
            TypeError: A ``run_id`` or ``step`` of the wrong type.
            LookupError: The run is no longer shown.
            ValueError: The run cannot be read (``nbstream.lens.LensUnavailable``).
        """
        run, step = shown_step(content, self._runs)
        kept = self._requests.kept(run, step)
        if kept is not None:
            return run, kept
        fields = lens_fields(run, step)
        self._requests.count_computed()
        return run, fields


def lens_fields(run: Any, step: int) -> dict[str, Any]:
    """The lens of one step of ``run``, as a first reply's fields (the attribution pending).

    Args:
        run: A :class:`nbstream.Generation`.
        step: The step, 0-based.

    Returns:
        ``lens``, ``words``, ``elapsed_s``, and ``pending`` (true).

    Raises:
        ValueError: The lens refused the run (its message says why).

    Example:
        >>> lens_fields(object(), 0)
        Traceback (most recent call last):
        ...
        ValueError: this run cannot show what its layers said (it has no lens)
    """
    if not callable(getattr(run, "lens", None)):  # a run object of another kind
        raise ValueError("this run cannot show what its layers said (it has no lens)")
    start = time.perf_counter()
    lens = run.lens(step)
    return {
        "lens": cast(LensData, lens.to_dict()),
        "attribution": None,
        "attribution_error": None,
        "words": _words(lens),
        "elapsed_s": round(time.perf_counter() - start, 4),
        "pending": True,
    }


def attribution_fields(run: Any, step: int) -> dict[str, Any]:
    """The attribution of one step, as the second reply adds it (never raises).

    Args:
        run: A :class:`nbstream.Generation`.
        step: The step, 0-based.

    Returns:
        ``attribution`` (None when it failed), ``attribution_error``, ``words`` (its
        ``describe()``) and ``elapsed_s``.

    Example:
        >>> attribution_fields(object(), 0)["attribution"] is None
        True
    """
    start = time.perf_counter()
    attribution: AttributionData | None = None
    error: str | None = None
    words = ""
    try:
        attr = run.attribution(step)
        attribution = cast(AttributionData, attr.to_dict())
        words = _words(attr)
    except (ValueError, LookupError) as exc:
        error = str(exc)
    except Exception as exc:  # the lens is still worth showing
        logger.exception("nbstream: the attribution of a step failed")
        error = f"{type(exc).__name__}: {exc}"
    return {
        "attribution": attribution,
        "attribution_error": error,
        "words": words,
        "elapsed_s": time.perf_counter() - start,
    }


def merged(lens: dict[str, Any], attribution: dict[str, Any]) -> dict[str, Any]:
    """The second reply's fields: the lens's and the attribution's, words and times added."""
    return {
        **lens,
        **attribution,
        "words": " ".join(w for w in (lens["words"], attribution["words"]) if w),
        "elapsed_s": round(lens["elapsed_s"] + attribution["elapsed_s"], 4),
        "pending": False,
    }


def _words(obj: Any) -> str:
    describe = getattr(obj, "describe", None)
    return str(describe()) if callable(describe) else ""
