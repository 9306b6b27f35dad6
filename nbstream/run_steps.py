"""What a run knows about the model's steps: trace, logits, distribution, lens, attention.

:class:`StepsView` is the part of :class:`~nbstream.Generation` that asks: ``run.trace``,
``run.distribution(step)``, ``run.step_logits(step)``, ``run.lens(step)``,
``run.attribution(step)`` and ``run.attention(step)``. :class:`RunSteps` answers them for
one run, running or ended. A forward pass it needs waits its turn in the model's queue
(the lens, the attribution and the attention run beside a run instead: see
:mod:`nbstream.lens`).
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from typing import Any

from ._errors import input_checked
from .attention import Attention, AttentionUnavailable, attention_at
from .backends.base import Backend, Job
from .backends.local import LocalJob
from .backends.replay import RECORDING_HAS_NO_LOGITS, ReplayBackend
from .distribution import Distribution
from .lens import Attribution, Lens, attribution_at, lens_at, rope_moves
from .model_queue import ModelQueue
from .run_text import RunText
from .settings import validate_settings
from .trace import RemoteTrace, TokenTrace, running_module

__all__ = ["RunSteps", "StepsView", "check_step"]


def check_step(step: Any, length: int) -> int:
    """``step`` if it is a step of a run of ``length`` tokens; raises saying why not.

    Args:
        step: An index into ``run.token_ids``.
        length: How many tokens the run has.

    Returns:
        ``step``.

    Raises:
        TypeError: ``step`` is not an int.
        ValueError: It is out of range.

    Example:
        >>> check_step(2, 5)
        2
    """
    if isinstance(step, bool) or not isinstance(step, int):
        raise TypeError(f"step must be an int (an index into run.token_ids), got {step!r:.80}")
    if not 0 <= step < length:
        raise ValueError(
            f"step {step} is not a step of this run: it has {length} token"
            f"{'' if length == 1 else 's'} (steps 0 to {length - 1})"
        )
    return step


class RunSteps:
    """The model's steps of one run, looked at after the fact or while it streams.

    Args:
        backend: The run's backend.
        job: The run's job (what it applied at each step, its prompt's encoding).
        queue: The model's queue, where a forward pass waits its turn.
        text: The run's text (its token ids so far).

    Example:
        >>> steps = RunSteps(backend, job, queue, text)
        >>> steps.distribution(3, temperature=0.7).kept("temperature")
    """

    def __init__(self, backend: Backend, job: Job, queue: ModelQueue, text: RunText) -> None:
        self._backend = backend
        self._job = job
        self._queue = queue
        self._text = text

    def _token_ids(self) -> list[int]:
        self._text.pump()
        return self._text.token_ids()

    def _as_computed(self) -> AbstractContextManager[Any]:
        """A steered run's steering on this thread, so that a pass shows what the run computed.

        Only this thread's passes: another run's, beside it, never sees it (see
        :mod:`nbstream.steering`).
        """
        return self._job.steered() if isinstance(self._job, LocalJob) else contextlib.nullcontext()

    def trace(self) -> list[TokenTrace] | RemoteTrace | None:
        """The trace so far (see :attr:`nbstream.Generation.trace`); ``None`` without one."""
        # A backend that captures the trace (alternatives > 0) gives its job one.
        capture = self._job.trace_capture
        if capture is None:
            return None
        records: list[TokenTrace] | RemoteTrace = capture.records(self._token_ids())
        return records

    def require_logits(self) -> None:
        """Raise ``ValueError`` saying why, unless the backend gives the model's logits."""
        if isinstance(self._backend, ReplayBackend):
            raise ValueError(RECORDING_HAS_NO_LOGITS)
        if not self._backend.supports_step_logits:
            raise ValueError(
                f"{type(self._backend).__name__} does not give the model's logits (a model "
                "server streams text); the distribution needs a local transformers model"
            )

    def distribution(
        self,
        step: int,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        logits: Any = None,
    ) -> Distribution:
        """What the sampling sliders do at ``step`` (see :meth:`nbstream.Generation.distribution`).

        Args:
            step: The step (0-based, into ``token_ids``).
            temperature: The temperature to try; ``None`` for the run's.
            top_k: The top-k to try; ``None`` for the run's, 0 for off.
            top_p: The top-p to try; ``None`` for the run's, 1.0 for off.
            logits: The step's logits already computed (:meth:`step_logits`).

        Returns:
            A :class:`~nbstream.distribution.Distribution`.
        """
        self.require_logits()
        step = check_step(step, len(self._token_ids()))
        asked = validate_settings({"temperature": temperature, "top_k": top_k, "top_p": top_p})
        if logits is None:
            logits = self.step_logits(step)
        elif getattr(logits, "ndim", None) != 1:
            raise ValueError(
                f"logits must be run.step_logits({step}): a 1-D tensor over the vocabulary, "
                f"got {type(logits).__name__} of shape {tuple(getattr(logits, 'shape', ()))}"
            )
        return self.distribution_at(step, asked, logits)

    def step_logits(self, step: int) -> Any:
        """The model's raw logits at ``step`` (see :meth:`nbstream.Generation.step_logits`).

        Args:
            step: The step (0-based, into ``token_ids``).

        Returns:
            A 1-D float tensor over the vocabulary, on the CPU.
        """
        self.require_logits()
        step = check_step(step, len(self._token_ids()))
        ids = self._token_ids()[:step]
        with self._queue.turn():
            return self._job.step_logits(ids, step)[0].detach().float().cpu()

    def distribution_at(self, step: int, asked: dict[str, Any], logits: Any) -> Distribution:
        """:meth:`distribution` from ``logits`` already computed for ``step``.

        The widget's sampling panel keeps them, so a slider move needs no forward pass.

        Args:
            step: The step.
            asked: The checked sampling settings to try.
            logits: The step's logits.

        Returns:
            The step's distribution.
        """
        # The job knows what the run applied (the model's processors, as generate() builds
        # them), so the stages are those, in its order.
        self.require_logits()
        return self._job.distribution(step, self._token_ids(), asked, logits)

    def lens(self, step: int) -> Lens:
        """The logit lens at ``step`` (see :meth:`nbstream.Generation.lens`).

        Args:
            step: The step (0-based, into ``token_ids``).

        Returns:
            A :class:`~nbstream.lens.Lens`.
        """
        trace = self.trace()
        record = trace[step] if isinstance(trace, list) and step < len(trace) else None
        with self._as_computed():
            return lens_at(
                self._backend, self._job, self._token_ids(), step, self._queue.turn, record
            )

    def attribution(self, step: int) -> Attribution:
        """Attribution at ``step`` (see :meth:`nbstream.Generation.attribution`).

        Args:
            step: The step (0-based, into ``token_ids``).

        Returns:
            An :class:`~nbstream.lens.Attribution`.
        """
        with self._as_computed():
            return attribution_at(
                self._backend, self._job, self._token_ids(), step, self._queue.turn
            )

    def attention(self, step: int) -> Attention:
        """Where the token at ``step`` looked (see :meth:`nbstream.Generation.attention`).

        Args:
            step: The step (0-based, into ``token_ids``).

        Returns:
            An :class:`~nbstream.attention.Attention`.

        Raises:
            AttentionUnavailable: A replay, a run on a server, or what
                :func:`~nbstream.attention.attention_at` refuses.
        """
        if isinstance(self._backend, ReplayBackend):
            raise AttentionUnavailable(
                "a replayed recording has no model: it keeps the tokens it recorded, not the "
                "attention; run the prompt on the model to see where its tokens looked"
            )
        if self._backend.is_server:
            raise AttentionUnavailable(
                f"a run on a model server ({type(self._backend).__name__}) has no attention "
                "weights: the server sends text and at most its top logprobs; run.attention "
                "needs a local transformers model (nbstream.stream(model, tokenizer, prompt))"
            )
        job = self._job
        if not isinstance(job, LocalJob):
            raise AttentionUnavailable(
                f"this run's backend ({type(self._backend).__name__}) does not run a "
                "transformers model in this process: run.attention needs its attention weights"
            )
        prompt = [int(token) for token in job.encoded["input_ids"][0].tolist()]
        model = job.backend.model
        # Beside the run, as the lens: the pass runs on a twin with its own modules. A rope
        # that moves rewrites its frequencies in place, in a buffer the twin shares.
        turn = self._queue.turn if rope_moves(running_module(model)) else None
        ids = prompt + self._token_ids()
        with job.steered():
            return attention_at(model, job.backend.tokenizer, ids, len(prompt), step, turn=turn)


class StepsView:
    """A run's model steps: the part of :class:`~nbstream.Generation` that looks at them.

    Each method reads a run that is still streaming as well as one that has ended, and
    hands the work to the run's :class:`RunSteps`; this class holds no state of its own.

    Example:
        >>> run = nbstream.stream(model, tokenizer, "Hi", alternatives=3)
        >>> text = run.wait()
        >>> run.trace[0].rank, run.lens(0).ranks[-1], run.attention(0).layers
    """

    _steps: RunSteps

    @property
    def trace(self) -> list[TokenTrace] | RemoteTrace | None:
        """One :class:`~nbstream.trace.TokenTrace` per generated token so far, or ``None``.

        ``None`` unless the run was started with ``alternatives=k`` (k > 0). A snapshot:
        readable while the run streams and after any end (a stopped run keeps the trace of
        the tokens it made); ``trace[i].id == token_ids[i]``. Each record has ``id``,
        ``text``, ``logprob`` (the model's own, from the raw logits), ``alternatives`` (the
        top k as ``(id, text, logprob)``, best first), ``cut`` and ``rank``: see
        :mod:`nbstream.trace`. On a server (:class:`~nbstream.Endpoint`) it is a
        :class:`~nbstream.trace.RemoteTrace` of what the server sent: no token ids, and
        ``run.trace.incomplete`` says why when it stops short of the text.

        Example::

            >>> run = nbstream.stream(model, tokenizer, "Hi", alternatives=3, temperature=0.8)
            >>> text = run.wait()
            >>> steps = [(step.text, round(step.prob, 2), step.rank) for step in run.trace]
        """
        return self._steps.trace()

    @input_checked
    def distribution(
        self,
        step: int,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        *,
        logits: Any = None,
    ) -> Distribution:
        """What the sampling sliders do at ``step``.

        The model's next-token distribution there, then after each logits processor the run applied,
        in transformers' order (penalties, bans, then temperature, top-k, top-p and any other filter
        of the model's generation config; ``d.stages`` names them; see
        :mod:`nbstream.distribution`).

        A value left ``None`` is the run's own (a greedy run's temperature is 0); pass
        ``top_k=0`` or ``top_p=1.0`` to turn a filter off. Computed exactly, with one
        forward pass on the calling thread, which waits its turn in the model's queue.
        Needs a local model.

        Args:
            step: The step (0-based, into ``token_ids``).
            temperature: The temperature to try; ``None`` for the run's.
            top_k: The top-k to try; ``None`` for the run's, 0 for off.
            top_p: The top-p to try; ``None`` for the run's, 1.0 for off.
            logits: ``run.step_logits(step)``, to ask about one step several times with
                one forward pass.

        Returns:
            A :class:`~nbstream.distribution.Distribution`.

        Example:
            >>> d = run.distribution(3, temperature=0.7, top_p=0.9)
            >>> d.kept("top_p"), float(d.probs["top_p"].sum())
            (4, 1.0)
            >>> print(d.describe())
            >>> logits = run.step_logits(3)      # one forward pass, then any number of views
            >>> [run.distribution(3, temperature=t, logits=logits).kept("top_p") for t in (0.5, 2)]
        """
        return self._steps.distribution(step, temperature, top_k, top_p, logits)

    @input_checked
    def step_logits(self, step: int) -> Any:
        """The model's raw next-token logits at ``step``, recomputed exactly.

        One forward pass of the prompt and the tokens before ``step``, waiting its turn in
        the model's queue as a run does. Give it to :meth:`distribution` (``logits=``) to
        try many settings on one step. Needs a local model.

        Args:
            step: The step (0-based, into ``token_ids``).

        Returns:
            A 1-D float tensor over the vocabulary, on the CPU.
        """
        return self._steps.step_logits(step)

    @input_checked
    def lens(self, step: int) -> Lens:
        """What each layer of the model would have said at ``step``: the logit lens.

        One forward pass on the calling thread, beside any run of the model (it never waits for
        the run, nor delays its Stop). See :mod:`nbstream.lens`.

        Args:
            step: The step (0-based, into ``token_ids``); the run may still be going.

        Returns:
            A :class:`~nbstream.lens.Lens`: ``probs``, ``ranks``, ``top(layer, n)``, ``describe()``.

        Raises:
            LensUnavailable: A run on a server, a replayed recording, an unknown model family, or
                a step the run does not have.

        Example:
            >>> lens = run.lens(3)
            >>> lens.probs[-1] == run.trace[3].prob  # the trace's own number
            >>> print(lens.describe())
        """
        return self._steps.lens(step)

    @input_checked
    def attribution(self, step: int) -> Attribution:
        """Each earlier token's share of the push toward the token at ``step``.

        Signed gradient · input on the input embeddings (one forward and one backward pass,
        beside any run of the model, as :meth:`lens`). See :mod:`nbstream.lens` for the method
        and its limits.

        Args:
            step: The step (0-based, into ``token_ids``).

        Returns:
            An :class:`~nbstream.lens.Attribution`: ``tokens``, ``shares`` (signed; sizes sum to 1).

        Raises:
            LensUnavailable: As :meth:`lens`.

        Example:
            >>> attr = run.attribution(3)
            >>> print(attr.describe())
        """
        return self._steps.attribution(step)

    @input_checked
    def attention(self, step: int) -> Attention:
        """Where the token at ``step`` looked: every layer's and head's attention weights.

        Exactly transformers' eager attention (``output_attentions=True``) from the position
        that chose the token, over every position before it, on the model's own weights (an
        SDPA model is not reloaded). One forward pass beside any run of the model, as
        :meth:`lens`. See :mod:`nbstream.attention`.

        Args:
            step: The step (0-based, into ``token_ids``); the run may still be going.

        Returns:
            An :class:`~nbstream.attention.Attention`: ``weights`` (layers × heads ×
            positions), ``layer(i)``, ``head(i, j)``, ``tokens``, ``top(layer, n)``,
            ``describe()``.

        Raises:
            AttentionUnavailable: A run on a server, a replayed recording, an unknown model
                family, an offloaded model, or a step the run does not have.

        Example:
            >>> seen = run.attention(3)
            >>> seen.weights.shape  # (layers, heads, positions)
            >>> print(seen.describe())
        """
        return self._steps.attention(step)
