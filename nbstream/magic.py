"""IPython integration: ``%load_ext nbstream``, the ``%%nbstream`` cell magic and ``%nbstream``.

``%%nbstream [options]`` streams the answer to the cell's text into a
:class:`~nbstream.StreamWidget` shown as the cell's output, and returns at once: the kernel
stays free while the answer streams. ``%%nbstream --chat`` continues the kernel's
conversation instead: one :class:`~nbstream.ChatWidget` shared by every ``--chat`` cell, so
the model sees the earlier turns; each such cell shows the whole chat. ``%nbstream status``
lists loaded models and the runs that are queued or running; ``%nbstream stop`` stops them
all.

Example (in a notebook)::

    %load_ext nbstream

    %%nbstream --max-new-tokens 60 -o answer
    Name two colors of {thing}.

    answer.wait()        # in a later cell: blocks until the run ends, returns the text
"""

from __future__ import annotations

import argparse
import keyword
import logging
import shlex
import string
import threading
import time
from collections.abc import Mapping
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from .generation import Generation, active_runs
from .settings import validate_settings
from .widgets import cells as cells
from .widgets.display import show

__all__ = ["NbstreamMagics", "load_ipython_extension"]

logger = logging.getLogger(__name__)

# How long `%nbstream stop` waits for each run to acknowledge: a stop lands within one decode
# step, so this only matters for a model stuck in a single very slow step.
_STOP_WAIT_S = 10.0
_PREVIEW = 40

# Option dest -> setting name, for the options that are generation settings.
_SETTING_OPTIONS = {
    "max_new_tokens": "--max-new-tokens",
    "temperature": "--temperature",
    "top_p": "--top-p",
    "seed": "--seed",
    "expect": "--expect",
}


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are IPython usage errors (shown without a traceback)."""

    def error(self, message: str) -> Any:
        raise UsageError(f"{self.format_usage()}{self.prog}: error: {message}")


def _build_parser() -> _Parser:
    parser = _Parser(
        prog="%%nbstream",
        description=(
            "Stream a model's answer to the cell's text into a StreamWidget. {name} in the "
            "text is filled from the notebook's variables; write {{ and }} for literal braces."
        ),
        add_help=False,
        allow_abbrev=False,  # --max would otherwise silently mean --max-new-tokens
    )
    parser.add_argument("--max-new-tokens", type=int, metavar="N", help="most tokens to generate")
    parser.add_argument(
        "--temperature", type=float, metavar="T", help="0 means greedy; above 0 samples"
    )
    parser.add_argument("--top-p", type=float, metavar="P", help="nucleus sampling mass, (0, 1]")
    parser.add_argument("--seed", type=int, metavar="N", help="makes sampling reproducible")
    parser.add_argument(
        "--expect", choices=["json"], help="the run completes only if its answer parses as JSON"
    )
    parser.add_argument(
        "--system", metavar="TEXT", help="a system message sent before the cell's text"
    )
    parser.add_argument(
        "--model",
        metavar="NAME_OR_PATH",
        help="a hub id or local folder, loaded once per process (default: the embedded model)",
    )
    parser.add_argument(
        "-o",
        dest="name",
        metavar="NAME",
        help="bind the widget to NAME; NAME.result is the answer once the run completes",
    )
    parser.add_argument(
        "--chat",
        action="store_true",
        help="continue this kernel's chat (one ChatWidget shared by every --chat cell): the "
        "model sees the earlier turns; --system sets its system message",
    )
    return parser


_PARSER = _build_parser()
_LINE_USAGE = "usage: %nbstream status | %nbstream stop"


class _Namespace(Mapping[str, Any]):
    """The user namespace for str.format_map; a missing name says which one."""

    def __init__(self, namespace: Mapping[str, Any]) -> None:
        self._ns = namespace

    def __getitem__(self, key: str) -> Any:
        try:
            return self._ns[key]
        except KeyError:
            raise _Missing(key) from None

    def __iter__(self) -> Any:
        return iter(self._ns)

    def __len__(self) -> int:
        return len(self._ns)


class _Missing(KeyError):
    pass


def expand(template: str, namespace: Mapping[str, Any]) -> str:
    """Fill ``{name}`` placeholders of ``template`` from ``namespace`` (``{{``/``}}`` escape).

    Raises ``UsageError`` naming the missing variable, or the faulty placeholder.
    """
    hint = "write {{ and }} for literal braces"
    try:
        return string.Formatter().vformat(template, (), _Namespace(namespace))
    except _Missing as exc:
        name = exc.args[0]
        raise UsageError(
            f"%%nbstream: {{{name}}} in the cell names no variable in the notebook: "
            f"{name!r} is not defined ({hint}); nothing was started"
        ) from None
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
        raise UsageError(
            f"%%nbstream: a {{placeholder}} in the cell could not be filled: {exc} ({hint}); "
            "nothing was started"
        ) from None


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    settings = {}
    for dest, option in _SETTING_OPTIONS.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        try:
            settings.update(validate_settings({dest: value}))
        except (TypeError, ValueError) as exc:
            raise UsageError(f"%%nbstream: argument {option}: {exc}") from None
    return settings


def _check_name(name: str | None) -> None:
    if name is not None and (not name.isidentifier() or keyword.iskeyword(name)):
        raise UsageError(f"%%nbstream: argument -o: {name!r} is not a valid Python name")


def _load(model: str | None) -> tuple[Any, Any]:
    from .models import ModelNotFoundError, load_model

    try:
        return load_model(model)
    except ModelNotFoundError as exc:
        # Its one line, shown as IPython shows a usage error: no traceback at all.
        raise UsageError(f"%%nbstream --model: {exc}") from None


def _run_line(run: Generation) -> str:
    metrics = run.metrics
    elapsed = metrics["elapsed_s"]
    text = run.partial_text.replace("\n", " ")
    preview = text[:_PREVIEW] + ("…" if len(text) > _PREVIEW else "")
    timing = f"{elapsed:.1f} s" if elapsed is not None else "-"
    return f"{run.status:<8} {metrics['tokens']:>5} tokens  {timing:>7}  {preview!r}"


def _loaded_models() -> list[str]:
    from .models import loaded_models

    lines = []
    for loaded in loaded_models():
        label = f"{loaded.name} (embedded default)" if loaded.default else loaded.name
        if loaded.adapter is not None:
            label += f" + adapter {loaded.adapter}"
        lines.append(label)
    return lines


class Report:
    """What ``%nbstream status`` and ``%nbstream stop`` return: plain text and Markdown."""

    def __init__(self, title: str, sections: dict[str, list[str]]) -> None:
        self.title = title
        self.sections = sections

    def __repr__(self) -> str:
        lines = [self.title]
        for heading, items in self.sections.items():
            lines.append(f"{heading}:")
            lines.extend(f"  {item}" for item in items or ["(none)"])
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        lines = [f"**{self.title}**", ""]
        for heading, items in self.sections.items():
            lines.append(f"{heading}:")
            lines.append("")
            lines.extend([f"- `{item}`" for item in items] or ["- (none)"])
            lines.append("")
        return "\n".join(lines)


def status_report() -> Report:
    """Loaded models and the runs that are queued or running."""
    runs = active_runs()
    running = [r for r in runs if r.status == "running"]
    queued = [r for r in runs if r.status == "queued"]
    models = _loaded_models()
    title = (
        f"nbstream: {len(models)} model(s) loaded, {len(running)} run(s) running, "
        f"{len(queued)} queued"
    )
    return Report(
        title,
        {
            "models": models,
            "running": [_run_line(r) for r in running],
            "queued": [_run_line(r) for r in queued],
        },
    )


def stop_all() -> Report:
    """Stop every queued and running run; wait (briefly) until each has ended."""
    from .widgets.feed import view_threads

    runs = [run for run in active_runs() if run.stop()]
    deadline = time.monotonic() + _STOP_WAIT_S
    for run in runs:
        run.wait_done(max(0.0, deadline - time.monotonic()))
    # A widget publishes its run's end state (to its views and its saved output) from its
    # view thread just after the run ends: wait for that too, so that when `stop` returns
    # every output says "cancelled", and a headless run (nbconvert) records it in this cell.
    for thread in view_threads():
        thread.join(max(0.0, deadline - time.monotonic()))
    still = [run for run in runs if not run.done]
    title = f"nbstream: stopped {len(runs) - len(still)} run(s)"
    if still:
        title += f"; {len(still)} still ending"
    return Report(title, {"stopped": [_run_line(r) for r in runs]})


@magics_class
class NbstreamMagics(Magics):
    """The ``%%nbstream`` cell magic and the ``%nbstream status|stop`` line magic."""

    @line_cell_magic
    def nbstream(self, line: str, cell: str | None = None) -> Any:
        """``%nbstream status|stop`` (a report) or ``%%nbstream`` (the cell is the prompt)."""
        if cell is None:
            return self._line(line)
        self._cell(line, cell)
        return None

    def _line(self, line: str) -> Report:
        command = line.strip()
        if command == "status":
            return status_report()
        if command == "stop":
            return stop_all()
        hint = " (the prompt goes in a %%nbstream cell)" if command else ""
        raise UsageError(f"{_LINE_USAGE}\n%nbstream: unknown command {command!r}{hint}")

    def _cell(self, line: str, cell: str) -> None:
        from .widgets.stream import StreamWidget

        try:
            argv = shlex.split(line)
        except ValueError as exc:
            raise UsageError(f"{_PARSER.format_usage()}%%nbstream: error: {exc}") from None
        args = _PARSER.parse_args(argv)
        _check_name(args.name)
        settings = _settings(args)
        text = expand(cell, self.shell.user_ns if self.shell is not None else {})
        if args.chat:
            self._chat_cell(args, text, settings)
            return
        prompt: Any = text
        if args.system is not None:
            prompt = [
                {"role": "system", "content": args.system},
                {"role": "user", "content": text},
            ]
        model, tokenizer = _load(args.model)
        widget = StreamWidget(model, tokenizer, **settings)
        try:
            widget.generate(prompt)
        except (TypeError, ValueError) as exc:  # the prompt itself, checked before any thread
            widget.close()
            raise UsageError(f"%%nbstream: {exc}; nothing was started") from None
        if args.name is not None and self.shell is not None:
            self.shell.user_ns[args.name] = widget
        show(widget)

    def _chat_cell(self, args: argparse.Namespace, text: str, settings: dict[str, Any]) -> None:
        chat = _shared_chat(args.model)
        try:
            if args.system is not None and args.system != chat.system:
                chat.system = args.system
            # A chat message is the cell's text, without the cell's trailing newline.
            chat.generate(text.rstrip(), **settings)
        except (TypeError, ValueError, RuntimeError) as exc:  # checked before any thread
            raise UsageError(f"%%nbstream --chat: {exc}; nothing was started") from None
        if args.name is not None and self.shell is not None:
            self.shell.user_ns[args.name] = chat
        show(chat)


# The kernel's chat for `%%nbstream --chat`, and the --model it was made with.
_chat: tuple[Any, str | None] | None = None
_chat_lock = threading.Lock()


def _shared_chat(model: str | None) -> Any:
    """The ChatWidget every ``--chat`` cell continues (made by the first one)."""
    global _chat
    from .widgets.chat import ChatWidget

    with _chat_lock:
        if _chat is not None and _chat[0].comm is not None:
            chat, made_with = _chat
            if model is not None and model != made_with:
                used = made_with or "the default model"
                raise UsageError(
                    f"%%nbstream --chat: this kernel's chat uses {used}, not {model!r}; "
                    "drop --model (or restart the kernel for another model)"
                )
            return chat
        chat = ChatWidget(*_load(model))
        # One chat for the kernel: re-running the cell that made it must not close it.
        cells.forget(chat)
        _chat = (chat, model)
        return chat


def load_ipython_extension(ipython: Any) -> None:
    """Register the magics; called by ``%load_ext nbstream``."""
    ipython.register_magics(NbstreamMagics)


NbstreamMagics.nbstream.__doc__ = (
    f"Stream a model's answer into the notebook.\n\n{_PARSER.format_help()}\n"
    "Line magic:\n  %nbstream status   loaded models, queued and running runs\n"
    "  %nbstream stop     stop every queued and running run\n"
)
