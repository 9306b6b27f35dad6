"""What each column of a CompareWidget runs: loading its model, and its name in words.

A model that fails to load gives its column a backend whose runs fail with the reason
(:class:`ModelLoadFailed`), so that the other columns still run. Names are what a heading,
``cw.model_names`` and ``cw.reveal()`` show; two models of one name are numbered.

Example:
    >>> model_name(None)
    'SmolLM2-135M-Instruct'
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..backends.base import Backend, Job, RunControl
from ..recording import Recording
from ..streaming import TokenBuffer
from .compare_args import check_spec

__all__ = [
    "ModelLoadFailed",
    "column_model",
    "column_pairs",
    "competition",
    "distinct_names",
    "model_name",
    "recorded_prompt",
]

logger = logging.getLogger(__name__)


class ModelLoadFailed(RuntimeError):
    """A compare column's model could not be loaded: its runs fail with this, saying why."""


class _FailedJob(Job):
    def __init__(self, prompt: Any, settings: dict[str, Any], error: ModelLoadFailed) -> None:
        super().__init__(prompt, settings)
        self._error = error

    def run(self, buffer: TokenBuffer, control: RunControl) -> str:
        raise self._error


class _Unloadable(Backend):
    """The backend of a column whose model failed to load: each run fails at once, saying why.

    The other columns run as usual; this one shows ``failed`` with the loader's message.
    """

    # A run asking for alternatives must still start, so that it fails with the reason.
    supports_alternatives = True

    def __init__(self, name: str, error: BaseException) -> None:
        self.name = name
        self.error = ModelLoadFailed(
            f"the model {name!r} could not be loaded ({type(error).__name__}: {error}); "
            "the other columns run without it: fix the name or folder, then create the "
            "CompareWidget again"
        )

    def check_alternatives(self, k: int) -> None:
        """Accept any ``k``: the run fails with the load error instead."""

    def describe(self) -> dict[str, Any]:
        """The model asked for, and why it is not there."""
        return {"name": self.name, "class": None, "load_error": str(self.error)}

    def prepare(self, prompt: Any, settings: dict[str, Any], **_branch: Any) -> Job:
        """A job that fails at once with the load error."""
        return _FailedJob(prompt, settings, self.error)


def _local_name(model: Any) -> str:
    from ..models import DEFAULT_NAME, default_model_cache

    config = getattr(model, "config", None)
    path = getattr(model, "name_or_path", None) or getattr(config, "_name_or_path", None)
    if path:
        with contextlib.suppress(OSError, ValueError):
            if Path(str(path)).resolve() == default_model_cache().resolve():
                return DEFAULT_NAME
        return str(path)
    # Built in memory (a test model): its class and size say which it is.
    try:
        size = sum(p.numel() for p in model.parameters())
    except (AttributeError, TypeError):
        return type(model).__name__
    return f"{type(model).__name__} ({size / 1e6:.2g}M parameters)"


def model_name(model: Any) -> str:
    """A column's model in words, as its heading and ``cw.reveal()`` name it.

    Args:
        model: What the column runs: ``None`` (the default model), a hub id or folder, a loaded
            model, an :class:`~nbstream.Endpoint` or a loaded recording.

    Returns:
        e.g. ``"SmolLM2-135M-Instruct"``, ``"llama3 on 127.0.0.1:8000"``,
        ``"replay of SmolLM2-135M-Instruct"``.

    Example:
        >>> model_name(None)
        'SmolLM2-135M-Instruct'
    """
    from ..models import DEFAULT_NAME

    if model is None:
        return DEFAULT_NAME
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model)
    if isinstance(model, Recording):
        recorded = (model.record.get("model") or {}).get("name") or "a recorded model"
        return f"replay of {recorded}"
    if isinstance(model, _Unloadable):
        return model.name
    if isinstance(model, Backend):
        described = model.describe() or {}
        name = str(described.get("name") or type(model).__name__)
        url = described.get("base_url")
        host = urlsplit(str(url)).netloc if url else ""
        return f"{name} on {host}" if host else name
    return _local_name(model)


def column_model(spec: Any) -> tuple[Any, Any]:
    """One entry of ``models=`` as ``(model, tokenizer)``; a model that fails to load, unloadable.

    A loaded model's name, a folder or ``None`` is loaded here; if that fails, the column gets a
    backend whose runs fail with the reason, so that the other columns still run.
    """
    check_spec(spec)
    if isinstance(spec, tuple):
        return spec[0], spec[1]
    if isinstance(spec, (Backend, Recording)):
        return spec, None
    from ..models import model_and_tokenizer

    try:
        return model_and_tokenizer(spec, None)
    except Exception as exc:  # any loader failure: this column fails, the others run
        logger.warning("nbstream: a compare column's model failed to load: %s", exc)
        return _Unloadable(model_name(spec), exc), None


def column_pairs(
    model: Any, tokenizer: Any, specs: list[Any] | None, count: int, prompt: str
) -> tuple[list[tuple[Any, Any]], str]:
    """Each column's ``(model, tokenizer)``, and the prompt every column answers.

    Args:
        model: The one model of every column (``specs`` is ``None``).
        tokenizer: Its tokenizer.
        specs: The entries of ``models=``, one per column, or ``None``.
        count: How many columns.
        prompt: The prompt given; "" takes the one every recording among ``specs`` answered.

    Returns:
        The pairs, left to right, and the prompt.
    """
    if specs is None:
        from ..models import model_and_tokenizer

        return [model_and_tokenizer(model, tokenizer)] * count, prompt
    pairs = [column_model(spec) for spec in specs]
    return pairs, prompt or recorded_prompt(pairs)


def distinct_names(pairs: list[tuple[Any, Any]]) -> list[str]:
    """Each column's model in words; different models of one name numbered (#1, #2)."""
    names = [model_name(m) for m, _ in pairs]
    for name in set(names):
        models = list(
            dict.fromkeys(id(m) for (m, _), n in zip(pairs, names, strict=True) if n == name)
        )
        if len(models) > 1:
            names = [
                f"{n} #{models.index(id(m)) + 1}" if n == name else n
                for (m, _), n in zip(pairs, names, strict=True)
            ]
    return names


def recorded_prompt(pairs: list[tuple[Any, Any]]) -> str:
    """The prompt every recording among the columns answered, or "" (none, or several)."""
    prompts = {m.prompt for m, _ in pairs if isinstance(m, Recording) and isinstance(m.prompt, str)}
    return prompts.pop() if len(prompts) == 1 else ""


def competition(pairs: list[tuple[Any, Any]]) -> str:
    """Which columns run at once on the same processor, in words ("" when none do).

    Columns on different models run at the same time; on one CPU or GPU (or a server on this
    machine) each one's figures then include the others' load.
    """
    places: dict[str, set[int]] = {}
    for m, _ in pairs:
        if isinstance(m, (Recording, _Unloadable)):
            continue
        if isinstance(m, Backend):
            url = (m.describe() or {}).get("base_url")
            host = urlsplit(str(url)).hostname if url else None
            if host not in ("127.0.0.1", "localhost", "::1"):
                continue
            place = "this machine"
        else:
            device = str(getattr(m, "device", "cpu"))
            place = "the CPU" if device == "cpu" else device
        from ..trace import running_module

        # A model and its adapter share weights, and so a queue: they never run at once.
        key = id(m) if isinstance(m, Backend) else id(running_module(m))
        places.setdefault(place, set()).add(key)
    machine = places.pop("this machine", set())
    crowded = [place for place, keys in places.items() if len(keys | machine) > 1]
    if not crowded and len(machine) > 1:
        crowded = ["this machine"]
    if not crowded:
        return ""
    return (
        f"the models run at once on {', '.join(crowded)}: each column's figures include "
        "the others' load"
    )
