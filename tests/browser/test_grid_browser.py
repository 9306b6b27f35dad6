"""The prompt grid in a real JupyterLab: its table streams every cell through JupyterLab's
widget manager, a cell's Stop stops that cell's run in the kernel, and the table ends
showing what the kernel holds (the static harness's fake kernel cannot show these).
"""

from __future__ import annotations

from browser_helpers import MS, SETUP, STREAM_TIMEOUT, kval
from playwright.sync_api import expect

GRID = """\
import time
model, tokenizer = tiny_model(one_line=True)
# A slowed model (a fake: a real one is as slow on a busy machine), so that the long
# column is still streaming when its Stop is clicked.
slow = model.register_forward_hook(lambda *a: time.sleep(0.02))
g = nbstream.Grid(
    ["Hi", "Bye"], model=model, tokenizer=tokenizer,
    settings=[{"max_new_tokens": 6}, {"max_new_tokens": 3000}],
)
g"""


def test_a_grid_streams_in_jupyterlab_and_a_cells_stop_stops_its_run(lab):
    nb = lab.open_notebook([SETUP, GRID, "runs = g.generate()"])
    nb.run_cell(0)
    nb.run_cell(1)
    table = nb.cell(1).locator(".nbstream-grid")
    expect(table).to_be_visible(timeout=60 * MS)
    nb.run_cell(2)  # generate() from a later cell: the table streams from the feed's thread
    cells = table.locator(".nbstream-grid-cell")
    expect(cells).to_have_count(4)

    def cell(row: int, col: int):
        return table.locator(".nbstream-grid-row").nth(row).locator(".nbstream-grid-cell").nth(col)

    # Row 0's long cell streams; row 1's waits its turn on the same model.
    long = cell(0, 1)
    expect(long).to_have_attribute("data-status", "running", timeout=STREAM_TIMEOUT * MS)
    expect(long.locator(".nbstream-grid-text")).not_to_have_text("", timeout=30 * MS)
    long.locator(".nbstream-grid-stop").click()
    expect(long).to_have_attribute("data-status", "cancelled", timeout=30 * MS)
    assert kval(nb, "g.cell(0, 1).status") == "cancelled"
    assert kval(nb, "g.cell(0, 1).metrics['finish_reason']") == "cancelled"
    # The second row's long cell, queued behind it, then runs; stop it from Python.
    expect(cell(1, 1)).to_have_attribute("data-status", "running", timeout=STREAM_TIMEOUT * MS)
    nb.kernel_eval("g.stop(row=1)")
    nb.kernel_eval("g.wait(timeout=60)", timeout=90)
    statuses = kval(nb, "g.statuses")
    assert statuses == [["complete", "cancelled"], ["complete", "cancelled"]]
    for row in range(2):
        for col in range(2):
            expect(cell(row, col)).to_have_attribute(
                "data-status", statuses[row][col], timeout=30 * MS
            )
            text = kval(nb, f"g.texts[{row}][{col}]")
            expect(cell(row, col).locator(".nbstream-grid-text")).to_have_text(
                text, timeout=30 * MS
            )
