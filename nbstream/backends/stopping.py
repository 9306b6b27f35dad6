"""When a local ``generate()`` stops: Stop, the budget, or a stop string, checked each step.

The local backend passes :func:`stop_criteria` to ``model.generate``; transformers calls it
after every decode step, so a Stop click (``RunControl.cancel_event``), a spent budget or a
stop string completed by the newest token (:class:`StopStringWatch`) halts generation
within one step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..streaming import DECODE_OPTIONS
from .base import RunControl

__all__ = ["StopStringWatch", "stop_criteria"]


class StopStringWatch:
    """Notices, on the generating thread, the token that completes a stop string.

    Cheap per step: one token id read and a dict lookup. Only a token whose text could end
    a stop string (it contains a stop string's last character, or part of a character cut
    between tokens) costs a decode, of the last few generated tokens, never the whole text.
    transformers' ``StopStringCriteria`` does the matching with tensor ops instead: about
    0.1 ms per step (a few % of a fast model's step) and a vocabulary-wide scan per run.
    The reader side (:class:`~nbstream.streaming.StopFilter`) cuts the text itself, and
    also signals a stop this watch could miss (a stop string across a special token).

    Args:
        tokenizer: The model's tokenizer.
        stops: The run's stop strings.
        prompt_tokens: How many tokens the prompt is (the answer starts after them).
        thinking: A reasoning model's (open tag, close tag, whether the prompt opened it):
            stop strings apply only after the close tag. ``None``: no thinking.

    Example:
        >>> watch = StopStringWatch(tokenizer, ["END"], prompt_tokens=12)
        >>> watch.hit(input_ids)  # on the generating thread, after each step
        False
    """

    def __init__(
        self,
        tokenizer: Any,
        stops: list[str],
        prompt_tokens: int,
        thinking: tuple[str, str, bool] | None = None,
    ) -> None:
        self._tokenizer = tokenizer
        # A reasoning model's thinking is not the answer: stop strings apply from the token
        # after its close tag. (open, close, whether the prompt opened it) or None.
        self._thinking = thinking
        self._answer_from: int | None = None if thinking else prompt_tokens
        self._inside = bool(thinking and thinking[2])
        self._scanned = False
        self._stops = tuple(stops)
        self._last_chars = frozenset(stop[-1] for stop in stops)
        # Some decoders (SentencePiece's) drop the leading space of a lone token's text, so
        # a stop string ending in a space has to be checked after every token.
        self._every_token = " " in self._last_chars
        # Every generated token that shows text adds at least one byte, so this many
        # tokens cover the longest stop string (plus one for a character cut at the start).
        self._window = max(len(stop.encode("utf-8")) for stop in stops) + 2
        self._prompt_tokens = prompt_tokens
        self._candidates: dict[int, bool] = {}
        # The first look takes in all of the answer so far: a branch's forced tokens are all
        # there at once, and may hold a stop string that no newest token completes.
        self._looked = False

    def hit(self, input_ids: Any) -> bool:
        """Whether the newest token completed a stop string (``input_ids``: all so far)."""
        if self._answer_from is None:
            self._answer_from = self._answer_start(input_ids)
            if self._answer_from is None:
                return False
        if not self._looked:
            self._looked = True
            answer = self._tokenizer.decode(
                input_ids[0, self._answer_from :].tolist(), **DECODE_OPTIONS
            )
            return any(stop in answer for stop in self._stops)
        token = int(input_ids[0, -1])
        candidate = self._candidates.get(token)
        if candidate is None:
            # Once per distinct token id of the run (a few µs each), never per step.
            piece = self._tokenizer.decode([token], **DECODE_OPTIONS)
            candidate = (
                self._every_token or "\ufffd" in piece or not self._last_chars.isdisjoint(piece)
            )
            self._candidates[token] = candidate
        if not candidate:
            return False
        start = max(self._answer_from, int(input_ids.shape[1]) - self._window)
        tail = self._tokenizer.decode(input_ids[0, start:].tolist(), **DECODE_OPTIONS)
        return any(stop in tail for stop in self._stops)

    def _answer_start(self, input_ids: Any) -> int | None:
        """Where the answer starts (a token index), or None while the model still thinks.

        None also while the model may yet open its thinking. Decodes a few tokens per step, only
        until then.
        """
        assert self._thinking is not None
        open_tag, close_tag, _ = self._thinking
        length = int(input_ids.shape[1])
        ids = input_ids[0, self._prompt_tokens :].tolist()
        if not self._inside:
            # Has the answer begun with the open tag? Only its first few tokens decide (a
            # branch's forced tokens are all there at the first step).
            text = self._tokenizer.decode(ids, **DECODE_OPTIONS).lstrip()
            if text.startswith(open_tag):
                self._inside = True
            elif open_tag.startswith(text):
                return None  # undecided (nothing yet, or part of the tag)
            else:
                return self._prompt_tokens  # no thinking: the answer starts at once
        if not self._scanned:
            # The first look inside: the close tag may be anywhere in what is already there
            # (a branch's forced tokens), not only in the newest few.
            self._scanned = True
            if close_tag in self._tokenizer.decode(ids, **DECODE_OPTIONS):
                return self._prompt_tokens + self._tokens_through(ids, close_tag)
            return None
        window = len(close_tag.encode("utf-8")) + 2
        tail = self._tokenizer.decode(
            input_ids[0, max(self._prompt_tokens, length - window) :].tolist(), **DECODE_OPTIONS
        )
        return length if close_tag in tail else None

    def _tokens_through(self, ids: list[int], tag: str) -> int:
        """How many of ``ids`` it takes for their text to contain ``tag``.

        It does for all of them: a binary search, a few decodes.
        """
        low, high = 1, len(ids)
        while low < high:
            middle = (low + high) // 2
            if tag in self._tokenizer.decode(ids[:middle], **DECODE_OPTIONS):
                high = middle
            else:
                low = middle + 1
        return low


def stop_criteria(
    control: RunControl,
    watch: StopStringWatch | None = None,
    after_step: Callable[[Any], None] | None = None,
) -> Any:
    """``generate()``'s stopping criteria: Stop, the budget, a stop string, checked each step.

    Args:
        control: The run's control (Stop and the budget show there).
        watch: The run's stop-string watch, if it has stop strings.
        after_step: Called first with ``input_ids`` after every step (its last column is the
            token just chosen): a greedy run's trace is captured there, where no logits
            processor (and no second argmax) is needed.

    Returns:
        A ``transformers.StoppingCriteriaList`` of one criterion.

    Example:
        >>> model.generate(**inputs, stopping_criteria=stop_criteria(control, watch))
    """
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class _ControlCriteria(StoppingCriteria):
        # generate() checks its stopping criteria after every step, so a Stop (or a spent
        # budget) halts generation within one decode step instead of letting it run on.
        # One criterion for all reasons: each criterion in the list costs a tensor op a step.
        def __init__(self) -> None:
            self._answers: dict[tuple[Any, ...], Any] = {}

        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            if after_step is not None:
                after_step(input_ids)
            flag = control.should_stop()
            if not flag and watch is not None and watch.hit(input_ids):
                control.stop_found.set()
                flag = True
            # The same two tensors every step: no allocation on the generating thread.
            key = (flag, input_ids.shape[0], input_ids.device)
            answer = self._answers.get(key)
            if answer is None:
                answer = torch.full(key[1:2], flag, dtype=torch.bool, device=input_ids.device)
                self._answers[key] = answer
            return answer

    return StoppingCriteriaList([_ControlCriteria()])
