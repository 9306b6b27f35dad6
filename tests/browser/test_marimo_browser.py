"""StreamWidget and ChatWidget in a real marimo server, wrapped in ``mo.ui.anywidget``.

One ``marimo edit --headless`` server and one page for the module (one marimo kernel: the
tests share it and each waits for its run's end before the next starts). The notebook is
written by the test (NOTEBOOK): the two widgets on tiny one-line models, each model with a
`Pace` forward hook (hold a run at a step, make a step raise, slow the model down), two
`mo.ui.run_button`s whose cells call ``generate()``, and a probe: a text box whose cell
evaluates ``N|expression`` in the kernel and shows ``N|json`` in the page. That is how a
test reads ``w.result`` (marimo has no side channel like a Jupyter kernel's subshell); the
probe's cell runs on marimo's main loop, which is free while a run streams on its thread.

Each path is tested for both widgets: Run in the view (Send in the chat), ``generate()``
from another cell, Stop while streaming, and a run whose model raises; between them the
view shows running, complete, cancelled and failed. Every wait is on the new state: a run id
one past the one before, a final state, a held step reached. The module's setup (server,
kernel, torch import) took 20-35 s on this shared machine; each test 1-5 s.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from browser_helpers import end_process
from playwright.sync_api import Locator, Page, expect

from nbstream.testing.servers import free_port

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "test-artifacts" / "marimo"
MS = 1000
START_TIMEOUT = 180.0  # server up, kernel started, torch imported, both views drawn
RUN_TIMEOUT = 90.0  # a few hundred tiny-model tokens, on a loaded 2-core machine

NOTEBOOK = '''\
import marimo

app = marimo.App()


@app.cell
def _():
    import html
    import json
    import threading
    import time

    import marimo as mo
    import torch

    torch.set_num_threads(1)
    import nbstream
    from nbstream.testing import tiny_model

    class Pace:
        """Forward hook: counts a run's steps, holds it at step `hold_at` until `opened`,
        raises at step `fail_at`, and sleeps `delay` s a step (a slow model on demand)."""

        def __init__(self, model):
            self.reached, self.opened = threading.Event(), threading.Event()
            self.arm()
            model.register_forward_hook(self)

        def arm(self, hold_at=None, fail_at=None, delay=0.0):
            self.calls, self.hold_at, self.fail_at, self.delay = 0, hold_at, fail_at, delay
            self.reached.clear()
            self.opened.clear()

        def __call__(self, module, args, output):
            self.calls += 1
            if self.calls == self.fail_at:
                raise RuntimeError("injected fault")
            if self.calls == self.hold_at:
                self.reached.set()
                self.opened.wait(300)
            time.sleep(self.delay)

    model, tokenizer = tiny_model(one_line=True)
    chat_model, chat_tokenizer = tiny_model(one_line=True, seed=1)
    w_pace, chat_pace = Pace(model), Pace(chat_model)
    w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=40)
    w.prompt = "Hello"
    chat = nbstream.ChatWidget(chat_model, chat_tokenizer, max_new_tokens=40)
    w_view, chat_view = mo.ui.anywidget(w), mo.ui.anywidget(chat)
    return chat, chat_pace, chat_view, html, json, mo, w, w_pace, w_view


@app.cell
def _(w_view):
    w_view
    return


@app.cell
def _(chat_view):
    chat_view
    return


@app.cell
def _(mo):
    generate_w = mo.ui.run_button(label="w.generate")
    generate_chat = mo.ui.run_button(label="chat.generate")
    mo.hstack([generate_w, generate_chat], justify="start")
    return generate_chat, generate_w


@app.cell
def _(generate_w, mo, w):
    mo.stop(not generate_w.value)
    w_from_cell = w.generate("Hello from a cell")
    return


@app.cell
def _(chat, generate_chat, mo):
    mo.stop(not generate_chat.value)
    chat_from_cell = chat.generate("Hello from a cell")
    return


@app.cell
def _(mo):
    probe = mo.ui.text(label="probe", full_width=True)
    probe
    return (probe,)


@app.cell
def _(html, json, mo, probe):
    _n, _, _expr = probe.value.partition("|")
    try:
        _value = json.dumps(eval(_expr, globals()) if _expr else None)
    except Exception as _error:
        _value = json.dumps({"probe error": repr(_error)})
    mo.Html(f"<pre class='probe-out'>{html.escape(_n + '|' + _value)}</pre>")
    return


if __name__ == "__main__":
    app.run()
'''

# marimo 0.25 runs no cell when a notebook is opened for editing (auto_instantiate is off by
# default): a user presses Run all. The server's own config turns it on, so the page starts
# with every cell run, as `marimo run` would.
CONFIG = "[runtime]\nauto_instantiate = true\n"


# ----- the server and the page -----------------------------------------------------------


@dataclass
class Marimo:
    """The module's marimo page, and the kernel read through the probe cell."""

    page: Page
    errors: list[str]
    count: itertools.count[int]

    def kernel(self, expr: str, timeout: float = 60.0) -> Any:
        """The value of `expr` in the marimo kernel (through JSON: tuples come back as
        lists). Each call sends a new number, so an answer is never an earlier one."""
        n = next(self.count)
        box = self.page.get_by_role("textbox", name="probe")
        box.fill(f"{n}|{expr}")
        box.press("Enter")
        out = self.page.locator(".probe-out", has_text=re.compile(rf"^{n}\|"))
        expect(out).to_have_count(1, timeout=timeout * MS)
        value = json.loads(out.inner_text().split("|", 1)[1])
        if isinstance(value, dict) and "probe error" in value:
            raise AssertionError(f"{expr}: {value['probe error']}")
        return value

    def wait_kernel(self, expr: str, want: Any, timeout: float = RUN_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while (got := self.kernel(expr)) != want:
            if time.monotonic() > deadline:
                raise AssertionError(f"{expr} is {got!r}, not {want!r}, after {timeout} s")
            time.sleep(0.2)


def _wait_serving(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until marimo, still running, serves its page at `url` (not whoever else took the port)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"marimo exited with {proc.returncode}:\n{log.read_text()}")
        with contextlib.suppress(OSError, http.client.HTTPException):
            with urllib.request.urlopen(url, timeout=5) as reply:
                page = reply.read().decode(errors="replace")
            if reply.status == 200 and "marimo" in page and proc.poll() is None:
                return
        time.sleep(0.3)
    raise RuntimeError(f"marimo not serving {url} after 60 s:\n{log.read_text()}")


def _start_marimo(
    folder: Path, log: Path, env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], str]:
    """`marimo edit` on a free port; again on another when that one was taken meanwhile."""
    for attempt in range(3):
        port = free_port()
        command = [
            str(Path(sys.executable).with_name("marimo")),
            "edit", "--headless", "--no-token", "--skip-update-check",
            "--port", str(port), "nb.py",
        ]  # fmt: skip
        with log.open("wb") as out:
            proc = subprocess.Popen(
                command, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        url = f"http://127.0.0.1:{port}/"
        try:
            _wait_serving(url, proc, log)
            return proc, url
        except BaseException:
            taken = proc.poll() is not None and "address already in use" in log.read_text()
            end_process(proc, 30)
            if not taken or attempt == 2:
                _keep_log(log)
                raise
    raise AssertionError("unreachable")


def _keep_log(log: Path) -> None:
    with contextlib.suppress(OSError):
        SHOTS.mkdir(parents=True, exist_ok=True)
        (SHOTS / "server.log").write_bytes(log.read_bytes())


@pytest.fixture(scope="module")
def marimo_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`marimo edit --headless --no-token` on the written notebook, for the module."""
    if importlib.util.find_spec("marimo") is None:
        raise RuntimeError("marimo is not installed: pip install -e '.[test]' (it is in the extra)")
    folder = tmp_path_factory.mktemp("marimo")
    (folder / "nb.py").write_text(NOTEBOOK)
    (folder / "config" / "marimo").mkdir(parents=True)
    (folder / "config" / "marimo" / "marimo.toml").write_text(CONFIG)
    log = folder / "server.log"
    env = {**os.environ, "XDG_CONFIG_HOME": str(folder / "config"), "HF_HUB_OFFLINE": "1"}
    proc, url = _start_marimo(folder, log, env)
    try:
        yield url
    finally:
        end_process(proc, 30)
        _keep_log(log)


@pytest.fixture(scope="module")
def marimo(marimo_url: str, browser: Any) -> Iterator[Marimo]:
    """The notebook open in Chromium, every cell run, both views drawn, Raw text on."""
    context = browser.new_context(viewport={"width": 1200, "height": 1600})
    page = context.new_page()
    errors: list[str] = []
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    try:
        page.goto(marimo_url)
        for view in (stream_view(page), chat_view(page)):
            expect(view).to_have_attribute("data-status", "idle", timeout=START_TIMEOUT * MS)
            toggle = view.get_by_role("button", name="Raw text", exact=True)
            toggle.click()
            expect(toggle).to_have_attribute("aria-pressed", "true")
        yield Marimo(page, errors, itertools.count(1))
    finally:
        with contextlib.suppress(Exception):
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=SHOTS / "page.png", full_page=True)
        context.close()


@pytest.fixture
def mo(marimo: Marimo, request: pytest.FixtureRequest) -> Iterator[Marimo]:
    """The module's page for one test; afterwards nothing is held, slowed or running."""
    yield marimo
    name = request.node.name
    with contextlib.suppress(Exception):
        marimo.page.screenshot(path=SHOTS / f"{name}.png", full_page=True)
    marimo.kernel(
        "[(p.opened.set(), widget.stop(), p.arm(), setattr(widget, 'max_new_tokens', 40))"
        " for p, widget in ((w_pace, w), (chat_pace, chat))]"
    )
    marimo.wait_kernel("[w.status in ('idle', 'complete', 'cancelled', 'failed'),"
                       " chat.status in ('idle', 'complete', 'cancelled', 'failed')]",
                       [True, True])  # fmt: skip


# ----- the two widgets -------------------------------------------------------------------


def stream_view(page: Page) -> Locator:
    return page.locator(".nbstream:not(.nbstream-chat)").first


def chat_view(page: Page) -> Locator:
    return page.locator(".nbstream.nbstream-chat").first


@dataclass
class Subject:
    """One widget of the notebook: its kernel name, its view, how the page starts a run."""

    name: str  # the widget's name in the kernel; its hook is f"{name}_pace"
    view: Callable[[Page], Locator]
    answer: Callable[[Locator], Locator]  # the part of the view that shows the run's text
    start_from_page: Callable[[Locator], None]
    asked: str  # what the last run was asked, in the kernel


def _run_button(view: Locator) -> None:
    view.get_by_role("button", name="Run", exact=True).click()


def _send(view: Locator) -> None:
    view.get_by_role("textbox", name="Message", exact=True).fill("Hello from the page")
    view.get_by_role("button", name="Send", exact=True).click()


SUBJECTS = {
    "stream": Subject("w", stream_view, lambda v: v, _run_button, "w.run.prompt"),
    "chat": Subject(
        "chat",
        chat_view,
        lambda v: v.locator(".nbstream-message").last,
        _send,
        "chat.run.prompt[-1]['content']",
    ),
}


@pytest.fixture(params=list(SUBJECTS))
def subject(request: pytest.FixtureRequest) -> Subject:
    return SUBJECTS[request.param]


def raw_text(answer: Locator) -> str:
    return answer.locator(".nbstream-raw").first.evaluate("(e) => e.textContent")


def wait_raw(answer: Locator, text: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while (shown := raw_text(answer)) != text:
        if time.monotonic() > deadline:
            raise AssertionError(f"view shows {shown!r}, the kernel has {text!r}")
        time.sleep(0.1)


def partial_mark(answer: Locator) -> str | None:
    return answer.locator(".nbstream-output").first.get_attribute("data-partial")


def streams_then_completes(mo: Marimo, s: Subject, start: Callable[[], None]) -> None:
    """Start a run held at its 10th step: the view shows the text so far, marked partial,
    while running; released, the run completes and the view shows the kernel's result."""
    view = s.view(mo.page)
    before = mo.kernel(f"{s.name}.run_id")
    mo.kernel(f"{s.name}_pace.arm(hold_at=10)")
    start()
    mo.wait_kernel(f"[{s.name}.run_id, {s.name}_pace.reached.is_set()]", [before + 1, True])
    expect(view).to_have_attribute("data-status", "running", timeout=30 * MS)
    so_far = mo.kernel(f"{s.name}.partial_text")
    assert so_far
    answer = s.answer(view)
    wait_raw(answer, so_far)
    assert partial_mark(answer) == "true"
    view.screenshot(path=SHOTS / f"{s.name}-held.png")

    mo.kernel(f"{s.name}_pace.opened.set()")
    mo.wait_kernel(f"[{s.name}.run_id, {s.name}.status]", [before + 1, "complete"])
    expect(view).to_have_attribute("data-status", "complete", timeout=30 * MS)
    result = mo.kernel(f"{s.name}.result")
    assert result.startswith(so_far) and len(result) > len(so_far)
    wait_raw(answer, result)
    assert partial_mark(answer) == "false"


# ----- tests -----------------------------------------------------------------------------


def test_run_in_the_view_streams_then_completes(mo, subject):
    """Run (the chat's Send) in the view: the text grows while running, then complete, and
    the view's text is the kernel's result."""
    view = subject.view(mo.page)
    streams_then_completes(mo, subject, lambda: subject.start_from_page(view))


def test_generate_from_another_cell_streams_into_the_view(mo, subject):
    """A marimo run_button whose cell calls generate(): the run streams into the view that
    another cell displayed, and ends complete with the kernel's result."""
    button = mo.page.get_by_role("button", name=f"{subject.name}.generate", exact=True)
    streams_then_completes(mo, subject, button.click)
    assert mo.kernel(subject.asked) == "Hello from a cell"


def test_stop_cancels_a_streaming_run(mo, subject):
    """Stop while a slowed run streams: cancelled in the kernel and the view, no result,
    the partial text shown and marked."""
    view = subject.view(mo.page)
    answer = subject.answer(view)
    before = mo.kernel(f"{subject.name}.run_id")
    # A slow model and a long answer: the run is still streaming when Stop is clicked, and
    # would run for minutes if Stop did nothing.
    mo.kernel(f"({subject.name}_pace.arm(delay=0.05), "
              f"setattr({subject.name}, 'max_new_tokens', 3000))")  # fmt: skip
    subject.start_from_page(view)
    mo.wait_kernel(f"{subject.name}.run_id", before + 1)
    # The view's (for the chat, the newest message's) state: no earlier run is running.
    expect(answer).to_have_attribute("data-status", "running", timeout=30 * MS)
    deadline = time.monotonic() + 30
    while not raw_text(answer):
        assert time.monotonic() < deadline, "no text while running"
        time.sleep(0.1)
    view.get_by_role("button", name="Stop", exact=True).click()

    mo.wait_kernel(f"[{subject.name}.run_id, {subject.name}.status]", [before + 1, "cancelled"])
    expect(view).to_have_attribute("data-status", "cancelled", timeout=30 * MS)
    assert mo.kernel(f"{subject.name}.result") is None
    partial = mo.kernel(f"{subject.name}.partial_text")
    assert partial
    assert mo.kernel(f"{subject.name}.run.metrics['tokens']") < 3000
    wait_raw(answer, partial)
    assert partial_mark(answer) == "true"
    expect(answer.locator(".nbstream-partial-label").first).to_contain_text("Partial output")


def test_a_run_that_fails_shows_failed(mo, subject):
    """The model raises at its 12th step: failed in the kernel and the view, the error
    shown, no result, the text so far kept and marked."""
    view = subject.view(mo.page)
    answer = subject.answer(view)
    before = mo.kernel(f"{subject.name}.run_id")
    mo.kernel(f"{subject.name}_pace.arm(fail_at=12)")
    subject.start_from_page(view)
    mo.wait_kernel(f"[{subject.name}.run_id, {subject.name}.status]", [before + 1, "failed"])
    expect(view).to_have_attribute("data-status", "failed", timeout=30 * MS)
    assert mo.kernel(f"{subject.name}.result") is None
    assert mo.kernel(f"str({subject.name}.error)") == "injected fault"
    expect(view.locator(".nbstream-error").first).to_contain_text("RuntimeError: injected fault")
    partial = mo.kernel(f"{subject.name}.partial_text")
    assert partial
    wait_raw(answer, partial)
    assert partial_mark(answer) == "true"
    expect(answer.locator(".nbstream-partial-label").first).to_contain_text("Partial output")


def test_the_page_logged_no_errors(mo):
    """Nothing above made the page log an error (marimo's own page load logs none)."""
    assert mo.errors == []
