"""A widget's current run: never two at once, followed to the views, waited for, stopped.

:class:`RunSlot` holds the run a widget shows and the callbacks of its complete runs. It
refuses a second run while one is queued or running, hands a new run to the view thread
(:class:`~.feed.RunFeed`), and, when :meth:`RunSlot.wait` returns, lets that thread publish
the end state first, so that the widget's traits and its views agree. The widget sets the
traits; this part never touches them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from ..generation import TERMINAL, Generation
from .feed import RunFeed

__all__ = ["RunInProgress", "RunSlot"]

logger = logging.getLogger(__name__)

#: How long wait() gives the view thread to publish a finished run's end state.
JOIN_S = 5.0


class RunInProgress(RuntimeError):
    """A new run while this widget's run is queued or running (a plain RuntimeError to callers)."""


class RunSlot:
    """The widget's current (or last) run, and what follows its end."""

    def __init__(self, lock: threading.RLock, feed: RunFeed) -> None:
        self._lock = lock
        self._feed = feed
        #: The current (or last) run; None before the first (or after a cleared chat).
        self.run: Generation | None = None
        self._callbacks: list[Callable[[str], Any]] = []

    def busy(self) -> bool:
        """Whether the current run is queued or running."""
        return self.run is not None and self.run.status not in TERMINAL

    def take(self, make_run: Callable[[], Generation]) -> Generation:
        """Make the run ``make_run()`` returns the current one (lock held).

        Raises :class:`RunInProgress` if a run is queued or running, and whatever
        ``make_run`` raises (bad input: then nothing changed).
        """
        if self.busy():
            raise RunInProgress(
                "this widget already has a run in progress; call stop() or wait() first"
            )
        self.run = make_run()
        return self.run

    def follow(self, run: Generation, run_id: int, status: str, on_end: Callable[..., Any]) -> None:
        """Stream ``run`` to the views from a view thread (lock held); see ``RunFeed.follow``.

        Without a view thread (the process is out of threads) the run must not stream on
        unseen, and the views must still get its end: it is stopped, and ``on_end(run,
        run_id)`` runs on the run's own thread.
        """
        try:
            self._feed.follow(run, run_id, status)
        except BaseException:
            run.stop()
            run.add_done_callback(lambda ended: on_end(ended, run_id))
            raise

    def wait(self, timeout: float | None, republish: Callable[[], None]) -> str:
        """As :meth:`Generation.wait` for the current run; its end state published first."""
        with self._lock:  # this run and its own view thread, taken together
            run, follower = self.run, self._feed.thread
        if run is None:
            raise RuntimeError("nothing to wait for: call generate() first")
        try:
            return run.wait(timeout)
        finally:
            # Once the run is over, let its view thread publish the end state, so that
            # status, metrics and the views agree when wait() returns. Never the view thread
            # itself (an on_complete callback calling wait()), nor a later run's (one an
            # on_complete callback started meanwhile).
            if run.done and follower is not None and follower is not threading.current_thread():
                follower.join(JOIN_S)
                # Again from this thread: the view thread's rewrite of the saved output
                # carries the parent of the cell that started the run, and a headless
                # runner (nbclient, nbconvert) that has moved on to a later cell drops it.
                # Sent from here it belongs to the cell that waits, and is kept.
                republish()

    def stop(self, reason: str | None = None) -> bool:
        """Stop the current run; True if there was one to stop."""
        return self.run.stop(reason) if self.run is not None else False

    def on_complete(self, callback: Callable[[str], Any]) -> None:
        """Call ``callback(text)`` after each run that completes."""
        self._callbacks.append(callback)

    def completed(self, run: Generation) -> None:
        """After ``run``'s end is published: its callbacks, if it completed."""
        if run.status != "complete":
            return
        text = run.result or ""
        for callback in list(self._callbacks):
            try:
                callback(text)
            except Exception:
                logger.exception("an on_complete callback raised; the run stays complete")
