"""Where a CompareWidget's columns part, and the marks that say so in each column.

Columns whose models share a tokenizer are compared by token ids; others (different
tokenizers, a server that sends no ids, recordings) by their answers' text
(:class:`TextDivergence`). :class:`DivergenceMarks` writes each column's ``compare_mark``
once every column has ended; its words need the model's odds at that step (one forward
pass), computed on a thread of their own, and a newer state of the columns makes them stale.

Example:
    >>> text_divergence_words(TextDivergence(3, [" red", " blue"], [1, 1]))[0]
    "Answers part at character 4: this column has ' red'; the other has ' blue'"
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ..generation import QUEUED, RUNNING, Generation
from .compare_column import CompareColumn

__all__ = [
    "DivergenceMarks",
    "TextDivergence",
    "divergence_words",
    "divergence_words_by_model",
    "text_divergence",
    "text_divergence_words",
]

logger = logging.getLogger(__name__)


def divergence_words(
    runs: Sequence[Any], tokenizer: Any, step: int, tokens: Sequence[int | None]
) -> list[str]:
    """Each column's line for where the columns part.

    From ``cw.divergence``'s ``step`` and ``tokens``, e.g. ``"Columns part at token 12: this column
    took ' red' (41%); the others took ' blue' (22%)"``. The probabilities are the model's own at
    that step (the same for every column: same prompt, same tokens before it), from one forward
    pass; without a local model, from the runs' traces, or none.
    """
    from .._tokens import TokenPieces

    pieces = TokenPieces(tokenizer) if tokenizer is not None else None
    probs: dict[int, float] = {}
    reached = [run for run in runs if run is not None and len(run.token_ids) > step]
    try:
        d = reached[0].distribution(step, temperature=1.0, top_k=0, top_p=1.0)
        probs = {t: d.prob(t, "model") for t in tokens if t is not None}
    except Exception as exc:
        if not isinstance(exc, (ValueError, TypeError, IndexError)):
            # Not "no logits here" (a model server) but a failure (out of memory): said in
            # the log; the words go on without the model's odds.
            logger.warning(
                "nbstream: the model's odds where the compare columns part failed: %s: %s",
                type(exc).__name__,
                exc,
                exc_info=True,
            )
        # A captured trace still knows each column's own pick.
        for run, token in zip(runs, tokens, strict=True):
            trace = getattr(run, "trace", None) if token is not None else None
            if trace is not None and len(trace) > step and token is not None:
                probs[token] = trace[step].prob

    def said(token: int | None) -> str:
        if token is None:
            return "nothing (its answer had ended)"
        text = pieces.text(token) if pieces is not None else str(token)
        odds = f" ({probs[token]:.0%})" if token in probs else ""
        return f"{text!r}{odds}"

    lines = []
    for i, token in enumerate(tokens):
        others = [said(t) for j, t in enumerate(tokens) if j != i]
        mine = (
            "this column's answer had ended" if token is None else f"this column took {said(token)}"
        )
        lines.append(
            f"Columns part at token {step + 1}: {mine}; "
            f"the other{'s' if len(others) > 1 else ''} took {', '.join(others)}"
        )
    return lines


class TextDivergence(NamedTuple):
    """Where columns whose tokens cannot be compared part: by text.

    Columns on models with different tokenizers (or a server that sends no token ids) are
    compared by their answers' text: ``char`` is the first character (0-based) at which they
    differ; ``tokens`` each column's token there, as text (a server's column without token
    ids: the word from there), ``None`` for an answer that had ended; ``steps`` that token's
    step (0-based) in its column, ``None`` where unknown.

    Example:
        >>> cw.divergence
        TextDivergence(char=14, tokens=[' red', ' blue'], steps=[3, 4])
    """

    char: int
    tokens: list[str | None]
    steps: list[int | None]


def _tokenizer_key(tokenizer: Any) -> Any:
    """What two columns' tokenizers must share for their token ids to be compared."""
    if tokenizer is None:
        return None
    name = getattr(tokenizer, "name_or_path", None)
    try:
        size = len(tokenizer)
    except TypeError:
        return None
    return (name, size) if name else id(tokenizer)


def _token_at(run: Generation, tokenizer: Any, text: str, char: int) -> tuple[str, int | None]:
    """The token of ``run`` covering character ``char`` of ``text``, and its step."""
    ids = run.token_ids
    if ids and tokenizer is not None:
        with contextlib.suppress(Exception):  # a tokenizer that cannot decode: the word
            low, high = 0, len(ids) - 1
            while low < high:  # the first prefix longer than char ends with that token
                middle = (low + high) // 2
                if len(tokenizer.decode(ids[: middle + 1], skip_special_tokens=True)) > char:
                    high = middle
                else:
                    low = middle + 1
            return str(tokenizer.decode([ids[low]], skip_special_tokens=True)), low
    trace = run.trace
    if trace is not None:
        seen = 0
        for step, entry in enumerate(trace):
            piece = str(getattr(entry, "text", "") or "")
            if seen + len(piece) > char:
                return piece, step
            seen += len(piece)
    rest = text[char:]
    end = next((i for i, c in enumerate(rest) if c.isspace() and i > 0), len(rest))
    return rest[:end], None


def text_divergence(runs: Sequence[Generation], tokenizers: Sequence[Any]) -> TextDivergence | None:
    """Where the runs' texts part (see :class:`TextDivergence`); ``None`` while they agree.

    Args:
        runs: One run per column.
        tokenizers: Each column's tokenizer (``None``: a server's).

    Returns:
        The first character where the texts differ, with each column's token there.

    Example:
        >>> text_divergence([run_a, run_b], [tokenizer_a, None])
    """
    done = [run.done for run in runs]
    texts = [run.partial_text for run in runs]
    going = [len(t) for t, ended in zip(texts, done, strict=True) if not ended]
    longest = min(going) if going else max((len(t) for t in texts), default=0)
    for char in range(longest):
        chars = [t[char] if char < len(t) else None for t in texts]
        if len(set(chars)) > 1:
            tokens: list[str | None] = []
            steps: list[int | None] = []
            for run, tokenizer, text in zip(runs, tokenizers, texts, strict=True):
                if char >= len(text):
                    tokens.append(None)
                    steps.append(None)
                    continue
                token, step = _token_at(run, tokenizer, text, char)
                tokens.append(token)
                steps.append(step)
            return TextDivergence(char, tokens, steps)
    return None


def _own_odds(run: Any, step: int, token: int | None) -> float | None:
    """The probability ``run``'s own model gave ``token`` at ``step``, where it can say."""
    if run is None or token is None:
        return None
    try:
        return float(
            run.distribution(step, temperature=1.0, top_k=0, top_p=1.0).prob(token, "model")
        )
    except (ValueError, TypeError, IndexError, NotImplementedError):
        trace = getattr(run, "trace", None)  # a server's run: its captured logprobs, if any
        return trace[step].prob if trace is not None and len(trace) > step else None


def divergence_words_by_model(
    runs: Sequence[Any], tokenizer: Any, step: int, tokens: Sequence[int | None]
) -> list[str]:
    """Each column's line for where columns on different models (one tokenizer) part.

    As :func:`divergence_words`, but each token's probability is its own column's model's:
    different models give the same token different odds, so one model's would mislead.

    Args:
        runs: One run per column.
        tokenizer: The columns' shared tokenizer.
        step: Where they part (0-based).
        tokens: Each column's token id there (``None``: its answer had ended).

    Returns:
        One line per column, e.g. ``"Columns part at token 3: this column took ' red' (41% to
        its model); the other took ' blue' (22% to its model)"``.

    Example:
        >>> divergence_words_by_model(runs, tokenizer, *cw.divergence)
    """
    from .._tokens import TokenPieces

    pieces = TokenPieces(tokenizer) if tokenizer is not None else None
    odds = [_own_odds(run, step, token) for run, token in zip(runs, tokens, strict=True)]

    def said(i: int) -> str:
        token = tokens[i]
        if token is None:
            return "nothing (its answer had ended)"
        text = pieces.text(token) if pieces is not None else str(token)
        p = odds[i]
        return f"{text!r}" + (f" ({p:.0%} to its model)" if p is not None else "")

    lines = []
    for i, token in enumerate(tokens):
        others = [said(j) for j in range(len(tokens)) if j != i]
        mine = "this column's answer had ended" if token is None else f"this column took {said(i)}"
        lines.append(
            f"Columns part at token {step + 1}: {mine}; "
            f"the other{'s' if len(others) > 1 else ''} took {', '.join(others)}"
        )
    return lines


def text_divergence_words(found: TextDivergence) -> list[str]:
    """Each column's line for where the answers part by text.

    Args:
        found: Where they part.

    Returns:
        e.g. ``"Answers part at character 15: this column has ' red'; the other has ' blue'"``.

    Example:
        >>> text_divergence_words(cw.divergence)
    """

    def said(token: str | None) -> str:
        return "nothing (its answer had ended)" if token is None else repr(token)

    lines = []
    for i, token in enumerate(found.tokens):
        others = [said(t) for j, t in enumerate(found.tokens) if j != i]
        mine = (
            "this column's answer had ended" if token is None else f"this column has {said(token)}"
        )
        lines.append(
            f"Answers part at character {found.char + 1}: {mine}; "
            f"the other{'s' if len(others) > 1 else ''} {'have' if len(others) > 1 else 'has'} "
            f"{', '.join(others)}"
        )
    return lines


Divergence = tuple[int, list[int | None]] | TextDivergence


class DivergenceMarks:
    """Where a compare's columns part, and each column's ``compare_mark`` that says so.

    Args:
        columns: The compare's columns, left to right (read as they are at each call).
        lock: The compare's lock over its columns' shared state.
        tokenizer: The tokenizer of the words (the first column's).
        one_model: Whether every column runs one model object: then its odds speak for
            every column where they part (a model and its adapter are two: their odds
            differ).
        replays: Which columns replay a recording (recordings compare by text).

    Example:
        >>> marks = DivergenceMarks(columns, threading.RLock(), tokenizer, one_model=True,
        ...                         replays=[False, False])
        >>> marks.find()
        (3, [2266, 4277])
    """

    def __init__(
        self,
        columns: list[CompareColumn],
        lock: threading.RLock,
        tokenizer: Any,
        *,
        one_model: bool,
        replays: list[bool],
    ) -> None:
        self._columns = columns
        self._lock = lock
        self._tokenizer = tokenizer
        self._one_model = one_model
        self._replays = replays
        # +1 at every change of the columns' runs (under the lock): marks computed for an
        # older state are stale and never written.
        self._generation = 0
        # The threads computing marks (each one forward pass): wait() returns after them.
        self._threads: list[threading.Thread] = []

    def threads(self) -> list[threading.Thread]:
        """The threads computing marks now (``cw.wait()`` joins them)."""
        with self._lock:
            return list(self._threads)

    def find(self) -> Divergence | None:
        """Where the columns part: ``None`` while they agree (or a column has no run yet).

        Columns whose models share a tokenizer are compared by token ids: ``(step, tokens)``,
        the first step at which the ids are not all equal and each column's id there, in column
        order (``None`` for a column whose answer had already ended). Columns on different
        tokenizers, or on a server that sends no token ids, are compared by text: a
        :class:`TextDivergence` (the first character where the answers differ, and each
        column's token there). While columns stream, only what each of them has reached counts.
        """
        runs = [column.run for column in self._columns]
        if any(run is None for run in runs):
            return None
        if not self._same_tokens():
            return text_divergence(
                [run for run in runs if run is not None], [c.tokenizer for c in self._columns]
            )
        # Done first, then the ids: a run read as done has all its tokens in what follows.
        done = [run.done for run in runs if run is not None]
        answers = [run.token_ids for run in runs if run is not None]
        # A column still queued or running may yet add tokens: only the steps every such
        # column has reached are known (a column that ended shorter has None there).
        going = [len(ids) for ids, ended in zip(answers, done, strict=True) if not ended]
        longest = min(going) if going else max((len(ids) for ids in answers), default=0)
        for step in range(longest):
            tokens = [ids[step] if step < len(ids) else None for ids in answers]
            if len(set(tokens)) > 1:
                return step, tokens
        return None

    def _same_tokens(self) -> bool:
        """Whether the columns' token ids mean the same tokens (one tokenizer, ids sent)."""
        keys = {_tokenizer_key(c.tokenizer) for c in self._columns}
        if None in keys or len(keys) != 1:
            return False
        # A replay's tokenizer is its recording's own: two recordings compare by text.
        return not any(self._replays)

    def mark(self, owner: Any = None) -> None:
        """Mark, in every column, the first step where the columns' tokens part.

        Only once every column has ended: a column still queued has no tokens to compare
        yet, and the columns of a shared model run one after the other, so a mark made
        while they stream would only say "none yet" until the last one has begun. A column
        that starts a run clears every mark (a new Run all, or one column rerun); one that
        shows another answer gets new marks. The words need the model's probabilities at
        that step (one forward pass), computed on a thread; a newer state of the columns
        makes that result stale.

        Called from a column's observer, so with ``owner``'s lock held (traitlets calls
        observers inside notify_change). Lock order, everywhere: a column's lock, then
        the compare's lock, never the other way, and never two columns' locks at once: so only
        ``owner``'s own mark is written here; the others' on a thread.
        """
        with self._lock:
            self._generation += 1
            generation = self._generation
            # run.done too: a column starting a run has its new run before its new status.
            ended = all(
                c.run is not None and c.run.done and c.status not in (QUEUED, RUNNING)
                for c in self._columns
            )
            divergence = self.find() if ended else None
        if divergence is None:
            if isinstance(owner, CompareColumn):
                self._write_mark(owner, generation, None)
            if any(c.compare_mark is not None for c in self._columns if c is not owner):
                self._start(self._set_marks, generation, None)
            return
        if isinstance(divergence, TextDivergence):
            lines = text_divergence_words(divergence)
            marks = [
                {"step": step if step is not None else 0, "words": words}
                for step, words in zip(divergence.steps, lines, strict=True)
            ]
            self._start(self._set_marks, generation, marks)
            return
        self._start(self._words_of, generation, *divergence)

    def _start(self, target: Callable[..., None], *args: Any) -> None:
        # Not a daemon: the interpreter joins it before it shuts down, so it never ends the
        # process inside a forward pass (torch aborts then).
        thread = threading.Thread(
            target=target, args=args, name="nbstream-compare-mark", daemon=False
        )
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        try:
            thread.start()
        except RuntimeError:  # out of threads: the marks stay as they were, said in the log
            with self._lock:
                self._threads.remove(thread)  # never started: nothing for wait() to join
            logger.warning("nbstream: no thread to mark where the compare columns part")

    def _words_of(self, generation: int, step: int, tokens: list[int | None]) -> None:
        with self._lock:
            if generation != self._generation:
                return  # the columns changed since: no forward pass for a stale mark
        try:
            runs = [c.run for c in self._columns]
            words = divergence_words if self._one_model else divergence_words_by_model
            marks = words(runs, self._tokenizer, step, tokens)
        except Exception as exc:  # a thread of the widget: never raise
            # No words, but still where the columns part: no mark would say they agree.
            logger.warning(
                "nbstream: the words of where the compare columns part failed", exc_info=True
            )
            failed = f"Columns part at token {step + 1} (its words failed: {type(exc).__name__})"
            marks = [failed] * len(self._columns)
        self._set_marks(generation, [{"step": step, "words": words} for words in marks])

    def _set_marks(self, generation: int, marks: list[dict[str, Any]] | None) -> None:
        # Never with the compare's lock held while a column's trait is written (the column's
        # lock would then be taken after it: the other order deadlocks); one column at a time.
        for i, column in enumerate(self._columns):
            self._write_mark(column, generation, None if marks is None else marks[i])

    def _write_mark(
        self, column: CompareColumn, generation: int, mark: dict[str, Any] | None
    ) -> None:
        """Set ``column``'s mark, unless the columns changed since ``generation``."""
        # The column's lock (as its own writes take it), then the compare's, held across the
        # check and the write: a newer state's marks (or its clearing) come after this one.
        # What the write sends is held back until hold_sync ends, outside the compare's lock.
        with column.hold_sync(), self._lock:
            if generation != self._generation:
                return  # the columns changed since: a newer mark (or none) applies
            if column.compare_mark != mark:
                column.compare_mark = mark  # type: ignore[assignment]
