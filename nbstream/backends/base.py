"""The seam between the run lifecycle (``generation.py``) and what produces the text.

A :class:`Backend` turns a prompt and settings into a :class:`Job` (all checks happen there,
before any thread starts); the job's ``run`` executes on the worker thread and feeds a
:class:`~nbstream.streaming.TokenBuffer`. Everything else (queueing, states, stop, budget,
metrics, decoding on the reader side) is written once, in ``generation.py``.

Both classes name every capability with its default, as httpx's ``BaseTransport`` and
transformers' ``BaseStreamer`` do: a new backend subclasses them, fills in what is
required (:meth:`Backend.prepare`, :meth:`Job.run`) and what it can, and the rest is the
default (no trace, no branches, no logits, its own queue, text pieces for items).
"""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..distribution import Distribution
from ..streaming import Decoder, TextDecoder, TokenBuffer
from ..trace import RemoteTrace, TokenTrace

__all__ = ["Backend", "Job", "RunControl", "TraceSource"]


class RunControl:
    """What a running job consults to know whether to stop.

    The user's Stop, the budget, or a stop string in the text (the run then ends
    complete) all show here; a job checks :meth:`should_stop` between steps.

    Args:
        budget_s: Seconds the run may take once it has the model (``None``: no limit).

    Example::

        >>> control = RunControl(budget_s=None)
        >>> control.should_stop()
        False
        >>> control.cancel_event.set()
        >>> control.should_stop()
        True
    """

    def __init__(self, budget_s: float | None = None) -> None:
        self.cancel_event = threading.Event()
        #: Set by whoever first sees a stop string (the job, or a reader decoding the text).
        self.stop_found = threading.Event()
        self.budget_s = budget_s
        self.deadline: float | None = None
        self.timed_out = False
        #: Why a job that ends the run cancelled itself did so (a replay of a cancelled
        #: run); a user's Stop gives its own reason instead.
        self.cancel_reason: str | None = None

    def start_clock(self) -> None:
        """Start the budget's clock (the run has the model now)."""
        if self.budget_s is not None:
            self.deadline = time.monotonic() + self.budget_s

    def should_stop(self) -> bool:
        """Whether the job should stop now: Stop, a stop string found, or the budget spent."""
        if self.cancel_event.is_set() or self.stop_found.is_set():
            return True
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.timed_out = True
            return True
        return False


class TraceSource(Protocol):
    """What a job's ``trace_capture`` gives ``run.trace``: the records of the tokens so far."""

    def records(self, ids: list[int]) -> list[TokenTrace] | RemoteTrace:
        """The trace of the run's tokens so far (``ids``: its token ids, if it has any)."""


class Job(abc.ABC):
    """One prepared run: checked input, ready to execute on the worker thread.

    Required: :meth:`run`. Everything else has a default: items are text pieces
    (:meth:`decoder`), no token count, no trace, no extra metrics, not a branch.

    Args:
        prompt: The prompt as the caller gave it (a string or a list of messages).
        settings: The effective settings of this run.

    Example::

        >>> class Words(Job):
        ...     def run(self, buffer, control):
        ...         buffer.put(self.prompt)  # the first put is the prompt: skipped
        ...         for word in ("Hello", ",", " world"):
        ...             if control.should_stop():
        ...                 break
        ...             buffer.put(word)
        ...         return "eos"
    """

    #: The prompt as the caller gave it (a string or a list of messages).
    prompt: Any = None
    #: The exact prompt text the model sees (after any chat template), if known.
    prompt_text: str | None = None
    #: Number of prompt tokens, if known.
    prompt_tokens: int | None = None
    #: The seed sampling uses: the caller's, or one drawn for a sampled run given none.
    seed: int | None = None
    #: ``alternatives=k``: what fills ``run.trace`` (None: the run captures no trace).
    trace_capture: TraceSource | None = None
    #: The tags around a reasoning model's thinking (None: the usual ``<think>`` pair).
    thinking_tags: tuple[str, str] | None = None
    #: The settings as the caller gave them, before the model's defaults were merged in (a
    #: branch inherits these); None: the same as ``settings``.
    asked: Mapping[str, Any] | None = None
    #: A branch from token ids: its forced first tokens (shown at once, then generated on).
    prefix_ids: Sequence[int] = ()
    #: A branch on a server: the answer so far, sent as text for the server to continue...
    assistant_prefix: str | None = None
    #: ... and how many tokens it is (the parent's trace records).
    prefix_steps: int = 0

    def __init__(self, prompt: Any, settings: dict[str, Any]) -> None:
        self.prompt = prompt
        #: The effective settings of this run (the caller's merged with the model's defaults).
        self.settings = settings
        #: Every setting in effect, as passed to the model (for the run's record); ``None``
        #: values for what does not apply (sampling parameters of a greedy run).
        self.in_effect: dict[str, Any] = dict(settings)
        self.seed = settings.get("seed")

    @abc.abstractmethod
    def run(self, buffer: TokenBuffer, control: RunControl) -> str:
        """Generate into ``buffer`` until done or ``control.should_stop()``.

        The first item put is the prompt, skipped (as transformers' ``generate`` does).

        Args:
            buffer: Where the items go (token ids, or text pieces: see :meth:`decoder`).
            control: Says when to stop (Stop, a stop string, the budget).

        Returns:
            The natural finish reason (``"eos"``, ``"length"`` or ``"stop"``); the lifecycle
            overrides it when the control stopped the run.

        Raises:
            Exception: Any failure; the run ends ``failed`` with it.
        """

    def decoder(self) -> Decoder:
        """A fresh incremental decoder for this job's items (default: text pieces)."""
        return TextDecoder()

    def count_tokens(self, buffer: TokenBuffer) -> int | None:
        """How many tokens were generated so far (default ``None``: cannot tell)."""
        return None

    def extra_metrics(self) -> dict[str, Any]:
        """Counts only this backend knows (a server's chunks), added to ``run.metrics``."""
        return {}

    def record_notes(self) -> dict[str, Any]:
        """What this backend adds to ``run.record`` (``"model"`` joins the model's facts)."""
        return {}

    def step_logits(self, answer_ids: list[int], first: int) -> Any:
        """The model's raw logits at answer steps ``first`` to ``len(answer_ids)``.

        Only called when the backend says ``supports_step_logits``.

        Args:
            answer_ids: The answer's token ids the forward pass reads after the prompt.
            first: The first step whose row is wanted.

        Returns:
            One row of logits per step, ``first`` to ``len(answer_ids)``.
        """
        raise NotImplementedError(f"{type(self).__name__} gives no logits")

    def distribution(
        self, step: int, ids: list[int], asked: dict[str, Any], logits: Any
    ) -> Distribution:
        """``run.distribution(step, **asked)`` from the step's raw ``logits``.

        Only called when the backend says ``supports_step_logits``.

        Args:
            step: The step explained.
            ids: The run's token ids.
            asked: The sliders' settings (None: the run's own).
            logits: The step's raw logits (:meth:`step_logits`).

        Returns:
            The distribution at each stage of the run's processors.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot explain a step")


class Backend(abc.ABC):
    """Something that can run prompts: a local model, a server, or your own.

    Required: :meth:`prepare`. Each capability below is off unless a subclass turns it on
    (and provides what it needs); ``stream``, ``run.branch`` and the widgets read these
    attributes, and refuse what a backend cannot do before anything runs.

    Example::

        >>> class Echo(Backend):
        ...     def prepare(self, prompt, settings, **branch):
        ...         return Words(prompt, settings)   # the Job example's class
        >>> nbstream.stream(Echo(), None, "Hi").wait()
        'Hello, world'
    """

    #: Its jobs capture ``run.trace`` (the ``alternatives`` setting) in ``trace_capture``;
    #: :meth:`check_alternatives` may still refuse a given ``k``.
    supports_alternatives: bool = False
    #: Its jobs give the model's raw logits (:meth:`Job.step_logits`,
    #: :meth:`Job.distribution`): ``run.step_logits``, ``run.distribution``, the widgets'
    #: sampling panel.
    supports_step_logits: bool = False
    #: Its runs' layers can be read: ``run.lens``, ``run.attribution``, the popover's
    #: "Inside the model" (a model the lens does not know is still refused, by name).
    supports_lens: bool = False
    #: ``run.branch`` from token ids: :meth:`prepare` takes ``prefix_ids``.
    supports_branching: bool = False
    #: Its runs take ``steer=(direction, strength)`` (:mod:`nbstream.steering`); one that
    #: does not refuses it with :meth:`check_steer`.
    supports_steering: bool = False
    #: A model server: it streams text, not token ids; a run has tokens to show only with a
    #: trace (``alternatives=k``), and ``run.branch`` goes through :meth:`branch_job`, which
    #: sends the answer so far as text (:meth:`prepare` takes ``assistant_prefix``).
    is_server: bool = False
    #: The loaded model a local backend runs (its record names it); None for a server.
    model: Any = None
    #: The model's tokenizer, where the backend has one.
    tokenizer: Any = None

    def describe(self) -> dict[str, Any] | None:
        """What produced the text, for ``record["model"]``.

        ``None`` (the default): read it from :attr:`model`, or name the backend's class when there
        is none.
        """
        return None

    @abc.abstractmethod
    def prepare(
        self,
        prompt: Any,
        settings: dict[str, Any],
        *,
        prefix_ids: list[int] | None = None,
        assistant_prefix: str | None = None,
        prefix_steps: int = 0,
    ) -> Job:
        """Check everything and build the job; nothing runs yet.

        Args:
            prompt: A string, or a list of ``{"role": ..., "content": ...}`` messages.
            settings: The validated settings (``nbstream.settings.validate_settings``).
            prefix_ids: A branch's first tokens (passed only if ``supports_branching``).
            assistant_prefix: A server's branch: the answer so far, to continue (passed
                only if ``is_server``).
            prefix_steps: How many tokens ``assistant_prefix`` is.

        Returns:
            The job, ready to run on the worker thread.

        Raises:
            ValueError: Bad input (a message that says what to do).
            TypeError: Input of the wrong type.
        """

    def queue_key(self) -> Any:
        """Runs with the same key share one FIFO queue: one at a time, never interleaved.

        Returns:
            A hashable key (default: this backend object, so its runs take turns).
        """
        return self

    def check_alternatives(self, k: int) -> None:
        """Refuse ``alternatives=k`` before anything runs when runs cannot capture it.

        Args:
            k: How many top candidates per token were asked for.

        Raises:
            ValueError: The backend cannot capture token probabilities.
        """
        if not self.supports_alternatives:
            raise ValueError(
                f"alternatives={k}: {type(self).__name__} cannot capture token probabilities; "
                "use a local transformers model, or drop alternatives"
            )

    def check_steer(self, steer: Mapping[str, Any] | None) -> None:
        """Refuse a ``steer`` setting before anything runs when runs cannot be steered.

        Args:
            steer: The checked setting (None: unsteered, always fine).

        Raises:
            ValueError: The backend cannot steer its model.
        """
        if steer is None or self.supports_steering:
            return
        raise ValueError(
            f"steer: {type(self).__name__} cannot steer its model: steering adds a direction "
            "to the hidden states inside the model's layers, which only a transformers model "
            "in this process lets nbstream reach; run the model locally "
            "(nbstream.stream(model, tokenizer, prompt, steer=(direction, strength))), or "
            "drop steer"
        )

    def why_no_branch(self) -> str | None:
        """Why ``run.branch`` is refused on this backend (``None``: it is not)."""
        if self.supports_branching:
            return None
        return (
            f"{type(self).__name__} cannot continue an answer from given tokens; "
            "branching needs a local transformers model"
        )

    def branch_job(
        self, parent: Any, step: int, token: Any, settings: dict[str, Any]
    ) -> tuple[Job, dict[str, Any]]:
        """The job of ``parent.branch(step, token, **settings)`` on a server.

        Called only when ``is_server``; a backend branching from token ids needs none.

        Args:
            parent: The run branched from (a :class:`~nbstream.Generation` that has ended).
            step: Where the branch leaves the parent's answer.
            token: What it takes there instead.
            settings: The branch's validated settings.

        Returns:
            The job, and what the branch's ``branch_info`` says.

        Raises:
            ValueError: The backend cannot continue a given answer.
        """
        raise ValueError(
            self.why_no_branch() or f"{type(self).__name__} cannot continue a given answer"
        )
