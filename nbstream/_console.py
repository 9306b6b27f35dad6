"""What the terminal front ends (``nbstream "prompt"`` and ``nbstream chat``) say alike:
their exit statuses and the metrics line after an answer."""

from __future__ import annotations

from typing import Any

EXIT_FAILED = 1
#: Bad input (a setting, an empty message, a conversation over the context): nothing started.
EXIT_REFUSED = 2
EXIT_CANCELLED = 130  # as a shell reports a program ended by Ctrl-C


def format_metrics(metrics: dict[str, Any]) -> str:
    """One line: tokens, time to first token, decode rate, elapsed, finish reason."""

    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f} s"

    rate = metrics.get("tokens_per_s")
    parts = [
        f"{metrics.get('tokens') if metrics.get('tokens') is not None else '-'} tokens",
        f"first token {seconds(metrics.get('ttft_s'))}",
        f"{rate:.1f} tok/s" if rate is not None else "- tok/s",
        f"elapsed {seconds(metrics.get('elapsed_s'))}",
        f"finish {metrics.get('finish_reason') or '-'}",
    ]
    return " · ".join(parts)
