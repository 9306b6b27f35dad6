"""Branches of an answer in a widget: "what if it had picked this token?" in the view.

A :class:`BranchingWidget` (the base of ``StreamWidget`` and ``ChatWidget``) keeps the
answers of one prompt: the original, then every branch made from it or from another
branch (:meth:`nbstream.Generation.branch`), in the order made. One of them is *shown*: it
is the widget's current run (``w.run``, ``w.result``, the saved output, the chat's history
follow it). Switching shows an ended answer again through the usual run feed, under a new
``run_id``, so a view redraws it with the same code that streamed it.

The kernel is the source of truth: ``_branches`` (where each branch left its parent),
``branch_shown`` and ``branch_unavailable`` go to the page; the page asks with ``branch``
and ``show_branch`` messages (PROTOCOL.md, "Branches").
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

import traitlets

from ._widget_base import RunWidget, error_summary
from .generation import Generation

logger = logging.getLogger(__name__)

#: ``branch_unavailable`` for a model that cannot continue from given tokens.
MODEL_CANNOT_BRANCH = (
    "This model cannot continue an answer from a chosen token (a remote endpoint streams "
    "text only): branching needs a local transformers model."
)
#: ``branch_unavailable`` while the shown answer is still queued or generated.
STILL_RUNNING = (
    "The answer is still being generated: wait for it to end (or stop it), then continue "
    "from another token."
)


class BranchingWidget(RunWidget):
    """A RunWidget that keeps the branches of its answer and shows one of them.

    Subclasses say which answers are the current prompt's (:meth:`_variant_runs`: the
    original first) and what showing one means for them (:meth:`_select`).
    """

    #: Kernel to page: every branch of the current prompt's answer, in the order made:
    #: ``{step, parent_token, parent_text, token, text, parent, status}`` (``parent``: the
    #: index of the answer it left, 0 the original, k ``branches[k - 1]``). Empty without
    #: branches.
    _branches: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)
    #: Kernel to page: which answer is shown: 0 the original, k ``branches[k - 1]``.
    branch_shown = traitlets.Int(0).tag(sync=True)
    #: Kernel to page: why the popover offers no "Continue with this token" now ("" when
    #: it does): a model that cannot branch, or an answer still being generated.
    branch_unavailable = traitlets.Unicode("").tag(sync=True)

    def __init__(self, model: Any = None, tokenizer: Any = None, **settings: Any) -> None:
        super().__init__(model, tokenizer, **settings)
        from .backends import resolve_backend

        backend = resolve_backend(self._model, self._tokenizer)
        self._model_branches = bool(getattr(backend, "supports_branching", False))
        # Runs whose on_complete callbacks have run: showing an answer again is no new end.
        self._announced: weakref.WeakSet[Generation] = weakref.WeakSet()
        self.branch_unavailable = self._why_no_branch()

    # -- for subclasses -----------------------------------------------------------------------
    def _variant_runs(self) -> list[Generation]:
        """The current prompt's answers: the original, then its branches (lock held)."""
        raise NotImplementedError

    def _select(self, run: Generation) -> None:
        """Make ``run`` (one of :meth:`_variant_runs`) the shown answer (lock held)."""

    # -- Python API ---------------------------------------------------------------------------
    @property
    def shown(self) -> int:
        """Which answer the widget shows: 0 the original, k ``branches[k - 1]``."""
        with self._lock:
            return self._shown_index(self._variant_runs())

    def show(self, which: Any) -> Generation:
        """Show another answer of the current prompt: ``0`` the original, ``k`` the branch
        ``branches[k - 1]``, or one of those runs; returns it.

        What is shown is the widget's current run: ``run``, ``result``, ``record``, the
        saved output (and a chat's ``history``) follow it, and :meth:`branch` continues it.
        Raises ``RuntimeError`` while a run is in progress.
        """
        with self._lock:
            runs = self._variant_runs()
            if isinstance(which, Generation):
                index = next((i for i, r in enumerate(runs) if r is which), None)
                if index is None:
                    raise ValueError(
                        "that run is not an answer of this widget's current prompt; pass "
                        "0 (the original), k (branches[k - 1]) or one of those runs"
                    )
            elif isinstance(which, bool) or not isinstance(which, int):
                raise TypeError(
                    f"show() takes 0 (the original answer), k (branches[k - 1]) or one of "
                    f"those runs, got {which!r:.80}"
                )
            else:
                index = which
            if not runs:
                raise ValueError("there is no answer to show yet: generate() one first")
            if not 0 <= index < len(runs):
                rest = f", 1 to {len(runs) - 1} the branches" if len(runs) > 1 else " (no branches)"
                raise ValueError(f"there is no answer {index}: 0 is the original{rest}")
            if self._busy():
                raise RuntimeError(
                    "a run is in progress; wait() for it or stop() it before switching answers"
                )
            run = runs[index]
            if run is not self._run:
                self._select(run)
                self._replay(run)
            return run

    def _replay(self, run: Generation) -> None:
        """Make the ended ``run`` the current run again (lock held, no run in progress).

        As :meth:`_launch`, but the views get its end state at once rather than "running"
        first (it is not running: a badge, a Stop button or an announcement saying so
        would be wrong), and then its text as deltas, as any run's.
        """
        self._run = run
        with self.hold_sync():
            self.input_error = ""
            self.error_info = error_summary(run.error)  # type: ignore[assignment]
            self.metrics = run.metrics
            self.prompt_text = run.prompt_text
            self.prompt_tokens = run.prompt_tokens
            self.run_id += 1
            self.status = run.status
            self._on_start(run, self.run_id)
        run_id = self.run_id
        try:
            self._feed.follow(run, run_id, run.status)
        except BaseException:
            # No view thread (the process is out of threads): the end state is known.
            self._run_ended(run, run_id)
            raise

    # -- what the views get ---------------------------------------------------------------
    def _shown_index(self, runs: list[Generation]) -> int:
        return next((i for i, r in enumerate(runs) if r is self._run), 0)

    def _why_no_branch(self) -> str:
        if not self._model_branches:
            return MODEL_CANNOT_BRANCH
        if self._busy():
            return STILL_RUNNING
        return ""

    def _token_text(self, token_id: int) -> str:
        try:
            return str(self._tokenizer.decode([token_id]))
        except Exception:  # a name for the switcher only: never fail the run's end for it
            logger.debug("decoding token %s failed", token_id, exc_info=True)
            return f"<{token_id}>"

    def _branch_traits(self) -> dict[str, Any]:
        """The branch traits for the views now (lock held)."""
        runs = self._variant_runs()
        entries = []
        for run in runs[1:]:
            info = run.branch_info or {}
            parent = info.get("parent")
            entries.append(
                {
                    "step": info.get("step"),
                    "parent_token": info.get("parent_token"),
                    "parent_text": self._token_text(info.get("parent_token", -1)),
                    "token": info.get("token"),
                    "text": self._token_text(info.get("token", -1)),
                    "parent": next((i for i, r in enumerate(runs) if r is parent), 0),
                    "status": run.status,
                }
            )
        return {
            "_branches": entries,
            "branch_shown": self._shown_index(runs),
            "branch_unavailable": self._why_no_branch(),
        }

    def _publish_branches(self) -> None:
        with self._lock, self.hold_sync():
            for name, value in self._branch_traits().items():
                setattr(self, name, value)

    def _on_start(self, run: Generation, run_id: int) -> None:
        super()._on_start(run, run_id)
        for name, value in self._branch_traits().items():
            setattr(self, name, value)

    def _end_traits(self, run: Generation) -> dict[str, Any]:
        return {**super()._end_traits(run), **self._branch_traits()}

    def _after_run(self, run: Generation) -> None:
        # An answer shown again ends again in the feed; its on_complete ran the first time.
        if run in self._announced:
            return
        self._announced.add(run)
        super()._after_run(run)

    # -- from the views ---------------------------------------------------------------------
    def _branch_message(self, kind: str, content: dict[str, Any]) -> None:
        """A ``branch`` or ``show_branch`` message: checked, then done; a problem becomes
        ``input_error`` (nothing raises into the comm handler)."""
        try:
            if kind == "branch":
                self._report_input_error(lambda: self._branch_from_view(content))
            else:
                self._report_input_error(lambda: self.show(content.get("index")))
        except Exception as exc:  # not an input error, but still never into the comm handler
            logger.exception("nbstream: the view's %s request failed", kind)
            self.input_error = f"That did not work: {type(exc).__name__}: {exc}"

    def _branch_from_view(self, content: dict[str, Any]) -> None:
        step: Any = content.get("step")
        token: Any = content.get("token")
        with self._lock:
            if content.get("run_id") != self.run_id or self._run is None:
                raise ValueError(
                    "That answer is no longer the one shown, so nothing was branched: open "
                    "the popover on the answer shown now."
                )
            if self._busy():
                raise RuntimeError(STILL_RUNNING)
            if isinstance(token, bool) or not isinstance(token, int):
                raise TypeError(f"token must be a token id, got {token!r:.80}")
            self.branch(step, token)

    def branch(self, step: int, token: Any, **settings: Any) -> Generation:
        raise NotImplementedError
