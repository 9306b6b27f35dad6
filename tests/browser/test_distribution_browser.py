"""The sampling panel ("How was this picked?") and the compare columns' marks in a real
JupyterLab driven by Chromium, on the default model (the numbers matter): what the page
draws is checked against the kernel's own ``run.distribution`` and ``cw.divergence``, read
through `nb.kernel_eval`. The kernel side alone is tests/test_distribution_view.py.

test_the_sampling_panel_by_mouse_and_keyboard takes the README's picture of the panel into
test-artifacts/sampling-panel.png; with NBSTREAM_UPDATE_SCREENSHOT=1 it also writes
docs/sampling-panel.png (left alone otherwise, so a test run does not dirty the repo).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
from axe_audit import assert_accessible
from browser_helpers import MS, REPO, SETUP, STREAM_TIMEOUT, kval, view, wait_status, wait_until
from jupyter_harness import Jupyter
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

ARTIFACTS = REPO / "test-artifacts"
SHOT = ARTIFACTS / "sampling-panel.png"
README_SHOT = REPO / "docs" / "sampling-panel.png"

# A short greedy answer of the default model, its alternatives on.
WIDGET = (
    "w = nbstream.StreamWidget(max_new_tokens=12, temperature=0, show_alternatives=True)\n"
    "w.generate('Name a color.')\n"
    "w"
)
# Two columns that part within 16 tokens (greedy, and a hot sampled one with a fixed seed).
COMPARE = (
    "cw = nbstream.CompareWidget(None, None, 'Name a color.',\n"
    "    settings=[{'temperature': 0}, {'temperature': 1.6, 'seed': 3}],\n"
    "    max_new_tokens=16, show_tokens=True)\n"
    "cw.generate()\n"
    "cw"
)
# A chat on the tiny model (the numbers are checked on the StreamWidget's default model).
CHAT = (
    "chat = nbstream.ChatWidget(*tiny_model(one_line=True), max_new_tokens=6,\n"
    "                           show_alternatives=True)\n"
    "chat.generate('Hi')\n"
    "chat"
)
# What the kernel says the panel should draw for step `s` at some settings: the bars' ids
# (top 10, most likely first), those cut, and the words.
EXPECTED = (
    "(lambda d: ([c.id for c in d.top(10)], sorted(c.id for c in d.top(10) if c.removed_by),"
    " [round(c.probs['top_p'], 6) for c in d.top(10)], d.describe().split('; ', 3)))"
    "(w.run.distribution({step}, **{settings}))"
)
READ_BARS = """(bars) => bars.map((b) => ({
  id: Number(b.dataset.tokenId), p: Number(b.dataset.p), cut: b.dataset.removedBy || null,
}))"""


@pytest.fixture(scope="module")
def nb(lab_server, browser) -> Iterator:
    """One notebook for the module: the widget's answer, then (second test) the compare."""
    harness = Jupyter(lab_server, browser)
    try:
        notebook = harness.open_notebook([SETUP, WIDGET, COMPARE, CHAT], name="distribution.ipynb")
        notebook.run_cell(0)
        notebook.run_cell(1)
        yield notebook
    finally:
        harness.close()


def spans(v):
    return v.locator(".nbstream-tokens .nbstream-token")


def bars(panel) -> list[dict]:
    return panel.locator(".nbstream-dist-bar:not(.nbstream-dist-rest)").evaluate_all(READ_BARS)


def expected(nb, step: int, **settings) -> tuple[list[int], list[int], list[float], list[str]]:
    ids, cut, probs, phrases = kval(nb, EXPECTED.format(step=step, settings=settings), 60)
    return ids, cut, probs, phrases


def check_bars(panel, nb, step: int, **settings) -> list[str]:
    """The bars show the kernel's top 10 with its probabilities, the cut ones greyed."""
    ids, cut, probs, phrases = expected(nb, step, **settings)

    def drawn():
        shown = bars(panel)
        return [b["id"] for b in shown[:10]] == ids and [
            round(b["p"], 6) for b in shown[:10]
        ] == probs

    wait_until(drawn, 60, what=f"the bars of step {step} at {settings}")
    shown = bars(panel)[:10]
    assert sorted(b["id"] for b in shown if b["cut"]) == cut
    greyed = panel.locator(".nbstream-dist-cut").evaluate_all(
        "(b) => b.map((e) => Number(e.dataset.tokenId))"
    )
    assert sorted(i for i in greyed if i in ids) == cut
    return phrases


def test_the_sampling_panel_by_mouse_and_keyboard(nb):
    v = view(nb, 1)
    wait_status(v, "complete")
    ids = kval(nb, "w.run.token_ids")
    wait_until(lambda: spans(v).count() == len(ids), 30, what="the run's tokens shown")

    # Mouse: a token's popover, then "How was this picked?".
    step = 2
    spans(v).nth(step).click()
    pop = v.get_by_role("dialog", name=f"Alternatives at step {step + 1}")
    expect(pop).to_be_visible()
    pop.get_by_role("button", name="How was this picked?").click()
    panel = v.get_by_role("region", name=f"How the token at step {step + 1} was picked")
    expect(panel).to_be_visible()
    expect(pop).to_be_hidden()
    # The greedy run's own settings: temperature 0 keeps only the favourite.
    check_bars(panel, nb, step)
    chosen = panel.locator(".nbstream-dist-bar[data-chosen='true']")
    expect(chosen).to_have_attribute("data-token-id", str(ids[step]))
    expect(chosen).to_contain_text("the run took this")
    temperature = panel.get_by_role("slider", name="Temperature")
    expect(temperature).to_be_focused()
    expect(temperature).to_have_value("0")
    expect(panel.locator(".nbstream-dist-run").first).to_have_text("run: 0 (greedy)")

    # Keyboard: temperature up to 1 (20 steps of 0.05), then top-p down to 0.7.
    for _ in range(20):
        temperature.press("ArrowRight")
    expect(temperature).to_have_value("1")
    top_p = panel.get_by_role("slider", name="Top-p")
    top_p.focus()
    for _ in range(6):
        top_p.press("ArrowLeft")
    expect(top_p).to_have_attribute("aria-valuetext", "0.7")
    phrases = check_bars(panel, nb, step, temperature=1.0, top_k=0, top_p=0.7)
    # Top-p cut some of the ten, and says so on their bars.
    expect(panel.locator(".nbstream-dist-cut").first).to_contain_text("cut by top-p")
    # One sentence for the settled change: the filter moved last, and the chosen token.
    live = panel.locator("[aria-live='polite']")
    expect(live).to_have_text(f"{phrases[2]}; {phrases[3]}", timeout=30 * MS)
    assert phrases[2].startswith("top-p 0.7 keeps ")
    # axe-core finds nothing wrong with the open panel (its sliders, bars, live region).
    assert_accessible(nb.page, "the sampling panel", ".nbstream-dist")
    # No run started: the widget still shows the same answer.
    assert kval(nb, "(w.status, w.run.token_ids)") == ("complete", ids)

    ARTIFACTS.mkdir(exist_ok=True)
    v.screenshot(path=str(SHOT))
    if os.environ.get("NBSTREAM_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(SHOT, README_SHOT)

    # Reset: back to the run's settings.
    panel.get_by_role("button", name="Reset to the run's settings").click()
    expect(temperature).to_have_value("0")
    check_bars(panel, nb, step)

    # Escape closes it; the token it explained has the focus again.
    temperature.focus()
    temperature.press("Escape")
    expect(panel).to_be_hidden()
    expect(spans(v).nth(step)).to_be_focused()

    # Keyboard only: the next token, its popover's action, Enter.
    spans(v).nth(step).press("ArrowRight")
    expect(v.get_by_role("dialog", name=f"Alternatives at step {step + 2}")).to_be_visible()
    for _ in range(20):
        nb.page.keyboard.press("Tab")
        if v.locator(".nbstream-alt-explain:focus").count():
            break
    expect(v.locator(".nbstream-alt-explain")).to_be_focused()
    nb.page.keyboard.press("Enter")
    panel = v.get_by_role("region", name=f"How the token at step {step + 2} was picked")
    expect(panel).to_be_visible()
    check_bars(panel, nb, step + 1)
    panel.get_by_role("button", name="Close").click()
    expect(panel).to_be_hidden()
    expect(spans(v).nth(step + 1)).to_be_focused()
    assert nb.console_errors() == []


def test_compare_columns_mark_where_they_part(nb):
    nb.run_cell(2)
    columns = nb.cell(2).locator(".nbstream-column .nbstream")
    wait_until(lambda: columns.count() == 2, 60, what="two columns")
    for i in range(2):
        wait_status(columns.nth(i), "complete", STREAM_TIMEOUT * 2)
    divergence = kval(nb, "cw.divergence")
    assert divergence is not None, "the columns were expected to part"
    step, _tokens = divergence
    wait_until(
        lambda: kval(nb, "[c.compare_mark is not None for c in cw.columns]") == [True, True],
        60,
        what="the marks",
    )
    words = kval(nb, "[c.compare_mark['words'] for c in cw.columns]")
    for i in range(2):
        column = columns.nth(i)
        line = column.locator(".nbstream-parted")
        expect(line).to_have_text(words[i])
        assert line.get_attribute("role") == "note"
        # The token view marks that token, and only it.
        marked = column.locator(".nbstream-token-parted")
        expect(marked).to_have_count(1)
        expect(marked).to_have_attribute("data-index", str(step))
    assert words[0].startswith(f"Columns part at token {step + 1}: this column took ")
    assert nb.console_errors() == []


def test_the_sampling_panel_of_a_chat_answer(nb):
    nb.run_cell(3)
    v = nb.cell(3).locator(".nbstream-chat")
    wait_status(v, "complete")
    answer = v.locator('.nbstream-message[data-role="assistant"]').last
    ids = kval(nb, "chat.run.token_ids")
    wait_until(lambda: spans(answer).count() == len(ids), 30, what="the answer's tokens")
    spans(answer).nth(1).click()
    answer.get_by_role("dialog", name="Alternatives at step 2").get_by_role(
        "button", name="How was this picked?"
    ).click()
    panel = answer.get_by_role("region", name="How the token at step 2 was picked")
    expect(panel).to_be_visible()
    top = kval(nb, "[c.id for c in chat.run.distribution(1).top(10)]", 60)
    wait_until(lambda: [b["id"] for b in bars(panel)[:10]] == top, 60, what="the chat's bars")
    expect(panel.locator(".nbstream-dist-bar[data-chosen='true']")).to_have_attribute(
        "data-token-id", str(ids[1])
    )
    panel.get_by_role("slider", name="Temperature").press("Escape")
    expect(panel).to_be_hidden()
    expect(spans(answer).nth(1)).to_be_focused()
    assert kval(nb, "chat.status") == "complete"  # Escape closed the panel, stopped nothing
    assert nb.console_errors() == []
