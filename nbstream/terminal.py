"""``nbstream chat``: a terminal chat on the same engine and the same chat rules as ChatWidget.

Interactive (standard input is a terminal): type a message, the answer streams in (Markdown
rendered with ``rich`` when it is installed and standard output is a terminal, plain text
otherwise), the conversation goes on with its history. Ctrl-C stops the answer, not the
program: generation halts within one decode step and the partial answer is marked and left
out of the history. At the prompt, a second Ctrl-C in a row, ``/exit`` or Ctrl-D quits.

Non-interactive (standard input is not a terminal): every line is a message of one
conversation (a line starting with ``/`` a command); with ``--single [FILE]`` the whole input,
or the file, is one message. Answers go to standard output, states and metrics to standard
error, and the exit status is 0 only if every answer completed (1: one failed, 2: a message
or command was refused, 130: cancelled by Ctrl-C).

The history follows :mod:`nbstream.conversation`, the code ChatWidget uses: the system
message, then every turn whose answer completed (or was kept with ``/keep``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TextIO

from ._console import (
    EXIT_CANCELLED,
    EXIT_FAILED,
    EXIT_REFUSED,
    add_setting_options,
    format_metrics,
    settings_of,
)
from .conversation import Conversation, Turn, check_system, check_text
from .recording import CHAT_FORMAT, ChatRecording, RecordedTurn, chat_document
from .settings import SETTINGS, validate_settings

__all__ = ["API_KEY_ENV", "ChatSession", "main", "parse_settings"]

logger = logging.getLogger(__name__)

#: The environment variable the API key of ``--endpoint`` is read from, unless
#: ``--api-key-env`` names another one. The key is never a flag: flags end up in shell
#: histories and process lists.
API_KEY_ENV = "NBSTREAM_API_KEY"
#: What ``/save`` writes: a chat's recording (each answer carries its record and recording).
TRANSCRIPT_FORMAT = CHAT_FORMAT
#: What a refused over-long conversation tells the person at the terminal to do.
ADVICE = "type /clear to start over, or lower max_new_tokens (/settings max_new_tokens=N)"
# Redraw the Markdown of the growing answer at most this often: the engine already batches
# tokens, and re-rendering the live block per token costs more than it shows.
_RENDER_INTERVAL_S = 0.08
# How long an ended run's worker thread is waited for (a step of a large model on a CPU).
_JOIN_TIMEOUT_S = 60.0

HELP = """\
Commands:
  /clear                 start a new conversation (the system message stays)
  /history               show what the model gets with the next message
  /keep                  keep the last stopped or failed answer in the conversation
  /system [TEXT]         show the system message, or set it (/system - removes it)
  /save FILE             write the transcript, each answer with its state, record and recording
  /settings [name=value ...]   show or change settings (name= unsets one), e.g.
                         /settings temperature=0.7 max_new_tokens=200 stop=["\\n\\n"]
  /help                  this list
  /exit                  quit (also Ctrl-D, or Ctrl-C twice at the prompt)
Ctrl-C while an answer streams stops it. A message that starts with / is written //."""


class _Refused(Exception):
    """A command or message that started nothing (its message says what to do)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nbstream chat",
        description="Chat with a language model in the terminal: the answer streams as it is "
        "generated and the conversation keeps its history (the notebook ChatWidget's rules). "
        "With standard input not a terminal, each line is a message (or, with --single, the "
        "whole input or a file is one).",
        epilog=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model",
        help="hub id or folder (default: the embedded SmolLM2-135M); with --endpoint, the "
        "model name the server serves",
    )
    parser.add_argument(
        "--endpoint",
        metavar="URL",
        help="an OpenAI-compatible server's API root, e.g. http://127.0.0.1:8000/v1",
    )
    parser.add_argument(
        "--api-key-env",
        metavar="NAME",
        default=API_KEY_ENV,
        help=f"the environment variable holding the endpoint's API key (default {API_KEY_ENV})",
    )
    parser.add_argument("--system", help="the system message")
    parser.add_argument(
        "--single",
        nargs="?",
        const="-",
        metavar="FILE",
        help="answer one message: the whole FILE, or all of standard input, then exit",
    )
    parser.add_argument(
        "--plain", action="store_true", help="plain text, no Markdown rendering or colour"
    )
    add_setting_options(parser, "wall-clock budget per answer, seconds")
    return parser


def parse_settings(words: Iterable[str]) -> dict[str, Any]:
    r"""``["temperature=0.7", "stop=[\"END\"]", "seed="]`` as settings (``None``: unset).

    A value is read as JSON (numbers, ``true``/``false``, ``null``, lists, quoted
    strings), Python's ``True``/``False``/``None`` too, else kept as the text it is, so
    that :func:`nbstream.settings.validate_settings` says what is wrong with it.
    """
    out: dict[str, Any] = {}
    for word in words:
        name, sep, text = word.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not name:
            raise _Refused(
                f"{word!r} is not name=value; e.g. /settings temperature=0.7 max_new_tokens=200"
            )
        if name not in SETTINGS:
            raise _Refused(f"unknown setting {name!r}; settings: {', '.join(SETTINGS)}")
        text = text.strip()
        python_words = {"True": True, "False": False, "None": None}
        value: Any
        if text == "" or text in python_words:
            value = python_words.get(text)
        else:
            try:
                value = json.loads(text)
            except ValueError:
                value = text
        out[name] = value
    return out


# -- showing an answer ------------------------------------------------------------------------


class _PlainAnswer:
    """The answer written as it comes, and at the end whatever the last read did not show."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.shown = ""

    def add(self, chunk: str) -> None:
        self.shown += chunk
        self.out.write(chunk)
        self.out.flush()

    def end(self, text: str) -> None:
        if text.startswith(self.shown):
            self.out.write(text[len(self.shown) :])
        self.out.write("\n")
        self.out.flush()


_LINE_END = re.compile(r"\r\n|\r|\n")  # what markdown-it counts as the end of a line


class _Bottom:
    """The last ``height`` lines of a renderable: the live window over a growing block."""

    def __init__(self, renderable: Any, height: int) -> None:
        self.renderable = renderable
        self.height = max(1, height)

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.segment import Segment

        lines = console.render_lines(self.renderable, options, pad=False)
        for line in lines[-self.height :]:
            yield from line
            yield Segment.line()


class _MarkdownAnswer:
    """The answer as Markdown (rich): finished blocks printed once, the growing one live.

    A live region can only redraw what fits on the screen: redrawing a whole answer taller
    than that would repeat it in the scrollback at every frame. So every top-level block
    but the last is final and printed for good above the live region, and the live region
    shows the newest lines of the block being written (at most a screen less two lines);
    when the answer ends that block is printed whole in its place.
    """

    def __init__(self, out: TextIO) -> None:
        from markdown_it import MarkdownIt
        from rich.console import Console
        from rich.live import Live

        self.console = Console(file=out)
        self.parser = MarkdownIt("commonmark").enable("table").enable("strikethrough")
        self.text = ""
        self.printed = 0  # characters of text already printed as final blocks
        self.drawn_at = 0.0
        self.live = Live(
            console=self.console,
            auto_refresh=False,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self.live.start()

    def _markdown(self, text: str) -> Any:
        from rich.markdown import Markdown

        return Markdown(text)

    def _commit_finished_blocks(self) -> None:
        tail = self.text[self.printed :]
        starts = sorted(
            {t.map[0] for t in self.parser.parse(tail) if t.level == 0 and t.map is not None}
        )
        if len(starts) < 2:
            return
        ends = list(_LINE_END.finditer(tail))
        cut = ends[starts[-1] - 1].end()  # the last block starts on line starts[-1]
        finished = tail[:cut].strip("\r\n")
        self.printed += cut
        if finished:
            self.live.console.print(self._markdown(finished))
            self.live.console.print()

    def _draw(self) -> None:
        window = _Bottom(self._markdown(self.text[self.printed :]), self.console.height - 2)
        self.live.update(window, refresh=True)

    def add(self, chunk: str) -> None:
        self.text += chunk
        now = time.monotonic()
        if now - self.drawn_at < _RENDER_INTERVAL_S:
            return
        self.drawn_at = now
        with _ctrl_c_held():
            self._commit_finished_blocks()
            self._draw()

    def end(self, text: str) -> None:
        if text.startswith(self.text[: self.printed]):
            self.text = text  # what the run holds, including what the last read missed
        # The run has ended: a Ctrl-C now has nothing left to stop.
        with _ctrl_c_held(deliver=False):
            self._commit_finished_blocks()
            self.live.stop()  # transient: the window goes, the whole last block takes its place
            rest = self.text[self.printed :].strip("\r\n")
            if rest:
                self.console.print(self._markdown(rest))


@contextlib.contextmanager
def _ctrl_c_held(*, deliver: bool = True) -> Iterator[None]:
    """Hold Ctrl-C back while a frame is written; then deliver it (or drop it).

    A KeyboardInterrupt inside rich's write leaves the frame in the console's buffer, and
    the next write sends it again: the screen then holds lines that rich does not count,
    and its redraw leaves them in place, above the answer's last frame.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread gets KeyboardInterrupt
        return
    if signal.getsignal(signal.SIGINT) is None:
        yield  # a handler set outside Python: it could not be put back
        return
    pressed: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed and deliver:
        signal.raise_signal(signal.SIGINT)  # to the handler that was there, as if pressed now


@contextlib.contextmanager
def _no_echo() -> Iterator[None]:
    """Keep the terminal from echoing keys (^C, type-ahead) while a live region is drawn.

    rich redraws its live region by moving the cursor up as many lines as it drew; an echo
    moves the cursor (one after a full-width line wraps it to a new line), and the old
    lines then stay on the screen above the redrawn ones. Keys typed meanwhile are still
    read by the next prompt, which shows them itself.
    """
    try:
        import termios
    except ImportError:  # Windows: no termios, and no echo of Ctrl-C into the output
        yield
        return
    if sys.stdin is None or not sys.stdin.isatty():
        yield
        return
    fd = sys.stdin.fileno()
    before = termios.tcgetattr(fd)
    quiet = list(before)
    quiet[3] &= ~(termios.ECHO | termios.ECHOCTL)
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, before)


def _markdown_available() -> bool:
    try:
        import markdown_it  # noqa: F401
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


# -- the session --------------------------------------------------------------------------------


def _status_line(turn: Turn) -> str:
    run = turn.run
    assert run is not None
    metrics = run.metrics
    status = run.status
    if status == "complete":
        label = "complete"
        if metrics.get("finish_reason") == "length":
            label += " · stopped at max_new_tokens"
    else:
        label = f"{status}: partial answer, left out of the conversation"
        if status == "cancelled":
            label += " (/keep keeps it)"
        elif run.error is not None:
            label += f": {type(run.error).__name__}: {run.error}"
    if run.is_replay:  # a session given a recording's replay backend: never a live answer
        label = f"replay of a recorded run, not a live model · {label}"
    return f"[{label}] {format_metrics(metrics)}"


class ChatSession:
    """One conversation on one model, as the terminal drives it (``nbstream chat``)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        settings: dict[str, Any],
        system: str | None = None,
        *,
        markdown: bool = False,
        out: TextIO | None = None,
        err: TextIO | None = None,
        info: TextIO | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.settings = dict(settings)
        self.conversation = Conversation(system)
        self.markdown = markdown
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        # Command output: stdout at the terminal, stderr when stdout carries only answers.
        self.info = info or self.out

    def say(self, line: str) -> None:
        """Write ``line`` to the error stream at once."""
        self.err.write(line + "\n")
        self.err.flush()

    # -- an answer --------------------------------------------------------------------------
    def ask(self, text: str) -> str:
        """Answer ``text``, streaming; returns the answer's state (or raises _Refused)."""
        try:
            run = self.conversation.start(
                self.model, self.tokenizer, text, self.settings, advice=ADVICE
            )
        except (TypeError, ValueError) as exc:
            raise _Refused(str(exc)) from None
        turn = self.conversation.turns[-1]
        with _no_echo() if self.markdown else contextlib.nullcontext():
            self._show(run)
        self.say(_status_line(turn))
        return run.status

    def _show(self, run: Any) -> None:
        """Stream ``run`` to the screen until it ends (Ctrl-C stops it)."""
        shown: _PlainAnswer | _MarkdownAnswer = (
            _MarkdownAnswer(self.out) if self.markdown else _PlainAnswer(self.out)
        )
        from .generation import GenerationError

        try:
            try:
                for chunk in run:
                    shown.add(chunk)
            except GenerationError:
                pass  # the state line says how it ended
        except KeyboardInterrupt:
            run.stop("Ctrl-C was pressed")
        # The worker ends within a decode step of a stop, or of a spent budget (which ends
        # the run before its thread has left the step); another Ctrl-C meanwhile only repeats
        # the stop. Its thread is waited for too: the next answer needs the model, and a
        # process that exits under a running torch thread aborts.
        deadline = time.monotonic() + _JOIN_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if run.wait_done(0.1) and run.join(0.1):
                    break
            except KeyboardInterrupt:
                run.stop("Ctrl-C was pressed")
        shown.end(run.partial_text)

    # -- commands ----------------------------------------------------------------------------
    def command(self, line: str) -> bool:
        """Run a ``/command`` line; False when it asks to quit. Raises _Refused."""
        name, _, rest = line.strip().partition(" ")
        rest = rest.strip()
        if name in ("/exit", "/quit"):
            return False
        if name == "/help":
            self.info.write(HELP + "\n")
        elif name == "/clear":
            self.conversation.clear()
            self.info.write("(a new conversation: the history is empty)\n")
        elif name == "/history":
            self.show_history()
        elif name == "/keep":
            try:
                self.conversation.keep_partial(-1)
            except (TypeError, ValueError) as exc:
                raise _Refused(str(exc)) from None
            self.info.write("(kept: the partial answer is in the conversation)\n")
        elif name == "/save":
            if not rest:
                raise _Refused("/save needs a file name: /save chat.json")
            self.save(rest)
        elif name == "/settings":
            self.change_settings(rest.split())
        elif name == "/system":
            self.change_system(rest)
        else:
            raise _Refused(f"unknown command {name}; /help lists them (write // to send /...)")
        self.info.flush()
        return True

    def change_system(self, text: str) -> None:
        """``/system``: show the system message.

        ``/system TEXT`` sets it for the next answers (checked as ChatWidget checks it); ``/system
        -`` removes it.
        """
        if not text:
            current = self.conversation.system
            self.info.write(f"system: {current}\n" if current else "(no system message)\n")
            return
        try:
            system = None if text == "-" else check_system(text)
        except (TypeError, ValueError) as exc:
            raise _Refused(str(exc)) from None
        self.conversation.system = system
        self.info.write("(the system message is removed)\n" if system is None else "(set)\n")

    def show_history(self) -> None:
        """``/history``: print what the next answer gets, and how many turns are left out."""
        history = self.conversation.history
        left_out = sum(1 for t in self.conversation.turns if t.left_out)
        if not history:
            self.info.write("(no history: the next message starts the conversation)\n")
        for message in history:
            self.info.write(f"{message['role']}: {message['content']}\n")
        if left_out:
            self.info.write(f"({left_out} stopped or failed turn(s) left out; /keep keeps one)\n")

    def change_settings(self, words: list[str]) -> None:
        """``/set``: show the settings, or merge ``words`` into them once they check."""
        if not words:
            shown = " ".join(f"{k}={json.dumps(v)}" for k, v in sorted(self.settings.items()))
            self.info.write(f"settings: {shown or '(the model defaults)'}\n")
            return
        merged = {**self.settings, **parse_settings(words)}
        try:
            self.settings = validate_settings(merged)
        except (TypeError, ValueError) as exc:
            raise _Refused(f"{exc}; nothing changed") from None
        shown = " ".join(f"{k}={json.dumps(v)}" for k, v in sorted(self.settings.items()))
        self.info.write(f"settings: {shown or '(the model defaults)'}\n")

    def transcript(self) -> dict[str, Any]:
        """The conversation as ``/save`` writes it: a chat's recording (``nbstream.chat/1``).

        Every message, each answer's state, run record (``nbstream.rerun`` starts it again)
        and recording (``ChatWidget(nbstream.load(path))`` replays it), and the history.
        """
        turns = []
        for t in list(self.conversation.turns):
            run = t.run
            recording = None if run is None else run.to_recording()
            turns.append(RecordedTurn(t.user, t.text, recording, t.kept))
        chat = ChatRecording(
            system=self.conversation.system,
            keep_thinking=self.conversation.keep_thinking,
            settings=self.settings,
            turns=tuple(turns),
        )
        return chat_document(chat)

    def save(self, path: str) -> None:
        """``/save PATH``: write the conversation as JSON (raises _Refused if it cannot)."""
        text = json.dumps(self.transcript(), indent=2, ensure_ascii=False, allow_nan=False)
        try:
            with open(os.path.expanduser(path), "w", encoding="utf-8") as f:
                f.write(text + "\n")
        except OSError as exc:
            raise _Refused(f"cannot write {path}: {exc.strerror or exc}") from None
        turns = len(self.conversation.turns)
        self.info.write(f"(saved {turns} turn(s) to {path})\n")


# -- the two modes ------------------------------------------------------------------------------


def _interactive(session: ChatSession, banner: str) -> int:
    with contextlib.suppress(ImportError):  # Windows has no readline
        import readline  # noqa: F401  (line editing and history for input())
    session.say(banner)
    interrupted = False
    while True:
        try:
            line = input("You: ")
        except EOFError:
            session.out.write("\n")
            return 0
        except KeyboardInterrupt:
            if interrupted:
                session.out.write("\n")
                return 0
            interrupted = True
            session.say("\n(Ctrl-C again, /exit or Ctrl-D quits)")
            continue
        interrupted = False
        text = line.strip()
        if not text:
            continue
        try:
            if text.startswith("/") and not text.startswith("//"):
                if not session.command(text):
                    return 0
            else:
                session.ask(text[1:] if text.startswith("//") else text)
        except _Refused as exc:
            session.say(f"nbstream: {exc}")


def _batch(session: ChatSession, messages: Iterable[str], commands: bool) -> int:
    worst = 0
    seen = False
    for raw in messages:
        text = raw.rstrip("\r\n") if commands else raw
        if not text.strip():
            continue
        seen = True
        try:
            if commands and text.startswith("/") and not text.startswith("//"):
                if not session.command(text):
                    break
                continue
            status = session.ask(text[1:] if commands and text.startswith("//") else text)
        except _Refused as exc:
            session.say(f"nbstream: {exc}")
            worst = worst or EXIT_REFUSED
            continue
        if status == "cancelled":
            return EXIT_CANCELLED  # Ctrl-C: stop reading, as the one-shot CLI does
        if status != "complete":
            worst = EXIT_FAILED
    if not seen:
        session.say(
            "nbstream chat: no message on standard input; pipe messages one per line, "
            "or run nbstream chat in a terminal"
        )
        return EXIT_REFUSED
    return worst


def _read_file(path: str) -> str:
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _load(options: argparse.Namespace) -> tuple[Any, Any, str]:
    """(model, tokenizer, a name for the banner); raises ImportError/OSError/ValueError."""
    if options.endpoint:
        from .backends.remote import Endpoint

        if not options.model:
            raise ValueError(
                "--endpoint needs --model NAME: the model the server serves "
                "(GET <URL>/models lists them)"
            )
        key = os.environ.get(options.api_key_env) or None
        server = Endpoint(options.endpoint, options.model, api_key=key)
        return server, None, f"{options.model} at {server.base_url}"
    from .models import DEFAULT_NAME, load_model

    model, tokenizer = load_model(options.model)
    return model, tokenizer, options.model or f"{DEFAULT_NAME} (the embedded default model)"


def main(argv: Sequence[str] | None = None, *, model: Any = None, tokenizer: Any = None) -> int:
    """``nbstream chat [options]``; returns the exit status.

    ``model``/``tokenizer``: chat with a model already loaded instead of ``--model``.
    """
    options = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    settings = settings_of(options)
    interactive = sys.stdin.isatty() and options.single is None
    single: str | None = None
    # Everything that needs no model is checked first: a typo is not worth a model load.
    try:
        settings = validate_settings(settings)
        system = check_system(options.system)
        if options.single == "-":
            single = check_text(sys.stdin.read(), "the message on standard input")
        elif options.single is not None:
            single = check_text(_read_file(options.single), f"the message in {options.single}")
    except (TypeError, ValueError) as exc:
        sys.stderr.write(f"nbstream chat: {exc}\n")
        return EXIT_REFUSED
    except KeyboardInterrupt:
        return EXIT_CANCELLED
    if interactive:
        sys.stderr.write("Loading the model…\n")
    try:
        if model is None:
            model, tokenizer, name = _load(options)
        else:
            name = getattr(model, "name_or_path", None) or type(model).__name__
    except ValueError as exc:
        sys.stderr.write(f"nbstream chat: {exc}\n")
        return EXIT_REFUSED
    except (ImportError, OSError) as exc:  # no default model package, no such model
        sys.stderr.write(f"nbstream chat: {exc}\n")
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_CANCELLED
    markdown = not options.plain and sys.stdout.isatty() and _markdown_available()
    session = ChatSession(
        model,
        tokenizer,
        settings,
        system,
        markdown=markdown,
        info=sys.stdout if interactive else sys.stderr,
    )
    if interactive:
        banner = (
            f"nbstream chat · {name} · /help for commands · Ctrl-C stops an answer · Ctrl-D quits"
        )
        return _interactive(session, banner)
    if single is not None:
        return _batch(session, [single], commands=False)
    try:
        return _batch(session, sys.stdin, commands=True)
    except KeyboardInterrupt:  # at a read between answers
        return EXIT_CANCELLED
