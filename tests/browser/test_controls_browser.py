"""The settings panel and the prompt view in a real JupyterLab driven by Chromium.

Each test opens its own notebook (fresh kernel) with the tiny model; the kernel is read
through `nb.kernel_eval` (see test_widget_browser.py).
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect
from test_widget_browser import MS, SETUP, STREAM_TIMEOUT, kval, view, wait_status, wait_until

pytestmark = pytest.mark.browser

WIDGET = (
    "model, tokenizer = tiny_model(one_line=True)\n"
    "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=5)\n"
    "w"
)
CHAT = (
    "model, tokenizer = tiny_model(one_line=True)\n"
    "chat = nbstream.ChatWidget(model, tokenizer, system='Be brief.', max_new_tokens=4)\n"
    "chat"
)


def field(v, name: str):
    return v.get_by_role("textbox", name=name, exact=True)


def open_settings(v) -> None:
    toggle = v.get_by_role("button", name="Settings", exact=True)
    expect(toggle).to_have_attribute("aria-expanded", "false")
    toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "true")


def error_next_to(box):
    """The message element of a field (its group holds the field and the message)."""
    return box.locator("xpath=..").locator(".nbstream-field-error")


def expect_invalid(box, message: str) -> None:
    expect(box).to_have_attribute("aria-invalid", "true")
    expect(error_next_to(box)).to_have_text(message)
    described = (box.get_attribute("aria-describedby") or "").split()
    assert described and described[0] == error_next_to(box).get_attribute("id")


def test_settings_panel_rejects_a_bad_value_and_the_next_run_uses_a_good_one(lab):
    nb = lab.open_notebook([SETUP, WIDGET])
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    expect(v).to_have_attribute("data-status", "idle")
    open_settings(v)
    expect(field(v, "Max new tokens")).to_have_value("5")  # the constructor's setting

    # The browser rejects a bad value: a message next to the field, Run starts nothing.
    temperature = field(v, "Temperature")
    temperature.fill("-1")
    expect_invalid(temperature, "temperature must be >= 0 (0 means greedy), got -1")
    v.get_by_role("textbox", name="Prompt", exact=True).fill("Hello")
    v.get_by_role("button", name="Run", exact=True).click()
    expect(temperature).to_be_focused()
    # Let any message the click might have sent reach the kernel, then look there.
    wait_until(lambda: kval(nb, "w.prompt") == "Hello", 15, what="the prompt box synced")
    assert kval(nb, "(w.run is None, w.run_id, w.status, w.temperature)") == (True, 0, "idle", None)
    expect(v).to_have_attribute("data-status", "idle")

    # A bad value set from code: Python's message next to the field, and nothing starts.
    nb.kernel_eval("setattr(w, 'top_k', 2.5)")
    top_k = field(v, "Top-k")
    expect(top_k).to_have_value("2.5")
    expect_invalid(top_k, "top_k must be an int, got 2.5")
    assert kval(nb, "w.settings_errors") == {"top_k": "top_k must be an int, got 2.5"}

    # Fixed in the page: the traits follow, and the next Run uses them.
    temperature.fill("")
    top_k.fill("7")
    field(v, "Max new tokens").fill("3")
    field(v, "Stop sequences").fill("zzz")
    v.get_by_role("button", name="Run", exact=True).click()
    wait_status(v, "complete")
    expect(top_k).not_to_have_attribute("aria-invalid", "true")
    assert kval(nb, "w.settings_errors") == {}
    assert kval(nb, "(w.max_new_tokens, w.top_k, w.temperature, w.stop_sequences)") == (
        3,
        7,
        None,
        ["zzz"],
    )
    settings = kval(nb, "w.run.settings")
    assert settings["max_new_tokens"] == 3 and settings["top_k"] == 7
    assert settings["stop"] == ["zzz"] and "temperature" not in settings
    assert kval(nb, "w.record['settings']['max_new_tokens']") == 3
    assert kval(nb, "w.run_id") == 1  # exactly one run
    assert nb.console_errors() == []


def test_prompt_view_shows_the_templated_prompt_and_its_token_count(lab):
    nb = lab.open_notebook(
        [SETUP, WIDGET, "run = w.generate('Hi <b>there</b> & co')\ntext = w.wait()"]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    toggle = v.get_by_role("button", name="Prompt view", exact=True)
    expect(toggle).to_have_attribute("aria-pressed", "false")
    pre = v.locator(".nbstream-templated")
    expect(pre).to_be_hidden()
    toggle.click()
    expect(toggle).to_have_attribute("aria-pressed", "true")
    expect(pre).to_be_visible()
    nb.run_cell(2)
    wait_status(v, "complete")
    prompt_text = kval(nb, "w.run.prompt_text")
    tokens = kval(nb, "w.run.prompt_tokens")
    assert "<|im_start|>user\nHi <b>there</b> & co<|im_end|>" in prompt_text
    wait_until(
        lambda: pre.evaluate("(e) => e.textContent") == prompt_text, 15, what="the prompt shown"
    )
    expect(pre.locator("b")).to_have_count(0)  # plain text, never HTML
    count = v.locator(".nbstream-prompt-tokens")
    expect(count).to_have_text(f"{tokens} prompt tokens")
    expect(count).to_have_attribute("data-tokens", str(tokens))
    # The answer is where it was: the prompt view is beside the output, not in it.
    assert v.locator(".nbstream-output").evaluate("(e) => e.textContent").find("im_start") < 0
    assert nb.console_errors() == []


def test_chat_prompt_view_shows_the_whole_conversation_templated(lab):
    nb = lab.open_notebook(
        [
            SETUP,
            CHAT,
            "chat.generate('First question')\nchat.wait()\n"
            "chat.temperature = 0.8\nchat.seed = 11\n"
            "chat.generate('Second question')\nchat.wait()",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = nb.cell(1).locator(".nbstream.nbstream-chat").first
    nb.run_cell(2)
    expect(v.locator(".nbstream-message")).to_have_count(4, timeout=STREAM_TIMEOUT * MS)
    expect(v.locator(".nbstream-message").nth(3)).to_have_attribute(
        "data-status", "complete", timeout=STREAM_TIMEOUT * MS
    )
    # Settings set from code are in the panel, and were what the second answer used.
    open_settings(v)
    expect(field(v, "System prompt")).to_have_value("Be brief.")
    expect(field(v, "Temperature")).to_have_value("0.8")
    expect(field(v, "Seed")).to_have_value("11")
    assert kval(nb, "chat.record['settings']['seed']") == 11
    assert kval(nb, "chat.record['settings']['temperature']") == 0.8

    v.get_by_role("button", name="Prompt view", exact=True).click()
    pre = v.locator(".nbstream-templated")
    prompt_text = kval(nb, "chat.run.prompt_text")
    assert prompt_text.count("<|im_start|>user\n") == 2
    assert "<|im_start|>system\nBe brief.<|im_end|>" in prompt_text
    wait_until(
        lambda: pre.evaluate("(e) => e.textContent") == prompt_text, 15, what="the prompt shown"
    )
    tokens = kval(nb, "chat.run.prompt_tokens")
    expect(v.locator(".nbstream-prompt-tokens")).to_have_text(f"{tokens} prompt tokens")
    assert nb.console_errors() == []
