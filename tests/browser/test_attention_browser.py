""" "Where it looked" in a real JupyterLab driven by Chromium: a clicked token's attention view
draws the kernel's own ``run.attention(step)`` as sent (the picked head's weights in the table
and the shading), the picker and a sharpest head's button change it, axe-core finds nothing
wrong with it open, and Escape gives the token back its focus. On the tiny model (the numbers
are compared with the kernel's, whatever they are); the kernel side alone is
tests/test_attention_view.py, the page alone tests/frontend/test_attention_frontend.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from axe_audit import assert_accessible
from browser_helpers import SETUP, kval, view, wait_status, wait_until
from jupyter_harness import Jupyter
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

WIDGET = (
    "from nbstream.widgets.attention_view import attention_data\n"
    "w = nbstream.StreamWidget(*tiny_model(one_line=True), max_new_tokens=6,\n"
    "                          show_alternatives=True)\n"
    "w.generate('Hi')\n"
    "w"
)
STEP = 3


@pytest.fixture(scope="module")
def nb(lab_server, browser) -> Iterator:
    harness = Jupyter(lab_server, browser)
    try:
        notebook = harness.open_notebook([SETUP, WIDGET], name="attention.ipynb")
        notebook.run_cell(0)
        notebook.run_cell(1)
        yield notebook
    finally:
        harness.close()


def test_a_clicked_token_shows_where_it_looked(nb):
    v = view(nb, 1)
    wait_status(v, "complete")
    ids = kval(nb, "w.run.token_ids")
    spans = v.locator(".nbstream-tokens .nbstream-token")
    wait_until(lambda: spans.count() == len(ids), 30, what="the run's tokens shown")
    spans.nth(STEP).click()
    pop = v.get_by_role("dialog", name=f"Alternatives at step {STEP + 1}")
    pop.get_by_role("button", name="Inside the model").click()
    pop.get_by_role("button", name="Where it looked").click()
    section = v.locator(".nbstream-attn")
    expect(section).to_have_attribute("data-state", "ready", timeout=60_000)

    data = kval(nb, f"attention_data(w.run.attention({STEP}))", 60)
    layer, head = data["strongest"][0][:2]  # the view starts on the sharpest head
    expect(section).to_have_attribute("data-layer", str(layer))
    expect(section).to_have_attribute("data-head", str(head))
    section.get_by_text("Table of the weights").click()
    cells = section.locator(".nbstream-attn-table tbody tr td:nth-child(4)")
    expect(cells).to_have_count(data["positions"])
    shown = [f"{w / 100:.2f}%" for w in data["weights"][layer][head]]
    assert cells.all_inner_texts() == shown
    expect(section.locator(".nbstream-attn-token")).to_have_count(data["positions"])

    # Another layer and head: the table follows, with the kernel's numbers.
    layers = data["layers"]
    section.get_by_label("Layer", exact=True).select_option(label=f"1 of {layers}")
    section.get_by_label("Head", exact=True).select_option(label="2")
    shown = [f"{w / 100:.2f}%" for w in data["weights"][0][1]]
    wait_until(lambda: cells.all_inner_texts() == shown, 10, what="layer 1 head 2's weights")
    heads = section.get_by_role("list", name="The sharpest heads").get_by_role("button")
    expect(heads).to_have_count(len(data["strongest"]))
    heads.nth(1).click()
    expect(section).to_have_attribute("data-layer", str(data["strongest"][1][0]))
    expect(section).to_have_attribute("data-head", str(data["strongest"][1][1]))

    assert_accessible(nb.page, "the open attention view", ".nbstream")

    section.get_by_label("Head", exact=True).focus()
    nb.page.keyboard.press("Escape")
    expect(pop).to_be_hidden()
    expect(spans.nth(STEP)).to_be_focused()
    assert kval(nb, "(w.status, w.run.token_ids)") == ("complete", ids)  # no run started
    assert nb.console_errors() == []
