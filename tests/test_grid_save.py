"""A prompt grid kept in a folder (g.save) and reopened without its model (nbstream.load)."""

from __future__ import annotations

import json

import pytest

import nbstream
from nbstream.testing import forced_model

pytestmark = pytest.mark.usefixtures("no_leftover_runs")


@pytest.fixture
def ended_grid(tiny_line, probe):
    """A 3 x 2 grid whose cells ended every way: complete, cancelled, failed, never run."""
    crashing = forced_model(" no")
    p = probe(crashing[0])
    p.fail_at, p.error = 1, RuntimeError("crashed")
    prompts = nbstream.template("Say {text}", [{"text": "a", "n": 1}, {"text": "b", "n": 2}])
    g = nbstream.Grid(prompts, models=[tiny_line, crashing], max_new_tokens=4, alternatives=3)
    g.generate(row=0)
    g.wait(timeout=60)
    return g


def test_a_saved_grid_reopens_with_its_rows_columns_and_cells(ended_grid, tmp_path):
    g = ended_grid
    assert g.statuses == [["complete", "failed"], ["idle", "idle"]]
    folder = g.save(tmp_path / "grid")
    index = json.loads((folder / "grid.json").read_text())
    assert index["format"] == "nbstream.grid/1"
    assert index["template"] == "Say {text}" and index["fields"][1] == {"text": "b", "n": 2}
    assert index["statuses"] == g.statuses
    assert index["files"][1] == [None, None]
    loaded = nbstream.load(folder)
    assert isinstance(loaded, nbstream.Grid)
    assert loaded.statuses == g.statuses and loaded.results == g.results
    assert loaded.texts == g.texts
    assert loaded.columns == g.columns and loaded.fields == g.fields
    assert loaded.template == g.template and loaded.prompts == g.prompts
    assert loaded.cell(0, 0).is_replay and loaded.cell(1, 0) is None
    assert "crashed" in str(loaded.cell(0, 1).error)
    # Each cell is an ordinary recording too.
    alone = nbstream.load(folder / index["files"][0][0])
    assert alone.text == g.results[0][0]
    # Generate again: the cells replay (no model), and end as they were recorded.
    loaded.generate()
    loaded.wait(timeout=60)
    assert loaded.results == g.results
    assert loaded.table()[0]["tokens"] == g.table()[0]["tokens"]


def test_a_cancelled_cell_keeps_its_partial_text(tiny_line, probe, tmp_path):
    model, tokenizer = tiny_line
    p = probe(model)
    g = nbstream.Grid(["a"], model=model, tokenizer=tokenizer, max_new_tokens=50)
    p.on_call = lambda calls: calls == 4 and g.stop()
    g.generate()
    g.wait(timeout=60)
    loaded = nbstream.load(g.save(tmp_path))
    assert loaded.statuses == [["cancelled"]] and loaded.results == [[None]]
    assert loaded.texts == g.texts and loaded.texts[0][0]


def test_saving_while_a_cell_runs_is_refused_and_writes_nothing(tiny_line, probe, tmp_path):
    model, tokenizer = tiny_line
    p = probe(model)
    p.hold()
    g = nbstream.Grid(["a", "b"], model=model, tokenizer=tokenizer, max_new_tokens=3)
    g.generate()
    assert p.held.wait(30)
    with pytest.raises(RuntimeError, match=r"\(0, 0\), \(1, 0\) have not ended"):
        g.save(tmp_path / "grid")
    assert not (tmp_path / "grid").exists()
    p.release()
    g.wait(timeout=60)


def test_a_folder_without_a_grid_is_refused(tmp_path):
    with pytest.raises(ValueError, match="a folder, with no saved grid"):
        nbstream.load(tmp_path)


@pytest.mark.parametrize(
    "index, words",
    [
        ("{not json", "cannot be read"),
        ('{"format": "other/1"}', "not a grid's index"),
        ('{"format": "nbstream.grid/1", "prompts": ["a"]}', "lacks"),
        (
            '{"format": "nbstream.grid/1", "prompts": ["a"], "columns": [{}], "files": []}',
            "do not match",
        ),
        (
            '{"format": "nbstream.grid/1", "prompts": ["a"], "columns": [{}], '
            '"files": [["../x.json"]]}',
            "outside the folder",
        ),
    ],
)
def test_a_damaged_index_is_refused_saying_what(tmp_path, index, words):
    (tmp_path / "grid.json").write_text(index)
    with pytest.raises(ValueError, match=words):
        nbstream.load(tmp_path)
