"""A host that routes a widget's messages as Google Colab does, around a real ipykernel.

The page (tests/frontend/routed.html) runs nbstream's own page modules (``nbstream/static``)
under a small widget manager of ours; every comm message between them and a real ipykernel
(jupyter_client) passes through :class:`ColabRouter`, which decides, message by message and
in the kernel's own order, whether a view gets it.

**The rule.** A kernel message on a widget's comm reaches a view only when its parent is

- the ``execute_request`` of the cell that displayed that view, or
- a message that view itself sent (a click, a ``sync``, a ``pull``),

and, in ``strict`` mode, only until that parent's ``idle``. ``lenient`` delivers those
parents' messages at any time after; ``asked`` (a JupyterLite-like host, where nothing
reaches a page unasked) delivers only answers to the view's own messages, before their
idle. ``all`` delivers every message, as JupyterLab, Notebook 7 and Voila do (the push
path's baseline). A view's model is made from the kernel's current state when its cell displays it
(the state Colab's widget manager asks the kernel for), whatever routing dropped.

**Push-only, on purpose.** With ``answer_pulls`` false (or ``NBSTREAM_ROUTER_PUSH_ONLY=1``
in the environment) the router never passes the page's ``pull`` to the kernel: the view then
gets exactly what nbstream's push-only code gave it, so the routed tests show that they fail
without the pull (PROTOCOL.md, Pulling).

**The evidence.** Colab gives each cell's output its own frame with its own widget manager,
and feeds a frame the comm messages it routes there by parent header
(googlecolab/colab-cdn-widget-manager; ``google/colab/_message.py``). Updating a widget from
a background thread does not refresh there (googlecolab/colabtools #3373, open), and "comm
messages sent from following cells never arrive at widget views in previous cells"
(googlecolab/colabtools #498). Colab's own long transfers (``google.colab.files.download``)
work by ping-pong: the page sends, the kernel answers inside its handler. Whether a late
answer to a page message still arrives after its idle is not known: ``strict`` says no
(design for it), ``lenient`` says yes. NOTES.md has what was measured with ipykernel 7:
which message nbstream sends under which parent, and when.

Kernel messages pass to the page through a queue the page polls (Playwright's sync API
belongs to the test's thread), so messages flow while the test waits in a Playwright call
(``wait_for_function``, ``expect``), not while it sleeps.
"""

from __future__ import annotations

import ast
import contextlib
import json
import logging
import os
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from jupyter_client import KernelManager
from playwright.sync_api import Page

logger = logging.getLogger(__name__)

Mode = Literal["strict", "lenient", "asked", "all"]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# What the kernel imports once per module: nbstream and the tiny test models.
_SETUP = """
import time, nbstream
from nbstream.testing import tiny_model, forced_model
from nbstream import StreamWidget, ChatWidget
"""


@dataclass
class _View:
    """One displayed view: its comm, the cell that displayed it, the messages it sent."""

    comm_id: str
    cell: str
    sent: set[str] = field(default_factory=set)


@dataclass
class Counts:
    """Comm messages from the kernel to the views: delivered and dropped, by kind."""

    delivered: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)

    def add(self, kept: bool, kind: str) -> None:
        """Count one message of ``kind`` (a custom message's type, or ``update``)."""
        where = self.delivered if kept else self.dropped
        where[kind] = where.get(kind, 0) + 1


class ColabRouter:
    """A real ipykernel and a page of views, with Colab's routing between them (see module)."""

    def __init__(self, mode: Mode = "strict", *, answer_pulls: bool | None = None) -> None:
        self.mode: Mode = mode
        #: False: the page's ``pull`` never reaches the kernel (push-only; see the module).
        self.answer_pulls = (
            os.environ.get("NBSTREAM_ROUTER_PUSH_ONLY") != "1"
            if answer_pulls is None
            else answer_pulls
        )
        self.counts = Counts()
        self._km = KernelManager(kernel_name="python3")
        self._client: Any = None
        self._lock = threading.Lock()
        self._ended: set[str] = set()  # parents whose idle was seen
        self._cells: set[str] = set()  # execute_requests sent by execute()
        self._states: dict[str, dict[str, Any]] = {}  # comm id -> the kernel's state
        self._views: list[_View] = []
        #: Every custom message the page sent, in order.
        self.page_sent: list[dict[str, Any]] = []
        self._outbox: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self._reader: threading.Thread | None = None
        self._closing = threading.Event()

    # -- the kernel ----------------------------------------------------------------------------
    def start(self) -> ColabRouter:
        """Start the kernel and import nbstream in it."""
        self._km.start_kernel()
        self._client = self._km.client()
        self._client.start_channels()
        self._client.wait_for_ready(timeout=60)
        self._reader = threading.Thread(target=self._read_iopub, daemon=True, name="router")
        self._reader.start()
        self.execute(_SETUP, timeout=120)
        return self

    def stop(self) -> None:
        """Shut the kernel down."""
        self._closing.set()
        with contextlib.suppress(Exception):
            self._client.stop_channels()
        self._km.shutdown_kernel(now=True)

    def execute(self, code: str, timeout: float = 60.0) -> dict[str, Any]:
        """Run ``code`` as a cell and wait for its reply; raises on an error in it."""
        with self._lock:
            msg = self._client.session.msg("execute_request", self._execute_content(code))
            self._cells.add(msg["header"]["msg_id"])
        self._client.shell_channel.send(msg)
        reply = self._reply(msg["header"]["msg_id"], timeout)
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"cell failed: {reply['content'].get('evalue')}\n{code}")
        return reply

    def eval(self, expr: str, timeout: float = 30.0) -> Any:
        """The value of the Python expression ``expr`` in the kernel, through JSON."""
        code = f"import json as _j; _nbs_out = _j.dumps({expr})"
        reply = self.execute(code, timeout)
        del reply
        content = self._execute_content("", {"v": "_nbs_out"})
        msg = self._client.session.msg("execute_request", content)
        self._client.shell_channel.send(msg)
        answer = self._reply(msg["header"]["msg_id"], timeout)["content"]["user_expressions"]["v"]
        return json.loads(ast.literal_eval(answer["data"]["text/plain"]))

    @staticmethod
    def _execute_content(code: str, expressions: dict[str, str] | None = None) -> dict[str, Any]:
        return {
            "code": code,
            "silent": False,
            "store_history": False,
            "user_expressions": expressions or {},
            "allow_stdin": False,
            "stop_on_error": True,
        }

    def _reply(self, msg_id: str, timeout: float) -> dict[str, Any]:
        while True:
            reply = self._client.get_shell_msg(timeout=timeout)
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply

    # -- routing (the reader thread, in the kernel's order) ------------------------------------
    def _read_iopub(self) -> None:
        while not self._closing.is_set():
            try:
                msg = self._client.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                continue
            except Exception:  # the channels were stopped
                return
            try:
                with self._lock:
                    self._route(msg)
            except Exception:
                logger.exception("router: could not route %s", msg["header"]["msg_type"])

    def _route(self, msg: dict[str, Any]) -> None:
        kind = msg["header"]["msg_type"]
        parent = msg["parent_header"].get("msg_id", "")
        content = msg["content"]
        if kind == "status" and content.get("execution_state") == "idle":
            self._ended.add(parent)
        elif kind == "comm_open" and content.get("target_name") == "jupyter.widget":
            self._states[content["comm_id"]] = dict(content["data"].get("state", {}))
        elif kind in ("display_data", "update_display_data") and parent in self._cells:
            shown = content.get("data", {}).get(WIDGET_VIEW)
            known = shown and shown.get("model_id") in self._states
            if kind == "display_data" and known and parent not in self._ended:
                self._display(shown["model_id"], parent)
        elif kind == "comm_msg":
            self._comm_msg(content, parent)

    def _display(self, comm_id: str, cell: str) -> None:
        self._views.append(_View(comm_id, cell))
        state = self._states.get(comm_id, {})
        self._outbox.put({"kind": "display", "comm": comm_id, "state": state})

    def _comm_msg(self, content: dict[str, Any], parent: str) -> None:
        comm_id, data = content["comm_id"], content["data"]
        method = data.get("method")
        if method in ("update", "echo_update"):
            self._states.setdefault(comm_id, {}).update(data.get("state", {}))
        what = data.get("content", {}).get("type", "?") if method == "custom" else str(method)
        for shown in self._views:
            if shown.comm_id != comm_id:
                continue
            kept = self._routes(shown, parent)
            self.counts.add(kept, what)
            if kept:
                self._outbox.put({"kind": "msg", "comm": comm_id, "data": data})

    def _routes(self, shown: _View, parent: str) -> bool:
        """Colab's rule, in this router's mode (see the module)."""
        open_ = parent not in self._ended
        own = parent in shown.sent
        if self.mode == "all":
            return True
        if self.mode == "asked":
            return own and open_
        if self.mode == "lenient":
            return own or parent == shown.cell
        return (own or parent == shown.cell) and open_

    # -- the page ----------------------------------------------------------------------------
    def attach(self, page: Page, server: str) -> None:
        """Load the routed page in ``page`` and connect it to the kernel through this router."""
        with self._lock:  # the views of an earlier page are gone
            self._views = []
            self.page_sent = []
            self._outbox = queue.SimpleQueue()
            self.counts = Counts()
        page.expose_function("__nbsPoll", self._poll)
        page.expose_function("__nbsSend", self._send_from_page)
        page.goto(f"{server}/tests/frontend/routed.html")
        page.wait_for_function("window.__ready === true")

    def _poll(self) -> list[dict[str, Any]]:
        out = []
        with contextlib.suppress(queue.Empty):
            while True:
                out.append(self._outbox.get_nowait())
        return out

    def send(self, comm_id: str, content: dict[str, Any]) -> None:
        """Send a custom message on a widget's comm as a page would, from no view."""
        self._send_from_page(comm_id, {"method": "custom", "content": content})

    def _send_from_page(self, comm_id: str, data: dict[str, Any]) -> None:
        msg = self._client.session.msg("comm_msg", {"comm_id": comm_id, "data": data})
        with self._lock:
            if data.get("method") == "custom":
                self.page_sent.append(data["content"])
                if data["content"].get("type") == "pull" and not self.answer_pulls:
                    return  # push-only: the kernel never hears it
            for shown in self._views:
                if shown.comm_id == comm_id:
                    shown.sent.add(msg["header"]["msg_id"])
        self._client.shell_channel.send(msg)


@contextlib.contextmanager
def routed(mode: Mode = "strict") -> Iterator[ColabRouter]:
    """A started :class:`ColabRouter` for the block; its kernel is shut down after."""
    router = ColabRouter(mode).start()
    try:
        yield router
    finally:
        router.stop()
