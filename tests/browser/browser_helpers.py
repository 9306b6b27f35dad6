"""Helpers of the browser tests: the setup cell, reading the kernel, waiting on a view.

Each test opens a notebook in JupyterLab (or Notebook 7, or Voila) through the fixtures of
conftest.py and jupyter_harness.py; these helpers run what every test needs in it.
"""

from __future__ import annotations

import ast
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from axe_audit import audit, describe
from jupyter_harness import free_port
from playwright.sync_api import expect

REPO = Path(__file__).resolve().parents[2]

#: Cell 0 of every test's notebook: imports, one torch thread, and `Gate`.
SETUP = '''\
import threading
import torch
torch.set_num_threads(1)
import nbstream
from nbstream.testing import forced_model, tiny_model


class Gate:
    """Forward hook: holds the model in its `at`-th forward call until opened.

    Call 1 is the prefill that yields token 1, so while held the run has `at - 1` tokens.
    """

    def __init__(self, model, at):
        self.at, self.calls = at, 0
        self.reached, self.opened = threading.Event(), threading.Event()
        self.handle = model.register_forward_hook(self)

    def __call__(self, module, args, output):
        self.calls += 1
        if self.calls == self.at:
            self.reached.set()
            self.opened.wait(300)
'''


STREAM_TIMEOUT = 120.0  # seconds; the default model is slow when the machine is busy
MS = 1000  # Playwright counts in milliseconds


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.1, what: str = ""):
    """Poll `predicate` until it returns something true, and return that (fails after
    `timeout` seconds, naming `what`)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what or predicate}")
        time.sleep(interval)


def kval(nb, expr: str, timeout: float = 10.0):
    """A Python value from the kernel (its repr, parsed)."""
    return ast.literal_eval(nb.kernel_eval(expr, timeout=timeout))


def view(nb, cell: int, n: int = 0):
    """The n-th StreamWidget view in the output of `cell`."""
    return nb.cell(cell).locator(".nbstream").nth(n)


def wait_status(v, status: str, timeout: float = STREAM_TIMEOUT) -> None:
    """Wait until view `v` says `status` (its data-status)."""
    expect(v).to_have_attribute("data-status", status, timeout=timeout * MS)


#: A cell after SETUP: a StreamWidget `w` on a slowed tiny model, and an Event `block`.
SLOW = (
    "import time\n"
    "model, tokenizer = tiny_model(one_line=True)\n"
    # A slowed model (a fake: the real one is as slow only on a busy machine), so that the
    # run is still streaming when the blocking cell starts.
    "slow = model.register_forward_hook(lambda *a: time.sleep(0.03))\n"
    "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=3000)\n"
    "w.prompt = 'Hello'\n"
    "block = threading.Event()\n"
    "w"
)


# -- themes and accessibility ------------------------------------------------------------

_SET_THEME = """async (name) => {
  await window.jupyterapp.commands.execute('apputils:change-theme', {theme: name});
}"""
_THEME_READY = """([name, before]) => {
  const now = getComputedStyle(document.body).getPropertyValue('--jp-layout-color1').trim();
  return document.body.dataset.jpThemeName === name && now !== '' && now !== before ? now : '';
}"""
_LAYOUT = "() => getComputedStyle(document.body).getPropertyValue('--jp-layout-color1').trim()"


def set_theme(nb, name: str) -> None:
    """Switch JupyterLab to theme `name` and wait until the page has restyled."""
    before = nb.page.evaluate(_LAYOUT)
    if nb.page.evaluate("() => document.body.dataset.jpThemeName") == name:
        return
    nb.page.evaluate(_SET_THEME, name)
    wait_until(lambda: nb.page.evaluate(_THEME_READY, [name, before]), 30, what=f"theme {name}")
    nb.page.wait_for_timeout(300)  # a frame or two for the restyle


def assert_accessible_but_contrast(page, what: str, selector: str = ".nbstream") -> None:
    """No axe violation in `selector` but colour contrast (test_themes_browser.py's)."""
    found = [v for v in audit(page, selector) if v["id"] != "color-contrast"]
    assert not found, f"axe-core found violations in {what}:\n{describe(found)}"


def branch_ended(nb, v, timeout: float = 60, widget: str = "w") -> None:
    """The branch just made has ended, in the kernel (`widget` names the kernel's widget)
    and in view `v`. Not the view's data-status alone: until the branch's first state
    reaches the page it still says the previous answer's "complete", and a popover opened
    while the branch runs offers no Continue ("still being generated") and closes when the
    branch ends."""
    # The branch's own run is done (the widget's status alone may still be the previous
    # answer's "complete" just after the branch was made).
    wait_until(
        lambda: (
            kval(nb, f"({widget}.branches[-1].done, {widget}.status)")
            in ((True, "complete"), (True, "cancelled"), (True, "failed"))
        ),
        timeout,
        what="the branch ended in the kernel",
    )
    shown = kval(nb, f"{widget}.shown")
    # The switcher's buttons are disabled while a run goes on: enabled, the end has come.
    button = v.locator(f'.nbstream-branch[data-index="{shown}"]')
    expect(button).to_have_attribute("aria-pressed", "true", timeout=timeout * MS)
    expect(button).to_be_enabled(timeout=timeout * MS)
    wait_status(v, kval(nb, f"{widget}.status"), timeout)


# -- Voila ----------------------------------------------------------------------------------

VOILA_START_TIMEOUT = 60.0
# Voila shows the page once every cell has run: the quickstart's runs take a while on CPU.
RENDER_TIMEOUT_MS = 240_000


# Voila, told a port, moves to another one when it is taken (its `port_retries`) and the
# harness would then talk to whoever holds the first: it is told not to, and a port taken
# between choosing it and Voila binding it is tried again with another.
_PORT_TAKEN = "could not be started because no available port"
_LISTENING = "is running at:"  # Voila's line once it listens on the port


def _start_voila(notebook: Path, log: Path, port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        # one torch thread in the kernel: OpenMP threads thrash a busy 2-core machine
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(REPO),
    }
    command = [
        sys.executable,
        "-m",
        "voila",
        str(notebook),
        "--no-browser",
        f"--port={port}",
        "--Voila.port_retries=0",
        "--Voila.ip=127.0.0.1",
        "--show_tracebacks=True",
    ]
    with log.open("w") as out:
        return subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)


def _wait_listening(proc: subprocess.Popen[bytes], log: Path) -> bool:
    """True once Voila says it listens on its port; False if it exited first.

    Its log, not a connection: whoever took the port would accept that one too.
    """
    deadline = time.monotonic() + VOILA_START_TIMEOUT
    while proc.poll() is None and time.monotonic() < deadline:
        if _LISTENING in log.read_text(errors="replace"):
            return True
        time.sleep(0.2)
    return False


def end_process(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """Terminate a server the test started; kill it if it is still there after ``timeout``."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)


@contextlib.contextmanager
def voila_serving(notebook: Path, log: Path, attempts: int = 3) -> Iterator[str]:
    """`voila NOTEBOOK` on a free local port; yields its URL (its output goes to `log`).

    Raises RuntimeError with the tail of Voila's log when it exits or does not listen
    within VOILA_START_TIMEOUT seconds.
    """
    for attempt in range(attempts):
        port = free_port()
        proc = _start_voila(notebook, log, port)
        try:
            listening = _wait_listening(proc, log)
        except BaseException:
            end_process(proc)
            raise
        if listening:
            break
        end_process(proc)
        tail = log.read_text(errors="replace")[-4000:]
        if _PORT_TAKEN not in tail or attempt == attempts - 1:
            raise RuntimeError(f"voila did not start:\n{tail}")
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        end_process(proc)
