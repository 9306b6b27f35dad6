"""What the sampling sliders do to one step: ``run.distribution(step, ...)``.

The model's next-token distribution at a step of a run, then the same after each logits
processor the run applied, each renormalised, each applied to the one before it, in the
order transformers' ``generate`` applies them: first what every step gets (the model's
``sequence_bias``, ``bad_words_ids``, ``repetition_penalty``, ``no_repeat_ngram_size``,
``min_new_tokens``...), then the sampling filters (temperature, top-k, top-p, and the
config's ``min_p``, ``typical_p``, ``epsilon_cutoff``, ``eta_cutoff``, ``top_h``). Each
stage is named by the setting that adds it (:attr:`Distribution.stages`); temperature,
top-k and top-p are always stages (one that is off changes nothing). The processors are
transformers' own, built as ``generate`` builds them (the same ones a sampled run draws
through), so the last stage is what a run with those settings draws from, and a token
with probability 0 there is one ``run.trace`` marks ``cut``.

The logits are recomputed, exactly, with one forward pass of the prompt and the tokens
before the step (:meth:`nbstream.backends.local.LocalJob.step_logits`): nothing is kept per
step while a run streams.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ._tokens import TokenPieces

#: The stages every distribution has, in the order they are applied (a run's model may
#: add others: :attr:`Distribution.stages`).
STAGES = ("model", "temperature", "top_k", "top_p")
_LABELS = {"temperature": "temperature", "top_k": "top-k", "top_p": "top-p"}
#: A stage given to :func:`distribution_from_logits`: its name, the transformers logits
#: processor (None: changes nothing) and whether only a sampled step applies it.
StageSpec = tuple[str, Any, bool]

__all__ = [
    "STAGES",
    "Candidate",
    "Distribution",
    "StageSpec",
    "distribution_from_logits",
    "slider_stages",
]


class Candidate(NamedTuple):
    """One token of a step's distribution (see :meth:`Distribution.top`)."""

    id: int
    text: str
    #: Its probability at each stage (:attr:`Distribution.stages`), 0.0 once a stage has
    #: removed it.
    probs: dict[str, float]
    #: The first stage that removed it (``"temperature"`` only for greedy, temperature 0),
    #: or None if it survives every stage.
    removed_by: str | None


@dataclass(frozen=True, repr=False)
class Distribution:
    """A step's next-token distribution, stage by stage.

    ``stages`` names the stages in the order they are applied: ``"model"``, each
    processor the run applied (by the setting that adds it, e.g. ``"sequence_bias"``,
    ``"min_p"``), always ``temperature``, ``top_k`` and ``top_p``. ``probs[stage]`` for
    each is a 1-D float tensor over the whole vocabulary summing to 1. ``settings`` are the
    slider values applied (``temperature`` 0 is greedy: all the mass on the favourite left
    by the stages before it; ``top_k`` 0 and ``top_p`` 1.0 are off: the stage equals the
    one before it); ``run_settings`` are the run's own values, where the sliders start.
    ``chosen`` is the token the run took at this step.
    """

    step: int
    chosen: int | None
    settings: dict[str, Any]
    run_settings: dict[str, Any]
    probs: dict[str, Any]
    note: str | None = None
    _pieces: TokenPieces | None = field(default=None, compare=False)
    stages: tuple[str, ...] = STAGES

    def kept(self, stage: str | None = None) -> int:
        """How many tokens have a chance after ``stage`` (by default: the last)."""
        return int((self.probs[self._stage(stage)] > 0).sum())

    def prob(self, token: int, stage: str | None = None) -> float:
        """``token``'s probability after ``stage``.

        By default the last stage: what a run with these settings samples from.
        """
        return float(self.probs[self._stage(stage)][int(token)])

    def removed_by(self, token: int) -> str | None:
        """The first stage at which ``token`` has no chance left, or None."""
        for stage in self.stages[1:]:
            if float(self.probs[stage][int(token)]) == 0.0:
                return stage
        return None

    def _stage(self, stage: str | None) -> str:
        if stage is None:
            return self.stages[-1]
        if stage not in self.stages:
            raise ValueError(f"stage must be one of {', '.join(self.stages)}, got {stage!r}")
        return stage

    def top(self, n: int = 10, stage: str = "model") -> list[Candidate]:
        """The ``n`` most likely tokens at ``stage``, best first.

        Each comes with every stage's probability and the filter that removed it.
        """
        import torch

        ids = torch.topk(self.probs[self._stage(stage)], min(int(n), self.size)).indices
        text = self._pieces.text if self._pieces is not None else str
        out = []
        for token in ids.tolist():
            out.append(
                Candidate(
                    id=token,
                    text=text(token),
                    probs={name: float(self.probs[name][token]) for name in self.stages},
                    removed_by=self.removed_by(token),
                )
            )
        return out

    def rest(self, n: int = 10, stage: str = "model") -> float:
        """The mass of everything outside the top ``n`` at ``stage`` (what bars leave out)."""
        import torch

        probs = self.probs[self._stage(stage)]
        top = float(torch.topk(probs, min(int(n), self.size)).values.sum())
        return max(0.0, 1.0 - top)  # each stage sums to 1 (float32 rounding aside)

    @property
    def size(self) -> int:
        """The vocabulary's size (the length of each ``probs`` tensor)."""
        return int(self.probs["model"].shape[-1])

    def phrases(self) -> dict[str, str]:
        """What each stage does here, in words, by stage, then ``"token"``.

        The sliders' three are always there; ``"token"`` is the chosen token's odds.
        :meth:`describe` joins them.
        """
        parts: dict[str, str] = {}
        temperature = self.settings["temperature"]
        greedy = temperature == 0
        before = "model"
        for stage in self.stages[1:]:
            if stage == "temperature":
                parts[stage] = _temperature_words(temperature)
            elif stage in ("top_k", "top_p"):
                value = self.settings[stage]
                label = _LABELS[stage]
                if value == (0 if stage == "top_k" else 1.0):
                    parts[stage] = f"{label} off"
                elif greedy:
                    parts[stage] = f"{label} {value:g} changes nothing after greedy"
                else:
                    parts[stage] = (
                        f"{label} {value:g} keeps {self.kept(stage):,} of {self.size:,} tokens"
                    )
            elif not greedy or stage not in self._sampling:
                parts[stage] = self._stage_words(stage, before)
            before = stage
        token = self.chosen if self.chosen is not None else self.top(1)[0].id
        text = self._pieces.text(token) if self._pieces is not None else str(token)
        parts["token"] = (
            f"{text!r} now {self.prob(token):.0%} (model: {self.prob(token, 'model'):.0%})"
        )
        return parts

    def _stage_words(self, stage: str, before: str) -> str:
        """A stage other than the sliders': what it removed, or that it reweighted."""
        kept, had = self.kept(stage), self.kept(before)
        if kept < had:
            return f"{stage} leaves {kept:,} of {self.size:,} tokens a chance"
        import torch

        if torch.equal(self.probs[stage], self.probs[before]):
            return f"{stage} changes nothing here"
        return f"{stage} reweights the odds"

    @property
    def _sampling(self) -> tuple[str, ...]:
        """The stages from temperature on (what a greedy step does not apply)."""
        return self.stages[self.stages.index("temperature") :]

    def describe(self) -> str:
        """In words, what the stages do here.

        For example ``"temperature 0.7 sharpens it; top-k 50 keeps 50 of 49,152 tokens; top-p 0.9
        keeps 4 tokens; ' red' now 31%"``.
        """
        return "; ".join(self.phrases().values())

    def __repr__(self) -> str:
        return f"<Distribution step={self.step} {self.describe()}>"


def _temperature_words(temperature: float) -> str:
    if temperature == 0:
        return "temperature 0 is greedy: the favourite takes all the mass"
    if temperature == 1.0:
        return "temperature 1 leaves the model's odds as they are"
    effect = "sharpens" if temperature < 1 else "flattens"
    return f"temperature {temperature:g} {effect} the odds"


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
    stages: list[StageSpec] | None = None,
    input_ids: Any = None,
) -> Distribution:
    """Build a :class:`Distribution` from one step's raw logits (1-D, the vocabulary).

    ``stages``: the processors to apply, in order (see :data:`StageSpec`), called with
    ``input_ids`` (the prompt and the tokens before the step, shape ``(1, n)``); by
    default transformers' temperature, top-k and top-p warpers for ``settings``.
    """
    import torch

    # Computed where the logits are (the processors' tensors are on the model's device);
    # each stage's probabilities are kept on the CPU.
    scores = logits.detach().float().reshape(1, -1)
    if input_ids is None:
        # The sliders' warpers read only the scores.
        input_ids = torch.zeros((1, 1), dtype=torch.long, device=scores.device)
    if stages is None:
        stages = slider_stages(settings)
    probs = {"model": torch.softmax(scores, dim=-1)[0].cpu()}
    greedy: Any = None
    for name, processor, sampling in stages:
        if sampling and settings["temperature"] == 0:
            if greedy is None:
                # Greedy: the limit of temperature -> 0; the favourite of what the stages
                # before left takes all the mass (what generate() picks), and no filter
                # after it can change that.
                greedy = torch.zeros_like(probs["model"])
                greedy[int(scores[0].argmax())] = 1.0  # on the CPU, as probs["model"]
            probs[name] = greedy
            continue
        if processor is not None:
            scores = processor(input_ids, scores)
        probs[name] = torch.softmax(scores, dim=-1)[0].cpu()
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
        stages=("model", *(name for name, _, _ in stages)),
    )


def slider_stages(settings: Mapping[str, Any]) -> list[StageSpec]:
    """The sliders' stages, as ``generate()`` builds them for a sampled step with these values.

    Transformers' warpers, None where one is off.
    """
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    temperature, top_k, top_p = settings["temperature"], settings["top_k"], settings["top_p"]
    return [
        (
            "temperature",
            TemperatureLogitsWarper(temperature) if temperature not in (0, 1.0) else None,
            True,
        ),
        ("top_k", TopKLogitsWarper(top_k) if top_k else None, True),
        ("top_p", TopPLogitsWarper(top_p) if top_p < 1.0 else None, True),
    ]
