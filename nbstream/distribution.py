"""What the sampling sliders do to one step: ``run.distribution(step, ...)``.

The model's next-token distribution at a step of a run, then the same after temperature,
after top-k and after top-p, each renormalised, each applied to the one before it: the
order transformers' sampling applies them. The filtering itself is transformers' own
``TemperatureLogitsWarper``, ``TopKLogitsWarper`` and ``TopPLogitsWarper`` (the same ones a
sampled run uses), so what this shows is what a run with those settings draws from.

The logits are recomputed, exactly, with one forward pass of the prompt and the tokens
before the step (:meth:`nbstream.backends.local.LocalJob.step_logits`): nothing is kept per
step while a run streams.

What it does not show: processors that run before the warpers (a ``repetition_penalty``,
the model's ``sequence_bias``) change what a real run sampled from; :attr:`Distribution.note`
says so when the run used one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ._tokens import TokenPieces

#: The stages, in the order they are applied.
STAGES = ("model", "temperature", "top_k", "top_p")
_LABELS = {"temperature": "temperature", "top_k": "top-k", "top_p": "top-p"}

__all__ = ["STAGES", "Candidate", "Distribution", "distribution_from_logits"]


class Candidate(NamedTuple):
    """One token of a step's distribution (see :meth:`Distribution.top`)."""

    id: int
    text: str
    #: Its probability at each stage (``STAGES``), 0.0 once a filter has removed it.
    probs: dict[str, float]
    #: The first stage that removed it (``"temperature"`` only for greedy, temperature 0),
    #: or None if it survives every stage.
    removed_by: str | None


@dataclass(frozen=True, repr=False)
class Distribution:
    """A step's next-token distribution, stage by stage.

    ``probs[stage]`` for each stage of :data:`STAGES` is a 1-D float tensor over the whole
    vocabulary summing to 1. ``settings`` are the values applied (``temperature`` 0 is
    greedy: all the mass on the favourite; ``top_k`` 0 and ``top_p`` 1.0 are off: the stage
    equals the one before it); ``run_settings`` are the run's own values, where the
    sliders start. ``chosen`` is the token the run took at this step.
    """

    step: int
    chosen: int | None
    settings: dict[str, Any]
    run_settings: dict[str, Any]
    probs: dict[str, Any]
    note: str | None = None
    _pieces: TokenPieces | None = field(default=None, compare=False)

    def kept(self, stage: str) -> int:
        """How many tokens have a chance after ``stage``."""
        return int((self.probs[_stage(stage)] > 0).sum())

    def prob(self, token: int, stage: str = "top_p") -> float:
        """``token``'s probability after ``stage`` (by default: what a run samples from)."""
        return float(self.probs[_stage(stage)][int(token)])

    def removed_by(self, token: int) -> str | None:
        """The first stage at which ``token`` has no chance left, or None."""
        for stage in STAGES[1:]:
            if float(self.probs[stage][int(token)]) == 0.0:
                return stage
        return None

    def top(self, n: int = 10, stage: str = "model") -> list[Candidate]:
        """The ``n`` most likely tokens at ``stage``, best first, each with every stage's
        probability and the filter that removed it."""
        import torch

        ids = torch.topk(self.probs[_stage(stage)], min(int(n), self.size)).indices
        text = self._pieces.text if self._pieces is not None else str
        out = []
        for token in ids.tolist():
            out.append(
                Candidate(
                    id=token,
                    text=text(token),
                    probs={name: float(self.probs[name][token]) for name in STAGES},
                    removed_by=self.removed_by(token),
                )
            )
        return out

    def rest(self, n: int = 10, stage: str = "model") -> float:
        """The mass of everything outside the top ``n`` at ``stage`` (what bars leave out)."""
        import torch

        probs = self.probs[_stage(stage)]
        top = float(torch.topk(probs, min(int(n), self.size)).values.sum())
        return max(0.0, 1.0 - top)  # each stage sums to 1 (float32 rounding aside)

    @property
    def size(self) -> int:
        """The vocabulary's size (the length of each ``probs`` tensor)."""
        return int(self.probs["model"].shape[-1])

    def describe(self) -> str:
        """In words, what the filters do here, e.g. ``"temperature 0.7 sharpens it;
        top-k 50 keeps 50 of 49,152 tokens; top-p 0.9 keeps 4 tokens; ' red' now 31%"``."""
        parts = []
        temperature = self.settings["temperature"]
        if temperature == 0:
            parts.append("temperature 0 is greedy: the favourite takes all the mass")
        elif temperature == 1.0:
            parts.append("temperature 1 leaves the model's odds as they are")
        else:
            effect = "sharpens" if temperature < 1 else "flattens"
            parts.append(f"temperature {temperature:g} {effect} the odds")
        for stage, off in (("top_k", 0), ("top_p", 1.0)):
            value = self.settings[stage]
            label = _LABELS[stage]
            if value == off:
                parts.append(f"{label} off")
            elif temperature == 0:
                parts.append(f"{label} {value:g} changes nothing after greedy")
            else:
                kept = self.kept(stage)
                parts.append(f"{label} {value:g} keeps {kept:,} of {self.size:,} tokens")
        token = self.chosen if self.chosen is not None else self.top(1)[0].id
        text = self._pieces.text(token) if self._pieces is not None else str(token)
        parts.append(
            f"{text!r} now {self.prob(token):.0%} (model: {self.prob(token, 'model'):.0%})"
        )
        return "; ".join(parts)

    def __repr__(self) -> str:
        return f"<Distribution step={self.step} {self.describe()}>"


def _stage(stage: str) -> str:
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {', '.join(STAGES)}, got {stage!r}")
    return stage


def resolve_settings(asked: Mapping[str, Any], run_settings: Mapping[str, Any]) -> dict[str, Any]:
    """The values to apply: those asked for, else the run's own, else off."""
    defaults = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
    values: dict[str, Any] = {}
    for name, off in defaults.items():
        value = asked.get(name)
        if value is None:
            value = run_settings.get(name)
        values[name] = off if value is None else value
    values["temperature"] = float(values["temperature"])
    values["top_p"] = float(values["top_p"])
    values["top_k"] = int(values["top_k"])
    return values


def distribution_from_logits(
    logits: Any,
    *,
    step: int,
    chosen: int | None,
    settings: Mapping[str, Any],
    run_settings: Mapping[str, Any],
    tokenizer: Any = None,
    note: str | None = None,
) -> Distribution:
    """Build a :class:`Distribution` from one step's raw logits (1-D, the vocabulary)."""
    import torch
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    scores = logits.detach().float().reshape(1, -1).cpu()
    dummy_ids = torch.zeros((1, 1), dtype=torch.long)  # the warpers read only the scores
    probs = {"model": torch.softmax(scores, dim=-1)[0]}
    temperature, top_k, top_p = settings["temperature"], settings["top_k"], settings["top_p"]
    if temperature == 0:
        # Greedy: the limit of temperature -> 0; the favourite takes all the mass (what
        # generate() picks), and no filter after it can change that.
        greedy = torch.zeros_like(probs["model"])
        greedy[int(scores[0].argmax())] = 1.0
        for stage in STAGES[1:]:
            probs[stage] = greedy
    else:
        if temperature != 1.0:
            scores = TemperatureLogitsWarper(temperature)(dummy_ids, scores)
        probs["temperature"] = torch.softmax(scores, dim=-1)[0]
        if top_k:
            scores = TopKLogitsWarper(top_k)(dummy_ids, scores)
        probs["top_k"] = torch.softmax(scores, dim=-1)[0]
        if top_p < 1.0:
            scores = TopPLogitsWarper(top_p)(dummy_ids, scores)
        probs["top_p"] = torch.softmax(scores, dim=-1)[0]
    for stage, tensor in probs.items():
        total = float(tensor.sum())
        if not math.isclose(total, 1.0, abs_tol=1e-3):  # pragma: no cover (a broken model)
            raise ValueError(f"the {stage} stage sums to {total}, not 1: the logits hold NaN")
    return Distribution(
        step=step,
        chosen=chosen,
        settings=dict(settings),
        run_settings=dict(run_settings),
        probs=probs,
        note=note,
        _pieces=TokenPieces(tokenizer) if tokenizer is not None else None,
    )
