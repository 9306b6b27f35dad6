"""The settings panel and the prompt view in a real JupyterLab driven by Chromium.

Each test opens its own notebook (fresh kernel) with the tiny model; the kernel is read
through `nb.kernel_eval` (see test_widget_browser.py).
"""

from __future__ import annotations

import pytest
from browser_helpers import MS, SETUP, STREAM_TIMEOUT, kval, view, wait_status, wait_until
from playwright.sync_api import expect

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

    # A bad value: a message next to the field, and the kernel holds it too (one state),
    # so Run starts nothing.
    temperature = field(v, "Temperature")
    temperature.fill("-1")
    expect_invalid(temperature, "temperature must be >= 0 (0 means greedy), got -1")
    v.get_by_role("textbox", name="Prompt", exact=True).fill("Hello")
    v.get_by_role("button", name="Run", exact=True).click()
    expect(temperature).to_be_focused()
    # Let any message the click might have sent reach the kernel, then look there.
    wait_until(lambda: kval(nb, "w.prompt") == "Hello", 15, what="the prompt box synced")
    assert kval(nb, "(w.run is None, w.run_id, w.status, w.temperature)") == (True, 0, "idle", -1)
    expect(v).to_have_attribute("data-status", "idle")
    # Once the kernel has reported on it, its message is the one shown.
    expect_invalid(temperature, kval(nb, "w.settings_errors")["temperature"])

    # A bad value set from code: Python's message next to the field, and nothing starts.
    nb.kernel_eval("setattr(w, 'top_k', 2.5)")
    top_k = field(v, "Top-k")
    expect(top_k).to_have_value("2.5")
    expect_invalid(top_k, "top_k must be an int, got 2.5")
    assert kval(nb, "w.settings_errors")["top_k"] == "top_k must be an int, got 2.5"

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


def test_a_bad_value_typed_in_the_panel_is_the_kernels_state_too(lab):
    """What the panel marks red, the kernel holds and refuses to run."""
    nb = lab.open_notebook([SETUP, WIDGET])
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    open_settings(v)
    temperature = field(v, "Temperature")

    # Out of range: the number typed reaches the kernel, which reports it.
    temperature.fill("-1")
    temperature.press("Enter")
    wait_until(lambda: kval(nb, "w.temperature") == -1, 15, what="the kernel got -1")
    errors = kval(nb, "w.settings_errors")
    assert list(errors) == ["temperature"]
    expect_invalid(temperature, errors["temperature"])
    expect(v.get_by_role("button", name="Settings", exact=True)).to_have_attribute(
        "data-invalid", "true"
    )
    # generate() from code refuses to start, with the message the field shows.
    nb.kernel_eval(
        'exec(\'try:\\n    w.generate("Hi")\\n    refused = None\\n'
        "except ValueError as e:\\n    refused = str(e)')"
    )
    refused = kval(nb, "refused")
    assert refused and errors["temperature"] in refused and "nothing was started" in refused
    assert kval(nb, "(w.run is None, w.run_id)") == (True, 0)

    # Not a number at all: the text typed reaches the kernel; the kernel's message is shown.
    temperature.fill("warm")
    temperature.press("Enter")
    wait_until(lambda: kval(nb, "w.temperature") == "warm", 15, what="the kernel got the text")
    message = kval(nb, "w.settings_errors")["temperature"]
    assert message == "temperature must be a number, got 'warm'"
    expect_invalid(temperature, message)

    # Fixed in the page: both sides clear, and a run from code starts with the value.
    temperature.fill("0.5")
    temperature.press("Enter")
    wait_until(lambda: kval(nb, "w.settings_errors") == {}, 15, what="the kernel cleared it")
    expect(temperature).not_to_have_attribute("aria-invalid", "true")
    expect(error_next_to(temperature)).to_have_text("")
    expect(v.get_by_role("button", name="Settings", exact=True)).to_have_attribute(
        "data-invalid", "false"
    )
    assert kval(nb, "w.temperature") == 0.5
    nb.kernel_eval("w.generate('Hi')")
    wait_status(v, "complete")
    assert kval(nb, "w.record['settings']['temperature']") == 0.5
    assert nb.console_errors() == []


def sampling_shown(v) -> dict:
    """What the panel says the next run will do: the Sampling field's default option, its
    note, and the unset sampling parameters' placeholders."""
    return v.evaluate(
        """(root) => {
          const select = root.querySelector('select[data-field="do_sample"]');
          const note = root.querySelector('.nbstream-sampling-note');
          const ph = (n) => root.querySelector(`input[data-field="${n}"]`).placeholder;
          return {auto: select.options[0].textContent, note: note ? note.textContent : null,
                  samples: note ? note.dataset.samples : null,
                  temperature: ph('temperature'), top_p: ph('top_p'), top_k: ph('top_k')};
        }"""
    )


def run_from_panel(nb, v, runs: int) -> None:
    v.get_by_role("button", name="Run", exact=True).click()
    # The kernel's run `runs` has ended (the page's "complete" may still be the run before).
    wait_until(
        lambda: kval(nb, "(w.run_id, w.status)") == (runs, "complete"),
        STREAM_TIMEOUT,
        what=f"run {runs} complete",
    )
    wait_status(v, "complete")


def test_sampling_labels_say_what_the_run_does(lab):
    """The panel says greedy or samples exactly when the run does."""
    nb = lab.open_notebook([SETUP, WIDGET])
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    open_settings(v)
    v.get_by_role("textbox", name="Prompt", exact=True).fill("Hi")
    temperature = field(v, "Temperature")
    sampling = v.get_by_role("combobox", name="Sampling", exact=True)

    # Nothing set: the tiny model's default is greedy, so its temperature is not used.
    assert kval(nb, "w.next_run_samples") is False
    shown = sampling_shown(v)
    assert shown["samples"] == "false" and "greedy" in shown["auto"].lower()
    assert "temperature, top-p and top-k are not used" in shown["note"]
    for name in ("temperature", "top_p", "top_k"):
        assert "not used" in shown[name] and "model default" not in shown[name], shown
    run_from_panel(nb, v, 1)
    assert kval(nb, "w.record['settings']['do_sample']") is False

    # A temperature set: the run samples, and the panel says so.
    temperature.fill("0.7")
    temperature.press("Enter")
    wait_until(lambda: kval(nb, "w.next_run_samples") is True, 15, what="kernel: samples")
    expect(v.locator(".nbstream-sampling-note")).to_have_attribute("data-samples", "true")
    shown = sampling_shown(v)
    assert "sampl" in shown["auto"].lower() and "off" not in shown["auto"].lower(), shown
    assert "not used" not in shown["note"] and "samples" in shown["note"]
    assert shown["top_k"] == "50 (model default)" and shown["top_p"] == "1 (model default)"
    run_from_panel(nb, v, 2)
    assert kval(nb, "w.record['settings']['do_sample']") is True

    # Temperature 0 is greedy whatever the model says.
    temperature.fill("0")
    temperature.press("Enter")
    wait_until(lambda: kval(nb, "w.next_run_samples") is False, 15, what="kernel: greedy")
    expect(v.locator(".nbstream-sampling-note")).to_have_attribute("data-samples", "false")
    run_from_panel(nb, v, 3)
    assert kval(nb, "w.record['settings']['do_sample']") is False

    # Sampling switched on, temperature unset: samples at the model's temperature.
    temperature.fill("")
    sampling.select_option("true")
    wait_until(lambda: kval(nb, "(w.do_sample, w.temperature)") == (True, None), 15)
    expect(v.locator(".nbstream-sampling-note")).to_have_attribute("data-samples", "true")
    assert sampling_shown(v)["temperature"] == "1 (model default)"
    run_from_panel(nb, v, 4)
    assert kval(nb, "w.record['settings']['do_sample']") is True
    assert kval(nb, "w.next_run_samples") is True
    assert nb.console_errors() == []
