"""The lessons in notebooks/: their saved outputs, and each one run again on today's code.

The notebooks are committed with their outputs (``make notebooks``), so that GitHub and
nbviewer show each answer without a kernel. The fast tests read those saved outputs: each
cell that shows a widget has a saved text fallback in the end state the lesson intends
(declared in the cell's metadata, ``{"nbstream": {"expect": "complete"}}``), and the
lesson's claims are in them. The model test executes each notebook headless on the embedded
default model and checks the same of the new outputs, so a lesson that no longer holds on
the current code fails even before its saved outputs are refreshed. A lesson that replays a
recording is executed once more where no model can load, so it holds on Binder without one.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nbformat
import pytest
from lessons import check_claims, check_widget_outputs, printed
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NAMES = [
    "quickstart.ipynb",
    "robustness.ipynb",
    "remote.ipynb",
    "chat.ipynb",
    "teaching-sampling.ipynb",
    "reasoning.ipynb",
    "recorded-lesson.ipynb",
    "compare-models.ipynb",
    "inside-the-model.ipynb",
    "prompt-grid.ipynb",
    "attention-and-steering.ipynb",
]
#: The lessons that replay a recording and load no model (they run where no model is).
WITHOUT_A_MODEL = ["recorded-lesson.ipynb"]
#: Lessons executed, and checked as below, by another test: the quickstart by the Binder
#: build's (tests/test_binder.py), which runs it in the environment Binder would make.
EXECUTED_ELSEWHERE = {"quickstart.ipynb"}


def test_every_notebook_is_a_listed_lesson() -> None:
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(NAMES)
    index = (NOTEBOOKS / "README.md").read_text()
    for name in NAMES:
        assert f"]({name})" in index, f"notebooks/README.md does not link {name}"


@pytest.mark.parametrize("name", NAMES)
def test_notebook_says_what_it_teaches_and_has_answered_exercises(name: str) -> None:
    cells = nbformat.read(NOTEBOOKS / name, as_version=4).cells
    opening = cells[0]
    assert opening.cell_type == "markdown"
    for part in ("**What you will learn**", "**Time:**", "**Before this:**"):
        assert part in opening.source, f"{name} does not open with {part}"
    answers = [
        cell
        for cell in cells
        if cell.cell_type == "markdown"
        and cell.source.startswith("<details><summary>Answer</summary>")
    ]
    assert len(answers) >= 2, f"{name} has {len(answers)} exercises with an answer"


@pytest.mark.parametrize("name", NAMES)
def test_saved_outputs_show_each_lesson(name: str) -> None:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert all(c.execution_count for c in nb.cells if c.cell_type == "code"), (
        f"{name} is saved unexecuted: run `make notebooks` and commit the result"
    )
    check_widget_outputs(name, nb)
    check_claims(name, printed(nb))


@pytest.mark.model
@pytest.mark.parametrize("name", [n for n in NAMES if n not in EXECUTED_ELSEWHERE])
def test_notebook_runs_top_to_bottom(name: str, tmp_path: Path) -> None:
    """Each lesson top to bottom on the default model: a minute or more for some (they
    generate hundreds of tokens, and teaching-sampling runs four columns twice), which is
    what the lesson shows a reader."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    shutil.copytree(NOTEBOOKS / "recordings", tmp_path / "recordings")
    resources = {"metadata": {"path": str(tmp_path)}}
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources=resources, store_widget_state=True
    )
    client.execute()  # raises CellExecutionError on any error
    check_widget_outputs(name, nb)
    check_claims(name, printed(nb))


@pytest.mark.parametrize("name", WITHOUT_A_MODEL)
def test_lesson_runs_where_no_model_can_load(name: str, tmp_path: Path) -> None:
    """Executed in a kernel where neither the default model nor a hub id can load (its cache
    a path under a file, the hub offline with an empty cache), the lesson still holds."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    shutil.copytree(NOTEBOOKS / "recordings", tmp_path / "recordings")
    (tmp_path / "a-file").write_text("")
    env = {
        **os.environ,
        "NBSTREAM_CACHE": str(tmp_path / "a-file" / "cache"),
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_OFFLINE": "1",
    }
    # The hiding works: loading the default model fails in this kernel.
    probe = (
        "try:\n    nbstream.load_model()\nexcept Exception as error:\n"
        "    print('no model here:', type(error).__name__)"
    )
    nb.cells.append(nbformat.v4.new_code_cell(probe))
    resources = {"metadata": {"path": str(tmp_path)}}
    client = NotebookClient(
        nb, timeout=300, kernel_name="python3", resources=resources, store_widget_state=True
    )
    client.execute(env=env)
    check_widget_outputs(name, nb)
    check_claims(name, printed(nb))
    probed = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    assert probed.startswith("no model here: "), probed
