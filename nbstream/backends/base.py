"""The seam between the run lifecycle (``generation.py``) and what produces the text.

A backend turns a prompt and settings into a :class:`Job` (all checks happen there, before
any thread starts); the job's ``run`` executes on the worker thread and feeds a
:class:`~nbstream.streaming.TokenBuffer`. Everything else — queueing, states, stop,
budget, metrics, decoding on the reader side — is written once, in ``generation.py``.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

from ..streaming import Decoder, TokenBuffer


class RunControl:
    """What a running job consults to know whether to stop: the user's Stop, the budget, or
    a stop string in the text (the run then ends complete)."""

    def __init__(self, budget_s: float | None = None) -> None:
        self.cancel_event = threading.Event()
        #: Set by whoever first sees a stop string (the job, or a reader decoding the text).
        self.stop_found = threading.Event()
        self.budget_s = budget_s
        self.deadline: float | None = None
        self.timed_out = False

    def start_clock(self) -> None:
        if self.budget_s is not None:
            self.deadline = time.monotonic() + self.budget_s

    def should_stop(self) -> bool:
        if self.cancel_event.is_set() or self.stop_found.is_set():
            return True
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.timed_out = True
            return True
        return False


class Job(Protocol):
    """One prepared run: checked input, ready to execute on the worker thread."""

    #: The exact prompt text the model sees (after any chat template), if known.
    prompt_text: str | None
    #: Number of prompt tokens, if known.
    prompt_tokens: int | None
    #: The effective settings of this run (the caller's merged with the model's defaults).
    settings: dict[str, Any]
    #: The prompt as the caller gave it (a string or a list of messages).
    prompt: Any
    #: Every setting in effect, as passed to the model (for the run's record); ``None``
    #: values for what does not apply (sampling parameters of a greedy run).
    in_effect: dict[str, Any]
    #: The seed sampling uses: the caller's, or one drawn for a sampled run given none.
    seed: int | None

    def decoder(self) -> Decoder:
        """A fresh incremental decoder for this job's items."""

    def run(self, buffer: TokenBuffer, control: RunControl) -> str:
        """Generate into ``buffer`` until done or ``control.should_stop()``.

        Returns the natural finish reason (``"eos"``, ``"length"`` or ``"stop"``); the
        lifecycle overrides it when the control stopped the run. Raises on failure.
        """

    def count_tokens(self, buffer: TokenBuffer) -> int | None:
        """How many tokens were generated so far (``None`` if the backend cannot tell)."""


class Backend(Protocol):
    """Something that can run prompts: a local model, or a server.

    Optional: ``supports_alternatives = True`` on a backend whose jobs capture ``run.trace``
    (the ``alternatives`` setting; such a job sets a ``trace_capture``, a
    :class:`~nbstream.trace.TraceCapture`). ``stream`` refuses ``alternatives > 0`` for any
    other backend before ``prepare``, so nothing is sent.
    """

    def queue_key(self) -> Any:
        """Runs with the same key share one FIFO queue: one at a time, never interleaved."""

    def prepare(self, prompt: Any, settings: dict[str, Any]) -> Job:
        """Check everything and build the job; raise ValueError/TypeError on bad input."""
