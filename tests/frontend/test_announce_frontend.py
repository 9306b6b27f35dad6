"""Front-end tests of what a screen reader hears (js/src/announce.js), against the static harness.

A CompareWidget's Run all is announced once when it starts and once when every column it
started has ended, by the header; its columns say nothing of it. A column run alone says
its own states and end, and the header nothing. Stop all's end is the one summary. The page
tells the two apart by the kernel's ``in_run_all`` (a column's, and the header's list of
them: PROTOCOL.md). Of a StreamWidget's views, the one shown says the end (not a collapsed
one), and a switch to another answer announces no end.

The header and its columns are separate widgets; here the page of the compare bundle also
renders three columns from the StreamWidget bundle (each with its own fake model), so every
live region of one comparison is listened to at once. The tests play the kernel.
"""

from __future__ import annotations

from typing import Any

from frontend_helpers import (
    change_many,
    delta,
    emit,
    frame,
    mount,
    thinking,
    view,
)
from playwright.sync_api import Page, expect

LABELS = ["temperature 0 (greedy)", "temperature 0.7", "temperature 1.3"]

# Three columns rendered by the StreamWidget bundle beside the header, and a record of
# every text any live region takes (the clearing before new words left out), with who said
# it: "header" or the column's index.
_COLUMNS = """async (labels) => {
  const mod = await import('/nbstream/static/stream.js');
  window.columns = [];
  for (const label of labels) {
    const model = new window.FakeModel({show_prompt: false, label, in_run_all: false});
    const el = document.createElement('div');
    el.className = 'column-host';
    document.body.append(el);
    const cleanup = await mod.default.render({model, el});
    window.columns.push({model, el, cleanup});
  }
  window.said = [];
  new MutationObserver((records) => {
    for (const r of records) {
      const node = r.target.nodeType === 1 ? r.target : r.target.parentElement;
      const region = node && node.closest('.nbstream-announcer');
      if (!region || !region.textContent) continue;
      const column = region.closest('.column-host');
      const hosts = [...document.querySelectorAll('.column-host')];
      const who = column ? hosts.indexOf(column) : 'header';
      window.said.push([who, region.textContent]);
    }
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


def comparison(page: Page) -> None:
    """The header (two-way traits as a new CompareWidget has them) and three columns."""
    state = {
        "prompt": "Name two colors.",
        "same_seed": False,
        "statuses": ["idle"] * 3,
        "in_run_all": [False] * 3,
        "summary": "",
    }
    page.evaluate("([s]) => window.mount(s, null)", [state])
    page.evaluate(_COLUMNS, LABELS)
    expect(page.locator(".column-host .nbstream")).to_have_count(3)


def column(page: Page, i: int, **values: Any) -> None:
    """One state message to column i (its traits changed together, as under hold_sync)."""
    page.evaluate("([i, v]) => window.columns[i].model.changeMany(v)", [i, values])


def header(page: Page, **values: Any) -> None:
    page.evaluate("([v]) => window.views[0].model.changeMany(v)", [values])


def said(page: Page) -> list[list]:
    return page.evaluate("window.said")


def wait_said(page: Page, who: Any, text: str, times: int = 1) -> None:
    """Until `who` ("header" or a column's index) has said `text` `times` times (a text
    said before counts: wait for its new saying by its count, not for the text)."""
    page.wait_for_function(
        "([who, text, n]) => window.said.filter(([w, t]) => w === who && t === text).length >= n",
        arg=[who, text, times],
        timeout=10_000,
    )


def settle(page: Page) -> None:
    """Past the announcer's pause before it speaks (60 ms): anything still to be said is."""
    page.wait_for_timeout(200)


def run_all_starts(page: Page) -> None:
    """The kernel's Run all: every column's in_run_all first (its own message), then the
    runs (the first running, the others queued behind it on the shared model)."""
    for i in range(3):
        column(page, i, in_run_all=True)
    header(page, in_run_all=[True] * 3)
    column(page, 0, run_id=1, status="running", metrics={})
    header(page, statuses=["running", "idle", "idle"], in_run_all=[True] * 3)
    column(page, 1, run_id=1, status="queued", metrics={})
    column(page, 2, run_id=1, status="queued", metrics={})
    header(page, statuses=["running", "queued", "queued"], in_run_all=[True] * 3)


def test_run_all_is_announced_once_at_its_start_and_once_at_its_end(compare_page: Page) -> None:
    page = compare_page
    comparison(page)
    run_all_starts(page)
    wait_said(page, "header", "Running 3 columns")
    # The columns end one after the other; the last is stopped from its own Stop.
    column(page, 0, status="complete", metrics={"tokens": 5, "finish_reason": "eos"})
    column(page, 1, status="running")
    header(page, statuses=["complete", "running", "queued"], in_run_all=[True] * 3)
    column(page, 1, status="complete", metrics={"tokens": 6, "finish_reason": "eos"})
    column(page, 2, status="running")
    header(page, statuses=["complete", "complete", "running"], in_run_all=[True] * 3)
    column(page, 2, status="cancelled", metrics={"tokens": 2, "finish_reason": "cancelled"})
    header(page, statuses=["complete", "complete", "cancelled"], in_run_all=[True] * 3)
    wait_said(page, "header", "3 columns ended: 2 complete, 1 stopped")
    settle(page)
    assert said(page) == [
        ["header", "Running 3 columns"],
        ["header", "3 columns ended: 2 complete, 1 stopped"],
    ]


def test_stop_all_ends_a_run_all_with_one_summary(compare_page: Page) -> None:
    page = compare_page
    comparison(page)
    run_all_starts(page)
    wait_said(page, "header", "Running 3 columns")
    page.get_by_role("button", name="Stop all").click()
    assert page.evaluate("window.views[0].model.sent")[-1] == {"type": "stop"}
    # The kernel stops them right to left: the queued ones leave the queue first.
    column(page, 2, status="cancelled", metrics={"tokens": None, "finish_reason": "cancelled"})
    column(page, 1, status="cancelled", metrics={"tokens": None, "finish_reason": "cancelled"})
    header(page, statuses=["running", "cancelled", "cancelled"], in_run_all=[True] * 3)
    column(page, 0, status="cancelled", metrics={"tokens": 3, "finish_reason": "cancelled"})
    header(page, statuses=["cancelled", "cancelled", "cancelled"], in_run_all=[True] * 3)
    wait_said(page, "header", "3 columns ended: 3 stopped")
    settle(page)
    assert said(page) == [
        ["header", "Running 3 columns"],
        ["header", "3 columns ended: 3 stopped"],
    ]


def test_a_column_run_alone_says_itself_and_the_header_nothing(compare_page: Page) -> None:
    page = compare_page
    comparison(page)
    # After a Run all that ended, the second column's own Run (then Stop all while it runs).
    for i in range(3):
        column(page, i, in_run_all=True, run_id=1, status="complete", metrics={"tokens": 4})
    header(page, statuses=["complete"] * 3, in_run_all=[True] * 3)
    settle(page)
    page.evaluate("window.said.length = 0")
    column(page, 1, in_run_all=False)
    header(page, in_run_all=[True, False, True])
    column(page, 1, run_id=2, status="running", metrics={})
    header(page, statuses=["complete", "running", "complete"], in_run_all=[True, False, True])
    wait_said(page, 1, f"{LABELS[1]}: Running")
    column(page, 1, status="complete", metrics={"tokens": 7, "finish_reason": "eos"})
    header(page, statuses=["complete"] * 3, in_run_all=[True, False, True])
    wait_said(page, 1, f"{LABELS[1]}: Answer complete, 7 tokens")
    column(page, 1, run_id=3, status="running", metrics={})
    header(page, statuses=["complete", "running", "complete"], in_run_all=[True, False, True])
    wait_said(page, 1, f"{LABELS[1]}: Running", times=2)  # the first Running was run 2's
    page.get_by_role("button", name="Stop all").click()
    column(page, 1, status="cancelled", metrics={"tokens": 2, "finish_reason": "cancelled"})
    header(page, statuses=["complete", "cancelled", "complete"], in_run_all=[True, False, True])
    wait_said(page, 1, f"{LABELS[1]}: Stopped after 2 tokens")
    settle(page)
    assert said(page) == [
        [1, f"{LABELS[1]}: Running"],
        [1, f"{LABELS[1]}: Answer complete, 7 tokens"],
        [1, f"{LABELS[1]}: Running"],
        [1, f"{LABELS[1]}: Stopped after 2 tokens"],
    ]


# -- the branch switcher above the Thinking section ------------------------------------------


# -- the thinking's counters, handled once for both views ------------------------------------


def announcer(page: Page, i: int = 0):
    return view(page, i).locator(".nbstream-announcer")


def test_a_collapsed_view_leaves_the_end_to_the_view_that_is_shown(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="idle", run_id=0)
    mount(page, share_with=0)
    # The first view's output collapsed: JupyterLab takes it out of the document.
    page.evaluate("() => window.views[0].el.remove()")
    change_many(page, {"run_id": 1, "status": "running"})
    emit(page, delta(1, 0, "Hi there."))
    change_many(page, {"status": "complete", "metrics": {"tokens": 3}})
    # The second view, the only one left in the document.
    expect(page.locator(".host")).to_have_count(1)
    expect(announcer(page, 0)).to_have_text("Answer complete, 3 tokens")


RECORD = """(root) => {
  window.__rec = [];
  const box = root.querySelector('.nbstream-thinking');
  const ann = root.querySelector('.nbstream-announcer');
  new MutationObserver(() => window.__rec.push(['box', box.open, box.getAttribute('data-state')]))
    .observe(box, {attributes: true, attributeFilter: ['open', 'data-state']});
  new MutationObserver(() => window.__rec.push(['said', ann.textContent]))
    .observe(ann, {childList: true, characterData: true, subtree: true});
}"""


def test_switching_answers_neither_opens_the_thinking_nor_announces_an_end(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="idle", run_id=0)
    root = view(page)
    # Run 1 thinks, answers and ends, seen by this view.
    change_many(page, {"run_id": 1, "status": "running"})
    emit(page, thinking(1, 0, "Two and two.", tokens=5, elapsed_s=0.2))
    emit(page, thinking(1, 12, "", tokens=6, elapsed_s=0.3, done=True))
    emit(page, delta(1, 0, "Four."))
    change_many(
        page,
        {
            "status": "complete",
            "metrics": {"tokens": 8, "thinking_tokens": 6, "first_answer_s": 0.3},
        },
    )
    expect(announcer(page)).to_have_text("Answer complete, 8 tokens")
    expect(root.locator(".nbstream-thinking")).to_have_js_property("open", False)
    page.wait_for_timeout(150)  # past the announcer's clearing pause
    root.evaluate(RECORD)
    # The kernel shows another (ended) answer, as the switcher or w.show do (_replay): its
    # run_id, status and metrics in one state message, then its thinking, then its text.
    metrics = {"tokens": 7, "thinking_tokens": 5, "first_answer_s": 0.2}
    change_many(page, {"run_id": 2, "status": "cancelled", "metrics": metrics})
    emit(page, thinking(2, 0, "Two and two.", tokens=5, elapsed_s=0.2, done=True))
    frame(page)
    emit(page, delta(2, 0, "Four, I"))
    frame(page)
    page.wait_for_timeout(150)
    rec = page.evaluate("window.__rec")
    assert [r for r in rec if r[0] == "box" and r[1]] == [], rec  # never open
    assert [r for r in rec if r[0] == "box" and r[2] == "stopped"] == [], rec
    assert [r for r in rec if r[0] == "said" and r[1]] == [], rec  # nothing announced
    expect(root.locator(".nbstream-thinking")).to_have_attribute("data-state", "done")
    # A run this view sees start is still announced.
    change_many(page, {"run_id": 3, "status": "running", "metrics": {}})
    change_many(page, {"status": "cancelled", "metrics": {"tokens": 2}})
    expect(announcer(page)).to_have_text("Stopped after 2 tokens")
