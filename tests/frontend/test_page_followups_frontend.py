"""Front-end tests of three follow-ups to issues 16 to 18, against the static harness:

- what a screen reader hears from a CompareWidget (js/src/announce.js): a Run all is
  announced once when it starts and once when every column it started has ended, by the
  header; its columns say nothing of it (they said their own ends too: N+1 end
  announcements for one click). A column run alone says its own states and end, and the
  header nothing. Stop all's end is the one summary. The page tells the two apart by the
  kernel's ``in_run_all`` (a column's, and the header's list of them: PROTOCOL.md);
- the branch switcher sits above the Thinking section in both the StreamWidget and a chat
  answer's bubble (it was below it in the chat);
- the ``thinking`` messages are handled once, in the run protocol both views share
  (onRunMessages, js/src/common.js; its Node test is js/test/runmessages.test.js): the
  metrics line counts the thinking while the model thinks, in both views.

The header and its columns are separate widgets; here the page of the compare bundle also
renders three columns from the StreamWidget bundle (each with its own fake model), so every
live region of one comparison is listened to at once. The tests play the kernel.
"""

from __future__ import annotations

from typing import Any

import test_chat_frontend
from playwright.sync_api import Page, expect
from test_branch_frontend import BRANCH
from test_chat_frontend import answer, user
from test_widget_frontend import change as widget_change
from test_widget_frontend import delta, emit, mount, view

chat_page = test_chat_frontend.chat_page  # the fixture: a harness page of the chat bundle

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

THOUGHT = {"text": "Colours first.", "tokens": 6, "elapsed_s": 0.4, "done": True}


def above(first, second) -> bool:
    """`first` comes before `second` in the page and is drawn above it."""
    before = first.evaluate(
        "(a, b) => !!(a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING)",
        second.element_handle(),
    )
    return before and first.bounding_box()["y"] < second.bounding_box()["y"]


def test_the_switcher_is_above_the_thinking_in_both_widgets(fe_page: Page, chat_page: Page) -> None:
    # The StreamWidget: an answer that thought, and a branch of it shown.
    page = fe_page
    mount(page)
    widget_change(page, "run_id", 1)
    widget_change(page, "status", "running")
    emit(page, {"type": "thinking", "run_id": 1, "offset": 0, "text": THOUGHT["text"],
                "tokens": 6, "elapsed_s": 0.4, "done": True})  # fmt: skip
    emit(page, delta(1, 0, "Red and blue."))
    widget_change(page, "status", "complete")
    widget_change(page, "_branches", [BRANCH])
    widget_change(page, "branch_shown", 1)
    switcher = view(page).get_by_role("group", name="Answers of this prompt")
    thinking = view(page).locator(".nbstream-thinking")
    expect(switcher).to_be_visible()
    expect(thinking).to_be_visible()
    assert above(switcher, thinking)

    # The chat: the same in the last answer's bubble.
    page = chat_page
    state = {
        "_messages": [user(0, "Name two colors."),
                      answer(0, "Red and blue.", "complete", 1, thinking=THOUGHT)],
        "status": "complete",
        "run_id": 1,
        "_branches": [BRANCH],
        "branch_shown": 1,
    }  # fmt: skip
    page.evaluate("([s]) => window.mount(s, null)", [state])
    bubble = page.locator(".nbstream-message[data-role='assistant']").last
    switcher = bubble.get_by_role("group", name="Answers to the last message")
    thinking = bubble.locator(".nbstream-thinking")
    expect(switcher).to_be_visible()
    expect(thinking).to_be_visible()
    assert above(switcher, thinking)
    # And it stays there when a new answer's bubble takes it (a regenerate: a new run).
    regenerated = answer(0, "Green.", "complete", 2, thinking=THOUGHT)
    page.evaluate(
        "([s]) => window.views[0].model.changeMany(s)",
        [{"_messages": [user(0, "Name two colors."), regenerated], "run_id": 2,
          "_branches": [BRANCH], "branch_shown": 0}],
    )  # fmt: skip
    bubble = page.locator(".nbstream-message[data-role='assistant']").last
    expect(bubble.locator(".nbstream-output")).to_have_text("Green.")
    assert above(bubble.get_by_role("group", name="Answers to the last message"),
                 bubble.locator(".nbstream-thinking"))  # fmt: skip


# -- the thinking's counters, handled once for both views ------------------------------------


def test_the_metrics_line_counts_the_thinking_in_both_widgets(
    fe_page: Page, chat_page: Page
) -> None:
    think = {"type": "thinking", "run_id": 1, "offset": 0, "text": "Hmm.", "tokens": 4,
             "elapsed_s": 0.5, "done": False}  # fmt: skip
    page = fe_page
    mount(page)
    widget_change(page, "run_id", 1)
    widget_change(page, "status", "running")
    emit(page, think)
    expect(view(page).locator(".nbstream-metrics")).to_contain_text("4 tokens")

    page = chat_page
    state = {
        "_messages": [user(0, "Hi"), answer(0, "", "running", 1)],
        "status": "running",
        "run_id": 1,
    }
    page.evaluate("([s]) => window.mount(s, null)", [state])
    page.evaluate("([m]) => window.views[0].model.msg(m)", [think])
    expect(page.locator(".nbstream-metrics").first).to_contain_text("4 tokens")
    expect(page.locator(".nbstream-thinking").first).to_contain_text("Thinking… 4 tokens")
