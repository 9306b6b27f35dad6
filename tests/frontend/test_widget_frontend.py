"""Front-end tests of the StreamWidget view (nbstream/static/stream.js).

The built bundle runs in headless Chromium against a fake anywidget model
(tests/frontend/harness.html); see conftest.py for the fixtures.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from frontend_helpers import REPO, change, delta, emit, frame, log, mount, sent, view, view_id
from playwright.sync_api import Page, expect

STATUSES = ["idle", "queued", "running", "complete", "failed", "cancelled"]


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def without_settings(message: dict) -> dict:
    """A Run / Send message less the panel's values it carries (checked on their own)."""
    assert isinstance(message.get("settings"), dict), message
    return {k: v for k, v in message.items() if k != "settings"}


def stream(page: Page, text: str, i: int = 0, **opts: Any) -> int:
    return page.evaluate("([i, t, o]) => window.stream(i, t, o)", [i, text, opts])


def output_text(page: Page, i: int = 0) -> str:
    return view(page, i).locator(".nbstream-output").inner_text()


# ---------------------------------------------------------------------------
# DOM contract
# ---------------------------------------------------------------------------


def test_dom_hooks_when_idle(fe_page: Page) -> None:
    page = fe_page
    mount(page)
    root = view(page)
    expect(root).to_have_attribute("data-status", "idle")
    prompt = page.get_by_role("textbox", name="Prompt", exact=True)
    expect(prompt).to_have_count(1)
    assert prompt.evaluate("e => e.tagName") == "TEXTAREA"
    expect(page.get_by_role("button", name="Run", exact=True)).to_be_enabled()
    expect(page.get_by_role("button", name="Stop", exact=True)).to_be_disabled()
    expect(page.get_by_role("button", name="Raw text", exact=True)).to_have_attribute(
        "aria-pressed", "false"
    )
    out = root.locator(".nbstream-output")
    expect(out).to_have_count(1)
    # A log that does not read out each fragment: the view's status region says the end once.
    expect(out).to_have_attribute("role", "log")
    expect(out).to_have_attribute("aria-live", "off")
    expect(out).to_have_attribute("data-partial", "false")
    expect(root.locator(".nbstream-error")).to_have_count(0)
    expect(root.locator(".nbstream-badge")).to_have_text(re.compile(r"^idle"))
    assert out.evaluate("e => getComputedStyle(e).overflowY") == "auto"
    assert out.evaluate("e => getComputedStyle(e).maxHeight") != "none"
    # One sync, with a view id, on render.
    syncs = [m for m in sent(page) if m["type"] == "sync"]
    assert len(syncs) == 1
    assert isinstance(syncs[0]["view"], str) and len(syncs[0]["view"]) >= 8
    assert not any(m["type"] != "sync" for m in sent(page))


@pytest.mark.parametrize("status", STATUSES)
def test_status_drives_badge_and_buttons(fe_page: Page, status: str) -> None:
    page = fe_page
    mount(page)
    change(page, "status", status)
    root = view(page)
    expect(root).to_have_attribute("data-status", status)
    badge = root.locator(".nbstream-badge")
    expect(badge).to_contain_text(status)
    expect(badge).to_have_attribute("data-status", status)
    run = page.get_by_role("button", name="Run", exact=True)
    stop = page.get_by_role("button", name="Stop", exact=True)
    if status in ("queued", "running"):
        expect(run).to_be_disabled()
        expect(stop).to_be_enabled()
    else:
        expect(run).to_be_enabled()
        expect(stop).to_be_disabled()


def test_badge_differs_by_look_not_only_colour(fe_page: Page) -> None:
    page = fe_page
    mount(page)
    looks = {}
    for status in STATUSES:
        change(page, "status", status)
        looks[status] = page.evaluate(
            """() => {
                const b = document.querySelector('.nbstream-badge');
                const cs = getComputedStyle(b);
                const icon = b.querySelector('.nbstream-badge-icon');
                const ics = getComputedStyle(icon);
                return [b.textContent, cs.borderTopStyle, cs.borderLeftWidth, cs.borderRadius,
                        ics.animationName].join('|');
            }"""
        )
    assert len(set(looks.values())) == len(STATUSES), looks
    assert "nbstream-spin" in looks["running"]
    for status in ("complete", "failed", "cancelled"):
        assert "nbstream-spin" not in looks[status]


def test_run_button_saves_prompt_then_sends_run(fe_page: Page) -> None:
    page = fe_page
    mount(page, prompt="hello")
    prompt = page.get_by_role("textbox", name="Prompt")
    expect(prompt).to_have_value("hello")
    prompt.fill("Why is the sky blue?")
    page.get_by_role("button", name="Run", exact=True).click()
    entries = log(page)
    runs = [k for k, e in enumerate(entries) if e[0] == "send" and e[1]["type"] == "run"]
    assert len(runs) == 1
    assert without_settings(entries[runs[0]][1]) == {
        "type": "run",
        "prompt": "Why is the sky blue?",
    }
    before = entries[: runs[0]]
    sets = [k for k, e in enumerate(before) if e[:2] == ["set", "prompt"]]
    assert sets and before[sets[-1]][2] == "Why is the sky blue?"
    assert ["save"] in before[sets[-1] :], "prompt not saved before the run message"


@pytest.mark.parametrize("combo", ["Shift+Enter", "Control+Enter"])
def test_keyboard_shortcut_runs(fe_page: Page, combo: str) -> None:
    page = fe_page
    mount(page)
    prompt = page.get_by_role("textbox", name="Prompt")
    prompt.fill("line one")
    prompt.press("Enter")  # plain Enter: a newline, no run
    prompt.press_sequentially("line two")
    assert not [m for m in sent(page) if m["type"] == "run"]
    prompt.press(combo)
    runs = [m for m in sent(page) if m["type"] == "run"]
    assert [without_settings(r) for r in runs] == [{"type": "run", "prompt": "line one\nline two"}]
    expect(prompt).to_have_value("line one\nline two")  # the shortcut adds no newline
    assert page.evaluate("window.views[0].model.get('prompt')") == "line one\nline two"


def test_prompt_is_marked_to_suppress_notebook_shortcuts(fe_page: Page) -> None:
    page = fe_page
    mount(page)
    prompt = page.get_by_role("textbox", name="Prompt")
    expect(prompt).to_have_attribute("data-lm-suppress-shortcuts", "true")
    # The Shift+Enter keydown does not bubble to the notebook.
    page.evaluate(
        "window.__bubbled = 0;"
        "document.addEventListener('keydown', e => { if (e.key === 'Enter') window.__bubbled++ })"
    )
    prompt.press("Shift+Enter")
    assert page.evaluate("window.__bubbled") == 0


def test_no_run_while_active_and_stop_sends_stop(fe_page: Page) -> None:
    page = fe_page
    mount(page)
    change(page, "status", "running")
    prompt = page.get_by_role("textbox", name="Prompt")
    prompt.fill("again")
    prompt.press("Shift+Enter")
    assert not [m for m in sent(page) if m["type"] == "run"]
    page.get_by_role("button", name="Stop", exact=True).click()
    assert [m for m in sent(page) if m["type"] == "stop"] == [{"type": "stop"}]


def test_prompt_typing_is_saved_debounced_and_python_updates_it(fe_page: Page) -> None:
    page = fe_page
    mount(page)
    prompt = page.get_by_role("textbox", name="Prompt")
    prompt.press_sequentially("abc")
    page.wait_for_function("window.views[0].model.get('prompt') === 'abc'", timeout=3000)
    saves = [e for e in log(page) if e == ["save"]]
    assert 1 <= len(saves) <= 2, "typing should be debounced into few saves"
    change(page, "prompt", "set from Python")
    expect(prompt).to_have_value("set from Python")


# ---------------------------------------------------------------------------
# streaming and Markdown
# ---------------------------------------------------------------------------

DOC = """# Plan

Some *emphasis* and `inline code` and a [link](https://example.com/docs).

- first item
- second item
- third item

1. one
2. two

| name | value |
|------|------:|
| a    |     1 |
| b    |     2 |

```python
def hello():
    print("hi")

    return 1
```

Final paragraph with an emoji 😀 and more text.
"""


def test_deltas_render_markdown_incrementally(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="running", run_id=1)
    stream(page, DOC, runId=1, chunk=5)
    out = view(page).locator(".nbstream-output")
    expect(out.locator("h1")).to_have_text("Plan")
    expect(out.locator("em")).to_have_text("emphasis")
    expect(out.locator("ul > li")).to_have_count(3)
    expect(out.locator("ol > li")).to_have_count(2)
    expect(out.locator("table tr")).to_have_count(3)
    expect(out.locator("table td").nth(1)).to_have_text("1")
    code = out.locator("pre code")
    expect(code).to_have_count(1)
    expect(code).to_have_text('def hello():\n    print("hi")\n\n    return 1\n')
    expect(code).to_have_class(re.compile("language-python"))
    expect(out.get_by_role("button", name="Copy code", exact=True)).to_have_count(1)
    link = out.get_by_role("link", name="link")
    expect(link).to_have_attribute("href", "https://example.com/docs")
    expect(link).to_have_attribute("target", "_blank")
    expect(link).to_have_attribute("rel", "noopener noreferrer")
    expect(out).to_contain_text("emoji 😀 and more text.")
    # Streaming gaps never happened: only the initial sync was sent.
    assert [m["type"] for m in sent(page)] == ["sync"]
    # Each completed block was committed into its own node.
    assert out.locator(".nbstream-block").count() >= 7


def test_streamed_dom_equals_one_shot_dom(fe_page: Page) -> None:
    """However the text is chunked, the final DOM is the same as rendering it at once."""
    page = fe_page
    for _ in range(3):
        mount(page, status="running", run_id=1)
    stream(page, DOC, i=0, runId=1, chunk=2)
    stream(page, DOC, i=1, runId=1, chunk=9)
    emit(page, {"type": "reset", "run_id": 1, "view": None, "text": DOC}, i=2)
    frame(page)
    html = [view(page, i).locator(".nbstream-rendered").inner_html() for i in range(3)]
    assert "<table>" in html[2]
    assert html[0] == html[2]
    assert html[1] == html[2]


def test_raw_text_toggle_shows_exact_text(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="running", run_id=2)
    stream(page, DOC, runId=2, chunk=7)
    toggle = page.get_by_role("button", name="Raw text", exact=True)
    toggle.click()
    expect(toggle).to_have_attribute("aria-pressed", "true")
    out = view(page).locator(".nbstream-output")
    pre = out.locator("pre")
    expect(pre).to_have_count(1)
    assert pre.evaluate("e => e.textContent") == DOC
    expect(out.locator("table")).to_have_count(0)
    # Text keeps streaming into the raw view.
    stream(page, "\n\nmore *text*", runId=2, offset=len(DOC), chunk=4)
    assert pre.evaluate("e => e.textContent") == DOC + "\n\nmore *text*"
    toggle.click()
    expect(toggle).to_have_attribute("aria-pressed", "false")
    expect(out.locator("table")).to_have_count(1)
    expect(out.locator("em").last).to_have_text("text")


def test_copy_button_copies_code(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="complete", run_id=1)
    page.evaluate(
        """() => Object.defineProperty(navigator.clipboard, 'writeText',
            {value: async (t) => { window.__copied = t; }, configurable: true})"""
    )
    emit(page, {"type": "reset", "run_id": 1, "view": None, "text": "```sh\nls -la\n```\n"})
    button = page.get_by_role("button", name="Copy code", exact=True)
    button.click()
    page.wait_for_function("window.__copied === 'ls -la\\n'")
    expect(button).to_contain_text("Copied")


def test_copy_button_falls_back_without_clipboard_api(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="complete", run_id=1)
    page.evaluate(
        """() => {
            Object.defineProperty(navigator, 'clipboard', {value: undefined, configurable: true});
            document.execCommand = (cmd) => {
                window.__execCopy = [cmd, document.activeElement.value];
                return true;
            };
        }"""
    )
    emit(page, {"type": "reset", "run_id": 1, "view": None, "text": "```\nx = 1\n```"})
    page.get_by_role("button", name="Copy code", exact=True).click()
    page.wait_for_function("window.__execCopy !== undefined")
    assert page.evaluate("window.__execCopy") == ["copy", "x = 1\n"]
    expect(page.locator(".nbstream-copy-buffer")).to_have_count(0)


def test_code_point_offsets(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="running", run_id=3)
    emit(page, delta(3, 0, "a😀"))  # 2 code points, 3 UTF-16 units
    emit(page, delta(3, 2, "b🎉c"))  # offset counts code points
    emit(page, delta(3, 5, "!"))
    frame(page)
    expect(view(page).locator(".nbstream-output")).to_have_text("a😀b🎉c!")
    assert [m["type"] for m in sent(page)] == ["sync"]


# ---------------------------------------------------------------------------
# gaps, sync and reset
# ---------------------------------------------------------------------------


def test_gap_sends_sync_and_reset_recovers(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="running", run_id=1)
    vid = view_id(page)
    emit(page, delta(1, 0, "Hello "))
    emit(page, delta(1, 10, "LOST"))  # offset 10 != 6: a gap
    frame(page)
    out = view(page).locator(".nbstream-output")
    expect(out).to_have_text("Hello")
    syncs = [m for m in sent(page) if m["type"] == "sync"]
    assert len(syncs) == 2 and syncs[0] == syncs[1]
    assert syncs[0]["view"] == vid and isinstance(syncs[0]["page"], str) and syncs[0]["page"]
    emit(page, delta(1, 14, "more"))  # still gapped: no sync storm
    assert len([m for m in sent(page) if m["type"] == "sync"]) == 2
    emit(page, {"type": "reset", "run_id": 1, "view": vid, "text": "Hello there, friend"})
    frame(page)
    expect(out).to_have_text("Hello there, friend")
    emit(page, delta(1, 19, "!"))
    frame(page)
    expect(out).to_have_text("Hello there, friend!")
    assert len([m for m in sent(page) if m["type"] == "sync"]) == 2


def test_removal_from_an_open_notebook_is_reported_once(fe_page: Page) -> None:
    """A view disposed inside a notebook that stays open (a cleared output) tells the
    kernel, with the page id it synced with; elsewhere a disposed view says nothing."""
    page = fe_page
    mount(page, status="running", run_id=1)  # not inside a notebook
    page.evaluate("document.body.classList.add('jp-Notebook')")
    mount(page, status="running", run_id=1)  # inside one
    page.evaluate("window.views[0].cleanup(); window.views[1].cleanup()")
    assert [m["type"] for m in sent(page, 0)] == ["sync"]
    sync, removed = sent(page, 1)
    assert removed == {"type": "removed", "view": sync["view"], "page": sync["page"]}
    page.evaluate("document.body.classList.remove('jp-Notebook')")


def test_reset_ahead_of_deltas_is_not_a_gap(fe_page: Page) -> None:
    """A reset may carry text the next delta repeats: the overlap is dropped, no sync."""
    page = fe_page
    mount(page, status="running", run_id=1)
    vid = view_id(page)
    emit(page, delta(1, 0, "ab😀"))
    emit(page, {"type": "reset", "run_id": 1, "view": vid, "text": "ab😀cd🎉e"})
    emit(page, delta(1, 3, "cd🎉efg"))  # overlaps "cd🎉e", adds "fg"
    emit(page, delta(1, 5, "🎉"))  # entirely old: ignored
    emit(page, delta(1, 9, "h"))
    frame(page)
    out = view(page).locator(".nbstream-output")
    expect(out).to_have_text("ab😀cd🎉efgh")
    assert [m["type"] for m in sent(page)] == ["sync"]
    # An overlap that disagrees with the text is a gap.
    emit(page, delta(1, 7, "XYZ"))
    frame(page)
    expect(out).to_have_text("ab😀cd🎉efgh")
    assert [m["type"] for m in sent(page)] == ["sync", "sync"]


def test_delta_for_unknown_newer_run_is_a_gap(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="running", run_id=1)
    emit(page, delta(2, 0, "new run"))
    assert [m["type"] for m in sent(page)] == ["sync", "sync"]
    emit(page, {"type": "reset", "run_id": 2, "view": None, "text": "new run text"})
    frame(page)
    expect(view(page).locator(".nbstream-output")).to_have_text("new run text")
    # A late delta of the older run is ignored without a sync.
    emit(page, delta(1, 0, "old"))
    frame(page)
    expect(view(page).locator(".nbstream-output")).to_have_text("new run text")
    assert [m["type"] for m in sent(page)] == ["sync", "sync"]


def test_reset_replaces_text_and_respects_view(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="running", run_id=1)
    mount(page, share_with=0)  # a second display() of the same model
    v0, v1 = view_id(page, nth=0), view_id(page, nth=1)
    assert v0 != v1
    stream(page, "first words", runId=1)
    out0 = view(page, 0).locator(".nbstream-output")
    out1 = view(page, 1).locator(".nbstream-output")
    expect(out0).to_have_text("first words")
    expect(out1).to_have_text("first words")
    emit(page, {"type": "reset", "run_id": 1, "view": v1, "text": "only view one"})
    frame(page)
    expect(out0).to_have_text("first words")
    expect(out1).to_have_text("only view one")
    emit(page, {"type": "reset", "run_id": 1, "view": None, "text": "# Everyone\n\nnew"})
    frame(page)
    for out in (out0, out1):
        expect(out.locator("h1")).to_have_text("Everyone")
        expect(out.locator("p")).to_have_text("new")


def test_view_created_mid_stream_catches_up(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="running", run_id=4)
    stream(page, "Already streamed text. ", runId=4)
    mount(page, share_with=0)
    v1 = view_id(page, nth=1)
    # The late view cannot use deltas until it has the text: it waits for reset.
    emit(page, delta(4, 23, "ignored until reset "))
    emit(
        page,
        {
            "type": "reset",
            "run_id": 4,
            "view": v1,
            "text": "Already streamed text. ignored until reset ",
        },
    )
    emit(page, delta(4, 43, "then follows."))
    frame(page)
    expected = "Already streamed text. ignored until reset then follows."
    expect(view(page, 0).locator(".nbstream-output")).to_have_text(expected)
    expect(view(page, 1).locator(".nbstream-output")).to_have_text(expected)


def test_new_run_id_clears_output_and_live_counters(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="complete", run_id=1)
    emit(page, {"type": "reset", "run_id": 1, "view": None, "text": "old answer"})
    frame(page)
    change(page, "run_id", 2)
    change(page, "status", "queued")
    frame(page)
    out = view(page).locator(".nbstream-output")
    expect(out).to_have_text("")
    expect(out).to_have_attribute("data-partial", "false")
    emit(page, delta(2, 0, "fresh"))
    frame(page)
    expect(out).to_have_text("fresh")


# ---------------------------------------------------------------------------
# untrusted output
# ---------------------------------------------------------------------------

HOSTILE = """<script>window.__pwned=1</script>

<img src=x onerror="window.__pwned=1">

<iframe src="javascript:window.__pwned=1"></iframe>

[click me](javascript:window.__pwned=1)

[encoded](&#106;avascript:window.__pwned=1)

<a href="javascript:window.__pwned=1">raw anchor</a>

<div onclick="window.__pwned=1" onmouseover="window.__pwned=1">hover div</div>

![tracker](https://example.com/pixel.png?leak=secret)

![x](x" onerror="window.__pwned=1)

<svg onload="window.__pwned=1"></svg>

```html
<script>window.__pwned=1</script>
```

`<img src=x onerror=window.__pwned=1>`
"""


@pytest.mark.parametrize("how", ["stream", "reset"])
def test_hostile_payloads_stay_inert(fe_page: Page, how: str) -> None:
    page = fe_page
    mount(page, status="running", run_id=1)
    if how == "stream":
        stream(page, HOSTILE, runId=1, chunk=3)
    else:
        emit(page, {"type": "reset", "run_id": 1, "view": None, "text": HOSTILE})
        frame(page)
    change(page, "status", "complete")
    frame(page)
    out = view(page).locator(".nbstream-output")
    expect(out).to_contain_text("window.__pwned=1")  # shown as text
    for tag in ("script", "img", "iframe", "svg", "object", "embed", "style"):
        expect(out.locator(tag)).to_have_count(0)
    handlers = out.evaluate(
        """e => [...e.querySelectorAll('*')].flatMap(n => [...n.attributes]
              .filter(a => a.name.startsWith('on') || /javascript:/i.test(a.value))
              .map(a => n.tagName + ' ' + a.name))"""
    )
    assert handlers == []
    for a in out.locator("a").all():
        href = a.get_attribute("href")
        assert href is None or href.startswith(("https:", "http:", "mailto:")), href
    # The image is a link to click, not a request made on the reader's behalf.
    expect(out.locator(".nbstream-image-link").first).to_contain_text("tracker")
    # Click the javascript: links and hover the div.
    out.get_by_text("click me").click()
    out.get_by_text("encoded").click()
    out.get_by_text("raw anchor").first.click()
    out.get_by_text("hover div").first.hover()
    page.wait_for_timeout(100)
    assert page.evaluate("typeof window.__pwned") == "undefined"
    expect(out.locator("pre code")).to_contain_text("<script>window.__pwned=1</script>")


# ---------------------------------------------------------------------------
# partial output, errors, metrics
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "partial", "label"),
    [
        ("running", "true", None),
        ("queued", "true", None),
        ("complete", "false", None),
        ("cancelled", "true", "Partial output — stopped before its end"),
        ("failed", "true", "Partial output — run failed"),
        ("idle", "false", None),
    ],
)
def test_partial_marking(fe_page: Page, status: str, partial: str, label: str | None) -> None:
    page = fe_page
    mount(page, status="running", run_id=1)
    out = view(page).locator(".nbstream-output")
    expect(out).to_have_attribute("data-partial", "false")  # no text yet
    emit(page, delta(1, 0, "Some partial answer"))
    change(page, "status", status)
    frame(page)
    expect(out).to_have_attribute("data-partial", partial)
    labels = view(page).locator(".nbstream-partial-label")
    if label is None:
        expect(labels).to_have_count(0)
    else:
        expect(labels).to_have_text(label)
        expect(labels).to_be_visible()
    expect(out).to_have_text("Some partial answer")


@pytest.mark.parametrize("reason", ["length", "eos", "stop"])
def test_an_answer_cut_at_max_new_tokens_says_so(fe_page: Page, reason: str) -> None:
    """A length stop is a normal end (complete), but the badge and the output say it
    stopped at max_new_tokens; an answer that ended on its own says nothing more."""
    page = fe_page
    mount(page, status="running", run_id=1)
    emit(page, delta(1, 0, "The answer was cut mid"))
    page.evaluate(
        "([r]) => window.views[0].model.changeMany("
        "{status: 'complete', metrics: {tokens: 6, finish_reason: r}})",
        [reason],
    )
    frame(page)
    root = view(page)
    badge = root.locator(".nbstream-badge")
    expect(root).to_have_attribute("data-status", "complete")
    mark = root.locator(":scope > .nbstream-cut")
    if reason == "length":
        expect(badge).to_have_text(re.compile(r"^complete · stopped at max_new_tokens"))
        expect(badge).to_have_class(re.compile(r"\bnbstream-cut\b"))
        expect(mark).to_be_visible()
        expect(mark).to_contain_text("stopped at max_new_tokens")
        expect(root.locator(".nbstream-output")).to_have_attribute("data-cut", "true")
    else:
        expect(badge).to_have_text(re.compile(r"^complete\s*✓$"))
        expect(badge).not_to_have_class(re.compile(r"\bnbstream-cut\b"))
        expect(mark).to_have_count(0)
    # A new run clears the mark.
    page.evaluate(
        "() => window.views[0].model.changeMany({run_id: 2, status: 'running', metrics: {}})"
    )
    expect(root.locator(":scope > .nbstream-cut")).to_have_count(0)
    expect(badge).not_to_have_class(re.compile(r"\bnbstream-cut\b"))


@pytest.mark.parametrize(
    ("status", "reason", "error"),
    [("cancelled", "cancelled", None), ("complete", "length", None),
     ("failed", "error", {"type": "RuntimeError", "message": "boom"})],
)  # fmt: skip
def test_the_status_line_says_each_end_once(
    fe_page: Page, status: str, reason: str, error: dict | None
) -> None:
    """The badge (or the error) says how a run ended: the metrics line does not say it
    again, and never with a raw finish reason."""
    page = fe_page
    mount(page, status="running", run_id=1)
    emit(page, delta(1, 0, "Some partial answer"))
    page.evaluate(
        "([s, r, e]) => window.views[0].model.changeMany("
        "{status: s, error_info: e, metrics: {tokens: 4, elapsed_s: 1.0, finish_reason: r}})",
        [status, reason, error],
    )
    frame(page)
    metrics = view(page).locator(".nbstream-metrics")
    expect(metrics).to_have_text("4 tokens · 1.0 s")
    words = view(page).inner_text()
    assert words.count("cancelled") <= 1 and reason not in metrics.inner_text(), words


def test_a_replay_of_a_saved_run_does_not_claim_its_end(fe_page: Page) -> None:
    """No kernel answers (a saved notebook): while Replay plays the run again, the badge
    says so, not the end the run reaches only when the replay does."""
    page = fe_page
    text = "One two three four"
    snapshot = {"v": 1, "run_id": 1, "text": text, "steps": [400, 4, 400, 4, 400, 6, 400, 5]}
    mount(page, status="complete", run_id=1, snapshot=snapshot,
          metrics={"tokens": 4, "finish_reason": "length"})  # fmt: skip
    root = view(page)
    badge = root.locator(".nbstream-badge")
    expect(root.locator(".nbstream-saved")).to_be_visible(timeout=10_000)
    expect(badge).to_have_text(re.compile(r"^complete · stopped at max_new_tokens"))
    root.locator(".nbstream-replay").click()
    expect(root).to_have_attribute("data-replay", "playing")
    expect(badge).to_have_text(re.compile(r"^replaying"))
    expect(root).not_to_have_attribute("data-replay", "playing", timeout=10_000)
    expect(badge).to_have_text(re.compile(r"^complete · stopped at max_new_tokens"))


def assert_disconnected(page: Page, i: int = 0) -> None:
    root = view(page, i)
    expect(root).to_have_attribute("data-connection", "lost")
    expect(root.locator(".nbstream-disconnected")).to_have_text(
        "Disconnected: the kernel restarted: run the cell again"
    )
    expect(root.locator(".nbstream-badge")).to_have_text(re.compile(r"^disconnected"))
    for name in ("Run", "Stop"):
        expect(root.get_by_role("button", name=name, exact=True)).to_be_disabled()
    expect(root.get_by_role("textbox", name="Prompt", exact=True)).to_be_disabled()
    expect(root.get_by_role("button", name="Raw text", exact=True)).to_be_enabled()


def test_a_view_whose_kernel_restarted_shows_disconnected(fe_page: Page) -> None:
    """JupyterLab's widget manager sets comm_live false on a kernel restart (the model
    triggers comm_live_update): the view says so and its controls are disabled."""
    page = fe_page
    mount(page, status="running", run_id=1, prompt="Hello")
    emit(page, delta(1, 0, "Half an answer"))
    page.evaluate("() => window.views[0].model.fire('comm_live_update')")
    assert_disconnected(page)
    expect(view(page).locator(".nbstream-output")).to_have_attribute("aria-busy", "false")
    before = len(sent(page))
    page.evaluate("() => window.views[0].model.change('status', 'running')")  # a redraw
    assert_disconnected(page)
    page.locator(".nbstream-prompt").press("Shift+Enter")
    assert len(sent(page)) == before  # nothing is sent to a kernel that is gone


def test_a_send_that_throws_cannot_send_disconnects_without_an_uncaught_error(
    fe_page: Page,
) -> None:
    """@jupyterlab/services' Comm.send throws "Cannot send" once the kernel restarted: the
    view's first message (its sync) fails, and it shows disconnected; nothing is uncaught
    (the fixture fails the test on any page error)."""
    page = fe_page
    mount(page)
    # Every send of a model made from now on throws, as a comm of a restarted kernel does.
    page.evaluate(
        "() => { Object.getPrototypeOf(window.views[0].model).send = () => {"
        " throw new Error('Cannot send'); }; }"
    )
    mount(page)
    assert_disconnected(page, 1)
    view(page, 1).get_by_role("button", name="Raw text", exact=True).click()  # still works
    expect(view(page, 0)).not_to_have_attribute("data-connection", "lost")


def test_empty_cancelled_run_is_not_partial(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="cancelled", run_id=1)
    expect(view(page).locator(".nbstream-output")).to_have_attribute("data-partial", "false")
    expect(view(page).locator(".nbstream-partial-label")).to_have_count(0)


@pytest.mark.parametrize(
    ("status", "says"),
    [("failed", "the run failed before its first token"),
     ("cancelled", "the run was stopped before its first token")],
)  # fmt: skip
def test_a_run_that_ended_with_no_text_never_promises_output(
    fe_page: Page, status: str, says: str
) -> None:
    page = fe_page
    mount(page, status="running", run_id=1)
    out = view(page).locator(".nbstream-output")
    placeholder = "(el) => getComputedStyle(el, '::before').content"
    assert "Output appears here." in out.evaluate(placeholder)  # while it may still come
    page.evaluate(
        "([s]) => window.views[0].model.changeMany({status: s, metrics: {tokens: 0},"
        " error_info: s === 'failed' ? {type: 'RuntimeError', message: 'boom'} : null})",
        [status],
    )
    frame(page)
    expect(view(page)).to_have_attribute("data-status", status)
    shown = out.evaluate(placeholder)
    assert "Output appears here." not in shown and says in shown, shown


def test_error_shown_only_when_failed(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="running", run_id=1)
    root = view(page)
    change(page, "error_info", {"type": "RuntimeError", "message": "CUDA out of memory"})
    expect(root.locator(".nbstream-error")).to_have_count(0)
    change(page, "status", "failed")
    err = root.locator(".nbstream-error")
    expect(err).to_be_visible()
    expect(err).to_have_text("RuntimeError: CUDA out of memory")
    expect(root.locator(".nbstream-badge")).to_contain_text("failed")
    change(page, "run_id", 2)
    change(page, "error_info", None)
    change(page, "status", "queued")
    expect(root.locator(".nbstream-error")).to_have_count(0)


def test_input_error_shown_with_the_prompt(fe_page: Page) -> None:
    page = fe_page
    mount(page)
    root = view(page)
    expect(root.locator(".nbstream-input-error")).to_have_count(0)
    change(page, "input_error", "prompt must not be empty")
    err = root.locator(".nbstream-input-error")
    expect(err).to_have_text("prompt must not be empty")
    prompt = page.get_by_role("textbox", name="Prompt")
    expect(prompt).to_have_attribute("aria-invalid", "true")
    expect(prompt).to_have_accessible_description("prompt must not be empty")
    change(page, "input_error", "")
    expect(root.locator(".nbstream-input-error")).to_have_count(0)
    expect(prompt).not_to_have_attribute("aria-invalid", "true")


def test_metrics_line_live_and_final(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="running", run_id=1, metrics={"queued_s": 0.01})
    metrics = view(page).locator(".nbstream-metrics")
    emit(page, delta(1, 0, "abc", tokens=5, elapsed_s=0.5))
    expect(metrics).to_have_text("5 tokens · 0.50 s")
    emit(page, delta(1, 3, "def", tokens=42, elapsed_s=2.25))
    expect(metrics).to_have_text("42 tokens · 2.3 s")
    change(
        page,
        "metrics",
        {
            "queued_s": 0.01,
            "ttft_s": 0.21,
            "first_chunk_s": 0.25,
            "tokens": 128,
            "tokens_per_s": 18.3,
            "elapsed_s": 7.2,
            "finish_reason": "eos",
        },
    )
    change(page, "status", "complete")
    # Why it ended, in words: the raw finish reason is for the tooltip.
    expect(metrics).to_have_text(
        "128 tokens · first token 0.21 s · 18.3 tok/s · 7.2 s · ended by the model"
    )
    expect(metrics).to_have_attribute("title", re.compile(r"finish_reason: eos$"))
    change(page, "run_id", 2)
    change(page, "metrics", {k: None for k in ("tokens", "ttft_s", "elapsed_s")})
    change(page, "status", "queued")
    expect(metrics).to_have_text("")


# ---------------------------------------------------------------------------
# lifecycle
# ---------------------------------------------------------------------------


def test_cleanup_removes_everything(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="running", run_id=1)
    assert page.evaluate("window.views[0].model.listenerCount()") > 0
    emit(page, delta(1, 0, "before cleanup"))
    page.get_by_role("textbox", name="Prompt").press_sequentially("typing")  # debounce pending
    # Clean up right after a delta: a frame and a timer are pending.
    page.evaluate(
        """() => {
            window.views[0].model.msg({type: 'delta', run_id: 1, offset: 14, text: ' + more'});
            window.views[0].cleanup();
        }"""
    )
    assert page.evaluate("window.views[0].model.listenerCount()") == 0
    html = view(page).evaluate("e => e.outerHTML")
    renders = page.evaluate("window.__nbstreamRenderTimes.length")
    n_sent = len(sent(page))
    n_log = len(log(page))
    for name, value in [("status", "complete"), ("run_id", 9), ("prompt", "x")]:
        change(page, name, value)
    emit(page, delta(9, 0, "after"))
    emit(page, delta(1, 99, "gap"))
    emit(page, {"type": "reset", "run_id": 9, "view": None, "text": "after"})
    page.wait_for_timeout(600)  # longer than the prompt debounce
    frame(page)
    assert view(page).evaluate("e => e.outerHTML") == html
    assert page.evaluate("window.__nbstreamRenderTimes.length") == renders
    assert len(sent(page)) == n_sent
    assert len(log(page)) == n_log
    # DOM listeners are gone too.
    page.get_by_role("button", name="Raw text").click()
    page.get_by_role("textbox", name="Prompt").press("Shift+Enter")
    assert len(sent(page)) == n_sent
    expect(page.get_by_role("button", name="Raw text")).to_have_attribute("aria-pressed", "false")


def test_render_log_is_bounded(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="running", run_id=1)
    page.evaluate(
        "window.__nbstreamRenderTimes = Array.from({length: 10999}, () => ({ms: 0, chars: 0}))"
    )
    stream(page, "x" * 40, runId=1, chunk=4)
    n = page.evaluate("window.__nbstreamRenderTimes.length")
    assert n <= 11000
    last = page.evaluate("window.__nbstreamRenderTimes.at(-1)")
    assert set(last) >= {"ms", "chars"}
    assert last["chars"] == 40


# ---------------------------------------------------------------------------
# cost per frame and live-region behaviour
# ---------------------------------------------------------------------------

OBSERVE = """() => {
    const out = document.querySelector('.nbstream-output');
    window.__frames = [];
    let cur = {added: 0, removed: 0};
    const count = (n) => {
        let c = 1;
        for (let k = n.firstChild; k; k = k.nextSibling) c += count(k);
        return c;
    };
    new MutationObserver((records) => {
        for (const r of records) {
            for (const n of r.addedNodes) cur.added += count(n);
            for (const n of r.removedNodes) cur.removed += count(n);
        }
    }).observe(out, {childList: true, subtree: true});
    window.__mark = (chars) => {
        window.__frames.push({...cur, chars});
        cur = {added: 0, removed: 0};
    };
}"""


def paragraphs(n: int) -> str:
    words = "the quick brown fox jumps over the lazy dog and keeps running along the river"
    parts = []
    for k in range(n):
        if k % 10 == 5:
            parts.append(f"- item {k} one\n- item {k} two\n- item {k} three")
        elif k % 10 == 8:
            parts.append(f"```\ncode line {k}\n\nmore code {k}\n```")
        else:
            parts.append(f"Paragraph {k}: {words} {words}.")
    return "\n\n".join(parts) + "\n\n"


def test_work_per_frame_does_not_grow_with_length(fe_page: Page) -> None:
    """Nodes created and characters parsed per frame stay flat as the text grows."""
    page = fe_page
    mount(page, status="running", run_id=1)
    page.evaluate(OBSERVE)
    page.evaluate("window.__nbstreamRenderTimes = []")
    n, chunk = 200, 100
    text = paragraphs(n)  # ~30k characters
    end = page.evaluate(
        "([t, c]) => window.stream(0, t, {runId: 1, chunk: c, onFrame: (o) => window.__mark(o)})",
        [text, chunk],
    )
    assert end == len(text)
    frames = page.evaluate("window.__frames")
    renders = page.evaluate("window.__nbstreamRenderTimes")
    assert len(renders) >= len(frames) * 0.9
    early = [f for f in frames if f["chars"] < 4000]
    late = [f for f in frames if f["chars"] > len(text) - 4000]
    assert len(early) >= 20 and len(late) >= 20
    max_early = max(f["added"] for f in early)
    max_late = max(f["added"] for f in late)
    assert max_late <= max_early + 10, (max_early, max_late)
    assert max(f["added"] for f in frames) < 80
    # The parser only sees the open block (plus blocks completed this frame).
    longest_block = max(len(b) for b in text.split("\n\n"))
    assert max(r["parsed"] for r in renders) <= 2 * longest_block + chunk
    late_parsed = [r["parsed"] for r in renders if r["chars"] > len(text) - 4000]
    early_parsed = [r["parsed"] for r in renders if r["chars"] < 4000]
    assert max(late_parsed) <= max(early_parsed) + chunk
    assert max(r["nodes"] for r in renders) < 80
    assert view(page).locator(".nbstream-block").count() >= n
    expect(view(page).locator(".nbstream-output p")).to_have_count(n - n // 10 * 2)


def long_open_block(kind: str) -> str:
    """One block of about 24k characters that stays open while it streams."""
    rng = random.Random(7)
    words = ["model", "token", "stream", "river", "lighthouse", "keeper", "bottle", "message"]

    def sentence(k: int) -> str:
        w = [rng.choice(words) for _ in range(rng.randint(6, 14))]
        if k % 7 == 1:
            w[2] = f"**{w[2]} {w[3]}**"
            del w[3]
        elif k % 7 == 3:
            w[1] = f"`code {k}`"
        elif k % 7 == 5:
            w[4] = f"[{w[4]}](https://example.com/{k})"
        elif k % 7 == 6:
            w[0] = f"*{w[0]}*"
        return " ".join(w).capitalize() + "."

    if kind == "paragraph":  # a one-line answer: no newline at all
        return " ".join(sentence(k) for k in range(400))
    if kind == "soft-lines":  # one paragraph, many lines
        return "\n".join(sentence(k) for k in range(400))
    if kind == "fence":
        lines = [f"    v_{k} = compute({k}, '{rng.choice(words)}')  # step {k}" for k in range(500)]
        return "```python\ndef main():\n" + "\n".join(lines) + "\n"
    if kind == "list":
        return "\n".join(f"- {sentence(k)}" for k in range(350))
    if kind == "table":
        rows = [f"| {k} | {rng.choice(words)} | {sentence(k)} |" for k in range(300)]
        return "| n | word | text |\n|---|:---:|---|\n" + "\n".join(rows)
    if kind == "tokens":  # what a tiny random model writes: markup characters, never closed
        pieces = [*words, "*", "_", "`", "[", "]", "(", ")", "#", "|", "<", ">", "&", "~", "**"]
        return "Once " + " ".join(rng.choice(pieces) for _ in range(5500))
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["paragraph", "soft-lines", "fence", "list", "table", "tokens"])
def test_long_open_block_costs_flat_and_ends_as_one_shot(fe_page: Page, kind: str) -> None:
    """A block that never closes while it streams (a one-line answer, a long code fence,
    list or table) is not parsed again whole on every frame; when the run ends, the DOM is
    exactly the one-shot rendering of the text."""
    page = fe_page
    text = long_open_block(kind)
    assert len(text) > 20_000 and "\n\n" not in text
    mount(page, status="running", run_id=1)
    page.evaluate("window.__nbstreamRenderTimes = []")
    chunk = 60
    stream(page, text, runId=1, chunk=chunk)
    renders = page.evaluate("window.__nbstreamRenderTimes")
    n = len(text)
    late = [r["parsed"] for r in renders if r["chars"] > n - 5000]
    mid = [r["parsed"] for r in renders if 5000 < r["chars"] <= 10_000]
    assert len(late) >= 50 and len(mid) >= 50
    # Re-parsing the open block whole would cost at least its length every frame.
    assert max(late) < 10_000, max(late)
    # ...and the cost does not creep up as the block grows.
    assert max(late) <= 1.5 * max(mid) + 2 * chunk, (max(late), max(mid))
    assert max(r["nodes"] for r in renders) < 120
    out = view(page).locator(".nbstream-output")
    # Still streaming: all the text is there, nothing got lost or doubled at a cut.
    shown = re.sub(r"\s+", "", out.locator(".nbstream-rendered").text_content() or "")
    if kind == "fence":
        assert out.locator("pre code").text_content() == text.split("\n", 1)[1]
    elif kind in ("paragraph", "soft-lines"):
        plain = re.sub(r"\*|`|\[|\]\(https://example.com/\d+\)", "", text)
        assert shown == re.sub(r"\s+", "", plain)
    change(page, "status", "complete")
    frame(page)
    streamed = out.locator(".nbstream-rendered").inner_html()
    assert "nbstream-chunk" not in streamed
    mount(page, status="complete", run_id=1)
    emit(page, {"type": "reset", "run_id": 1, "view": None, "text": text}, i=1)
    frame(page)
    one_shot = view(page, 1).locator(".nbstream-rendered").inner_html()
    assert streamed == one_shot


def test_long_paragraph_stays_inert_while_frozen(fe_page: Page) -> None:
    """Hostile markup spread through a long one-line answer stays inert in the parts
    frozen while streaming, not only in the final rendering."""
    page = fe_page
    bait = (
        "<img src=x onerror=window.__pwned=1> [click](javascript:window.__pwned=1) "
        "<script>window.__pwned=1</script> [ok](https://example.com/a) "
    )
    text = " ".join(f"word{k} " + (bait if k % 40 == 0 else "filler text here") for k in range(900))
    mount(page, status="running", run_id=1)
    page.evaluate("window.__nbstreamRenderTimes = []")
    stream(page, text, runId=1, chunk=50)
    renders = page.evaluate("window.__nbstreamRenderTimes")
    assert max(r["parsed"] for r in renders if r["chars"] > len(text) - 3000) < len(text) / 3
    out = view(page).locator(".nbstream-output")
    for tag in ("script", "img"):
        expect(out.locator(tag)).to_have_count(0)
    bad = out.evaluate(
        """e => [...e.querySelectorAll('*')].flatMap(n => [...n.attributes]
              .filter(a => a.name.startsWith('on') || /javascript:/i.test(a.value))
              .map(a => n.tagName + ' ' + a.name))"""
    )
    assert bad == []
    expect(out.get_by_role("link", name="ok")).to_have_count(text.count("[ok]"))
    for link in out.get_by_text("click").all()[:3]:
        link.click()
    assert page.evaluate("typeof window.__pwned") == "undefined"


def test_prose_stream_only_adds_nodes(fe_page: Page) -> None:
    """The live region gets additions only: streamed prose is never re-created."""
    page = fe_page
    mount(page, status="running", run_id=1)
    page.evaluate(OBSERVE)
    prose = "\n\n".join(f"Sentence number {k} is plain prose without markup." for k in range(30))
    stream(page, prose, runId=1, chunk=6, onFrame=None)
    page.evaluate("window.__mark(0)")
    frames = page.evaluate("window.__frames")
    assert sum(f["removed"] for f in frames) == 0
    assert sum(f["added"] for f in frames) > 0
    expect(view(page).locator(".nbstream-output p")).to_have_count(30)


def test_autoscroll_follows_until_user_scrolls_up(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="running", run_id=1)
    out = view(page).locator(".nbstream-output")
    text = paragraphs(40)
    half = len(text) // 2
    stream(page, text[:half], runId=1, chunk=200)
    gap = "e => e.scrollHeight - e.scrollTop - e.clientHeight"
    assert out.evaluate("e => e.scrollHeight > e.clientHeight + 100")
    assert out.evaluate(gap) <= 2
    # The user scrolls up: the view stops following.
    out.hover()
    page.mouse.wheel(0, -400)
    page.wait_for_function(
        "() => document.querySelector('.nbstream-output').scrollTop < "
        "document.querySelector('.nbstream-output').scrollHeight - 700"
    )
    frame(page)
    top = out.evaluate("e => e.scrollTop")
    stream(page, text[half : half + 2000], runId=1, offset=half, chunk=200)
    assert out.evaluate("e => e.scrollTop") == top
    assert out.evaluate(gap) > 100
    # Back to the bottom: following resumes.
    out.evaluate("e => { e.scrollTop = e.scrollHeight; }")
    frame(page)
    stream(page, text[half + 2000 :], runId=1, offset=half + 2000, chunk=200)
    assert out.evaluate(gap) <= 2


# ---------------------------------------------------------------------------
# build
# ---------------------------------------------------------------------------


def test_front_end_carries_the_package_version(fe_page: Page) -> None:
    """The version lives in nbstream/_version.py; the bundle is built with a copy of it."""
    import nbstream

    mount(fe_page)
    expect(view(fe_page)).to_have_attribute("data-version", nbstream.__version__)


def test_committed_bundle_matches_sources(tmp_path: Path) -> None:
    """Rebuilding from js/src gives byte-identical nbstream/static files."""
    js = REPO / "js"
    npm = shutil.which("npm")
    node = shutil.which("node")
    assert node and npm, "Node.js and npm are needed to rebuild the front end"
    if not (js / "node_modules" / "esbuild").exists():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=js, check=True)
    subprocess.run([node, "build.mjs", "--outdir", str(tmp_path)], cwd=js, check=True)
    # One bundle and one stylesheet per widget: StreamWidget (stream.*), ChatWidget (chat.*),
    # CompareWidget's header (compare.*), the prompt grid's table (grid.*).
    names = (
        *("stream.js", "stream.css", "chat.js", "chat.css"),
        *("compare.js", "compare.css", "grid.js", "grid.css"),
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)
    for name in names:
        built = (tmp_path / name).read_bytes()
        committed = (REPO / "nbstream" / "static" / name).read_bytes()
        assert built == committed, f"nbstream/static/{name} is stale: run `npm run build` in js/"
    for name in ("stream.js", "chat.js", "compare.js", "grid.js"):
        bundle = (REPO / "nbstream" / "static" / name).read_text(encoding="ascii")
        assert "export{" in bundle.replace(" ", "")
        # Self-contained: no import at all (nothing fetched, no chunk shared between them).
        assert not re.search(r"""(import\s*\(|from\s*["'])""", bundle), name
