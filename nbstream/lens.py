"""Why this token: what each layer would have said (``run.lens``), and which earlier tokens pushed.

Two standard interpretability readings of one step of a local run, computed on demand.

**The logit lens** (:class:`Lens`, ``run.lens(step)``). One forward pass over the step's input
(the prompt as templated, then the answer's tokens before ``step``, a branch's forced tokens
included: exactly what the model read when it chose token ``step``) with
``output_hidden_states=True``. The output of each decoder layer, at the last position, is read
through the model's own final norm and output layer (and Gemma 2's final logit soft-capping):
which token would the model have said had it stopped there? ``lens.probs[i]`` is the chosen
token's probability after decoder layer ``i + 1``; there is one entry per decoder layer and the
embeddings (``hidden_states[0]``, what no layer has touched yet) are left out. The last entry is
the model's output. When the run has a trace (``alternatives=k``), that entry is the trace's
own: ``logprobs[-1]``, ``ranks[-1]`` and the top of the last layer are exactly
``run.trace[step]``'s numbers (what the model output at that step, through the run's cache).
Without a trace it is the lens's pass's logits, read by the same formula (``log_softmax`` of
the raw logits in float32, before any repetition penalty, temperature or filter). The other
layers come from one full pass, not the run's cache: they match a fresh pass to float32
rounding, and a cached step to about 1e-4 nats in float32, 1e-2 in float16 and 0.15 in
bfloat16 (the cache and the full pass add in another order, and 16-bit formats keep 8 to 11
bits). Ranks count from 1, as ``run.trace[step].rank``: 1 is the top token.

**Attribution** (:class:`Attribution`, ``run.attribution(step)``). Gradient · input on the input
embeddings, signed: one forward and one backward pass give the gradient of the chosen token's
log-probability with respect to each earlier token's input embedding; a token's score is the
dot product of that gradient with the embedding (summed over the hidden dimension). Positive:
the token pushed toward the chosen token; negative: away from it. Its share is its score over
the sum of all scores' sizes, so the shares' sizes sum to 1 and their signs keep the direction.

Known limits of gradient · input: it is a first-order, local reading (the output's slope
around this input, times the input), not what removing or changing a token would do (a branch,
or an ablation, says that); it saturates (where the model is already sure, the softmax is flat
and the gradients small, so a decisive token can score low); and large-norm embeddings (a
beginning-of-text or template token) often take a large share.

**Families.** The final norm and output layer are found by the model's ``model_type``: Llama
(SmolLM, SmolLM2), SmolLM3, Mistral, Qwen2, Qwen3, Gemma, Gemma 2, Gemma 3, Phi, Phi-3 and
GPT-2. Any other is refused by name: a reading through a norm or head nbstream does not know
(a logit scale, a second norm) would be wrong without saying so.

**Beside a run.** Both are computed on the calling thread, alongside any run of the same model:
neither waits in the model's queue, so a streaming run goes on and its Stop is never delayed
(the lens holds nothing the run needs, and reads no cache: ``use_cache=False``). They share the
processor with it for the time they take (``benchmarks/lens.py`` measures the stream's rate
meanwhile). torch's grad mode is per thread: the attribution's backward pass turns gradients on
for its own thread only, and the run's ``no_grad`` does not reach it. Two kinds of model are
the exception, and there the lens waits its turn in the queue: one whose weights accelerate
moves in and out of the device while it runs (offloaded to the CPU or disk), and one whose
rotary embedding rewrites its frequencies on each forward pass (``"dynamic"`` and
``"longrope"`` rope types, e.g. Phi-3-128k): a pass beside the run would change the numbers the
run reads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from ._tokens import TokenPieces
from .backends.base import Backend, Job
from .backends.local import LocalJob
from .backends.replay import ReplayBackend
from .trace import TokenTrace, running_module

__all__ = [
    "FAMILIES",
    "METHOD",
    "TOP_KEPT",
    "Attribution",
    "Lens",
    "LensUnavailable",
    "attribution_at",
    "lens_at",
    "rope_moves",
]

#: How many top tokens each layer of a :class:`Lens` keeps (``lens.top(layer, n)``, n up to it).
TOP_KEPT = 50

#: The final norm and output layer of each family, by ``config.model_type``: attribute paths
#: from the causal-LM model (the module ``generate`` runs).
FAMILIES: dict[str, tuple[str, str]] = {
    "llama": ("model.norm", "lm_head"),  # SmolLM and SmolLM2 too
    "smollm3": ("model.norm", "lm_head"),
    "mistral": ("model.norm", "lm_head"),
    "qwen2": ("model.norm", "lm_head"),
    "qwen3": ("model.norm", "lm_head"),
    "gemma": ("model.norm", "lm_head"),
    "gemma2": ("model.norm", "lm_head"),
    "gemma3_text": ("model.norm", "lm_head"),
    "phi": ("model.final_layernorm", "lm_head"),
    "phi3": ("model.norm", "lm_head"),
    "gpt2": ("transformer.ln_f", "lm_head"),
}

#: What :class:`Attribution` measures, in words (its ``method``).
METHOD = (
    "gradient · input on the input embeddings: per earlier token, the dot product of its "
    "embedding with the gradient of the chosen token's log-probability (positive: toward the "
    "token, negative: away); shares are these over the sum of their sizes"
)

_VIEW_TOP = 5  # the top tokens per layer Lens.to_dict gives a view
_SAID_CHANGES = 6  # describe() names the top token at this many layers at most


class LensUnavailable(ValueError):
    """The lens or the attribution cannot be computed for this run or step; the message says why.

    Raised for a run on a model server (it has no hidden states), a replayed recording (no
    model), a model family whose final norm and output layer nbstream does not know, and a step
    the run does not have.

    Example:
        >>> try:
        ...     run.lens(3)
        ... except nbstream.lens.LensUnavailable as why:
        ...     print(why)
    """


# -- what is needed: the model, its head, the step's input -------------------------------------
@dataclass(frozen=True)
class _Head:
    """A model's final norm and output layer, and the soft-capping its output applies."""

    family: str
    norm: Any
    output: Any
    softcap: float | None

    def logits(self, hidden: Any) -> Any:
        """What the model would output from ``hidden`` (a decoder layer's output)."""
        return self.capped(self.output(self.norm(hidden)))

    def capped(self, logits: Any) -> Any:
        if not self.softcap:
            return logits
        import torch

        return torch.tanh(logits / self.softcap) * self.softcap


def _attribute(root: Any, path: str) -> Any:
    for name in path.split("."):
        root = getattr(root, name, None)
    return root


def _find_head(model: Any) -> _Head:
    """The final norm and output layer of ``model``'s family (see :data:`FAMILIES`).

    Raises:
        LensUnavailable: The family is not one nbstream knows, or its modules are missing.
    """
    config = getattr(model, "config", None)
    family = str(getattr(config, "model_type", None))
    paths = FAMILIES.get(family)
    if paths is None:
        known = ", ".join(sorted(FAMILIES))
        raise LensUnavailable(
            f"{type(model).__name__} (model_type {family!r}) is not a family the lens knows: "
            "reading a layer through its final norm and output layer needs to know exactly "
            "what they are (a logit scale or an extra norm would make every layer's numbers "
            f"wrong without saying so). Known: {known}"
        )
    norm, output = (_attribute(model, path) for path in paths)
    if not callable(norm) or not callable(output):
        raise LensUnavailable(
            f"{type(model).__name__} (model_type {family!r}) has no {paths[0]} and {paths[1]}: "
            "it is not a causal language model of that family as transformers builds it"
        )
    softcap = getattr(config, "final_logit_softcapping", None)
    return _Head(family, norm, output, float(softcap) if softcap else None)


@dataclass(frozen=True)
class _Step:
    """One step of a run, ready to explain."""

    step: int
    model: Any  # the module generate() runs
    head: _Head
    input_ids: Any  # (1, n): what the model read before choosing the token
    chosen: int
    prompt_tokens: int
    pieces: TokenPieces
    turn: Callable[[], AbstractContextManager[Any]]


def _check(backend: Backend, job: Job) -> LocalJob:
    if isinstance(backend, ReplayBackend):
        raise LensUnavailable(
            "a replayed recording has no model: it keeps the tokens it recorded and their top "
            "alternatives, not the hidden states; run the prompt on the model to look inside"
        )
    if backend.is_server:
        raise LensUnavailable(
            f"a run on a model server ({type(backend).__name__}) has no hidden states: the "
            "server sends text and at most its top logprobs; the lens and the attribution "
            "need a local transformers model (nbstream.stream(model, tokenizer, prompt))"
        )
    if not isinstance(job, LocalJob):
        raise LensUnavailable(
            f"this run's backend ({type(backend).__name__}) does not run a transformers model "
            "in this process: the lens and the attribution need its hidden states"
        )
    return job


def _check_step(step: Any, length: int) -> int:
    if isinstance(step, bool) or not isinstance(step, int):
        raise TypeError(f"step must be an int (an index into run.token_ids), got {step!r:.80}")
    if not 0 <= step < length:
        raise LensUnavailable(
            f"step {step} is not a step of this run: it has {length} token"
            f"{'' if length == 1 else 's'}" + (f" (steps 0 to {length - 1})" if length else " yet")
        )
    return step


def rope_moves(model: Any) -> bool:
    """True when a rotary embedding rewrites its frequencies on each forward pass.

    A pass beside a run of such a model would change the numbers the run reads, so the lens,
    the attribution and ``run.attention`` wait their turn in the model's queue for it.

    Args:
        model: The module ``generate`` runs.

    Returns:
        Whether a ``"dynamic"`` or ``"longrope"`` rope type is in it.

    Example:
        >>> rope_moves(model)
        False
    """
    for module in model.modules():
        kind = getattr(module, "rope_type", None)
        kinds = kind.values() if isinstance(kind, dict) else [kind]
        if any(isinstance(k, str) and ("dynamic" in k or k == "longrope") for k in kinds):
            return True
    return False


def _offloaded(model: Any) -> bool:
    """True when accelerate moves this model's weights in and out of the device as it runs."""
    placement = getattr(model, "hf_device_map", None)
    if not isinstance(placement, dict):
        return False
    places = {str(where) for where in placement.values()}
    return "disk" in places or ("cpu" in places and len(places) > 1)


def _explained_step(
    backend: Backend,
    job: Job,
    ids: Sequence[int],
    step: int,
    turn: Callable[[], AbstractContextManager[Any]],
) -> _Step:
    """Everything needed to explain ``step`` of a run, every check done first."""
    local = _check(backend, job)
    step = _check_step(step, len(ids))
    model = running_module(local.backend.model)
    head = _find_head(model)
    beside: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext
    return _Step(
        step=step,
        model=model,
        head=head,
        input_ids=local.generate_ids(list(ids[:step])),
        chosen=int(ids[step]),
        prompt_tokens=int(local.prompt_tokens or 0),
        pieces=TokenPieces(local.backend.tokenizer),
        turn=turn if _offloaded(model) or rope_moves(model) else beside,
    )


def _forward_options(model: Any) -> dict[str, Any]:
    """The options of a lens's forward pass: no cache, and one position's logits where possible.

    One pass has nothing to keep in a cache; only the last position's logits are read.
    """
    options: dict[str, Any] = {"use_cache": False}
    if "logits_to_keep" in inspect.signature(model.forward).parameters:
        options["logits_to_keep"] = 1
    return options


# -- the logit lens ------------------------------------------------------------------------
@dataclass(frozen=True, repr=False)
class Lens:
    """What each decoder layer would have said at one step (see :mod:`nbstream.lens`).

    ``probs[i]``, ``logprobs[i]`` and ``ranks[i]`` are the chosen token's after decoder layer
    ``i + 1`` (0-based lists; ``describe()`` counts layers from 1); the last entry is the
    model's output, the run's ``trace[step]`` itself when the run has a trace
    (``ranks[-1] == trace[step].rank``, ``logprobs[-1] == trace[step].logprob``).

    Example:
        >>> run = nbstream.stream(model, tokenizer, "The capital of France is", max_new_tokens=5)
        >>> text = run.wait()
        >>> lens = run.lens(0)
        >>> lens.layers, lens.ranks[-1], lens.top(-1, 3)
        >>> print(lens.describe())
    """

    #: The step (0-based, into ``run.token_ids``).
    step: int
    #: The chosen token's id.
    token_id: int
    #: Per layer, the chosen token's natural log-probability there.
    logprobs: tuple[float, ...]
    #: Per layer, the chosen token's rank: 1 + how many tokens stood above it (1 = the top), as
    #: ``TokenTrace.rank``.
    ranks: tuple[int, ...]
    #: The model's family (its ``model_type``).
    family: str
    _top_ids: tuple[tuple[int, ...], ...] = field(compare=False)
    _top_logprobs: tuple[tuple[float, ...], ...] = field(compare=False)
    _pieces: TokenPieces = field(compare=False)

    @property
    def layers(self) -> int:
        """How many decoder layers the model has (one entry each)."""
        return len(self.logprobs)

    @property
    def probs(self) -> list[float]:
        """Per layer, the chosen token's probability there (``exp`` of ``logprobs``)."""
        return [math.exp(logprob) for logprob in self.logprobs]

    @property
    def token(self) -> str:
        """The chosen token's text, as ``run.trace[step].text``."""
        return self._pieces.text(self.token_id)

    def top(self, layer: int, n: int = 5) -> list[tuple[str, float]]:
        """The ``n`` most likely tokens after ``layer``, best first, as ``(text, probability)``.

        Args:
            layer: An index into ``probs`` (``-1``: the model's output).
            n: How many, at most :data:`TOP_KEPT`.

        Returns:
            A list of ``(token text, probability)``.

        Example:
            >>> lens.top(-1, 3)
            [(' Paris', 0.71), (' the', 0.05), (' a', 0.03)]
        """
        if not -self.layers <= layer < self.layers:
            raise IndexError(f"layer {layer} out of range: the model has {self.layers} layers")
        if not 0 <= n <= TOP_KEPT:
            raise ValueError(f"n must be between 0 and {TOP_KEPT} (the top tokens kept)")
        text = self._pieces.text
        pairs = zip(self._top_ids[layer][:n], self._top_logprobs[layer][:n], strict=True)
        return [(text(token), math.exp(logprob)) for token, logprob in pairs]

    @property
    def changed(self) -> list[int]:
        """The layer indices (0-based) where the top token differs from the layer before's."""
        tops = [ids[0] for ids in self._top_ids]
        return [i for i in range(1, len(tops)) if tops[i] != tops[i - 1]]

    def describe(self) -> str:
        """In words: where the chosen token rose to the top, and what the layers said before.

        Returns:
            A few sentences, layers counted from 1.

        Example:
            >>> print(run.lens(0).describe())  # the layer it rose at, the layers' top tokens
        """
        n, probs, ranks = self.layers, self.probs, self.ranks
        words = [
            f"Step {self.step} chose {self.token!r}: {_percent(probs[-1])} at the model's output "
            f"({_rank_words(ranks[-1])}), read after each of its {n} layers."
        ]
        words.append(_rise_words(ranks, n))
        jumps = [probs[i] - (probs[i - 1] if i else 0.0) for i in range(n)]
        biggest = max(range(n), key=lambda i: jumps[i])
        if jumps[biggest] > 0.05:
            before = probs[biggest - 1] if biggest else 0.0
            words.append(
                f"Its biggest rise is at layer {biggest + 1} "
                f"({_percent(before)} → {_percent(probs[biggest])})."
            )
        changes = [0, *self.changed]
        tops = [f"layer {i + 1}: {self.top(i, 1)[0][0]!r}" for i in changes[-_SAID_CHANGES:]]
        if len(changes) > _SAID_CHANGES:
            words.append(
                f"The top token changes {len(changes) - 1} times; the last changes: "
                + ", ".join(tops)
                + "."
            )
        else:
            words.append("The top token, where it changes: " + ", ".join(tops) + ".")
        return " ".join(words)

    def to_dict(self) -> dict[str, Any]:
        """What a view needs, JSON-ready.

        Returns:
            ``{"step", "token", "layers", "probs", "ranks", "top", "changed"}``: ``top`` holds,
            per layer, its five most likely tokens as ``[text, probability]``; ``changed`` the
            0-based layer indices where the top token differs from the layer before's.
        """
        return {
            "step": self.step,
            "token": self.token,
            "layers": self.layers,
            "probs": self.probs,
            "ranks": list(self.ranks),
            "top": [[[t, p] for t, p in self.top(i, _VIEW_TOP)] for i in range(self.layers)],
            "changed": self.changed,
        }

    def __repr__(self) -> str:
        return (
            f"Lens(step={self.step}, token={self.token!r}, layers={self.layers}, "
            f"prob={self.probs[-1]:.4f}, top_from_layer={_top_from(self.ranks)})"
        )


def _rank_words(rank: int) -> str:
    above = rank - 1
    return "the top token" if above == 0 else f"{above} token{'s' if above > 1 else ''} above it"


def _top_from(ranks: Sequence[int]) -> int | None:
    """The 1-based layer from which the chosen token stays the top one; None if it is not."""
    if ranks[-1] != 1:
        return None
    first = len(ranks)
    while first > 1 and ranks[first - 2] == 1:
        first -= 1
    return first


def _rise_words(ranks: Sequence[int], n: int) -> str:
    first_top = next((i + 1 for i, rank in enumerate(ranks) if rank == 1), None)
    if first_top is None:
        return (
            "It is not the top token at any layer, the output included: the run's settings "
            "(sampling, or a penalty) picked a token the model did not favour most."
        )
    stays = _top_from(ranks)
    if stays is None:
        return f"It is the top token at layer {first_top}, but not at the output."
    said = f"It becomes the top token at layer {first_top} of {n}"
    if stays != first_top:
        said += f" and stays there from layer {stays}"
    first_ten = next(i + 1 for i, rank in enumerate(ranks) if rank <= 10)
    if first_ten < first_top:
        said += f"; it enters the top 10 at layer {first_ten}"
    return said + "."


def _percent(p: float) -> str:
    """A probability in words: whole percents, or two digits below 1%."""
    return f"{p:.0%}" if p >= 0.01 or p == 0 else f"{p * 100:.2g}%"


def lens_at(
    backend: Backend,
    job: Job,
    ids: Sequence[int],
    step: int,
    turn: Callable[[], AbstractContextManager[Any]],
    record: object = None,
) -> Lens:
    """The :class:`Lens` of ``step`` of a run (what ``run.lens(step)`` returns).

    Args:
        backend: The run's backend.
        job: The run's job.
        ids: The run's token ids so far.
        step: The step to read (0-based, into ``ids``).
        turn: The model's queue's ``turn``: taken only where the lens cannot run beside a run.
        record: The run's :class:`~nbstream.trace.TokenTrace` of ``step``, if it has one: the
            last layer's numbers are then its own.

    Returns:
        The lens, every layer computed.

    Raises:
        LensUnavailable: Why it cannot be computed (see the class).

    Example:
        >>> lens = run.lens(3)  # calls lens_at(...)
    """
    where = _explained_step(backend, job, ids, step, turn)
    import torch

    head = where.head
    logprobs = torch.log_softmax(_layer_logits(where), dim=-1)
    chosen = logprobs[:, where.chosen : where.chosen + 1]
    ranks = (logprobs > chosen).sum(dim=1) + 1
    top_logprobs, top_ids = logprobs.topk(min(TOP_KEPT, logprobs.shape[-1]), dim=-1)
    lens = Lens(
        step=where.step,
        token_id=where.chosen,
        logprobs=tuple(chosen[:, 0].tolist()),
        ranks=tuple(int(rank) for rank in ranks.tolist()),
        family=head.family,
        _top_ids=tuple(tuple(row) for row in top_ids.tolist()),
        _top_logprobs=tuple(tuple(row) for row in top_logprobs.tolist()),
        _pieces=where.pieces,
    )
    if not isinstance(record, TokenTrace) or record.id != where.chosen:
        return lens
    return _with_output(lens, record)


def _layer_logits(where: _Step) -> Any:
    """One row of logits per decoder layer's output at the step, in float32 (one forward pass)."""
    import torch

    model, head = where.model, where.head
    with where.turn(), torch.no_grad():
        output = model(
            input_ids=where.input_ids,
            attention_mask=torch.ones_like(where.input_ids),
            output_hidden_states=True,
            **_forward_options(model),
        )
        hidden = output.hidden_states
        # hidden[0] is the embeddings and hidden[-1] the output after the final norm: the layers
        # before the last are read through the head, the last is the model's own logits.
        inner = [state[0, -1] for state in hidden[1:-1]]
        rows = [head.logits(torch.stack(inner))] if inner else []
        return torch.cat([*rows, output.logits[0, -1:]]).float()


def _with_output(lens: Lens, record: TokenTrace) -> Lens:
    """``lens`` with its last layer the run's own numbers (``record``: its trace of the step).

    The trace keeps the top k, first; the lens's own top fills the rest of the list (its
    numbers from the full pass, within the module's tolerance of the run's).
    """
    top = list(zip(record.alternative_ids, record.alternative_logprobs, strict=True))
    traced = set(record.alternative_ids)
    top += [
        pair
        for pair in zip(lens._top_ids[-1], lens._top_logprobs[-1], strict=True)
        if pair[0] not in traced
    ]
    top = top[:TOP_KEPT]
    return dataclasses.replace(
        lens,
        logprobs=(*lens.logprobs[:-1], record.logprob),
        ranks=(*lens.ranks[:-1], record.rank),
        _top_ids=(*lens._top_ids[:-1], tuple(token for token, _ in top)),
        _top_logprobs=(*lens._top_logprobs[:-1], tuple(logprob for _, logprob in top)),
    )


# -- attribution -----------------------------------------------------------------------------
@dataclass(frozen=True, repr=False)
class Attribution:
    """How much each earlier token pushed the model toward the chosen one, or away (see the module).

    ``tokens[i]`` and ``shares[i]`` go together: the prompt's tokens as the model read them
    (chat template and special tokens included), then the answer's tokens before the step.
    A positive share pushed toward the chosen token, a negative one away from it.

    Example:
        >>> attr = run.attribution(3)
        >>> sum(abs(share) for share in attr.shares)  # 1, up to rounding
        >>> print(attr.describe())
    """

    #: The step (0-based, into ``run.token_ids``).
    step: int
    #: The chosen token's id.
    token_id: int
    #: The earlier tokens' ids: the prompt's, then the answer's before the step.
    token_ids: tuple[int, ...]
    #: Each token's score: its gradient · input (signed: positive pushed toward the token).
    scores: tuple[float, ...]
    #: How many of ``token_ids`` are the prompt's.
    prompt_tokens: int
    #: What was measured, in words (:data:`METHOD`).
    method: str
    _pieces: TokenPieces = field(compare=False)

    @property
    def token(self) -> str:
        """The chosen token's text."""
        return self._pieces.text(self.token_id)

    @property
    def tokens(self) -> list[str]:
        """The earlier tokens' texts, prompt then answer, in order."""
        return [self._pieces.text(token) for token in self.token_ids]

    @property
    def shares(self) -> list[float]:
        """Each token's share: its score over the sum of all scores' sizes, signed.

        The sizes sum to 1 (all 0 if every score is); positive: toward the chosen token.
        """
        total = sum(abs(score) for score in self.scores)
        return [score / total if total > 0 else 0.0 for score in self.scores]

    def strongest(self, n: int = 5) -> list[tuple[int, str, float]]:
        """The ``n`` tokens with the largest shares in size (either sign), largest first.

        Args:
            n: How many.

        Returns:
            A list of ``(position in tokens, text, share)``; a negative share pushed away.

        Example:
            >>> for position, text, share in run.attribution(3).strongest(2):
            ...     print(position, repr(text), "toward" if share >= 0 else "away", abs(share))
        """
        shares, tokens = self.shares, self.tokens
        order = sorted(range(len(shares)), key=lambda i: -abs(shares[i]))[:n]
        return [(i, tokens[i], shares[i]) for i in order]

    def describe(self) -> str:
        """In words: which earlier tokens pushed most, which way, and the prompt's part.

        Returns:
            A few sentences.

        Example:
            >>> print(run.attribution(3).describe())
        """
        shares = self.shares
        if not any(shares):
            return (
                f"Step {self.step} chose {self.token!r}; the gradient vanished (the model is "
                "certain to the precision of its numbers), so no token gets a share."
            )
        strongest = ", ".join(
            f"{text!r} {'toward' if share >= 0 else 'away'} {abs(share):.0%} "
            f"({'prompt' if i < self.prompt_tokens else 'answer'})"
            for i, text, share in self.strongest(5)
        )
        prompt = sum(abs(share) for share in shares[: self.prompt_tokens])
        return (
            f"Step {self.step} chose {self.token!r}. By gradient · input (shares' sizes summing "
            f"to 1; toward the token or away from it), the earlier tokens that weighed most: "
            f"{strongest}. The prompt holds {prompt:.0%}, the answer so far {1 - prompt:.0%}. A "
            "local, first-order reading: the output's slope times the input, not what removing "
            "a token would do (a branch shows that)."
        )

    def to_dict(self) -> dict[str, Any]:
        """What a view needs, JSON-ready.

        Returns:
            ``{"step", "token", "tokens", "shares", "prompt_tokens", "method"}``; ``shares``
            signed (positive: toward the token).
        """
        return {
            "step": self.step,
            "token": self.token,
            "tokens": self.tokens,
            "shares": self.shares,
            "prompt_tokens": self.prompt_tokens,
            "method": self.method,
        }

    def __repr__(self) -> str:
        top = ", ".join(f"{text!r} {share:+.0%}" for _i, text, share in self.strongest(3))
        return f"Attribution(step={self.step}, token={self.token!r}, strongest=[{top}])"


def attribution_at(
    backend: Backend,
    job: Job,
    ids: Sequence[int],
    step: int,
    turn: Callable[[], AbstractContextManager[Any]],
) -> Attribution:
    """The :class:`Attribution` of ``step`` of a run (what ``run.attribution(step)`` returns).

    Args:
        backend: The run's backend.
        job: The run's job.
        ids: The run's token ids so far.
        step: The step to explain (0-based, into ``ids``).
        turn: The model's queue's ``turn``: taken only where this cannot run beside a run.

    Returns:
        The attribution of every earlier token.

    Raises:
        LensUnavailable: Why it cannot be computed (see :class:`LensUnavailable`).

    Example:
        >>> attr = run.attribution(3)  # calls attribution_at(...)
    """
    where = _explained_step(backend, job, ids, step, turn)
    import torch

    model = where.model
    # Gradients on for this thread whatever its caller turned off (no_grad, inference_mode);
    # a tensor made in inference mode cannot take part in a backward pass, hence the clone.
    with where.turn(), torch.inference_mode(False), torch.enable_grad():
        input_ids = where.input_ids.clone()
        with torch.no_grad():
            embedded = model.get_input_embeddings()(input_ids)
        embedded = embedded.detach().requires_grad_(True)
        output = model(
            inputs_embeds=embedded,
            attention_mask=torch.ones_like(input_ids),
            **_forward_options(model),
        )
        logprob = torch.log_softmax(output.logits[0, -1].float(), dim=-1)[where.chosen]
        (gradient,) = torch.autograd.grad(logprob, embedded)
    scores = (gradient[0].float() * embedded[0].detach().float()).sum(dim=-1)
    return Attribution(
        step=where.step,
        token_id=where.chosen,
        token_ids=tuple(int(token) for token in where.input_ids[0].tolist()),
        scores=tuple(float(score) for score in scores.tolist()),
        prompt_tokens=where.prompt_tokens,
        method=METHOD,
        _pieces=where.pieces,
    )
