"""Where a token looked: every layer's and head's attention at one step (``run.attention``).

For the token chosen at ``step``, :func:`attention_at` gives the attention weights of every
layer and head *from* the position that produced it (the last position of the input the model
read: the prompt as templated, then the answer's tokens before ``step``) *over* every position
up to it, that one included: ``weights[layer, head, position]``, each row summing to 1.

**Exactly eager attention.** The numbers are those transformers returns with
``output_attentions=True`` under ``attn_implementation="eager"`` for that whole input, at that
position: one forward pass over it, on the model's own weights and modules, with the eager
attention function. A model loaded with SDPA or flash attention (the default is SDPA, which
computes no weights) is not reloaded, and the live model is not switched: each attention
module picks its function from ``self.config._attn_implementation`` when it runs, and the model's
config object is shared by every module and by every thread that runs the model, so switching it
(``model.set_attn_implementation("eager")``) would switch a run streaming on another thread too.
Instead the pass runs on a twin of the model: its own module objects and its own copy of the
config, set to eager through the public ``set_attn_implementation``, sharing every parameter and
buffer with the model (a ``copy.deepcopy`` whose memo maps each tensor, hook, and attribute that
is not a module, config or container, to itself: no weight is copied, and nothing the model
holds, a run's trace capture or a lock, is duplicated). The twin lives for one call. The model's
forward hooks come along (the twin's hook tables are copies of the model's), so a
:func:`~nbstream.steering.steered` block open on the calling thread steers this pass as it steers
its run, and every other thread's hooks stay as they are.

**The attention sink.** Most heads of most trained models put much of their weight on the first
token, whatever it is (a template's ``<|im_start|>``, a BOS): softmax weights must sum to 1, and
a head with nothing worth reading parks them on a token whose value vector is small, so the head
adds little (Xiao et al., 2023, "Efficient Streaming Language Models with Attention Sinks").
:attr:`Attention.sink` and :meth:`Attention.describe` say so when it happens; the weights are
shown as they are, the sink's included.

**Families.** Those the lens knows (:data:`ATTENTION_MODULES`), each tested against transformers'
own eager attention; any other is refused by name, as is a model whose weights accelerate moves
in and out of the device (offloaded). Cost: one forward pass over the step's input, with eager
attention's (heads × positions × positions) matrix per layer while that layer runs.

Example:
    >>> model, tokenizer = nbstream.load_model()
    >>> ids = tokenizer("The capital of France is Paris")["input_ids"]
    >>> seen = attention_at(model, tokenizer, ids, prompt_len=5, step=1)  # chose " Paris"
    >>> seen.weights.shape  # (layers, heads, positions)
    >>> print(seen.describe())
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from ._tokens import TokenPieces
from .steering import DECODER_LAYERS, decoder_layers
from .trace import running_module

__all__ = [
    "ATTENTION_MODULES",
    "SINK_HEADS",
    "Attention",
    "AttentionUnavailable",
    "attention_at",
]

#: The attention module's name inside each family's decoder layer, by ``config.model_type``.
ATTENTION_MODULES: dict[str, str] = {
    **dict.fromkeys(DECODER_LAYERS, "self_attn"),
    "gpt2": "attn",
}

#: :attr:`Attention.sink` holds when the first position is the most-attended one in at least
#: this share of all heads.
SINK_HEADS = 0.5

_SAID = 3  # describe() names this many positions and heads


class AttentionUnavailable(ValueError):
    """The attention of this step cannot be computed; the message says why.

    Raised for a model family nbstream does not know, an offloaded model, and a step the
    token ids do not reach.

    Example:
        >>> try:
        ...     attention_at(model, tokenizer, ids, prompt_len=5, step=99)
        ... except AttentionUnavailable as why:
        ...     print(why)
    """


@dataclass(frozen=True, repr=False)
class Attention:
    """Every layer's and head's attention from one step's position (see :mod:`nbstream.attention`).

    ``weights[layer, head, position]``: layers and heads 0-based (``describe()`` counts from
    1), positions the input's, prompt first: ``tokens[position]`` is that position's token.

    Example:
        >>> seen = run.attention(3)
        >>> seen.layer(5).shape  # (heads, positions)
        >>> seen.top(5, 3)  # the layer's three most-attended positions
        >>> print(seen.describe())
    """

    #: The step (0-based, into the answer's tokens).
    step: int
    #: The chosen token's id.
    token_id: int
    #: The ids at the positions attended: the prompt's, then the answer's before the step.
    token_ids: tuple[int, ...]
    #: How many of ``token_ids`` are the prompt's.
    prompt_tokens: int
    #: ``(layers, heads, positions)``, a float32 torch tensor on the CPU: the model's own
    #: numbers (a float16 or bfloat16 model's widen exactly), indexable and reducible as the
    #: model's outputs are; ``.numpy()`` gives an array, ``.tolist()`` JSON.
    weights: Any
    #: The model's family (its ``model_type``).
    family: str
    _pieces: TokenPieces = field(compare=False)

    @property
    def layers(self) -> int:
        """How many decoder layers (the first axis)."""
        return int(self.weights.shape[0])

    @property
    def heads(self) -> int:
        """How many heads per layer (the second axis)."""
        return int(self.weights.shape[1])

    @property
    def positions(self) -> int:
        """How many positions are attended (the last axis): the query's own included."""
        return int(self.weights.shape[2])

    @property
    def token(self) -> str:
        """The chosen token's text, as ``run.trace[step].text``."""
        return self._pieces.text(self.token_id)

    @property
    def tokens(self) -> list[str]:
        """Each position's token as the token views show it (a byte piece as its bytes)."""
        return [self._pieces(token)[0] for token in self.token_ids]

    def layer(self, i: int) -> Any:
        """Layer ``i``'s weights: ``(heads, positions)``.

        Example:
            >>> seen.layer(0).sum(-1)  # each head's row sums to 1
        """
        return self.weights[i]

    def head(self, i: int, j: int) -> Any:
        """Head ``j`` of layer ``i``: one weight per position.

        Example:
            >>> seen.head(5, 3).argmax()  # the position that head looked at most
        """
        return self.weights[i, j]

    @property
    def sink_share(self) -> float:
        """The first position's weight, averaged over every layer and head."""
        return float(self.weights[..., 0].mean())

    @property
    def sink_heads(self) -> int:
        """How many heads (of ``layers × heads``) attend most to the first position."""
        return int((self.weights.argmax(dim=-1) == 0).sum())

    @property
    def sink(self) -> bool:
        """True when the first position is an attention sink (see the module docstring).

        The first position is the most-attended one in at least :data:`SINK_HEADS` of all
        heads (with more than one position to choose from).
        """
        total = self.layers * self.heads
        return self.positions > 1 and self.sink_heads >= SINK_HEADS * total

    def top(self, layer: int, n: int = 5, head: int | None = None) -> list[tuple[int, str, float]]:
        """The ``n`` most-attended positions of ``layer`` (its heads' mean, or one ``head``).

        Args:
            layer: The layer (0-based; -1 the last).
            n: How many.
            head: One head of it; None for the mean over its heads.

        Returns:
            ``(position, token, weight)`` tuples, the heaviest first.

        Example:
            >>> seen.top(-1, 3)
            [(0, '<|im_start|>', 0.61), (14, ' France', 0.12), (17, ' is', 0.05)]
        """
        if not -self.layers <= layer < self.layers:
            raise IndexError(f"layer {layer} out of range: the model has {self.layers} layers")
        row = self.weights[layer].mean(0) if head is None else self.weights[layer, head]
        values, order = row.topk(max(0, min(n, self.positions)))
        tokens = self.tokens
        return [(p, tokens[p], w) for p, w in zip(order.tolist(), values.tolist(), strict=True)]

    def describe(self) -> str:
        """In words: the sink, where the layers looked, and the sharpest heads.

        Returns:
            A few sentences; layers and heads counted from 1.

        Example:
            >>> print(run.attention(3).describe())
        """
        tokens = self.tokens
        query = self.positions - 1
        words = [
            f"Step {self.step} chose {self.token!r}, read from position {query} "
            f"({tokens[query]!r}): {self.layers} layers × {self.heads} heads attend over "
            f"{self.positions} positions (the prompt's {self.prompt_tokens}, then the answer's "
            f"{self.positions - self.prompt_tokens}); layers and heads count from 1 here."
        ]
        words.append(_sink_words(self, tokens[0]))
        words.append(_spread_words(self, tokens))
        words.append(_sharp_words(self, tokens))
        return " ".join(word for word in words if word)

    def __repr__(self) -> str:
        return (
            f"Attention(step={self.step}, token={self.token!r}, layers={self.layers}, "
            f"heads={self.heads}, positions={self.positions}, sink={self.sink})"
        )


def _where(attention: Attention, position: int) -> str:
    return "prompt" if position < attention.prompt_tokens else "answer"


def _sink_words(attention: Attention, first: str) -> str:
    total = attention.layers * attention.heads
    share = f"{attention.sink_share:.0%} of all attention on average"
    if not attention.sink:
        return f"The first token ({first!r}) takes {share}: no attention sink here."
    return (
        f"Attention sink: the first token ({first!r}) is where {attention.sink_heads} of "
        f"{total} heads look most, and takes {share}. A head with nothing worth reading "
        "parks its weight there (weights must sum to 1, and that token's value adds little), "
        "so it says where a head rests, not what it reads: the other positions' weights are "
        "the informative part."
    )


def _spread_words(attention: Attention, tokens: Sequence[str]) -> str:
    if attention.positions < 2:
        return ""
    overall = attention.weights.mean(dim=(0, 1))
    values, order = overall[1:].topk(min(_SAID, attention.positions - 1))
    said = ", ".join(
        f"{tokens[p + 1]!r} ({_where(attention, p + 1)}, {w:.0%})"
        for p, w in zip(order.tolist(), values.tolist(), strict=True)
    )
    return f"Beyond the first token, over all layers and heads, it looked most at: {said}."


def _sharp_words(attention: Attention, tokens: Sequence[str]) -> str:
    if attention.positions < 2:
        return ""
    rest = attention.weights[..., 1:]
    best, where = rest.max(dim=-1)  # each head's heaviest position beyond the first
    values, order = best.flatten().topk(min(_SAID, best.numel()))
    heads = attention.heads
    said = ", ".join(
        f"layer {i // heads + 1} head {i % heads + 1} → "
        f"{tokens[int(where.flatten()[i]) + 1]!r} ({w:.0%})"
        for i, w in zip(order.tolist(), values.tolist(), strict=True)
    )
    previous = int((attention.weights.argmax(dim=-1) == attention.positions - 2).sum())
    return (
        f"The sharpest heads: {said}. {previous} of {attention.layers * heads} heads look "
        "most at the previous token."
    )


# -- computing it ----------------------------------------------------------------------------
def _check_model(model: Any) -> tuple[Any, str]:
    module = running_module(model)
    family = str(getattr(getattr(module, "config", None), "model_type", None))
    if family not in ATTENTION_MODULES:
        known = ", ".join(sorted(ATTENTION_MODULES))
        raise AttentionUnavailable(
            f"{type(module).__name__} (model_type {family!r}) is not a family whose attention "
            "nbstream knows how to read: its weights are checked against transformers' eager "
            f"attention family by family. Known: {known}"
        )
    placement = getattr(module, "hf_device_map", None)
    places = {str(where) for where in placement.values()} if isinstance(placement, dict) else set()
    if "disk" in places or ("cpu" in places and len(places) > 1):
        raise AttentionUnavailable(
            f"{type(module).__name__} is offloaded (accelerate moves its weights in and out of "
            "the device as it runs): reading its attention would need a second copy of that "
            "machinery; load it on one device to see where its tokens looked"
        )
    return module, family


def _check_step(token_ids: Sequence[int], prompt_len: Any, step: Any) -> int:
    for name, value in (("prompt_len", prompt_len), ("step", step)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {value!r:.80}")
    if not 0 < prompt_len <= len(token_ids):
        raise AttentionUnavailable(
            f"prompt_len {prompt_len} does not fit token ids of length {len(token_ids)}"
        )
    answer = len(token_ids) - prompt_len
    if not 0 <= step < answer:
        raise AttentionUnavailable(
            f"step {step} is not a step of this run: it has {answer} token"
            f"{'' if answer == 1 else 's'}" + (f" (steps 0 to {answer - 1})" if answer else " yet")
        )
    return int(prompt_len + step)


def _eager_twin(module: Any) -> Any:
    """A twin of ``module`` that runs eager attention, sharing its weights (see the module).

    The deep copy's memo maps every value a module holds (directly, or in one of its tables:
    parameters, buffers, hooks) that is not a module, a config or a container, to itself:
    the twin gets new module objects, tables and config, and shares everything else.
    """
    import torch

    shared: dict[int, Any] = {}
    for part in module.modules():
        for value in vars(part).values():
            # A table's entries too: the parameters, the buffers, and the hooks, which may be
            # bound methods of objects that must not be copied (a run's trace capture).
            for item in value.values() if isinstance(value, dict) else (value,):
                if not isinstance(item, (dict, list, tuple, set, torch.nn.Module)) and not hasattr(
                    item, "to_dict"
                ):
                    shared[id(item)] = item
    for attempt in range(3):
        try:
            twin = copy.deepcopy(module, dict(shared))
            break
        except RuntimeError:
            # A hook added or removed on another thread while the copy read that table
            # ("mutated during iteration"): copy again.
            if attempt == 2:
                raise
    twin.set_attn_implementation("eager")
    return twin


def _keep_last_row(rows: list[Any], attention: Any, forward: Any, *args: Any, **kwargs: Any) -> Any:
    """The attention module's own forward, keeping its weights' last query row."""
    result = forward(attention, *args, **kwargs)
    weights = result[1] if isinstance(result, tuple) and len(result) > 1 else None
    if weights is None:
        raise AttentionUnavailable(
            f"{type(attention).__name__} returned no attention weights under eager attention"
        )
    rows.append(weights[0, :, -1, :].detach().float().cpu())
    return result


def _weights(module: Any, family: str, input_ids: Any, turn: Any) -> Any:
    """``(layers, heads, positions)``: the eager attention of ``input_ids``'s last position."""
    import torch

    twin = _eager_twin(module)
    rows: list[Any] = []
    name = ATTENTION_MODULES[family]
    for layer in decoder_layers(twin):
        attention = getattr(layer, name)
        forward = functools.partial(_keep_last_row, rows, attention, type(attention).forward)
        # An instance attribute: nn.Module calls self.forward, so only the twin's module changes.
        attention.forward = forward
    with turn(), torch.no_grad():
        twin.base_model(
            input_ids=input_ids, attention_mask=torch.ones_like(input_ids), use_cache=False
        )
    if len(rows) != len(decoder_layers(module)):
        raise AttentionUnavailable(
            f"{len(rows)} attention modules ran, not one per decoder layer: this model's "
            "layers are not laid out as its family's"
        )
    return torch.stack(rows)


def attention_at(
    model: Any,
    tokenizer: Any,
    token_ids: Sequence[int],
    prompt_len: int,
    step: int,
    *,
    turn: Callable[[], AbstractContextManager[Any]] | None = None,
) -> Attention:
    """The :class:`Attention` of ``step``: what ``run.attention(step)`` returns.

    Args:
        model: The run's model (a PEFT or compiled wrapper is looked through).
        tokenizer: Its tokenizer (for the tokens' texts).
        token_ids: The ids the model read, prompt then answer, the chosen token included.
        prompt_len: How many of ``token_ids`` are the prompt's (as templated).
        step: The step (0-based, into the answer): the token at ``prompt_len + step``.
        turn: A context the forward pass runs in; the model's queue's turn where a pass
            beside a run would disturb it (a rope that rewrites its frequencies each pass).

    Returns:
        The weights of every layer and head from position ``prompt_len + step - 1``.

    Raises:
        AttentionUnavailable: Why it cannot be computed (see the class).

    Example:
        >>> seen = attention_at(model, tokenizer, run_ids, prompt_len=12, step=3)
        >>> seen.head(0, 0)
    """
    module, family = _check_model(model)
    query = _check_step(token_ids, prompt_len, step)
    import torch

    device = module.get_input_embeddings().weight.device
    input_ids = torch.tensor([list(token_ids[:query])], dtype=torch.long, device=device)
    weights = _weights(module, family, input_ids, turn or contextlib.nullcontext)
    return Attention(
        step=step,
        token_id=int(token_ids[query]),
        token_ids=tuple(int(token) for token in token_ids[:query]),
        prompt_tokens=prompt_len,
        weights=weights,
        family=family,
        _pieces=TokenPieces(tokenizer),
    )
