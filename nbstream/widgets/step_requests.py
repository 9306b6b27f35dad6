"""Answering the views' requests about one step of a shown run, on a worker thread.

The popover's "Inside the model" (``widgets/lens_view.py``) and its attention view
(``widgets/attention_view.py``) ask the kernel for something that costs a forward pass. Both
are answered by the same rules, kept here:

- on one worker thread per widget and kind, started on demand and ended once no request
  waits, never on the comm handler's (a Stop is handled there);
- in order; a request that a newer one of the same view has overtaken is skipped (its page
  would drop the reply);
- the last few (run, step) answers are kept, so a section opened again is answered at once;
- nothing raises into the comm handler;
- ``close`` drops what waits and waits a bounded time for a pass under way (torch cannot cut
  one short), whose reply is then dropped.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_VIEWS", "StepRequests", "reply_head", "shown_step"]

logger = logging.getLogger(__name__)

#: How many views' newest request ids are kept.
MAX_VIEWS = 64


class StepRequests:
    """The queue, the worker thread and the kept answers of one kind of step request.

    Args:
        answer: Answers one queued request on the worker thread (it sends the reply). An
            exception it raises is logged, and the next request is answered.
        kind: The requests' message type (``"lens"``, ``"attention"``), for the log.
        thread_name: The worker thread's name (tests look for leftovers by it).
        cache_steps: How many (run, step) answers are kept.

    Example:
        >>> import queue
        >>> answered = queue.Queue()
        >>> requests = StepRequests(answered.put, kind="lens", thread_name="doc", cache_steps=2)
        >>> requests.request({"view": "v1", "request": 1, "step": 0})
        >>> answered.get(timeout=30)["request"]
        1
        >>> requests.close(timeout=5)
        True
    """

    def __init__(
        self,
        answer: Callable[[dict[str, Any]], None],
        *,
        kind: str,
        thread_name: str,
        cache_steps: int,
    ) -> None:
        self._answer = answer
        self._kind = kind
        self._thread_name = thread_name
        self._cache_steps = cache_steps
        self._lock = threading.Lock()
        # (id(run), step) -> (run, fields); the entry holds the run, so its id is not reused
        # while the entry lives, and a hit is checked by identity.
        self._cache: OrderedDict[tuple[int, int], tuple[Any, dict[str, Any]]] = OrderedDict()
        self._latest: OrderedDict[str, int] = OrderedDict()
        self._pending: deque[dict[str, Any]] = deque()
        self._worker: threading.Thread | None = None
        self._closed = False
        #: How many steps were computed (not answered from the kept ones); tests read it.
        self.computed = 0

    @property
    def closed(self) -> bool:
        """Whether the widget closed: nothing is queued, answered or sent any more."""
        return self._closed

    # -- from the comm handler ------------------------------------------------------------
    def request(self, content: dict[str, Any]) -> None:
        """Queue a request (called on the comm handler's thread; never raises).

        Args:
            content: The request message; one without a ``view`` (a string) and a
                ``request`` id (an integer) is ignored.
        """
        try:
            view, request = content.get("view"), content.get("request")
            if (
                not isinstance(view, str)
                or isinstance(request, bool)
                or not isinstance(request, int)
            ):
                logger.debug("%s request without a view or request id: ignored", self._kind)
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
                        target=self._drain, name=self._thread_name, daemon=True
                    )
                    self._worker.start()
        except Exception:  # the comm handler must never see an exception
            logger.exception("nbstream: queuing a %s request failed", self._kind)

    def close(self, timeout: float) -> bool:
        """Stop taking requests and wait, at most ``timeout`` seconds, for the worker.

        Waiting requests are dropped; a pass under way ends on its own.

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
        """Answer the waiting requests in order; end once none waits (or the widget closed)."""
        while True:
            with self._lock:
                if self._closed or not self._pending:
                    self._worker = None
                    return
                content = self._pending.popleft()
            if self.overtaken(content["view"], content["request"]):
                continue  # overtaken while it waited
            try:
                self._answer(content)
            except Exception:  # the worker goes on with the next request
                logger.exception("nbstream: answering a %s request failed", self._kind)
            except BaseException:
                # The thread ends here (SystemExit and the like): the next request starts
                # another rather than queue behind a worker that is gone.
                with self._lock:
                    self._worker = None
                raise

    def overtaken(self, view: str, request: int) -> bool:
        """Whether the widget closed or ``view`` sent a newer request than ``request``."""
        with self._lock:
            return self._closed or request < self._latest.get(view, -1)

    def kept(self, run: Any, step: int) -> dict[str, Any] | None:
        """The answer kept for ``step`` of this very ``run``, or None."""
        key = (id(run), step)
        with self._lock:
            hit = self._cache.get(key)
            if hit is None or hit[0] is not run:
                return None
            self._cache.move_to_end(key)
            return hit[1]

    def keep(self, run: Any, step: int, fields: dict[str, Any]) -> None:
        """Keep an answer (the oldest kept one goes beyond ``cache_steps``)."""
        with self._lock:
            if not self._closed:
                self._cache[(id(run), step)] = (run, fields)
                while len(self._cache) > self._cache_steps:
                    self._cache.popitem(last=False)

    def count_computed(self) -> None:
        """Count one step computed rather than answered from the kept ones."""
        with self._lock:
            self.computed += 1


def shown_step(
    content: dict[str, Any],
    runs: Callable[[], dict[int, Any]],
    refusal: Callable[[], str | None] | None = None,
) -> tuple[Any, int]:
    """The run a request names, among those the widget shows, and the step it asks about.

    Args:
        content: The request: its ``run_id`` and ``step``.
        runs: Gives the runs the views show, as ``{run_id: run}``.
        refusal: Why the widget answers no such request now, or None; asked once the
            request is well formed.

    Raises:
        TypeError: A ``run_id`` or ``step`` of the wrong type.
        ValueError: ``refusal`` gave a reason.
        LookupError: The run is no longer shown.

    Example:
        >>> shown_step({"run_id": 1, "step": 2}, lambda: {1: "run"})
        ('run', 2)
    """
    run_id, step = content.get("run_id"), content.get("step")
    if isinstance(run_id, bool) or not isinstance(run_id, int):
        raise TypeError(f"run_id must be a run's id, got {run_id!r:.40}")
    if isinstance(step, bool) or not isinstance(step, int):
        raise TypeError(f"step must be a whole number, got {step!r:.40}")
    refused = refusal() if refusal is not None else None
    if refused:
        raise ValueError(refused)
    run = runs().get(run_id)
    if run is None:
        raise LookupError("this answer is no longer shown by the widget (a newer run replaced it)")
    return run, step


def reply_head(kind: str, content: dict[str, Any]) -> dict[str, Any]:
    """The fields every reply to a step request starts with (PROTOCOL.md), no error yet.

    Example:
        >>> reply_head("lens", {"view": "v1", "request": 3, "run_id": "x", "step": 2})
        {'type': 'lens', 'view': 'v1', 'request': 3, 'run_id': None, 'step': 2, 'error': None}
    """
    run_id, step = content.get("run_id"), content.get("step")
    return {
        "type": kind,
        "view": content["view"],
        "request": content["request"],
        "run_id": run_id if isinstance(run_id, int) else None,
        "step": step if isinstance(step, int) else None,
        "error": None,
    }
