"""A widget whose state is written by several threads and read by pages that may pull.

ipywidgets keeps what a ``hold_sync()`` holds back per widget, not per thread: a trait
written on one thread while another thread's ``hold_sync`` ends can be dropped between its
``send_state()`` and the clear of its pending keys, and the page then keeps a stale state
("running" after the end). A run's view thread, the comm handler and the caller's thread
all write a widget's traits, so :class:`SyncedWidget` serializes every write, and every
state from the page, on the widget's lock. It also publishes its comm messages under the
page's subshell (:mod:`.route`) and numbers the kernel's changes for views that pull
(:mod:`.page_views`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import anywidget

from .page_views import PageViews
from .route import PageRoute

__all__ = ["SyncedWidget"]


class SyncedWidget(anywidget.AnyWidget):
    """An anywidget whose state changes in one order, whatever thread makes them.

    A subclass calls :meth:`_init_sync` before its traits are set, and turns
    ``self._pages.numbering`` on once it is built.
    """

    #: The traits a page writes (both ways, PROTOCOL.md); it only reads the others.
    _PAGE_WRITES: ClassVar[frozenset[str]] = frozenset()

    def _init_sync(self) -> None:
        # Reentrant: what a subclass shows (its fallback, its transcript) may take it too.
        self._lock = threading.RLock()
        # The page's subshell: a Stop is handled while a cell keeps the main shell busy.
        self._route = PageRoute()
        # The views of each page, and the numbers of the kernel's changes (for pulls).
        self._pages = PageViews()

    @contextlib.contextmanager
    def hold_sync(self) -> Iterator[None]:
        """Batch trait changes into one message, holding the widget's lock meanwhile."""
        with self._lock, super().hold_sync():
            yield

    def notify_change(self, change: Any) -> None:
        """Notify observers under the widget's lock, so threads see changes in one order."""
        lock = self.__dict__.get("_lock")
        if lock is None:  # traits set while the object is being built: one thread only
            super().notify_change(change)
            return
        with lock:
            super().notify_change(change)
            # Numbered (lock held): a pull carries what changed since the view's version.
            self._pages.number(change.get("name"), lambda n: self.trait_metadata(n, "sync"))

    def set_state(self, sync_data: Any) -> None:
        """Apply state from the page under the widget's lock.

        A trait the page only reads is never taken from it: a page that pulls sets such
        traits in its own copy, which a later save may send back.
        """
        if isinstance(sync_data, dict):
            sync_data = {k: v for k, v in sync_data.items() if k in self._PAGE_WRITES}
        with self._lock, self._pages.from_page():
            super().set_state(sync_data)

    # -- comm messages go out under the page's subshell (see widgets/route.py) ---------------
    def send_state(self, key: Any = None) -> None:
        """Send state to the page under the subshell the page is using."""
        route = self.__dict__.get("_route")
        if route is None:  # while the object is being built
            super().send_state(key)
            return
        with route.publishing(self.comm):
            super().send_state(key)

    def send(self, content: Any, buffers: Any = None) -> None:
        """Send a custom message under the subshell the page is using."""
        with self._route.publishing(self.comm):
            super().send(content, buffers)
