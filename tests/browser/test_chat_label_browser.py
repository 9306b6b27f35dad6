"""ChatWidget in JupyterLab: "not in the conversation" marks only a turn that ended out of it.

Neither bubble of a first message is labelled "not in the conversation" while its answer
streams. The answer is held mid-stream by a `Gate` (browser_helpers.SETUP), so the page is
read while it is certainly streaming.
"""

from __future__ import annotations

import pytest
from browser_helpers import MS, SETUP, STREAM_TIMEOUT, kval, wait_until
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

# The label is the role line's ::after content (chat.css), set from data-in-history.
_LABELS = """(root) => [...root.querySelectorAll('.nbstream-message')].map((m) =>
  getComputedStyle(m.querySelector('.nbstream-message-role'), '::after').content)"""


def test_a_streaming_first_message_is_not_marked_out_of_the_conversation(lab):
    nb = lab.open_notebook(
        [
            SETUP,
            "model, tokenizer = tiny_model(one_line=True)\n"
            "chat = nbstream.ChatWidget(model, tokenizer, max_new_tokens=300)\n"
            "chat",
            "gate = Gate(model, 6)\nfirst = chat.generate('Tell me a story')",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = nb.cell(1).locator(".nbstream.nbstream-chat").first
    nb.run_cell(2)
    wait_until(lambda: kval(nb, "gate.reached.is_set()"), STREAM_TIMEOUT, what="step 6")
    msgs = v.locator(".nbstream-message")
    expect(msgs).to_have_count(2)
    expect(msgs.nth(1)).to_have_attribute("data-status", "running")
    assert kval(nb, "[m['in_history'] for m in chat._messages]") == [True, True]
    for k in range(2):
        expect(msgs.nth(k)).to_have_attribute("data-in-history", "true")
    assert all("not in the conversation" not in label for label in v.evaluate(_LABELS))

    v.get_by_role("button", name="Stop", exact=True).click()
    wait_until(lambda: kval(nb, "first._control.cancel_event.is_set()"), 30, what="Stop")
    nb.kernel_eval("gate.opened.set()")
    expect(msgs.nth(1)).to_have_attribute("data-status", "cancelled", timeout=STREAM_TIMEOUT * MS)
    for k in range(2):  # stopped, not kept: now it is out
        expect(msgs.nth(k)).to_have_attribute("data-in-history", "false")
    assert all("not in the conversation" in label for label in v.evaluate(_LABELS))
    assert kval(nb, "[m['in_history'] for m in chat.transcript]") == [False, False]
    assert nb.console_errors() == []
