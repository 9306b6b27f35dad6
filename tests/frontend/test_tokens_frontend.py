"""Front-end tests of the teaching views (js/src/token_views.js, token_list.js): the Tokens,
Probabilities and Alternatives toggles and what they show, in the StreamWidget view
(stream.js) and the ChatWidget view (chat.js, ``?bundle=chat``), with the fake model of
harness.html; a compare column's parting mark on its tokens, and a disconnected view's popover.

The tests play the kernel: they set the synced traits (``show_tokens``...) and send the
``tokens`` messages of the protocol (see the comment at the top of js/src/stream.js):
a token is ``[id, text, kind, logprob, rank, alts]``, an alternative
``[id, text, kind, logprob, cut]``. The kernel's side is tested in tests/test_token_views.py.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from frontend_helpers import (
    REPO,
    TOKENS,
    alts,
    answer,
    change,
    emit,
    frame,
    log,
    mount,
    popover,
    sent,
    spans,
    tok,
    tokens_msg,
    user,
    view,
)
from playwright.sync_api import Page, expect

XSS = '<img src=x onerror="window.__pwned = 1">'


def ids(root) -> list[int]:
    return [int(x) for x in spans(root).evaluate_all("(s) => s.map((e) => e.dataset.tokenId)")]


def syncs(page: Page, i: int = 0) -> int:
    return len([m for m in sent(page, i) if m["type"] == "sync"])


def toggle(root, name: str):
    return root.get_by_role("button", name=name, exact=True)


def running(page: Page, **state: Any) -> Any:
    """A StreamWidget view whose run 1 is running, with the given toggles."""
    mount(page, status="running", run_id=1, **state)
    return view(page)


# ---------------------------------------------------------------------------------------------
# toggles
# ---------------------------------------------------------------------------------------------


def test_toggles_set_the_traits_and_follow_them(fe_page: Page) -> None:
    page = fe_page
    root = running(page)
    for name in ("Tokens", "Probabilities", "Alternatives"):
        expect(toggle(root, name)).to_have_attribute("aria-pressed", "false")
    emit(page, {"type": "delta", "run_id": 1, "offset": 0, "text": "**Hello**, a world"})
    frame(page)
    expect(root.locator(".nbstream-output strong")).to_have_text("Hello")  # Markdown
    expect(root.locator(".nbstream-tokens")).to_have_count(0)

    toggle(root, "Tokens").click()
    assert ["set", "show_tokens", True] in log(page)
    assert log(page)[-1] == ["save"]
    expect(toggle(root, "Tokens")).to_have_attribute("aria-pressed", "true")
    expect(root).to_have_attribute("data-token-view", "true")
    # The kernel answers the toggle with every run's tokens from offset 0.
    emit(page, tokens_msg(1, 0, TOKENS))
    expect(spans(root)).to_have_count(4)
    expect(root.locator(".nbstream-output strong")).to_have_count(0)  # tokens, not Markdown
    expect(root.locator(".nbstream-tokens")).to_have_attribute("data-boundaries", "true")
    expect(root.get_by_role("button", name="Raw text", exact=True)).to_be_disabled()

    # From Python: the buttons follow.
    change(page, "show_probabilities", True)
    expect(toggle(root, "Probabilities")).to_have_attribute("aria-pressed", "true")
    change(page, "show_tokens", False)
    expect(toggle(root, "Tokens")).to_have_attribute("aria-pressed", "false")
    expect(root.locator(".nbstream-tokens")).to_have_attribute("data-boundaries", "false")
    expect(spans(root)).to_have_count(4)  # still the token view: Probabilities is on
    toggle(root, "Probabilities").click()
    assert ["set", "show_probabilities", False] in log(page)
    # All off: the rendered Markdown is back, text that came meanwhile included.
    expect(root.locator(".nbstream-tokens")).to_have_count(0)
    expect(root.locator(".nbstream-output strong")).to_have_text("Hello")
    # ... and the raw-text toggle works as before.
    raw = root.get_by_role("button", name="Raw text", exact=True)
    expect(raw).to_be_enabled()
    raw.click()
    expect(root.locator(".nbstream-raw")).to_have_text("**Hello**, a world")
    raw.click()
    expect(root.locator(".nbstream-output strong")).to_have_text("Hello")


def test_a_view_made_with_a_toggle_on_shows_tokens_and_asks_for_them(fe_page: Page) -> None:
    page = fe_page
    root = running(page, show_alternatives=True)
    expect(toggle(root, "Alternatives")).to_have_attribute("aria-pressed", "true")
    # A new view sends `sync`; the kernel answers with a reset, then the tokens.
    assert syncs(page) == 1
    emit(page, {"type": "reset", "run_id": 1, "view": sent(page)[0]["view"], "text": "Hello, a"})
    emit(page, tokens_msg(1, 0, TOKENS[:3]))
    expect(spans(root)).to_have_count(3)
    expect(root.locator(".nbstream-tokens")).to_have_attribute("data-alts", "true")


# ---------------------------------------------------------------------------------------------
# the token list
# ---------------------------------------------------------------------------------------------


def test_tokens_are_appended_incrementally_with_their_ids(fe_page: Page) -> None:
    page = fe_page
    root = running(page, show_tokens=True)
    emit(page, tokens_msg(1, 0, TOKENS[:2]))
    expect(spans(root)).to_have_count(2)
    # Watch the list: later frames only add elements, the ones shown stay.
    page.evaluate(
        """() => {
            const list = document.querySelector('.nbstream-tokens');
            list.firstElementChild.__kept = true;
            window.__removed = 0;
            new MutationObserver((records) => {
                for (const r of records) window.__removed += r.removedNodes.length;
            }).observe(list, {childList: true, subtree: true});
        }"""
    )
    emit(page, tokens_msg(1, 2, TOKENS[2:3]))
    emit(page, tokens_msg(1, 3, TOKENS[3:]))
    expect(spans(root)).to_have_count(4)
    assert ids(root) == [19556, 28, 253, 1345]
    assert spans(root).evaluate_all("(s) => s.map((e) => e.dataset.index)") == ["0", "1", "2", "3"]
    assert page.evaluate("document.querySelector('.nbstream-token').__kept") is True
    assert page.evaluate("window.__removed") == 0
    # An overlapping frame (a reset's tokens were ahead of it) adds only what is new.
    emit(page, tokens_msg(1, 2, [*TOKENS[2:], tok(0, ".", 0.9)]))
    assert ids(root) == [19556, 28, 253, 1345, 0]
    assert page.evaluate("window.__removed") == 0
    expect(root.locator(".nbstream-tokens")).to_have_text("Hello, a world.")


def test_offset_zero_replaces_the_list_and_a_new_run_clears_it(fe_page: Page) -> None:
    page = fe_page
    root = running(page, show_tokens=True)
    emit(page, tokens_msg(1, 0, TOKENS))
    expect(spans(root)).to_have_count(4)
    emit(page, tokens_msg(1, 0, [tok(7, "Bye")]))
    assert ids(root) == [7]
    # A new run: the old run's tokens go; a late frame of the old run is ignored.
    page.evaluate("window.views[0].model.changeMany({run_id: 2, status: 'queued'})")
    expect(spans(root)).to_have_count(0)
    emit(page, tokens_msg(1, 1, [tok(8, "!")]))
    expect(spans(root)).to_have_count(0)
    before = syncs(page)
    emit(page, tokens_msg(2, 0, [tok(9, "New")]))
    assert ids(root) == [9]
    assert syncs(page) == before  # no gap


def test_tokens_that_made_a_stop_string_are_marked(fe_page: Page) -> None:
    """The run ended at a stop string: its tokens come again, those past the answer marked."""
    page = fe_page
    root = running(page, show_tokens=True)
    streamed = [tok(1, "One"), tok(2, " two"), tok(3, " END")]
    emit(page, tokens_msg(1, 0, streamed))
    expect(root.locator('.nbstream-token[data-after-stop="true"]')).to_have_count(0)
    emit(page, tokens_msg(1, 0, [[*t, i == 2] for i, t in enumerate(streamed)]))
    marked = root.locator('.nbstream-token[data-after-stop="true"]')
    expect(marked).to_have_count(1)
    expect(marked).to_have_attribute("data-token-id", "3")
    assert "not part of the answer" in (marked.get_attribute("title") or "")
    assert marked.evaluate("(e) => getComputedStyle(e).textDecorationLine") == "line-through"


def test_a_gap_asks_for_a_sync(fe_page: Page) -> None:
    page = fe_page
    root = running(page, show_tokens=True)
    emit(page, tokens_msg(1, 0, TOKENS[:2]))
    before = syncs(page)
    emit(page, tokens_msg(1, 3, TOKENS[3:]))  # token 2 never came
    assert syncs(page) == before + 1
    assert sent(page)[-1]["view"] == sent(page)[0]["view"]
    assert ids(root) == [19556, 28]  # nothing shown out of place
    # The kernel answers the sync: a reset, then the tokens from offset 0.
    view_id = sent(page)[-1]["view"]
    emit(page, {"type": "reset", "run_id": 1, "view": view_id, "text": "Hello, a world"})
    emit(page, tokens_msg(1, 0, TOKENS))
    assert ids(root) == [19556, 28, 253, 1345]
    # Tokens of a run this view has not seen start, from the middle: a gap too.
    emit(page, tokens_msg(5, 3, TOKENS[3:]))
    assert syncs(page) == before + 2
    assert ids(root) == [19556, 28, 253, 1345]


def test_whitespace_bytes_and_special_tokens_are_legible(fe_page: Page) -> None:
    page = fe_page
    root = running(page, show_tokens=True)
    emit(
        page,
        tokens_msg(
            1,
            0,
            [
                tok(1, "Say"),
                tok(2, " it"),
                tok(3, "\n"),
                tok(4, "\tok"),
                tok(5, "e2 80", kind="bytes"),
                tok(6, "a6", kind="bytes"),
                tok(7, "<|im_end|>", kind="special"),
            ],
        ),
    )
    s = spans(root)
    expect(s).to_have_count(7)
    space = s.nth(1).locator(".nbstream-ws[data-ws='space']")
    expect(space).to_have_count(1)
    assert space.evaluate("(e) => e.textContent") == " "  # the real character stays
    assert "\u00b7" in space.evaluate("(e) => getComputedStyle(e, '::after').content")
    newline = s.nth(2).locator(".nbstream-ws[data-ws='newline']")
    assert newline.evaluate("(e) => e.textContent") == "\n"
    assert "\u21b5" in newline.evaluate("(e) => getComputedStyle(e, '::before').content")
    # A real line break: the next token starts a new line.
    top = [s.nth(k).evaluate("(e) => e.getClientRects()[0].top") for k in (1, 3)]
    assert top[1] > top[0] + 5
    tab = s.nth(3).locator(".nbstream-ws[data-ws='tab']")
    assert "\u2192" in tab.evaluate("(e) => getComputedStyle(e, '::after').content")
    expect(s.nth(4).locator(".nbstream-tok-bytes")).to_have_text("e2 80")
    expect(s.nth(6).locator(".nbstream-tok-special")).to_have_text("<|im_end|>")
    expect(s.nth(6)).to_have_attribute("data-kind", "special")
    # Hover text: the id and the text, JSON-escaped so whitespace shows.
    expect(s.nth(1)).to_have_attribute("title", 'token 2: " it"')
    expect(s.nth(2)).to_have_attribute("title", 'token 3: "\\n"')
    expect(s.nth(4)).to_have_attribute("title", "token 5: bytes e2 80")
    # Boundaries: neighbours differ in background.
    bgs = s.evaluate_all("(s) => s.slice(0, 2).map((e) => getComputedStyle(e).backgroundColor)")
    assert bgs[0] != bgs[1]
    # Copying gives the real text: byte pieces joined into their character, no markers.
    copied = page.evaluate(
        """() => {
            const list = document.querySelector('.nbstream-tokens');
            const range = document.createRange();
            range.selectNodeContents(list);
            const sel = getSelection();
            sel.removeAllRanges();
            sel.addRange(range);
            const dt = new DataTransfer();
            list.firstElementChild.dispatchEvent(
                new ClipboardEvent('copy', {clipboardData: dt, bubbles: true, cancelable: true}));
            return dt.getData('text/plain');
        }"""
    )
    assert copied == "Say it\n\tok\u2026<|im_end|>"


def test_model_output_stays_inert(fe_page: Page) -> None:
    page = fe_page
    root = running(page, show_tokens=True, show_alternatives=True, show_probabilities=True)
    bad = tok(66, XSS, 0.4, 3, alts((1, XSS, 0.5, False), (66, XSS, 0.4, False)))
    emit(page, tokens_msg(1, 0, [bad, tok(67, "<b>bold</b>", kind="special")]))
    expect(spans(root)).to_have_count(2)
    spans(root).first.click()
    expect(popover(root)).to_be_visible()
    page.wait_for_timeout(100)
    assert page.evaluate("window.__pwned") is None
    expect(root.locator("img")).to_have_count(0)
    expect(root.locator("b")).to_have_count(0)
    assert spans(root).first.evaluate("(e) => e.firstChild.textContent") == "<img"
    expect(popover(root).locator(".nbstream-alt-token").first).to_contain_text("onerror")


# ---------------------------------------------------------------------------------------------
# probabilities
# ---------------------------------------------------------------------------------------------


def test_legend_shading_and_rank_only_with_probabilities(fe_page: Page) -> None:
    page = fe_page
    root = running(page, show_tokens=True)
    emit(page, tokens_msg(1, 0, TOKENS))
    legend = root.locator(".nbstream-legend")
    rank = spans(root).nth(2).locator(".nbstream-token-rank")
    expect(legend).to_have_count(0)
    expect(rank).to_be_hidden()
    assert "probability" not in (spans(root).nth(2).get_attribute("title") or "")
    plain = spans(root).nth(0).evaluate("(e) => getComputedStyle(e).backgroundColor")

    change(page, "show_probabilities", True)
    expect(legend).to_be_visible()
    expect(legend).to_contain_text("0%")
    expect(legend).to_contain_text("100%")
    assert "gradient" in legend.locator(".nbstream-legend-bar").evaluate(
        "(e) => getComputedStyle(e).backgroundImage"
    )
    shaded = spans(root).evaluate_all("(s) => s.map((e) => getComputedStyle(e).backgroundColor)")
    assert shaded[0] != plain
    assert shaded[0] != shaded[2]  # 90% and 25%: different shades
    # Viridis: 90% is light (dark text), 25% dark (light text).
    fg = spans(root).evaluate_all("(s) => s.map((e) => getComputedStyle(e).color)")
    assert fg[0] == "rgb(0, 0, 0)" and fg[2] == "rgb(255, 255, 255)"
    expect(spans(root).nth(2)).to_have_attribute("data-p", "0.2500")
    # The sampled pick that was not the favourite shows its rank; rank 1 shows none.
    expect(rank).to_be_visible()
    expect(rank).to_have_attribute("data-rank", "2")
    assert rank.evaluate("(e) => getComputedStyle(e, '::before').content") == '"#2"'
    expect(spans(root).nth(0).locator(".nbstream-token-rank")).to_have_count(0)
    title = spans(root).nth(2).get_attribute("title") or ""
    assert title.startswith('token 253: " a"')
    assert "probability 25.0%" in title and "rank 2" in title

    change(page, "show_probabilities", False)
    expect(legend).to_have_count(0)
    expect(rank).to_be_hidden()
    assert spans(root).nth(0).evaluate("(e) => getComputedStyle(e).backgroundColor") == plain


def test_a_run_without_probabilities_says_so(fe_page: Page) -> None:
    page = fe_page
    root = running(page, show_probabilities=True)
    emit(page, tokens_msg(1, 0, [tok(1, "Hi", None, None), tok(2, "!", None, None)]))
    note = root.locator(".nbstream-token-note")
    # Still going: said in the present tense, then in the past.
    expect(note).to_contain_text("This run is going without probabilities")
    change(page, "status", "complete")
    expect(note).to_have_text("This run was made without probabilities; run again to capture them")
    expect(root.locator(".nbstream-legend")).to_have_count(0)
    assert spans(root).first.evaluate("(e) => e.hasAttribute('data-p')") is False
    # The next run captured them: the note goes, the legend comes.
    page.evaluate("window.views[0].model.changeMany({run_id: 2})")
    emit(page, tokens_msg(2, 0, TOKENS[:1]))
    expect(note).to_have_count(0)
    expect(root.locator(".nbstream-legend")).to_be_visible()


def test_a_remote_model_gets_a_note_and_its_text(fe_page: Page) -> None:
    page = fe_page
    root = running(page, can_trace=False)
    emit(page, {"type": "delta", "run_id": 1, "offset": 0, "text": "*remote*"})
    frame(page)
    toggle(root, "Probabilities").click()
    expect(toggle(root, "Probabilities")).to_have_attribute("aria-pressed", "true")
    expect(root.locator(".nbstream-token-note")).to_contain_text("need a local model")
    expect(root.locator(".nbstream-output em")).to_have_text("remote")
    expect(root.locator(".nbstream-legend")).to_have_count(0)


# ---------------------------------------------------------------------------------------------
# alternatives
# ---------------------------------------------------------------------------------------------


def test_clicking_a_token_shows_its_alternatives(fe_page: Page) -> None:
    page = fe_page
    root = running(page, show_tokens=True, show_alternatives=True)
    emit(page, tokens_msg(1, 0, TOKENS))
    expect(popover(root)).to_be_hidden()
    spans(root).nth(2).click()
    pop = root.get_by_role("dialog", name="Alternatives at step 3")
    expect(pop).to_be_visible()
    expect(spans(root).nth(2)).to_have_attribute("aria-expanded", "true")
    rows = pop.locator("tbody tr")
    expect(rows).to_have_count(4)
    texts = rows.locator(".nbstream-alt-token").evaluate_all("(s) => s.map((e) => e.textContent)")
    assert texts == [" the", " a", " an", "\n"]
    expect(rows.nth(0).locator(".nbstream-alt-pct")).to_have_text("60.0%")
    width = rows.nth(0).locator(".nbstream-alt-bar-fill").evaluate("(e) => e.style.width")
    assert width == "60%"
    # The chosen one is marked, and so are the two the run's settings cut.
    expect(pop.locator(".nbstream-alt-chosen")).to_have_count(1)
    expect(rows.nth(1)).to_have_class(re.compile(r"\bnbstream-alt-chosen\b"))
    expect(rows.nth(1)).to_contain_text("chosen")
    expect(pop.locator(".nbstream-alt-cut")).to_have_count(2)
    cut = rows.nth(2)
    expect(cut).to_have_class(re.compile(r"\bnbstream-alt-cut\b"))
    expect(cut.locator(".nbstream-alt-cut-label")).to_have_text("cut")
    assert "no chance" in (cut.locator(".nbstream-alt-cut-label").get_attribute("title") or "")
    assert "line-through" in cut.locator(".nbstream-alt-token").evaluate(
        "(e) => getComputedStyle(e).textDecorationLine"
    )
    expect(pop.locator(".nbstream-alt-foot")).to_contain_text("no chance")
    expect(pop.locator(".nbstream-alt-outside")).to_have_count(0)
    # Escape closes it; the focus stays on the token.
    page.keyboard.press("Escape")
    expect(popover(root)).to_be_hidden()
    expect(spans(root).nth(2)).to_be_focused()
    expect(spans(root).nth(2)).to_have_attribute("aria-expanded", "false")
    # A click elsewhere closes it too.
    spans(root).nth(3).click()
    expect(root.get_by_role("dialog", name="Alternatives at step 4")).to_be_visible()
    root.locator(".nbstream-bar").click(position={"x": 2, "y": 2})
    expect(popover(root)).to_be_hidden()


# Whether the open token is whole inside the output box's visible part, and the box scrolled.
TOKEN_IN_BOX = """(root) => {
  const out = root.querySelector('.nbstream-output');
  const t = root.querySelector('.nbstream-token-open');
  if (!out || !t) return false;
  const top = out.getBoundingClientRect().top + out.clientTop, r = t.getBoundingClientRect();
  return out.scrollTop > 0 && r.top >= top && r.bottom <= top + out.clientHeight;
}"""


def test_a_clicked_token_stays_in_its_box_above_a_tall_popover(fe_page: Page) -> None:
    """A popover taller than the output box scrolls the box; the clicked token stays in it."""
    page = fe_page
    root = running(page, show_tokens=True, show_alternatives=True)
    ten = alts(*[(100 + k, f" option{k}", 0.5 / (k + 1), False) for k in range(10)])
    long = [tok(100 + i % 7, f" word{i}", 0.5, 1, ten) for i in range(400)]
    emit(page, tokens_msg(1, 0, long))
    expect(spans(root)).to_have_count(400)
    late = spans(root).nth(380)
    late.click()
    expect(popover(root)).to_be_visible()
    expect(popover(root).locator("tbody tr")).to_have_count(10)
    page.wait_for_function(TOKEN_IN_BOX, arg=root.element_handle(), timeout=5_000)
    # Then the keyboard: the next token opens in sight too.
    page.keyboard.press("ArrowRight")
    expect(spans(root).nth(381)).to_have_attribute("aria-expanded", "true")
    page.wait_for_function(TOKEN_IN_BOX, arg=root.element_handle(), timeout=5_000)


def test_keyboard_focus_moves_and_opens_the_alternatives(fe_page: Page) -> None:
    page = fe_page
    root = running(page, show_alternatives=True)
    emit(page, tokens_msg(1, 0, TOKENS))
    # One tab stop for the list (roving tabindex).
    assert spans(root).evaluate_all("(s) => s.map((e) => e.tabIndex)") == [0, -1, -1, -1]
    root.locator(".nbstream-output").focus()
    page.keyboard.press("Tab")
    expect(spans(root).nth(0)).to_be_focused()
    expect(root.get_by_role("dialog", name="Alternatives at step 1")).to_be_visible()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    expect(spans(root).nth(2)).to_be_focused()
    pop = root.get_by_role("dialog", name="Alternatives at step 3")
    expect(pop).to_be_visible()
    expect(pop.locator(".nbstream-alt-chosen .nbstream-alt-token")).to_have_text(" a")
    assert spans(root).evaluate_all("(s) => s.map((e) => e.tabIndex)") == [-1, -1, 0, -1]
    page.keyboard.press("Escape")
    expect(popover(root)).to_be_hidden()
    page.keyboard.press("Enter")
    expect(pop).to_be_visible()
    page.keyboard.press("Escape")
    page.keyboard.press(" ")
    expect(pop).to_be_visible()
    page.keyboard.press("End")
    expect(spans(root).nth(3)).to_be_focused()
    page.keyboard.press("Home")
    expect(spans(root).nth(0)).to_be_focused()
    page.keyboard.press("ArrowLeft")  # stays at the first
    expect(spans(root).nth(0)).to_be_focused()
    # Alternatives off: no longer focusable, the popover goes.
    change(page, "show_alternatives", False)
    change(page, "show_tokens", True)
    expect(popover(root)).to_be_hidden()
    assert spans(root).evaluate_all("(s) => s.map((e) => e.getAttribute('tabindex'))") == [None] * 4


def test_a_pick_outside_the_top_k_says_its_rank(fe_page: Page) -> None:
    page = fe_page
    root = running(page, show_alternatives=True)
    far = tok(999, " zebra", 0.001, 12, alts((262, " the", 0.6, False), (253, " a", 0.25, False)))
    emit(page, tokens_msg(1, 0, [far]))
    spans(root).first.click()
    out = popover(root).locator(".nbstream-alt-outside")
    expect(out).to_be_visible()
    expect(out).to_contain_text("not in the top 2")
    expect(out).to_contain_text("rank 12")
    expect(out).to_contain_text("0.10%")
    expect(popover(root).locator(".nbstream-alt-chosen")).to_have_count(0)


def test_the_popover_stays_open_while_tokens_stream(fe_page: Page) -> None:
    page = fe_page
    root = running(page, show_alternatives=True)
    emit(page, tokens_msg(1, 0, TOKENS[:3]))
    spans(root).nth(1).click()
    pop = root.get_by_role("dialog", name="Alternatives at step 2")
    expect(pop).to_be_visible()
    for k in range(3, 40):
        emit(page, tokens_msg(1, k, [tok(k, f" w{k}", 0.5)]))
    expect(spans(root)).to_have_count(40)
    expect(pop).to_be_visible()
    # The toggle changed elsewhere: the kernel resends from 0, the same step stays open.
    emit(page, tokens_msg(1, 0, [*TOKENS[:3], *[tok(k, f" w{k}", 0.5) for k in range(3, 40)]]))
    expect(pop).to_be_visible()
    expect(spans(root).nth(1)).to_have_attribute("aria-expanded", "true")
    # A step without alternatives (captured before the toggle was on) says so.
    spans(root).nth(5).click()
    expect(root.get_by_role("dialog", name="Alternatives at step 6")).to_contain_text(
        "No alternatives were captured"
    )


# ---------------------------------------------------------------------------------------------
# label, prompt box, the Alternatives (k) setting
# ---------------------------------------------------------------------------------------------


def test_label_and_hidden_prompt(fe_page: Page) -> None:
    page = fe_page
    mount(page, label="temperature 0.7", show_prompt=False, prompt="Name a colour.")
    root = view(page)
    label = root.locator(".nbstream-label")
    expect(label).to_have_text("temperature 0.7")
    # No prompt box: the label sits beside Run and Stop (a row saved in a compare column).
    assert label.evaluate(
        "(e) => e.parentElement.classList.contains('nbstream-prompt-row')"
        " && e.previousElementSibling.classList.contains('nbstream-actions')"
    )
    expect(root.get_by_role("textbox", name="Prompt", exact=True)).to_be_hidden()
    run = root.get_by_role("button", name="Run", exact=True)
    expect(run).to_be_visible()
    expect(root.get_by_role("button", name="Stop", exact=True)).to_be_visible()
    run.click()
    runs = [m for m in sent(page) if m["type"] == "run"]
    # No prompt box, no prompt in the message: the kernel's prompt trait (a compare's
    # shared prompt) is used, not this view's hidden, possibly stale copy.
    assert len(runs) == 1 and "prompt" not in runs[0]
    change(page, "label", "")
    expect(label).to_be_hidden()
    change(page, "show_prompt", True)
    expect(root.get_by_role("textbox", name="Prompt", exact=True)).to_be_visible()


def test_alternatives_setting_in_the_panel(fe_page: Page) -> None:
    page = fe_page
    mount(page, alternatives=None)
    root = view(page)
    root.get_by_role("button", name="Settings", exact=True).click()
    box = root.get_by_role("textbox", name="Alternatives (k)", exact=True)
    expect(box).to_have_value("")
    box.fill("101")
    expect(box).to_have_attribute("aria-invalid", "true")
    expect(box.locator("xpath=..").locator(".nbstream-field-error")).to_have_text(
        "alternatives must be between 0 (off) and 100, got 101"
    )
    box.fill("2.5")
    expect(box.locator("xpath=..").locator(".nbstream-field-error")).to_have_text(
        # The page's instant hint, in the kernel's words (its message replaces it on arrival).
        "alternatives must be an int, got '2.5'"
    )
    box.fill("8")
    expect(box).not_to_have_attribute("aria-invalid", "true")
    root.get_by_role("button", name="Run", exact=True).click()
    runs = [m for m in sent(page) if m["type"] == "run"]
    assert len(runs) == 1 and runs[0]["settings"]["alternatives"] == 8
    change(page, "alternatives", 3)
    expect(box).to_have_value("3")


# ---------------------------------------------------------------------------------------------
# chat
# ---------------------------------------------------------------------------------------------


def chat_root(page: Page):
    return page.locator(".host").nth(0).locator(".nbstream")


def chat_change(page: Page, **values: Any) -> None:
    page.evaluate("(v) => window.views[0].model.changeMany(v)", values)


TRANSCRIPT = [
    user(0, "Hi"),
    answer(0, "Hello, a world", "complete", 1),
    user(1, "Again"),
    answer(1, "Bye", "complete", 2),
]


def test_chat_answers_show_their_own_tokens(chat_page: Page) -> None:
    page = chat_page
    page.evaluate(
        "(s) => window.mount(s, null)", {"_messages": TRANSCRIPT, "run_id": 2, "status": "complete"}
    )
    root = chat_root(page)
    msgs = root.locator(".nbstream-message")
    expect(msgs).to_have_count(4)
    toggle(root, "Tokens").click()
    assert page.evaluate("window.views[0].model.state.show_tokens") is True
    # The kernel sends every turn's tokens by its run_id (offset 0).
    emit(page, tokens_msg(2, 0, [tok(5, "Bye", None, None)]))
    emit(page, tokens_msg(1, 0, TOKENS))
    assert ids(msgs.nth(1)) == [19556, 28, 253, 1345]
    assert ids(msgs.nth(3)) == [5]
    expect(msgs.nth(0).locator(".nbstream-token")).to_have_count(0)  # user messages: text
    expect(msgs.nth(0).locator(".nbstream-message-text")).to_have_text("Hi")
    # Probabilities: one legend; the answer made without them says so, the other does not.
    chat_change(page, show_probabilities=True)
    expect(root.locator(".nbstream-legend")).to_have_count(1)
    expect(msgs.nth(3).locator(".nbstream-token-note")).to_contain_text("without probabilities")
    expect(msgs.nth(1).locator(".nbstream-token-note")).to_have_count(0)
    # Alternatives in a message; opening another message's closes the first.
    chat_change(page, show_alternatives=True)
    spans(msgs.nth(1)).nth(2).click()
    expect(msgs.nth(1).get_by_role("dialog", name="Alternatives at step 3")).to_be_visible()
    expect(msgs.nth(1).locator(".nbstream-alt-cut")).to_have_count(2)
    spans(msgs.nth(3)).first.click()
    expect(msgs.nth(1).locator(".nbstream-alternatives")).to_be_hidden()
    expect(msgs.nth(3).locator(".nbstream-alternatives")).to_contain_text("without probabilities")
    # All off: Markdown again.
    chat_change(page, show_tokens=False, show_probabilities=False, show_alternatives=False)
    expect(root.locator(".nbstream-token")).to_have_count(0)
    expect(msgs.nth(1).locator(".nbstream-output")).to_have_text("Hello, a world")


def test_chat_streaming_answer_gets_tokens_and_a_gap_asks_for_a_sync(chat_page: Page) -> None:
    page = chat_page
    page.evaluate(
        "(s) => window.mount(s, null)",
        {"_messages": TRANSCRIPT[:2], "run_id": 1, "status": "complete", "show_tokens": True},
    )
    root = chat_root(page)
    emit(page, tokens_msg(1, 0, TOKENS))
    chat_change(
        page,
        _messages=[*TRANSCRIPT[:2], user(1, "More"), answer(1, "", "running", 2)],
        run_id=2,
        status="running",
    )
    msgs = root.locator(".nbstream-message")
    expect(msgs).to_have_count(4)
    emit(page, {"type": "delta", "run_id": 2, "offset": 0, "text": "Ok"})
    emit(page, tokens_msg(2, 0, [tok(1, "O")]))
    emit(page, tokens_msg(2, 1, [tok(2, "k")]))
    assert ids(msgs.nth(3)) == [1, 2]
    assert ids(msgs.nth(1)) == [19556, 28, 253, 1345]
    before = syncs(page)
    emit(page, tokens_msg(2, 5, [tok(3, "!")]))
    assert syncs(page) == before + 1
    assert ids(msgs.nth(3)) == [1, 2]
    # Clear chat: the lists go with their messages.
    chat_change(page, _messages=[], run_id=3, status="idle")
    expect(root.locator(".nbstream-token")).to_have_count(0)
    page.evaluate("window.views[0].cleanup()")
    assert page.evaluate("window.views[0].model.listenerCount()") == 0


@pytest.mark.parametrize("bundle", ["widget", "chat"])
def test_views_look_deliberate_in_both_themes(fe_page: Page, fe_server: str, bundle: str) -> None:
    """Screenshots of the token views in the light and dark themes (test-artifacts/)."""

    page = fe_page
    if bundle == "chat":
        page.goto(f"{fe_server}/tests/frontend/harness.html?bundle=chat")
        page.wait_for_function("window.__ready === true")
    state: dict[str, Any] = {
        "status": "complete",
        "run_id": 1,
        "show_tokens": True,
        "show_probabilities": True,
        "show_alternatives": True,
    }
    if bundle == "chat":
        state["_messages"] = TRANSCRIPT[:2]
    else:
        state["label"] = "temperature 0.7"
    out = REPO / "test-artifacts"
    out.mkdir(exist_ok=True)
    for theme in ("light", "dark"):
        page.evaluate("(t) => document.body.classList.toggle('theme-dark', t === 'dark')", theme)
        k = page.evaluate("(s) => window.mount(s, null)", state)
        root = page.locator(".host").nth(k).locator(".nbstream")
        emit(page, {"type": "reset", "run_id": 1, "view": None, "text": "Hello, a world"}, k)
        emit(
            page,
            tokens_msg(
                1, 0, [*TOKENS, tok(13, "\n", 0.4), tok(2, "<|im_end|>", 0.99, kind="special")]
            ),
            k,
        )
        spans(root).nth(2).click()
        expect(popover(root)).to_be_visible()
        # The popover is not clipped by the output: its last row can be seen (and hit).
        last = popover(root).locator("tbody tr").last
        assert last.evaluate(
            """(e) => {
                const r = e.getBoundingClientRect();
                const hit = document.elementFromPoint(r.left + 4, r.top + r.height / 2);
                return !!hit && e.contains(hit);
            }"""
        )
        root.screenshot(path=str(out / f"tokens-{bundle}-{theme}.png"))


MARK = {"step": 2, "words": "Columns part at token 3: ' a' / ' the'"}


def test_the_parting_mark_is_drawn_when_the_tokens_come_after_it(fe_page: Page) -> None:
    """Tokens turned on after the run, a second view, a reload: the tokens come after
    compare_mark, and the token it names is marked all the same."""
    page = fe_page
    mount(page, status="complete", run_id=1, show_prompt=False, compare_mark=MARK, show_tokens=True)
    root = view(page)
    expect(root.locator(".nbstream-parted")).to_have_text(MARK["words"])
    emit(page, tokens_msg(1, 0, TOKENS))
    frame(page)
    expect(spans(root)).to_have_count(len(TOKENS))
    expect(root.locator(".nbstream-token-parted")).to_have_count(1)
    expect(spans(root).nth(2)).to_have_class(re.compile(r"nbstream-token-parted"))
    # A second view of the same widget, made now: the same mark.
    mount(page, share_with=0)
    emit(page, tokens_msg(1, 0, TOKENS))
    frame(page)
    expect(spans(view(page, 1))).to_have_count(len(TOKENS))
    expect(view(page, 1).locator(".nbstream-token-parted")).to_have_count(1)


def test_a_disconnected_view_offers_nothing_that_needs_the_kernel(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="complete", run_id=1, show_alternatives=True)
    root = view(page)
    emit(page, tokens_msg(1, 0, TOKENS))
    frame(page)
    page.evaluate("() => window.views[0].model.fire('comm_live_update')")
    expect(root).to_have_attribute("data-connection", "lost")
    spans(root).nth(2).click()
    pop = root.locator(".nbstream-alternatives")
    expect(pop).to_be_visible()
    expect(pop.get_by_role("button", name="How was this picked?")).to_have_count(0)
    expect(pop.locator(".nbstream-branch-continue")).to_have_count(0)
    expect(pop).to_contain_text("Disconnected")
    # Said once for the popover, not once per action it leaves out.
    expect(pop.locator(".nbstream-no-kernel-note")).to_have_count(1)
    assert pop.inner_text().count("Disconnected") == 1, pop.inner_text()
    enabled = pop.locator("button:enabled")
    expect(enabled).to_have_count(0)
