"""What the page says and where the keyboard goes, in a real JupyterLab driven by Chromium:
focus after Run and Stop, a Stop that a busy kernel cannot act
on yet, Regenerate on a greedy model, Clear chat asking first, the Edit wording.

Each test opens its own notebook (fresh kernel) with the tiny one-line model. A `Gate`
forward hook (browser_helpers.SETUP) holds a run mid-stream where a test needs it there;
the kernel is read through `nb.kernel_eval` (a subshell: it answers while a cell runs).
"""

from __future__ import annotations

import pytest
from browser_helpers import MS, SETUP, SLOW, STREAM_TIMEOUT, kval, view, wait_status, wait_until
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

WIDGET = (
    "model, tokenizer = tiny_model(one_line=True)\n"
    "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=40)\n"
    "w.prompt = 'Hello'\n"
    "gate = Gate(model, 4)\n"
    "w"
)
CHAT = (
    "model, tokenizer = tiny_model(one_line=True)\n"
    "chat = nbstream.ChatWidget(model, tokenizer, max_new_tokens=6)\n"
    "chat"
)
COMPARE = (
    "model, tokenizer = tiny_model(one_line=True)\n"
    "cw = nbstream.CompareWidget(model, tokenizer, 'Hello', settings=[{}, {}],"
    " max_new_tokens=30)\n"
    "gate = Gate(model, 4)\n"
    "cw"
)


def chat_view(nb, cell: int):
    return nb.cell(cell).locator(".nbstream.nbstream-chat").first


def button(v, name: str):
    return v.get_by_role("button", name=name, exact=True)


def test_focus_moves_to_the_live_control_after_run_and_stop(lab):
    """Run disables itself: the focus goes to Stop, not the page body (where JupyterLab's
    command-mode keys would take the next key press); Stop hands it back to Run."""
    nb = lab.open_notebook([SETUP, WIDGET])
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    run, stop = button(v, "Run"), button(v, "Stop")
    run.click()  # a click focuses the button, as Tab then Enter would
    wait_until(lambda: kval(nb, "gate.reached.is_set()"), STREAM_TIMEOUT, what="run held")
    wait_status(v, "running")
    expect(stop).to_be_focused()
    stop.click()
    wait_until(lambda: kval(nb, "w.run._control.cancel_event.is_set()"), 30, what="Stop reached")
    nb.kernel_eval("gate.opened.set()")
    wait_status(v, "cancelled")
    assert kval(nb, "w.status") == "cancelled"
    expect(run).to_be_focused()
    assert nb.console_errors() == []


def test_chat_and_compare_hand_the_focus_between_their_buttons(lab):
    nb = lab.open_notebook([SETUP, CHAT, "gate = Gate(model, 3)", COMPARE])
    nb.run_cell(0)
    nb.run_cell(1)
    nb.run_cell(2)
    v = chat_view(nb, 1)
    v.get_by_role("textbox", name="Message", exact=True).fill("Hi")
    send, stop = button(v, "Send"), button(v, "Stop")
    send.click()
    wait_until(lambda: kval(nb, "gate.reached.is_set()"), STREAM_TIMEOUT, what="answer held")
    expect(stop).to_be_focused()
    stop.click()
    wait_until(lambda: kval(nb, "chat.run._control.cancel_event.is_set()"), 30, what="Stop")
    nb.kernel_eval("gate.opened.set()")
    expect(v).to_have_attribute("data-status", "cancelled", timeout=STREAM_TIMEOUT * MS)
    expect(send).to_be_focused()
    nb.kernel_eval("gate.handle.remove()")
    nb.run_cell(3)
    head = nb.cell(3).locator(".nbstream-compare")
    run_all, stop_all = button(head, "Run all"), button(head, "Stop all")
    run_all.click()
    wait_until(lambda: kval(nb, "gate.reached.is_set()"), STREAM_TIMEOUT, what="column held")
    expect(stop_all).to_be_focused()
    stop_all.click()
    wait_until(
        lambda: kval(nb, "cw.columns[0].run._control.cancel_event.is_set()"), 30, what="Stop all"
    )
    nb.kernel_eval("gate.opened.set()")
    wait_until(
        lambda: kval(nb, "[c.status for c in cw.columns]") == ["cancelled", "cancelled"],
        STREAM_TIMEOUT,
        what="both columns cancelled",
    )
    expect(run_all).to_be_focused()
    assert nb.console_errors() == []


# The JupyterLab setting that sends widget messages on a kernel subshell (where nbstream's
# Stop acts at once while a cell runs, nbstream/widgets/route.py). Off, a Stop waits for the busy
# cell, as in front ends without subshells (VS Code, JupyterLite, the classic Notebook).
KERNELS_SETTINGS = "/lab/api/settings/@jupyterlab/apputils-extension:kernels-settings"


@pytest.fixture
def lab_without_comm_subshells(lab):
    lab.server.api("PUT", KERNELS_SETTINGS, {"raw": '{"commsOverSubshells": "disabled"}'})
    try:
        yield lab
    finally:
        lab.server.api("PUT", KERNELS_SETTINGS, {"raw": "{}"})


def test_stop_during_a_busy_cell_says_why_it_waits_and_when_it_will_act(
    lab_without_comm_subshells,
):
    """Without comm subshells the kernel handles a Stop on its main thread: while another
    cell blocks it, the run streams on. The view says so at once, and the notice goes when
    the run ends. (With subshells the Stop acts at once and the notice never shows.)"""
    nb = lab_without_comm_subshells.open_notebook(
        [SETUP, SLOW, "print('blocking', flush=True)\nblock.wait(300)"]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    # Until the Stop is sent, the kernel is watched from the page only: the harness's
    # kernel_eval talks to the kernel on a subshell of its own, and a widget whose messages
    # went out under that subshell would have its Stop handled there at once.
    button(v, "Run").click()
    wait_status(v, "running")
    expect(v.locator(".nbstream-output")).to_have_attribute("data-empty", "false")
    nb.run_cell(2, wait=False)
    # The kernel's main thread is in that cell.
    expect(nb.cell(2).locator(".jp-OutputArea-output")).to_contain_text("blocking")
    button(v, "Stop").click()
    notice = v.locator(".nbstream-stop-waiting")
    expect(notice).to_be_visible(timeout=STREAM_TIMEOUT * MS)
    expect(notice).to_have_attribute("role", "status")
    expect(notice).to_contain_text("the kernel is busy with another cell")
    expect(notice).to_contain_text("Interrupt the kernel")
    # What the notice says is true: the kernel still runs the answer.
    assert kval(nb, "w.status") == "running"
    tokens = kval(nb, "w.run.metrics['tokens'] or 0")
    wait_until(
        lambda: (kval(nb, "w.run.metrics['tokens'] or 0") > tokens) or kval(nb, "w.run.done"),
        30,
        what="tokens still coming",
    )
    nb.kernel_eval("block.set()")
    nb.wait_cell(2)
    wait_status(v, "cancelled")
    assert kval(nb, "w.status") == "cancelled"
    expect(notice).to_have_count(0)
    assert nb.console_errors() == []


def test_regenerate_says_greedy_repeats_and_clear_chat_asks_first(lab):
    nb = lab.open_notebook([SETUP, CHAT])
    nb.run_cell(0)
    nb.run_cell(1)
    v = chat_view(nb, 1)
    v.get_by_role("textbox", name="Message", exact=True).fill("Hi")
    button(v, "Send").click()
    expect(v).to_have_attribute("data-status", "complete", timeout=STREAM_TIMEOUT * MS)
    assert kval(nb, "chat.next_run_samples") is False  # the tiny model decodes greedily
    regenerate = button(v, "Regenerate")
    note = v.locator(".nbstream-greedy-note")
    expect(note).to_be_visible()
    expect(note).to_contain_text("same answer again")
    expect(regenerate).to_have_attribute("aria-describedby", note.get_attribute("id") or "-")

    # A temperature in the panel: the next run samples, and the note goes.
    v.get_by_role("button", name="Settings", exact=True).click()
    v.get_by_role("textbox", name="Temperature", exact=True).fill("0.8")
    wait_until(lambda: kval(nb, "chat.next_run_samples") is True, 15, what="kernel: samples")
    expect(note).to_have_count(0)
    # Regenerate runs with the panel's settings.
    v.get_by_role("textbox", name="Max new tokens", exact=True).fill("3")
    regenerate.click()
    # The regenerated run's end in the kernel first: the page's "complete" is the first
    # answer's until this run's first state reaches it.
    wait_until(
        lambda: kval(nb, "(chat.run_id, chat.status)") == (2, "complete"),
        STREAM_TIMEOUT,
        what="the regenerated run complete",
    )
    expect(v).to_have_attribute("data-status", "complete", timeout=STREAM_TIMEOUT * MS)
    assert kval(nb, "chat.run.settings['max_new_tokens']") == 3
    assert kval(nb, "chat.run.settings['temperature']") == 0.8

    # Clear chat asks first, in the page; keeping the conversation keeps it.
    clear = button(v, "Clear chat")
    clear.click()
    ask = v.get_by_role("group", name="Clear the conversation?", exact=True)
    expect(ask).to_be_visible()
    keep = button(ask, "Keep it")
    expect(keep).to_be_focused()
    assert kval(nb, "len(chat.history)") == 2
    nb.page.keyboard.press("Escape")
    expect(ask).to_have_count(0)
    expect(clear).to_be_focused()
    assert kval(nb, "len(chat.history)") == 2
    clear.click()
    button(ask, "Yes, clear").click()
    wait_until(lambda: kval(nb, "len(chat.history)") == 0, 15, what="kernel: cleared")
    expect(v.locator(".nbstream-message")).to_have_count(0)
    expect(v.get_by_role("textbox", name="Message", exact=True)).to_be_focused()
    assert nb.console_errors() == []


def test_edit_says_resend_and_the_button_is_named_resend(lab):
    nb = lab.open_notebook([SETUP, CHAT])
    nb.run_cell(0)
    nb.run_cell(1)
    v = chat_view(nb, 1)
    box = v.get_by_role("textbox", name="Message", exact=True)
    box.fill("Hi")
    button(v, "Send").click()
    expect(v).to_have_attribute("data-status", "complete", timeout=STREAM_TIMEOUT * MS)
    button(v, "Edit").click()
    resend = button(v, "Resend")
    expect(resend).to_be_visible()
    expect(resend).to_contain_text("Resend")
    expect(resend).to_have_attribute("title", "Resend (Shift+Enter)")
    note = v.locator(".nbstream-edit-note")
    expect(note).to_contain_text("Resend replaces it")
    box.fill("Hello again")
    resend.click()
    wait_until(
        lambda: (
            kval(nb, "[m['content'] for m in chat.history if m['role'] == 'user']")
            == ["Hello again"]
        ),
        30,
        what="edited",
    )
    expect(button(v, "Send")).to_be_visible()
    assert nb.console_errors() == []


# A Markdown answer with a wide table, a code block with a long first line, and prose.
MARKDOWN = (
    "A table:\n\n"
    "| name | description | value | another column | more text here | and more |\n"
    "|---|---|---|---|---|---|\n"
    "| alpha_beta_gamma_delta | a rather long description of things | 12345678 |"
    " something else entirely | yet more words in the cell | the final cell of the row |\n\n"
    "```python\nprint('a fairly long first line of code that goes on and on and on and on')\n"
    "x = 1\n```\n\n"
    "Supercalifragilisticexpialidocious words_with_underscores_that_are_long and more text"
    " to wrap around the end of a line, and then some more words to wrap again."
)

# Where the lines of an element's text break: [previous char, next char] at each break.
_LINE_BREAKS = """(el) => {
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  const out = [];
  let prevTop = null, prevChar = '';
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    for (let i = 0; i < n.data.length; i++) {
      const r = document.createRange();
      r.setStart(n, i); r.setEnd(n, i + 1);
      const rect = [...r.getClientRects()].pop();
      if (!rect || n.data[i] === '\\n') { prevChar = n.data[i]; prevTop = null; continue; }
      if (prevTop !== null && rect.top > prevTop + 2) out.push([prevChar, n.data[i]]);
      prevTop = rect.top; prevChar = n.data[i];
    }
  }
  return out;
}"""


def tops(locator) -> list[float]:
    return locator.evaluate_all(
        "(els) => els.map((e) => Math.round(e.getBoundingClientRect().top))"
    )


def test_layout_is_stable_and_text_wraps_between_words(lab):
    """The bar does not jump when a run ends; raw text wraps between words; a wide table
    scrolls; the code block's Copy button covers no code; Copy answer copies exactly the
    kernel's answer."""
    nb = lab.open_notebook(
        [
            SETUP,
            "model, tokenizer = tiny_model(one_line=True)\n"
            "chat = nbstream.ChatWidget(model, tokenizer, max_new_tokens=6)\n"
            "chat",
            f"fm, ft = forced_model({MARKDOWN!r})\n"
            "w = nbstream.StreamWidget(fm, ft, max_new_tokens=300)\n"
            "w.prompt = 'Hi'\n"
            "w",
        ]
    )
    nb.context.grant_permissions(["clipboard-read", "clipboard-write"])
    for i in range(3):
        nb.run_cell(i)

    # The chat's bar: its tools stay where they were when the run ends.
    v = chat_view(nb, 1)
    tools = [button(v, name) for name in ("Settings", "Clear chat", "Prompt view")]
    before = [t.bounding_box() for t in tools]
    v.get_by_role("textbox", name="Message", exact=True).fill("Hi")
    button(v, "Send").click()
    expect(v).to_have_attribute("data-status", "complete", timeout=STREAM_TIMEOUT * MS)
    expect(v.locator(".nbstream-badge")).to_contain_text("stopped at max_new_tokens")
    after = [t.bounding_box() for t in tools]
    assert [round(b["y"] - v.bounding_box()["y"]) for b in after] == [
        round(b["y"] - v.bounding_box()["y"]) for b in before
    ]
    metric = v.locator(".nbstream-metrics .nbstream-metric")
    expect(metric.first).to_be_visible()
    assert all(
        n == 1 for n in metric.evaluate_all("(es) => es.map((e) => e.getClientRects().length)")
    )
    # Each answer has Copy answer: exactly the kernel's text.
    button(v.locator(".nbstream-message").nth(1), "Copy answer").click()
    answer = kval(nb, "chat.history[-1]['content']")
    wait_until(lambda: nb.page.evaluate("navigator.clipboard.readText()") == answer, 10)

    s = view(nb, 2)
    button(s, "Run").click()
    wait_status(s, "complete")
    text = kval(nb, "w.result")
    assert text == MARKDOWN
    # A wide table scrolls (its words whole) instead of squeezing its cells.
    wrap = s.locator(".nbstream-table")
    assert wrap.evaluate("(e) => e.scrollWidth > e.clientWidth + 20")
    for cell in s.locator(".nbstream-rendered td, .nbstream-rendered th").all():
        assert all(a in " \n" for a, _ in cell.evaluate(_LINE_BREAKS)), cell.inner_text()
    # The Copy button of the code block covers none of its first line.
    code = s.locator(".nbstream-code").first
    box = code.locator(".nbstream-copy").bounding_box()
    line = code.locator("pre").evaluate(
        """(pre) => { const r = document.createRange();
        const t = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT).nextNode();
        r.setStart(t, 0); r.setEnd(t, Math.min(t.data.indexOf('\\n') >>> 0, t.data.length));
        const b = r.getBoundingClientRect(); return {top: b.top, bottom: b.bottom}; }"""
    )
    assert box["y"] + box["height"] <= line["top"] + 1
    # Copy answer: the kernel's text, exactly.
    button(s, "Copy answer").click()
    wait_until(lambda: nb.page.evaluate("navigator.clipboard.readText()") == text, 10)
    # The raw text wraps between words only.
    button(s, "Raw text").click()
    breaks = s.locator(".nbstream-raw").evaluate(_LINE_BREAKS)
    assert breaks, "the raw text should wrap in this width"
    assert all(a in " \n" for a, _ in breaks), breaks
    assert nb.console_errors() == []


def test_four_compare_columns_lay_out_in_balanced_rows_with_compact_tools(lab):
    nb = lab.open_notebook(
        [
            SETUP,
            "model, tokenizer = tiny_model(one_line=True)\n"
            "cw = nbstream.CompareWidget(model, tokenizer, 'Hello', settings=[{},"
            " {'temperature': 0.7}, {'temperature': 1.0, 'top_k': 40},"
            " {'temperature': 1.3, 'top_p': 0.9}], max_new_tokens=20)\n"
            "cw",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    head = nb.cell(1).locator(".nbstream-compare")
    button(head, "Run all").click()
    roots = nb.cell(1).locator(".nbstream-column .nbstream")
    for i in range(4):
        expect(roots.nth(i)).to_have_attribute(
            "data-status", "complete", timeout=STREAM_TIMEOUT * MS
        )
    for width in (1280, 1000, 700):
        nb.page.set_viewport_size({"width": width, "height": 900})
        top = tops(nb.cell(1).locator(".nbstream-column"))
        # 4 in a row, or 2 + 2 (or one per row): never 3 + 1.
        rows = [top.count(t) for t in dict.fromkeys(top)]
        assert len(set(rows)) == 1, (width, top)
        for i in range(4):
            tool_tops = set(tops(roots.nth(i).locator(".nbstream-tools button")))
            assert len(tool_tops) <= 2, (width, i, tool_tops)
            metric = roots.nth(i).locator(".nbstream-metric")
            expect(metric.first).to_be_visible()
            rects = metric.evaluate_all("(es) => es.map((e) => e.getClientRects().length)")
            assert all(n == 1 for n in rects), (width, i, rects)
    assert nb.console_errors() == []


def test_a_seed_up_to_2_64_minus_1_goes_from_the_panel_to_the_run_exactly(lab):
    """The kernel takes seeds up to 2**64 - 1; a JavaScript number is exact only to
    2**53 - 1, so such a seed travels as its digits, both ways."""
    nb = lab.open_notebook(
        [
            SETUP,
            "model, tokenizer = tiny_model(one_line=True)\n"
            "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=3, temperature=1.0)\n"
            "w.prompt = 'Hi'\n"
            "w",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    v.get_by_role("button", name="Settings", exact=True).click()
    seed = v.get_by_role("textbox", name="Seed", exact=True)
    seed.fill(str(2**64 - 1))
    seed.press("Enter")
    wait_until(lambda: kval(nb, "w.seed") == 2**64 - 1, 15, what="kernel: the exact seed")
    assert kval(nb, "(type(w.seed).__name__, w.settings_errors)") == ("int", {})
    expect(seed).not_to_have_attribute("aria-invalid", "true")
    # One past it: refused in the page, in the kernel's words.
    seed.fill(str(2**64))
    expect(seed).to_have_attribute("aria-invalid", "true")
    wait_until(lambda: "seed" in kval(nb, "w.settings_errors"), 15, what="kernel refuses")
    # Set from code: the field shows it exactly, and Run sends it back unchanged.
    nb.kernel_eval("setattr(w, 'seed', 2**63 + 1)")
    expect(seed).to_have_value(str(2**63 + 1))
    expect(seed).not_to_have_attribute("aria-invalid", "true")
    button(v, "Run").click()
    wait_status(v, "complete")
    assert kval(nb, "w.run.settings['seed']") == 2**63 + 1
    assert kval(nb, "w.seed") == 2**63 + 1
    assert nb.console_errors() == []


def test_token_notes_follow_the_run_and_a_popover_closes_when_its_run_ends(lab):
    """Probabilities turned on mid-run: the note says the run *is going* without them (not
    that it was made so) until it ends; an open popover of alternatives closes when the
    answer under it ends or a new one starts streaming below it."""
    nb = lab.open_notebook(
        [
            SETUP,
            "model, tokenizer = tiny_model(one_line=True)\n"
            "chat = nbstream.ChatWidget(model, tokenizer, max_new_tokens=8)\n"
            "chat",
            "gate = Gate(model, 4)\nchat.generate('First')",
            "gate.handle.remove()\ngate = Gate(model, 4)",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = chat_view(nb, 1)
    nb.run_cell(2)
    wait_until(lambda: kval(nb, "gate.reached.is_set()"), STREAM_TIMEOUT, what="answer held")
    button(v, "Probabilities").click()
    answers = v.locator(".nbstream-message[data-role='assistant']")
    note = answers.nth(0).locator(".nbstream-token-note")
    expect(note).to_contain_text("This run is going without probabilities")
    assert kval(nb, "chat.status") == "running"
    nb.kernel_eval("gate.opened.set()")
    expect(answers.nth(0)).to_have_attribute("data-status", "complete", timeout=STREAM_TIMEOUT * MS)
    expect(note).to_have_text("This run was made without probabilities; run again to capture them")

    # A second answer, with alternatives, held mid-stream; its popover open meanwhile.
    nb.run_cell(3)
    button(v, "Alternatives").click()
    box = v.get_by_role("textbox", name="Message", exact=True)
    box.fill("Second")
    button(v, "Send").click()
    wait_until(lambda: kval(nb, "gate.reached.is_set()"), STREAM_TIMEOUT, what="answer held")
    token = answers.nth(1).locator(".nbstream-token").first
    expect(token).to_be_visible(timeout=STREAM_TIMEOUT * MS)
    token.click()
    pop = answers.nth(1).get_by_role("dialog", name="Alternatives at step 1")
    expect(pop).to_be_visible()
    nb.kernel_eval("gate.handle.remove()")
    nb.kernel_eval("gate.opened.set()")
    expect(answers.nth(1)).to_have_attribute("data-status", "complete", timeout=STREAM_TIMEOUT * MS)
    expect(pop).to_be_hidden()
    # Opened again after the end, then a new answer starts below it: it closes.
    token.click()
    expect(pop).to_be_visible()
    box.fill("Third")
    button(v, "Send").click()
    expect(answers).to_have_count(3, timeout=STREAM_TIMEOUT * MS)
    expect(pop).to_be_hidden()
    assert nb.console_errors() == []


def test_max_new_tokens_over_the_context_is_refused_at_its_field_not_the_prompt(lab):
    nb = lab.open_notebook(
        [
            SETUP,
            "model, tokenizer = tiny_model(one_line=True)\n"
            "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=5)\n"
            "w.prompt = 'Hello there, how are you?'\n"
            "w",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    context = kval(nb, "w.settings_defaults['context_length']")
    assert context == kval(nb, "model.config.max_position_embeddings")
    prompt = v.get_by_role("textbox", name="Prompt", exact=True)
    v.get_by_role("button", name="Settings", exact=True).click()
    field = v.get_by_role("textbox", name="Max new tokens", exact=True)
    # An absurd value is refused at the field, as typed.
    field.fill("100000")
    expect(field).to_have_attribute("aria-invalid", "true")
    expect(field.locator("xpath=..").locator(".nbstream-field-error")).to_contain_text(
        f"the model's whole context ({context} tokens"
    )
    button(v, "Run").click()
    expect(field).to_be_focused()
    assert kval(nb, "(w.run_id, w.max_new_tokens)") == (0, 100000)

    # A value the field takes but the prompt leaves no room for: the kernel refuses the
    # run, and the field that caused it is marked, not the prompt.
    nb.kernel_eval(f"setattr(w, 'max_new_tokens', {context - 2})")
    expect(field).to_have_value(str(context - 2))
    expect(field).not_to_have_attribute("aria-invalid", "true")
    button(v, "Run").click()
    wait_until(lambda: "max_new_tokens" in kval(nb, "w.input_error"), 15, what="refused")
    message = kval(nb, "w.input_error")
    assert kval(nb, "w.run_id") == 0
    expect(field).to_have_attribute("aria-invalid", "true")
    expect(field.locator("xpath=..").locator(".nbstream-field-error")).to_have_text(message)
    expect(prompt).not_to_have_attribute("aria-invalid", "true")
    expect(v.locator(".nbstream-input-error")).to_have_text(message)

    # Fixed at the field: the mark goes and the run starts.
    field.fill("4")
    expect(field).not_to_have_attribute("aria-invalid", "true")
    button(v, "Run").click()
    wait_status(v, "complete")
    assert kval(nb, "(w.run_id, w.input_error, w.run.settings['max_new_tokens'])") == (1, "", 4)
    expect(v.locator(".nbstream-input-error")).to_have_count(0)
    assert nb.console_errors() == []


def test_wrapped_token_lines_break_between_tokens(lab):
    """A token with a leading space is never split at the end of a line (its space left
    there, shaded, on its own): each token is one box on one line."""
    nb = lab.open_notebook(
        [
            SETUP,
            "model, tokenizer = tiny_model(one_line=True)\n"
            "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=150, show_tokens=True)\n"
            "w.prompt = 'Hello'\n"
            "w",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    button(v, "Run").click()
    wait_status(v, "complete")
    tokens = v.locator(".nbstream-token")
    expect(tokens).to_have_count(kval(nb, "len(w.run.token_ids)"))
    lines = tops(tokens)
    assert len(set(lines)) > 2, "the tokens should wrap onto several lines"
    split = tokens.evaluate_all(
        "(ts) => ts.filter((t) => t.getClientRects().length > 1).map((t) => t.textContent)"
    )
    assert split == []
    assert nb.console_errors() == []
