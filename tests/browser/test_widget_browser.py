"""StreamWidget in a real JupyterLab (and Notebook 7) driven by Chromium.

Each test opens its own notebook (fresh kernel). Cell 0 is SETUP. Where a test needs the
run to be at a known point (mid-stream when the page reloads, when a second view appears,
when another cell runs), a `Gate` forward hook holds the model at a given decode step until
the test opens it: no test depends on how fast this machine happens to be.

The kernel is read through `nb.kernel_eval` (a subshell: it answers while the run streams).

test_default_model_streams_then_completes takes the README screenshot (the widget
mid-stream) into test-artifacts/screenshot.png; with NBSTREAM_UPDATE_SCREENSHOT=1 it also
writes docs/screenshot.png (left alone otherwise, so a test run does not dirty the repo).
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import time

import pytest
from browser_helpers import MS, REPO, SETUP, STREAM_TIMEOUT, kval, view, wait_status, wait_until
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

SCREENSHOT = REPO / "test-artifacts" / "screenshot.png"
README_SCREENSHOT = REPO / "docs" / "screenshot.png"


# A prompt the default model answers with a short numbered Markdown list (78 tokens, EOS).
LIST_PROMPT = "What are three tips for learning to cook? Use a numbered list."
# One it answers at length (runs to max_new_tokens=80).
LONG_PROMPT = "Explain in a few sentences why the sky is blue."

TERMINAL = ("complete", "failed", "cancelled")


# ----- helpers ---------------------------------------------------------------------------


_READ_VIEW = """(root) => {
  const out = root.querySelector('.nbstream-output');
  const raw = root.querySelector('.nbstream-raw');
  return {
    status: root.dataset.status,
    partial: out.dataset.partial,
    shown: out.innerText,
    raw: raw ? raw.textContent : null,
  };
}"""


# Tag names of the elements in an output that show a ::after box (the streaming caret).
_CARETS = """(out) => [...out.querySelectorAll('*')]
  .filter((e) => !['none', 'normal'].includes(getComputedStyle(e, '::after').content))
  .map((e) => e.tagName)"""


def read_view(v) -> dict:
    """status, data-partial, the output's visible text, and (in raw mode) the raw text."""
    return v.evaluate(_READ_VIEW)


def show_raw(v) -> None:
    """Switch the view to its raw text (the exact text the front end accumulated)."""
    toggle = v.get_by_role("button", name="Raw text", exact=True)
    toggle.click()
    expect(toggle).to_have_attribute("aria-pressed", "true")


def raw_text(v) -> str:
    return v.locator(".nbstream-raw").evaluate("(e) => e.textContent")


def wait_raw_equals(v, text: str, timeout: float = 15.0) -> None:
    """The view's raw text becomes `text` (it renders once per animation frame)."""
    wait_until(lambda: raw_text(v) == text, timeout, what="view text == kernel text")


def sample_while_running(v, interval: float = 0.1, timeout: float = STREAM_TIMEOUT) -> list[dict]:
    """read_view(v) every `interval` s while data-status is running, until the run ends."""
    samples = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = read_view(v)
        if state["status"] == "running":
            samples.append(state)
        elif state["status"] in TERMINAL:
            return samples
        time.sleep(interval)
    raise AssertionError(f"run still going after {timeout} s")


def distinct_increases(lengths: list[int]) -> int:
    return sum(1 for a, b in itertools.pairwise(lengths) if b > a)


def no_console_errors(nb) -> None:
    assert nb.console_errors() == []


# ----- tests -----------------------------------------------------------------------------


def test_default_model_streams_then_completes(lab):
    """Text grows while running; the complete run's text is the kernel's `w.result`."""
    nb = lab.open_notebook(
        [
            SETUP,
            "w = nbstream.StreamWidget(max_new_tokens=80)\nw",
            f"run = w.generate({LIST_PROMPT!r})",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    expect(v).to_have_attribute("data-status", "idle")
    expect(v.get_by_role("textbox", name="Prompt", exact=True)).to_be_visible()
    nb.run_cell(2)

    # The README screenshot: mid-stream, once a second list item has some text.
    def second_item_or_end():
        items = v.locator(".nbstream-output li").all_inner_texts()
        return (len(items) >= 2 and len(items[1]) >= 20) or read_view(v)["status"] != "running"

    wait_until(second_item_or_end, STREAM_TIMEOUT, what="a second list item while running")
    if read_view(v)["status"] == "running":
        SCREENSHOT.parent.mkdir(exist_ok=True)
        nb.cell(1).screenshot(path=str(SCREENSHOT))
        if os.environ.get("NBSTREAM_UPDATE_SCREENSHOT") == "1":
            shutil.copyfile(SCREENSHOT, README_SCREENSHOT)
        # one streaming caret, at the end of the open list's last item
        assert v.locator(".nbstream-output").evaluate(_CARETS) == ["LI"]

    # The raw text (what the front end accumulated) grows, and only grows, while running.
    show_raw(v)
    samples = sample_while_running(v)
    lengths = [len(s["shown"]) for s in samples]
    assert distinct_increases(lengths) >= 3, lengths
    assert lengths == sorted(lengths), lengths
    assert {s["partial"] for s in samples if s["shown"]} == {"true"}

    wait_status(v, "complete")
    result = kval(nb, "w.result")
    assert kval(nb, "w.status") == "complete"
    assert result and result == kval(nb, "run.partial_text")
    wait_raw_equals(v, result)
    state = read_view(v)
    assert state["partial"] == "false"
    assert v.locator(".nbstream-partial-label").count() == 0
    assert v.locator(".nbstream-error").count() == 0
    # the Markdown rendering of the same text: a numbered list
    v.get_by_role("button", name="Raw text", exact=True).click()
    assert v.locator(".nbstream-output ol li").count() >= 2
    assert kval(nb, "w.metrics['tokens']") == kval(nb, "len(run.token_ids)") > 0
    assert v.get_by_role("button", name="Run", exact=True).is_enabled()
    assert v.get_by_role("button", name="Stop", exact=True).is_disabled()
    no_console_errors(nb)


def test_stop_click_cancels_mid_stream(lab):
    """Stop clicked mid-stream: cancelled, no result, partial text kept and marked, and the
    model made at most one more token after the Stop reached the kernel."""
    nb = lab.open_notebook(
        [
            SETUP,
            # Record how many tokens the run had when the Stop click reached the widget.
            "w = nbstream.StreamWidget(max_new_tokens=80)\n"
            "tokens_at_stop = []\n"
            "_stop = w.stop\n"
            "def recording_stop():\n"
            "    tokens_at_stop.append(len(w.run._buffer.items))\n"
            "    return _stop()\n"
            "w.stop = recording_stop\n"
            "w",
            f"run = w.generate({LONG_PROMPT!r})",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    nb.run_cell(2)
    wait_until(
        lambda: (s := read_view(v))["status"] == "running" and len(s["shown"]) >= 20,
        STREAM_TIMEOUT,
        what="some text while running",
    )
    assert read_view(v)["partial"] == "true"
    v.get_by_role("button", name="Stop", exact=True).click()

    wait_status(v, "cancelled")
    assert kval(nb, "w.status") == "cancelled"
    assert kval(nb, "w.result") is None
    assert kval(nb, "w.run.metrics['finish_reason']") == "cancelled"
    at_stop = kval(nb, "tokens_at_stop")
    final = kval(nb, "w.run.metrics['tokens']")
    assert len(at_stop) == 1, at_stop  # the click reached the kernel once
    assert 0 < at_stop[0] < 80, at_stop  # mid-stream
    assert final - at_stop[0] <= 1, (at_stop, final)

    partial = kval(nb, "w.partial_text")
    assert partial
    state = read_view(v)
    assert state["partial"] == "true"
    label = v.locator(".nbstream-partial-label")
    expect(label).to_have_text("Partial output — stopped before its end")
    show_raw(v)
    wait_raw_equals(v, partial)
    assert v.get_by_role("button", name="Stop", exact=True).is_disabled()
    assert v.get_by_role("button", name="Run", exact=True).is_enabled()
    no_console_errors(nb)


def test_failure_mid_stream_keeps_partial_text(lab):
    """The model raises at its 20th step: failed, the error shown, the partial text kept."""
    nb = lab.open_notebook(
        [
            SETUP,
            "model, tokenizer = tiny_model(one_line=True)\n"
            "gate = Gate(model, 10)\n"
            "def fail(module, args, output):\n"
            "    if gate.calls == 20:\n"
            "        raise RuntimeError('injected failure at step 20')\n"
            "model.register_forward_hook(fail)\n"
            "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=200)\n"
            "w",
            "run = w.generate('hello')",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    show_raw(v)
    nb.run_cell(2)
    # held at step 10: the first chunks are shown, marked partial
    wait_until(lambda: kval(nb, "gate.reached.is_set()"), 30, what="step 10")
    before = kval(nb, "w.partial_text")
    assert before
    wait_raw_equals(v, before)
    state = read_view(v)
    assert (state["status"], state["partial"]) == ("running", "true")
    nb.kernel_eval("gate.opened.set()")

    wait_status(v, "failed")
    assert kval(nb, "w.status") == "failed"
    assert kval(nb, "w.result") is None
    assert kval(nb, "type(w.error).__name__") == "RuntimeError"
    assert kval(nb, "str(w.error)") == "injected failure at step 20"
    assert kval(nb, "w.run.metrics['tokens']") == 19
    partial = kval(nb, "w.partial_text")
    assert partial.startswith(before) and len(partial) > len(before)

    expect(v.locator(".nbstream-error")).to_have_text("RuntimeError: injected failure at step 20")
    wait_raw_equals(v, partial)
    assert read_view(v)["partial"] == "true"
    expect(v.locator(".nbstream-partial-label")).to_have_text("Partial output — run failed")
    no_console_errors(nb)


def test_reload_mid_stream_recovers_and_keeps_streaming(lab):
    """Save and reload the page mid-stream: the view comes back with the text so far, keeps
    streaming, and ends with the kernel's result."""
    nb = lab.open_notebook(
        [
            SETUP,
            "model, tokenizer = tiny_model(one_line=True)\n"
            "first, second = Gate(model, 300), Gate(model, 400)\n"
            "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=500)\n"
            "w",
            "run = w.generate('hello')",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    nb.run_cell(2)
    v = view(nb, 1)
    wait_until(lambda: len(read_view(v)["shown"]) > 0, 30, what="first text")
    assert kval(nb, "w.status") == "running"
    nb.save()
    nb.reload()
    assert kval(nb, "w.status") == "running"  # the run went on while the page was away

    v = view(nb, 1)
    expect(v).to_have_attribute("data-status", "running", timeout=30 * MS)
    show_raw(v)
    # Held at step 300: the reloaded view has every character the kernel has.
    wait_until(lambda: kval(nb, "first.reached.is_set()"), STREAM_TIMEOUT, what="step 300")
    at_first = kval(nb, "w.partial_text")
    wait_raw_equals(v, at_first)
    nb.kernel_eval("first.opened.set()")
    # It keeps streaming: held again at step 400, with more text.
    wait_until(lambda: kval(nb, "second.reached.is_set()"), STREAM_TIMEOUT, what="step 400")
    at_second = kval(nb, "w.partial_text")
    assert at_second.startswith(at_first) and len(at_second) > len(at_first)
    wait_raw_equals(v, at_second)
    assert read_view(v)["status"] == "running"
    nb.kernel_eval("second.opened.set()")

    wait_status(v, "complete")
    result = kval(nb, "w.result")
    assert result.startswith(at_second) and len(result) > len(at_second)
    assert kval(nb, "w.metrics['tokens']") == 500
    wait_raw_equals(v, result)
    assert read_view(v)["partial"] == "false"
    assert nb.cell(1).locator(".nbstream").count() == 1
    no_console_errors(nb)


HOSTILE = (
    '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1"> '
    "[click](javascript:window.__pwned=1) "
    '<iframe src="javascript:window.__pwned=1"></iframe>'
)


def test_hostile_output_executes_nothing(lab):
    nb = lab.open_notebook(
        [
            SETUP,
            f"model, tokenizer = forced_model({HOSTILE!r})\n"
            "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=200)\n"
            "w",
            "run = w.generate('say it')",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    nb.run_cell(2)
    v = view(nb, 1)
    wait_status(v, "complete")
    result = kval(nb, "w.result")
    assert result == HOSTILE  # the model really produced the payload
    output = v.locator(".nbstream-output")
    # shown as text, not markup
    wait_until(lambda: "<script>window.__pwned=1</script>" in output.inner_text())
    assert "<iframe" in output.inner_text()

    # markdown-it does not link a javascript: URL; if it ever did, the link must be inert
    links = output.locator("a")
    for i in range(links.count()):
        assert links.nth(i).get_attribute("href") is None
        links.nth(i).click()
    if links.count() == 0:
        output.get_by_text("[click](javascript:window.__pwned=1)").click()
    nb.page.wait_for_timeout(300)  # give anything that would run a chance to

    assert nb.page.evaluate("typeof window.__pwned") == "undefined"
    for frame in nb.page.frames:
        assert frame.evaluate("typeof window.__pwned") == "undefined"
    assert len(nb.context.pages) == 1  # no window opened
    assert output.locator("script, img, iframe, object, embed, svg").count() == 0
    on_attrs = output.evaluate(
        """(out) => [out, ...out.querySelectorAll('*')].flatMap(
             (e) => [...e.attributes].map((a) => a.name).filter((n) => n.startsWith('on')))"""
    )
    assert on_attrs == []
    hrefs = output.evaluate(
        "(out) => [...out.querySelectorAll('[href],[src]')].map((e) => e.outerHTML)"
    )
    assert hrefs == []
    show_raw(v)
    wait_raw_equals(v, result)
    no_console_errors(nb)


def test_second_view_mid_stream(lab):
    """display(w) again mid-stream: both views end with the same text, the kernel's result."""
    nb = lab.open_notebook(
        [
            SETUP,
            "model, tokenizer = tiny_model(one_line=True)\n"
            "gate = Gate(model, 300)\n"
            "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=400)\n"
            "w",
            "run = w.generate('hello')",
            "display(w)",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    first = view(nb, 1)
    show_raw(first)
    nb.run_cell(2)
    wait_until(lambda: raw_text(first), 30, what="first text")
    nb.run_cell(3)  # streaming, or held at step 300: mid-stream either way
    assert kval(nb, "w.status") == "running"
    second = view(nb, 3)
    expect(second).to_have_attribute("data-status", "running")
    show_raw(second)
    wait_until(lambda: kval(nb, "gate.reached.is_set()"), STREAM_TIMEOUT, what="step 300")
    held = kval(nb, "w.partial_text")
    wait_raw_equals(first, held)
    wait_raw_equals(second, held)
    nb.kernel_eval("gate.opened.set()")

    wait_status(first, "complete")
    wait_status(second, "complete")
    result = kval(nb, "w.result")
    assert result.startswith(held) and len(result) > len(held)
    wait_raw_equals(first, result)
    wait_raw_equals(second, result)
    for v in (first, second):
        assert read_view(v)["partial"] == "false"
    no_console_errors(nb)


def test_run_button_starts_exactly_one_run(lab):
    """Type a prompt and click Run (ten times at once): one run, which streams and completes."""
    nb = lab.open_notebook([SETUP, "w = nbstream.StreamWidget(max_new_tokens=40)\nw"])
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    prompt = v.get_by_role("textbox", name="Prompt", exact=True)
    run = v.get_by_role("button", name="Run", exact=True)
    # an empty prompt starts nothing and says why
    run.click()
    expect(v.get_by_role("alert")).to_have_text("Type a prompt first, then Run.")
    assert kval(nb, "w.run_id") == 0
    expect(v).to_have_attribute("data-status", "idle")

    prompt.fill("Name two colors.")
    nb.clear_ws_frames()
    # Ten clicks in one task: all of them before the kernel can answer the first.
    run.evaluate("(b) => { for (let i = 0; i < 10; i++) b.click(); }")

    wait_status(v, "complete")
    sent = [
        m["content"]["data"].get("content", {}).get("type")
        for d, m in nb.ws_messages()
        if d == "sent" and m["msg_type"] == "comm_msg"
    ]
    assert sent.count("run") == 10  # every click reached the kernel...
    assert kval(nb, "w.run_id") == 1  # ...and one run started
    assert kval(nb, "w.prompt") == "Name two colors."
    assert "Name two colors." in kval(nb, "w.run.prompt_text")
    assert kval(nb, "w.input_error") == ""
    expect(v.get_by_role("alert")).to_have_count(0)
    result = kval(nb, "w.result")
    assert result
    show_raw(v)
    wait_raw_equals(v, result)
    assert read_view(v)["partial"] == "false"
    # one more click after the end is one more run
    run.click()
    # The second run's end in the kernel (the view's "complete" is the first run's until
    # the second's first state reaches it), then in the view.
    wait_until(
        lambda: kval(nb, "(w.run_id, w.status)") == (2, "complete"), STREAM_TIMEOUT, what="run 2"
    )
    wait_status(v, "complete")
    no_console_errors(nb)


def test_kernel_is_free_while_streaming(lab):
    """Another cell runs to the end while the run streams."""
    nb = lab.open_notebook(
        [
            SETUP,
            "model, tokenizer = tiny_model(one_line=True)\n"
            "gate = Gate(model, 300)\n"
            "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=400)\n"
            "w",
            "run = w.generate('hello')",
            "tokens_then = run.metrics['tokens']\n1 + 1",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    nb.run_cell(2)
    wait_until(lambda: read_view(v)["shown"], 30, what="first text")
    nb.run_cell(3, timeout=30)
    assert nb.output(3) == "2"
    assert kval(nb, "w.status") == "running"  # the stream has not ended
    assert read_view(v)["status"] == "running"
    nb.kernel_eval("gate.opened.set()")
    wait_status(v, "complete")
    assert kval(nb, "tokens_then") < kval(nb, "w.metrics['tokens']") == 400
    no_console_errors(nb)


def test_rerunning_the_cell_stops_the_old_run(lab):
    """Re-running the widget's cell mid-stream closes the old widget and stops its run."""
    nb = lab.open_notebook(
        [
            SETUP + "\nwidgets = []",
            "model, tokenizer = tiny_model(one_line=True)\n"
            "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=8000)\n"
            "widgets.append(w)\n"
            "w.generate('hello')\n"
            "w",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    wait_until(lambda: read_view(v)["shown"], 30, what="first text")
    assert kval(nb, "widgets[0].status") == "running"

    nb.run_cell(1)
    wait_until(lambda: kval(nb, "widgets[0].run.done"), 30, what="the old run ended")
    assert kval(nb, "len(widgets)") == 2
    assert kval(nb, "widgets[0].run.status") == "cancelled"
    assert kval(nb, "widgets[0].comm is None")  # closed
    # Re-running the cell also clears its output in the page: whichever the kernel hears
    # first (the page's "removed" or the new execution) names the reason; both are true.
    assert kval(nb, "widgets[0].run.cancel_reason") in (
        "the widget was closed (its cell was run again)",
        "the widget was closed (its output was cleared)",
    )
    wait_until(lambda: kval(nb, "widgets[0].status") == "cancelled", 30, what="old status")
    # The new run held the queue until the old one ended; its view thread publishes the
    # queued -> running change on its next wake (a token, or its poll).
    wait_until(lambda: kval(nb, "widgets[1].status") == "running", 30, what="new run running")
    new_thread = kval(nb, "widgets[1].run._thread.name")
    run_threads = (
        "sorted(t.name for t in threading.enumerate() if t.name.startswith('nbstream-run-'))"
    )
    wait_until(lambda: kval(nb, run_threads) == [new_thread], 30, what="only the new run")
    # one view left in the cell, the new widget's, streaming
    assert nb.cell(1).locator(".nbstream").count() == 1
    expect(view(nb, 1)).to_have_attribute("data-status", "running")

    nb.kernel_eval("widgets[1].stop()")
    wait_status(view(nb, 1), "cancelled")
    no_console_errors(nb)


def test_an_answer_cut_at_max_new_tokens_is_marked(lab):
    """A run that reaches max_new_tokens ends complete, and the badge and the output say
    it stopped there; the saved fallback says so too."""
    nb = lab.open_notebook(
        [
            SETUP,
            "model, tokenizer = tiny_model(one_line=True)\n"
            "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=12)\n"
            "w.generate('hello')\n"
            "w",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    wait_status(v, "complete")
    assert kval(nb, "w.metrics['finish_reason']") == "length"
    badge = v.locator(".nbstream-badge")
    expect(badge).to_contain_text("complete · stopped at max_new_tokens")
    expect(badge).to_have_class(re.compile(r"\bnbstream-cut\b"))
    expect(v.locator(":scope > .nbstream-cut")).to_contain_text("stopped at max_new_tokens")
    saved = kval(nb, "w._fallback()[1]['text/plain']")
    assert saved.startswith("nbstream · complete · stopped at max_new_tokens · 12 tokens")
    no_console_errors(nb)


def test_notebook7_smoke(notebook7):
    nb = notebook7.open_notebook(
        [
            SETUP,
            "model, tokenizer = tiny_model(one_line=True)\n"
            "gate = Gate(model, 100)\n"
            "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=200)\n"
            "w",
            "run = w.generate('hello')",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    expect(v).to_have_attribute("data-status", "idle")
    show_raw(v)
    nb.run_cell(2)
    wait_until(lambda: kval(nb, "gate.reached.is_set()"), 30, what="step 100")
    held = kval(nb, "w.partial_text")
    wait_raw_equals(v, held)
    assert read_view(v)["status"] == "running"
    nb.kernel_eval("gate.opened.set()")
    wait_status(v, "complete")
    result = kval(nb, "w.result")
    assert result.startswith(held) and len(result) > len(held)
    wait_raw_equals(v, result)
    assert read_view(v)["partial"] == "false"
    no_console_errors(nb)
