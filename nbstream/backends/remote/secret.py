"""An Endpoint's API key: sent with each request, and blotted out of everything shown.

A server may echo what it was sent, an HTTP library may quote the header it refused, a URL
may carry credentials: what a run keeps or shows of them (its record, its errors, its
warnings, the log) passes through :class:`Credentials` first.
"""

from __future__ import annotations

import hashlib
import html
import re
import urllib.parse
from typing import Any

__all__ = ["SCRUB_RUN", "Credentials", "checked_key", "safe_url"]

#: The most of a server's text that is scrubbed for a quote of ``limit`` characters: this
#: many times the limit (blotting out the key shortens the text, never below a half).
_QUOTE_WINDOW = 4
#: The shortest run of an API key's characters that is blotted out wherever it appears.
#: A cut (nbstream's own, a server's, a log's) can leave any prefix or suffix of a key, so
#: every piece of 6 or more of its characters goes, in every form it can be written in,
#: and at most 5 characters of a key can survive next to a cut: for the usual key formats
#: (``sk-proj-…``, ``hf_…``, ``gsk_…``) that is the public prefix that only names the kind
#: of key, less than providers show themselves (OpenAI's own errors show the last 4).
#: Shorter runs would blot out ordinary words of messages by chance; 6 random key
#: characters turn up by chance in a 500-character message with odds of about 1 in 5 million.
SCRUB_RUN = 6
#: ASCII-only lowercasing: keeps the length, so positions in the folded text are positions
#: in the original (``str.lower`` can lengthen non-ASCII text).
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_BLOT = "***"


class _Secret:
    """Holds the API key so that no ``repr``, ``vars`` dump or log line can show it.

    It also blots the key out of text (:meth:`scrub`).
    """

    __slots__ = ("_runs", "_short", "_value")

    def __init__(self, value: str) -> None:
        self._value = value
        # Every way the key can be written into text: as it is, escaped by Python's repr
        # (str or bytes, either quote) or JSON (the solidus escaped too, as some servers do),
        # percent-encoded (query string or form), HTML-escaped.
        escaped = value.replace("\\", "\\\\")
        forms = {
            value,
            escaped,
            escaped.replace("'", "\\'"),
            escaped.replace('"', '\\"'),
            escaped.replace('"', '\\"').replace("/", "\\/"),
            urllib.parse.quote(value, safe=""),
            urllib.parse.quote(value),
            urllib.parse.quote_plus(value, safe=""),
            html.escape(value),
        }
        folded = {form.translate(_ASCII_LOWER) for form in forms}
        self._runs = frozenset(
            form[i : i + SCRUB_RUN] for form in folded for i in range(len(form) - SCRUB_RUN + 1)
        )
        # A key shorter than a run is blotted out whole, where it stands on its own (not
        # inside a longer word: a 3-character key would otherwise blot out half a message).
        self._short = (
            re.compile(
                r"(?<![A-Za-z0-9])(?:"
                + "|".join(re.escape(form) for form in sorted(forms, key=len, reverse=True))
                + r")(?![A-Za-z0-9])",
                re.IGNORECASE,
            )
            if len(value) < SCRUB_RUN
            else None
        )

    def reveal(self) -> str:
        return self._value

    def fingerprint(self) -> str:
        """A digest that tells keys apart without holding them (cache keys)."""
        return hashlib.sha256(self._value.encode("utf-8", "surrogatepass")).hexdigest()

    def scrub(self, text: str) -> str:
        """``text`` without any piece of the key (see ``SCRUB_RUN``), each blotted out."""
        if self._short is not None:
            return self._short.sub(_BLOT, text)
        # Again until nothing changes: with a key that holds the blot's own characters, a
        # blot and its neighbours could make a new piece. Each pass shortens the text.
        while True:
            scrubbed = self._blot(text)
            if scrubbed == text:
                return text
            text = scrubbed

    def _blot(self, text: str) -> str:
        folded = text.translate(_ASCII_LOWER)
        spans: list[list[int]] = []
        for i in range(len(folded) - SCRUB_RUN + 1):
            if folded[i : i + SCRUB_RUN] in self._runs:
                if spans and spans[-1][1] >= i:
                    spans[-1][1] = i + SCRUB_RUN
                else:
                    spans.append([i, i + SCRUB_RUN])
        if not spans:
            return text
        parts, at = [], 0
        for start, end in spans:
            parts += [text[at:start], _BLOT]
            at = end
        parts.append(text[at:])
        return "".join(parts)

    def __repr__(self) -> str:
        return "'***'"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("an Endpoint's API key is not pickled; create the Endpoint again")


class Credentials:
    """An Endpoint's API key, or none: what a request sends, and what nothing shown may hold.

    Args:
        api_key (str | None): The key (checked by :func:`checked_key`), or None.

    Example:
        >>> credentials = Credentials("sk-nbstream-0123456789")
        >>> credentials.scrub("the key sk-nbstream-0123456789 was refused")
        'the key *** was refused'
    """

    __slots__ = ("_key",)

    def __init__(self, api_key: str | None) -> None:
        self._key = _Secret(api_key) if api_key else None

    @property
    def keyed(self) -> bool:
        """Whether there is a key."""
        return self._key is not None

    def fingerprint(self) -> str | None:
        """A digest that tells keys apart without holding them (cache keys); None: no key."""
        return None if self._key is None else self._key.fingerprint()

    def authorization(self) -> dict[str, str]:
        """The request header that carries the key (none without one)."""
        if self._key is None:
            return {}
        return {"Authorization": f"Bearer {self._key.reveal()}"}

    def scrub(self, text: str) -> str:
        """``text`` with every piece of the API key blotted out.

        A server may echo what it was sent, an HTTP library may quote the header it refused.
        """
        return text if self._key is None else self._key.scrub(text)

    def quote(self, text: str, limit: int) -> str:
        """At most ``limit`` characters of a server's ``text`` for a message, scrubbed first.

        Scrubbed first, so that the cut cannot leave a piece of the key too short for the scrub to
        see.

        Only the start is scrubbed (``_QUOTE_WINDOW`` times the limit: a body or an event
        may be a megabyte, and the scrub is Python). A key the window's end cuts may leave
        a piece too short to be recognized at the end of what was scrubbed: that end is
        dropped, as far as such a piece can reach.
        """
        window = _QUOTE_WINDOW * limit + SCRUB_RUN
        if len(text) <= window:
            shown = self.scrub(text)
            cut = len(shown) > limit
        else:
            shown = self.scrub(text[:window])[: -(SCRUB_RUN - 1)]
            cut = True
        return shown[:limit] + "…" if cut else shown

    def __repr__(self) -> str:
        return "Credentials(api_key='***')" if self._key is not None else "Credentials(None)"

    def __reduce__(self) -> Any:
        if self._key is not None:
            raise TypeError("an Endpoint's API key is not pickled; create the Endpoint again")
        return (Credentials, (None,))


def checked_key(api_key: Any) -> str:
    """The key to send: surrounding whitespace dropped.

    Refused (without quoting it) if it has a character an HTTP header cannot carry.
    """
    if not isinstance(api_key, str):
        raise TypeError(f"api_key must be a str or None, got {type(api_key).__name__}")
    # A key read from a file ends in a newline; one pasted may have spaces around it.
    key = api_key.strip()
    for position, char in enumerate(key, start=1):
        if " " <= char <= "~":
            continue
        control = char < " " or "\x7f" <= char <= "\x9f"
        kind = "a control character" if control else "a non-ASCII character"
        raise ValueError(
            f"api_key has {kind} inside it (character {position} of {len(key)}), which an "
            "HTTP header cannot carry: copy the key again (only the whitespace around it is "
            "dropped)"
        )
    return key


def safe_url(url: str) -> str:
    """``url`` without credentials or query string (where keys sometimes travel)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<invalid URL>"
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))
