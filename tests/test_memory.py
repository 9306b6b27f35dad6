"""What a run keeps once it has ended: its text, state and record, never the model's tensors.

A kept run (in a list, a widget, a chat's turns, an exception a user caught) must not keep
the KV cache or the logits of its generation alive: on a GPU that memory is what the next
run needs, above all after a run that failed for want of it. Every forward of the model
registers weak references to its output's cache and logits; after the runs end and the
garbage collector has run, none may be alive, whatever way the runs ended.
"""

from __future__ import annotations

import gc
import traceback
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import nbstream

pytestmark = pytest.mark.usefixtures("no_leftover_runs")

KEPT = 20  # runs of each kind kept alive
HANG_S = 60.0


class Tensors:
    """A forward hook that keeps weak references to each forward's cache and logits, and
    raises from inside a decode step while ``fail`` is set (an out-of-memory error, say)."""

    def __init__(self, model: Any) -> None:
        self.refs: list[tuple[str, weakref.ref[Any]]] = []
        self.fail = False
        self._handle = model.register_forward_hook(self._hook, with_kwargs=True)

    def _hook(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        cache = getattr(output, "past_key_values", None)
        if cache is not None:
            self.refs.append(("cache", weakref.ref(cache)))
        self.refs.append(("logits", weakref.ref(output.logits)))
        decoding = kwargs["input_ids"].shape[1] == 1  # after the prompt's pass: a full cache
        if self.fail and decoding:
            raise RuntimeError("CUDA out of memory (injected)")

    def alive(self) -> dict[str, int]:
        gc.collect()
        counts = {"cache": 0, "logits": 0}
        for kind, ref in self.refs:
            if ref() is not None:
                counts[kind] += 1
        return counts

    def remove(self) -> None:
        self._handle.remove()


@pytest.fixture
def tensors(tiny_line) -> Iterator[Tensors]:
    watch = Tensors(tiny_line[0])
    yield watch
    watch.remove()


def ended(run: nbstream.Generation) -> nbstream.Generation:
    assert run.wait_done(HANG_S), "the run never ended"
    return run


def complete(model: Any, tokenizer: Any) -> nbstream.Generation:
    run = ended(nbstream.stream(model, tokenizer, "Hi", max_new_tokens=6))
    assert run.status == "complete"
    return run


def test_a_failed_run_keeps_its_error_but_not_the_models_tensors(tiny_line, tensors):
    model, tokenizer = tiny_line
    tensors.fail = True
    runs = [ended(nbstream.stream(model, tokenizer, "Hi", max_new_tokens=6)) for _ in range(3)]
    caught = []
    for run in runs:
        assert run.status == "failed"
        with pytest.raises(nbstream.GenerationFailed) as info:
            run.wait()
        caught.append(info.value)
    assert tensors.alive() == {"cache": 0, "logits": 0}
    # What a user needs to see is all still there: the exception, its message, where it came
    # from (the traceback's text names the frame that raised), and the chain of causes.
    for run, error in zip(runs, caught, strict=True):
        assert isinstance(run.error, RuntimeError) and "CUDA out of memory" in str(run.error)
        assert error.__cause__ is run.error
        text = "".join(traceback.format_exception(run.error))
        assert "_hook" in text and "raise RuntimeError" in text
        assert run.record is not None and "CUDA out of memory" in str(run.record["error"])


@pytest.mark.parametrize("kind", ["StreamWidget", "ChatWidget"])
def test_a_widgets_failed_run_shows_its_traceback_and_keeps_no_tensors(tiny_line, tensors, kind):
    # A chat keeps each turn's run, and so its error, for as long as the conversation.
    model, tokenizer = tiny_line
    tensors.fail = True
    widgets = [getattr(nbstream, kind)(model, tokenizer) for _ in range(3)]
    for widget in widgets:
        widget.generate("Hi", max_new_tokens=6)
        with pytest.raises(nbstream.GenerationFailed):
            widget.wait(HANG_S)
    try:
        assert tensors.alive() == {"cache": 0, "logits": 0}
        for widget in widgets:
            assert isinstance(widget.error, RuntimeError)
            traceback_text = widget.traceback
            assert traceback_text is not None
            assert "CUDA out of memory (injected)" in traceback_text and "_hook" in traceback_text
    finally:
        for widget in widgets:
            widget.close()


def _cancelled(model: Any, tokenizer: Any) -> nbstream.Generation:
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=4000)
    run.wait_for_progress(2, HANG_S)
    run.stop()
    ended(run)
    assert run.status in ("cancelled", "complete")
    return run


def _budget_ended(model: Any, tokenizer: Any) -> nbstream.Generation:
    run = ended(nbstream.stream(model, tokenizer, "Hi", max_new_tokens=4000, budget_s=0.05))
    assert run.status == "failed" and isinstance(run.error, TimeoutError)
    return run


def test_kept_runs_of_every_end_keep_no_cache_and_no_logits(tiny_line, tensors):
    """Complete, cancelled, failed, budget-ended and branched runs, KEPT of each, kept alive
    with the exceptions a user caught: no KV cache and no logits tensor outlives them."""
    model, tokenizer = tiny_line
    kept: dict[str, list[Any]] = {}
    makers: dict[str, Callable[[], nbstream.Generation]] = {
        "complete": lambda: complete(model, tokenizer),
        "cancelled": lambda: _cancelled(model, tokenizer),
        "budget": lambda: _budget_ended(model, tokenizer),
    }
    for kind, make in makers.items():
        kept[kind] = [make() for _ in range(KEPT)]
    parent = complete(model, tokenizer)
    kept["branched"] = [
        ended(parent.branch(2, parent.token_ids[2] + 1 + i, max_new_tokens=8)) for i in range(KEPT)
    ]
    assert all(run.status == "complete" for run in kept["branched"])
    tensors.fail = True
    kept["failed"] = [
        ended(nbstream.stream(model, tokenizer, "Hi", max_new_tokens=6)) for _ in range(KEPT)
    ]
    tensors.fail = False
    errors = []
    for runs in kept.values():
        for run in runs:
            try:
                run.wait()
            except nbstream.GenerationError as exc:
                errors.append(exc)  # as a notebook keeps what it caught
    assert len(errors) >= 2 * KEPT
    assert all(run.status == "failed" for run in kept["failed"])
    assert tensors.alive() == {"cache": 0, "logits": 0}
    assert sum(len(runs) for runs in kept.values()) == 5 * KEPT
