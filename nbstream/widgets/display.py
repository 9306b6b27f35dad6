"""Static fallbacks for a widget's output: what nbconvert, GitHub, nbviewer and terminals show.

A live front end renders the widget view; everything else reads the ``text/plain`` and
``text/markdown`` entries saved next to it. They carry the state in their first line, so a
stopped or failed run's text is never mistaken for a finished answer.
"""

from __future__ import annotations

import html
import logging
import math
import threading
import uuid
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from ..generation import COMPLETE, TERMINAL, Generation

__all__ = [
    "LIVE_TAIL",
    "RECORDED",
    "REPLAY_NOTE",
    "RUN_VIEW_THREAD",
    "TEXT_COPY",
    "WIDGET_VIEW",
    "Bundle",
    "FallbackDisplay",
    "ShownMetrics",
    "chat_fallback_bundle",
    "compare_fallback_bundle",
    "fallback_bundle",
    "in_kernel",
    "publishing_parent",
    "register_run_display",
    "replay_bundle",
    "run_html",
    "show",
    "show_run",
    "show_with_fallback",
    "shown_by_widget",
    "states_summary",
    "text_copy",
]

logger = logging.getLogger(__name__)

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

# What a saved output says about a run that had not ended when the output was last written.
_UNFINISHED = "not finished when this output was saved; the text is incomplete"
#: What marks a complete answer cut off by max_new_tokens (finish_reason "length"): a normal
#: end, but not the model's own. The views say the same (js/src/status.js, CUT).
CUT = "stopped at max_new_tokens"


def _figures(metrics: Mapping[str, Any]) -> list[str]:
    parts = []
    tokens = metrics.get("tokens")
    chunks = metrics.get("text_chunks")
    if tokens is not None:
        parts.append(f"{tokens} token" + ("" if tokens == 1 else "s"))
    elif chunks is not None:  # a server that sent no usage: pieces of text, not tokens
        parts.append(f"{chunks} chunk" + ("" if chunks == 1 else "s") + " (no token count)")
    elapsed = metrics.get("elapsed_s")
    if elapsed is not None:
        parts.append(f"{elapsed:.1f} s")
    return parts


def _state(
    status: str, error_info: dict[str, str] | None, finish_reason: Any = None
) -> tuple[str, str | None]:
    """The state words and the note that marks the text partial or cut.

    Returns (state words, note), the note None when the text is the whole answer.
    """
    if status == COMPLETE:
        return "complete", CUT if finish_reason == "length" else None
    if status == "failed":
        detail = ""
        if error_info:
            # One line: the state line is the first line of the output.
            message = " ".join(error_info.get("message", "").split())
            detail = f" ({error_info.get('type', 'error')}: {message})"
        return f"failed{detail}", "partial answer: the run failed"
    if status == "cancelled":
        return "cancelled", "partial answer: the run was stopped"
    if status in TERMINAL:  # a state added later: never claim an answer for it
        return status, "partial answer"
    return status, _UNFINISHED


#: How much of a reasoning model's thinking a plain-text fallback shows (the Markdown one
#: folds all of it).
THINKING_PREVIEW = 200


def _thinking_parts(thinking: str, metrics: Mapping[str, Any]) -> tuple[str, str]:
    """(plain, markdown) for a run's thinking.

    Summarised in plain text, folded in Markdown (a ``<details>`` block: closed on GitHub, nbviewer
    and in exported HTML).
    """
    tokens = metrics.get("thinking_tokens")
    count = f", {tokens} token" + ("" if tokens == 1 else "s") if tokens is not None else ""
    flat = " ".join(thinking.split())
    preview = flat[:THINKING_PREVIEW] + ("…" if len(flat) > THINKING_PREVIEW else "")
    plain = f"[Thinking{count}, not part of the answer: {preview}]"
    markdown = (
        f"<details><summary>Thinking{count} (not part of the answer)</summary>\n\n"
        f"{thinking}\n\n</details>"
    )
    return plain, markdown


def fallback_bundle(
    status: str,
    text: str,
    metrics: Mapping[str, Any] | None = None,
    error_info: dict[str, str] | None = None,
    thinking: str | None = None,
) -> dict[str, str]:
    """``{"text/plain": ..., "text/markdown": ...}`` for a widget in ``status`` showing ``text``.

    ``status`` is ``"idle"`` for a widget that never ran; otherwise a run's state.
    ``thinking`` (a reasoning model's) comes before the answer, summarised or folded.
    """
    if status == "idle":
        line = "nbstream · idle · no run yet"
        return {"text/plain": line, "text/markdown": "**nbstream** · idle · *no run yet*"}
    state, note = _state(status, error_info, (metrics or {}).get("finish_reason"))
    figures = _figures(metrics or {})
    plain_head = " · ".join(["nbstream", state, *([note] if note else []), *figures])
    md_head = " · ".join(
        ["**nbstream**", f"**{state}**", *([f"*{note}*"] if note else []), *figures]
    )
    if thinking:
        plain_thinking, md_thinking = _thinking_parts(thinking, metrics or {})
        plain_head, md_head = f"{plain_head}\n\n{plain_thinking}", f"{md_head}\n\n{md_thinking}"
    if not text:
        return {"text/plain": plain_head, "text/markdown": md_head}
    return {"text/plain": f"{plain_head}\n\n{text}", "text/markdown": f"{md_head}\n\n{text}"}


#: What a saved output of a widget replaying a recording says after "nbstream": never a
#: live model's answer.
REPLAY_NOTE = "replay of a recorded run, not a live model"


#: What a chat's saved output says of an answer replayed from a recording.
RECORDED = "replayed from a recording"


def replay_bundle(bundle: dict[str, str]) -> dict[str, str]:
    """``bundle`` (a widget's fallbacks) marked as a replay: :data:`REPLAY_NOTE` after its name.

    Args:
        bundle: ``{"text/plain": "nbstream ...", "text/markdown": "**nbstream** ..."}``.

    Returns:
        The same entries, each head saying that the answer is a replay of a recorded run.

    Example:
        >>> replay_bundle(fallback_bundle("complete", "Blue."))["text/plain"].split(" · ")[1]
        'replay of a recorded run, not a live model'
    """
    plain, markdown = bundle["text/plain"], bundle["text/markdown"]
    name, _, rest = plain.partition(" · ")
    md_name, _, md_rest = markdown.partition(" · ")
    return {
        **bundle,
        "text/plain": " · ".join([name, REPLAY_NOTE, *([rest] if rest else [])]),
        "text/markdown": " · ".join([md_name, f"*{REPLAY_NOTE}*", *([md_rest] if md_rest else [])]),
    }


def chat_fallback_bundle(
    status: str, transcript: list[dict[str, Any]], error_info: dict[str, str] | None = None
) -> dict[str, str]:
    """The fallbacks of a chat: the state of its newest answer, then every message.

    Each answer that is not a complete one says so (and whether the model will see it),
    so a stopped answer is never read as a finished one; an answer (message) with
    ``finish_reason == "length"`` says it stopped at max_new_tokens, one with ``recorded``
    that it was replayed from a recording (:data:`RECORDED`). A reasoning model's
    thinking comes before its answer, summarised (plain text) or folded (Markdown).
    """
    if not transcript:
        line = "nbstream chat · no messages yet"
        return {"text/plain": line, "text/markdown": "**nbstream chat** · *no messages yet*"}
    state, cut = _state(status, error_info, transcript[-1].get("finish_reason"))
    if cut == CUT:
        state = f"{state} · {CUT}"
    turns = sum(1 for m in transcript if m["role"] == "user")
    count = f"{turns} turn" + ("" if turns == 1 else "s")
    plain = [f"nbstream chat · {state} · {count}"]
    markdown = [f"**nbstream chat** · **{state}** · {count}"]
    for message in transcript:
        text = message["content"]
        if message["role"] == "user":
            plain.append(f"You: {text}")
            markdown.append(f"**You:** {text}")
            continue
        _, note = _state(message["status"], None, message.get("finish_reason"))
        if note == CUT:
            note = f"{message['status']} · {CUT}"
        elif note is not None:
            note = f"{message['status']}, {note}"
            if not message["in_history"]:
                note += ", not in the conversation"
            elif message.get("kept"):
                note += ", kept in the conversation"
        if message.get("thinking"):
            # Before its answer, as in the view: summarised in plain text, folded in Markdown.
            plain_thinking, md_thinking = _thinking_parts(message["thinking"], {})
            plain.append(plain_thinking)
            markdown.append(md_thinking)
        # An answer replayed from a recording (``recorded``) is never passed off as live.
        who = f"Assistant, {RECORDED}" if message.get("recorded") else "Assistant"
        plain.append(f"{who} ({note}): {text}" if note else f"{who}: {text}")
        markdown.append(f"**{who}** (*{note}*): {text}" if note else f"**{who}:** {text}")
    return {"text/plain": "\n\n".join(plain), "text/markdown": "\n\n".join(markdown)}


#: The class of the block that holds a text copy shown beside its live view. The views'
#: stylesheet (js/src/stream.css) hides such a block right after an output in which a view
#: was drawn: a stylesheet that only a drawn view brings, so wherever no view can be drawn
#: (an HTML export with no network, GitHub, VS Code without widget state) the copy shows.
TEXT_COPY = "nbstream-text-copy"


def text_copy(markdown: str) -> str:
    """``markdown`` inside a block of class :data:`TEXT_COPY` (a CommonMark HTML block).

    The blank lines keep the inside Markdown: an HTML block ends at the first blank line.

    Example:
        >>> text_copy("**nbstream** · idle").splitlines()[0]
        '<div class="nbstream-text-copy">'
    """
    return f'<div class="{TEXT_COPY}">\n\n{markdown}\n\n</div>'


def hidden_in_live_views(data: dict[str, Any]) -> dict[str, Any]:
    """The fallback entries of ``data`` as an output that widget front ends do not show.

    A widget view with an empty model id is how ipywidgets marks the output of a closed
    widget: JupyterLab and Notebook 7 hide it. Exporters find no such widget in the saved
    state, so they fall back to text/markdown or text/plain, like front ends without
    widget support; its Markdown is marked as a :func:`text_copy`, which a page that drew
    the view beside it hides.
    """
    hidden = {**data[WIDGET_VIEW], "model_id": ""}
    return {
        WIDGET_VIEW: hidden,
        "text/plain": data["text/plain"],
        "text/markdown": text_copy(data["text/markdown"]),
    }


def publishing_parent() -> str | None:
    """The id of the request that a display message sent now from this thread would answer.

    ipykernel keeps the parent per context, and a thread started without one (a view
    thread) publishes under the last request the kernel took. None outside a kernel.
    """
    try:
        from IPython import get_ipython

        header = get_ipython().display_pub.parent_header
    except Exception:  # no IPython, no shell, a publisher without parents
        return None
    msg_id = header.get("msg_id") if isinstance(header, dict) else None
    return msg_id if isinstance(msg_id, str) else None


def show(*objs: Any, **kwargs: Any) -> Any:
    """IPython's ``display`` (typed here: IPython's own signature is not)."""
    from IPython.display import display

    publish: Callable[..., Any] = display
    return publish(*objs, **kwargs)


def update(data: dict[str, Any], metadata: dict[str, Any], display_id: str) -> None:
    """Rewrite the outputs shown with ``display_id`` (IPython's ``update_display``, typed)."""
    from IPython.display import update_display

    publish: Callable[..., Any] = update_display
    publish(data, raw=True, metadata=metadata, display_id=display_id)


def show_with_fallback(data: dict[str, Any], metadata: dict[str, Any], display_id: str) -> None:
    """Show a widget in a kernel as two outputs: the live view, then its fallback.

    The fallback output (text/plain and text/markdown, hidden in live front ends) is the
    one rewritten by :func:`republish` when a run ends: rewriting the view's own output
    would make JupyterLab re-create the view (losing its toggles and scroll position).
    """
    view = {key: value for key, value in data.items() if key == WIDGET_VIEW}
    show({**view, "text/plain": ""}, raw=True, metadata=metadata)
    show(hidden_in_live_views(data), raw=True, display_id=display_id)


def republish(data: dict[str, Any], display_id: str) -> bool:
    """Rewrite the fallback shown by :func:`show_with_fallback` (any thread).

    False if the kernel could not take it (it is shutting down: the live view is gone anyway).
    """
    try:
        update(hidden_in_live_views(data), {}, display_id)
    except Exception:
        logger.debug("could not update a saved output", exc_info=True)
        return False
    return True


def states_summary(statuses: list[str]) -> str:
    """How many columns are in which state, e.g. ``"3 columns · 1 running, 2 queued"``."""
    n = len(statuses)
    head = f"{n} column" + ("" if n == 1 else "s")
    if all(status == "idle" for status in statuses):
        return f"{head} · not run yet"
    order = ["running", "queued", "complete", "cancelled", "failed", "idle"]
    order += sorted(set(statuses) - set(order))  # a state added later still shows
    counts = [f"{statuses.count(state)} {state}" for state in order if state in statuses]
    return f"{head} · " + ", ".join(counts)


def compare_fallback_bundle(
    prompt: str,
    columns: list[tuple[str, str, str, Mapping[str, Any] | None, dict[str, str] | None]],
) -> dict[str, str]:
    """The fallbacks of a comparison: the prompt, then per column its label, state and text.

    ``columns`` holds ``(label, status, text, metrics, error_info)`` per column, left to
    right; ``status`` is ``"idle"`` for a column that never ran. Each column's state line
    says, as a widget's does, when its text is not a complete answer.
    """
    summary = states_summary([column[1] for column in columns])
    plain = [f"nbstream compare · {summary}"]
    markdown = [f"**nbstream compare** · {summary}"]
    if prompt:
        plain[0] += f"\nPrompt: {prompt}"
        markdown.append(f"**Prompt:** {prompt}")
    for i, (label, status, text, metrics, error_info) in enumerate(columns, 1):
        note: str | None
        if status == "idle":
            state, note, figures = "idle", "no run yet", []
        else:
            state, note = _state(status, error_info, (metrics or {}).get("finish_reason"))
            figures = _figures(metrics or {})
        plain.append(" · ".join([f"[{i}] {label}", state, *([note] if note else []), *figures]))
        md_state = " · ".join([f"**{state}**", *([f"*{note}*"] if note else []), *figures])
        markdown.append(f"**{i}. {label}** · {md_state}")
        if text:
            plain.append(text)
            markdown.append(text)
    return {"text/plain": "\n\n".join(plain), "text/markdown": "\n\n".join(markdown)}


def _short(value: Any) -> Any:
    """A float to four significant digits (a tenth from 100 up); anything else as it is."""
    if isinstance(value, float) and math.isfinite(value):
        return round(value, 1) if abs(value) >= 100 else float(f"{value:.4g}")
    return value


class ShownMetrics(dict[str, Any]):
    """A run's metrics as a widget holds them: a plain dict whose printout is short.

    ``print(w.metrics)`` shows each figure to four significant digits, not a float's
    sixteen; the values themselves stay whole (``w.metrics["elapsed_s"]``).

    Example:
        >>> ShownMetrics({"elapsed_s": 1.2345678912, "tokens": 9, "tokens_per_s": 18.333333})
        {'elapsed_s': 1.235, 'tokens': 9, 'tokens_per_s': 18.33}
    """

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{key!r}: {_short(value)!r}" for key, value in self.items()) + "}"


def in_kernel() -> bool:
    """Whether this code runs in a Jupyter kernel (not a terminal IPython or a script)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return getattr(get_ipython(), "kernel", None) is not None


#: What a widget gives :class:`FallbackDisplay`: ``(the state it shows or None, its whole
#: mime bundle, metadata)``, or None once the widget is closed.
Bundle = tuple[str | None, dict[str, Any], dict[str, Any]]


class FallbackDisplay:
    """How a widget is shown: the live view plus its static fallback.

    The fallback is rewritten (from any thread) whenever the widget's state ends or changes.

    Shown and rewritten under the widget's ``lock``: a display whose bundle was read before
    a run ended but sent after that end's rewrite would go on claiming the old state.
    """

    def __init__(self, lock: threading.RLock, prefix: str) -> None:
        self._lock = lock
        self._prefix = prefix
        #: The display id of the fallback outputs, once shown in a kernel.
        self.display_id: str | None = None
        #: The state the saved fallbacks say now.
        self.published_status: str | None = "idle"
        # What was last sent, and under which request: the same text again under the same
        # request changes nothing anywhere, and a long answer is worth not sending twice.
        self._sent: tuple[dict[str, Any], str | None] | None = None

    def display(
        self,
        model_id: Callable[[], str],
        bundle: Callable[[], Bundle | None],
        fallback: Callable[[], dict[str, Any]],
    ) -> None:
        """``_ipython_display_``: the view and its fallback, or the fallback alone."""
        with self._lock:
            shown = bundle()
            if shown is None:  # closed: no view to show, only what it held
                show(fallback(), raw=True)
                return
            status, data, metadata = shown
            if not in_kernel():
                # A terminal IPython shows the text/plain fallback. No display id: it would
                # print an update at some later moment, from another thread.
                show(data, raw=True, metadata=metadata)
                return
            self.display_id = f"{self._prefix}-{model_id()}"  # read while open
            show_with_fallback(data, metadata, self.display_id)
            self.published_status = status
            self._sent = (data, publishing_parent())

    def republish(self, bundle: Callable[[], Bundle | None]) -> None:
        """Rewrite every saved fallback of the widget (nothing before it was shown)."""
        with self._lock:
            if self.display_id is None:
                return
            shown = bundle()
            if shown is None:
                return
            status, data, _metadata = shown
            # A run's end is published by its view thread, then again by a wait() in the
            # cell that waits (a headless runner keeps only what answers the cell it runs).
            # When both answer the same request, the second would only resend the answer.
            parent = publishing_parent()
            if self._sent == (data, parent):
                return
            if republish(data, self.display_id):
                self.published_status = status
                self._sent = (data, parent)


# -- a run shown as a cell's value -------------------------------------------------------------
# A run changes until it ends: shown once (its repr), it would say "running" under the cell
# for ever. In a kernel, a run given to IPython's display (a cell ending in
# `w.generate(...)` or `nbstream.stream(...)`) shows instead either nothing, when a widget
# already shows it, or a small view that follows it to its end through widget state (which
# reaches the page from a background thread), with a saved fallback rewritten at the end.

#: The saved output of the widget that shows each run (set as the widget starts it).
_widget_outputs: weakref.WeakKeyDictionary[Generation, FallbackDisplay] = (
    weakref.WeakKeyDictionary()
)
#: How much of a running answer the view shows (its end; all of it once the run has ended):
#: each update resends what it shows, so a long answer must not be resent whole.
LIVE_TAIL = 2000
#: How often the view of a running run is brought up to date, in seconds.
LIVE_PERIOD_S = 0.5
#: The name of the thread that follows a run shown as a cell's value.
RUN_VIEW_THREAD = "nbstream-shown-run"


def shown_by_widget(run: Generation, output: FallbackDisplay) -> None:
    """Note that a widget whose outputs are ``output`` shows ``run`` (lock-free)."""
    _widget_outputs[run] = output


def _error_info(run: Generation) -> dict[str, str] | None:
    error = run.error
    return None if error is None else {"type": type(error).__name__, "message": str(error)}


def run_bundle(run: Generation) -> tuple[str, dict[str, str]]:
    """(the state, the text/plain and text/markdown fallbacks) of a run shown on its own.

    A replay (``nbstream.replay``) says so first: :data:`REPLAY_NOTE`.
    """
    status = run.status  # read first: an ended run's text is final
    text = run.partial_text
    bundle = fallback_bundle(status, text, run.metrics, _error_info(run), thinking=run.thinking)
    return status, replay_bundle(bundle) if run.is_replay else bundle


#: The rule that hides a shown run's text copy beside its drawn view (as js/src/stream.css
#: does for the widgets): inside the view's own HTML, so it exists only where the view shows.
_RUN_VIEW_HIDES_COPY = (
    f".jp-OutputArea-child:has(.nbstream-run-view) + .jp-OutputArea-child:has(.{TEXT_COPY}),"
    f".output_area:has(.nbstream-run-view) + .output_area:has(.{TEXT_COPY}) {{display: none}}"
)


def run_html(run: Generation) -> str:
    """The live view's HTML: a state line, then the text (its end while the run goes on)."""
    status = run.status
    text = run.partial_text
    metrics = run.metrics
    if status in TERMINAL:
        state, note = _state(status, _error_info(run), metrics.get("finish_reason"))
    else:
        state, note = status, None
        if len(text) > LIVE_TAIL:
            text = "…" + text[-LIVE_TAIL:]
    replayed = [REPLAY_NOTE] if run.is_replay else []
    words = " · ".join(
        ["nbstream run", *replayed, state, *([note] if note else []), *_figures(metrics)]
    )
    body = (
        f'<pre class="nbstream-run-view-text" style="white-space: pre-wrap; margin: 0.25em 0 0">'
        f"{html.escape(text)}</pre>"
        if text
        else ""
    )
    return (
        f"<style>{_RUN_VIEW_HIDES_COPY}</style>"
        f'<div class="nbstream-run-view" data-status="{html.escape(status)}">'
        f'<div class="nbstream-run-view-state">{html.escape(words)}</div>{body}</div>'
    )


def show_run(run: Generation) -> None:
    """IPython's display of a run in a kernel (see above)."""
    output = _widget_outputs.get(run)
    if output is not None and output.display_id is not None:
        return  # its widget, shown, follows it: nothing here could disagree with it
    import ipywidgets

    view = ipywidgets.HTML(run_html(run))
    display_id = f"nbstream-run-{uuid.uuid4().hex}"
    lock = threading.Lock()

    live = {WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": view.model_id}}

    def fallback() -> dict[str, Any]:
        return {**live, **run_bundle(run)[1]}

    with lock:
        show_with_fallback(fallback(), {}, display_id)

    def follow() -> None:
        while True:
            ended = run.wait_done(LIVE_PERIOD_S)
            try:
                view.value = run_html(run)
            except Exception:  # the kernel is going away: nothing left to show it
                logger.debug("could not update a shown run", exc_info=True)
                return
            if ended:
                with lock:
                    republish(fallback(), display_id)
                return

    threading.Thread(target=follow, name=RUN_VIEW_THREAD, daemon=True).start()


def register_run_display() -> bool:
    """In a kernel, have IPython show a :class:`Generation` with :func:`show_run`.

    Uses IPython's documented ``for_type``; elsewhere (a terminal, a script) its repr stays. True if
    done.
    """
    if not in_kernel():
        return False
    from IPython import get_ipython

    formatter = get_ipython().display_formatter.ipython_display_formatter
    formatter.for_type(Generation, show_run)
    return True
