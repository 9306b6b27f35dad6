"""The prompt grid's widget in the kernel: its table's traits, its feed's messages, the page's
clicks (Stop for a cell, a row or all; Run; Open) and the cell opened in full.

The page is played by calling the table's message handler with what js/src/grid.js sends,
and by recording what the table sends back (tests/frontend/test_grid_frontend.py has the
page itself).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import ipywidgets
import pytest

import nbstream
from nbstream.testing import forced_model
from nbstream.widgets.grid_cell import GridCellView
from nbstream.widgets.grid_feed import GRID_THREAD
from nbstream.widgets.grid_view import cell_index

pytestmark = pytest.mark.usefixtures("no_leftover_runs")


class Page:
    """What a grid's table sent (its messages and its ``cells`` states, in order)."""

    def __init__(self, grid: nbstream.Grid) -> None:
        self.grid = grid
        self.widget = grid.widget
        self.table = self.widget.table
        self.log: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        self.table.send = self._sent  # type: ignore[method-assign]
        self.table.observe(lambda change: self._note("cells", change["new"]), "cells")

    def _sent(self, content: Any, buffers: Any = None) -> None:
        self._note("msg", content)

    def _note(self, kind: str, value: Any) -> None:
        with self._lock:
            self.log.append((kind, value))

    def click(self, **content: Any) -> None:
        """A message of the page (js/src/grid.js), as the comm delivers it."""
        self.table.handle_page_message(self.widget, content)

    def deltas(self) -> list[dict[str, Any]]:
        with self._lock:
            return [d for kind, m in self.log if kind == "msg" and m["type"] == "grid_delta"
                    for d in m["cells"]]  # fmt: skip

    def texts(self) -> dict[tuple[int, int], str]:
        """Each cell's text as the page rebuilds it from the deltas (offsets checked)."""
        texts: dict[tuple[int, int], str] = {}
        for d in self.deltas():
            key = (d["row"], d["col"])
            have = texts.get(key, "")
            assert d["offset"] == len(have), f"a gap or an overlap in cell {key}: {d}"
            texts[key] = have + d["text"]
        return texts

    def status(self, row: int, col: int) -> str:
        return str(self.table.cells[row][col]["status"])


def until(check: Callable[[], Any], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"never true: {check}")


def settled(page: Page) -> None:
    """Every cell's end is in the table (the feed publishes it after the run's last text)."""
    page.grid.wait(timeout=60)
    until(lambda: [[c["status"] for c in row] for row in page.table.cells] == page.grid.statuses)


def test_every_cell_streams_as_deltas_whose_text_is_the_result(tiny_line):
    model, tokenizer = tiny_line
    g = nbstream.Grid(
        ["Hi", "Bye", "Why"],
        model=model,
        tokenizer=tokenizer,
        settings=[{"temperature": 0}, {"do_sample": True, "seed": 1}],
        max_new_tokens=12,
    )
    page = Page(g)
    assert page.table.rows == ["Hi", "Bye", "Why"] and page.table.columns == g.columns
    assert page.table.summary == "3 \u00d7 2 cells \u00b7 not run yet"
    g.generate()
    settled(page)
    texts = page.texts()
    assert texts == {(i, j): g.texts[i][j] for i in range(3) for j in range(2)}
    assert all(g.results[i][j] == texts[(i, j)] for i in range(3) for j in range(2))
    # Never the whole text again: each character crossed the wire once.
    assert sum(len(d["text"]) for d in page.deltas()) == sum(len(t) for t in texts.values())
    entry = page.table.cells[1][1]
    metrics = g.cell(1, 1).metrics
    assert entry["status"] == "complete" and entry["run_id"] == 1
    assert entry["tokens"] == metrics["tokens"] == 12 and entry["finish_reason"] == "length"
    assert entry["elapsed_s"] == pytest.approx(metrics["elapsed_s"], abs=0.01)
    assert page.table.summary == "3 \u00d7 2 cells \u00b7 6 complete"
    # Once every cell ended, the texts a saved notebook shows without a kernel.
    assert page.table.texts == g.texts
    page.widget.close()


def test_states_reach_the_table_in_order_and_an_end_after_its_last_text(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    p.hold()
    g = nbstream.Grid(["a", "b"], model=model, tokenizer=tokenizer, settings=[{}], max_new_tokens=4)
    page = Page(g)
    g.generate()
    assert p.held.wait(30)
    until(lambda: page.status(0, 0) == "running" and page.status(1, 0) == "queued")
    assert page.table.texts == []  # cells are going: no saved texts
    p.release()
    settled(page)
    for row in range(2):
        states = [c[row][0]["status"] for kind, c in page.log if kind == "cells"]
        ended = states.index("complete")
        # Never back to an earlier state (a quick cell may go from queued to its end
        # between two frames); row 0 was seen running, held there.
        order = ["idle", "queued", "running", "complete"]
        ranks = [order.index(state) for state in states]
        assert ranks == sorted(ranks) and states[ended:] == ["complete"] * len(states[ended:])
        assert row or "running" in states[:ended]
        # No text of the cell after its end state.
        later = [i for i, (kind, m) in enumerate(page.log) if kind == "msg"
                 and any(d["row"] == row for d in m.get("cells", []))]  # fmt: skip
        end_at = next(i for i, (kind, c) in enumerate(page.log)
                      if kind == "cells" and c[row][0]["status"] == "complete")  # fmt: skip
        assert max(later) < end_at


def test_a_stop_click_stops_that_cell_alone_and_says_cancelled_once_it_stopped(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    g = nbstream.Grid(
        ["a", "b"], model=model, tokenizer=tokenizer, settings=[{}, {}], max_new_tokens=40
    )
    page = Page(g)
    p.on_call = lambda calls: p.hold() if calls == 4 else None  # hold (0, 0) mid-answer
    g.generate()
    assert p.held.wait(30)
    until(lambda: page.texts().get((0, 0)))
    page.click(type="stop", row=0, col=0)
    # The run's Stop is asked; its step is still held, so it has not stopped: not cancelled.
    time.sleep(0.2)
    assert g.cell(0, 0).status == "running" and page.status(0, 0) == "running"
    p.on_call = None
    p.release()
    settled(page)
    assert g.statuses == [["cancelled", "complete"], ["complete", "complete"]]
    entry = page.table.cells[0][0]
    assert entry["status"] == "cancelled" and entry["finish_reason"] == "cancelled"
    assert entry["tokens"] < 40  # it stopped within a step of the click
    sent = page.texts()[(0, 0)]
    assert sent == g.cell(0, 0).partial_text  # nothing more came after the end
    page.widget.close()


def test_stop_a_row_and_stop_all_from_the_page(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    p.hold()
    g = nbstream.Grid(
        ["a", "b", "c"], model=model, tokenizer=tokenizer, settings=[{}, {}], max_new_tokens=3
    )
    page = Page(g)
    g.generate()
    assert p.held.wait(30)
    page.click(type="stop", row=1, col=None)
    assert g.stop(row=1) == 0  # asked already: nothing more to stop there
    # A message for no cell is ignored, never widened to every cell.
    page.click(type="stop", row=7, col=None)
    page.click(type="stop", row=True, col=0)
    page.click(type="stop", row=0, col="1")
    p.release()
    settled(page)
    assert g.statuses == [["complete", "complete"], ["cancelled", "cancelled"], ["complete"] * 2]
    p.hold()
    g.generate()
    assert p.held.wait(30)
    page.click(type="stop", row=None, col=None)
    p.release()
    settled(page)
    assert g.statuses == [["cancelled", "cancelled"]] * 3
    assert page.table.summary == "3 \u00d7 2 cells \u00b7 6 cancelled"
    page.widget.close()


def test_run_all_from_the_page_starts_new_runs_with_new_run_ids(tiny_line):
    model, tokenizer = tiny_line
    g = nbstream.Grid(["a"], model=model, tokenizer=tokenizer, settings=[{}, {}], max_new_tokens=3)
    page = Page(g)
    page.click(type="run", row=None, col=None)
    settled(page)
    first = g.cell(0, 1)
    page.click(type="run", row=0, col=1)  # one cell again
    until(lambda: g.cell(0, 1) is not first)
    # (its end may come before the table's next frame: wait for the new run's entry)
    until(lambda: page.table.cells[0][1]["run_id"] == 2)
    settled(page)
    assert [c["run_id"] for c in page.table.cells[0]] == [1, 2]
    deltas = [d for d in page.deltas() if (d["row"], d["col"]) == (0, 1)]
    assert {d["run_id"] for d in deltas} == {1, 2}
    assert "".join(d["text"] for d in deltas if d["run_id"] == 2) == g.cell(0, 1).result
    page.widget.close()


def test_a_sync_gets_exactly_the_text_sent_and_the_next_delta_continues_it(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    g = nbstream.Grid(["a"], model=model, tokenizer=tokenizer, settings=[{}], max_new_tokens=30)
    page = Page(g)
    p.on_call = lambda calls: p.hold() if calls == 6 else None
    g.generate()
    assert p.held.wait(30)
    until(lambda: page.texts().get((0, 0)))
    page.click(type="sync", view="v1", page="p1")
    reset = [m for kind, m in page.log if kind == "msg" and m["type"] == "grid_reset"][-1]
    assert reset["view"] == "v1"
    (cell,) = reset["cells"]
    sent_before = page.texts()[(0, 0)]
    assert cell == {"row": 0, "col": 0, "run_id": 1, "text": sent_before}
    p.on_call = None
    p.release()
    settled(page)
    later = [d for d in page.deltas() if d["offset"] >= len(sent_before)]
    assert later and later[0]["offset"] == len(sent_before)
    assert cell["text"] + "".join(d["text"] for d in later) == g.cell(0, 0).result


def test_a_row_whose_answers_differ_is_marked_where_they_part():
    g = nbstream.Grid(["x"], models=[forced_model(" red"), forced_model(" rat")])
    page = Page(g)
    g.generate()
    settled(page)
    until(lambda: page.table.marks[0])
    mark = page.table.marks[0]
    assert mark["char"] == g.divergence(0).char == 2
    assert mark["words"][0].endswith("this column has ' red'; the other has ' rat'")
    same = nbstream.Grid(["x"], models=[forced_model(" red"), forced_model(" red")])
    other = Page(same)
    same.generate()
    settled(other)
    assert other.table.marks == [None]


def test_a_failed_cell_says_why_in_its_entry(tiny_line, probe):
    crashing = forced_model(" oops")
    p = probe(crashing[0])
    p.fail_at, p.error = 1, RuntimeError("the model crashed")
    g = nbstream.Grid(["a"], models=[tiny_line, crashing], max_new_tokens=3)
    page = Page(g)
    g.generate()
    settled(page)
    entry = page.table.cells[0][1]
    assert entry["status"] == "failed" and entry["finish_reason"] == "error"
    assert entry["error"] == "RuntimeError: the model crashed"


def test_an_opened_cell_follows_the_cells_run_and_its_stop_is_the_runs(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    g = nbstream.Grid(
        ["a", "b"], model=model, tokenizer=tokenizer, settings=[{}, {}], max_new_tokens=40
    )
    page = Page(g)
    page.click(type="open", row=0, col=0)  # not run yet: nothing to open
    assert page.widget.detail.children == () and page.table.opened == []
    p.on_call = lambda calls: p.hold() if calls == 3 else None
    g.generate()
    assert p.held.wait(30)
    page.click(type="open", row=0, col=0)
    (view,) = page.widget.detail.children
    assert isinstance(view, GridCellView) and view.run is g.cell(0, 0)
    assert page.table.opened == [0, 0] and view.label == f"row 1 \u00b7 {g.columns[0]}"
    assert view.status == "running" and view.show_prompt is False
    view.stop()  # the view's Stop: the cell's run's own
    p.on_call = None
    p.release()
    settled(page)
    assert g.statuses[0][0] == "cancelled" and g.cell(0, 0).metrics["finish_reason"] == "cancelled"
    # The same column's next cell opens in the same view; an ended one shows its end at once.
    page.click(type="open", row=1, col=0)
    assert page.widget.detail.children == (view,) and view.run is g.cell(1, 0)
    assert view.status == "complete"
    until(lambda: view.partial_text == g.cell(1, 0).result)
    page.click(type="open", row=None, col=None)
    assert page.widget.detail.children == () and page.table.opened == []
    page.widget.close()


def test_the_opened_cells_run_button_reruns_it_through_the_grid(tiny_line):
    model, tokenizer = tiny_line
    g = nbstream.Grid(["a"], model=model, tokenizer=tokenizer, settings=[{}], max_new_tokens=3)
    page = Page(g)
    g.generate()
    settled(page)
    page.widget.open_cell(0, 0)
    (view,) = page.widget.detail.children
    first = g.cell(0, 0)
    with pytest.raises(TypeError, match="its row's prompt"):
        view.generate("another prompt")
    run = view.generate()
    assert run is g.cell(0, 0) is not first and view.run is run
    until(lambda: page.table.cells[0][0]["run_id"] == 2)
    settled(page)
    assert page.table.cells[0][0]["run_id"] == 2 and view.result == run.result


def test_closing_the_widget_leaves_the_grid_running(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    p.hold()
    g = nbstream.Grid(["a"], model=model, tokenizer=tokenizer, settings=[{}], max_new_tokens=3)
    w = g.widget
    g.generate()
    assert p.held.wait(30)
    w.open_cell(0, 0)
    parts = [w, w.table, w.detail, *w.detail.children]
    w.close()
    # Nothing of it stays open, the opened cell's box included: an open widget that held a
    # closed one would break saving every open widget's state (ipywidgets.embed).
    assert all(part.comm is None for part in parts)
    assert not any(part in ipywidgets.Widget.widgets.values() for part in parts)
    assert g.statuses == [["running"]]
    p.release()
    assert g.wait(timeout=60) == [[g.cell(0, 0).result]] and g.statuses == [["complete"]]
    until(lambda: not any(t.name == GRID_THREAD and t.is_alive() for t in threading.enumerate()))
    assert g.widget is not w  # a closed widget is made anew when shown again


def test_a_saved_grid_shows_and_opens_its_cells_without_a_model(tiny_line, tmp_path):
    model, tokenizer = tiny_line
    g = nbstream.Grid(
        ["a", "b"], model=model, tokenizer=tokenizer, settings=[{}, {}], max_new_tokens=5
    )
    g.generate()
    g.wait(timeout=60)
    kept = nbstream.load(g.save(tmp_path / "grid"))
    page = Page(kept)
    assert page.table.replay is True
    until(lambda: page.table.texts == g.texts)
    assert [[c["status"] for c in row] for row in page.table.cells] == g.statuses
    page.widget.open_cell(1, 1)
    (view,) = page.widget.detail.children
    assert view.run is kept.cell(1, 1) and view.run.is_replay
    until(lambda: view.status == "complete" and view.partial_text == g.results[1][1])
    page.widget.close()


def test_outside_a_kernel_the_grid_shows_as_a_table_snapshot(tiny_line):
    model, tokenizer = tiny_line
    g = nbstream.Grid(["<b>a</b>"], model=model, tokenizer=tokenizer, settings=[{}])
    bundle = g._repr_mimebundle_()
    assert bundle is not None and "&lt;b&gt;a&lt;/b&gt;" in bundle["text/html"]
    assert bundle["text/plain"] == repr(g)


def test_the_widgets_text_copy_is_a_markdown_table_with_escaped_text(tiny_line):
    model, tokenizer = tiny_line
    g = nbstream.Grid(["<i>x</i> | y"], model=model, tokenizer=tokenizer, settings=[{}])
    bundle = g.widget.bundle()
    assert bundle is not None
    assert "application/vnd.jupyter.widget-view+json" in bundle
    markdown = bundle["text/markdown"]
    assert "&lt;i&gt;x&lt;/i&gt; \\| y" in markdown and "**idle**" in markdown
    g.widget.close()


def test_cell_index_takes_only_a_row_or_column_in_range():
    assert [cell_index(v, 3) for v in (0, 2, None)] == [0, 2, None]
    assert {cell_index(v, 3) for v in (3, -1, True, 1.0, "1")} == {-1}


def _pulled(page: Page, held: list[list[list[int]]], version: int = 0) -> dict[str, Any]:
    """The answer to a pull from view ``v1`` holding ``held``, sent inside the handler."""
    before = len(page.log)
    page.click(type="pull", view="v1", cells=held, version=version)
    answers = [m for kind, m in page.log[before:] if kind == "msg" and m["type"] == "pulled"]
    assert len(answers) == 1, page.log[before:]
    return answers[0]


def test_a_pull_gives_each_cell_what_the_view_lacks_by_the_feeds_offset_rules(tiny_line):
    model, tokenizer = tiny_line
    g = nbstream.Grid(["Hi", "Bye"], model=model, tokenizer=tokenizer, max_new_tokens=10)
    page = Page(g)
    g.generate()
    settled(page)
    texts = g.texts
    ids = [[page.table.cells[i][j]["run_id"] for j in range(1)] for i in range(2)]
    # Row 0 held up to 3 characters of its run, row 1 nothing: a delta from 3, a reset.
    held = [[[ids[0][0], 3]], [[0, 0]]]
    answer = _pulled(page, held)
    assert answer["view"] == "v1" and answer["version"] >= 1
    messages = answer["messages"]
    resets = [c for m in messages if m["type"] == "grid_reset" for c in m["cells"]]
    deltas = [c for m in messages if m["type"] == "grid_delta" for c in m["cells"]]
    assert [(c["row"], c["col"], c["text"]) for c in resets] == [(1, 0, texts[1][0])]
    assert [(c["row"], c["offset"], c["text"]) for c in deltas] == [(0, 3, texts[0][0][3:])]
    # Holding everything: nothing of either cell again (a push that also arrived is harmless).
    full = [[[ids[i][0], len(texts[i][0])]] for i in range(2)]
    again = _pulled(page, full, version=answer["version"])
    assert not [c for m in again["messages"] for c in m.get("cells", [])]
    # Holding more than was sent, or another run: the cell's text again, as a reset.
    ahead = [[[ids[0][0], len(texts[0][0]) + 5]], [[ids[1][0] + 7, 1]]]
    reset = _pulled(page, ahead, version=answer["version"])
    cells = [c for m in reset["messages"] if m["type"] == "grid_reset" for c in m["cells"]]
    assert sorted((c["row"], c["text"]) for c in cells) == [(0, texts[0][0]), (1, texts[1][0])]


def test_a_malformed_pull_gets_no_answer(tiny_line):
    model, tokenizer = tiny_line
    g = nbstream.Grid(["Hi"], model=model, tokenizer=tokenizer, max_new_tokens=4)
    page = Page(g)
    for cells in ([[[1, -1]]], [[[1]]], [[1, 2]], "x", [[[1, 2]], [[1, 2]]]):
        before = len(page.log)
        page.click(type="pull", view="v1", cells=cells, version=0)
        assert not [m for kind, m in page.log[before:] if kind == "msg"], cells


def test_wait_shows_every_end_and_rewrites_the_text_copy_for_the_cell_that_waits(
    tiny_line, monkeypatch
):
    # A headless runner (nbclient) keeps only what answers the cell it runs: the table shown
    # in one cell, the grid run and waited for in the next. When wait() returns, the table
    # has every end, and the text copy says so under the waiting cell's request, whether or
    # not the feed's thread got there first.
    import IPython.display

    import nbstream.widgets.display as display
    import nbstream.widgets.grid_widget as grid_widget

    updates: list[tuple[str, str]] = []
    parent = {"msg_id": "cell-5"}

    def update(data, *, display_id=None, **kwargs):
        updates.append((parent["msg_id"], data["text/plain"]))

    monkeypatch.setattr(display, "in_kernel", lambda: True)
    monkeypatch.setattr(grid_widget, "in_kernel", lambda: True)
    monkeypatch.setattr(display, "publishing_parent", lambda: parent["msg_id"])
    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: None)
    monkeypatch.setattr(IPython.display, "update_display", update)
    model, tokenizer = tiny_line
    for _ in range(5):
        updates.clear()
        g = nbstream.Grid(["a", "b"], model=model, tokenizer=tokenizer, max_new_tokens=4)
        g._ipython_display_()
        parent["msg_id"] = "cell-6"
        g.generate()
        shown = g.widget
        g.wait(timeout=60)
        assert g.widget is shown
        table = shown.table
        # Every end is in the table as wait() returns: no waiting for the feed's next frame.
        assert [[c["status"] for c in row] for row in table.cells] == g.statuses
        assert g.statuses == [["complete"], ["complete"]]
        assert ("cell-6", "<nbstream.Grid 2 × 1 cells · 2 complete>") in updates
        g.widget.close()
        parent["msg_id"] = "cell-5"
