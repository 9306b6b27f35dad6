"""Front-end tests of the Settings panel's Steering slider (js/src/steer_control.js), with the
fake model of harness.html standing in for the kernel (its side: tests/test_steering_widget.py).

The slider shows only while the widget has a direction (``steer_direction``), is reached and
moved with the keyboard, writes ``steer_strength`` into the model at once (the page and the
kernel hold one state) and sends it with a Run too.
"""

from __future__ import annotations

from frontend_helpers import change, log, mount, sent, view
from playwright.sync_api import Page, expect

DIRECTION = {"layer": 2, "size": 576, "norm": 3.14159, "digest": "ab" * 32, "limit": 10}


def open_settings(root) -> None:
    root.get_by_role("button", name="Settings", exact=True).click()
    expect(root.locator(".nbstream-settings")).to_be_visible()


def slider(root):
    return root.get_by_role("slider", name="Steering strength", exact=True)


def switch(root):
    return root.get_by_role("checkbox", name="Steer the next run", exact=True)


def strengths(page: Page) -> list:
    """The strengths the view wrote into its model, in order."""
    return [entry[2] for entry in log(page) if entry[:2] == ["set", "steer_strength"]]


def test_no_slider_without_a_direction_and_one_when_the_kernel_sends_it(fe_page: Page) -> None:
    page = fe_page
    mount(page)
    root = view(page)
    open_settings(root)
    expect(root.locator(".nbstream-field-steer")).to_be_hidden()
    expect(root.locator(".nbstream-steer-strength")).to_have_count(1)  # built, hidden
    expect(slider(root)).to_be_hidden()
    change(page, "steer_direction", DIRECTION)  # w.steer = direction, in Python
    expect(slider(root)).to_be_visible()
    expect(slider(root)).to_be_disabled()  # off until turned on
    expect(switch(root)).not_to_be_checked()
    expect(root.locator(".nbstream-steer-value")).to_have_text("off")
    hint = root.locator(".nbstream-field-steer .nbstream-field-hint")
    expect(hint).to_contain_text("layer 3's output")  # layers counted from 1, as the page does
    expect(slider(root)).to_have_attribute("min", "-10")
    expect(slider(root)).to_have_attribute("max", "10")
    change(page, "steer_direction", None)  # w.steer = None
    expect(slider(root)).to_be_hidden()
    assert strengths(page) == []  # showing and hiding wrote nothing


def test_the_keyboard_turns_it_on_and_moves_it_and_the_model_follows_each_move(
    fe_page: Page,
) -> None:
    page = fe_page
    mount(page, steer_direction=DIRECTION, steer_strength=None)
    root = view(page)
    open_settings(root)
    switch(root).focus()
    page.keyboard.press("Space")
    expect(switch(root)).to_be_checked()
    expect(slider(root)).to_be_enabled()
    page.keyboard.press("Tab")
    expect(slider(root)).to_be_focused()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    expect(root.locator(".nbstream-steer-value")).to_have_text("+1")
    expect(slider(root)).to_have_attribute("aria-valuetext", "+1 along layer 3's direction")
    assert strengths(page) == [0, 0.5, 1]  # every move, at once: one state
    page.keyboard.press("Home")
    expect(root.locator(".nbstream-steer-value")).to_have_text("-10")
    assert strengths(page)[-1] == -10
    switch(root).focus()
    page.keyboard.press("Space")  # off
    expect(slider(root)).to_be_disabled()
    assert strengths(page)[-1] is None
    assert page.evaluate("window.views[0].model.state.steer_strength") is None


def test_a_strength_set_in_python_moves_the_slider_and_is_never_sent_back(fe_page: Page) -> None:
    page = fe_page
    mount(page, steer_direction=DIRECTION, steer_strength=None)
    root = view(page)
    open_settings(root)
    change(page, "steer_strength", -4)
    expect(slider(root)).to_have_value("-4")
    expect(switch(root)).to_be_checked()
    expect(root.locator(".nbstream-steer-value")).to_have_text("-4")
    change(page, "steer_direction", {**DIRECTION, "limit": 25})
    change(page, "steer_strength", 25)
    expect(slider(root)).to_have_value("25")
    assert strengths(page) == []


def test_a_run_carries_the_strength_after_the_model_got_it(fe_page: Page) -> None:
    page = fe_page
    mount(page, steer_direction=DIRECTION, steer_strength=2)
    root = view(page)
    open_settings(root)
    slider(root).focus()
    page.keyboard.press("ArrowLeft")
    root.get_by_role("textbox", name="Prompt", exact=True).fill("Tell me about the sea.")
    root.get_by_role("button", name="Run", exact=True).click()
    runs = [m for m in sent(page) if m["type"] == "run"]
    assert len(runs) == 1 and runs[0]["settings"]["steer_strength"] == 1.5
    entries = log(page)
    run_at = next(k for k, e in enumerate(entries) if e[0] == "send" and e[1]["type"] == "run")
    set_at = max(k for k, e in enumerate(entries) if e[:2] == ["set", "steer_strength"])
    assert set_at < run_at


def test_no_direction_no_strength_in_a_run_and_model_defaults_turn_it_off(fe_page: Page) -> None:
    page = fe_page
    mount(page, steer_strength=None)
    root = view(page)
    root.get_by_role("textbox", name="Prompt", exact=True).fill("Hi")
    root.get_by_role("button", name="Run", exact=True).click()
    assert "steer_strength" not in next(m for m in sent(page) if m["type"] == "run")["settings"]
    change(page, "steer_direction", DIRECTION)
    change(page, "steer_strength", 3)
    open_settings(root)
    root.get_by_role("button", name="Model defaults", exact=True).click()
    expect(switch(root)).not_to_be_checked()
    assert strengths(page)[-1] is None


def test_the_kernels_word_on_the_strength_shows_next_to_the_slider(fe_page: Page) -> None:
    page = fe_page
    message = "the steering strength must be a finite number, or off; got 'x'"
    mount(page, steer_direction=DIRECTION, steer_strength="x")
    root = view(page)
    open_settings(root)
    change(page, "settings_errors", {"steer_strength": message})
    expect(root.locator(".nbstream-field-steer .nbstream-field-error")).to_have_text(message)
    expect(slider(root)).to_have_attribute("aria-invalid", "true")
    expect(switch(root)).not_to_be_checked()  # not a number: shown as off
    change(page, "settings_errors", {})
    expect(slider(root)).not_to_have_attribute("aria-invalid", "true")
