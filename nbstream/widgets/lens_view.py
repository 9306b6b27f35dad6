"""The kernel side of the popover's "Inside the model" section.

A view sends a ``lens`` request when a token's section opens; the replies, to that view only,
carry :meth:`nbstream.Generation.lens` and :meth:`nbstream.Generation.attribution` of the
step as dicts (``to_dict()``), their words, and how long they took: the lens first (with
``pending`` true), then both. See PROTOCOL.md.

They cost a forward pass with hidden states and a backward pass, so they are computed on one
worker thread of their own (``nbstream-lens``, started on demand and ended once no request
waits), never on the comm handler's (a Stop is handled there, and the stream's frames are sent
by the view thread: neither waits for a lens). Closing the widget drops the waiting requests
and skips an attribution not yet started; a pass already under way cannot be cut short (torch
has no way to), so ``close`` waits for it at most :data:`CLOSE_WAIT_S` seconds and its reply is
dropped. Requests are answered in order; one that a newer request of the same view has
overtaken is skipped (its page would drop the reply). The replies of the last few (run, step)
pairs are kept, so a section opened again on a step is answered at once. Nothing raises into
the comm handler: a bad request, a run that cannot be read (a server, an architecture the lens
does not know, a replay) or a failure is answered with an ``error`` the section shows in words;
an attribution that fails alone leaves the lens shown, with ``attribution_error``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any, cast

from ..protocol import AttributionData, LensData, LensReply

__all__ = ["LensViewer"]

logger = logging.getLogger(__name__)

#: How many (run, step) answers are kept per widget.
CACHE_STEPS = 16
#: How many views' newest request ids are kept (as the sampling panel's).
MAX_VIEWS = 64
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
    """

    def __init__(
        self, runs: Callable[[], dict[int, Any]], send: Callable[[LensReply], None]
    ) -> None:
        self._runs = runs
        self._send = send
        self._lock = threading.Lock()
        # (id(run), step) -> (run, fields); the entry holds the run, so its id is not reused
        # while the entry lives, and a hit is checked by identity.
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
            content: The ``lens`` message (PROTOCOL.md).
        """
        try:
            view, request = content.get("view"), content.get("request")
            if (
                not isinstance(view, str)
                or isinstance(request, bool)
                or not isinstance(request, int)
            ):
                logger.debug("lens request without a view or request id: ignored")
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
            logger.exception("nbstream: queuing a lens request failed")

    def close(self, timeout: float = CLOSE_WAIT_S) -> bool:
        """Stop taking requests (the widget closed) and wait, at most ``timeout``, for the worker.

        Waiting requests are dropped and an attribution not yet started is skipped; a pass
        under way ends on its own (its reply is dropped).

        Args:
            timeout: The longest wait, in seconds.

        Returns:
            True when no worker is left running.
        """
        with self._lock:
            self._closed = True
            self._pending.clear()
            worker = self._worker
            self._cache.clear()
            self._latest.clear()
        if worker is None or worker is threading.current_thread():
            return worker is None
        worker.join(timeout)
        return not worker.is_alive()

    # -- on the worker thread -------------------------------------------------------------
    def _drain(self) -> None:
        """Answer the waiting requests in order; end once none waits (or the widget closed)."""
        while True:
            with self._lock:
                if self._closed or not self._pending:
                    self._worker = None
                    return
                content = self._pending.popleft()
            self._answer(content)

    def _overtaken(self, view: str, request: int) -> bool:
        with self._lock:
            return self._closed or request < self._latest.get(view, -1)

    def _answer(self, content: dict[str, Any]) -> None:
        view, request = content["view"], content["request"]
        if self._overtaken(view, request):
            return  # overtaken while it waited
        reply: LensReply = {
            "type": "lens",
            "view": view,
            "request": request,
            "run_id": content.get("run_id") if isinstance(content.get("run_id"), int) else None,
            "step": content.get("step") if isinstance(content.get("step"), int) else None,
            "error": None,
        }
        try:
            # The lens first (the chart), then the attribution (a backward pass) in a
            # second reply to the same request, unless a newer request came meanwhile.
            run, key, fields = self.answer(content)
            self._reply({**reply, **fields})  # type: ignore[typeddict-item]
            if fields.get("pending") and not self._overtaken(view, request):
                fields = merged(fields, attribution_fields(run, content["step"]))
                self._keep(key, run, fields)
                self._reply({**reply, **fields})  # type: ignore[typeddict-item]
        except (TypeError, ValueError, LookupError) as exc:  # LensUnavailable is a ValueError
            self._reply({**reply, "error": str(exc)})
        except Exception as exc:
            logger.exception("nbstream: the lens of a step failed")
            self._reply(
                {**reply, "error": f"the lens could not be computed: {type(exc).__name__}: {exc}"}
            )

    def _reply(self, reply: LensReply) -> None:
        if self._closed:
            return  # the widget is gone
        try:
            self._send(reply)
        except Exception:
            logger.exception("nbstream: sending a lens reply failed")

    def _keep(self, key: tuple[int, int], run: Any, fields: dict[str, Any]) -> None:
        with self._lock:
            if not self._closed:
                self._cache[key] = (run, fields)
                while len(self._cache) > CACHE_STEPS:
                    self._cache.popitem(last=False)

    def answer(self, content: dict[str, Any]) -> tuple[Any, tuple[int, int], dict[str, Any]]:
        """The run, its cache key and the first reply's fields for a request.

        Args:
            content: The request: its ``run_id`` and ``step``.

        Returns:
            ``(run, key, fields)``: the fields kept for this step (both parts), or the lens's
            with ``pending`` true (the attribution is still to come).

        Raises:
            TypeError: A ``run_id`` or ``step`` of the wrong type.
            LookupError: The run is no longer shown.
            ValueError: The run cannot be read (``nbstream.lens.LensUnavailable``).
        """
        run_id, step = content.get("run_id"), content.get("step")
        if isinstance(run_id, bool) or not isinstance(run_id, int):
            raise TypeError(f"run_id must be a run's id, got {run_id!r:.40}")
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"step must be a whole number, got {step!r:.40}")
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
                return run, key, hit[1]
        fields = lens_fields(run, step)
        with self._lock:
            self.computed += 1
        return run, key, fields


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
