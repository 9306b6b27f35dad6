"""Branching on a model server in a real JupyterLab driven by Chromium: a
StreamWidget on an Endpoint made with alternatives=k shows the server run's tokens, the
popover's "Continue" on another of the server's alternatives streams a branch into the view,
and the switcher goes back to the original. The server is the loopback one of
tests/test_remote_branch.py (vLLM's wire format: it continues a final assistant message),
started here on 127.0.0.1, where the kernel reaches it. The kernel side alone is
tests/test_remote_branch_view.py, the page alone tests/frontend/test_remote_branch_frontend.py.
"""

from __future__ import annotations

import pytest
from branching_server import ANSWER, CONTINUATION, PROMPT
from browser_helpers import SETUP, branch_ended, kval, view, wait_status, wait_until
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def texts(v) -> list[str]:
    return v.locator(".nbstream-tokens .nbstream-token").evaluate_all(
        "(s) => s.map((e) => e.textContent)"
    )


def test_continue_on_a_servers_alternative_and_switch_back(lab, loopback):
    widget = (
        f"w = nbstream.StreamWidget(nbstream.Endpoint({loopback.url('vllm', 'lab')!r}, 'm'),\n"
        "                          max_new_tokens=20, alternatives=3, show_alternatives=True)\n"
        "w"
    )
    nb = lab.open_notebook([SETUP, widget, f"w.generate({PROMPT!r}); w.wait()"])
    for cell in range(3):
        nb.run_cell(cell)
    v = view(nb, 1)
    original = [text for text, _, _ in ANSWER]
    wait_until(lambda: kval(nb, "w.run.done"), 30, what="the server's answer ended")
    wait_status(v, "complete")
    wait_until(lambda: texts(v) == original, 15, what="the server run's tokens shown")

    # The third token's popover: the server's list, Continue on its second choice.
    v.locator(".nbstream-tokens .nbstream-token").nth(2).click()
    pop = v.get_by_role("dialog", name="Alternatives at step 3")
    expect(pop).to_be_visible()
    expect(pop.get_by_role("button", name="How was this picked?")).to_have_count(0)
    pop.get_by_role("button", name="Continue with ' green'", exact=True).click()
    wait_until(lambda: kval(nb, "len(w.branches)") == 1, 30, what="a branch made")
    branch_ended(nb, v)
    assert kval(nb, "w.result") == "Red and green yellow."
    branch = [*original[:2], " green", *(text for text, _, _ in CONTINUATION)]
    wait_until(lambda: texts(v) == branch, 15, what="the branch's tokens shown")
    switcher = v.get_by_role("group", name="Answers of this prompt")
    first = switcher.get_by_role("button", name="Branch 1", exact=False)
    expect(first).to_have_attribute("aria-pressed", "true")
    expect(first).to_contain_text("at token 3: ' blue' \u2192 ' green'")

    # Back to the original: the kernel shows it, the view its tokens.
    switcher.get_by_role("button", name="Original", exact=True).click()
    wait_until(lambda: kval(nb, "w.shown") == 0, 30, what="the original shown")
    wait_until(lambda: texts(v) == original, 15, what="the original's tokens again")
    assert kval(nb, "w.result") == "Red and blue."
