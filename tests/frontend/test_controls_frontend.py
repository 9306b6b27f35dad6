"""Front-end tests of the settings panel and the prompt view (js/src/settings_panel.js), in both
views (StreamWidget: stream.js; ChatWidget: ?bundle=chat), with the fake model of
harness.html. The kernel's side (validate_settings, settings_errors) is tested in
tests/test_widget.py and tests/test_chat.py; here the fake model's state stands in for it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from frontend_helpers import change, emit, frame, log, mount, sent, view
from playwright.sync_api import Page, expect

PROMPT = (
    "<|im_start|>system\nYou are a helpful AI assistant<|im_end|>\n"
    "<|im_start|>user\n<b>Hi</b> & bye<|im_end|>\n<|im_start|>assistant\n"
)


def sets(page: Page, i: int = 0) -> list[list]:
    """The traits the view set on its model, in order: [name, value]."""
    return [entry[1:] for entry in log(page, i) if entry[0] == "set"]


def open_settings(root) -> None:
    toggle = root.get_by_role("button", name="Settings", exact=True)
    expect(toggle).to_have_attribute("aria-expanded", "false")
    expect(root.locator(".nbstream-settings")).to_be_hidden()
    toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    expect(root.locator(".nbstream-settings")).to_be_visible()


def field(root, name: str):
    return root.get_by_role("textbox", name=name, exact=True)


def expect_field_error(root, name: str, message: str) -> None:
    box = field(root, name)
    expect(box).to_have_attribute("aria-invalid", "true")
    described = (box.get_attribute("aria-describedby") or "").split()
    assert described, "the field is not described by its message"
    error = root.locator(f"[id='{described[0]}']")
    expect(error).to_have_text(message)
    # next to its field: in the same field group
    expect(box.locator("xpath=..").locator(".nbstream-field-error")).to_have_text(message)


@pytest.fixture
def chat(chat_page: Page) -> Iterator[Page]:
    return chat_page


def test_panel_is_closed_by_default_and_fields_reflect_the_traits(fe_page: Page) -> None:
    page = fe_page
    mount(
        page,
        max_new_tokens=64,
        temperature=0.7,
        top_k=None,
        do_sample=True,
        stop_sequences=["END", "\n\n"],
        settings_defaults={"max_new_tokens": 256, "top_k": 50, "do_sample": False},
        next_run_samples=True,
    )
    root = view(page)
    open_settings(root)
    expect(field(root, "Max new tokens")).to_have_value("64")
    expect(field(root, "Temperature")).to_have_value("0.7")
    expect(field(root, "Top-k")).to_have_value("")
    expect(field(root, "Top-k")).to_have_attribute("placeholder", "50 (model default)")
    # one per line, a newline inside one written \n
    expect(field(root, "Stop sequences")).to_have_value("END\n\\n\\n")
    sampling = root.get_by_role("combobox", name="Sampling", exact=True)
    expect(sampling).to_have_value("true")
    # What the run does (the kernel's next_run_samples), not the model's default alone.
    expect(sampling.locator("option").first).to_have_text("Auto: samples")
    # Code changes a trait: the panel follows.
    change(page, "temperature", 0.2)
    change(page, "do_sample", None)
    expect(field(root, "Temperature")).to_have_value("0.2")
    expect(sampling).to_have_value("")
    # Keyboard: Escape closes the panel and gives the focus back to its button.
    field(root, "Seed").press("Escape")
    expect(root.get_by_role("button", name="Settings", exact=True)).to_be_focused()
    expect(root.locator(".nbstream-settings")).to_be_hidden()


def test_editing_a_field_sets_its_trait(fe_page: Page) -> None:
    page = fe_page
    mount(page)
    root = view(page)
    open_settings(root)
    field(root, "Temperature").fill("0.9")
    field(root, "Top-k").fill("12")
    field(root, "Stop sequences").fill("###\nEND\n\\n\\n\n")
    root.get_by_role("combobox", name="Sampling", exact=True).select_option("false")
    field(root, "Temperature").focus()  # blur the last field: saved at once
    page.wait_for_function(
        "window.views[0].model.state.top_k === 12"
        " && window.views[0].model.state.do_sample === false"
    )
    state = page.evaluate("window.views[0].model.state")
    assert state["temperature"] == 0.9 and state["stop_sequences"] == ["###", "END", "\n\n"]
    assert ["save"] in log(page)
    field(root, "Temperature").fill("")  # emptied: unset, the model's default
    field(root, "Top-k").focus()
    page.wait_for_function("window.views[0].model.state.temperature === null")


def test_a_bad_value_gets_a_message_next_to_its_field_and_blocks_run(fe_page: Page) -> None:
    page = fe_page
    mount(page)
    root = view(page)
    open_settings(root)
    field(root, "Top-p").fill("1.5")
    expect_field_error(root, "Top-p", "top_p must be in (0, 1], got 1.5")
    field(root, "Max new tokens").fill("ten")
    expect_field_error(root, "Max new tokens", "max_new_tokens must be an int, got 'ten'")
    field(root, "Prompt").click()
    # Sent all the same (the kernel holds what the field shows): the number, or the text.
    assert ["top_p", 1.5] in sets(page) and ["max_new_tokens", "ten"] in sets(page)
    root.get_by_role("button", name="Settings", exact=True).click()  # close the panel
    expect(root.locator(".nbstream-settings")).to_be_hidden()
    root.get_by_role("button", name="Run", exact=True).click()
    assert not [m for m in sent(page) if m["type"] == "run"]
    # Run opened the panel on the first bad field instead.
    expect(root.locator(".nbstream-settings")).to_be_visible()
    expect(field(root, "Max new tokens")).to_be_focused()
    field(root, "Max new tokens").fill("10")
    field(root, "Top-p").fill("0.5")
    expect(field(root, "Top-p")).not_to_have_attribute("aria-invalid", "true")
    root.get_by_role("button", name="Run", exact=True).click()
    runs = [m for m in sent(page) if m["type"] == "run"]
    assert len(runs) == 1
    # The settings reached the model before the run message (the kernel gets them first).
    entries = log(page)
    run_at = next(k for k, e in enumerate(entries) if e[0] == "send" and e[1]["type"] == "run")
    set_at = max(k for k, e in enumerate(entries) if e[0] == "set" and e[1] == "top_p")
    assert set_at < run_at


def test_python_reported_errors_show_next_to_the_field_and_block_run(fe_page: Page) -> None:
    page = fe_page
    mount(page)
    root = view(page)
    change(page, "top_k", 2.5)
    change(page, "settings_errors", {"top_k": "top_k must be an int, got 2.5"})
    toggle = root.get_by_role("button", name="Settings", exact=True)
    expect(toggle).to_have_attribute("data-invalid", "true")
    root.get_by_role("button", name="Run", exact=True).click()
    assert not [m for m in sent(page) if m["type"] == "run"]
    expect_field_error(root, "Top-k", "top_k must be an int, got 2.5")
    change(page, "settings_errors", {})
    expect(field(root, "Top-k")).not_to_have_attribute("aria-invalid", "true")
    expect(toggle).to_have_attribute("data-invalid", "false")


def test_prompt_view_shows_the_templated_prompt_as_plain_text(fe_page: Page) -> None:
    page = fe_page
    mount(page)
    root = view(page)
    toggle = root.get_by_role("button", name="Prompt view", exact=True)
    expect(toggle).to_have_attribute("aria-pressed", "false")
    pre = root.locator(".nbstream-templated")
    expect(pre).to_be_hidden()
    toggle.click()
    expect(toggle).to_have_attribute("aria-pressed", "true")
    expect(pre).to_be_visible()
    expect(pre).to_have_attribute("data-empty", "true")
    page.evaluate(
        "([t]) => window.views[0].model.changeMany({prompt_text: t, prompt_tokens: 27, run_id: 1,"
        " status: 'running'})",
        [PROMPT],
    )
    assert pre.evaluate("(e) => e.textContent") == PROMPT
    expect(pre.locator("b")).to_have_count(0)  # never HTML
    expect(root.locator(".nbstream-prompt-tokens")).to_have_text("27 prompt tokens")
    expect(root.locator(".nbstream-prompt-tokens")).to_have_attribute("data-tokens", "27")
    emit(page, {"type": "delta", "run_id": 1, "offset": 0, "text": "Hello"})
    frame(page)
    expect(root.locator(".nbstream-output")).to_have_text("Hello")  # the output is untouched
    toggle.press("Enter")  # keyboard
    expect(toggle).to_have_attribute("aria-pressed", "false")
    expect(pre).to_be_hidden()


def test_prompt_view_of_a_server_run_does_not_say_no_run_yet(fe_page: Page) -> None:
    """A run on a model server (a refused connection included) has no prompt text: the
    server applies its own chat template. The view says that, not 'No run yet'."""
    page = fe_page
    mount(page)
    root = view(page)
    root.get_by_role("button", name="Prompt view", exact=True).click()
    pre = root.locator(".nbstream-templated")
    expect(pre).to_contain_text("No run yet")
    page.evaluate(
        "() => window.views[0].model.changeMany({prompt_text: null, prompt_tokens: null,"
        " run_id: 1, status: 'failed'})"
    )
    expect(pre).to_contain_text("server applies its own chat template")
    expect(pre).not_to_contain_text("No run yet")
    expect(pre).to_have_attribute("data-empty", "true")


def test_chat_panel_has_the_system_prompt_and_blocks_send(chat: Page) -> None:
    page = chat
    mount(page, system="Be brief.", status="idle")
    root = page.locator(".host").nth(0).locator(".nbstream")
    open_settings(root)
    system = field(root, "System prompt")
    expect(system).to_have_value("Be brief.")
    system.fill("Answer in French.")
    field(root, "Seed").fill("-1")
    expect_field_error(root, "Seed", "seed must be >= 0, got -1")
    root.get_by_role("textbox", name="Message", exact=True).fill("Hello")
    root.get_by_role("button", name="Send", exact=True).click()
    assert not [m for m in sent(page) if m["type"] == "send"]
    assert page.evaluate("window.views[0].model.state.system") == "Answer in French."
    field(root, "Seed").fill("3")
    root.get_by_role("button", name="Send", exact=True).click()
    assert [m["text"] for m in sent(page) if m["type"] == "send"] == ["Hello"]
    assert page.evaluate("window.views[0].model.state.seed") == 3
    # While an answer streams the system prompt cannot change (the kernel refuses it).
    page.evaluate("window.views[0].model.changeMany({status: 'running', run_id: 1})")
    expect(system).to_be_disabled()
    page.evaluate("window.views[0].model.changeMany({status: 'complete'})")
    expect(system).to_be_enabled()
    # A Python-side problem with the system prompt shows next to it.
    page.evaluate(
        "window.views[0].model.changeMany({system: '  ', settings_errors: {system: "
        "'the system message is empty; type some text'}})"
    )
    expect_field_error(root, "System prompt", "the system message is empty; type some text")


def test_chat_prompt_view_shows_the_whole_conversation(chat: Page) -> None:
    page = chat
    mount(page, prompt_text=PROMPT * 2, prompt_tokens=54)
    root = page.locator(".host").nth(0).locator(".nbstream")
    root.get_by_role("button", name="Prompt view", exact=True).click()
    pre = root.locator(".nbstream-templated")
    assert pre.evaluate("(e) => e.textContent") == PROMPT * 2
    expect(root.locator(".nbstream-prompt-tokens")).to_have_text("54 prompt tokens")


def test_the_kernels_message_replaces_the_hint_once_it_arrives(fe_page: Page) -> None:
    page = fe_page
    mount(page)
    root = view(page)
    open_settings(root)
    field(root, "Temperature").fill("-1")
    field(root, "Top-k").fill("7")  # blur: temperature saved
    page.wait_for_function("window.views[0].model.state.temperature === -1")
    expect_field_error(root, "Temperature", "temperature must be >= 0 (0 means greedy), got -1")
    page.wait_for_function("window.views[0].model.state.top_k === 7")
    # A report made before top_k=7 reached the kernel still holds its old verdict: the
    # field keeps the browser's (valid) hint until a report agrees.
    change(page, "settings_errors", {"temperature": "kernel: -1.0", "top_k": "kernel: stale"})
    expect_field_error(root, "Temperature", "kernel: -1.0")
    expect(field(root, "Top-k")).not_to_have_attribute("aria-invalid", "true")
    change(page, "settings_errors", {"temperature": "kernel: -1.0"})
    expect(field(root, "Top-k")).not_to_have_attribute("aria-invalid", "true")
    # Fixed: the hint clears at once, the kernel's report agrees.
    field(root, "Temperature").fill("0.5")
    expect(field(root, "Temperature")).not_to_have_attribute("aria-invalid", "true")
    field(root, "Top-k").focus()
    page.wait_for_function("window.views[0].model.state.temperature === 0.5")
    change(page, "settings_errors", {})
    expect(root.get_by_role("button", name="Settings", exact=True)).to_have_attribute(
        "data-invalid", "false"
    )


def test_sampling_field_and_placeholders_say_what_the_next_run_does(fe_page: Page) -> None:
    page = fe_page
    mount(
        page,
        settings_defaults={"temperature": 1.0, "top_p": 0.9, "top_k": 50},
        next_run_samples=False,
    )
    root = view(page)
    open_settings(root)
    sampling = root.get_by_role("combobox", name="Sampling", exact=True)
    note = root.locator(".nbstream-sampling-note")
    expect(sampling.locator("option").first).to_have_text("Auto: greedy")
    expect(note).to_have_text("the next run is greedy: temperature, top-p and top-k are not used")
    expect(note).to_have_attribute("data-samples", "false")
    for name in ("Temperature", "Top-p", "Top-k"):
        expect(field(root, name)).to_have_attribute("placeholder", "not used (greedy)")
    assert note.get_attribute("id") in (sampling.get_attribute("aria-describedby") or "").split()
    change(page, "next_run_samples", True)
    expect(sampling.locator("option").first).to_have_text("Auto: samples")
    expect(note).to_have_text("the next run samples")
    expect(field(root, "Temperature")).to_have_attribute("placeholder", "1 (model default)")
    expect(field(root, "Top-p")).to_have_attribute("placeholder", "0.9 (model default)")
    change(page, "next_run_samples", None)
    expect(sampling.locator("option").first).to_have_text("Auto (model default)")
    expect(note).to_have_attribute("data-samples", "null")


# Each settings field whose placeholder is wider than its box: [label, placeholder, width,
# room]. The text is measured in the input's own font; the room is its content box.
CUT_PLACEHOLDERS = """(root) => {
  const ctx = document.createElement('canvas').getContext('2d');
  const cut = [];
  for (const input of root.querySelectorAll('.nbstream-settings input.nbstream-field-input')) {
    if (!input.placeholder) continue;
    const s = getComputedStyle(input);
    ctx.font = s.font;
    const room = input.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
    const width = ctx.measureText(input.placeholder).width;
    const label = input.labels?.[0]?.textContent || input.id;
    if (width > room) cut.push([label, input.placeholder, Math.ceil(width), room]);
  }
  return cut;
}"""


@pytest.mark.parametrize("samples", [True, False, None])
def test_every_placeholder_fits_its_field_at_the_narrowest_column(
    fe_page: Page, samples: bool | None
) -> None:
    placeholders_fit(fe_page, samples)


def test_every_placeholder_of_a_chat_fits_its_field(chat: Page) -> None:
    placeholders_fit(chat, None)


def placeholders_fit(page: Page, samples: bool | None) -> None:
    mount(
        page,
        alternatives=None,
        next_run_samples=samples,
        settings_defaults={"temperature": 0.7, "top_p": 0.95, "top_k": 50, "max_new_tokens": 256},
    )
    root = view(page)
    open_settings(root)
    # A panel narrower than a column has one column, at the grid's smallest column width.
    root.locator(".nbstream-settings-grid").evaluate("(g) => { g.style.width = '1px'; }")
    expect(field(root, "Alternatives (k)")).to_be_visible()
    assert root.evaluate(CUT_PLACEHOLDERS) == []
