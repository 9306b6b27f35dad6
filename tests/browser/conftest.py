"""Fixtures for tests that drive a real JupyterLab / Notebook 7 in Chromium.

    def test_slider(lab):
        nb = lab.open_notebook(["import ipywidgets", "ipywidgets.IntSlider(value=7)"])
        nb.run_cell(0)
        nb.run_cell(1)
        assert nb.kernel_eval("1 + 1") == "2"

`lab` and `notebook7` are per test (each notebook opened gets a fresh browser context, and
its kernel is shut down when the test ends) on top of a session-wide server (`lab_server`,
`notebook7_server`, started on first use) and the module's Chromium (`browser`).
Each notebook still gets a kernel process of its own, but not a cold one: kernels are forked
from a process that has imported IPython and torch once per server
(kernel_fork.py; NBSTREAM_KERNEL_FORK=0 turns it off), the server keeps a spare kernel started
while the previous test ran (jupyter_harness.WARM_UP; NBSTREAM_SPARE_KERNEL=0 turns it off),
and a closed notebook's kernel is shut down in the background (its session first moved off
the notebook's path).
When a test fails, screenshots, console logs and the server log go to test-artifacts/<test>/
and the tail of the server log is added to the report; each server's whole log is copied to
test-artifacts/jupyter-<app>-server.log when the session ends.
"""

from __future__ import annotations

import atexit
import contextlib
import re
import shutil
from collections.abc import Iterator

import pytest
from jupyter_harness import REPO_ROOT, Jupyter, JupyterServer

ARTIFACTS = REPO_ROOT / "test-artifacts"


@pytest.fixture(scope="module")
def browser(chromium: object) -> object:
    """The module's headless Debian Chromium (tests/conftest.py)."""
    return chromium


def _server(app: str) -> Iterator[JupyterServer]:
    server = JupyterServer(app)
    atexit.register(server.cleanup)  # in case pytest dies before the fixture's teardown
    try:
        server.start()
        yield server
    finally:
        server.stop()
        # keep the last session's server log (the server's own folder is deleted)
        with contextlib.suppress(OSError):
            ARTIFACTS.mkdir(exist_ok=True)
            shutil.copyfile(server.log_path, ARTIFACTS / f"jupyter-{app}-server.log")
        server.cleanup()


@pytest.fixture(scope="session")
def lab_server() -> Iterator[JupyterServer]:
    """`jupyter lab` on 127.0.0.1, random port, token, a temporary root dir."""
    yield from _server("lab")


@pytest.fixture(scope="session")
def notebook7_server() -> Iterator[JupyterServer]:
    """`jupyter notebook` (Notebook 7), likewise."""
    yield from _server("notebook")


@pytest.fixture
def lab(lab_server: JupyterServer, browser: object) -> Iterator[Jupyter]:
    """JupyterLab for this test: lab.open_notebook(cells) -> Notebook."""
    harness = Jupyter(lab_server, browser)
    yield harness
    harness.close()


@pytest.fixture
def notebook7(notebook7_server: JupyterServer, browser: object) -> Iterator[Jupyter]:
    """Notebook 7 for this test (pages at /notebooks/NAME): notebook7.open_notebook(cells)."""
    harness = Jupyter(notebook7_server, browser)
    yield harness
    harness.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    report = yield
    if report.failed and report.when in ("setup", "call"):
        funcargs = getattr(item, "funcargs", {})
        harnesses = [v for v in funcargs.values() if isinstance(v, Jupyter)]
        folder = ARTIFACTS / re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid)[-150:]
        for harness in harnesses:
            saved = harness.save_artifacts(folder)
            report.sections.append(
                (
                    f"jupyter {harness.server.app} server log",
                    harness.server.log_tail()
                    + "\nartifacts: "
                    + ", ".join(str(p.relative_to(REPO_ROOT)) for p in saved),
                )
            )
    return report
