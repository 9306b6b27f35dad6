"""Steering: a direction in one layer's hidden states, and a model that leans along it.

**A direction** (:class:`Direction`) is built as activation addition (Turner et al., 2023)
and repeng's control vectors build theirs: ``Direction.from_examples(model, tokenizer,
toward=[...], away=[...], layer=L)`` reads each example prompt as a run reads a prompt, takes
the hidden state output by decoder layer ``L`` (0-based) at its last token, and subtracts the
mean over the ``away`` prompts from the mean over the ``toward`` prompts. The prompts are read
through the tokenizer's chat template when it has one (a user message and the start of the
assistant's answer, exactly what ``nbstream.stream(model, tokenizer, prompt)`` feeds the
model), so every example ends on the same token: the one the answer starts from. The template's
tokens are the same on both sides and cancel; what is left is what the examples' contents do to
the model's state where it begins to answer, which is where a steered run adds it.
``template=False`` reads the raw text instead (with the tokenizer's special tokens, as a run
reads plain text when there is no template): the classic activation-addition recipe, where the
last token differs between examples.

**Steering** (:func:`steered`): inside ``with steered(model, direction, strength):``, a forward
hook on decoder layer ``L`` adds ``strength * direction.vector`` to that layer's output at every
position (the prompt's, during prefill, then each generated token's): every later layer, and
the cache, see the steered state. The hook is removed when the block ends, however it ends.

**Whose forward passes are steered.** A ``steered()`` block steers the forward passes of the
thread that entered it, while the block is open, and no other thread's: its hook checks a flag
kept in a ``threading.local`` that only the entering thread sets. A run on the same model in
another thread, a lens, or a second ``steered()`` block in another thread with its own
direction, never sees this one. A thread started inside the block does not inherit it either.
So the run that asks for steering must enter ``steered()`` on its own generating thread,
around its ``model.generate``; two blocks open on the same thread add up.

**A run's steering** is its ``steer=(direction, strength)`` setting (:mod:`nbstream.settings`):
the local backend finds the direction the setting names (:func:`find_direction`), checks it
against the model (:func:`check_steering`) before anything starts, and its generating thread
runs ``model.generate`` inside ``steered()``. What a run shows of its steps afterwards (its
logits, lens, attribution, attention) is computed inside the same block, on the thread that
asks: what the steered run computed.

**Finding a direction by its digest.** A run's settings, its record and its recording name a
direction as JSON (its :attr:`~Direction.digest`, layer, size and file), so that they can be
saved. Every direction made in this session is kept by digest (a direction is one vector of
the hidden size: kilobytes), so a record's digest finds it again; a record from another
session finds it in its file, or after it is built or loaded again.

Example:
    >>> model, tokenizer = nbstream.load_model()
    >>> sea = Direction.from_examples(
    ...     model, tokenizer, toward=["Tell me about the sea."], away=["Tell me about a desert."],
    ...     layer=15,
    ... )
    >>> with steered(model, sea, 4.0):
    ...     ids = model.generate(**tokenizer("Hello", return_tensors="pt"), max_new_tokens=20)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .trace import running_module

__all__ = [
    "DECODER_LAYERS",
    "FORMAT",
    "Direction",
    "SteeringUnavailable",
    "check_steering",
    "decoder_layers",
    "find_direction",
    "steered",
]

#: Where each family's decoder layers are, by ``config.model_type``: the attribute path from
#: the causal-LM model (the module ``generate`` runs) to its list of decoder layers. The
#: families the lens knows (:data:`nbstream.lens.FAMILIES`).
DECODER_LAYERS: dict[str, str] = {
    **dict.fromkeys(
        ("llama", "smollm3", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text"),
        "model.layers",
    ),
    "phi": "model.layers",
    "phi3": "model.layers",
    "gpt2": "transformer.h",
}

#: The ``format`` a direction file's metadata names (:meth:`Direction.save`).
FORMAT = "nbstream.direction"
_VERSION = "1"


class SteeringUnavailable(ValueError):
    """A direction cannot be built or applied for this model; the message says why.

    Raised for a model family whose decoder layers nbstream does not know, a layer the model
    does not have, a direction whose size is not the model's hidden size, and a strength that
    is not a finite number.

    Example:
        >>> try:
        ...     steered(model, direction, float("nan")).__enter__()
        ... except SteeringUnavailable as why:
        ...     print(why)
    """


def decoder_layers(model: Any) -> list[Any]:
    """The decoder layers of ``model``, in order (see :data:`DECODER_LAYERS`).

    Args:
        model: A transformers causal LM (a PEFT or compiled wrapper is looked through).

    Returns:
        The list of its decoder layer modules.

    Raises:
        SteeringUnavailable: The family is not one nbstream knows, or its layers are missing.

    Example:
        >>> len(decoder_layers(model))  # 30 for the default model
    """
    module = running_module(model)
    family = str(getattr(getattr(module, "config", None), "model_type", None))
    path = DECODER_LAYERS.get(family)
    if path is None:
        known = ", ".join(sorted(DECODER_LAYERS))
        raise SteeringUnavailable(
            f"{type(module).__name__} (model_type {family!r}) is not a family whose decoder "
            f"layers nbstream knows: a hook on the wrong module would steer nothing, or the "
            f"wrong thing, without saying so. Known: {known}; use a model of one of these "
            "families"
        )
    try:
        layers = module.get_submodule(path)
    except AttributeError:
        raise SteeringUnavailable(
            f"{type(module).__name__} (model_type {family!r}) has no {path}: it is not a "
            "causal language model of that family as transformers builds it"
        ) from None
    return list(layers)


def _layer_index(layer: Any, count: int) -> int:
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise TypeError(f"layer must be an int (a decoder layer, 0-based), got {layer!r:.80}")
    if not -count <= layer < count:
        raise SteeringUnavailable(
            f"layer {layer} is not a decoder layer of this model: it has {count} "
            f"(0 to {count - 1}, or -1 for the last)"
        )
    return layer % count


# -- a direction ---------------------------------------------------------------------------
@dataclass(frozen=True, eq=False, repr=False)
class Direction:
    """A direction in the hidden states output by one decoder layer (see :mod:`nbstream.steering`).

    Example:
        >>> d = Direction.from_examples(
        ...     model, tokenizer, toward=["Talk about the sea."], away=["Talk about rocks."],
        ...     layer=15,
        ... )
        >>> d.vector.shape, d.layer, d.norm
        >>> d.save("sea.safetensors")
        >>> Direction.load("sea.safetensors").digest == d.digest
        True
    """

    #: The direction: a float32 CPU tensor of the model's hidden size.
    vector: Any
    #: The decoder layer (0-based) whose output it is added to.
    layer: int
    #: The ``model_type`` of the model it was built on ("" when not known).
    family: str = ""
    #: The model's name or folder (``config.name_or_path``) it was built on, for the record.
    model: str = ""
    #: The examples it was built from, and whether they were read through the chat template.
    toward: tuple[str, ...] = ()
    away: tuple[str, ...] = ()
    templated: bool = False
    #: The file it was loaded from or last saved to (absolute), None for one only in memory:
    #: a run's record names it, so that a rerun in another session can load it.
    file: str | None = None

    def __post_init__(self) -> None:
        vector = self.vector
        if getattr(vector, "ndim", None) != 1 or not vector.is_floating_point() or not len(vector):
            raise TypeError(
                f"vector must be a 1-D float tensor of the model's hidden size, got {vector!r:.80}"
            )
        if isinstance(self.layer, bool) or not isinstance(self.layer, int) or self.layer < 0:
            raise TypeError(f"layer must be an int >= 0 (a decoder layer), got {self.layer!r:.80}")
        # Kept by digest for the session: a run's record names it so (see the module).
        _KNOWN.setdefault(self.digest, self)

    @property
    def size(self) -> int:
        """The hidden size (the vector's length)."""
        return int(self.vector.shape[0])

    @property
    def norm(self) -> float:
        """The vector's Euclidean length: a strength of 1 moves a hidden state this far."""
        return float(self.vector.norm())

    @property
    def digest(self) -> str:
        """SHA-256 of the vector's float32 bytes and its layer: what a record can name it by."""
        hashed = hashlib.sha256(f"layer={self.layer};".encode())
        hashed.update(self.vector.detach().float().cpu().contiguous().numpy().tobytes())
        return hashed.hexdigest()

    @classmethod
    def from_examples(
        cls,
        model: Any,
        tokenizer: Any,
        toward: Sequence[str],
        away: Sequence[str],
        layer: int,
        *,
        template: bool | None = None,
    ) -> Direction:
        """A direction: the mean last-token state of ``toward`` minus that of ``away``.

        Args:
            model: A transformers causal LM of a family nbstream knows.
            tokenizer: Its tokenizer.
            toward: Prompts that show the concept (one or more).
            away: Prompts that show its opposite, or its absence (one or more).
            layer: The decoder layer (0-based; -1 for the last) whose output is read.
            template: Read the prompts through the chat template (the default when the
                tokenizer has one, as a run reads a prompt), or as raw text (``False``).

        Returns:
            The direction, its vector in float32 on the CPU.

        Raises:
            SteeringUnavailable: The family or the layer is not one nbstream can read.

        Example:
            >>> d = Direction.from_examples(
            ...     model, tokenizer, toward=["Be formal."], away=["Be casual."], layer=10
            ... )
        """
        toward, away = _examples(toward, "toward"), _examples(away, "away")
        layers = decoder_layers(model)
        index = _layer_index(layer, len(layers))
        if template is None:
            template = isinstance(getattr(tokenizer, "chat_template", None), str)
        import torch

        encode = _encoder(tokenizer, bool(template))
        means = [
            torch.stack([_last_state(model, layers[index], encode(text)) for text in side]).mean(0)
            for side in (toward, away)
        ]
        config = running_module(model).config
        return cls(
            vector=(means[0] - means[1]).contiguous(),
            layer=index,
            family=str(getattr(config, "model_type", "")),
            model=str(getattr(config, "name_or_path", "")),
            toward=toward,
            away=away,
            templated=bool(template),
        )

    def save(self, path: str | Path) -> Path:
        """Write the direction to ``path`` as safetensors (the vector, and its facts as metadata).

        :attr:`file` becomes ``path``: the records of runs steered along it from then on name
        the file, where a rerun in a fresh session finds the direction.

        Args:
            path: The file to write (``.safetensors`` by convention).

        Returns:
            The path written.

        Example:
            >>> d.save("sea.safetensors")
        """
        from safetensors.torch import save_file

        path = Path(path)
        metadata = {
            "format": FORMAT,
            "version": _VERSION,
            "layer": str(self.layer),
            "family": self.family,
            "model": self.model,
            "toward": json.dumps(list(self.toward)),
            "away": json.dumps(list(self.away)),
            "templated": json.dumps(self.templated),
        }
        save_file({"vector": self.vector.contiguous()}, str(path), metadata=metadata)
        # The file holds it now: a run steered from here on names it in its record.
        object.__setattr__(self, "file", str(path.resolve()))
        return path

    @classmethod
    def load(cls, path: str | Path) -> Direction:
        """Read a direction :meth:`save` wrote; any other file is refused in words.

        Args:
            path: A file written by :meth:`save`.

        Returns:
            The direction.

        Raises:
            ValueError: The file is not a direction (not safetensors, or not nbstream's).

        Example:
            >>> d = Direction.load("sea.safetensors")
        """
        tensors, metadata = _read_safetensors(Path(path))
        return _direction_of(Path(path), tensors, metadata)

    def __repr__(self) -> str:
        return (
            f"Direction(layer={self.layer}, size={self.size}, norm={self.norm:.3g}, "
            f"family={self.family!r}, toward={len(self.toward)}, away={len(self.away)})"
        )


def _examples(prompts: Any, name: str) -> tuple[str, ...]:
    if isinstance(prompts, str) or not isinstance(prompts, Sequence):
        raise TypeError(f"{name} must be a list of prompts (strings), got {prompts!r:.80}")
    if not prompts or not all(isinstance(p, str) and p for p in prompts):
        raise ValueError(f"{name} must hold at least one prompt, each a non-empty string")
    return tuple(prompts)


def _encoder(tokenizer: Any, template: bool) -> Any:
    """How an example becomes input ids: as a run reads a prompt, templated or raw."""

    def encode(text: str) -> Any:
        if template:
            messages = [{"role": "user", "content": text}]
            text = tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
        # The template wrote the special tokens; raw text gets the tokenizer's own (a BOS).
        return tokenizer(text, add_special_tokens=not template, return_tensors="pt")["input_ids"]

    return encode


class _Reached(Exception):
    """Raised by the reading hook once the layer's output is kept: later layers are skipped."""


def _last_state(model: Any, layer: Any, input_ids: Any) -> Any:
    """The output of ``layer`` at the last position of ``input_ids``, float32 on the CPU."""
    import torch

    kept: list[Any] = []
    reader = threading.get_ident()

    def keep(module: Any, args: Any, output: Any) -> None:
        if threading.get_ident() != reader:  # a run on another thread passes untouched
            return
        hidden = output[0] if isinstance(output, tuple) else output
        kept.append(hidden[0, -1].detach().float().cpu())
        raise _Reached

    module = running_module(model)
    device = module.get_input_embeddings().weight.device
    handle = layer.register_forward_hook(keep)
    try:
        with torch.no_grad(), contextlib.suppress(_Reached):
            module(input_ids=input_ids.to(device), use_cache=False)
    finally:
        handle.remove()
    if not kept:
        raise SteeringUnavailable(
            f"decoder layer {type(layer).__name__} never ran in the model's forward pass"
        )
    return kept[0]


# -- reading a file ------------------------------------------------------------------------
def _read_safetensors(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = dict(handle.metadata() or {})
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118
    except FileNotFoundError:
        raise
    except Exception as exc:  # safetensors says "header too large", "invalid JSON"...
        raise ValueError(
            f"{path} is not a direction file: it is not a safetensors file "
            f"({type(exc).__name__}: {exc})"
        ) from exc
    return tensors, metadata


def _direction_of(path: Path, tensors: dict[str, Any], metadata: dict[str, str]) -> Direction:
    if metadata.get("format") != FORMAT:
        raise ValueError(
            f"{path} is not a direction file: it is safetensors, but its metadata does not say "
            f"format={FORMAT!r} (a model's weights, or another tool's vector); write one with "
            "Direction.save"
        )
    if metadata.get("version") != _VERSION:
        raise ValueError(
            f"{path} is a direction of format version {metadata.get('version')!r}; this "
            f"nbstream reads version {_VERSION}"
        )
    vector = tensors.get("vector")
    if set(tensors) != {"vector"} or vector is None or vector.ndim != 1 or not len(vector):
        raise ValueError(f"{path} is not a direction file: it must hold one 1-D tensor 'vector'")
    if not vector.is_floating_point() or not bool(vector.isfinite().all()):
        raise ValueError(f"{path} is not a direction file: its vector is not finite floats")
    try:
        layer = int(metadata["layer"])
        toward, away = json.loads(metadata["toward"]), json.loads(metadata["away"])
        templated = json.loads(metadata["templated"])
    except (KeyError, ValueError) as exc:
        raise ValueError(f"{path} is not a direction file: its metadata is broken ({exc})") from exc
    if layer < 0 or not isinstance(templated, bool):
        raise ValueError(f"{path} is not a direction file: its layer or template flag is wrong")
    sides = (toward, away)
    if not all(isinstance(side, list) and all(isinstance(p, str) for p in side) for side in sides):
        raise ValueError(f"{path} is not a direction file: its examples are not lists of text")
    return Direction(
        vector=vector.float().contiguous(),
        layer=layer,
        family=metadata.get("family", ""),
        model=metadata.get("model", ""),
        toward=tuple(toward),
        away=tuple(away),
        templated=templated,
        file=str(path.resolve()),
    )


# -- steering ------------------------------------------------------------------------------
#: Every direction made in this session, by digest (see the module docstring).
_KNOWN: dict[str, Direction] = {}


def _strength(strength: Any) -> float:
    if isinstance(strength, bool) or not isinstance(strength, (int, float)):
        raise TypeError(f"strength must be a number, got {strength!r:.80}")
    if not math.isfinite(strength):
        raise SteeringUnavailable(f"strength must be a finite number, got {strength!r}")
    return float(strength)


def find_direction(named: Mapping[str, Any]) -> Direction:
    """The direction a run's ``steer`` setting names (its JSON form, as a record keeps it).

    Found by digest among the directions made in this session, else loaded from the file the
    setting names (and checked to be the same vector).

    Args:
        named: ``{"digest", "layer", "size", "strength", "file"}``, as
            :func:`nbstream.settings.validate_settings` writes a ``steer`` setting.

    Returns:
        The direction.

    Raises:
        SteeringUnavailable: Not in memory, and no file holds it; the message says what to do.

    Example:
        >>> find_direction(run.record["settings"]["steer"]) is sea
        True
    """
    digest = str(named.get("digest"))
    known = _KNOWN.get(digest)
    if known is not None:
        return known
    short = f"{digest[:12]} (layer {named.get('layer')}, size {named.get('size')})"
    file = named.get("file")
    if not file:
        raise SteeringUnavailable(
            f"steer names the direction {short}, which is not in this session and was never "
            "saved to a file: build it again with nbstream.Direction.from_examples (the same "
            "examples, model and layer give the same digest) or load it with "
            "nbstream.Direction.load(path), then run again"
        )
    try:
        loaded = Direction.load(file)
    except (OSError, ValueError) as exc:
        raise SteeringUnavailable(
            f"steer names the direction {short}, which is not in this session, and its file "
            f"{file} cannot be read ({exc}); load it with nbstream.Direction.load(path) from "
            "where it is now, then run again"
        ) from None
    if loaded.digest != digest:
        raise SteeringUnavailable(
            f"steer names the direction {short}, but its file {file} now holds another one "
            f"({loaded.digest[:12]}): it was saved over; build or load the direction the run "
            "used, then run again"
        )
    return loaded


def check_steering(model: Any, direction: Direction, strength: Any) -> tuple[Any, float]:
    """Check that ``model`` can be steered along ``direction`` by ``strength``; nothing is added.

    Args:
        model: The model (a PEFT or compiled wrapper is looked through).
        direction: The direction.
        strength: How far along it.

    Returns:
        The decoder layer module the hook goes on, and the strength as a float.

    Raises:
        SteeringUnavailable: The family, layer, size or strength cannot be used.
        TypeError: ``direction`` is not a Direction, or ``strength`` not a number.

    Example:
        >>> layer, strength = check_steering(model, sea, 4)
    """
    if not isinstance(direction, Direction):
        raise TypeError(f"direction must be a Direction, got {type(direction).__name__}")
    amount = _strength(strength)
    layers = decoder_layers(model)
    if direction.layer >= len(layers):
        raise SteeringUnavailable(
            f"the direction is for decoder layer {direction.layer}, but this model has "
            f"{len(layers)} (0 to {len(layers) - 1}): it was built on another model "
            f"({direction.model or 'unknown'}); build one on this model with "
            "Direction.from_examples"
        )
    width = running_module(model).get_input_embeddings().weight.shape[-1]
    if direction.size != width:
        raise SteeringUnavailable(
            f"the direction has {direction.size} numbers but this model's hidden states have "
            f"{width}: it was built on another model ({direction.model or 'unknown'}); build "
            "one on this model with Direction.from_examples"
        )
    return layers[direction.layer], amount


@contextlib.contextmanager
def steered(model: Any, direction: Direction, strength: float) -> Iterator[Direction]:
    """Steer ``model``'s forward passes on this thread along ``direction``, while the block runs.

    Adds ``strength * direction.vector`` to the hidden states output by decoder layer
    ``direction.layer``, at every position. Only the calling thread's forward passes are
    steered (see the module docstring); the hook goes when the block ends, however it ends.

    Args:
        model: The model to steer (a PEFT or compiled wrapper is looked through).
        direction: The direction, of the model's hidden size.
        strength: How far along it (0: unchanged; negative: the other way).

    Yields:
        The direction.

    Raises:
        SteeringUnavailable: The family, layer, size or strength cannot be used (before any
            hook is added).

    Example:
        >>> with steered(model, sea, 4.0):
        ...     out = model.generate(**tokenizer("Hi", return_tensors="pt"), max_new_tokens=9)
    """
    layer, amount = check_steering(model, direction, strength)
    width = running_module(model).get_input_embeddings().weight
    delta = (amount * direction.vector.float()).to(device=width.device, dtype=width.dtype)
    here = threading.local()

    def add(module: Any, args: Any, output: Any) -> Any:
        if not getattr(here, "on", False):  # another thread's forward pass: not ours
            return None
        hidden = output[0] if isinstance(output, tuple) else output
        # The layer's own device and dtype: a model split across devices (device_map)
        # may hold this layer apart from the embeddings.
        same = delta.dtype == hidden.dtype and delta.device == hidden.device
        step = delta if same else delta.to(device=hidden.device, dtype=hidden.dtype)
        hidden = hidden + step
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

    # First among the layer's hooks: transformers' output capture (hidden states for the lens)
    # then records the steered state, the one the next layer reads.
    handle = layer.register_forward_hook(add, prepend=True)
    here.on = True
    try:
        yield direction
    finally:
        here.on = False
        handle.remove()
