"""CompareWidget in a real JupyterLab driven by Chromium: three columns on one model, Run
all, one column stopped with its own Stop while the others complete, then Stop all.

The tiny model, held at a known decode step by a `Gate` (browser_helpers.SETUP), so no
check depends on how fast this machine happens to be. The kernel is read through
`nb.kernel_eval` (a subshell: it answers while the runs stream).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from browser_helpers import MS, SETUP, STREAM_TIMEOUT, kval, wait_until
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
# The three columns after one was stopped and two completed (not committed anywhere).
SCREENSHOT = REPO / "test-artifacts" / "compare.png"

COMPARE = """\
model, tokenizer = tiny_model(one_line=True)
cw = nbstream.CompareWidget(
    model,
    tokenizer,
    "Hello there",
    settings=[
        {"temperature": 0},
        {"temperature": 0.7, "max_new_tokens": 30},
        {"temperature": 1.3, "max_new_tokens": 30},
    ],
    max_new_tokens=4000,
    seed=42,
)
gate = Gate(model, 5)  # holds the first column at its 5th decode step
cw"""
# A fresh gate for the next Run all (the first one was opened).
REGATE = "gate.handle.remove()\ngate = Gate(model, 5)"


def columns(nb, cell: int):
    """Each column's StreamWidget root, left to right."""
    return nb.cell(cell).locator(".nbstream-column .nbstream")


def header(nb, cell: int):
    return nb.cell(cell).locator(".nbstream-compare")


def expect_statuses(roots, statuses: list[str], timeout: float = STREAM_TIMEOUT) -> None:
    for i, status in enumerate(statuses):
        expect(roots.nth(i)).to_have_attribute("data-status", status, timeout=timeout * MS)


def test_three_columns_one_stopped_by_its_own_stop_then_stop_all(lab):
    nb = lab.open_notebook([SETUP, COMPARE, REGATE])
    nb.run_cell(0)
    nb.run_cell(1)
    roots = columns(nb, 1)
    head = header(nb, 1)
    expect(roots).to_have_count(3)
    expect(nb.cell(1).locator(".nbstream-column")).to_have_count(3)
    expect_statuses(roots, ["idle"] * 3)
    # Each column: its settings as its label, no prompt box of its own, its Run and Stop.
    labels = [
        "temperature 0 (greedy)",
        "temperature 0.7 · max new tokens 30",
        "temperature 1.3 · max new tokens 30",
    ]
    for i, label in enumerate(labels):
        expect(roots.nth(i).locator(".nbstream-label")).to_have_text(label)
        expect(roots.nth(i).get_by_role("textbox", name="Prompt", exact=True)).to_be_hidden()
        expect(roots.nth(i).get_by_role("button", name="Stop", exact=True)).to_be_visible()
    prompt = head.get_by_role("textbox", name="Shared prompt", exact=True)
    expect(prompt).to_have_value("Hello there")
    same_seed = head.get_by_role("checkbox", name="Same seed", exact=True)
    expect(same_seed).to_be_checked()  # seed=42 implies it
    run_all = head.get_by_role("button", name="Run all", exact=True)
    stop_all = head.get_by_role("button", name="Stop all", exact=True)
    expect(stop_all).to_be_disabled()
    expect(head.locator(".nbstream-compare-summary")).to_have_text("3 columns · not run yet")

    # Run all: the first column runs (held at the gate), the other two wait their turn.
    prompt.fill("Hello there, twice")
    run_all.click()
    wait_until(lambda: kval(nb, "gate.reached.is_set()"), STREAM_TIMEOUT, what="the gate")
    expect_statuses(roots, ["running", "queued", "queued"])
    expect(head).to_have_attribute("data-statuses", "running queued queued")
    expect(head.locator(".nbstream-compare-summary")).to_have_text(
        "3 columns · 1 running, 2 queued · same seed 42"
    )
    expect(run_all).to_be_disabled()
    expect(stop_all).to_be_enabled()
    assert kval(nb, "cw.prompt") == "Hello there, twice"
    assert kval(nb, "[r.prompt for r in (c.run for c in cw.columns)]") == ["Hello there, twice"] * 3

    # The first column's own Stop: it ends cancelled; the others then run and complete.
    roots.nth(0).get_by_role("button", name="Stop", exact=True).click()
    wait_until(
        lambda: kval(nb, "cw.columns[0].run._control.cancel_event.is_set()"),
        15,
        what="the Stop click reached the kernel",
    )
    nb.kernel_eval("gate.opened.set()")
    expect_statuses(roots, ["cancelled", "complete", "complete"])
    assert kval(nb, "cw.statuses") == ["cancelled", "complete", "complete"]
    assert kval(nb, "cw.results[0]") is None
    assert kval(nb, "[c.metrics['tokens'] for c in cw.columns]")[1:] == [30, 30]
    assert kval(nb, "[r['seed'] for r in cw.records]") == [None, 42, 42]
    assert kval(nb, "cw.records[1]['settings']['temperature']") == 0.7
    # The views hold the kernel's text; the stopped one is marked partial.
    for i in (1, 2):
        result = kval(nb, f"cw.columns[{i}].result")
        wait_until(
            lambda i=i, result=result: (
                roots.nth(i).locator(".nbstream-output").inner_text().strip() == result.strip()
            ),
            15,
            what=f"column {i + 1} shows its result",
        )
    expect(roots.nth(0).locator(".nbstream-output")).to_have_attribute("data-partial", "true")
    expect(roots.nth(1).locator(".nbstream-output")).to_have_attribute("data-partial", "false")
    expect(roots.nth(1).locator(".nbstream-label")).to_have_text(
        "temperature 0.7 · max new tokens 30 · seed 42"
    )
    expect(head.locator(".nbstream-compare-summary")).to_have_text(
        "3 columns · 2 complete, 1 cancelled · same seed 42"
    )
    expect(run_all).to_be_enabled()
    SCREENSHOT.parent.mkdir(exist_ok=True)
    nb.cell(1).screenshot(path=str(SCREENSHOT))

    # Stop all: the running column halts and the queued ones never get the model.
    nb.run_cell(2)
    run_all.click()
    wait_until(lambda: kval(nb, "gate.reached.is_set()"), STREAM_TIMEOUT, what="the gate")
    expect_statuses(roots, ["running", "queued", "queued"])
    stop_all.click()
    wait_until(
        lambda: kval(nb, "cw.columns[0].run._control.cancel_event.is_set()"),
        15,
        what="the Stop all click reached the kernel",
    )
    nb.kernel_eval("gate.opened.set()")
    expect_statuses(roots, ["cancelled"] * 3)
    assert kval(nb, "cw.statuses") == ["cancelled"] * 3
    assert kval(nb, "[c.metrics['tokens'] for c in cw.columns]")[1:] == [0, 0]
    expect(head.locator(".nbstream-compare-summary")).to_have_text(
        "3 columns · 3 cancelled · same seed 42"
    )

    # The checkbox is the kernel's same_seed.
    same_seed.click()
    wait_until(lambda: kval(nb, "cw.same_seed") is False, 15, what="same_seed synced")
    nb.kernel_eval("setattr(cw, 'same_seed', True)")
    expect(same_seed).to_be_checked()
    assert nb.console_errors() == []


def test_columns_wrap_in_a_narrow_notebook(lab):
    """Side by side when there is room; one under another (never squeezed) when not."""
    nb = lab.open_notebook(
        [
            SETUP,
            "model, tokenizer = tiny_model(one_line=True)\n"
            "cw = nbstream.CompareWidget(model, tokenizer, 'Hi', max_new_tokens=5)\ncw",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    roots = columns(nb, 1)
    expect(roots).to_have_count(3)

    def boxes():
        cols = nb.cell(1).locator(".nbstream-column")
        return [cols.nth(i).bounding_box() for i in range(3)]

    wide = boxes()
    assert len({round(b["y"]) for b in wide}) == 1, wide  # one row at 1280 px
    nb.page.set_viewport_size({"width": 560, "height": 900})
    wait_until(lambda: len({round(b["y"]) for b in boxes()}) == 3, 10, what="columns wrapped")
    assert all(b["width"] >= 220 for b in boxes()), boxes()
    assert nb.console_errors() == []
