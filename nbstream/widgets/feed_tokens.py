"""The tokens a widget's teaching views list: what :class:`~.feed.RunFeed` sends of them, and when.

One :class:`TokenFeed` per feed. While a token view is on (the widget's ``token_options``
says so), the views get each run's tokens in ``tokens`` messages: from offset 0 to replace
their list (a view turned on or synced, a run that ended at a stop string, whose tokens that
made the stop string are then marked), or from what they already have. A local run's tokens
are its ids (with its trace's records once they exist); a server run's are its trace's
records. The messages are defined in ``PROTOCOL.md``.

Every method is called with the widget's lock held, as the feed calls them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from .._tokens import TokenPieces, server_token_entries, token_entries
from ..generation import Generation
from ..protocol import FeedMessage, TokenEntry, TokensMessage
from ..streaming import DECODE_OPTIONS
from ..trace import RemoteTrace

__all__ = ["TokenFeed", "TokenOptions", "token_count"]

#: What the teaching views need now: ``None`` while no token view is on (nothing about
#: tokens is sent), else whether the candidates (alternatives) are shown.
TokenOptions = Callable[[], bool | None]


def token_count(run: Generation) -> int:
    """How many tokens of ``run`` the views can list.

    Its ids, or, on a server (no ids), the records of its trace. Asked on every tick of the feed: a
    local run's count is its ids alone (reading its trace would build records, moving rows off the
    model's device).

    Args:
        run: A run.

    Returns:
        The count.

    Example:
        >>> token_count(run) == len(run.token_ids)
        True
    """
    ids = run.token_ids
    if ids:
        return len(ids)
    trace = run.trace
    return len(trace) if isinstance(trace, RemoteTrace) else 0


class TokenFeed:
    """The tokens of a widget's runs, for its teaching views (see the module docstring).

    Args:
        send: Sends one custom message to every view.
        is_open: Whether the widget still has views to send to (its comm).
        tokenizer: The model's tokenizer (the tokens' texts).
        token_options: What the teaching views need now (``None``: none is on).

    Example:
        >>> tokens = TokenFeed(send=send, is_open=lambda: True, tokenizer=tokenizer,
        ...                    token_options=lambda: False)
        >>> tokens.send_from(run, 1, 0)  # every token of run 1, replacing the views' list
        5
    """

    def __init__(
        self,
        *,
        send: Callable[[FeedMessage], None],
        is_open: Callable[[], bool],
        tokenizer: Any,
        token_options: TokenOptions,
    ) -> None:
        self._send = send
        self._is_open = is_open
        self._tokenizer = tokenizer
        self._token_options = token_options
        self._pieces: TokenPieces | None = None
        #: Tokens of the current run already sent in ``tokens`` messages (while a view is on).
        self.sent = 0
        self._answer_counts: dict[int, tuple[Generation, int]] = {}

    def use_tokenizer(self, tokenizer: Any) -> None:
        """The tokens' texts come from ``tokenizer`` from now on (another model's runs).

        Args:
            tokenizer: The new model's tokenizer.
        """
        self._tokenizer = tokenizer
        self._pieces = None

    def shown(self) -> bool:
        """Whether a token view is on (else nothing about tokens is sent)."""
        return self._token_options() is not None

    def behind(self, run: Generation) -> bool:
        """Whether the views should get tokens of the current run ``run`` not yet sent."""
        return self.shown() and token_count(run) > self.sent

    def send_all(self, runs: list[tuple[int, Generation]], current: int) -> None:
        """Every run's tokens in full (a view turned on, or a view synced).

        Args:
            runs: The shown runs, with their run ids.
            current: The current run's id (its count of tokens sent is kept).
        """
        for run_id, run in runs:
            sent = self.send_from(run, run_id, 0)
            if run_id == current:
                self.sent = sent

    def send_new(self, run: Generation, run_id: int) -> None:
        """The current run's tokens the views have not had."""
        if not self.shown() or not self._is_open():
            return
        if self.sent == 0 and not token_count(run):
            return  # nothing yet (an offset-0 message would be a needless replace)
        self.sent = self.send_from(run, run_id, self.sent)

    def mark_stop(self, run: Generation, run_id: int) -> None:
        """A run that ended at a stop string: the views get its tokens again.

        Those that made the stop string are marked.
        """
        if self.shown() and self._is_open() and self._answer_tokens(run, run.token_ids) is not None:
            self.sent = self.send_from(run, run_id, 0)

    def pull(self, run: Generation, run_id: int, have: int) -> list[TokensMessage]:
        """The current run's ``tokens`` a view that holds ``have`` of them lacks (a ``pull``).

        Args:
            run: The current run.
            run_id: Its id.
            have: How many of its tokens the view holds.

        Returns:
            No message, or one: from ``have`` on, or from 0 when the view holds more than
            there are.
        """
        if not self.shown():
            return []
        count = token_count(run)
        start = have if have <= count else 0
        if start < count or start == 0 < have:
            return [self.message(run, run_id, start)[0]]
        return []

    def all_messages(self, runs: list[tuple[int, Generation]]) -> list[TokensMessage]:
        """Every shown run's tokens from 0, for a view that resets (none while no view is on)."""
        if not self.shown():
            return []
        return [self.message(run, run_id, 0)[0] for run_id, run in runs]

    def send_from(self, run: Generation, run_id: int, start: int) -> int:
        """Send ``run``'s tokens from ``start`` on; returns how many the views now have.

        ``start`` 0: the views replace their list, even with an empty one. With a trace, only tokens
        whose records exist are sent (a record is made before its token is read).
        """
        message, stop = self.message(run, run_id, start)
        if stop > start or start == 0:
            self._send(message)
        return max(stop, start)

    def message(self, run: Generation, run_id: int, start: int) -> tuple[TokensMessage, int]:
        """``run``'s tokens from ``start`` on, and how many the views then have."""
        trace = run.trace
        if isinstance(trace, RemoteTrace):
            return self._server_message(trace, run_id, start)
        ids = run.token_ids
        stop = len(ids) if trace is None else min(len(ids), len(trace))
        stop = max(stop, start)
        if self._pieces is None:
            self._pieces = TokenPieces(self._tokenizer)
        with_alternatives = bool(self._token_options())
        tokens = token_entries(self._pieces, ids, trace, start, stop, with_alternatives)
        answer = self._answer_tokens(run, ids)
        if answer is not None:
            for index, entry in enumerate(tokens, start):
                entry.append(index >= answer)
        message: TokensMessage = {
            "type": "tokens",
            "run_id": run_id,
            "offset": start,
            "tokens": cast("list[TokenEntry]", tokens),
        }
        thinking = run.metrics["thinking_tokens"]
        if thinking is not None:
            # A reasoning model's: its first `thinking` tokens (tags included) are thinking.
            message["thinking"] = thinking
        return message, stop

    def _server_message(
        self, trace: RemoteTrace, run_id: int, start: int
    ) -> tuple[TokensMessage, int]:
        """A server run's tokens from ``start`` on, from its trace (it has no token ids).

        The records the server sent so far, and how many the views then have.
        """
        stop = max(len(trace), start)
        tokens = server_token_entries(trace, start, stop, bool(self._token_options()))
        entries = cast("list[TokenEntry]", tokens)
        return {"type": "tokens", "run_id": run_id, "offset": start, "tokens": entries}, stop

    def _answer_tokens(self, run: Generation, ids: list[int]) -> int | None:
        """How many tokens made the answer of a run that ended at a stop string, else None.

        The text is cut before the stop string, but the tokens that made it were generated:
        the views show them marked. Found once per run by bisecting on the decoded length.
        """
        if not run.done or run.metrics.get("finish_reason") != "stop" or not ids:
            return None  # (no ids: a server's run, which the server itself cut at its stop)
        cached = self._answer_counts.get(id(run))
        if cached is not None and cached[0] is run:
            return cached[1]
        # The most tokens whose text stays within the answer (a token that holds the
        # answer's last characters and the stop string's first is the stop string's).
        target = len(run.partial_text)
        # A reasoning model's answer comes after its thinking tokens and the blank text
        # between the two (neither is in the answer).
        first = run.metrics["thinking_tokens"] or 0
        low, high = first, len(ids)
        while low < high:
            middle = (low + high + 1) // 2
            text = self._tokenizer.decode(ids[first:middle], **DECODE_OPTIONS)
            if len(text.lstrip() if first else text) <= target:
                low = middle
            else:
                high = middle - 1
        self._answer_counts = {id(run): (run, low)}  # one run at a time is enough
        return low
