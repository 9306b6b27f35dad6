"""The backend interface (``nbstream.backends.Backend`` and ``Job``): declared once, with
defaults, and read, never probed.

A third backend, written here by subclassing and filling in only what is required (it
streams a fixed list of text pieces), runs through ``nbstream.stream`` and a
``StreamWidget`` with honest end states; what it does not fill in is the base's default.
An AST walk keeps the engine, the widgets and the backends from probing a backend or a job
with ``getattr``/``hasattr`` again.
"""

from __future__ import annotations

import ast
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import nbstream
from nbstream.backends import Backend, Job, RunControl
from nbstream.generation import GenerationCancelled, GenerationFailed
from nbstream.streaming import TextDecoder, TokenBuffer
from nbstream.widgets.branches import MODEL_CANNOT_BRANCH

PIECES = ["Hel", "lo", ",", " world"]
# Bounds a wait that must end; never the expected duration of anything.
HANG_S = 30.0


class ListJob(Job):
    """Streams ``pieces``; optionally holds after the first (``hold``) or raises there."""

    def __init__(
        self, backend: ListBackend, prompt: Any, settings: dict[str, Any], pieces: list[str]
    ) -> None:
        super().__init__(prompt, settings)
        self.backend = backend
        self.pieces = pieces

    def run(self, buffer: TokenBuffer, control: RunControl) -> str:
        buffer.put(self.prompt)  # the first put is the prompt: skipped
        for index, piece in enumerate(self.pieces):
            if control.should_stop():
                return "length"
            buffer.put(piece)
            if index == 0:
                self.backend.first_put.set()
                if self.backend.fail:
                    raise RuntimeError("the list ran out of ink")
                # Until the test lets it go on, or the run is stopped.
                while not self.backend.go_on.wait(0.01):
                    if control.should_stop():
                        return "length"
        return "eos"


class ListBackend(Backend):
    """Only what is required: ``prepare``."""

    def __init__(self, pieces: list[str], *, hold: bool = False, fail: bool = False) -> None:
        self.pieces = pieces
        self.fail = fail
        self.prepared = 0
        self.first_put = threading.Event()
        self.go_on = threading.Event()
        if not hold:
            self.go_on.set()

    def prepare(self, prompt: Any, settings: dict[str, Any], **branch: Any) -> ListJob:
        self.prepared += 1
        return ListJob(self, prompt, settings, self.pieces)


def wait_status(widget: Any, status: str) -> None:
    deadline = time.monotonic() + HANG_S
    while widget.status != status:
        assert time.monotonic() < deadline, f"status stayed {widget.status!r}"
        time.sleep(0.01)


# -- through nbstream.stream ----------------------------------------------------------------
def test_a_subclass_streams_and_completes():
    run = nbstream.stream(ListBackend(PIECES), None, "Hi")
    assert "".join(run) == "Hello, world"
    assert run.wait() == run.result == "Hello, world"
    assert run.status == "complete"
    assert run.metrics["finish_reason"] == "eos"
    assert run.prompt == "Hi"


def test_stop_ends_it_cancelled_with_its_text_so_far():
    backend = ListBackend(PIECES, hold=True)
    run = nbstream.stream(backend, None, "Hi")
    assert backend.first_put.wait(HANG_S)
    assert run.stop("the test said so")
    with pytest.raises(GenerationCancelled, match="because the test said so"):
        run.wait(HANG_S)
    assert run.status == "cancelled" and run.result is None
    assert run.partial_text == "Hel"
    assert run.metrics["finish_reason"] == "cancelled"


def test_a_job_that_raises_ends_the_run_failed():
    run = nbstream.stream(ListBackend(PIECES, fail=True), None, "Hi")
    with pytest.raises(GenerationFailed, match="out of ink") as info:
        run.wait(HANG_S)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert run.status == "failed" and isinstance(run.error, RuntimeError)
    assert run.partial_text == "Hel" and run.result is None


def test_alternatives_are_refused_before_anything_runs():
    backend = ListBackend(PIECES)
    with pytest.raises(ValueError, match=r"alternatives=2: ListBackend cannot capture token"):
        nbstream.stream(backend, None, "Hi", alternatives=2)
    assert backend.prepared == 0


def test_steering_is_refused_before_anything_runs(tiny):
    sea = nbstream.Direction(vector=torch.ones(tiny[0].config.hidden_size), layer=0)
    backend = ListBackend(PIECES)
    with pytest.raises(ValueError, match=r"steer: ListBackend cannot steer its model"):
        nbstream.stream(backend, None, "Hi", steer=(sea, 4.0))
    assert backend.prepared == 0


def test_the_defaults_apply():
    backend = ListBackend(PIECES)
    assert not backend.supports_alternatives
    assert not backend.supports_step_logits
    assert not backend.supports_branching
    assert not backend.is_server
    assert backend.queue_key() is backend
    assert "ListBackend cannot continue an answer" in (backend.why_no_branch() or "")
    run = nbstream.stream(backend, None, "Hi")
    assert run.wait(HANG_S) == "Hello, world"
    job = run._job
    assert isinstance(job.decoder(), TextDecoder)  # items are text pieces
    assert job.extra_metrics() == {} and job.record_notes() == {}
    assert job.prompt_text is None and job.prompt_tokens is None
    assert job.in_effect == job.settings
    # No token count, trace, ids or seed: said as None, not guessed.
    assert run.metrics["tokens"] is None
    assert run.trace is None and run.token_ids == [] and run.seed is None
    assert run.branch_info is None
    with pytest.raises(ValueError, match="ListBackend cannot continue an answer"):
        run.branch(0, 1)
    with pytest.raises(ValueError, match="ListBackend does not give the model's logits"):
        run.step_logits(0)
    with pytest.raises(ValueError, match="does not give the model's logits"):
        run.distribution(0)
    # The record names the backend, and a rerun from it gives the same text.
    record = run.record
    assert record is not None and record["model"]["name"] == "ListBackend"
    assert nbstream.rerun(record, backend).wait(HANG_S) == "Hello, world"


def test_runs_of_one_backend_take_turns_and_another_backend_has_its_own_queue():
    held = ListBackend(PIECES, hold=True)
    first = nbstream.stream(held, None, "one")
    second = nbstream.stream(held, None, "two")
    other = nbstream.stream(ListBackend(PIECES), None, "three")
    # The first holds the backend's queue until it is let go: the second waits for it.
    assert second.status == "queued"
    assert other.wait(HANG_S) == "Hello, world"
    assert second.status == "queued"
    held.go_on.set()
    assert first.wait(HANG_S) == second.wait(HANG_S) == "Hello, world"


def test_a_job_that_fills_in_only_run_needs_no_more():
    class Bare(Job):
        def run(self, buffer: TokenBuffer, control: RunControl) -> str:
            buffer.put(None)
            buffer.put("just this")
            return "eos"

    class BareBackend(Backend):
        def prepare(self, prompt: Any, settings: dict[str, Any], **branch: Any) -> Job:
            return Bare(prompt, settings)

    run = nbstream.stream(BareBackend(), None, "Hi", max_new_tokens=3)
    assert run.wait(HANG_S) == "just this"
    assert run.record is not None and run.record["settings"]["max_new_tokens"] == 3


def test_the_base_classes_refuse_to_be_half_written():
    class NoPrepare(Backend):
        pass

    class NoRun(Job):
        pass

    with pytest.raises(TypeError, match="prepare"):
        NoPrepare()  # type: ignore[abstract]
    with pytest.raises(TypeError, match="run"):
        NoRun("Hi", {})  # type: ignore[abstract]


def test_something_that_is_no_backend_is_refused_with_what_to_pass():
    class Lookalike:
        def queue_key(self) -> Any:
            return self

        def prepare(self, prompt: Any, settings: dict[str, Any]) -> Any:
            raise AssertionError("never prepared")

    for tokenizer in (None, object()):
        with pytest.raises(TypeError, match=r"Lookalike has prepare\(\) but does not subclass"):
            nbstream.stream(Lookalike(), tokenizer, "Hi")
        with pytest.raises(TypeError, match=r"subclass nbstream\.backends\.Backend"):
            nbstream.StreamWidget(Lookalike(), tokenizer)


# -- through a StreamWidget -----------------------------------------------------------------
def test_a_widget_runs_it_to_complete():
    w = nbstream.StreamWidget(ListBackend(PIECES))
    try:
        assert not w.can_trace and not w.can_explain
        assert w.branch_unavailable == MODEL_CANNOT_BRANCH
        w.generate("Hi")
        assert w.wait(HANG_S) == "Hello, world"
        wait_status(w, "complete")
        assert w.result == "Hello, world"
    finally:
        w.close()


def test_a_widget_stop_ends_it_cancelled():
    backend = ListBackend(PIECES, hold=True)
    w = nbstream.StreamWidget(backend)
    try:
        w.generate("Hi")
        assert backend.first_put.wait(HANG_S)
        assert w.stop()
        with pytest.raises(GenerationCancelled):
            w.wait(HANG_S)
        wait_status(w, "cancelled")
        assert w.result is None and w.partial_text == "Hel"
    finally:
        w.close()


def test_a_widget_shows_a_job_that_raises_as_failed():
    w = nbstream.StreamWidget(ListBackend(PIECES, fail=True))
    try:
        w.generate("Hi")
        with pytest.raises(GenerationFailed):
            w.wait(HANG_S)
        wait_status(w, "failed")
        assert isinstance(w.error, RuntimeError)
        assert "out of ink" in str(w.error_info)
    finally:
        w.close()


# -- no probing: the interface is read as declared ------------------------------------------
ROOT = Path(nbstream.__file__).parent
# Where a backend or a job is used: the engine, the widgets, the backends themselves.
# The run handle and its parts, the widgets, and every backend module (packages included).
CHECKED = [ROOT / "generation.py", *sorted(ROOT.glob("run_*.py")), ROOT / "model_queue.py"]
CHECKED += sorted((ROOT / "widgets").glob("*.py"))
CHECKED += sorted((ROOT / "backends").rglob("*.py"))
# What names a backend or a job: a variable so named, or an attribute so named (self._job,
# run._backend, ...); in the modules that resolve what the caller passed, ``model`` too
# (anywhere else, ``model`` is a transformers model, whose config is probed on purpose).
NAMES = {"backend", "job", "endpoint"}
ATTRIBUTES = {"backend", "_backend", "job", "_job", "endpoint", "_endpoint"}
MODEL_IS_A_BACKEND = {ROOT / "generation.py", ROOT / "backends" / "__init__.py"}


def probes(source: str, *, model_too: bool = False) -> list[str]:
    """``getattr``/``hasattr`` calls whose first argument names a backend or a job."""
    names = NAMES | {"model"} if model_too else NAMES
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and node.args
        ):
            continue
        target = node.args[0]
        if (isinstance(target, ast.Name) and target.id in names) or (
            isinstance(target, ast.Attribute) and target.attr in ATTRIBUTES
        ):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_rule_finds_a_probe_and_lets_other_getattrs_be():
    source = (
        "a = getattr(self._job, 'step_logits', None)\n"
        "b = hasattr(backend, 'branch_job')\n"
        "c = getattr(run._backend, 'x', 1)\n"
        "d = getattr(token, 'id', token)\n"
        "e = getattr(self.model, 'config', None)\n"
        "f = hasattr(model, 'prepare')\n"
    )
    assert [p.split(":")[0] for p in probes(source)] == ["line 1", "line 2", "line 3"]
    assert [p.split(":")[0] for p in probes(source, model_too=True)][-1] == "line 6"


@pytest.mark.parametrize("path", CHECKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_backend_or_job_is_probed(path):
    found = probes(path.read_text(encoding="utf-8"), model_too=path in MODEL_IS_A_BACKEND)
    assert not found, (
        f"{path.relative_to(ROOT)} probes a backend or a job; declare the capability on "
        f"nbstream.backends.Backend or Job (with its default) and read it: {found}"
    )


def test_no_type_ignore_on_a_call_to_prepare():
    for path in CHECKED:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "prepare(" in line:
                assert "type: ignore" not in line, f"{path.name}:{number}: {line.strip()}"
