"""Which notebook cell made which widget.

Re-running a cell closes (and stops) the widgets its previous execution made, as ipywidgets' own
outputs would be replaced.

Also which cell (and which execution of it) the kernel is running now.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

__all__ = ["CLOSED", "CLOSED_BY_CLEARING", "CLOSED_BY_RERUN", "cell_context", "forget", "register"]

logger = logging.getLogger(__name__)

# Widgets by the cell that created them: cell id -> [(execution id, widget)].
_by_cell: dict[str, list[tuple[str | None, weakref.ref[Any]]]] = {}
_lock = threading.Lock()

# Why a widget's run was stopped when the widget closed (words after "cancelled because",
# see Generation.stop): by close(), its output cleared or its cell deleted, its cell re-run.
CLOSED = "the widget was closed (close() was called)"
CLOSED_BY_CLEARING = "the widget was closed (its output was cleared)"
CLOSED_BY_RERUN = "the widget was closed (its cell was run again)"


def cell_context() -> tuple[str | None, str | None]:
    """(cell id, execution id) of the cell being executed, when run in a Jupyter kernel."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
        kernel = getattr(shell, "kernel", None)
        if kernel is None:
            return None, None
        parent = kernel.get_parent("shell") if hasattr(kernel, "get_parent") else {}
        cell_id = (parent.get("metadata") or {}).get("cellId")
        msg_id = (parent.get("header") or {}).get("msg_id")
        return cell_id, msg_id
    except Exception:  # not in a kernel, or an older kernel: nothing to track
        return None, None


def register(widget: Any) -> None:
    """Note that the running cell made ``widget``; close what its earlier runs made."""
    cell_id, msg_id = cell_context()
    if cell_id is None:
        return
    with _lock:
        entries = _by_cell.setdefault(cell_id, [])
        stale = [ref() for mid, ref in entries if mid != msg_id]
        entries[:] = [(mid, ref) for mid, ref in entries if mid == msg_id and ref() is not None]
        entries.append((msg_id, weakref.ref(widget)))
    for old in stale:
        if old is not None and old is not widget:
            logger.debug("closing a widget made by an earlier run of this cell")
            old.stop(CLOSED_BY_RERUN)  # the first stop's reason is the one kept
            old.close()


def forget(widget: Any) -> None:
    """Let ``widget`` outlive the cell that made it (a widget shared by many cells)."""
    with _lock:
        for entries in _by_cell.values():
            entries[:] = [(mid, ref) for mid, ref in entries if ref() is not widget]
