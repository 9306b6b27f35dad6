"""A Stop click that reaches the kernel while another cell keeps it busy.

JupyterLab 4.4+ with ipykernel 7 sends a widget's comm messages on a kernel subshell
(the setting "Kernel Comms over subshells", ``perCommTarget`` by default): a subshell
handles them on a thread of its own, so a click is handled even while a cell blocks the
main shell (``time.sleep(30)``, ``w.wait()``). But ipykernel routes a comm's incoming
messages to the subshell from which the kernel last *published* on that comm (the
``subshell_id`` in the header of the parent of that publication; see ``BaseComm.publish_msg``
and ``shell_channel_thread_main`` in ipykernel 7). Everything a widget publishes from a cell,
or from its view thread (whose parent falls back to the main shell's last request), carries
no subshell, so every click waited for the busy cell.

:class:`PageRoute` remembers the parent of the last message a page sent on the comm (its
header names the page's subshell) and publishes the widget's comm messages under it. The
page's messages then keep reaching the subshell, whose thread handles a Stop at once.

Only comm messages are published so: the parent of an output (a display, a print) decides
which cell shows it, and those keep the cell's parent. The parent is set in the publishing
thread's own context (ipykernel's ``_shell_parent`` context variable, which ``get_parent``
reads first), never through ``Kernel.set_parent``, which would also change the parent that
other threads fall back on. Where any of this is missing (an older ipykernel, a front end
without subshells: VS Code, JupyterLite, classic Notebook, the setting off) nothing changes;
the page then says a click is waiting for the kernel.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["PageRoute"]


class PageRoute:
    """The page's subshell for one widget's comm (see the module)."""

    def __init__(self) -> None:
        self._parent: dict[str, Any] | None = None

    @property
    def subshell_id(self) -> str | None:
        """The subshell the page sends this comm's messages on, once a message said so."""
        parent = self._parent
        return parent["header"]["subshell_id"] if parent is not None else None

    def note(self, comm: Any) -> None:
        """Called as a message from the page is handled (on whichever thread handles it)."""
        kernel = getattr(comm, "kernel", None)
        get_parent = getattr(kernel, "get_parent", None)
        if get_parent is None:
            return
        try:
            parent = get_parent("shell")
        except Exception:  # an unusual kernel: keep the default routing
            logger.debug("no parent to read the page's subshell from", exc_info=True)
            return
        header = parent.get("header") if isinstance(parent, dict) else None
        if (
            isinstance(header, dict)
            and header.get("msg_type") == "comm_msg"
            and isinstance(header.get("subshell_id"), str)
        ):
            self._parent = parent

    @contextlib.contextmanager
    def publishing(self, comm: Any) -> Iterator[None]:
        """Comm messages sent inside carry the page's parent (and so its subshell)."""
        parent = self._parent
        var = getattr(getattr(comm, "kernel", None), "_shell_parent", None)
        if parent is None or not isinstance(var, ContextVar):
            yield
            return
        token = var.set(parent)
        try:
            yield
        finally:
            var.reset(token)
