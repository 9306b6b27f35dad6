"""Front-end tests of a prompt grid's table (nbstream/static/grid.js) against a fake kernel:
30 cells streaming and a Stop click acting on its cell alone, a row's and every cell's Stop,
cancelled said only once the kernel says the run stopped, the text drawn as plain text from
deltas (a gap asks for a sync), figures, divergence marks, Open, a saved notebook's texts, and
a cleanup that leaves nothing running. The fake kernel is tests/frontend/grid_kernel.js, on
the harness page (harness.html) of the `fe_page` fixture; the kernel side is
tests/test_grid_widget.py.
"""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page, expect

COLUMNS = ["temperature=0", "top_k=5", "seed=1"]
ROWS = [f"Translate to French: phrase {i}" for i in range(10)]


def mount(page: Page, **state: Any) -> None:
    """The table on a fake model (`window.grid`), and the fake kernel module (`window.gk`)."""
    page.evaluate(
        """async ([state]) => {
            window.gk = await import("/tests/frontend/grid_kernel.js");
            await window.gk.mountGrid(state);
        }""",
        [{"rows": ROWS, "columns": COLUMNS, **state}],
    )


def start(page: Page, **opts: Any) -> None:
    """A fake kernel on the table, every cell streaming (`window.kernel`)."""
    page.evaluate(
        "([o]) => { window.kernel = new window.gk.FakeGridKernel(window.grid.model, o); "
        "window.kernel.start(); }",
        [opts],
    )


def change(page: Page, **values: Any) -> None:
    page.evaluate("([v]) => window.grid.model.changeMany(v)", [values])


def emit(page: Page, msg: dict[str, Any]) -> None:
    page.evaluate("([m]) => window.grid.model.msg(m)", [msg])


def sent(page: Page) -> list[dict[str, Any]]:
    return page.evaluate("window.grid.model.sent")


def cell(page: Page, row: int, col: int):
    return page.locator(".nbstream-grid-row").nth(row).locator(".nbstream-grid-cell").nth(col)


def cell_text(page: Page, row: int, col: int) -> str:
    return cell(page, row, col).locator(".nbstream-grid-text").inner_text()


def piece(row: int, col: int, offset: int, text: str, tokens: int = 1) -> dict[str, Any]:
    """One cell's part of a ``grid_delta`` (run 1, its live counters)."""
    return {"row": row, "col": col, "run_id": 1, "offset": offset, "text": text,
            "tokens": tokens, "elapsed_s": 0.1 * tokens}  # fmt: skip


def entry(status: str, run_id: int = 1, **figures: Any) -> dict[str, Any]:
    return {
        "status": status,
        "run_id": run_id,
        "tokens": figures.get("tokens"),
        "elapsed_s": figures.get("elapsed_s"),
        "finish_reason": figures.get("finish_reason"),
        "error": figures.get("error"),
    }


def test_thirty_cells_stream_and_a_stop_click_stops_its_cell_alone(fe_page: Page) -> None:
    page = fe_page
    mount(page)
    start(page, stepMs=60)
    texts = "[...document.querySelectorAll('.nbstream-grid-text')]"
    page.wait_for_function(f"{texts}.every(t => t.textContent.length > 40)")
    assert page.locator(".nbstream-grid-cell").count() == 30
    target = cell(page, 4, 1)
    expect(target).to_have_attribute("data-status", "running")
    page.get_by_role("button", name="Stop row 5, top_k=5", exact=True).click()
    assert [m for m in sent(page) if m["type"] == "stop"] == [{"type": "stop", "row": 4, "col": 1}]
    expect(target).to_have_attribute("data-status", "cancelled")
    expect(target.locator(".nbstream-badge")).to_contain_text("cancelled")
    expect(target.locator(".nbstream-grid-figures")).to_contain_text("stopped")
    stopped_at = cell_text(page, 4, 1)
    others = cell_text(page, 4, 2)
    page.wait_for_timeout(400)  # eight more frames of the other 29 cells
    assert cell_text(page, 4, 1) == stopped_at  # no more text arrives for it
    assert stopped_at == page.evaluate("window.kernel.texts[4][1]")
    assert len(cell_text(page, 4, 2)) > len(others)  # the others stream on
    assert page.locator(".nbstream-grid-cell[data-status=running]").count() == 29
    expect(target.locator(".nbstream-grid-stop")).to_be_disabled()
    page.evaluate("window.kernel.close()")


def test_stop_row_and_stop_all(fe_page: Page) -> None:
    page = fe_page
    mount(page)
    start(page)
    page.get_by_role("button", name="Stop row 3", exact=True).click()
    for col in range(3):
        expect(cell(page, 2, col)).to_have_attribute("data-status", "cancelled")
    expect(page.get_by_role("button", name="Stop row 3", exact=True)).to_be_disabled()
    expect(cell(page, 3, 0)).to_have_attribute("data-status", "running")
    page.get_by_role("button", name="Stop all", exact=True).click()
    expect(page.locator(".nbstream-grid-cell[data-status=cancelled]")).to_have_count(30)
    expect(page.get_by_role("button", name="Stop all", exact=True)).to_be_disabled()
    stops = [m for m in sent(page) if m["type"] == "stop"]
    assert stops == [
        {"type": "stop", "row": 2, "col": None},
        {"type": "stop", "row": None, "col": None},
    ]
    page.evaluate("window.kernel.close()")


def test_a_stop_the_kernel_has_not_acted_on_never_says_cancelled(fe_page: Page) -> None:
    page = fe_page
    mount(page)
    start(page, confirm=False)
    target = cell(page, 0, 0)
    stop = page.get_by_role("button", name=f"Stop row 1, {COLUMNS[0]}", exact=True)
    stop.focus()
    page.keyboard.press("Enter")  # keyboard reachable
    expect(target.locator(".nbstream-grid-figures")).to_contain_text("stopping\u2026")
    page.wait_for_timeout(300)
    expect(target).to_have_attribute("data-status", "running")
    expect(target.locator(".nbstream-badge")).not_to_contain_text("cancelled")
    expect(stop).to_be_disabled()
    # The focus moved to the cell's Open rather than dropping to the page.
    assert page.evaluate("document.activeElement.classList.contains('nbstream-grid-open')")
    page.evaluate("window.kernel.close()")


def test_model_text_is_drawn_as_text_never_markup(fe_page: Page) -> None:
    page = fe_page
    mount(page, rows=["<b>p</b>"], columns=["<i>c</i>"], cells=[[entry("running")]])
    evil = '<img src=x onerror="window.pwned=1"> **bold** <script>window.pwned=2</script>'
    emit(page, {"type": "grid_delta", "cells": [piece(0, 0, 0, evil)]})
    expect(cell(page, 0, 0).locator(".nbstream-grid-text")).to_have_text(evil)
    markup = ", ".join(f".grid-host {tag}" for tag in ("img", "script", "b", "i"))
    assert page.locator(markup).count() == 0
    expect(page.locator(".nbstream-grid-prompt-text")).to_have_text("<b>p</b>")
    assert page.evaluate("window.pwned") is None


def test_deltas_continue_from_their_offsets_and_a_gap_asks_for_a_sync(fe_page: Page) -> None:
    page = fe_page
    mount(page, rows=["a"], columns=["x", "y"], cells=[[entry("running"), entry("running")]])
    syncs = [m for m in sent(page) if m["type"] == "sync"]
    assert len(syncs) == 1 and syncs[0]["view"]  # a view asks for the text so far once made
    view = syncs[0]["view"]
    emit(page, {"type": "grid_reset", "view": view, "cells": [
        {"row": 0, "col": 0, "run_id": 1, "text": "Bon"},
        {"row": 0, "col": 1, "run_id": 1, "text": ""},
    ]})  # fmt: skip
    emit(
        page, {"type": "grid_delta", "cells": [piece(0, 0, 3, "jour", 2), piece(0, 1, 0, "Salut")]}
    )
    expect(cell(page, 0, 0).locator(".nbstream-grid-text")).to_have_text("Bonjour")
    expect(cell(page, 0, 1).locator(".nbstream-grid-text")).to_have_text("Salut")
    figures = cell(page, 0, 0).locator(".nbstream-grid-figures")
    expect(figures).to_have_text("2 tokens \u00b7 0.20 s")
    # A delta past what the view holds is a gap: ignored, and the view asks again.
    emit(page, {"type": "grid_delta", "cells": [piece(0, 1, 9, "!!", 3)]})
    expect(cell(page, 0, 1).locator(".nbstream-grid-text")).to_have_text("Salut")
    assert len([m for m in sent(page) if m["type"] == "sync"]) == 2
    # A new run of a cell (its run_id) starts its text anew.
    change(page, cells=[[entry("running"), entry("queued", run_id=2)]])
    expect(cell(page, 0, 1).locator(".nbstream-grid-text")).to_have_text("")
    expect(cell(page, 0, 1)).to_have_attribute("data-status", "queued")


def test_figures_errors_and_where_a_rows_answers_part(fe_page: Page) -> None:
    page = fe_page
    mount(page, rows=["a"], columns=["x", "y"], cells=[[entry("running"), entry("running")]])
    emit(
        page,
        {"type": "grid_delta", "cells": [piece(0, 0, 0, "Le chat"), piece(0, 1, 0, "Le chien")]},
    )
    words = ["Answers part at character 6: this column has 'at'", "the other"]
    change(
        page,
        cells=[[
            entry("complete", tokens=12, elapsed_s=0.84, finish_reason="eos"),
            entry("failed", tokens=1, elapsed_s=0.1, finish_reason="error",
                  error="RuntimeError: the model crashed"),
        ]],
        marks=[{"char": 5, "words": words}],
    )  # fmt: skip
    first = cell(page, 0, 0)
    expect(first.locator(".nbstream-grid-figures")).to_have_text(
        "12 tokens \u00b7 0.84 s \u00b7 ended by the model"
    )
    expect(first.locator(".nbstream-grid-differs")).to_have_text("at")
    expect(first.locator(".nbstream-grid-mark")).to_have_text(words[0])
    expect(first).to_have_attribute("data-differs", "")
    failed = cell(page, 0, 1)
    expect(failed.locator(".nbstream-badge")).to_contain_text("failed")
    expect(failed.locator(".nbstream-grid-error")).to_have_text("RuntimeError: the model crashed")
    expect(failed.locator(".nbstream-grid-differs")).to_have_text("ien")
    change(page, cells=[[entry("complete", finish_reason="length", tokens=40, elapsed_s=2)] * 2])
    expect(first.locator(".nbstream-grid-figures")).to_contain_text("cut at max_new_tokens")


def test_open_shows_a_cell_in_full_and_closes_it_again(fe_page: Page) -> None:
    page = fe_page
    mount(page, rows=["a", "b"], columns=["x"], cells=[[entry("complete")], [entry("idle", 0)]])
    never_ran = page.get_by_role("button", name="Open row 2, x in full, with its tokens")
    expect(never_ran).to_be_disabled()
    opener = page.get_by_role("button", name="Open row 1, x in full, with its tokens")
    expect(opener).to_have_attribute("aria-pressed", "false")
    opener.click()
    assert sent(page)[-1] == {"type": "open", "row": 0, "col": 0}
    change(page, opened=[0, 0])  # the kernel put the cell's view below the table
    expect(opener).to_have_attribute("aria-pressed", "true")
    expect(cell(page, 0, 0)).to_have_attribute("data-opened", "")
    opener.click()
    assert sent(page)[-1] == {"type": "open", "row": None, "col": None}
    page.get_by_role("button", name="Run all").click()
    assert sent(page)[-1] == {"type": "run", "row": None, "col": None}


def test_a_saved_notebook_shows_every_cells_text_without_a_kernel(fe_page: Page) -> None:
    page = fe_page
    cells = [[entry("complete", tokens=2, elapsed_s=0.1, finish_reason="eos"), entry("cancelled")]]
    mount(page, rows=["a"], columns=["x", "y"], cells=cells, texts=[["Bonjour", "Sal"]])
    expect(cell(page, 0, 0).locator(".nbstream-grid-text")).to_have_text("Bonjour")
    expect(cell(page, 0, 1).locator(".nbstream-grid-text")).to_have_text("Sal")
    expect(cell(page, 0, 1)).to_have_attribute("data-status", "cancelled")
    expect(page.locator(".nbstream-grid-summary")).to_have_text("")


def test_cleanup_leaves_nothing_listening_or_drawing(fe_page: Page) -> None:
    page = fe_page
    mount(page)
    start(page)
    assert page.evaluate("window.grid.model.listenerCount()") > 0
    page.evaluate("window.grid.cleanup()")
    assert page.evaluate("window.grid.model.listenerCount()") == 0
    before = cell_text(page, 0, 0)
    page.wait_for_timeout(200)
    assert cell_text(page, 0, 0) == before
    page.evaluate("window.kernel.close()")
