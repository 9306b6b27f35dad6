"""The four paths of a run in a host that routes like Colab, with a real kernel.

Each test drives a real ipykernel and nbstream's page modules through
:class:`colab_router.ColabRouter` (its docstring states the rule and its evidence). In every
mode a view must show a run from its start to its end, whoever started it, and its Stop
must stop it: Run in the view, ``w.generate()`` from a later cell, a run that streams after
its cell ended, Stop while streaming; a ChatWidget's Send, ``chat.generate()`` from a later
cell and Stop the same. ``all`` (every message delivered, as JupyterLab does) keeps the push
path: the kernel's probe arrives and the view never pulls.

``NBSTREAM_ROUTER_PUSH_ONLY=1`` keeps the page's pulls from the kernel (push-only code, as
before the pull): every mode but ``all`` then fails, which pins the diagnosis.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from colab_router import ColabRouter
from playwright.sync_api import Browser, Page, expect

# A run streams for seconds (a sleep in every forward pass), long enough to outlive its cell.
_SLOW = """
_m, _tok = tiny_model(one_line=True)
slow = type(_m)(_m.config)
slow.load_state_dict(_m.state_dict())
slow.eval()
slow.generation_config = _m.generation_config
slow.register_forward_hook(lambda *_: time.sleep(0.02))
"""
_WAIT_S = 30


@pytest.fixture(scope="module")
def router() -> Iterator[ColabRouter]:
    """One kernel for the module's tests (each test makes its own widgets and page)."""
    router = ColabRouter().start()
    router.execute(_SLOW, timeout=120)
    try:
        yield router
    finally:
        router.stop()


@pytest.fixture
def host(
    request: pytest.FixtureRequest, router: ColabRouter, fe_browser: Browser, fe_server: str
) -> Iterator[tuple[ColabRouter, Page]]:
    """The router in the test's mode (its parameter) and a fresh page attached to it."""
    router.mode = request.param
    page = fe_browser.new_page(viewport={"width": 900, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        router.attach(page, fe_server)
        yield router, page
        assert page.evaluate("window.__errors") + errors == []
    finally:
        page.close()


def _shown(router: ColabRouter, page: Page, code: str) -> Any:
    """Run ``code`` (a cell that displays one widget) and return that widget's view."""
    before = page.locator(".host").count()
    router.execute(code)
    root = page.locator(".host").nth(before).locator(".nbstream")
    expect(root).to_be_visible(timeout=_WAIT_S * 1000)
    return root


def _ends_as_kernel_says(router: ColabRouter, root: Any, name: str, status: str) -> None:
    """The view shows the run's end state and exactly the kernel's text."""
    badge = root.locator(".nbstream-badge")
    expect(badge).to_have_attribute("data-status", status, timeout=_WAIT_S * 1000)
    assert router.eval(f"{name}.status") == status
    text = router.eval(f"{name}.run.partial_text")
    assert text
    expect(root.locator(".nbstream-output")).to_have_text(text.strip(), timeout=_WAIT_S * 1000)


MODES = ["strict", "lenient", "asked", "all"]


@pytest.mark.parametrize("host", MODES, indirect=True)
def test_run_in_the_view_streams_to_its_end(host: tuple[ColabRouter, Page]) -> None:
    router, page = host
    root = _shown(router, page, "w1 = StreamWidget(*tiny_model(), max_new_tokens=40)\nw1")
    root.locator(".nbstream-prompt").fill("Name two colors.")
    root.locator(".nbstream-run").click()
    _ends_as_kernel_says(router, root, "w1", "complete")


@pytest.mark.parametrize("host", MODES, indirect=True)
def test_generate_from_a_later_cell_streams_into_the_view(host: tuple[ColabRouter, Page]) -> None:
    router, page = host
    root = _shown(router, page, "w2 = StreamWidget(*tiny_model(), max_new_tokens=40)\nw2")
    router.execute('_ = w2.generate("Name two colors.")')
    _ends_as_kernel_says(router, root, "w2", "complete")


@pytest.mark.parametrize("host", MODES, indirect=True)
def test_a_run_that_outlives_its_cell_shows_to_its_end(host: tuple[ColabRouter, Page]) -> None:
    router, page = host
    code = (
        "w3 = StreamWidget(slow, _tok, max_new_tokens=80)\n"
        "display(w3)\n"
        '_ = w3.generate("Name two colors.")'
    )
    root = _shown(router, page, code)
    _ends_as_kernel_says(router, root, "w3", "complete")


@pytest.mark.parametrize("host", MODES, indirect=True)
def test_stop_while_streaming_stops_the_run(host: tuple[ColabRouter, Page]) -> None:
    router, page = host
    root = _shown(router, page, "w4 = StreamWidget(slow, _tok, max_new_tokens=4000)\nw4")
    router.execute('_ = w4.generate("Name two colors.")')
    stop = root.locator(".nbstream-stop")
    expect(stop).to_be_enabled(timeout=_WAIT_S * 1000)  # the view learned the run started
    stop.click()
    _ends_as_kernel_says(router, root, "w4", "cancelled")


@pytest.mark.parametrize("host", ["all"], indirect=True)
def test_a_host_that_delivers_pushes_never_pulls(host: tuple[ColabRouter, Page]) -> None:
    router, page = host
    root = _shown(router, page, "w5 = StreamWidget(*tiny_model(), max_new_tokens=40)\nw5")
    router.execute('_ = w5.generate("Name two colors.")')
    _ends_as_kernel_says(router, root, "w5", "complete")
    page.wait_for_timeout(2500)  # past the probe's deadline
    assert [m for m in router.page_sent if m.get("type") == "pull"] == []


def _answer_ends_as_kernel_says(router: ColabRouter, root: Any, turn: int, status: str) -> None:
    """The chat's answer number ``turn`` (0-based) shows the kernel's end state and text."""
    answer = root.locator('.nbstream-message[data-role="assistant"]').nth(turn)
    expect(answer).to_have_attribute("data-status", status, timeout=_WAIT_S * 1000)
    assert router.eval("chat.status") == status
    text = router.eval("chat.run.partial_text")
    assert text
    output = answer.locator(".nbstream-output")
    expect(output).to_have_text(text.strip(), timeout=_WAIT_S * 1000)


@pytest.mark.parametrize("host", MODES, indirect=True)
def test_a_chat_sends_generates_and_stops(host: tuple[ColabRouter, Page]) -> None:
    """A ChatWidget: Send in the view, ``chat.generate()`` from a later cell, Stop while an
    answer streams; each answer ends in the view as in the kernel."""
    router, page = host
    root = _shown(router, page, "chat = ChatWidget(slow, _tok, max_new_tokens=30)\nchat")
    root.get_by_role("textbox", name="Message", exact=True).fill("Name two colors.")
    root.get_by_role("button", name="Send", exact=True).click()
    _answer_ends_as_kernel_says(router, root, 0, "complete")

    router.execute('_ = chat.generate("Name a fruit.")')
    _answer_ends_as_kernel_says(router, root, 1, "complete")

    router.execute('chat.max_new_tokens = 4000\n_ = chat.generate("Count to a thousand.")')
    stop = root.get_by_role("button", name="Stop", exact=True)
    expect(stop).to_be_enabled(timeout=_WAIT_S * 1000)  # the view learned the answer started
    stop.click()
    _answer_ends_as_kernel_says(router, root, 2, "cancelled")
    if router.mode == "all":  # the push path: the probe came, so the view never pulled
        assert router.counts.delivered.get("probe", 0) >= 1
        assert [m for m in router.page_sent if m.get("type") == "pull"] == []


def _cell(root: Any, row: int, col: int) -> Any:
    """Cell ``(row, col)`` of a grid's table."""
    return root.locator("tbody tr").nth(row).locator("td.nbstream-grid-cell").nth(col)


def _cell_ends_as_kernel_says(
    router: ColabRouter, root: Any, row: int, col: int, status: str
) -> None:
    """The table shows the cell's end state and exactly the kernel's text of its run."""
    cell = _cell(root, row, col)
    expect(cell).to_have_attribute("data-status", status, timeout=_WAIT_S * 1000)
    assert router.eval(f"g.cell({row}, {col}).status") == status
    text = router.eval(f"g.cell({row}, {col}).partial_text")
    if status == "complete":
        assert text
    expect(cell.locator(".nbstream-grid-text")).to_have_text(text.strip(), timeout=_WAIT_S * 1000)


@pytest.mark.parametrize("host", ["strict", "all"], indirect=True)
def test_a_grid_streams_every_cell_and_stops_one(host: tuple[ColabRouter, Page]) -> None:
    """A 2×2 grid's ``g.generate()`` from a later cell streams every cell to its end in the
    table; a cell's Stop cancels it. Strict pulls (push-only fails); ``all`` never pulls."""
    router, page = host
    code = (
        "from nbstream import Grid\n"
        'g = Grid(["Name two colors.", "Name a fruit."], model=slow, tokenizer=_tok,\n'
        '         settings=[{"max_new_tokens": 12}, {"max_new_tokens": 4000}])\n'
        "display(g.widget.table)"
    )
    root = _shown(router, page, code)
    router.execute("_ = g.generate()")
    try:
        for row in (0, 1):  # the long column: each cell stopped by its own Stop while it streams
            cell = _cell(root, row, 1)
            expect(cell).to_have_attribute("data-status", "running", timeout=_WAIT_S * 1000)
            cell.locator(".nbstream-grid-stop").click()
            _cell_ends_as_kernel_says(router, root, row, 1, "cancelled")
        for row in (0, 1):
            _cell_ends_as_kernel_says(router, root, row, 0, "complete")
    finally:  # a failed test leaves no run holding the shared model for the next
        router.execute("g.stop()\ng.wait()")
    pulls = [m for m in router.page_sent if m.get("type") == "pull"]
    if router.mode == "all":  # the push path: the probe came, so the view never pulled
        assert router.counts.delivered.get("probe", 0) >= 1
        page.wait_for_timeout(2500)  # past the probe's deadline
        assert [m for m in router.page_sent if m.get("type") == "pull"] == []
    else:
        assert pulls
