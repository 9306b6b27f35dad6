"""A Stop click that reaches the kernel while another cell keeps it busy.

JupyterLab 4.4+ with ipykernel 7 sends a widget's comm messages on a kernel subshell
(the setting "Kernel Comms over subshells", ``perCommTarget`` by default): a subshell
handles them on a thread of its own, so a click is handled even while a cell blocks the
main shell (``time.sleep(30)``, ``w.wait()``). But ipykernel routes a comm's incoming
messages to the subshell from which the kernel last *published* on that comm (the
``subshell_id`` in the header of the parent of that publication; see ``BaseComm.publish_msg``
and ``shell_channel_thread_main`` in ipykernel 7). Everything a widget publishes from a cell,
or from its view thread (whose parent falls back to that of the last request any shell
handled, usually a cell's), carries no subshell, so every click waited for the busy cell.

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

Two consequences are handled here:

- A subshell can go away (JupyterLab's ``perComm`` mode closes a comm's subshell with its
  page; a second window may have been the one that clicked). Messages routed to a subshell
  that no longer exists are dropped by ipykernel, so the saved parent is used only while its
  subshell is listed; otherwise the widget publishes as before and learns the page's next
  subshell from its next message.
- Handling a message sets the parent that the print and display streams fall back on, for
  every thread without one of its own. On a subshell while a cell runs, that would send the
  prints of the cell's own background threads to the click's message, which no cell shows.
  So after a page's message handled on a subshell thread, those streams get back the parent
  of the cell that last started (:meth:`PageRoute.handled`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["PageRoute", "answer_on_sending_subshell", "send_unasked"]


# The parent of the cell that last started (its execute_request), kept by an IPython
# pre_run_cell hook: what the print and display streams go back to (see the module).
_cell: dict[str, Any] = {}
_hook_lock = threading.Lock()


def _remember_cells() -> None:
    """Register, once per kernel, the hook that keeps the running cell's parent.

    Called as a widget is made: on the main thread, in the cell that makes it.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    kernel = getattr(shell, "kernel", None)
    events = getattr(shell, "events", None)
    if kernel is None or events is None:
        return  # not in a kernel: no subshells, nothing to give back
    with _hook_lock:
        if _cell.get("hooked") is shell:
            return
        _cell["hooked"] = shell

        def started(*_args: Any) -> None:
            with contextlib.suppress(Exception):
                _cell["parent"] = kernel.get_parent("shell")

        events.register("pre_run_cell", started)
        if threading.current_thread() is threading.main_thread():
            started()  # the cell running now: the one making the widget


class PageRoute:
    """The page's subshell for one widget's comm (see the module)."""

    def __init__(self) -> None:
        self._parent: dict[str, Any] | None = None
        _remember_cells()

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

    def handled(self, comm: Any) -> None:
        """Called after a message from the page was handled.

        On a subshell's thread, give the print and display streams back the running cell's parent
        (see the module).
        """
        if threading.current_thread() is threading.main_thread():
            return
        cell = _cell.get("parent")
        shell = getattr(getattr(comm, "kernel", None), "shell", None)
        set_parent = getattr(shell, "set_parent", None)
        if cell is None or set_parent is None:
            return
        try:
            set_parent(cell)
        except Exception:  # an unusual shell: outputs keep ipykernel's own routing
            logger.debug("could not give the streams back the cell's parent", exc_info=True)

    @contextlib.contextmanager
    def publishing(self, comm: Any) -> Iterator[None]:
        """Comm messages sent inside carry the page's parent (and so its subshell)."""
        parent = self._parent
        kernel = getattr(comm, "kernel", None)
        var = getattr(kernel, "_shell_parent", None)
        if parent is None or not isinstance(var, ContextVar):
            yield
            return
        if not _subshell_exists(kernel, parent["header"]["subshell_id"]):
            # Gone (its page closed): routing there would drop the page's messages.
            self._parent = None
            yield
            return
        token = var.set(parent)
        try:
            yield
        finally:
            var.reset(token)


def _subshell_exists(kernel: Any, subshell_id: str) -> bool:
    manager = getattr(getattr(kernel, "shell_channel_thread", None), "manager", None)
    listed = getattr(manager, "list_subshell", None)
    if listed is None:
        return False
    try:
        return subshell_id in listed()
    except Exception:
        return False


def answer_on_sending_subshell(comm: Any) -> bool:
    """Have ipykernel hand each of the page's ``comm`` messages to the subshell it came on.

    The subshell is the one the page sent it on. True if it could.

    ipykernel 7 re-routes a comm's incoming messages to the subshell from which the kernel
    last published on that comm (``BaseComm._reply_subshell_for``, asked by the shell
    channel thread for every ``comm_msg``): made for a cell that waits for the page's reply.
    No cell waits for a reply on these widgets' comms, but a widget made or driven by the
    very cell that then blocks (``w.generate(...)`` then ``w.wait()``) published under that
    cell's parent, with no subshell, so its Stop waited for the cell. Where the hook is
    missing (another ipykernel) nothing changes and :class:`PageRoute` still applies.
    """
    decide = getattr(comm, "_reply_subshell_for", None)
    if not callable(decide):
        logger.debug("no per-comm routing in this ipykernel: comm messages routed as it does")
        return False

    def route(data: Any, sent_on: Any) -> Any:
        decide(data, sent_on)  # ipykernel's own bookkeeping (it forgets answered requests)
        return sent_on

    try:
        comm._reply_subshell_for = route
    except Exception:  # a comm that takes no attributes: keep ipykernel's routing
        logger.debug("could not route the page's messages to its subshell", exc_info=True)
        return False
    return True


def send_unasked(comm: Any, send: Callable[[], None]) -> threading.Thread | None:
    """Call ``send`` on a new thread, under a parent no page or cell sent: a probe.

    What a widget's thread sends reaches the page under whatever parent the kernel falls back
    to. A host that routes by parent (Colab gives each cell's output its own frame and feeds
    it only the messages of its cell, and answers to its own messages) drops a message whose
    parent is neither; JupyterLab, Notebook 7 and Voila deliver a comm's messages whatever
    their parent. A message under a fresh parent therefore reaches a view exactly where a
    push from a later cell or a thread would. Where the kernel has no such parent to set
    (before ipykernel 7) the thread's fallback parent is used; a comm of a kernel that is
    not ipykernel (marimo's, whose ``kernel`` is a name and which keeps no parents: what a
    thread sends arrives) is sent the probe plain; outside a kernel (a comm with no kernel)
    nothing is sent (no page to probe). Returns the thread, or None.
    """
    kernel = getattr(comm, "kernel", None)
    if kernel is None:
        return None
    session = getattr(kernel, "session", None)
    var = getattr(kernel, "_shell_parent", None)

    def probe() -> None:
        try:
            if session is not None and isinstance(var, ContextVar):
                var.set(session.msg("nbstream_probe", {}))
            send()
        except Exception:  # a probe never raises anywhere
            logger.debug("the probe could not be sent", exc_info=True)

    thread = threading.Thread(target=probe, name="nbstream-probe", daemon=True)
    thread.start()
    return thread
