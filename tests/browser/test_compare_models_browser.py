"""A blind round of CompareWidget in a real JupyterLab driven by Chromium: two columns on two
models; before Reveal no model name is anywhere in the page (outside the code cells) or in
the saved notebook; votes count and survive a re-render (the widget shown again); Reveal
maps the labels to the models as the records say.

The models are two tiny random models given names of their own in the kernel, built from
pieces so that the names are nowhere in the cells' code either.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from browser_helpers import MS, SETUP, STREAM_TIMEOUT, kval, wait_until
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
# The revealed round (not committed anywhere).
SCREENSHOT = REPO / "test-artifacts" / "compare-blind.png"

BLIND = """\
a, b = tiny_model(one_line=True, seed=0), tiny_model(one_line=True, seed=1)
a[0].name_or_path, b[0].name_or_path = "zq" + "alpha", "zq" + "bravo"
cw = nbstream.CompareWidget(models=[a, b], prompt="Hello", max_new_tokens=6, blind=True)
import random
cw._shuffler = random.Random(1)  # this seed swaps the two models: the test sees it
cw"""
AGAIN = "cw"
# What would give a model away: the names, the class, a chat template's marks.
SECRETS = ["zqalpha", "zqbravo", "LlamaForCausalLM", "parameters", "im_start"]

# The page's DOM outside the cells' code (the outputs, tooltips, attributes, the rest).
PAGE_WITHOUT_CODE = """() => {
  const copy = document.body.cloneNode(true);
  for (const el of copy.querySelectorAll('.jp-InputArea')) el.remove();
  return copy.outerHTML;
}"""


def found(text: str) -> list[str]:
    return [s for s in SECRETS if s.lower() in text.lower()]


def test_a_blind_round_hides_the_models_counts_votes_and_reveals(lab):
    nb = lab.open_notebook([SETUP, BLIND, AGAIN])
    nb.run_cell(0)
    nb.run_cell(1)
    head = nb.cell(1).locator(".nbstream-compare")
    roots = nb.cell(1).locator(".nbstream-column .nbstream")
    expect(roots).to_have_count(2)
    expect(head.get_by_role("checkbox", name="Blind", exact=True)).to_be_checked()
    head.get_by_role("button", name="Run all", exact=True).click()
    for i in range(2):
        expect(roots.nth(i)).to_have_attribute(
            "data-status", "complete", timeout=STREAM_TIMEOUT * MS
        )
    vote_a = head.locator('.nbstream-compare-vote-btn[data-label="A"]')
    vote_b = head.locator('.nbstream-compare-vote-btn[data-label="B"]')
    expect(vote_a).to_be_enabled()
    # The columns stay in place, A then B in the DOM as on the screen (a screen reader reads
    # them in that order); the shuffle moves the models between them.
    labels = [roots.nth(i).locator(".nbstream-label").inner_text() for i in range(2)]
    assert labels == kval(nb, "cw.labels") == ["A", "B"], labels
    left = [roots.nth(i).bounding_box()["x"] for i in range(2)]
    assert left[0] < left[1], left
    # No "Inside the model" while hidden: it would show the template and the layers.
    assert kval(nb, "[c.can_lens for c in cw.columns]") == [False, False]

    # Before Reveal: no model's name anywhere on the page, nor in the saved notebook.
    assert found(nb.page.evaluate(PAGE_WITHOUT_CODE)) == []
    nb.save()
    saved = json.loads((lab.server.root_dir / "NB.ipynb").read_text())
    outputs = json.dumps([cell.get("outputs", []) for cell in saved["cells"]])
    assert "nbstream compare" in outputs  # the saved fallback is there, and names no model
    assert found(outputs + json.dumps(saved.get("metadata", {}))) == []

    # Votes count, in the kernel and on the buttons.
    vote_a.click()
    expect(vote_a).to_have_text("A · 1")
    vote_a.click()
    vote_b.click()
    expect(vote_a).to_have_text("A · 2")
    expect(vote_b).to_have_text("B · 1")
    votes = {"A": 2, "B": 1, "tie": 0}
    wait_until(lambda: kval(nb, "cw.votes") == votes, 15, what="the votes counted")

    # A re-render (the widget shown again, a new view from the kernel's state) shows them.
    nb.run_cell(2)
    again = nb.cell(2).locator(".nbstream-compare")
    expect(again.locator('.nbstream-compare-vote-btn[data-label="A"]')).to_have_text("A · 2")
    expect(again.locator('.nbstream-compare-vote-btn[data-label="B"]')).to_have_text("B · 1")
    assert found(nb.page.evaluate(PAGE_WITHOUT_CODE)) == []

    # Reveal: the labels map to the models as the records say; votes close.
    head.get_by_role("button", name="Reveal", exact=True).click()
    revealed = head.locator(".nbstream-compare-revealed")
    expect(revealed).to_contain_text("Revealed:")
    records = kval(nb, "[(r['compare']['label'], r['compare']['model']) for r in cw.records]")
    for label, model in records:
        expect(revealed).to_contain_text(f"{label} = {model}")
        assert model in ("zqalpha", "zqbravo")
    assert kval(nb, "cw.reveal()") == dict(records) == {"A": "zqbravo", "B": "zqalpha"}
    assert kval(nb, "[c.can_lens for c in cw.columns]") == [True, True]
    expect(vote_a).to_be_disabled()
    for i in range(2):
        label = roots.nth(i).locator(".nbstream-label")
        shown = label.inner_text()
        assert shown in {f"{lab_} · {model}" for lab_, model in records}, shown
    expect(again.locator(".nbstream-compare-revealed")).to_contain_text("Revealed:")
    SCREENSHOT.parent.mkdir(exist_ok=True)
    nb.cell(1).screenshot(path=str(SCREENSHOT))
    assert nb.console_errors() == []
