"""What the kernel knows of the pages showing a widget, and a pull's answer (page_views.py).

A view that never gets the kernel's pushes pulls (PROTOCOL.md, Pulling): the answer, inside
the handler of its ``pull``, carries the synced traits the kernel changed since the view's
version and the feed's messages after the view's offsets, cut at what was pushed, so that
the same text pushed as well is placed by the usual offset rules.
"""

from __future__ import annotations

from typing import Any

import pytest
from helpers import Recorder, wait_followers

import nbstream
from nbstream.widgets.page_views import NEVER_PULLED, PageViews, pull_offsets

HOLDS = {"run_id": 2, "text": 5, "tokens": 0, "thinking": 0, "version": 7}


def pull(view: str = "v1", **holds: int) -> dict[str, Any]:
    return {"type": "pull", "view": view, **{**HOLDS, **holds}}


def test_pull_offsets_are_whole_numbers_of_at_least_zero() -> None:
    assert pull_offsets(pull()) == HOLDS
    for bad in (-1, 1.5, "3", None, True):
        assert pull_offsets({**pull(), "text": bad}) is None
    assert pull_offsets({"type": "pull", "view": "v1", "run_id": 1}) is None


def test_a_malformed_pull_has_no_answer() -> None:
    pages = PageViews()

    def never(*_: object) -> Any:
        raise AssertionError("nothing is read for a malformed pull")

    assert pages.answer({**pull(), "view": 3}, never, never) is None
    assert pages.answer({**pull(), "version": -1}, never, never) is None


def test_only_the_kernels_own_changes_of_synced_traits_are_numbered() -> None:
    pages = PageViews()
    synced = {"status", "run_id", "settings_schema"}.__contains__
    pages.number("status", synced)
    assert pages.version == 0  # the widget is still being built
    pages.numbering = True
    pages.number("status", synced)
    pages.number("not_synced", synced)
    pages.number("settings_schema", synced)  # never changes after construction
    assert "settings_schema" in NEVER_PULLED
    with pages.from_page():
        pages.number("run_id", synced)  # the page has it already
    pages.number("run_id", synced)
    assert pages.version == 2

    def state(names: list[str]) -> dict[str, Any]:
        return {name: f"<{name}>" for name in names}

    answer = pages.answer(pull(version=0), lambda view, held: [], state)
    assert answer == {
        "type": "pulled",
        "view": "v1",
        "version": 2,
        "messages": [],
        "state": {"status": "<status>", "run_id": "<run_id>"},
    }
    answer = pages.answer(pull(version=1), lambda view, held: [], state)
    assert answer is not None and answer["state"] == {"run_id": "<run_id>"}
    answer = pages.answer(pull(version=2), lambda view, held: [], state)
    assert answer is not None and "state" not in answer


def test_a_page_loses_its_last_view() -> None:
    pages = PageViews()
    pages.shown("p1", "a")
    pages.shown("p1", "b")
    pages.shown("p2", "c")
    assert not pages.removed("p1", "zz")  # a view it never knew: never close on a stray
    assert not pages.removed("p9", "a")
    assert not pages.removed("p1", "a")
    assert pages.removed("p1", "b")


def answer_to(w: nbstream.StreamWidget, rec: Recorder, **holds: int) -> dict[str, Any]:
    """The widget's answer to a pull of view v1 holding ``holds``."""
    w._handle_message(w, pull(**holds), [])
    answer = rec.messages[-1][1]
    assert answer["type"] == "pulled" and answer["view"] == "v1"
    return answer


def test_a_pull_gets_what_the_view_lacks_of_the_run(tiny_line: Any) -> None:
    w = nbstream.StreamWidget(*tiny_line, max_new_tokens=24)
    rec = Recorder(w)
    w.generate("Hello there")
    text = w.wait()
    wait_followers()
    run_id = w.run_id
    # Behind: the text after the view's offset, and the state changed since its version.
    answer = answer_to(w, rec, run_id=run_id, text=5, version=0)
    assert [m["type"] for m in answer["messages"]] == ["delta"]
    delta = answer["messages"][0]
    assert (delta["run_id"], delta["offset"], delta["text"]) == (run_id, 5, text[5:])
    assert answer["state"]["status"] == "complete" and answer["state"]["run_id"] == run_id
    # Up to date: nothing to send.
    answer = answer_to(w, rec, run_id=run_id, text=len(text), version=answer["version"])
    assert answer["messages"] == [] and "state" not in answer
    # Another run's text (or more text than was pushed): the whole text again.
    for holds in ({"run_id": run_id - 1, "text": 0}, {"run_id": run_id, "text": len(text) + 3}):
        answer = answer_to(w, rec, **holds, version=answer["version"])
        assert [m["type"] for m in answer["messages"]] == ["reset"]
        assert answer["messages"][0]["text"] == text


def test_the_pages_own_writes_never_come_back_in_a_pull(tiny_line: Any) -> None:
    w = nbstream.StreamWidget(*tiny_line, max_new_tokens=4)
    rec = Recorder(w)
    version = answer_to(w, rec, run_id=0, text=0, version=0)["version"]
    w.set_state({"prompt": "from the page", "status": "failed"})  # status: the page only reads
    assert w.prompt == "from the page" and w.status == "idle"
    answer = answer_to(w, rec, run_id=0, text=0, version=version)
    assert "state" not in answer
    w.prompt = "from the kernel"
    assert answer_to(w, rec, run_id=0, text=0, version=version)["state"] == {
        "prompt": "from the kernel"
    }


@pytest.mark.parametrize("content", [pull(text=-1), {"type": "pull"}, pull(view=None)])
def test_a_widget_ignores_a_malformed_pull(tiny_line: Any, content: dict[str, Any]) -> None:
    w = nbstream.StreamWidget(*tiny_line, max_new_tokens=4)
    rec = Recorder(w)
    w._handle_message(w, content, [])
    assert rec.messages == []
