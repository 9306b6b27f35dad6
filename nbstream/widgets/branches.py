"""Branches of an answer in a widget: "what if it had picked this token?" in the view.

A :class:`BranchingWidget` (the base of ``StreamWidget`` and ``ChatWidget``) keeps the
answers of one prompt: the original, then every branch made from it or from another
branch (:meth:`nbstream.Generation.branch`), in the order made. ``w.branches`` lists the
branches only; the answers are numbered from the original: 0 is the original answer, k is
``branches[k - 1]`` (``w.show(k)``, ``w.shown``, ``branch_shown``, a ``show_branch``
message's ``index``, an entry's ``parent``). One of them is *shown*: it
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
from typing import TYPE_CHECKING, Any

import traitlets

from ..generation import Generation
from .base import RunWidget, error_summary

if TYPE_CHECKING:
    from ..backends import Backend

__all__ = ["ENDPOINT_BRANCHES_IN_CODE", "MODEL_CANNOT_BRANCH", "STILL_RUNNING", "BranchingWidget"]

logger = logging.getLogger(__name__)

#: ``branch_unavailable`` for a model that cannot continue from given tokens.
MODEL_CANNOT_BRANCH = (
    "This model cannot continue an answer from a chosen token (a remote endpoint streams "
    "text only): branching needs a local transformers model."
)
#: ``branch_unavailable`` for a model on a server (nbstream.Endpoint): the view lists no
#: tokens of it, but ``w.branch`` does branch where the server can continue an answer.
ENDPOINT_BRANCHES_IN_CODE = (
    "This answer from a remote endpoint has no token probabilities, so its tokens have "
    "nothing to continue from. To branch on vLLM, SGLang, llama-server or llama-cpp-python "
    "(given the model's tokenizer=), generate with alternatives=5: the popover of a token "
    "then offers Continue, or call w.branch(step, w.run.trace[step].alternatives[1]): the "
    "answer continues from the server's second choice at that step, streams here, and the "
    "switcher shows it."
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
    #: answer it left: 0 is the original answer, k is ``branches[k - 1]``). Empty without
    #: branches.
    _branches: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)
    #: Kernel to page: the answer shown: 0 is the original answer, k is ``branches[k - 1]``.
    branch_shown = traitlets.Int(0).tag(sync=True)
    #: Kernel to page: why the popover offers no "Continue with this token" now ("" when
    #: it does): a model that cannot branch, or an answer still being generated.
    branch_unavailable = traitlets.Unicode("").tag(sync=True)

    def __init__(self, model: Any = None, tokenizer: Any = None, **settings: Any) -> None:
        super().__init__(model, tokenizer, **settings)
        from ..backends import resolve_backend

        backend = resolve_backend(self._model, self._tokenizer)
        self._model_branches = backend.supports_branching
        # A server (nbstream.Endpoint): the view branches a run of it that has a trace.
        self._endpoint: Backend | None = backend if backend.is_server else None
        self._cannot_branch = (
            ENDPOINT_BRANCHES_IN_CODE if backend.is_server else MODEL_CANNOT_BRANCH
        )
        if self.__dict__.get("_replaying") is not None:
            self._cannot_branch = backend.why_no_branch() or MODEL_CANNOT_BRANCH
        # Runs whose on_complete callbacks have run: showing an answer again is no new end.
        self._announced: weakref.WeakSet[Generation] = weakref.WeakSet()
        # The last branch a view asked for, and the run_id its request named: a second
        # click naming that run_id (a double click, two views) is the same request.
        self._view_branch: tuple[int, weakref.ref[Generation]] | None = None
        self.branch_unavailable = self._why_no_branch()

    # -- for subclasses -----------------------------------------------------------------------
    def _variant_runs(self) -> list[Generation]:
        """The current prompt's answers (lock held): the original, then its branches.

        Item 0 is the original answer and item k is ``branches[k - 1]``.
        """
        raise NotImplementedError

    def _select(self, run: Generation) -> None:
        """Make ``run`` (one of :meth:`_variant_runs`) the shown answer (lock held)."""

    # -- Python API ---------------------------------------------------------------------------
    @property
    def shown(self) -> int:
        """The answer the widget shows: 0 is the original answer, k is ``branches[k - 1]``.

        So ``w.show(len(w.branches))`` shows the newest branch.
        """
        with self._lock:
            return self._shown_index(self._variant_runs())

    def show(self, which: Any) -> Generation:
        """Show another answer of the current prompt; returns it.

        ``which``: 0 is the original answer, k is ``branches[k - 1]``, or one of those runs itself.

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
            if self._slot.busy():
                raise RuntimeError(
                    "a run is in progress; wait() for it or stop() it before switching answers"
                )
            run = runs[index]
            if run is not self._slot.run:
                self._select(run)
                self._replay(run)
            return run

    def _replay(self, run: Generation) -> None:
        """Make the ended ``run`` the current run again (lock held, no run in progress).

        As :meth:`_launch`, but the views get its end state at once rather than "running"
        first (it is not running: a badge, a Stop button or an announcement saying so
        would be wrong), and then its text as deltas, as any run's.
        """
        self._slot.run = run
        with self.hold_sync():
            self.input_error = ""
            self.error_info = error_summary(run.error)  # type: ignore[assignment]
            self.metrics = dict(run.metrics)
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
        return next((i for i, r in enumerate(runs) if r is self._slot.run), 0)

    def _why_no_branch(self) -> str:
        # Read from __dict__: asked while __init__ runs, before _endpoint is set.
        endpoint = self.__dict__.get("_endpoint")
        if endpoint is not None:
            return self._why_no_server_branch(endpoint)
        if not self._model_branches:
            return getattr(self, "_cannot_branch", MODEL_CANNOT_BRANCH)
        if self._slot.busy():
            return STILL_RUNNING
        return ""

    def _why_no_server_branch(self, endpoint: Backend) -> str:
        """``branch_unavailable`` on a server (lock held).

        "" once the shown answer has a trace and the server can continue an answer.
        """
        from ..trace import RemoteTrace

        run = self._slot.run
        if run is None or not isinstance(run.trace, RemoteTrace):
            return ENDPOINT_BRANCHES_IN_CODE
        # Asked already (the run's request): no new request under the widget's lock.
        why = endpoint.why_no_branch()
        if why is not None:
            return why
        if self._slot.busy():
            return STILL_RUNNING
        return ""

    def _server_alternative(self, step: Any, index: Any) -> Any:
        """The alternative ``index`` of the shown server answer's token ``step``, checked.

        A view's Continue (a server's tokens have no ids). Lock held.
        """
        from ..trace import RemoteTrace

        trace = self._slot.run.trace if self._slot.run is not None else None
        if not isinstance(trace, RemoteTrace):
            raise ValueError(
                "This answer has no token probabilities to continue from: generate with "
                "alternatives=5, then continue from a token's popover."
            )
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < len(trace):
            raise ValueError(f"There is no token {step!r:.40} in this answer's trace.")
        alternatives = trace[step].alternatives
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"alternative must be an index into the list, got {index!r:.80}")
        if not 0 <= index < len(alternatives):
            raise ValueError(
                f"Token {step + 1} has {len(alternatives)} alternatives; there is no "
                f"alternative {index}."
            )
        return alternatives[index]

    def _token_text(self, token_id: int | str) -> str:
        if isinstance(token_id, str):  # a branch on a server names its tokens by their text
            return token_id
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
            # A branch on a server names its tokens by their texts: no ids to send.
            ids = "prefix_text" not in info
            entries.append(
                {
                    "step": info.get("step"),
                    "parent_token": info.get("parent_token") if ids else None,
                    "parent_text": self._token_text(info.get("parent_token", -1)),
                    "token": info.get("token") if ids else None,
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
        """A ``branch`` or ``show_branch`` message: checked, then done.

        Ignored while a run is queued or running (PROTOCOL rule 7). A problem becomes
        ``input_error`` in the page's words (nothing raises into the comm handler).
        """
        try:
            if kind == "branch":
                self._report_input_error(lambda: self._branch_from_view(content))
            else:
                self._report_input_error(lambda: self._show_from_view(content))
        except Exception as exc:  # not an input error, but still never into the comm handler
            logger.exception("nbstream: the view's %s request failed", kind)
            self.input_error = f"That did not work: {type(exc).__name__}: {exc}"

    def _branch_from_view(self, content: dict[str, Any]) -> None:
        step: Any = content.get("step")
        token: Any = content.get("token")
        named: Any = content.get("run_id")
        with self._lock:
            # A run in progress first: the page offers no Continue then (branch_unavailable
            # says why), so this is a click that overtook the run's start, often the second
            # of two for the same answer; it is ignored, like a Run click (rule 7).
            if self._slot.busy():
                logger.debug("branch ignored: a run is already queued or running")
                return
            if named != self.run_id or self._slot.run is None:
                if self._view_branch is not None:
                    asked, made = self._view_branch
                    if asked == named and made() is self._slot.run is not None:
                        # The branch that request made is shown: this is its twin (a double
                        # click, two views), whose answer was replaced by it, not an error.
                        logger.debug("branch ignored: its answer was branched already")
                        return
                raise ValueError(
                    "That answer is no longer the one shown, so nothing was branched: open "
                    "the popover on the answer shown now."
                )
            if self._endpoint is not None and "alternative" in content:
                # A server's tokens have no ids: the view names the alternative's place.
                token = self._server_alternative(step, content.get("alternative"))
            elif isinstance(token, bool) or not isinstance(token, int):
                raise TypeError(f"token must be a token id, got {token!r:.80}")
            run = self.branch(step, token)
            self._view_branch = (named, weakref.ref(run))

    def _show_from_view(self, content: dict[str, Any]) -> None:
        index: Any = content.get("index")
        with self._lock:
            if self._slot.busy():  # the page disables the switcher then: a click that overtook
                logger.debug("show_branch ignored: a run is already queued or running")
                return
            count = len(self._variant_runs())
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
                raise ValueError(self._no_such_answer(index, count))
            self.show(index)

    @staticmethod
    def _no_such_answer(index: Any, count: int) -> str:
        """Why a switcher request names no answer, in the switcher's own words."""
        if count == 0:
            return "Nothing was switched: there is no answer to show yet."
        branches = {1: "", 2: " and Branch 1"}.get(count, f" and Branch 1 to {count - 1}")
        names = f"the Original{branches}"
        return (
            f"Nothing was switched: there is no answer {index!r:.40} here; this prompt has "
            f"{names}. If the switcher looks out of date, run the cell again."
        )

    def branch(self, step: int, token: Any, **settings: Any) -> Generation:
        """Continue the answer shown as if it had taken ``token`` at ``step``; returns its run.

        See :meth:`nbstream.Generation.branch`; ``settings`` override its own. The branch streams
        into the widget, becomes the answer shown, and is added to ``branches`` (so
        ``show(len(branches))`` shows it again later).

        Raises ``RuntimeError`` while a run is queued or running, ``ValueError`` /
        ``TypeError`` for a bad step or token (nothing starts). Subclasses say which answer
        the branch continues (a chat: its last one).
        """
        raise NotImplementedError
