"""Generation settings: the names nbstream accepts and how each is checked.

Checked before any thread starts, so bad input never leaves anything running. The page
checks the panel's fields with :func:`settings_schema` (see PROTOCOL.md).

Every checked setting is JSON, so that a run's settings can be recorded, saved and synced as
they are: ``steer=(direction, strength)`` is checked into what names the direction
(:func:`steer_setting`); the local backend finds the direction by that name again
(:func:`nbstream.steering.find_direction`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "DEFAULT_MAX_NEW_TOKENS",
    "DEFAULT_THINKING_TAGS",
    "EXPECT_VALUES",
    "MAX_ALTERNATIVES",
    "MAX_NEW_TOKENS_LIMIT",
    "MAX_SEED",
    "SETTINGS",
    "STEER_KEYS",
    "SteerDirection",
    "check_stop",
    "samples",
    "settings_schema",
    "steer_setting",
    "validate_settings",
]

#: Settings accepted by :func:`nbstream.stream` and the widgets, with what each means.
SETTINGS: dict[str, str] = {
    "max_new_tokens": "most tokens to generate (int > 0)",
    "temperature": "0 means greedy; above 0 samples unless do_sample is given",
    "top_p": "nucleus sampling mass, 0 < top_p <= 1",
    "top_k": "sample among the k most likely tokens (int >= 0; 0 disables)",
    "repetition_penalty": "> 0; 1 means none",
    "do_sample": "sample (True) or pick the most likely token (False)",
    "seed": "int >= 0: makes sampling reproducible without touching the global RNG",
    "budget_s": "wall-clock budget in seconds; an overrun ends the run failed (timeout)",
    "stop": "list of strings: the run ends complete (finish_reason 'stop') at the first one, "
    "which is left out of the text, as is anything after it",
    "expect": "'json': the run completes only if its final text parses as JSON (run.value)",
    "alternatives": "int 0..100: capture run.trace, each token's probability and the model's "
    "top k candidates (0: off; on a server, its logprobs where it sends them)",
    "thinking_tags": "[open, close]: the tags around a reasoning model's thinking at the start "
    "of an answer (default: <think> and </think>); [] turns detection off",
    "enable_thinking": "passed to a chat template that takes it (Qwen3, SmolLM3...): "
    "whether the model thinks before answering",
    "steer": "(direction, strength): add strength x direction.vector to the hidden states "
    "output by the direction's layer, at every position (an nbstream.Direction; a local "
    "model only)",
}

#: The tags around a reasoning model's thinking when neither the run nor the tokenizer
#: names others (DeepSeek-R1 and its distills, Qwen3, SmolLM3).
DEFAULT_THINKING_TAGS = ("<think>", "</think>")

#: The values ``expect`` accepts.
EXPECT_VALUES = ("json",)

# The engine owns these: it streams exactly one sequence through its own streamer and
# stopping rules.
_ENGINE_OWNED = {
    "streamer",
    "stopping_criteria",
    "logits_processor",
    "input_ids",
    "attention_mask",
    "return_dict_in_generate",
    "generation_config",
}
_ONE_SEQUENCE = ("num_beams", "num_return_sequences")

#: The most top-k candidates per token ``alternatives`` may ask for.
MAX_ALTERNATIVES = 100
#: The largest seed a torch generator takes.
MAX_SEED = 2**64 - 1
#: No model nbstream targets has a context this long; anything above is a typo.
MAX_NEW_TOKENS_LIMIT = 1_000_000
#: Used when neither the call nor the model's generation_config sets max_new_tokens
#: (transformers' own fallback, max_length=20, cuts answers mid-sentence).
DEFAULT_MAX_NEW_TOKENS = 256


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Check settings and return them as a plain dict (``None`` values dropped).

    Raises ``TypeError`` for unknown names or wrong types and ``ValueError`` for values out
    of range, each saying what is allowed.
    """
    clean: dict[str, Any] = {}
    for name, value in settings.items():
        if name in _ONE_SEQUENCE:
            if value is None or (_is_int(value) and value == 1):
                continue
            raise ValueError(
                f"{name}={value!r}: nbstream streams exactly one sequence; "
                f"drop {name} (beam search and several return sequences are not supported)"
            )
        if name in _ENGINE_OWNED:
            raise TypeError(f"{name!r} is set by nbstream itself and cannot be passed")
        if name not in SETTINGS:
            allowed = ", ".join(SETTINGS)
            raise TypeError(f"unknown setting {name!r}; allowed settings: {allowed}")
        if value is None:
            continue
        clean[name] = _check(name, value)
    return clean


def _check(name: str, value: Any) -> Any:
    """Check one setting's value; returns it cleaned.

    A list for a tuple, a float for a number. Raises TypeError or ValueError that say what is
    allowed.
    """
    return _CHECKERS.get(name, _check_number)(name, value)


def _check_expect(name: str, value: Any) -> Any:
    if not isinstance(value, str):
        raise TypeError(f"expect must be the string 'json', got {value!r:.80}")
    if value not in EXPECT_VALUES:
        raise ValueError(
            f"expect={value!r} is not supported; the only structured output is expect='json'"
        )
    return value


def _check_max_new_tokens(name: str, value: Any) -> Any:
    if not _is_int(value):
        raise TypeError(f"max_new_tokens must be an int, got {value!r}")
    if value <= 0:
        raise ValueError(f"max_new_tokens must be positive, got {value}")
    if value > MAX_NEW_TOKENS_LIMIT:
        raise ValueError(
            f"max_new_tokens={value} is absurd; use at most {MAX_NEW_TOKENS_LIMIT:,}"
            " (and no more than the model's context allows)"
        )
    return value


def _check_bool(name: str, value: Any) -> Any:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def _check_thinking_tags(name: str, value: Any) -> Any:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise TypeError(
            f"thinking_tags must be a list of two strings, e.g. ['<think>', '</think>'], "
            f"or [] to turn detection off; got {value!r:.80}"
        )
    if value and (len(value) != 2 or not all(isinstance(t, str) and t for t in value)):
        raise ValueError(
            f"thinking_tags must be two non-empty strings (open, close), got {value!r:.80}"
        )
    return list(value)


def _check_alternatives(name: str, value: Any) -> Any:
    if not _is_int(value):
        raise TypeError(f"alternatives must be an int (how many candidates), got {value!r:.80}")
    if not 0 <= value <= MAX_ALTERNATIVES:
        raise ValueError(
            f"alternatives must be between 0 (off) and {MAX_ALTERNATIVES}, got {value}"
        )
    return value


def _check_count(name: str, value: Any) -> Any:
    if not _is_int(value):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    if name == "seed" and value > MAX_SEED:
        # torch's generators take 64 bits; a larger seed would fail inside the run.
        raise ValueError(f"seed must be at most 2**64 - 1 ({MAX_SEED}), got {value}")
    return value


def _check_number(name: str, value: Any) -> Any:
    if not _is_number(value):
        raise TypeError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{name} must be a finite number, got {value}")
    if name == "temperature" and value < 0:
        raise ValueError(f"temperature must be >= 0 (0 means greedy), got {value}")
    if name == "top_p" and not 0 < value <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {value}")
    if name == "repetition_penalty" and value <= 0:
        raise ValueError(f"repetition_penalty must be > 0 (1 means none), got {value}")
    if name == "budget_s" and value <= 0:
        raise ValueError(f"budget_s must be > 0 seconds, got {value}")
    return value


#: The keys of a checked ``steer`` setting, as a run's settings and record hold it.
STEER_KEYS = ("digest", "layer", "size", "strength", "file")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_STEER_EXAMPLE = "e.g. steer=(nbstream.Direction.load('sea.safetensors'), 4.0)"


@runtime_checkable
class SteerDirection(Protocol):
    """What ``steer`` reads of a direction (:class:`nbstream.Direction` has it all).

    Settings sit below the steering module, so the check names what it reads instead of
    importing the class.
    """

    @property
    def digest(self) -> str:
        """SHA-256 of its vector and layer."""

    @property
    def size(self) -> int:
        """The hidden size."""

    @property
    def layer(self) -> int:
        """The decoder layer (0-based)."""

    @property
    def file(self) -> str | None:
        """The file it was loaded from or saved to, if any."""


def steer_setting(direction: SteerDirection, strength: Any) -> dict[str, Any]:
    """The checked ``steer`` setting for ``direction`` at ``strength``: JSON that names it.

    Args:
        direction: An :class:`nbstream.Direction`.
        strength: How far along it (a finite number).

    Returns:
        ``{"digest", "layer", "size", "strength", "file"}`` (:data:`STEER_KEYS`).

    Raises:
        TypeError: Not a direction, or a strength that is not a number.
        ValueError: A strength that is not finite.

    Example:
        >>> steer_setting(sea, 4)["strength"]
        4.0
    """
    if not isinstance(direction, SteerDirection):
        raise TypeError(
            "steer's direction must be an nbstream.Direction (built with "
            "Direction.from_examples or read with Direction.load), got "
            f"{type(direction).__name__}; {_STEER_EXAMPLE}"
        )
    if not _is_number(strength):
        raise TypeError(f"steer's strength must be a number, got {strength!r:.80}")
    if not math.isfinite(strength):
        raise ValueError(f"steer's strength must be a finite number, got {strength}")
    return {
        "digest": direction.digest,
        "layer": int(direction.layer),
        "size": int(direction.size),
        "strength": float(strength),
        "file": direction.file,
    }


def _check_steer(name: str, value: Any) -> Any:
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return steer_setting(value[0], value[1])
    if not isinstance(value, Mapping):
        raise TypeError(
            f"steer must be a pair (direction, strength), {_STEER_EXAMPLE}; got {value!r:.80}"
        )
    # A record's form (rerun, a recording's settings): checked key by key.
    if set(value) != set(STEER_KEYS):
        raise ValueError(
            f"a recorded steer has exactly the keys {', '.join(STEER_KEYS)}, got "
            f"{', '.join(map(str, value))}; to steer a run, pass (direction, strength), "
            f"{_STEER_EXAMPLE}"
        )
    digest, layer, size, strength, file = (value[key] for key in STEER_KEYS)
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise ValueError(f"a recorded steer's digest is 64 hex digits, got {digest!r:.80}")
    if not (_is_int(layer) and layer >= 0 and _is_int(size) and size > 0):
        raise ValueError(
            f"a recorded steer's layer is an int >= 0 and its size an int > 0, got "
            f"layer={layer!r:.40}, size={size!r:.40}"
        )
    if not _is_number(strength) or not math.isfinite(strength):
        raise ValueError(f"a recorded steer's strength is a finite number, got {strength!r:.40}")
    if file is not None and not isinstance(file, str):
        raise ValueError(f"a recorded steer's file is a path or None, got {file!r:.80}")
    return {**dict(value), "strength": float(strength)}


#: Each setting's checker; a setting not named here is a real number (_check_number).
_CHECKERS: dict[str, Callable[[str, Any], Any]] = {
    "stop": lambda name, value: check_stop(value),
    "expect": _check_expect,
    "max_new_tokens": _check_max_new_tokens,
    "do_sample": _check_bool,
    "enable_thinking": _check_bool,
    "thinking_tags": _check_thinking_tags,
    "alternatives": _check_alternatives,
    "seed": _check_count,
    "top_k": _check_count,
    "steer": _check_steer,
}


# Each setting's type and bounds, as _check enforces them (tests/test_protocol.py checks the
# two agree at every bound). "strings": a list of non-empty strings; "string": one of values.
_SCHEMA: dict[str, dict[str, Any]] = {
    "max_new_tokens": {
        "type": "int",
        "min": 0,
        "min_exclusive": True,
        "max": MAX_NEW_TOKENS_LIMIT,
    },
    "temperature": {"type": "float", "min": 0},
    "top_p": {"type": "float", "min": 0, "min_exclusive": True, "max": 1},
    "top_k": {"type": "int", "min": 0},
    "repetition_penalty": {"type": "float", "min": 0, "min_exclusive": True},
    "do_sample": {"type": "bool"},
    "seed": {"type": "int", "min": 0, "max": MAX_SEED},
    "budget_s": {"type": "float", "min": 0, "min_exclusive": True},
    "stop": {"type": "strings", "min_items": 1},
    "expect": {"type": "string", "values": list(EXPECT_VALUES)},
    "alternatives": {"type": "int", "min": 0, "max": MAX_ALTERNATIVES},
    "thinking_tags": {"type": "tags"},
    "enable_thinking": {"type": "bool"},
    # For code only: the Settings panel's steering slider sets the strength of the widget's
    # direction (steer_strength), never this setting's value.
    "steer": {"type": "steer"},
}
# A value far outside any bound, whose text cannot occur in a message by accident.
_PROBE = 987_654_321


def settings_schema() -> dict[str, dict[str, Any]]:
    """Every setting's type and allowed range, as JSON.

    This is what the settings panel checks as a value is typed (the widgets' ``settings_schema``
    trait; see PROTOCOL.md).

    ``{name: {"type", "nullable", "help", "min", "max", "min_exclusive", "max_exclusive",
    "messages"}}`` (and ``"min_items"`` / ``"values"`` where they apply). ``type`` is
    ``int``, ``float``, ``bool``, ``strings`` (a list of non-empty strings) or ``string``;
    ``nullable``: None means unset (the model's default). ``tags`` is two non-empty strings
    (open, close), or an empty list for none; ``steer`` is ``(direction, strength)`` or its
    recorded form (code only). ``messages`` holds
    :func:`validate_settings`'s own message for a value below ``min`` / above ``max``, the
    value written ``{value}``, so that the page says exactly what the kernel would.
    """
    schema: dict[str, dict[str, Any]] = {}
    for name, help_text in SETTINGS.items():
        entry: dict[str, Any] = {
            "type": _SCHEMA[name]["type"],
            "nullable": True,
            "help": help_text,
            "min": None,
            "max": None,
            "min_exclusive": False,
            "max_exclusive": False,
            **_SCHEMA[name],
        }
        messages = {}
        if entry["min"] is not None:
            messages["below"] = _message_template(name, entry["type"], entry["min"] - _PROBE)
        if entry["max"] is not None:
            messages["above"] = _message_template(name, entry["type"], entry["max"] + _PROBE)
        entry["messages"] = messages
        schema[name] = entry
    return schema


def _message_template(name: str, kind: str, probe: int) -> str:
    """validate_settings' message for ``probe``, with the value written ``{value}``."""
    value: int | float = float(probe) if kind == "float" else probe
    try:
        validate_settings({name: value})
    except (TypeError, ValueError) as exc:
        return str(exc).replace(str(value), "{value}")
    raise AssertionError(f"{name}={value} was accepted: _SCHEMA and _check disagree")


def samples(settings: Mapping[str, Any], default: bool | None = None) -> bool | None:
    """Whether a run with these (validated) settings samples: the one rule, used everywhere.

    ``temperature=0`` is greedy; an explicit ``do_sample`` decides; any other temperature
    samples; otherwise ``default`` (the model's own ``do_sample``, or None when unknown).
    Raises ``ValueError`` for ``temperature=0`` with ``do_sample=True``, which contradict.
    """
    temperature = settings.get("temperature")
    do_sample = settings.get("do_sample")
    if temperature == 0:
        if do_sample:
            raise ValueError(
                "temperature=0 means greedy decoding, which contradicts do_sample=True; "
                "set temperature above 0 or drop do_sample"
            )
        return False
    if isinstance(do_sample, bool):
        return do_sample
    if temperature is not None:
        return True
    return default


def check_stop(value: Any) -> list[str]:
    """A list of stop strings, checked; raises with what to pass instead."""
    # A bare string is the likeliest mistake; iterating it would stop at every character.
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise TypeError(
            f"stop must be a list of strings, e.g. stop=['\\n\\n', 'END'], got {value!r:.80}"
        )
    if not value:
        raise ValueError("stop must hold at least one string; leave it unset for no stop strings")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise TypeError(f"stop[{i}] must be a str, got {type(item).__name__}")
        if not item:
            raise ValueError(f"stop[{i}] is empty; every stop string needs at least one character")
        try:
            item.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"stop[{i}] is not valid Unicode ({exc.reason} at position {exc.start})"
            ) from None
    return list(dict.fromkeys(value))  # a list (JSON-friendly), duplicates dropped
