"""The teaching views (Tokens, Probabilities, Alternatives) in a real JupyterLab driven by
Chromium, on the tiny model: what the page shows is checked against the kernel's run
(``run.token_ids``, ``run.trace``), read through `nb.kernel_eval` (see
test_widget_browser.py). The front end alone is covered by
tests/frontend/test_tokens_frontend.py, the kernel alone by tests/test_token_views.py.

test_teaching_views_on_the_default_model takes the README's picture of the three views
(a sampled run of the default model, one token's alternatives open) into
test-artifacts/teaching-views.png; with NBSTREAM_UPDATE_SCREENSHOT=1 it also writes
docs/teaching-views.png (left alone otherwise, so a test run does not dirty the repo), as
test_widget_browser.py does for docs/screenshot.png.
"""

from __future__ import annotations

import json
import math
import os
import shutil

import pytest
from browser_helpers import MS, REPO, SETUP, STREAM_TIMEOUT, kval, view, wait_status, wait_until
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

ARTIFACTS = REPO / "test-artifacts"
TEACHING_SHOT = ARTIFACTS / "teaching-views.png"
README_TEACHING_SHOT = REPO / "docs" / "teaching-views.png"

# A sampled run whose top-k cuts all but two candidates at every step.
SAMPLED = (
    "model, tokenizer = tiny_model(one_line=True)\n"
    "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=8, top_k=2, do_sample=True,\n"
    "                          seed=0, alternatives=5)\n"
    "w"
)
# Each token of the run as the views get it: (text, kind), from the kernel's own code.
PIECES = "[nbstream._tokens.TokenPieces(tokenizer)(i) for i in w.run.token_ids]"


def spans(v):
    return v.locator(".nbstream-tokens .nbstream-token")


def shown_ids(v) -> list[int]:
    return [int(x) for x in spans(v).evaluate_all("(s) => s.map((e) => e.dataset.tokenId)")]


# Each token's text colour and shade as the page draws them, and its WCAG contrast ratio.
_TOKEN_COLOURS = """(spans) => spans.map((e) => {
  const rgb = (c) => c.match(/[\\d.]+/g).slice(0, 3).map(Number);
  const lum = (c) => {
    const [r, g, b] = rgb(c).map((x) => {
      const s = x / 255;
      return s <= 0.04045 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const st = getComputedStyle(e);
  const [a, b] = [lum(st.color), lum(st.backgroundColor)].sort((x, y) => y - x);
  return {bg: st.backgroundColor, contrast: (a + 0.05) / (b + 0.05)};
})"""


def press(v, name: str):
    """Click a token-view toggle; returns it once pressed."""
    button = v.get_by_role("button", name=name, exact=True)
    expect(button).to_have_attribute("aria-pressed", "false")
    button.click()
    expect(button).to_have_attribute("aria-pressed", "true")
    return button


def test_tokens_probabilities_and_alternatives_of_a_sampled_run(lab):
    nb = lab.open_notebook([SETUP, SAMPLED])
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    press(v, "Tokens")
    wait_until(lambda: kval(nb, "w.show_tokens") is True, 15, what="show_tokens synced")
    v.get_by_role("textbox", name="Prompt", exact=True).fill("Hello")
    v.get_by_role("button", name="Run", exact=True).click()
    wait_status(v, "complete")

    # Tokens: one element per generated token, in order, with its id.
    ids = kval(nb, "w.run.token_ids")
    assert len(ids) == 8
    wait_until(lambda: shown_ids(v) == ids, 15, what="the run's tokens shown")
    expect(v.locator(".nbstream-output .nbstream-rendered")).to_have_count(0)
    pieces = kval(nb, PIECES)
    if all(kind == "text" for _, kind in pieces):
        shown = v.locator(".nbstream-tokens").evaluate("(e) => e.textContent")
        assert shown == kval(nb, "w.result")
    # Hover: the token's id and its text (JSON-escaped, so whitespace shows).
    third = spans(v).nth(2)
    third.hover()
    text, kind = pieces[2]
    said = f"bytes {text}" if kind == "bytes" else text if kind == "special" else json.dumps(text)
    expect(third).to_have_attribute("title", f"token {ids[2]}: {said}")

    # Probabilities: the legend, each token shaded by the probability the kernel captured.
    press(v, "Probabilities")
    legend = v.locator(".nbstream-legend")
    expect(legend).to_be_visible()
    expect(legend).to_contain_text("0%")
    expect(legend).to_contain_text("100%")
    expect(v.locator(".nbstream-token-note")).to_have_count(0)  # the run captured them
    trace = kval(nb, "[(t.logprob, t.rank, list(t.cut)) for t in w.run.trace]")
    wait_until(
        lambda: spans(v).evaluate_all("(s) => s.map((e) => e.dataset.p)") != [None] * 8,
        15,
        what="probabilities shown",
    )
    shown_p = spans(v).evaluate_all("(s) => s.map((e) => Number(e.dataset.p))")
    for p, (logprob, _, _) in zip(shown_p, trace, strict=True):
        assert p == pytest.approx(math.exp(logprob), abs=2e-4)
    for k, (_, rank, _) in enumerate(trace):
        badge = spans(v).nth(k).locator(".nbstream-token-rank")
        if rank > 1:
            expect(badge).to_have_attribute("data-rank", str(rank))
            expect(badge).to_be_visible()
        else:
            expect(badge).to_have_count(0)
    title = third.get_attribute("title") or ""
    assert f"rank {trace[2][1]}" in title and "probability " in title

    # Alternatives: a click shows the top 5 at that step, the chosen one and the cut ones
    # (top_k=2 leaves every candidate below the second no chance) marked.
    press(v, "Alternatives")
    alts = kval(nb, "[(a.id, a.text, a.logprob) for a in w.run.trace[2].alternatives]")
    third.click()
    pop = v.get_by_role("dialog", name="Alternatives at step 3")
    expect(pop).to_be_visible()
    rows = pop.locator("tbody tr")
    expect(rows).to_have_count(5, timeout=15 * MS)
    shown = rows.evaluate_all("(r) => r.map((e) => Number(e.dataset.tokenId))")
    assert shown == [a[0] for a in alts]
    cut = trace[2][2]
    assert cut[2:] == [True, True, True]  # below the top 2
    for k, is_cut in enumerate(cut):
        has = rows.nth(k).evaluate("(e) => e.classList.contains('nbstream-alt-cut')")
        assert has == is_cut, (k, cut)
    expect(pop.locator(".nbstream-alt-cut-label").first).to_have_text("cut")
    best = rows.nth(0).locator(".nbstream-alt-pct").inner_text()
    assert best.endswith("%") and float(best.rstrip("%").lstrip("<>")) == pytest.approx(
        100 * math.exp(alts[0][2]), abs=0.06
    )
    # For a look at it in JupyterLab's theme: test-artifacts/tokens-jupyterlab.png.
    ARTIFACTS.mkdir(exist_ok=True)
    v.screenshot(path=str(ARTIFACTS / "tokens-jupyterlab.png"))
    chosen = pop.locator(".nbstream-alt-chosen")
    if ids[2] in shown:
        expect(chosen).to_have_attribute("data-token-id", str(ids[2]))
    else:
        expect(pop.locator(".nbstream-alt-outside")).to_contain_text(f"rank {trace[2][1]}")
    # Keyboard: the next token's alternatives; Escape closes.
    third.focus()
    third.press("ArrowRight")
    expect(spans(v).nth(3)).to_be_focused()
    expect(v.get_by_role("dialog", name="Alternatives at step 4")).to_be_visible()
    spans(v).nth(3).press("Escape")
    expect(v.locator(".nbstream-alternatives")).to_be_hidden()

    # All off from Python: the rendered answer is back, and the buttons follow.
    nb.kernel_eval(
        "(setattr(w, 'show_tokens', False), setattr(w, 'show_probabilities', False),"
        " setattr(w, 'show_alternatives', False))"
    )
    expect(v.get_by_role("button", name="Alternatives", exact=True)).to_have_attribute(
        "aria-pressed", "false"
    )
    expect(v.locator(".nbstream-tokens")).to_have_count(0)
    expect(v.locator(".nbstream-legend")).to_have_count(0)
    raw = v.get_by_role("button", name="Raw text", exact=True)
    raw.click()
    expect(raw).to_have_attribute("aria-pressed", "true")
    expect(v.locator(".nbstream-raw")).to_have_text(kval(nb, "w.result"))
    assert nb.console_errors() == []


def test_tokens_stream_live_and_a_new_view_gets_them_all(lab):
    nb = lab.open_notebook(
        [
            SETUP,
            "model, tokenizer = tiny_model(one_line=True)\n"
            "gate = Gate(model, 6)\n"
            "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=12,\n"
            "                          show_probabilities=True)\n"
            "w",
            "run = w.generate('hello')",
            "display(w)",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    expect(v.get_by_role("button", name="Probabilities", exact=True)).to_have_attribute(
        "aria-pressed", "true"
    )
    nb.run_cell(2)
    # Held at step 6: the five tokens so far are shown while the run is still running.
    wait_until(lambda: kval(nb, "gate.reached.is_set()"), 60, what="step 6")
    so_far = kval(nb, "w.run.token_ids")
    assert len(so_far) == 5
    wait_until(lambda: shown_ids(v) == so_far, 15, what="tokens while running")
    expect(v).to_have_attribute("data-status", "running")
    expect(v.locator(".nbstream-legend")).to_be_visible()
    # A second view made mid-run asks for them (sync) and gets every one.
    nb.run_cell(3)
    second = view(nb, 3)
    wait_until(lambda: shown_ids(second) == so_far, 15, what="tokens in the new view")
    nb.kernel_eval("gate.opened.set()")
    wait_status(v, "complete", STREAM_TIMEOUT)
    ids = kval(nb, "w.run.token_ids")
    assert len(ids) == 12
    for each in (v, second):
        wait_until(lambda each=each: shown_ids(each) == ids, 15, what="every token")
        assert each.locator(".nbstream-token[data-p]").count() == 12
    assert nb.console_errors() == []


def test_chat_answers_show_their_tokens(lab):
    nb = lab.open_notebook(
        [
            SETUP,
            "model, tokenizer = tiny_model(one_line=True)\n"
            "chat = nbstream.ChatWidget(model, tokenizer, max_new_tokens=4)\n"
            "chat",
            "chat.generate('First')\nchat.wait()\nfirst = chat.run.token_ids\n"
            "chat.show_alternatives = True\n"
            "chat.generate('Second')\nchat.wait()\nsecond = chat.run.token_ids",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = nb.cell(1).locator(".nbstream.nbstream-chat").first
    press(v, "Tokens")
    nb.run_cell(2)
    answers = v.locator(".nbstream-message[data-role='assistant']")
    expect(answers).to_have_count(2, timeout=STREAM_TIMEOUT * MS)
    expect(answers.nth(1)).to_have_attribute("data-status", "complete", timeout=STREAM_TIMEOUT * MS)
    first, second = kval(nb, "first"), kval(nb, "second")
    wait_until(lambda: shown_ids(answers.nth(0)) == first, 15, what="the first answer's tokens")
    wait_until(lambda: shown_ids(answers.nth(1)) == second, 15, what="the second's")
    # The first answer ran before any view asked for probabilities; the second has them.
    expect(answers.nth(0).locator(".nbstream-token-note")).to_contain_text("without probabilities")
    expect(answers.nth(1).locator(".nbstream-token-note")).to_have_count(0)
    spans(answers.nth(1)).nth(0).click()
    pop = answers.nth(1).get_by_role("dialog", name="Alternatives at step 1")
    expect(pop).to_be_visible()
    expect(pop.locator("tbody tr")).to_have_count(5)  # the kernel's 5 when none was set
    assert nb.console_errors() == []


def test_teaching_views_on_the_default_model(lab):
    """Tokens, Probabilities and Alternatives on the default model's sampled run: what a
    learner sees (shades that differ, readable on each; a popover of candidates with the
    chosen one marked), and the README's picture of it."""
    nb = lab.open_notebook(
        [
            SETUP,
            "w = nbstream.StreamWidget(max_new_tokens=40, temperature=0.8, seed=3,\n"
            "                          show_tokens=True, show_probabilities=True,\n"
            "                          show_alternatives=True)\n"
            "w",
            "run = w.generate('Complete the sentence: The best thing about autumn is')",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    for name in ("Tokens", "Probabilities", "Alternatives"):
        expect(v.get_by_role("button", name=name, exact=True)).to_have_attribute(
            "aria-pressed", "true"
        )
    nb.run_cell(2)
    wait_status(v, "complete")
    ids = kval(nb, "w.run.token_ids")
    wait_until(lambda: shown_ids(v) == ids, 15, what="the run's tokens shown")
    expect(v.locator(".nbstream-legend")).to_be_visible()
    expect(v.locator(".nbstream-token-note")).to_have_count(0)

    # The shading tells tokens apart, and every token stays readable on its shade.
    wait_until(lambda: v.locator(".nbstream-token[data-p]").count() == len(ids), 15, what="shading")
    colours = spans(v).evaluate_all(_TOKEN_COLOURS)
    assert len({c["bg"] for c in colours}) > 1, colours
    low = [c for c in colours if c["contrast"] < 4.5]
    assert low == [], low

    # A pick that was not the model's favourite, if the run made one: its alternatives.
    ranks = spans(v).evaluate_all("(s) => s.map((e) => Number(e.dataset.rank || 0))")
    k = next((i for i, r in enumerate(ranks) if r > 1), len(ids) // 2)
    if ranks[k] > 1:
        expect(spans(v).nth(k).locator(".nbstream-token-rank")).to_be_visible()
    spans(v).nth(k).click()
    pop = v.get_by_role("dialog", name=f"Alternatives at step {k + 1}")
    expect(pop).to_be_visible()
    rows = pop.locator("tbody tr")
    wait_until(lambda: rows.count() >= 2, 15, what="the popover's candidates")
    chosen = pop.locator(".nbstream-alt-chosen")
    if ids[k] in rows.evaluate_all("(r) => r.map((e) => Number(e.dataset.tokenId))"):
        expect(chosen).to_have_count(1)
        expect(chosen).to_have_attribute("data-token-id", str(ids[k]))
        expect(chosen).to_contain_text("chosen")
    else:
        expect(pop.locator(".nbstream-alt-outside")).to_contain_text("was not in the top")
    # The model's own probabilities of its top k: shown rounded, they add up to at most 100%.
    shown = [p.strip("<>%") for p in rows.locator(".nbstream-alt-pct").all_inner_texts()]
    total = sum(float(p) for p in shown)
    assert 0 < total <= 100 + 0.05 * len(shown), shown

    # The README's picture: the whole widget, the popover inside it.
    ARTIFACTS.mkdir(exist_ok=True)
    v.screenshot(path=str(TEACHING_SHOT))
    if os.environ.get("NBSTREAM_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(TEACHING_SHOT, README_TEACHING_SHOT)
    assert nb.console_errors() == []
