"""nbstream.Grid: prompts (rows) against models or settings (columns), every cell a run."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nbstream
from nbstream.testing import forced_model
from nbstream.widgets.grid_columns import CellRefused

pytestmark = pytest.mark.usefixtures("no_leftover_runs")


def test_every_cell_runs_and_returns_results_row_by_row(tiny_line):
    model, tokenizer = tiny_line
    g = nbstream.Grid(
        ["Hi", "Bye", "Why"],
        model=model,
        tokenizer=tokenizer,
        settings=[{"temperature": 0}, {"top_k": 5, "do_sample": True, "seed": 1}],
        max_new_tokens=4,
    )
    assert g.shape == (3, 2)
    assert g.statuses == [["idle", "idle"]] * 3 and g.cell(0, 0) is None
    runs = g.generate()
    assert len(runs) == 6 and all(isinstance(r, nbstream.Generation) for r in runs)
    results = g.wait(timeout=60)
    assert g.statuses == [["complete", "complete"]] * 3
    assert results == [[g.cell(i, j).result for j in range(2)] for i in range(3)]
    assert all(text for row in results for text in row)
    assert g.cell(1, 0).prompt == "Bye"
    assert g.cell(1, 1).settings["top_k"] == 5
    assert g.columns == ["temperature=0.0", "top_k=5, do_sample=True, seed=1"]


def test_one_models_cells_queue_in_row_order_never_interleaved(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    p.hold()  # the first cell holds the model: every other one must be queued behind it
    g = nbstream.Grid(
        ["a", "b"], model=model, tokenizer=tokenizer, settings=[{}, {}], max_new_tokens=3
    )
    g.generate()
    assert p.held.wait(30)
    assert g.statuses == [["running", "queued"], ["queued", "queued"]]
    ends = []
    for i in range(2):
        for j in range(2):
            g.cell(i, j).add_done_callback(lambda run, at=(i, j): ends.append(at))
    p.release()
    g.wait(timeout=60)
    # A run's done-callbacks run on its worker after its end is set: join the workers.
    for i in range(2):
        for j in range(2):
            g.cell(i, j).join(60)
    assert ends == [(0, 0), (0, 1), (1, 0), (1, 1)]
    # Each cell's decode steps ran on its own worker, one cell after another.
    assert len({t for t in p.threads}) == 4


def test_columns_on_models_answer_each_with_its_own(no_leftover_runs):
    g = nbstream.Grid(["x", "y"], models=[forced_model(" red"), forced_model(" blue")])
    g.generate()
    assert g.wait(timeout=60) == [[" red", " blue"], [" red", " blue"]]
    found = g.divergence(0)
    assert found is not None and found.char == 1
    assert found.tokens[0].strip() == "red" and found.tokens[1].strip() == "blue"
    table = g.table()
    assert [row["differs_at"] for row in table] == [1, 1, 1, 1]
    assert "this column has" in table[0]["divergence"]


def test_a_crash_in_one_cell_fails_only_that_cell(tiny_line, probe):
    crashing = forced_model(" oops")
    p = probe(crashing[0])
    p.fail_at, p.error = 1, RuntimeError("the model crashed")  # its first cell's first step
    g = nbstream.Grid(["a", "b"], models=[tiny_line, crashing], max_new_tokens=3)
    g.generate()
    results = g.wait(timeout=60)
    assert g.statuses == [["complete", "failed"], ["complete", "complete"]]
    assert results[0][1] is None and results[1][1] == " oops"
    assert g.cell(0, 1).error.__class__ is RuntimeError
    row = g.table()[1]
    assert row["status"] == "failed" and row["result"] is None
    assert row["finish_reason"] == "error"


def test_stop_one_cell_one_row_and_all(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    p.hold()
    g = nbstream.Grid(
        ["a", "b", "c"], model=model, tokenizer=tokenizer, settings=[{}, {}], max_new_tokens=3
    )
    g.generate()
    assert p.held.wait(30)
    assert g.cell(0, 1).stop()
    assert g.stop(row=1) == 2
    assert g.stop(row=1) == 0  # already stopped: nothing more to stop
    p.release()
    g.wait(timeout=60)
    assert g.statuses == [
        ["complete", "cancelled"],
        ["cancelled", "cancelled"],
        ["complete", "complete"],
    ]
    assert g.results[1] == [None, None] and g.results[0][1] is None
    # generate() again starts only the chosen cells, and stop() with no row stops all.
    p.hold()
    again = g.generate(row=1)
    assert len(again) == 2 and g.cell(1, 0) is again[0]
    assert p.held.wait(30)
    assert g.stop(reason="enough") == 2
    p.release()
    g.wait(timeout=60)
    assert g.statuses[1] == ["cancelled", "cancelled"]
    assert g.cell(1, 0).cancel_reason == "enough"
    assert g.statuses[2] == ["complete", "complete"]


def test_stop_a_column(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    p.hold()
    g = nbstream.Grid(["a", "b"], model=model, tokenizer=tokenizer, settings=[{}, {}])
    g.generate()
    assert p.held.wait(30)
    assert g.stop(col=1) == 2
    p.release()
    g.stop(col=0)
    g.wait(timeout=60)
    assert [row[1] for row in g.statuses] == ["cancelled", "cancelled"]
    assert all(r is None for row in g.results for r in row[1:])


def test_a_prompt_a_model_refuses_fails_its_cell_only(tiny):
    model, tokenizer = tiny
    # A message list with no user text is refused when its run is prepared.
    prompts = ["fine", [{"role": "assistant", "content": "x"}]]
    g = nbstream.Grid(prompts, model=model, tokenizer=tokenizer, max_new_tokens=2)
    g.generate()
    g.wait(timeout=60)
    assert g.statuses == [["complete"], ["failed"]]
    error = g.cell(1, 0).error
    assert isinstance(error, CellRefused) and "no user text" in str(error)


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"prompts": "one prompt"}, TypeError),
        ({"prompts": []}, ValueError),
        ({"prompts": [3]}, TypeError),
        ({"prompts": ["a"], "settings": [{"temperature": -1}]}, ValueError),
        ({"prompts": ["a"], "settings": [{}] * 9}, ValueError),
        ({"prompts": ["a"], "settings": {"temperature": 0}}, TypeError),
        ({"prompts": ["a"], "settings": ["hot"]}, TypeError),
        ({"prompts": ["a"], "models": [3]}, TypeError),
        ({"prompts": ["a"], "models": [None], "settings": [{}, {}]}, ValueError),
        ({"prompts": ["a"], "max_new_tokens": "many"}, TypeError),
    ],
)
def test_bad_arguments_are_refused_before_anything_loads(kwargs, error, monkeypatch):
    def no_loading(*_args, **_kwargs):
        raise AssertionError("a model was loaded before the arguments were checked")

    monkeypatch.setattr("nbstream.models.model_and_tokenizer", no_loading)
    prompts = kwargs.pop("prompts")
    with pytest.raises(error):
        nbstream.Grid(prompts, **kwargs)


def test_a_templates_fields_reach_the_table(tiny_line):
    model, tokenizer = tiny_line
    prompts = nbstream.template(
        "Say {text} ({n})", [{"text": "hi", "n": 1}, {"text": "yo", "n": 2}]
    )
    g = nbstream.Grid(prompts, model=model, tokenizer=tokenizer, max_new_tokens=2)
    assert g.fields == prompts.fields and g.template == "Say {text} ({n})"
    g.generate()
    g.wait(timeout=60)
    table = g.table()
    assert [(row["prompt"], row["field_text"], row["n"]) for row in table] == [
        ("Say hi (1)", "hi", 1),
        ("Say yo (2)", "yo", 2),
    ]
    row = table[0]
    assert row["status"] == "complete" and row["text"] == row["result"]
    assert row["tokens"] == 2 and row["finish_reason"] == "length"
    assert row["elapsed_s"] >= 0 and row["record"]["status"] == "complete"
    assert row["differs_at"] is None and row["column"] == "defaults"


def test_partial_text_is_in_the_table_marked_by_its_status(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    g = nbstream.Grid(["a"], model=model, tokenizer=tokenizer, max_new_tokens=50)
    p.on_call = lambda calls: calls == 4 and g.stop()
    g.generate()
    g.wait(timeout=60)
    row = g.table()[0]
    assert row["status"] == "cancelled" and row["result"] is None
    assert row["text"] == g.cell(0, 0).partial_text and row["text"]


def test_to_pandas_says_how_to_install_pandas(tiny_line):
    model, tokenizer = tiny_line
    g = nbstream.Grid(["a"], model=model, tokenizer=tokenizer)
    try:
        import pandas
    except ImportError:
        with pytest.raises(ImportError, match="pip install pandas"):
            g.to_pandas()
        return
    frame = g.to_pandas()
    assert isinstance(frame, pandas.DataFrame)
    assert list(frame["status"]) == ["idle"]


def test_out_of_range_cells_are_refused(tiny_line):
    model, tokenizer = tiny_line
    g = nbstream.Grid(["a"], model=model, tokenizer=tokenizer)
    with pytest.raises(IndexError, match="row 1"):
        g.cell(1, 0)
    with pytest.raises(IndexError, match="col 2"):
        g.stop(col=2)


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(rows=st.integers(1, 4), cols=st.integers(1, 3), stop_row=st.integers(0, 3))
def test_shapes_of_statuses_results_and_table(tiny_line, rows, cols, stop_row):
    model, tokenizer = tiny_line
    prompts = [f"p{i}" for i in range(rows)]
    columns = [{"seed": j, "do_sample": True} for j in range(cols)]
    g = nbstream.Grid(prompts, model=model, tokenizer=tokenizer, settings=columns, max_new_tokens=2)
    g.generate()
    if stop_row < rows:
        g.stop(row=stop_row)
    g.wait(timeout=60)
    statuses, results = g.statuses, g.results
    assert len(statuses) == len(results) == rows
    assert all(len(r) == cols for r in statuses) and all(len(r) == cols for r in results)
    for i in range(rows):
        for j in range(cols):
            run = g.cell(i, j)
            assert statuses[i][j] == run.status in ("complete", "cancelled")
            assert (results[i][j] is None) == (statuses[i][j] != "complete")
    assert len(g.table()) == rows * cols
    assert len({id(g.cell(i, j)) for i in range(rows) for j in range(cols)}) == rows * cols


def test_shown_in_a_notebook_the_grid_is_a_table_with_its_text_escaped(no_leftover_runs):
    g = nbstream.Grid(
        ["<b>a</b>", [{"role": "user", "content": "b"}]],
        models=[forced_model(" <i>x</i>"), forced_model(" y")],
    )
    shown = g._repr_html_()
    assert shown.count('data-status="idle"') == 4
    g.generate()
    g.wait(timeout=60)
    shown = g._repr_html_()
    assert shown.count('data-status="complete"') == 4
    assert "&lt;b&gt;a&lt;/b&gt;" in shown and "&lt;i&gt;x&lt;/i&gt;" in shown
    assert "<i>" not in shown and shown.count("<tr>") == 3
