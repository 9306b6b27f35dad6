"""A run shown as a cell's value (a cell ending in `w.generate(...)`, `chat.generate(...)` or
`nbstream.stream(...)`) never disagrees with the kernel, in JupyterLab and Notebook 7, live
and in the saved notebook.

A run a shown widget streams shows nothing more under its cell (the widget is its view);
a run of its own shows a view that follows it to its end. The run is held at its fifth step
(SETUP's Gate) while the cell shows it, so what is tested is the run's end reaching a view
first shown while it ran, on any machine.
"""

from __future__ import annotations

import json

import pytest
from browser_helpers import (
    MS,
    RENDER_TIMEOUT_MS,
    SETUP,
    STREAM_TIMEOUT,
    kval,
    view,
    voila_serving,
    wait_status,
    wait_until,
)
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


@pytest.fixture(params=["lab", "notebook7"])
def jupyter(request):
    """JupyterLab, then Notebook 7 (the `lab` and `notebook7` fixtures)."""
    return request.getfixturevalue(request.param)


HELD = "model, tokenizer = tiny_model(one_line=True)\ngate = Gate(model, 5)"


def _saved_outputs(jupyter, nb, cell: int) -> list[dict]:
    nb.save()
    saved = json.loads((jupyter.root_dir / "NB.ipynb").read_text())
    return saved["cells"][cell]["outputs"]


def _release(nb, run: str) -> None:
    wait_until(lambda: kval(nb, "gate.reached.is_set()"), STREAM_TIMEOUT, what="the held step")
    assert kval(nb, f"{run}.done") is False  # held: it was running while the cell showed it
    nb.kernel_eval("gate.opened.set()")
    wait_until(lambda: kval(nb, f"{run}.done"), STREAM_TIMEOUT, what="the run's end")


def test_a_run_of_its_own_shows_a_view_that_follows_it_to_its_end(jupyter):
    nb = jupyter.open_notebook(
        [SETUP, HELD, "run = nbstream.stream(model, tokenizer, 'Hello', max_new_tokens=40)\nrun"]
    )
    for cell in range(3):
        nb.run_cell(cell)
    shown = nb.cell(2).locator(".nbstream-run-view")
    expect(shown).to_have_attribute("data-status", "running", timeout=STREAM_TIMEOUT * MS)
    _release(nb, "run")
    assert kval(nb, "run.status") == "complete"
    expect(shown).to_have_attribute("data-status", "complete", timeout=STREAM_TIMEOUT * MS)
    # The whole answer, as the kernel has it.
    text = kval(nb, "run.result")
    assert shown.locator(".nbstream-run-view-text").inner_text() == text
    # Saved: what nbconvert and GitHub read (text/plain, text/markdown) says complete too.
    saved = _saved_outputs(jupyter, nb, 2)
    plain = ["".join(o["data"]["text/plain"]) for o in saved if "text/plain" in o.get("data", {})]
    assert any(p.startswith("nbstream · complete") and text in p for p in plain), plain
    assert not any("running" in p for p in plain), plain
    assert nb.console_errors() == []


@pytest.mark.parametrize(
    ("make", "start"),
    [
        ("nbstream.StreamWidget(model, tokenizer, max_new_tokens=40)", "w.generate('Hello')"),
        ("nbstream.ChatWidget(model, tokenizer, max_new_tokens=40)", "w.generate('Hello')"),
    ],
    ids=["StreamWidget", "ChatWidget"],
)
def test_a_run_its_shown_widget_streams_shows_nothing_more_under_its_cell(jupyter, make, start):
    nb = jupyter.open_notebook([SETUP, HELD, f"w = {make}\nw", start])
    for cell in range(4):
        nb.run_cell(cell)
    _release(nb, "w.run")
    assert kval(nb, "w.status") == "complete"
    wait_status(view(nb, 2), "complete")
    # Nothing under the cell that started it could go on saying "running" or "queued" (a
    # warning the model's library prints may land there: a stream, not the run's display).
    assert not any("running" in text or "queued" in text for text in nb.outputs(3))
    saved = _saved_outputs(jupyter, nb, 3)
    assert [o for o in saved if o["output_type"] != "stream"] == []
    assert nb.console_errors() == []


VOILA_CELLS = [
    "import time\nimport torch\ntorch.set_num_threads(1)\nimport nbstream\n"
    "from nbstream.testing import tiny_model\n"
    "model, tokenizer = tiny_model(one_line=True)\n"
    # slowed, so that the last cell's run still streams while the page first shows it
    "slow = model.register_forward_hook(lambda *a: time.sleep(0.03))",
    "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=20)\nw",
    "w.generate('Hello')",
    "w.wait() and None",
    "run = nbstream.stream(model, tokenizer, 'Hello', max_new_tokens=300)\nrun",
]


def test_voila_shows_runs_that_follow_them_to_their_end(chromium, tmp_path):
    import nbformat

    notebook = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(code) for code in VOILA_CELLS],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}},
    )
    path = tmp_path / "runs.ipynb"
    nbformat.write(notebook, path)
    with voila_serving(path, tmp_path / "voila.log") as url:
        context = chromium.new_context()
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            page.goto(url, timeout=RENDER_TIMEOUT_MS)
            shown = page.locator(".nbstream-run-view")
            expect(shown).to_have_attribute("data-status", "complete", timeout=RENDER_TIMEOUT_MS)
            expect(page.locator(".nbstream").first).to_have_attribute("data-status", "complete")
            # Nothing else on the page says a run is running or queued.
            for output in page.locator(".jp-OutputArea-output").all_inner_texts():
                assert "running" not in output and "queued" not in output, output
            assert errors == []
        finally:
            context.close()
