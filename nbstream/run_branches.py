"""Branching: a run that keeps another's first tokens, takes another token there, goes on.

``run.branch(step, token)`` (:class:`BranchesView`, a part of :class:`~nbstream.Generation`)
asks :func:`branch_job` for the new run's job, settings and place; the new run keeps a
:class:`BranchOrigin` (its ``branch_info``, and the ``branch`` of its record).
:func:`rerun_branch_job` starts a branch's record again (``nbstream.rerun``). The run itself
is made by :mod:`nbstream.generation`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ._errors import input_checked
from .backends.base import Backend, Job
from .run_steps import check_step
from .settings import validate_settings

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["BranchOrigin", "BranchesView", "branch_job", "rerun_branch_job"]


class BranchOrigin:
    """Where a branch left its parent: the parent run (or its record), the step, the tokens.

    Args:
        info: ``step``, ``token``, ``parent_token`` (and ``prefix_text`` on a server).
        parent: The run branched from (``None`` for a rerun of a branch's record).
        parent_record: A rerun branch's parent, as its record has it.

    Example:
        >>> origin = BranchOrigin({"step": 0, "token": 7, "parent_token": 9}, parent=run)
        >>> origin.info(job)["step"]
        0
    """

    def __init__(self, info: dict[str, Any], parent: Any = None, parent_record: Any = None) -> None:
        self._info = info
        self._parent = parent
        self._parent_record = parent_record

    def info(self, job: Job) -> dict[str, Any]:
        """What ``run.branch_info`` says: ``parent``, ``step``, ``token``, ... ``prefix_ids``.

        Args:
            job: The branch's job (its forced prefix).

        Returns:
            A new dict.
        """
        if "prefix_text" in self._info:  # a branch on a server: text, no token ids
            return {"parent": self._parent, **self._info}
        prefix = list(job.prefix_ids)
        return {"parent": self._parent, **self._info, "prefix_ids": prefix}

    def record(self, job: Job) -> dict[str, Any]:
        """The record's ``branch``: :meth:`info`, with the parent's record for the parent.

        Args:
            job: The branch's job.

        Returns:
            A JSON-serializable dict.
        """
        info = self.info(job)
        parent = info.pop("parent")
        return {**info, "parent": parent.record if parent is not None else self._parent_record}


def _branch_settings(parent: Any, job: Job, settings: dict[str, Any]) -> dict[str, Any]:
    """A branch's settings: the parent's as asked, then ``settings`` over them."""
    asked = validate_settings(settings)
    # What the parent was given, not what it resolved from them and the model's defaults
    # (do_sample, max_new_tokens): a branch's own settings mean what they mean on a fresh run.
    given = dict(job.asked if job.asked is not None else parent.settings)
    clean = {**given, **asked}
    if "seed" not in asked and parent.seed is not None:
        clean["seed"] = parent.seed  # the same dice: a sampled branch is reproducible too
    return clean


def branch_job(
    parent: Any, backend: Backend, job: Job, step: int, token: Any, settings: dict[str, Any]
) -> tuple[Job, dict[str, Any], BranchOrigin]:
    """The job, settings and origin of ``parent.branch(step, token, **settings)``.

    Args:
        parent: The run branched from (a :class:`~nbstream.Generation`).
        backend: Its backend.
        job: Its job.
        step: Where the answer takes another token.
        token: A token id, an alternative of the trace (a text too, on a server).
        settings: Overrides of the parent's settings.

    Returns:
        The branch's job, its settings, and where it left the parent.

    Raises:
        RuntimeError: The parent has not ended.
        ValueError: The backend cannot branch (it says why), or a bad step or setting.
        TypeError: ``token`` is not a token.

    Example:
        >>> job, settings, origin = branch_job(run, backend, run_job, 0, 42, {})
    """
    if not backend.is_server:
        why = backend.why_no_branch()
        if why is not None:
            raise ValueError(why)
    if not parent.done:
        raise RuntimeError("this run has not ended: wait() for it, or stop() it, before branching")
    if backend.is_server:
        # A server (nbstream.Endpoint): the answer so far goes as text for it to continue.
        clean = _branch_settings(parent, job, settings)
        branch, info = backend.branch_job(parent, step, token, clean)
        return branch, clean, BranchOrigin(info, parent=parent)
    ids = parent.token_ids
    step = check_step(step, len(ids))
    token_id = getattr(token, "id", token)
    if isinstance(token_id, bool) or not isinstance(token_id, int):
        raise TypeError(
            f"token must be a token id or one of run.trace[{step}].alternatives, got {token!r:.80}"
        )
    clean = _branch_settings(parent, job, settings)
    branch = backend.prepare(parent.prompt, clean, prefix_ids=[*ids[:step], token_id])
    info = {"step": step, "token": token_id, "parent_token": ids[step]}
    return branch, clean, BranchOrigin(info, parent=parent)


def _origin_of(branch: Mapping[str, Any], keys: tuple[str, ...]) -> BranchOrigin:
    """A rerun of a branch is that branch again.

    Its record says so (``branch``, with the parent's record), so that a rerun of the rerun starts
    from the same answer so far.
    """
    return BranchOrigin({key: branch.get(key) for key in keys}, parent_record=branch.get("parent"))


def rerun_branch_job(
    backend: Backend, branch: Any, prompt: Any, settings: dict[str, Any]
) -> tuple[Job, BranchOrigin]:
    """The job of a rerun of a branch's record: the same answer so far, then generated on.

    Args:
        backend: What the rerun runs on.
        branch: The record's ``branch``.
        prompt: The record's prompt.
        settings: The record's settings.

    Returns:
        The job, and the rerun's origin (the same branch, its parent's record).

    Raises:
        ValueError: ``branch`` is not a branch's, or the backend cannot run it.

    Example:
        >>> job, origin = rerun_branch_job(backend, record["branch"], prompt, settings)
    """
    if isinstance(branch, Mapping) and isinstance(branch.get("prefix_text"), str):
        # A branch on a server: the same answer so far, sent for it to continue again.
        if not backend.is_server:
            raise ValueError("record is of a branch made on a server: rerun it on an Endpoint")
        step = branch.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError("record['branch'] must hold the branch's 'step' (an int >= 0)")
        job = backend.prepare(
            prompt, settings, assistant_prefix=branch["prefix_text"], prefix_steps=step + 1
        )
        return job, _origin_of(branch, ("step", "token", "parent_token", "prefix_text"))
    # A branch of a local model: the same forced prefix again.
    if not isinstance(branch, Mapping) or not isinstance(branch.get("prefix_ids"), list):
        raise ValueError("record['branch'] must hold the branch's 'prefix_ids' (a list)")
    if not backend.supports_branching:
        raise ValueError("record is of a branch, which needs a local transformers model")
    job = backend.prepare(prompt, settings, prefix_ids=branch["prefix_ids"])
    return job, _origin_of(branch, ("step", "token", "parent_token"))


class BranchesView:
    """What if: a run's branches, the part of :class:`~nbstream.Generation` that makes them.

    The run holds what a branch is made from (its backend, job, and where it began itself);
    this class holds no state of its own.

    Example:
        >>> text = run.wait()
        >>> branch = run.branch(0, run.trace[0].alternatives[1])
        >>> branch.branch_info["step"]
        0
    """

    _backend: Backend
    _job: Job
    _origin: BranchOrigin | None

    @input_checked
    def branch(self, step: int, token: Any, **settings: Any) -> Self:
        """A new run that keeps this run's first ``step`` tokens, takes ``token``, goes on.

        Returned at once, like :func:`~nbstream.stream`, with this run's settings (its seed too)
        unless overridden. Its ``token_ids`` start with those ``step + 1`` tokens (they
        count toward ``max_new_tokens``); its record names this run's as its parent, so
        :func:`~nbstream.rerun` repeats it. On a server that continues an answer (see
        :mod:`nbstream.backends.servers`), the answer so far goes as text
        (``record["branch"]["prefix_text"]``).

        Args:
            step: Where the answer takes another token (0-based, into ``token_ids``).
            token: A token id, or one of ``run.trace[step].alternatives`` (a text too, on
                a server).
            **settings: Override this run's settings for the branch.

        Returns:
            The branch: a new :class:`~nbstream.Generation`, started.

        Raises:
            RuntimeError: This run has not ended (wait for it, or stop it, first).
            ValueError: A backend that cannot branch says why, before anything is sent.

        Example:
            >>> run = nbstream.stream(model, tokenizer, "Name a color.", alternatives=5)
            >>> text = run.wait()
            >>> other = run.trace[0].alternatives[1]       # the model's second choice
            >>> branch = run.branch(0, other)
            >>> branch.wait(); branch.token_ids[0] == other.id
            True
        """
        job, clean, origin = branch_job(self, self._backend, self._job, step, token, settings)
        # The run's own class makes the branch (this module is below nbstream.generation).
        start: Callable[..., Self] = type(self)
        return start(self._backend, job, clean, branch_of=origin)

    @property
    def branch_info(self) -> dict[str, Any] | None:
        """Where a branch left its parent; ``None`` for a run not made by :meth:`branch`.

        For a run made by :meth:`branch`: ``{"parent": the run, "step", "token", "parent_token",
        "prefix_ids"}``.
        """
        return self._origin.info(self._job) if self._origin is not None else None
