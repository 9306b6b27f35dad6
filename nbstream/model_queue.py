"""FIFO access to one model: one run (or one explaining forward pass) at a time, in order.

Each model (each backend's ``queue_key()``) has one :class:`ModelQueue`; a run's worker
takes its place in it before it generates, and work that is not a run (the forward pass
behind ``run.step_logits``, a compare mark) waits its turn with :meth:`ModelQueue.turn`,
so it never runs between two steps of a run.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Iterator
from typing import Protocol

__all__ = ["ModelQueue", "QueueHolder", "Ticket"]


class QueueHolder(Protocol):
    """What waits in a model's queue: woken through ``turn`` when the model is its."""

    turn: threading.Event


class Ticket:
    """A place in a model's queue for work that is not a run.

    Such work is, for example, a forward pass that explains a step: it waits its turn as a run does,
    so it never runs beside one.

    Example:
        >>> ticket = Ticket()
        >>> ModelQueue().try_acquire(ticket)
        True
    """

    def __init__(self) -> None:
        self.turn = threading.Event()


class ModelQueue:
    """FIFO access to one model: one run at a time, in the order they were started.

    Example:
        >>> queue = ModelQueue()
        >>> with queue.turn():
        ...     pass  # the model is this block's alone
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holder: QueueHolder | None = None
        self._waiting: deque[QueueHolder] = deque()

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """Hold the model for the block: after the runs queued before, before later ones."""
        ticket = Ticket()
        if not self.try_acquire(ticket):
            try:
                ticket.turn.wait()
            except BaseException:
                if not self.withdraw(ticket):  # the model came meanwhile: pass it on
                    self.release(ticket)
                raise
        try:
            yield
        finally:
            self.release(ticket)

    def try_acquire(self, holder: QueueHolder) -> bool:
        """Take the model if it is free and nobody waits; else join the line (False)."""
        with self._lock:
            if self._holder is None and not self._waiting:
                self._holder = holder
                return True
            self._waiting.append(holder)
            return False

    def withdraw(self, holder: QueueHolder) -> bool:
        """Take a queued holder out of the line; False if it already got the model."""
        with self._lock:
            try:
                self._waiting.remove(holder)
            except ValueError:
                return False
            return True

    def release(self, holder: QueueHolder) -> None:
        """Give the model to the next in line, if ``holder`` has it."""
        with self._lock:
            if self._holder is not holder:
                return
            self._holder = self._waiting.popleft() if self._waiting else None
            if self._holder is not None:
                self._holder.turn.set()

    def snapshot(self) -> tuple[QueueHolder | None, list[QueueHolder]]:
        """Who holds the model, and who waits, in order."""
        with self._lock:
            return self._holder, list(self._waiting)
