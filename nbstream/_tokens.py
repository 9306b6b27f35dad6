"""A token's text, how the teaching views show it, and the ``tokens`` messages that carry it.

:class:`TokenPieces` is the one owner of "a token's text": ``run.trace[i].text`` (and each
alternative's) and the token views both read it there. A token's text is that token
decoded on its own, special tokens shown, with the leading space a SentencePiece piece
marks (``"▁world"``) kept although such decoders drop it from a lone token.

A token decoded on its own is not always text: a byte-level tokenizer splits a character
outside its base vocabulary (an emoji, many CJK characters) into tokens that each hold
only some of its UTF-8 bytes, and decoding one of those alone gives U+FFFD. The view
shows such a token as its bytes in hex (kind ``"bytes"``; its text keeps the U+FFFD), a
special token as itself (kind ``"special"``), and every other token as its text (kind
``"text"``).

A token of a message is ``[id, text, kind, logprob, rank, alternatives]``; see
``js/src/stream.js`` (the protocol comment) for what the views do with it.
"""

from __future__ import annotations

import logging
import math
from typing import Any

logger = logging.getLogger(__name__)

# Decimals of a log-probability on the wire: 1e-4 in log space is 0.01 % of the
# probability, finer than any view shows.
_LOGPROB_DECIMALS = 4


def _byte_decoder() -> dict[str, int] | None:
    """The inverse of GPT-2's byte-to-unicode alphabet (byte-level BPE), or None."""
    try:
        from transformers.convert_slow_tokenizer import bytes_to_unicode
    except ImportError:  # moved in some transformers version: show such tokens as text
        return None
    return {char: byte for byte, char in bytes_to_unicode().items()}


class TokenPieces:
    """Each token id's text and how the views show it, computed once per id.

    ``text(id)`` is the token's text (see the module docstring); calling it gives what a
    view shows, ``(shown, kind)``: the text itself, or a byte piece's bytes in hex. Read on
    the reader's side (any thread: a race only decodes an id twice).
    """

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        # token id -> (text, shown, kind)
        self._cache: dict[int, tuple[str, str, str]] = {}
        self._special = {int(i) for i in (getattr(tokenizer, "all_special_ids", None) or ())}
        self._bytes_of: dict[str, int] | None = None
        self._bytes_loaded = False

    def text(self, token_id: int) -> str:
        """The token's text: decoded on its own, special tokens and a marked space kept."""
        return self._entry(token_id)[0]

    def __call__(self, token_id: int) -> tuple[str, str]:
        """``(shown, kind)``: what a view shows for the token, and as what."""
        _text, shown, kind = self._entry(token_id)
        return shown, kind

    def _entry(self, token_id: int) -> tuple[str, str, str]:
        entry = self._cache.get(token_id)
        if entry is None:
            entry = self._compute(token_id)
            self._cache[token_id] = entry
        return entry

    def _compute(self, token_id: int) -> tuple[str, str, str]:
        tokenizer = self._tokenizer
        text = str(
            tokenizer.decode(
                [token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
        )
        if token_id in self._special:
            return text, text, "special"
        if not text.startswith(" "):
            # SentencePiece decoders drop the leading space of a text's first token, so a
            # token decoded alone loses it; its piece still says so ("▁world").
            piece = tokenizer.convert_ids_to_tokens(token_id)
            if isinstance(piece, str) and piece.startswith("\u2581"):
                text = " " + text
        if "\ufffd" in text:
            raw = self._raw_bytes(token_id)
            if raw is not None:
                try:
                    raw.decode("utf-8")  # a real U+FFFD in the vocabulary is text
                except UnicodeDecodeError:
                    return text, " ".join(f"{b:02x}" for b in raw), "bytes"
        return text, text, "text"

    def _raw_bytes(self, token_id: int) -> bytes | None:
        """The token's bytes: a byte-fallback ``<0xE2>`` piece or a byte-level BPE piece."""
        piece = self._tokenizer.convert_ids_to_tokens(token_id)
        if not isinstance(piece, str):
            return None
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            try:
                return bytes([int(piece[3:5], 16)])
            except ValueError:
                return None
        if not self._bytes_loaded:
            self._bytes_of = _byte_decoder()
            self._bytes_loaded = True
        table = self._bytes_of
        if table is None or any(char not in table for char in piece):
            return None
        return bytes(table[char] for char in piece)


def _logprob(value: float) -> float | None:
    # JSON has no infinities: a probability that underflowed is sent as unknown.
    return round(value, _LOGPROB_DECIMALS) if math.isfinite(value) else None


def token_entries(
    pieces: TokenPieces,
    ids: list[int],
    trace: list[Any] | None,
    start: int,
    stop: int,
    alternatives: bool,
) -> list[list[Any]]:
    """The message entries of tokens ``start:stop`` (``trace``: the run's, or None)."""
    entries: list[list[Any]] = []
    for index in range(start, stop):
        token_id = ids[index]
        text, kind = pieces(token_id)
        logprob: float | None = None
        rank: int | None = None
        alts: list[list[Any]] | None = None
        if trace is not None:
            step = trace[index]
            logprob, rank = _logprob(step.logprob), step.rank
            if alternatives:
                alts = [
                    [alt_id, *pieces(alt_id), _logprob(alt_logprob), cut]
                    for alt_id, alt_logprob, cut in zip(
                        step.alternative_ids, step.alternative_logprobs, step.cut, strict=True
                    )
                ]
        entries.append([token_id, text, kind, logprob, rank, alts])
    return entries


# -- a run on a server (nbstream.Endpoint with alternatives=k) -------------------------------
def server_token_entries(
    trace: list[Any], start: int, stop: int, alternatives: bool
) -> list[list[Any]]:
    """The message entries of records ``start:stop`` of a server run's trace.

    For :class:`nbstream.trace.RemoteTrace`: the server's texts and numbers, no ids (a server sends
    none), and each alternative's ``cut`` null (a server does not say which of them its settings
    ruled out): ``[null, text, kind, logprob, rank, alternatives]``.
    """
    entries: list[list[Any]] = []
    for record in trace[start:stop]:
        alts: list[list[Any]] | None = None
        if alternatives:
            alts = [
                [None, *_server_piece(alt.text, None), _logprob(alt.logprob), None]
                for alt in record.alternatives
            ]
        text, kind = _server_piece(record.text, record.bytes)
        entries.append([None, text, kind, _logprob(record.logprob), record.rank, alts])
    return entries


def _server_piece(text: str, raw: tuple[int, ...] | None) -> tuple[str, str]:
    """``(shown, kind)`` of a server's token.

    ``shown`` is its text, or, for a token that holds part of a character (its bytes, when the
    server sent them, are no UTF-8 of their own), the bytes in hex, as a local token's byte piece is
    shown.
    """
    if raw is not None:
        try:
            bytes(raw).decode("utf-8")
        except (UnicodeDecodeError, ValueError):
            return " ".join(f"{b:02x}" for b in raw), "bytes"
    return text, "text"
