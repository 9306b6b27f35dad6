"""The popover's "Inside the model" in a real JupyterLab driven by Chromium: a clicked token's
section draws the chart of the kernel's own ``run.lens(step)`` and shades the earlier tokens
(in the answer and in the Prompt view) by ``run.attribution(step)``; axe-core finds nothing
wrong with it open; Escape gives the token back its focus. On the tiny model (the numbers
are compared with the kernel's, whatever they are); the kernel side alone is
tests/test_lens_view.py, the page alone tests/frontend/test_lens_frontend.py.
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
        notebook = harness.open_notebook([SETUP, WIDGET], name="lens.ipynb")
        notebook.run_cell(0)
        notebook.run_cell(1)
        yield notebook
    finally:
        harness.close()


def test_a_clicked_token_shows_the_layers_and_the_tokens_that_pushed_it(nb):
    v = view(nb, 1)
    wait_status(v, "complete")
    ids = kval(nb, "w.run.token_ids")
    spans = v.locator(".nbstream-tokens .nbstream-token")
    wait_until(lambda: spans.count() == len(ids), 30, what="the run's tokens shown")
    v.get_by_role("button", name="Prompt view").click()  # its tokens get shaded too

    spans.nth(STEP).click()
    pop = v.get_by_role("dialog", name=f"Alternatives at step {STEP + 1}")
    expect(pop).to_be_visible()
    pop.get_by_role("button", name="Inside the model").click()
    section = v.get_by_role("region", name=f"Inside the model at step {STEP + 1}")
    expect(section).to_have_attribute("data-state", "ready", timeout=60_000)

    lens = kval(nb, f"w.run.lens({STEP}).to_dict()", 60)
    attribution = kval(nb, f"w.run.attribution({STEP}).to_dict()", 60)
    points = (section.locator("polyline").get_attribute("points") or "").split()
    assert len(points) == lens["layers"] == len(lens["probs"])
    rows = section.locator(".nbstream-lens-table tbody tr")
    expect(rows).to_have_count(lens["layers"])
    expect(section.locator(".nbstream-lens-dot-changed")).to_have_count(len(lens["changed"]))

    # The answer's tokens before the step, shaded by their share (as the kernel computed).
    first = attribution["prompt_tokens"]
    shares = spans.evaluate_all("(s) => s.map((e) => e.dataset.attrShare ?? null)")
    assert [None if s is None else float(s) for s in shares[:STEP]] == [
        round(x, 4) for x in attribution["shares"][first : first + STEP]
    ]
    expect(spans.nth(STEP)).to_have_attribute("data-attr-target", "true")
    assert v.locator("[data-attr-place]").count() > 0  # the strongest, numbered
    strip = v.locator(".nbstream-prompt-view .nbstream-lens-prompt-token")
    expect(strip).to_have_count(first)
    expect(strip.first).to_be_visible()

    assert_accessible(nb.page, "the open Inside the model section and its shading", ".nbstream")

    # Escape: the popover closes, the token has the focus, the shading stays until collapsed.
    section.get_by_role("button", name="Inside the model").focus()
    nb.page.keyboard.press("Escape")
    expect(pop).to_be_hidden()
    expect(spans.nth(STEP)).to_be_focused()
    assert kval(nb, "(w.status, w.run.token_ids)") == ("complete", ids)  # no run started
    assert nb.console_errors() == []
