"""What the terminal front ends share: setting options, exit statuses, the metrics line.

Shared by ``nbstream "prompt"`` and ``nbstream chat``: their setting options, exit statuses and the
metrics line after an answer.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

#: The settings both take as options (``--max-new-tokens`` ...), by setting name.
SETTING_OPTIONS = (
    "max_new_tokens",
    "temperature",
    "top_p",
    "top_k",
    "repetition_penalty",
    "seed",
    "budget_s",
)


def add_setting_options(parser: argparse.ArgumentParser, budget_help: str) -> None:
    """The setting options, on ``parser``."""
    parser.add_argument("--max-new-tokens", type=int)
    parser.add_argument("--temperature", type=float)
    parser.add_argument("--top-p", type=float)
    parser.add_argument("--top-k", type=int)
    parser.add_argument("--repetition-penalty", type=float)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--budget", dest="budget_s", type=float, help=budget_help)


def settings_of(options: argparse.Namespace) -> dict[str, Any]:
    """The settings given as options (unchecked: the caller checks them)."""
    return {
        name: getattr(options, name)
        for name in SETTING_OPTIONS
        if getattr(options, name) is not None
    }


EXIT_FAILED = 1
#: Bad input (a setting, an empty message, a conversation over the context): nothing started.
EXIT_REFUSED = 2
EXIT_CANCELLED = 130  # as a shell reports a program ended by Ctrl-C


def format_metrics(metrics: Mapping[str, Any]) -> str:
    """One line: tokens, time to first token, decode rate, elapsed, finish reason."""

    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f} s"

    rate = metrics.get("tokens_per_s")
    tokens = metrics.get("tokens")
    chunks = metrics.get("text_chunks")
    if tokens is not None:
        count = f"{tokens} tokens"
    elif chunks is not None:  # a server that sent no usage: pieces of text, not tokens
        count = f"{chunks} chunks (no token count)"
    else:
        count = "- tokens"
    parts = [
        count,
        f"first token {seconds(metrics.get('ttft_s'))}",
        f"{rate:.1f} tok/s" if rate is not None else "- tok/s",
        f"elapsed {seconds(metrics.get('elapsed_s'))}",
        f"finish {metrics.get('finish_reason') or '-'}",
    ]
    return " · ".join(parts)
