"""The probe a widget sends from a thread after a view's first message (route.send_unasked).

A view that never sees it pulls (PROTOCOL.md, Pulling). marimo's comm delivers what a thread
sends, so there the probe must go out too, or every marimo view would pull for nothing.
"""

from __future__ import annotations

import threading
from contextvars import ContextVar
from types import SimpleNamespace
from typing import Any

from nbstream.widgets.route import send_unasked


def _sent_from_thread(comm: Any) -> tuple[threading.Thread | None, list[str]]:
    names: list[str] = []

    def send() -> None:
        names.append(threading.current_thread().name)

    thread = send_unasked(comm, send)
    if thread is not None:
        thread.join(10)
    return thread, names


def test_a_marimo_comm_gets_the_probe_from_a_thread() -> None:
    # marimo's comm: `kernel` is the name "marimo", with no ipykernel session or parents.
    thread, names = _sent_from_thread(SimpleNamespace(kernel="marimo"))
    assert thread is not None
    assert names == ["nbstream-probe"]


def test_an_ipykernel_comm_gets_the_probe_under_a_parent_of_its_own() -> None:
    parents: ContextVar[Any] = ContextVar("parent", default=None)
    session = SimpleNamespace(msg=lambda kind, content: {"header": {"msg_type": kind}})
    seen: list[Any] = []
    kernel = SimpleNamespace(session=session, _shell_parent=parents)

    def send() -> None:
        seen.append(parents.get())

    thread = send_unasked(SimpleNamespace(kernel=kernel), send)
    assert thread is not None
    thread.join(10)
    assert seen == [{"header": {"msg_type": "nbstream_probe"}}]
    assert parents.get() is None  # the caller's parent is untouched


def test_a_comm_outside_a_kernel_sends_nothing() -> None:
    for comm in (SimpleNamespace(kernel=None), SimpleNamespace()):
        thread, names = _sent_from_thread(comm)
        assert thread is None
        assert names == []
