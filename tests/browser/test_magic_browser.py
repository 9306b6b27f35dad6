"""``%%nbstream`` in a real JupyterLab: the live view renders, its saved fallback stays out of
sight, and a notebook saved after the run ended carries the final answer for GitHub,
nbviewer and nbconvert (rewritten from the kernel's view thread after the cell finished)."""

from __future__ import annotations

import ast
import json
import time

import pytest

pytestmark = pytest.mark.browser

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
SETUP = """\
import torch
torch.set_num_threads(1)
from nbstream.testing import tiny_model
model, tokenizer = tiny_model(one_line=True)
model.save_pretrained("tiny-line")
tokenizer.save_pretrained("tiny-line")
%load_ext nbstream
"""


def saved_fallback(path, cell: int) -> dict:
    nb = json.loads(path.read_text())
    outputs = nb["cells"][cell]["outputs"]
    (data,) = [
        o["data"] for o in outputs if o.get("data", {}).get(WIDGET_VIEW, {}).get("model_id") == ""
    ]
    # nbformat stores multi-line strings as lists of lines
    return {k: "".join(v) if isinstance(v, list) else v for k, v in data.items()}


def test_magic_view_renders_and_the_saved_notebook_holds_the_answer(lab):
    nb = lab.open_notebook(
        [SETUP, "%%nbstream --model tiny-line --max-new-tokens 60 -o answer\nHello there"],
        name="Magic.ipynb",
    )
    nb.run_cell(0)
    nb.run_cell(1)  # returns at once; the answer streams after the cell has finished
    views = nb.cell(1).locator(".nbstream")
    view = views.first
    view.wait_for(timeout=60_000)
    deadline = time.monotonic() + 120
    while view.get_attribute("data-status") != "complete":
        assert time.monotonic() < deadline, view.get_attribute("data-status")
        time.sleep(0.1)
    result = ast.literal_eval(nb.kernel_eval("answer.result"))
    assert result and ast.literal_eval(nb.kernel_eval("answer.status")) == "complete"
    # One live view, and the fallback output next to it shows nothing in the page.
    assert views.count() == 1
    assert "nbstream ·" not in nb.output(1)

    # The end-of-run update reaches the saved file (it comes just after the end state).
    path = lab.root_dir / "Magic.ipynb"
    deadline = time.monotonic() + 30
    while True:
        nb.save()
        data = saved_fallback(path, 1)
        if data["text/plain"].startswith("nbstream · complete"):
            break
        assert time.monotonic() < deadline, data["text/plain"]
        time.sleep(0.2)
    assert data["text/plain"].endswith(result)
    # The Markdown copy sits in a block a page that drew the view hides (display.TEXT_COPY).
    assert data["text/markdown"].endswith(f"{result}\n\n</div>")
