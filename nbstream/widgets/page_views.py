"""What the kernel knows of the pages showing a widget: their views, and what a pull lacks.

A page tells the kernel which views it shows (``sync``) and when one leaves (``removed``):
with none of a page's views left, the widget closes (its output was cleared). A view on a
host that shows only the kernel's answers to its own messages (Colab) pulls instead of
being pushed to: every change of a synced trait the kernel makes is numbered, and a
``pull`` is answered with the traits changed since the version the view holds and the
feed's messages after its offsets (PROTOCOL.md, Pulling).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from ..protocol import FeedMessage, PulledMessage, PullOffsets

__all__ = ["NEVER_PULLED", "PageViews", "pull_offsets"]

#: Synced traits a pull never carries: they never change after construction.
NEVER_PULLED = frozenset({"settings_schema", "_esm", "_css", "_anywidget_id"})


def pull_offsets(content: dict[str, Any]) -> PullOffsets | None:
    """A ``pull``'s offsets, or None unless each is a whole number of at least 0."""
    values: list[int] = []
    for name in ("run_id", "text", "tokens", "thinking", "version"):
        value = content.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return None
        values.append(value)
    run_id, text, tokens, thinking, version = values
    return {
        "run_id": run_id,
        "text": text,
        "tokens": tokens,
        "thinking": thinking,
        "version": version,
    }


class PageViews:
    """The views each page shows, and the numbering of the kernel's synced changes.

    Not thread-safe on its own: the widget calls it with its lock held (the numbering from
    its ``notify_change``, a pull's answer inside its handler).
    """

    def __init__(self) -> None:
        # page id -> the view ids it has synced (and not yet removed).
        self._views: dict[str, set[str]] = {}
        #: The number of the last change of a synced trait the kernel made.
        self.version = 0
        # trait name -> the number of its last change.
        self._versions: dict[str, int] = {}
        # True while the page's own state is applied: the page has it, nothing to number.
        self._from_page = False
        # Off while the widget is being built: a view pulls what it lacks from version 0.
        self.numbering = False

    def shown(self, page: Any, view: Any) -> None:
        """A page synced one of its views."""
        if isinstance(page, str) and isinstance(view, str):
            self._views.setdefault(page, set()).add(view)

    def removed(self, page: Any, view: Any) -> bool:
        """A view left its page; True when it was that page's last view this widget knows.

        Views of other pages (another browser window) are not counted: the front end only
        knows its own page, and a page that was reloaded never says its views are gone.
        """
        views = self._views.get(page) if isinstance(page, str) else None
        if views is None or not isinstance(view, str) or view not in views:
            return False  # not a view this widget knows: never close on a stray message
        views.discard(view)
        return not views

    def number(self, name: Any, synced: Callable[[Any], bool]) -> None:
        """Number a change the kernel made to ``name`` if it is a synced trait."""
        if not self.numbering or self._from_page or name in NEVER_PULLED:
            return
        if synced(name):
            self.version += 1
            self._versions[name] = self.version

    @contextlib.contextmanager
    def from_page(self) -> Iterator[None]:
        """Apply the page's own state: its changes are not numbered."""
        self._from_page = True
        try:
            yield
        finally:
            self._from_page = False

    def answer(
        self,
        content: dict[str, Any],
        messages: Callable[[str, PullOffsets], list[FeedMessage]],
        state: Callable[[list[str]], dict[str, Any]],
    ) -> PulledMessage | None:
        """The answer to a ``pull``, or None for a malformed one (never raise into a handler).

        ``messages(view, offsets)``: the feed's messages after the view's offsets;
        ``state(names)``: the synced state of those traits.
        """
        view = content.get("view")
        offsets = pull_offsets(content)
        if not isinstance(view, str) or offsets is None:
            return None
        answer: PulledMessage = {
            "type": "pulled",
            "view": view,
            "version": self.version,
            "messages": messages(view, offsets),
        }
        changed = [name for name, v in self._versions.items() if v > offsets["version"]]
        if changed:
            answer["state"] = state(changed)
        return answer
