"""An HTML export (`jupyter nbconvert --to html`) shows each answer once.

The notebook is made here, with no kernel: a widget's run on a forced model, the two outputs
a kernel saves for it (the view, then its text copy) and the widget state a notebook stores.
Its export is served on 127.0.0.1 and opened in Chromium. With the widget manager (local
copies of its CDN scripts: tests/cdn_pages.py) the view draws and the text copy hides; with
no network the text copy is what the reader sees.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ipywidgets
import nbformat
import pytest
from cdn_pages import cdn_copies, serve_cdn_copies
from ipywidgets.embed import dependency_state
from nbconvert import HTMLExporter
from playwright.sync_api import Browser, Page, Route, expect

import nbstream
import nbstream.widgets.display as display
from nbstream.testing import forced_model

ANSWER = "Red and blue are two colours."
WAIT_MS = 60_000
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def _saved_outputs(monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict[str, Any]], Any]:
    """The outputs a kernel saves for a widget that ran once, and the widget."""
    import IPython.display

    outputs: dict[str, dict[str, Any]] = {}
    order: list[str] = []

    def show(data: dict[str, Any], *, display_id: str | None = None, **_: Any) -> None:
        key = display_id or f"view-{len(order)}"
        if key not in outputs:
            order.append(key)
        outputs[key] = data  # an update replaces what its display id shows

    monkeypatch.setattr(display, "in_kernel", lambda: True)
    monkeypatch.setattr(IPython.display, "display", show)
    monkeypatch.setattr(IPython.display, "update_display", show)
    w = nbstream.StreamWidget(*forced_model(ANSWER), max_new_tokens=20)
    w._ipython_display_()
    w.generate("Name two colors.")
    assert w.wait() == ANSWER
    w._feed.thread.join(5)  # the snapshot, set after the end, is in the state
    cells = [{"output_type": "display_data", "data": outputs[key], "metadata": {}} for key in order]
    return cells, w


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An exported notebook of one widget cell (the widget closed once it is saved)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        outputs, w = _saved_outputs(monkeypatch)
    # The widget and those its state refers to (its layout, its style), as JupyterLab saves a
    # notebook of this one cell; not every widget other tests left open in this process.
    state = {
        **ipywidgets.Widget.get_manager_state(widgets=[]),
        "state": dependency_state([w], drop_defaults=False),
    }
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("w")
    cell.outputs = [nbformat.from_dict(output) for output in outputs]
    nb.cells = [cell]
    nb.metadata["widgets"] = {WIDGET_STATE: state}
    w.close()
    html, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    folder = tmp_path_factory.mktemp("export")
    (folder / "index.html").write_text(html, encoding="utf-8")
    yield folder


def _open(browser: Browser, url: str, online: bool) -> tuple[Page, Any]:
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    page = context.new_page()
    if online:
        serve_cdn_copies(page, cdn_copies(), lambda u: u.startswith(url))
    else:

        def offline(route: Route) -> None:
            if route.request.url.startswith(url):
                route.continue_()
            else:
                route.abort()

        page.route("**/*", offline)
    page.goto(f"{url}/index.html")
    return page, context


def test_an_export_with_its_widget_manager_shows_the_answer_once(
    fe_browser: Browser, export: Path, serve_folder: Any
) -> None:
    with serve_folder(export) as url:
        page, context = _open(fe_browser, url, online=True)
        try:
            view = page.locator(".nbstream")
            expect(view).to_have_attribute("data-status", "complete", timeout=WAIT_MS)
            expect(view.locator(".nbstream-output")).to_have_text(ANSWER)
            copy = page.locator(f".{display.TEXT_COPY}")
            expect(copy).to_have_count(1)
            expect(copy).to_be_hidden()
            # The answer is on the page once, where the reader sees it: in the view.
            assert page.locator("body").inner_text().count(ANSWER) == 1
        finally:
            context.close()


def test_an_export_with_no_network_shows_the_text_copy(
    fe_browser: Browser, export: Path, serve_folder: Any
) -> None:
    with serve_folder(export) as url:
        page, context = _open(fe_browser, url, online=False)
        try:
            copy = page.locator(f".{display.TEXT_COPY}")
            expect(copy).to_be_visible(timeout=WAIT_MS)
            expect(copy).to_contain_text("nbstream · complete")
            expect(copy).to_contain_text(ANSWER)
            expect(page.locator(".nbstream")).to_have_count(0)
        finally:
            context.close()
