"""Shared fixtures for the engine tests.

Nothing may download: the hub is switched off here, at import, before anything imports
transformers (pytest imports this file before any test module).

Fixtures: ``tiny`` / ``tiny_line`` (the tiny random model, see nbstream.testing),
``real_model`` (the embedded default model), ``probe`` (a forward hook that holds the model
at a gate, counts decode steps and injects faults), ``no_leftover_runs`` (stops and reaps
what a test left running; fails on a worker that never ends), ``greedy`` (a non-streamed
greedy reference decode).

Test modules use these as fixtures and never ``from conftest import ...``: tests/browser and
tests/frontend have conftest.py files of their own, and whichever was imported last is the
module named ``conftest`` when a test module is collected.
"""

from __future__ import annotations

import json
import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One OpenMP thread in every process the tests start too (kernels, notebooks, servers, the
# CLI): `make test` runs two workers on a 2-core machine, and a kernel's two OpenMP threads
# spinning against the other worker made a notebook 5x slower.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from branching_server import Loopback
from fake_server import Fake, serving

# One intra-op thread: the engine runs the model on a worker thread while the test's thread
# reads, and on a 2-core machine two OpenMP threads spinning against them (and against
# whatever else the machine runs) make the tiny model 10x slower, the default model worse.
torch.set_num_threads(1)

# A run started in the background by a non-interactive shell (`make test &`, some CI
# runners) inherits SIGINT ignored, and then neither this process nor the CLI subprocesses
# it starts can be interrupted: the Ctrl-C / kernel-interrupt tests would test nothing. A
# caught signal (unlike an ignored one) is reset to the default in child processes.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

RUN_THREAD_PREFIX = "nbstream-run-"


@pytest.fixture(scope="session", autouse=True)
def _switch_interval() -> Iterator[None]:
    """``NBSTREAM_SWITCH_INTERVAL=1e-6``: run the whole session with the interpreter
    switching threads about every bytecode (``make test``'s race tier does, for the engine
    and widget-kernel tests), so a hand-off that is safe only by luck fails here."""
    value = os.environ.get("NBSTREAM_SWITCH_INTERVAL")
    if not value:
        yield
        return
    before = sys.getswitchinterval()
    sys.setswitchinterval(float(value))
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@pytest.fixture
def shaken() -> Iterator[None]:
    """Switch threads about every bytecode for the duration of one test."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def run_threads() -> set[threading.Thread]:
    """The engine's worker threads that are alive now (runs, and the lens's worker)."""
    prefixes = (RUN_THREAD_PREFIX, "nbstream-lens")
    return {t for t in threading.enumerate() if t.name.startswith(prefixes)}


@pytest.fixture(scope="session")
def tiny() -> tuple[Any, Any]:
    """A 2-layer random Llama with SmolLM2's tokenizer (fast; ends on EOS or newlines)."""
    from nbstream.testing import tiny_model

    return tiny_model()


@pytest.fixture(scope="session")
def tiny_line() -> tuple[Any, Any]:
    """The tiny model that never ends early: exactly max_new_tokens tokens on one line."""
    from nbstream.testing import tiny_model

    return tiny_model(one_line=True)


@pytest.fixture(scope="session")
def real_model() -> tuple[Any, Any]:
    """The embedded default model (SmolLM2-135M-Instruct), loaded once."""
    import nbstream

    return nbstream.load_model()


@pytest.fixture
def no_leftover_runs() -> Iterator[None]:
    """Start with no run in the process; afterwards stop and reap whatever the test left.

    Runs left by earlier tests (of any module) are stopped first, so a test can rely on a
    model being free. Every worker must end on its own (nothing waits forever): a thread
    still alive after its run was stopped and given 30 s is a hang, and fails the test.
    """
    from nbstream.generation import active_runs

    for run in active_runs():
        run.stop()
    for thread in run_threads():
        thread.join(30)
    yield
    leftovers = active_runs()
    for run in leftovers:
        run.stop()
    hung = []
    for thread in run_threads():
        thread.join(30)
        if thread.is_alive():
            hung.append(thread.name)
    assert not hung, f"worker threads that never ended: {hung}"


class Probe:
    """A forward hook on a model: counts calls (one per decode step), records the thread of
    each, and can hold the model at a gate or make a given call raise (fault injection)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.threads: list[int] = []
        self.gate = threading.Event()
        self.gate.set()
        self.held = threading.Event()  # set once a forward call is waiting at the gate
        self.fail_at: int | None = None
        self.error: BaseException | None = None
        self.on_call: Any = None
        self._handle = model.register_forward_hook(self._hook)

    def _hook(self, module: Any, args: Any, output: Any) -> None:
        self.threads.append(threading.get_ident())
        calls = len(self.threads)
        if not self.gate.is_set():
            self.held.set()
            if not self.gate.wait(60):
                raise RuntimeError("test gate never opened")
        if self.fail_at == calls and self.error is not None:
            raise self.error
        if self.on_call is not None:
            self.on_call(calls)

    @property
    def calls(self) -> int:
        return len(self.threads)

    def hold(self) -> None:
        """Make the model's next forward call wait until release(); ``held`` tells when."""
        self.held.clear()
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    def remove(self) -> None:
        self.gate.set()
        self._handle.remove()


@pytest.fixture
def probe() -> Iterator[Any]:
    """``probe(model)`` attaches a :class:`Probe`; all are opened and removed afterwards."""
    probes: list[Probe] = []

    def attach(model: Any) -> Probe:
        p = Probe(model)
        probes.append(p)
        return p

    yield attach
    for p in probes:
        p.remove()


def render(tokenizer: Any, prompt: Any) -> str:
    """The text a model sees for ``prompt``, computed independently of nbstream."""
    if isinstance(prompt, str) and not tokenizer.chat_template:
        return prompt
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def greedy_reference(model: Any, tokenizer: Any, prompt: Any, max_new_tokens: int):
    """Non-streamed greedy ``generate`` in the calling thread: (generated ids, decoded text)."""
    import torch

    text = render(tokenizer, prompt)
    encoded = tokenizer(text, add_special_tokens=not tokenizer.chat_template, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(
            **encoded,
            do_sample=False,
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
        )
    ids = out[0, encoded["input_ids"].shape[-1] :].tolist()
    return ids, tokenizer.decode(ids, skip_special_tokens=True)


@pytest.fixture(scope="session")
def greedy() -> Any:
    return greedy_reference


# -- test tiers ---------------------------------------------------------------------------------
# Markers (pyproject.toml) are given here, from where a test lives and what it uses, so that
# nobody has to remember them: `make check` runs what has none of them, `make test` all.
TESTS = Path(__file__).resolve().parent
# Whole modules that build and install environments (wheel, sdist, fresh venvs, Binder), run
# mypy over the package (`make check` runs mypy itself), or start a fresh interpreter per test
# (test_scripts: torch's import each time; test_benchmarks: each benchmark script end to end,
# 25 to 50 s each; test_terminal_chat: `nbstream chat` in a pseudo-terminal): a minute or
# more each.
SLOW_MODULES = {
    "test_binder.py",
    "test_packaging.py",
    "test_scripts.py",
    "test_benchmarks.py",
    "test_terminal_chat.py",
}
# Single tests as long as those, in modules otherwise quick: `make check` leaves them too.
SLOW_TESTS = {"tests/test_reliability.py::test_soak_two_hundred_generations"}
# Fixtures that load or convert the embedded default model (tens of seconds on a CPU).
MODEL_FIXTURES = {"real_model", "fresh_conversion"}
# Modules that start llama-cpp-python's server (`make llama-cpp` builds it: minutes on a
# fresh machine), so that `make check` needs no such build.
LLAMACPP_MODULES = {"test_llamacpp_server.py"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "llamacpp: starts llama-cpp-python's server (test_llamacpp_server.py)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path.resolve()
        where = path.relative_to(TESTS).parts if path.is_relative_to(TESTS) else ()
        fixtures = getattr(item, "fixturenames", ())
        if where[:1] == ("frontend",):
            item.add_marker(pytest.mark.frontend)
        elif where[:1] == ("browser",) or "chromium" in fixtures:
            item.add_marker(pytest.mark.browser)
        if MODEL_FIXTURES.intersection(fixtures):
            item.add_marker(pytest.mark.model)
        if path.name in SLOW_MODULES or item.nodeid in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
        if path.name in LLAMACPP_MODULES:
            item.add_marker(pytest.mark.llamacpp)


#: Tests outside tests/browser that start a JupyterLab and a Chromium of their own (the page
#: benchmark; the installed wheel's browser check): they run on the browser tier's worker.
JUPYTERLAB_TESTS = {
    "tests/test_benchmarks.py::test_widget_benchmark_quick",
    "tests/test_packaging.py::test_installed_wheel_works_in_a_fresh_environment",
}
#: Modules scheduled test by test rather than whole: each test is a minute or so of its own
#: (a lesson executed top to bottom) and shares no module-scoped fixture with the others.
PER_TEST_MODULES = {"tests/test_notebooks.py"}
#: About what a scope costs, in seconds on the 2-core machine with the other worker busy
#: (`--durations=0`; only their order matters): the scheduler hands out the dearest first, so
#: the cheap modules fill in at the end and both workers end near together. A scope not named
#: here (each under 30 s) goes after these, by its number of tests (xdist's own order).
SCOPE_SECONDS = {
    "tests/browser": 1600,
    "tests/test_scripts.py": 500,
    "tests/test_benchmarks.py": 350,
    "tests/test_binder.py": 200,
    "tests/test_notebooks.py::test_notebook_runs_top_to_bottom[teaching-sampling.ipynb]": 50,
    "tests/test_notebooks.py::test_notebook_runs_top_to_bottom": 20,
    "tests/frontend/test_widget_frontend.py": 140,
    "tests/test_remote.py": 140,
    "tests/test_docs.py": 100,
    "tests/test_cli.py": 95,
    "tests/test_terminal_chat.py": 90,
    "tests/test_stop_strings.py": 85,
    "tests/test_compare.py": 80,
    "tests/test_branching.py": 60,
    "tests/test_packaging.py": 60,
    "tests/frontend/test_docs_lessons_frontend.py": 50,
    "tests/test_secrets.py": 40,
    "tests/test_default_model.py": 40,
    "tests/test_remote_branch.py": 35,
    "tests/test_model_cache.py": 35,
}


def _scope(nodeid: str) -> str:
    """The unit one worker runs whole: tests/browser (and JUPYTERLAB_TESTS), a test of
    PER_TEST_MODULES, or else the test's module."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/browser/") or nodeid.split("[", 1)[0] in JUPYTERLAB_TESTS:
        return "tests/browser"
    if path in PER_TEST_MODULES:
        return nodeid
    return path


def _cost(scope: str) -> float:
    return SCOPE_SECONDS.get(scope, SCOPE_SECONDS.get(scope.split("[", 1)[0], 0.0))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """How ``make test``'s two pytest-xdist workers share the tests.

    A module runs whole on one worker (its module-scoped fixtures, a server or a Chromium,
    start once), and all of tests/browser on one worker, in order: two JupyterLab servers
    with their kernels and Chromiums at once would starve each other on a 2-core machine,
    while the other worker runs what needs no JupyterLab beside them. (xdist's own
    ``--dist loadgroup`` marks cannot do this under pytest 9: it renames node ids.)
    Scopes are handed out dearest first (SCOPE_SECONDS): the browser tier starts at once on
    one worker, the other takes the slow modules, and whichever is free takes the next.
    """
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            # The workqueue is in xdist's order (most tests first); the dearest goes first.
            dearest = max(self.workqueue, key=_cost)
            self.workqueue.move_to_end(dearest, last=False)
            super()._assign_work_unit(node)

    return ModuleScheduling(config, log)


# -- one Chromium for the whole session ------------------------------------------------------
# Playwright's sync API runs an event loop in the main thread while it is open: a second
# `sync_playwright()` fails ("Sync API inside the asyncio loop"), and so does any later
# `asyncio.run()` (the async engine tests, nbclient). So one instance is shared by the browser
# and front-end suites, and it is closed at the end of each test module.
CHROMIUM = os.environ.get("NBSTREAM_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Headless Debian Chromium driven by Playwright (never `playwright install`)."""
    from playwright.sync_api import sync_playwright

    if not os.access(CHROMIUM, os.X_OK):
        raise RuntimeError(
            f"{CHROMIUM} not found; install it with: apt-get install -y chromium "
            "(`make test` does), never `playwright install`"
        )
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=60_000)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="session")
def figures() -> Iterator[dict[str, Any]]:
    """Figures the reliability tests measured while asserting (memory growth, end states,
    message sizes). With $NBSTREAM_FIGURES set, they are written there as JSON when the
    session ends: `python -m benchmarks.reliability` turns them into the README's table."""
    found: dict[str, Any] = {}
    yield found
    path = os.environ.get("NBSTREAM_FIGURES")
    if path and found:
        Path(path).write_text(json.dumps(found, indent=2, sort_keys=True))


@pytest.fixture(scope="module")
def fake() -> Iterator[Fake]:
    """The fake OpenAI-compatible server of fake_server.py, serving for the module."""
    with serving() as server:
        yield server


@pytest.fixture(scope="module")
def loopback() -> Iterator[Loopback]:
    """The branching server of branching_server.py, serving for the module."""
    server = Loopback()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


# -- how the two workers' time was spent -----------------------------------------------------
# `make test` prints, after --durations, each worker's busy seconds and when its last test
# ended: the suite's wall time is the later of the two, so this shows which tier is the pole
# and how much the other worker idled at the end.
_WORKER_TIME: dict[str, list[float]] = {}
_SESSION_START: list[float] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    import time

    _SESSION_START.append(time.monotonic())


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    import time

    node = getattr(report, "node", None)  # set by xdist on the controller
    gateway = getattr(node, "gateway", None)
    if gateway is None or not _SESSION_START:
        return
    busy_and_end = _WORKER_TIME.setdefault(gateway.id, [0.0, 0.0])
    busy_and_end[0] += report.duration
    busy_and_end[1] = time.monotonic() - _SESSION_START[0]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for worker, (busy, end) in sorted(_WORKER_TIME.items()):
        terminalreporter.write_line(
            f"[worker] {worker}: {busy:.0f} s of tests, its last test ended at {end:.0f} s"
        )
