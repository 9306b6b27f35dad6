"""``StreamWidget``: a notebook widget that streams a model's answer, with state and Stop.

The kernel is the source of truth. Synced traits carry only what is small and changes
rarely (state, metrics, error, run id); the text travels as custom messages: deltas with an
offset, at most ``FRAME_RATE`` per second, and a full ``reset`` when a view asks (a view
created mid-stream, a reloaded page, or a view that detected a gap). No synced trait
holding the whole text is ever updated per frame. That machinery is shared with
:class:`~nbstream.ChatWidget` (see ``nbstream/widgets/base.py``). PROTOCOL.md defines every trait
and message.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import traitlets

from .._errors import input_checked
from ..generation import Generation, stream
from ..recording import Recording
from .base import error_summary
from .branches import BranchingWidget
from .display import fallback_bundle
from .feed import FRAME_RATE, VIEW_THREAD_PREFIX
from .snapshot import run_snapshot

logger = logging.getLogger(__name__)

_STATIC = Path(__file__).parent.parent / "static"

__all__ = ["FRAME_RATE", "VIEW_THREAD_PREFIX", "StreamWidget"]


class StreamWidget(BranchingWidget):
    """Stream a model's answer into the notebook, with its state, Stop, and metrics.

    Runs of widgets sharing a model queue, never interleave.

    Args:
        model: ``None`` for the embedded default model (shared by every widget in the
            process); a loaded causal LM; a hub id or folder, loaded with
            :func:`nbstream.load_model`; or an :class:`~nbstream.Endpoint`.
        tokenizer: The loaded model's tokenizer (only with a loaded model).
        **settings: The widget's settings (the names of :func:`nbstream.stream`), and the
            teaching views' toggles (``show_tokens``, ``show_probabilities``,
            ``show_alternatives``).

    Raises:
        ModelNotFoundError: A model name that is not there.
        ValueError: A bad setting, before the widget exists.

    Example:
        >>> import nbstream
        >>> w = nbstream.StreamWidget(max_new_tokens=64)
        >>> w                                   # display it
        >>> run = w.generate("Name two colors.")
        >>> w.wait()                            # the text, if it completed
        >>> w.result                            # None unless the last run completed

    Stop acts while a cell blocks the kernel (``w.wait()``, even in the cell that started
    the run) where the front end sends widget messages on a kernel subshell (JupyterLab and
    Notebook 7 with ipykernel 7); elsewhere the click waits for the cell, and the kernel's
    interrupt button stops the run.

    Branches: :meth:`branch` (or "Continue with this token" in the alternatives popover)
    continues the answer from another token; the widget keeps every branch of the prompt
    (:attr:`branches`) and shows one (:meth:`show`, :attr:`shown`, the switcher above the
    output: 0 is the original answer, k is ``branches[k - 1]``). ``run``, ``result``,
    ``record`` and the saved output are those of the answer shown; a new :meth:`generate`
    forgets the branches.
    """

    _esm = _STATIC / "stream.js"
    _css = _STATIC / "stream.css"

    # -- public synced state (status, metrics, error_info, input_error, run_id: RunWidget) --
    #: The prompt box (two-way).
    prompt = traitlets.Unicode("").tag(sync=True)
    #: A short title shown at the start of the status bar (e.g. a compare column's settings).
    label = traitlets.Unicode("").tag(sync=True)
    #: Whether the view shows the prompt box (Run and Stop stay either way: Run uses
    #: ``prompt``, as in a compare column whose prompt is shared).
    show_prompt = traitlets.Bool(True).tag(sync=True)
    #: In a compare column (set by CompareWidget): ``{"step", "words"}``, the first step
    #: where this column's tokens differ from the other columns' and that said in words;
    #: None when there is nothing to mark.
    compare_mark = traitlets.Dict(default_value=None, allow_none=True).tag(sync=True)
    #: The last ended run as a saved notebook shows it without a kernel (widgets/snapshot.py):
    #: set when a run ends, None while one goes. Sent once per run, never per frame.
    snapshot = traitlets.Dict(default_value=None, allow_none=True).tag(sync=True)

    def __init__(self, model: Any = None, tokenizer: Any = None, **settings: Any) -> None:
        # The prompt's answers: the original, then its branches in the order made.
        self._variants: list[Generation] = []
        super().__init__(model, tokenizer, **settings)

    # -- Python API ---------------------------------------------------------------------------
    @input_checked
    def generate(self, prompt: Any = None, **settings: Any) -> Generation:
        """Start a run and return it at once; the widget streams it.

        Args:
            prompt: The prompt; ``None`` for the prompt box's text.
            **settings: Override the widget's settings (the panel's) for this run; the
                names of :func:`nbstream.stream`.

        Returns:
            The run, a :class:`~nbstream.Generation`.

        Raises:
            ValueError: A bad prompt or setting (also an invalid panel value,
                ``settings_errors``), before anything starts.
            RuntimeError: This widget already has a run queued or running.

        Example:
            >>> run = w.generate("Name two colors.", max_new_tokens=20)
            >>> run.wait()  # the text, once complete
        """
        if prompt is None:
            prompt = self.prompt
        prompt = self._recorded_prompt(prompt)
        merged = self._run_settings(settings)
        # A string prompt goes into the box, with the run's first state.
        box = {"prompt": prompt} if isinstance(prompt, str) else {}

        def make_run() -> Generation:  # lock held, no run in progress
            run = stream(self._model, self._tokenizer, prompt, **merged)
            self._variants = [run]  # a new answer: the branches were of the one before
            return run

        return self._launch(make_run, **box)

    @input_checked
    def branch(self, step: int, token: Any, **settings: Any) -> Generation:
        """Continue the answer shown as if it had taken ``token`` at ``step``.

        The branch streams into the widget and is shown; every branch since the last
        :meth:`generate` is kept in :attr:`branches` (a branch of a branch too: its
        ``branch_info["parent"]`` says which run it left). See
        :meth:`nbstream.Generation.branch`.

        Args:
            step: The step (0-based token index) where the answer takes another token.
            token: A token id, or one of ``run.trace[step].alternatives``.
            **settings: Override the run's own settings for the branch.

        Returns:
            The branch, a :class:`~nbstream.Generation`.

        Raises:
            RuntimeError: A run is in progress, or there is no run yet.

        Example:
            >>> w.generate("The sky is", alternatives=5).wait()
            >>> w.branch(0, w.run.trace[0].alternatives[1]).wait()
        """

        def make_run() -> Generation:  # lock held, no run in progress
            parent = self._slot.run
            if parent is None:
                raise RuntimeError("there is no run to branch from yet: generate() one first")
            run = parent.branch(step, token, **settings)
            self._variants.append(run)
            return run

        return self._launch(make_run)

    @property
    def branches(self) -> list[Generation]:
        """Every branch made (with :meth:`branch`) since the widget's last :meth:`generate`.

        In the order made; each one's ``branch_info`` says where it left its parent (the answer, or
        an earlier branch). The original is not one: :meth:`show` and :attr:`shown` count from it,
        so 0 is the original answer and k is ``branches[k - 1]``.
        """
        with self._lock:
            return list(self._variants[1:])

    def _variant_runs(self) -> list[Generation]:
        return self._variants

    # -- a recording's prompt ------------------------------------------------------------------
    def _show_replay(self, prompt: Any) -> None:
        # A prompt of messages (a system message, then the user's) shows as what was asked.
        super()._show_replay(
            _asked_text(prompt) if isinstance(self._replaying, Recording) else prompt
        )

    def _recorded_prompt(self, prompt: Any) -> Any:
        """The recorded prompt when ``prompt`` is the box's words for it (or an empty box).

        The box holds a string; a recording of messages is asked by its last user message,
        so Run and ``generate()`` replay it as they replay a recording of a string.
        """
        replaying = self._replaying  # a chat's recording answers only through ChatWidget
        recorded = replaying.prompt if isinstance(replaying, Recording) else None
        if recorded is None or not isinstance(prompt, str) or isinstance(recorded, str):
            return prompt
        if prompt.strip() in ("", _asked_text(recorded).strip()):
            return recorded
        return prompt

    # -- the saved notebook's copy of the run --------------------------------------------------
    def _on_start(self, run: Generation, run_id: int) -> None:
        super()._on_start(run, run_id)
        self.snapshot = None  # type: ignore[assignment]  # the views must not show the last run's

    def _run_ended(self, run: Generation, run_id: int) -> None:
        super()._run_ended(run, run_id)
        # After the end state and the saved output, in a message of its own: making it takes
        # a few ms, and a cell that ends at run.wait() must not lose the end state for it.
        token_view = self._token_options()
        snapshot = run_snapshot(
            run,
            run_id,
            self._tokenizer,
            tokens=token_view is not None,
            alternatives=bool(token_view),
        )
        self._set_if_current(run_id, snapshot=snapshot)

    # -- from the views -----------------------------------------------------------------------
    def _on_view_message(self, kind: Any, content: dict[str, Any]) -> None:
        if kind == "run":
            self._run_from_view(content.get("prompt"))
        elif kind in ("branch", "show_branch"):
            self._branch_message(kind, content)

    def _run_from_view(self, prompt: Any) -> None:
        if self._slot.busy():
            logger.debug("Run ignored: a run is already queued or running")
            return
        if isinstance(prompt, str):
            self.prompt = prompt
        if not self.prompt.strip() and self._recorded_prompt("") == "":
            # The API's words ("pass some text") are for code; here the user typed nothing.
            self.input_error = "Type a prompt first, then Run."
            return
        self._report_input_error(lambda: self.generate(self.prompt))

    # -- display ------------------------------------------------------------------------------
    def _fallback(self) -> tuple[str, dict[str, str]]:
        """(the state it shows, the text/plain and text/markdown fallbacks)."""
        run = self._slot.run
        if run is None:
            return "idle", fallback_bundle("idle", "")
        # Read once: the state must be the one the text was read under (the text of an
        # ended run is final, so a state read first never labels unfinished text complete).
        status = run.status
        text = run.partial_text
        bundle = fallback_bundle(
            status, text, run.metrics, error_summary(run.error), thinking=run.thinking
        )
        return status, bundle

    def __repr__(self) -> str:
        # The default repr serializes every trait; this one stays cheap.
        replay = " replay" if self._replaying is not None else ""
        return f"<StreamWidget{replay} status={self.status!r} run_id={self.run_id}>"


def _asked_text(prompt: Any) -> Any:
    """What a prompt box shows of ``prompt``: a string as it is, messages by the last user one."""
    if not isinstance(prompt, list):
        return prompt
    for message in reversed(prompt):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else ""
    return ""
