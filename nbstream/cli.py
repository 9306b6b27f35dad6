"""The terminal front end.

``python -m nbstream "prompt"``, ``chat``, ``prepare`` and ``doctor``.

Streams with the same engine as the widgets, ends with the state and a metrics line, and
exits non-zero when the run failed (1) or was cancelled (130, as for Ctrl-C).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ._console import (
    EXIT_CANCELLED,
    EXIT_FAILED,
    EXIT_REFUSED,
    add_setting_options,
    format_metrics,
    settings_of,
)

__all__ = ["EXIT_CANCELLED", "EXIT_FAILED", "EXIT_REFUSED", "format_metrics", "main", "prepare"]


def _say(line: str) -> None:
    """A status line for the person at the terminal (stderr: stdout carries the text)."""
    sys.stderr.write(line + "\n")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nbstream",
        description="Stream a language model's answer to the terminal. "
        "`nbstream chat` starts a conversation (see nbstream chat --help); "
        "`nbstream prepare` converts the embedded default model ahead of time; "
        "`nbstream doctor` checks what nbstream needs here.",
    )
    parser.add_argument("prompt", help="the prompt (or `chat`, `prepare` or `doctor`)")
    parser.add_argument("--model", help="hub id or folder (default: the embedded SmolLM2-135M)")
    add_setting_options(parser, "wall-clock budget, seconds")
    return parser


def prepare() -> int:
    """Print the default model's folder, converting it if needed; exit 1 if it is missing."""
    from .models import DefaultModelMissing, default_model_dir

    try:
        folder = default_model_dir()
    except DefaultModelMissing as exc:
        _say(f"nbstream: {exc}")
        return EXIT_FAILED
    sys.stdout.write(f"{folder}\n")
    return 0


def doctor() -> int:
    """Print nbstream.doctor()'s report; exit 1 if it found a problem."""
    from .doctor import doctor as check

    checkup = check()
    sys.stdout.write(f"{checkup}\n")
    return 0 if checkup.ok else EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` names (default: the command line); returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["prepare"]:
        return prepare()
    if args == ["doctor"]:
        return doctor()
    if args[:1] == ["chat"]:
        # Imported here: the one-shot path does not need the chat's modules.
        from .terminal import main as chat

        return chat(args[1:])
    options = _parser().parse_args(args)

    from .backends.local import check_prompt
    from .generation import GenerationError, stream
    from .models import load_model
    from .settings import validate_settings

    settings = settings_of(options)
    # Check what needs no model first: a typo should not wait for a model load (or the
    # default model's first conversion) to be reported.
    try:
        validate_settings(settings)
        check_prompt(options.prompt)
    except (TypeError, ValueError) as exc:
        _say(f"nbstream: {exc}")
        return EXIT_REFUSED
    try:
        model, tokenizer = load_model(options.model)
    except (ImportError, OSError) as exc:  # no default model package, no such model
        _say(f"nbstream: {exc}")
        return EXIT_FAILED
    try:
        run = stream(model, tokenizer, options.prompt, **settings)
    except (TypeError, ValueError) as exc:
        _say(f"nbstream: {exc}")
        return EXIT_REFUSED
    try:
        try:
            for chunk in run:
                sys.stdout.write(chunk)
                sys.stdout.flush()
        except KeyboardInterrupt:
            run.stop()
            run.join(10)
    except GenerationError:
        pass
    sys.stdout.write("\n")
    status = run.status
    label = status if status == "complete" else f"{status} (partial output above)"
    if status == "failed" and run.error is not None:
        label += f": {type(run.error).__name__}: {run.error}"
    _say(f"[{label}] {format_metrics(run.metrics)}")
    return {"complete": 0, "cancelled": EXIT_CANCELLED}.get(status, EXIT_FAILED)
