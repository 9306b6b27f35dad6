"""Work on a model that is not a run (the forward pass that explains a step, for the
sampling panel, the compare marks or ``run.distribution``) waits its turn in the model's
queue, as a run does: it never runs beside a run."""

from __future__ import annotations

import threading
import time

import pytest

import nbstream

pytestmark = pytest.mark.usefixtures("no_leftover_runs")


def test_a_steps_forward_pass_waits_for_the_run_that_holds_the_model(tiny_line, probe):
    model, tokenizer = tiny_line
    ended = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=8)
    ended.wait()
    p = probe(model)
    p.hold()
    running = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=30)
    assert p.held.wait(60), "the run never reached the model"
    got: list[object] = []
    asker = threading.Thread(target=lambda: got.append(ended.step_logits(3)))
    asker.start()
    # The pass has asked for the model once it waits in the queue (or, were it let through,
    # once it has reached the model): only then is the run let go.
    queue = running._queue
    deadline = time.monotonic() + 60
    while not queue.snapshot()[1] and asker.ident not in p.threads:
        assert time.monotonic() < deadline, "the step's pass never asked for the model"
        time.sleep(0.01)
    p.release()
    running.wait()
    asker.join(60)
    assert got and got[0].ndim == 1
    # The step's pass came after every step of the run, never between two of them.
    ours = [i for i, ident in enumerate(p.threads) if ident == asker.ident]
    assert ours and ours[0] > max(i for i, ident in enumerate(p.threads) if ident != asker.ident)
