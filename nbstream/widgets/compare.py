"""``CompareWidget``: one prompt, two to four settings or models, side by side.

Each column is a :class:`~nbstream.StreamWidget` with its own state, Stop and record; the
header holds the shared prompt, **Run all**, **Stop all**, the **Same seed** and **Blind**
checkboxes, a summary of the columns' states, and (comparing models, or blind) a vote
button per column and **Reveal**. Columns sharing a model run one after the other (the
engine's queue: first in, first out, never interleaved), so a column waiting its turn
shows ``queued``; columns on different models run at once. See PROTOCOL.md for the
header's traits and messages.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, cast
from urllib.parse import urlsplit

import anywidget
import ipywidgets
import traitlets

from .._errors import input_checked
from ..backends.base import Backend, Job, RunControl
from ..generation import QUEUED, RUNNING, Generation, GenerationError
from ..protocol import CompareRecord, LensReply, RunRecord, RunWidgetMessage
from ..recording import Recording
from ..settings import samples, validate_settings
from ..streaming import TokenBuffer
from .base import VIEW_TOGGLES, error_summary
from .blind import (
    HIDDEN_BRANCH,
    HIDDEN_ERROR,
    HIDDEN_LENS,
    HIDDEN_RUN,
    LABELS,
    MASKED_TRAITS,
    BlindRound,
    shown_error,
    shown_message,
    shown_metrics,
    shown_record,
    shown_state,
)
from .display import (
    Bundle,
    FallbackDisplay,
    ShownMetrics,
    compare_fallback_bundle,
    fallback_bundle,
    show,
    shown_by_widget,
    states_summary,
)
from .route import PageRoute, answer_on_sending_subshell
from .settings_panel import PANEL_SETTINGS, TRAIT_OF_SETTING
from .stream import StreamWidget

logger = logging.getLogger(__name__)

_STATIC = Path(__file__).parent.parent / "static"

#: How many settings (columns) a CompareWidget compares.
MIN_COLUMNS, MAX_COLUMNS = 2, 4
#: The settings compared when none are given: greedy, a moderate and a high temperature.
DEFAULT_SETTINGS: tuple[dict[str, Any], ...] = (
    {"temperature": 0},
    {"temperature": 0.7},
    {"temperature": 1.3},
)
# After a KeyboardInterrupt in wait(), how long to wait for the stopped runs to end.
_INTERRUPT_GRACE_S = 10.0
# Labels: how each setting is named in a column's heading (in this order).
_LABELS = {
    "temperature": "temperature",
    "top_p": "top-p",
    "top_k": "top-k",
    "repetition_penalty": "repetition penalty",
    "max_new_tokens": "max new tokens",
    "do_sample": "sampling",
    "stop": "stop",
    "expect": "expect",
    "budget_s": "budget",
    "alternatives": "alternatives",
}

__all__ = [
    "DEFAULT_SETTINGS",
    "HIDDEN_ERROR",
    "HIDDEN_LENS",
    "HIDDEN_RUN",
    "LABELS",
    "CompareWidget",
    "ModelLoadFailed",
    "TextDivergence",
    "model_name",
]


def _check_column_settings(settings: Any) -> list[dict[str, Any]]:
    """The columns' settings as plain dicts, or a TypeError / ValueError saying what to do."""
    example = "settings=[{'temperature': 0}, {'temperature': 0.7}]"
    if isinstance(settings, (str, bytes, Mapping)) or not isinstance(settings, Sequence):
        raise TypeError(
            f"settings must be a list of {MIN_COLUMNS} to {MAX_COLUMNS} dicts, one per column, "
            f"e.g. {example}; got {type(settings).__name__}"
        )
    if not MIN_COLUMNS <= len(settings) <= MAX_COLUMNS:
        hint = (
            "for one setting use nbstream.StreamWidget"
            if len(settings) < MIN_COLUMNS
            else "split them over several CompareWidgets"
        )
        raise ValueError(
            f"CompareWidget compares {MIN_COLUMNS} to {MAX_COLUMNS} settings, got "
            f"{len(settings)}; {hint}"
        )
    columns = []
    for i, column in enumerate(settings):
        if not isinstance(column, Mapping):
            raise TypeError(
                f"settings[{i}] must be a dict of settings such as {{'temperature': 0.7}}, "
                f"got {type(column).__name__}"
            )
        columns.append(_named(f"settings[{i}]", dict(column)))
    return columns


def _named(where: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """validate_settings, its message prefixed with which settings it is about."""
    try:
        clean = validate_settings(settings)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{where}: {exc}") from None
    try:
        samples(clean)  # contradicting settings, refused before any column runs
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return clean


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def describe_settings(settings: Mapping[str, Any], seed: int | None = None) -> str:
    """A column's label: its settings in words, e.g. ``"temperature 0.7 · seed 42"``."""
    parts = []
    for name, word in _LABELS.items():
        value = settings.get(name)
        if value is None:
            continue
        if name == "do_sample":
            parts.append("sampled" if value else "greedy")
        elif name == "temperature" and value == 0:
            parts.append("temperature 0 (greedy)")
        elif name == "stop":
            parts.append(f"stop {', '.join(map(repr, value))}")
        elif name == "budget_s":
            parts.append(f"budget {_number(value)} s")
        else:
            parts.append(f"{word} {_number(value)}")
    if seed is not None:
        parts.append(f"seed {seed}")
    return " · ".join(parts) or "model defaults"


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


def _draw_seed() -> int:
    # As the engine draws a sampled run's seed: from torch's global generator (so
    # torch.manual_seed(n) before generate() still decides it), below 2**32 (exact in JSON).
    from ..backends.local import draw_seed

    return draw_seed()


# -- columns on different models ----------------------------------------------------------------
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


def _column_model(spec: Any) -> tuple[Any, Any]:
    """One entry of ``models=`` as ``(model, tokenizer)``; a model that fails to load, unloadable.

    A loaded model's name, a folder or ``None`` is loaded here; if that fails, the column gets a
    backend whose runs fail with the reason, so that the other columns still run.
    """
    _check_spec(spec)
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


def _check_spec(spec: Any) -> None:
    """Refuse an entry of ``models=`` that is no model, before anything loads."""
    if isinstance(spec, tuple):
        if len(spec) != 2:
            raise TypeError(
                f"a (model, tokenizer) pair has two items, got {len(spec)}; e.g. "
                "models=[nbstream.load_model(), 'HuggingFaceTB/SmolLM2-360M-Instruct']"
            )
        return
    if spec is None or isinstance(spec, (str, os.PathLike, Backend, Recording)):
        return
    raise TypeError(
        f"models entries are a hub id or folder, None (the default model), a (model, "
        f"tokenizer) pair, an nbstream.Endpoint or a loaded recording; got "
        f"{type(spec).__name__} (a loaded model goes with its tokenizer: (model, tokenizer))"
    )


def _check_models(
    model: Any, tokenizer: Any, models: Any, settings: Any, blind: Any
) -> tuple[list[Any] | None, Any]:
    """``models=`` as a list (None: one model for every column), and the settings.

    The settings are one empty dict per model when not given.
    """
    if not isinstance(blind, bool):
        raise TypeError(f"blind must be True or False, got {blind!r:.80}")
    if models is None:
        return None, settings
    if model is not None or tokenizer is not None:
        raise TypeError(
            "pass the models as models=[...] (one per column), or one model (and its "
            "tokenizer) for every column, not both"
        )
    if isinstance(models, (str, bytes, Mapping)) or not isinstance(models, Sequence):
        raise TypeError(
            f"models must be a list of {MIN_COLUMNS} to {MAX_COLUMNS} models, one per column, "
            f"e.g. models=[None, 'HuggingFaceTB/SmolLM2-360M-Instruct']; got "
            f"{type(models).__name__}"
        )
    if not MIN_COLUMNS <= len(models) <= MAX_COLUMNS:
        raise ValueError(
            f"CompareWidget compares {MIN_COLUMNS} to {MAX_COLUMNS} models, got {len(models)}"
        )
    for spec in models:
        _check_spec(spec)
    if settings is DEFAULT_SETTINGS:
        return list(models), [{} for _ in models]
    sized = isinstance(settings, Sequence) and not isinstance(settings, (str, bytes))
    if sized and len(settings) != len(models):
        raise ValueError(
            f"settings has {len(settings)} dicts for {len(models)} models: give one per "
            "model (an empty dict for its defaults), or none"
        )
    return list(models), settings


# -- where answers part, by text ------------------------------------------------------------
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


def _ended(column: StreamWidget) -> bool:
    """Whether a column's run has ended (a column that never ran has not)."""
    run = column.run
    return run is not None and run.done and column.status not in (QUEUED, RUNNING)


def _distinct_names(pairs: list[tuple[Any, Any]]) -> list[str]:
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


def _recorded_prompt(pairs: list[tuple[Any, Any]]) -> str:
    """The prompt every recording among the columns answered, or "" (none, or several)."""
    prompts = {m.prompt for m, _ in pairs if isinstance(m, Recording) and isinstance(m.prompt, str)}
    return prompts.pop() if len(prompts) == 1 else ""


def _competition(pairs: list[tuple[Any, Any]]) -> str:
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


class Runs(list[Generation]):
    """The runs one :meth:`CompareWidget.generate` started, one per column (a plain list).

    As a cell's last value it shows each run as a run is shown
    (``nbstream.widgets.display.show_run``): nothing where the CompareWidget is on the page,
    which follows them; never a snapshot of their states that would go stale. Its repr
    names no figure and no replay while the round is hidden.
    """

    def __init__(self, runs: list[Generation], hidden: Callable[[], bool] = lambda: False) -> None:
        super().__init__(runs)
        self._hidden = hidden

    def __repr__(self) -> str:
        if not self._hidden():
            return super().__repr__()
        return repr([_HiddenRun(run) for run in self])

    def _ipython_display_(self) -> None:
        for run in self:
            show(run)


class _HiddenRun(NamedTuple):
    run: Generation

    def __repr__(self) -> str:
        text = self.run.partial_text
        preview = text[:40] + ("…" if len(text) > 40 else "")
        return f"<Generation {self.run.status} text={preview!r}>"


class _Header(anywidget.AnyWidget):
    """The header of a :class:`CompareWidget`: shared prompt, Run all, Stop all, Same seed.

    Its front end is js/src/compare.js; the traits below are mirrored at its top.
    """

    _esm = _STATIC / "compare.js"
    _css = _STATIC / "compare.css"

    # -- synced both ways -------------------------------------------------------------------
    #: The shared prompt box.
    prompt = traitlets.Unicode("").tag(sync=True)
    #: The "Same seed" checkbox.
    same_seed = traitlets.Bool(False).tag(sync=True)
    #: The "Blind" checkbox: columns named only A, B, C, each running a model drawn per run.
    blind = traitlets.Bool(False).tag(sync=True)
    # -- kernel to page ---------------------------------------------------------------------
    #: Each column's state, left to right.
    statuses = traitlets.List(traitlets.Unicode()).tag(sync=True)
    #: One line on the columns' states (and the shared seed).
    summary = traitlets.Unicode("").tag(sync=True)
    #: Why the last Run all click started nothing, or "".
    input_error = traitlets.Unicode("").tag(sync=True)
    #: Each column's ``in_run_all``, left to right: the columns whose current run a Run all
    #: started; the header says their start and their end once (js/src/announce.js).
    in_run_all = traitlets.List(traitlets.Bool()).tag(sync=True)
    #: Whether the header shows a vote button per column and Reveal (models compared, or
    #: blind).
    voting = traitlets.Bool(False).tag(sync=True)
    #: The columns' labels, left to right as shown (the vote buttons).
    labels = traitlets.List(traitlets.Unicode()).tag(sync=True)
    #: Label to count, for the current round.
    votes = traitlets.Dict().tag(sync=True)
    #: Whether a vote is taken now: a round ran, every column ended, and it is not revealed.
    can_vote = traitlets.Bool(False).tag(sync=True)
    #: Label to model, once the round is revealed; ``{}`` before.
    revealed = traitlets.Dict().tag(sync=True)
    #: Why the last vote or reveal was refused, or "".
    vote_error = traitlets.Unicode("").tag(sync=True)

    def __init__(self, **traits: Any) -> None:
        # The page's subshell, so that Stop all is handled while a cell keeps the kernel
        # busy (see nbstream.widgets.route).
        self.route = PageRoute()
        super().__init__(**traits)
        answer_on_sending_subshell(self.comm)

    def send_state(self, key: Any = None) -> None:
        with self.route.publishing(self.comm):
            super().send_state(key)

    def send(self, content: Any, buffers: Any = None) -> None:
        with self.route.publishing(self.comm):
            super().send(content, buffers)

    def __repr__(self) -> str:
        return f"<CompareWidget header statuses={self.statuses!r}>"


# What a column's model brings to it, swapped between columns in a blind round (the
# columns stay where they are on the page, left to right: A, B, C).
_SLOT_STATE = (
    "_model",
    "_tokenizer",
    "_replaying",
    "_server_tokens",
    "_settings",
    "_own",
    # Whether (and why not) it can branch: a replay, a server and a local model differ.
    "_model_branches",
    "_endpoint",
    "_cannot_branch",
)
_SLOT_TRAITS = ("settings_defaults", "can_trace", "can_explain", "can_lens")
# The traits every anywidget has (its model's and view's names, its code, its layout): a
# hidden round sends them as they are.
_WIDGET_KEYS = frozenset(anywidget.AnyWidget.class_trait_names(sync=True)) | {
    "_esm",
    "_css",
    "_anywidget_id",
}


class _Column(StreamWidget):
    """A column of a CompareWidget: a StreamWidget whose runs take the compare's shared seed.

    Its own Run button (and ``generate``) reruns this column alone, with the seed the
    compare last shared while "same seed" is on. In a blind round the compare hands each
    column another model (:meth:`slot`, :meth:`serve`); while the round is hidden, the traits
    that would tell the models apart are covered (:meth:`relabel`).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        own: dict[str, Any],
        hidden: Callable[[], bool] = lambda: False,
        **settings: Any,
    ) -> None:
        # The settings this column varies (its dict), named in its label, and all of its
        # settings as created: a setting later changed in its panel is named too.
        self._own = own
        self._created = settings
        self._shared_seed: Callable[[], int | None] = lambda: None
        # The compare's heading for this column, from its settings in words (the model's
        # name, a letter in a vote); whether the round hides what the column runs (known
        # before the first state leaves for the page); what the hidden round shows of the
        # columns' capabilities; this column's record["compare"].
        self._dress: Callable[[_Column, str], str] = lambda _column, words: words
        self._hides_template = hidden
        self._covered_caps: Callable[[], dict[str, bool]] = dict
        self._note: Callable[[_Column], CompareRecord | None] = lambda _column: None
        self._words = ""
        # The model's own values of the covered traits (settings_defaults, can_*).
        self._real: dict[str, Any] = {}
        super().__init__(model, tokenizer, **settings)
        self._real = {name: getattr(self, name) for name in _SLOT_TRAITS}

    #: Whether this column's current run was started by the compare's Run all (or
    #: ``cw.generate()``): the compare header then says the runs' start and end once, for
    #: every column, and this column's views say nothing of it (js/src/announce.js); False
    #: for a run of its own (its Run button, its ``generate()``, a branch), which its views
    #: say. Set before the run's first state (its own message, so a view has it when the
    #: run's status comes), and never while a run is queued or running.
    in_run_all = traitlets.Bool(False).tag(sync=True)

    # -- the model this column runs ---------------------------------------------------------
    def slot(self) -> dict[str, Any]:
        """What this column's model brings: model, tokenizer, settings and capabilities."""
        with self._lock:
            state = {name: getattr(self, name) for name in _SLOT_STATE}
            panel = {trait: getattr(self, trait) for trait in PANEL_SETTINGS}
            return {**state, "created": self._created, "panel": panel, "real": dict(self._real)}

    def serve(self, slot: dict[str, Any]) -> None:
        """Run another model from the next run on (never while a run is queued or running)."""
        with self._lock, self.hold_sync():
            for name in _SLOT_STATE:
                setattr(self, name, slot[name])
            self._created = slot["created"]
            self._real = dict(slot["real"])
            # The views' token pieces come from the model's own tokenizer.
            self._feed._tokenizer = self._tokenizer
            self._feed._pieces = None
            self._explainer.close()
            self._explainer = self._make_explainer()
            for trait, value in slot["panel"].items():
                if getattr(self, trait) != value:
                    setattr(self, trait, value)

    def _set_in_run_all(self, value: bool) -> None:
        with self._lock:
            if not self._busy() and self.in_run_all != value:
                self.in_run_all = value

    def _setting(self, name: str, call: Mapping[str, Any]) -> Any:
        """The value of setting ``name`` for a run given ``call``'s settings."""
        if name in call:
            return call[name]
        trait = TRAIT_OF_SETTING.get(name)
        return getattr(self, trait) if trait is not None else self._created.get(name)

    def samples(self, call: Mapping[str, Any] | None = None) -> bool:
        """Whether a run (given ``call``'s settings) samples; a greedy run ignores any seed.

        Unknown (a model without a generation config, such as an endpoint): True.
        """
        call = call or {}
        settings = {name: self._setting(name, call) for name in ("temperature", "do_sample")}
        default = (self._real.get("settings_defaults") or self.settings_defaults).get("do_sample")
        try:
            return bool(samples(settings, default if isinstance(default, bool) else True))
        except ValueError:  # contradicting settings: the run itself refuses them
            return False

    def describe(self, call: Mapping[str, Any] | None = None, seed: int | None = None) -> str:
        """This column's label for a run given ``call``'s settings and using ``seed``."""
        call = call or {}
        names = [*self._own]
        for trait, name in PANEL_SETTINGS.items():
            changed = getattr(self, trait) != self._created.get(name)
            if name != "seed" and name not in names and (changed or name in call):
                names.append(name)
        shown = {name: self._setting(name, call) for name in names if name != "seed"}
        return describe_settings(shown, seed)

    def generate(self, prompt: Any = None, **settings: Any) -> Generation:
        # A run of this column alone (its Run button, code): its views say it. Refused in a
        # hidden blind round: the round's answer would change without anyone seeing it.
        if self._hides_template():
            raise RuntimeError(HIDDEN_RUN)
        return self._generate(False, prompt, **settings)

    def _generate(self, run_all: bool, prompt: Any = None, **settings: Any) -> Generation:
        # The lock across: no other run can start between the flag and this run.
        with self._lock:
            self._set_in_run_all(run_all)
            if self._setting("seed", settings) is None and self.samples(settings):
                shared = self._shared_seed()
                if shared is not None:
                    settings["seed"] = shared
            run = super().generate(prompt, **settings)
            # The seed the run uses: given, shared, or drawn by the engine.
            seed = run.seed
            self._words = self.describe(settings, seed)
            self.label = self._dress(self, self._words)
            return run

    # -- what a hidden blind round covers -----------------------------------------------------
    def _covered(self) -> dict[str, Any]:
        """The traits that tell the models apart: neutral while hidden, else the model's own."""
        run = self.run
        if self._hides_template():
            return {
                "settings_defaults": {},
                "prompt_text": None,
                "prompt_tokens": None,
                "can_lens": False,
                "metrics": shown_metrics(None if run is None else run.metrics),
                **self._covered_caps(),
            }
        return {
            **self._real,
            "prompt_text": None if run is None else run.prompt_text,
            "prompt_tokens": None if run is None else run.prompt_tokens,
            "metrics": {} if run is None else dict(run.metrics),
        }

    def _cover(self) -> bool:
        """Set the covered traits (inside ``hold_sync``); True if the tokens can show again."""
        traced = self.can_trace
        for name, value in self._covered().items():
            if getattr(self, name) != value:
                setattr(self, name, value)
        return self.can_trace and not traced

    def relabel(self) -> None:
        """Write the heading again (a reveal, a new round), and what the round covers."""
        with self.hold_sync():
            self.label = self._dress(self, self._words or self.describe())
            traced = self._cover()
            run = self.run
            if run is not None and run.done and self.status not in (QUEUED, RUNNING):
                error = self.error_words(run)
                if self.error_info != error:
                    self.error_info = error  # type: ignore[assignment]
            self.branch_unavailable = self._why_no_branch()
        # What the page holds of the masked traits changes with the hiding, not with their
        # values: sent again either way (under the lock, as every write of this widget).
        with self._lock:
            self.send_state(list(MASKED_TRAITS))
        if traced:
            # Held back while hidden (a server's column had none): the views get them now,
            # after the state that lets them show.
            self._send_all_tokens()

    def error_words(self, run: Generation) -> dict[str, str] | None:
        """``run``'s error as the views show it (while hidden, without its words)."""
        error = error_summary(run.error)
        if self._hides_template():
            # A message names a model, a server's URL or an architecture.
            hidden = shown_error(error)
            return (
                None if hidden is None else {"type": hidden["type"], "message": hidden["message"]}
            )
        return error

    # -- what a hidden round lets out: the page's state, messages, text copies, repr ---------
    def get_state(self, key: Any = None, drop_defaults: bool = False) -> dict[str, Any]:
        """The synced state; while hidden, as :func:`~nbstream.widgets.blind.shown_state` has it.

        Everything the page (and so a saved notebook) gets of this column passes here.
        """
        state: dict[str, Any] = super().get_state(key, drop_defaults)
        if self.__dict__.get("_hides_template", bool)():
            return shown_state(state, _WIDGET_KEYS)
        return state

    def set_state(self, sync_data: Any) -> None:
        """State from the page; while hidden, never a masked trait (the page shows it blank)."""
        masked = []
        if isinstance(sync_data, dict) and self._hides_template():
            masked = [name for name in sync_data if name in MASKED_TRAITS]
            sync_data = {k: v for k, v in sync_data.items() if k not in MASKED_TRAITS}
        super().set_state(sync_data)
        if masked:
            self.send_state(masked)  # the page's field back to what it shows while hidden

    def _send_msg(self, content: RunWidgetMessage) -> None:
        if self._hides_template():
            content = cast("RunWidgetMessage", shown_message(content))
        super()._send_msg(content)

    # The base class's validator of the same name, extended: one validator per trait.
    @traitlets.validate("metrics")
    def _short_printout(self, proposal: dict[str, Any]) -> ShownMetrics:
        shown = ShownMetrics(super()._short_printout(proposal))
        if self.__dict__.get("_hides_template", bool)():
            return ShownMetrics(shown_metrics(shown))
        return shown

    def _why_no_branch(self) -> str:
        # Every column says the same while hidden: a recording's reason would name it.
        if self.__dict__.get("_hides_template", bool)():
            return HIDDEN_BRANCH
        return super()._why_no_branch()

    def _fallback(self) -> tuple[str, dict[str, str]]:
        run = self._run
        if run is None or not self._hides_template():
            return super()._fallback()
        status = run.status  # read first: the text of an ended run is final
        text = run.partial_text
        figures = shown_metrics(run.metrics)
        error = self.error_words(run)
        return status, fallback_bundle(status, text, figures, error, thinking=run.thinking)

    def _shown_fallback(self) -> tuple[str, dict[str, str]]:
        # Not marked as a replay while hidden: that would say what the column runs.
        return self._fallback() if self._hides_template() else super()._shown_fallback()

    def __repr__(self) -> str:
        if self._hides_template():
            return f"<StreamWidget status={self.status!r} run_id={self.run_id}>"
        return super().__repr__()

    def _end_traits(self, run: Generation) -> dict[str, Any]:
        return {**super()._end_traits(run), "error_info": self.error_words(run)}

    def _on_start(self, run: Generation, run_id: int) -> None:
        super()._on_start(run, run_id)
        if self._server_tokens:  # a server's run decides can_trace (its logprobs asked for)
            self._real["can_trace"] = self.can_trace
        self._cover()

    def _handle_view_message(self, content: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "lens" and self._hides_template():
            self._refuse_lens(content)
            return
        super()._handle_view_message(content)

    def _refuse_lens(self, content: dict[str, Any]) -> None:
        """Answer a lens request while hidden: it shows the templated prompt and the layers."""
        view, request = content.get("view"), content.get("request")
        if not isinstance(view, str) or isinstance(request, bool) or not isinstance(request, int):
            return
        run_id, step = content.get("run_id"), content.get("step")
        reply: LensReply = {
            "type": "lens",
            "view": view,
            "request": request,
            "run_id": run_id if isinstance(run_id, int) else None,
            "step": step if isinstance(step, int) else None,
            "error": HIDDEN_LENS,
        }
        self._send_msg(reply)

    @property
    def compare_note(self) -> CompareRecord | None:
        """What this column's record says of the comparison (``record["compare"]``)."""
        return self._note(self)

    @property
    def record(self) -> RunRecord | None:
        """The run's record, with what it was in the comparison (``record["compare"]``)."""
        record = super().record
        note = self.compare_note
        if record is None:
            return None
        copy = record.copy()
        if note is not None:
            copy["compare"] = note
        return shown_record(copy) if self._hides_template() else copy

    def branch(self, step: int, token: Any, **settings: Any) -> Generation:
        # A branch is this column's own run (Continue in its popover): its views say it.
        if self._hides_template():
            raise RuntimeError(HIDDEN_RUN)
        with self._lock:
            self._set_in_run_all(False)
            return super().branch(step, token, **settings)


def _check_arguments(
    prompt: Any,
    settings: Sequence[Mapping[str, Any]],
    same_seed: bool | None,
    seed: int | None,
    common: dict[str, Any],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, bool], bool]:
    """Check a CompareWidget's arguments.

    Returns (columns' own settings, merged settings, view toggles, same_seed). Pops the view toggles
    out of ``common``.
    """
    if not isinstance(prompt, str):
        raise TypeError(
            f"prompt must be a string (one prompt for every column), got {type(prompt).__name__}"
        )
    columns = _check_column_settings(settings)
    # The teaching views' toggles (show_tokens=True, ...) are not settings: every column
    # gets them.
    views = {name: common.pop(name) for name in VIEW_TOGGLES if name in common}
    for name, value in views.items():
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {value!r:.80}")
    shared = _named("keyword settings", common)
    merged = [_named(f"settings[{i}]", {**shared, **own}) for i, own in enumerate(columns)]
    if seed is not None:
        validate_settings({"seed": seed})
    if same_seed is None:
        same_seed = seed is not None
    if not isinstance(same_seed, bool):
        raise TypeError(f"same_seed must be True or False, got {same_seed!r}")
    if seed is not None and not same_seed:
        raise ValueError(
            f"seed={seed} is the seed shared by same_seed=True; pass same_seed=True too, "
            "or give a column its own seed in its settings dict"
        )
    return columns, merged, views, same_seed


class CompareWidget(ipywidgets.VBox):  # type: ignore[misc]
    """One prompt, two to four settings, streamed side by side (one column per setting).

    Every setting is checked before anything is created. ``cw.columns`` are the columns,
    each a ``StreamWidget`` (``status``, ``result``, ``record``, ``stop()``, ``wait()``, the
    teaching views); ``cw.generate()`` starts them all, ``cw.wait()`` waits for all,
    ``cw.stop()`` stops them all. Columns sharing a model run one after the other, in order:
    a column waiting for the model is ``queued``. On an :class:`~nbstream.Endpoint` they do
    so unless it runs requests at once (vLLM, SGLang, TGI and llama-server by default, or
    ``concurrent=True``): the server then schedules them.

    ``same_seed=True`` (the **Same seed** checkbox) gives every sampled column the same
    seed: ``seed=`` if given, else one drawn at each ``generate()``; greedy columns, and columns
    whose own settings give a seed, keep theirs. Each column's ``record`` says exactly what
    produced it, seed included (a shared seed is ``"given"`` there: the comparison gave it;
    ``cw.shared_seed`` is the last one).

    Args:
        model: As for :class:`~nbstream.StreamWidget`: ``None`` (the default model), a
            loaded causal LM, a hub id or folder, or an :class:`~nbstream.Endpoint`.
        tokenizer: The loaded model's tokenizer (only with a loaded model).
        prompt: The prompt every column answers (the shared prompt box).
        settings: Two to four dicts of settings (the names of :func:`nbstream.stream`),
            one per column, left to right (with ``models=``: one per model).
        models: Two to four models, one per column (a hub id or folder, ``None``, a
            ``(model, tokenizer)`` pair, an :class:`~nbstream.Endpoint` or a loaded
            recording), instead of ``model``.
        blind: Blind rounds: columns named A, B, C, each running a model drawn anew per
            round, with nothing that tells the models apart shown until :meth:`reveal`.
        same_seed: Give every sampled column the same seed; ``None`` turns it on when
            ``seed`` is given.
        seed: The shared seed; ``None`` draws one at each :meth:`generate`.
        **common: Settings for every column (under each column's own dict), and the
            teaching views' toggles.

    Example:
        >>> import nbstream
        >>> cw = nbstream.CompareWidget(
        ...     None, None, "Name two colors.",
        ...     settings=[{"temperature": 0}, {"temperature": 0.7}, {"temperature": 1.3}],
        ...     max_new_tokens=40, same_seed=True,
        ... )
        >>> cw                      # display it: the shared prompt, Run all, Stop all, columns
        >>> runs = cw.generate()
        >>> texts = cw.wait()       # each column's result: its text, or None if not complete
        >>> [column.record["seed"] for column in cw.columns]
    """

    def __init__(
        self,
        model: Any = None,
        tokenizer: Any = None,
        prompt: str = "",
        settings: Sequence[Mapping[str, Any]] = DEFAULT_SETTINGS,
        *,
        models: Sequence[Any] | None = None,
        blind: bool = False,
        same_seed: bool | None = None,
        seed: int | None = None,
        **common: Any,
    ) -> None:
        # Everything is checked before any widget (or thread) exists.
        specs, settings = _check_models(model, tokenizer, models, settings, blind)
        columns, merged, views, same_seed = _check_arguments(
            prompt, settings, same_seed, seed, common
        )
        from ..models import model_and_tokenizer

        if specs is None:
            pairs = [model_and_tokenizer(model, tokenizer)] * len(columns)
        else:
            pairs = [_column_model(spec) for spec in specs]
            prompt = prompt or _recorded_prompt(pairs)
        self._init_state(pairs[0][1], seed)
        self._init_vote(pairs, models is not None, blind)
        self._columns: list[_Column] = []
        try:
            for (m, t), own, clean in zip(pairs, columns, merged, strict=True):
                self._columns.append(self._make_column(m, t, own, clean, views, prompt))
            self._make_parts(prompt, same_seed, blind)
        except BaseException:
            for column in self._columns:
                column.close()
            raise
        # Each model's column as created: a blind round hands them out anew.
        self._slots: list[dict[str, Any]] = [column.slot() for column in self._columns]
        self._wire()
        super().__init__([self._header, self._row])
        self.add_class("nbstream-compare-widget")
        self._closing = False
        self._relabel()
        self._refresh()

    def _make_parts(self, prompt: str, same_seed: bool, blind: bool) -> None:
        """The header and the row of columns (left to right: A, B, C)."""
        self._header = _Header(
            prompt=prompt,
            same_seed=same_seed,
            blind=blind,
            voting=self._lettered(),
            statuses=[c.status for c in self._columns],
            in_run_all=[c.in_run_all for c in self._columns],
        )
        self._row = ipywidgets.HBox(
            self._columns,
            layout=ipywidgets.Layout(flex_flow="row wrap", align_items="stretch"),
        )
        self._row.add_class("nbstream-compare-columns")

    def _init_vote(self, pairs: list[tuple[Any, Any]], by_model: bool, blind: bool) -> None:
        """The columns' models in words, and the vote's state (no round yet)."""
        self._by_model = by_model
        self._names = _distinct_names(pairs)
        self._replays = [isinstance(m, Recording) for m, _ in pairs]
        self._competing = _competition(pairs) if by_model else ""
        # Whether every column runs one model object: then its odds speak for every column
        # where they part (a model and its adapter are two: their odds differ).
        self._one_model = len({id(m) for m, _ in pairs}) == 1
        # Who runs in which column, whether the round is hidden, the votes.
        self._rounds = BlindRound(len(pairs), blind=blind)

    def _init_state(self, tokenizer: Any, seed: int | None) -> None:
        self._tokenizer = tokenizer  # the words of where the columns part
        self._seed = seed
        self._shared_seed: int | None = seed
        # True until the widget is complete (and again once closed): close() does nothing.
        self._closing = True
        # Serializes generate() (stop() takes no lock: stopping twice is harmless). Never held
        # while a column's traits change (their observers take _view_lock), so a column
        # ending during generate() cannot deadlock it.
        self._run_lock = threading.Lock()
        self._view_lock = threading.RLock()
        self._output = FallbackDisplay(self._view_lock, "nbstream-compare")
        # +1 at every change of the columns' runs (under _view_lock): marks computed for an
        # older state are stale and never written.
        self._mark_generation = 0
        # The threads computing marks (each one forward pass): wait() returns after them.
        self._marking: list[threading.Thread] = []

    def _make_column(
        self,
        model: Any,
        tokenizer: Any,
        own: dict[str, Any],
        clean: dict[str, Any],
        views: dict[str, bool],
        prompt: str,
    ) -> _Column:
        column = _Column(model, tokenizer, own, self._hidden, **clean)
        for name, value in views.items():
            setattr(column, name, value)
        column._shared_seed = self._seed_for_run
        column._dress = self._dress
        column._covered_caps = self._covered_caps
        column._note = self._note
        column.prompt = prompt
        column.label = column.describe()
        column.show_prompt = False
        column.add_class("nbstream-column")
        column.layout = ipywidgets.Layout(flex="1 1 240px", min_width="220px")
        return column

    def _wire(self) -> None:
        """Connect the header and the columns (after every part exists)."""
        self._header.on_msg(self._handle_message)
        for column in self._columns:
            # The shared prompt is every column's prompt, so a column's own Run uses it.
            traitlets.dlink((self._header, "prompt"), (column, "prompt"))
            # status: a run starts or ends; run_id: also another answer shown (show(i), a
            # show_branch click), whose status is often the same ("complete"), yet whose
            # tokens, and so where the columns part, are not.
            column.observe(self._column_changed, names=["status", "run_id", "in_run_all"])
            column.observe(self._column_closed, names=["comm"])
        self._header.observe(self._column_changed, names=["same_seed"])
        self._header.observe(self._blind_changed, names=["blind"])

    # -- Python API ---------------------------------------------------------------------------
    @property
    def columns(self) -> list[StreamWidget]:
        """The columns, one StreamWidget per setting, left to right."""
        return list(self._columns)

    @property
    def settings(self) -> list[dict[str, Any]]:
        """Each column's own settings dict, as given (checked), in the order given.

        In a blind round the settings move with their models; this order does not.
        """
        with self._view_lock:
            order = list(self._rounds.order)
        return [dict(self._columns[order.index(i)]._own) for i in range(len(order))]

    @property
    def prompt(self) -> str:
        """The shared prompt (the header's box; two-way)."""
        value: str = self._header.prompt
        return value

    @prompt.setter
    def prompt(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"prompt must be a string, got {type(value).__name__}")
        self._header.prompt = value

    @property
    def same_seed(self) -> bool:
        """Whether sampled columns share one seed (the **Same seed** checkbox)."""
        return bool(self._header.same_seed)

    @same_seed.setter
    def same_seed(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"same_seed must be True or False, got {value!r}")
        self._header.same_seed = value

    @property
    def seed(self) -> int | None:
        """The shared seed given (None: one is drawn at each ``generate()`` while ``same_seed``)."""
        return self._seed

    @seed.setter
    def seed(self, value: int | None) -> None:
        if value is not None:
            validate_settings({"seed": value})
        self._seed = value
        self._shared_seed = value

    @property
    def shared_seed(self) -> int | None:
        """The seed the last ``generate()`` gave the sampled columns; None without same seed."""
        return self._shared_seed if self.same_seed else None

    @property
    def statuses(self) -> list[str]:
        """Each column's state, left to right."""
        return [column.status for column in self._columns]

    @property
    def results(self) -> list[str | None]:
        """Each column's result: its text if its last run completed, else None."""
        return [column.result for column in self._columns]

    @property
    def divergence(self) -> tuple[int, list[int | None]] | TextDivergence | None:
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
                [run for run in runs if run is not None], [c._tokenizer for c in self._columns]
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
        keys = {_tokenizer_key(c._tokenizer) for c in self._columns}
        if None in keys or len(keys) != 1:
            return False
        # A replay's tokenizer is its recording's own: two recordings compare by text.
        return not any(self._replays)

    @property
    def records(self) -> list[RunRecord | None]:
        """Each column's record (None for a column whose run has not ended)."""
        return [column.record for column in self._columns]

    # -- models, blind rounds and votes -------------------------------------------------------
    @property
    def model_names(self) -> list[str]:
        """Each model in words, in the order given to ``models=`` (not the columns' order).

        Which column runs which model in a blind round shows at :meth:`reveal`.
        """
        return list(self._names)

    @property
    def blind(self) -> bool:
        """Whether rounds are blind (the **Blind** checkbox): columns named A, B, C, models drawn.

        Turned on, the columns' model names and settings are hidden at once, and the next
        :meth:`generate` draws which model each column runs; turned off during a blind round, it
        reveals it.
        """
        return bool(self._header.blind)

    @blind.setter
    def blind(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"blind must be True or False, got {value!r:.80}")
        self._header.blind = value

    @property
    def labels(self) -> list[str]:
        """Each column's label, left to right: ``["A", "B", ...]``."""
        return self._rounds.labels

    @property
    def votes(self) -> dict[str, int]:
        """Label to count of votes, for the current round (every count 0 before one is cast)."""
        with self._view_lock:
            return dict(self._rounds.votes)

    @property
    def _shuffler(self) -> Any:
        """What draws a blind round's order (a test seeds it)."""
        return self._rounds.shuffler

    @_shuffler.setter
    def _shuffler(self, value: Any) -> None:
        self._rounds.shuffler = value

    def vote(self, label: str) -> dict[str, int]:
        """Vote for the better answer: the column labelled ``label`` (as a vote button does).

        Args:
            label: ``"A"``, ``"B"``, ... as the columns are labelled on the page.

        Returns:
            The round's votes so far, label to count.

        Raises:
            RuntimeError: No round yet, a column still running (vote on whole answers), or
                the round already revealed.
            ValueError: No column has that label.

        Example:
            >>> cw.generate("Explain recursion to a child."); cw.wait()
            >>> cw.vote("B")
            {'A': 0, 'B': 1}
        """
        with self._view_lock:
            votes = self._rounds.vote(label, self._going())
        self._refresh()
        return votes

    def _going(self) -> list[str]:
        """The labels of the columns whose answers have not ended."""
        return [self.labels[i] for i, c in enumerate(self._columns) if not _ended(c)]

    def reveal(self) -> dict[str, str]:
        """Show which model (and settings) each label was; final for the round.

        Returns:
            Label to model (with its settings in words when a column had its own), in label
            order, e.g. ``{"A": "SmolLM2-135M-Instruct", "B": "llama3 on 127.0.0.1:8000"}``.

        Raises:
            RuntimeError: No round has run yet.

        Example:
            >>> cw.reveal()
            {'A': 'SmolLM2-135M-Instruct · temperature 0.7', 'B': 'SmolLM2-135M-Instruct'}
        """
        with self._view_lock:
            self._rounds.reveal()
            mapping = self._mapping()
        self._relabel()
        self._refresh()
        return mapping

    def _mapping(self) -> dict[str, str]:
        """Label to model in words, in label order (``_view_lock`` held)."""
        return {label: self._model_words(p) for p, label in enumerate(self._rounds.labels)}

    def _model_words(self, position: int) -> str:
        column = self._columns[position] if position < len(self._columns) else None
        words = column._words if column is not None else ""
        name = self._names[self._rounds.order[position]]
        if column is not None and (column._own or not self._by_model) and words:
            return f"{name} · {words}"
        return name

    def save(self, path: str | os.PathLike[str]) -> list[Path]:
        """Save every column's last run as a recording, in a folder (one file per column).

        Replay them side by side with ``CompareWidget(models=[nbstream.load(p) for p in
        paths])``: each column replays its recorded answer at its recorded pace.

        Args:
            path: The folder (created if missing); the files are ``column-1.json``, ...,
                one per model, in the order given to ``models=``.

        Returns:
            The files written, in that order.

        Raises:
            RuntimeError: A column has no run, or one still running, or a blind round not
                revealed yet (the files, in the models' order, would say which was which).

        Example:
            >>> paths = cw.save("lesson")
            >>> replayed = nbstream.CompareWidget(models=[nbstream.load(p) for p in paths])
        """
        with self._view_lock:
            if self._hidden():
                raise RuntimeError(
                    "this blind round is hidden: its files would say which column was which "
                    "model; Reveal (cw.reveal()) first, then save"
                )
            order = self._rounds.order
            runs = [self._columns[order.index(i)].run for i in range(len(order))]
        missing = [i + 1 for i, run in enumerate(runs) if run is None or not run.done]
        if missing:
            raise RuntimeError(
                f"column {missing[0]} has no ended run to save: run every column, and wait() "
                "for them, before saving"
            )
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        return [
            run.save(folder / f"column-{i + 1}.json")
            for i, run in enumerate(runs)
            if run is not None
        ]

    def _lettered(self) -> bool:
        """Whether the columns carry letters (and the header votes): models, or blind."""
        return self._by_model or bool(self.__dict__.get("_header") and self._header.blind)

    def _hidden(self) -> bool:
        """Whether the columns hide what they run: blind, and the round not revealed."""
        return self._rounds.hidden

    def _dress(self, column: _Column, words: str) -> str:
        """A column's heading: its letter, then (unless hidden) its model and settings."""
        with self._view_lock:
            order = self._rounds.order
            position = self._columns.index(column) if column in self._columns else len(order)
            index = order[position] if position < len(order) else position
            letter = LABELS[position] if position < len(LABELS) else "?"
            if self._hidden():
                return letter  # a replay's column too: that would say what it runs
            if not self._lettered():
                return words
            name = self._names[index] if index < len(self._names) else ""
            shown = [letter, name]
            if words and (words != "model defaults" or not self._by_model):
                shown.append(words)
            return " · ".join(part for part in shown if part)

    def _relabel(self) -> None:
        """Every column's heading and Prompt view again (never with ``_view_lock`` held)."""
        for column in self._columns:
            column.relabel()

    def _blind_changed(self, change: dict[str, Any]) -> None:
        with self._view_lock:
            rounds = self._rounds
            rounds.blind = bool(change["new"])
            reveals = not change["new"] and rounds.round_blind and not rounds.revealed
        if reveals:
            self.reveal()  # turning blind off during a blind round shows which was which
            return
        self._relabel()
        self._refresh()

    def _new_round(self) -> None:
        """A Run all: a new round; blind, each column gets a model drawn anew (``_run_lock``)."""
        # What each model's column holds now (its panel's edits follow the model); taken
        # before _view_lock, as a column's lock always is.
        held = [column.slot() for column in self._columns]
        with self._view_lock:
            for slot, index in zip(held, self._rounds.order, strict=True):
                self._slots[index] = slot
            moved = self._rounds.start()
            order = self._rounds.order
        # The columns stay in place on the page (A, B, C left to right, as the DOM, the saved
        # state and a screen reader read them); the models move between them.
        for position in moved:
            self._columns[position].serve(self._slots[order[position]])
        self._relabel()

    def _note(self, column: _Column) -> CompareRecord | None:
        """``column``'s ``record["compare"]``: its model and the order held back while hidden."""
        with self._view_lock:
            if column not in self._columns:
                return None
            return self._rounds.note(self._columns.index(column), self._names)

    def _covered_caps(self) -> dict[str, bool]:
        """What a hidden round shows of every column's capabilities: the same for all."""
        with self._view_lock:
            real = [column._real for column in self._columns]
        names = ("can_trace", "can_explain")
        return {name: all(bool(caps.get(name)) for caps in real) for name in names}

    @input_checked
    def generate(self, prompt: str | None = None, **settings: Any) -> Runs:
        """Start every column on the prompt; return their runs.

        The runs start left to right; on a shared model they run in that order, each
        waiting ``queued`` for the one before. Should a column fail to start (its model
        refuses the prompt), the columns already started are stopped and the error names
        the column.

        Args:
            prompt: The prompt; ``None`` for the prompt box's text.
            **settings: Override every column's own settings for these runs; checked
                before anything starts.

        Returns:
            The runs, left to right (a list, :class:`Runs`).

        Raises:
            RuntimeError: A column is still queued or running.
            ValueError: An empty prompt, or a column whose settings panel holds an invalid
                value; nothing starts.

        Example:
            >>> runs = cw.generate("Name two colors.")
            >>> [run.status for run in runs]  # doctest: +SKIP
        """
        if settings:
            _named("the settings given to generate()", settings)
        with self._run_lock:
            if prompt is not None:
                self.prompt = prompt
            text = self.prompt
            self._check_ready(text)
            if self.same_seed:
                self._shared_seed = self._seed if self._seed is not None else _draw_seed()
            self._new_round()
            # Every column first, then the runs: the header counts them all from the start.
            for column in self._columns:
                column._set_in_run_all(True)
            runs: list[Generation] = []
            try:
                for column in self._columns:
                    runs.append(column._generate(True, text, **settings))
            except BaseException as exc:
                # All or nothing: a column that cannot start stops those already started.
                for run in reversed(runs):
                    run.stop()
                for column in self._columns[len(runs) :]:
                    column._set_in_run_all(False)  # not part of this Run all after all
                for kind in (TypeError, ValueError, RuntimeError):
                    if isinstance(exc, kind):
                        raise kind(f"column {len(runs) + 1}: {exc}") from exc
                raise
            self._header.input_error = ""
            for run in runs:
                # The columns are shown inside this widget, never on their own.
                shown_by_widget(run, self._output)
            return Runs(runs, self._hidden)

    def _check_ready(self, text: str) -> None:
        """Refuse Run all before anything starts.

        Refused: an empty prompt, a column still busy, or a column whose settings panel holds an
        invalid value.
        """
        if not text.strip():
            raise ValueError("the prompt is empty; type one in the box or pass it to generate()")
        busy = [i for i, c in enumerate(self._columns) if c.status in (QUEUED, RUNNING)]
        if busy:
            raise RuntimeError(
                f"column {busy[0] + 1} still has a run in progress; call stop() or wait() first"
            )
        for i, column in enumerate(self._columns):
            if column.settings_errors:
                problems = "; ".join(map(str, column.settings_errors.values()))
                raise ValueError(f"column {i + 1}: fix its settings first: {problems}")

    def run(self, prompt: str | None = None, **settings: Any) -> list[Generation]:
        """Deprecated: :meth:`generate` (warns ``DeprecationWarning``).

        Args:
            prompt: As for :meth:`generate`.
            **settings: As for :meth:`generate`.

        Returns:
            The runs, as :meth:`generate`.
        """
        warnings.warn(
            "CompareWidget.run() is now CompareWidget.generate()", DeprecationWarning, stacklevel=2
        )
        return self.generate(prompt, **settings)

    def wait(self, timeout: float | None = None) -> list[str | None]:
        """Wait until every column's run has ended; return each column's ``result``.

        A column's entry is its text if it completed, ``None`` if it was stopped or failed
        (its ``status``, ``partial_text`` and ``error`` say more) or never ran: one stopped
        column is part of a comparison, not an error. The columns' marks of where they part
        (one forward pass of the model) are written by then too. ``timeout`` bounds the
        whole wait. A ``KeyboardInterrupt`` (the kernel's interrupt button) stops every
        column, then propagates.

        Args:
            timeout: Seconds for the whole wait; ``None`` waits as long as it takes.

        Returns:
            Each column's ``result``, left to right.

        Raises:
            TimeoutError: The timeout expired; the runs go on.

        Example:
            >>> texts = cw.wait()
        """
        started = [(column, column.run) for column in self._columns if column.run is not None]
        if not started:
            raise RuntimeError("nothing to wait for: call generate() first")
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for column, run in started:
                assert run is not None
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not run.wait_done(left):
                    states = ", ".join(self.statuses)
                    raise TimeoutError(
                        f"the columns are still running after {timeout} s ({states}); they go "
                        "on (call stop() to cancel them)"
                    )
                # Let the column publish its end state, so that status agrees on return.
                with contextlib.suppress(GenerationError):
                    column.wait(0)
            # The marks of where the columns part, started by the last column's end: their
            # forward pass is work on the model, done before wait() returns (a script that
            # ends here must not end under it: torch aborts the process).
            with self._view_lock:
                marking = list(self._marking)
            for thread in marking:
                thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        except KeyboardInterrupt:
            self.stop()
            for _column, run in started:
                assert run is not None
                run.wait_done(_INTERRUPT_GRACE_S)
            raise
        return self.results

    def stop(self) -> bool:
        """Stop every column: queued ones are withdrawn, the running one halts.

        Returns True if any column had a run to stop.
        """
        stopped = False
        # Right to left: queued columns leave the line before the running one lets go of
        # the model, so none of them starts only to be stopped.
        for column in reversed(self._columns):
            stopped = column.stop() or stopped
        return stopped

    def close(self) -> None:
        """Stop every column and close the widget: its columns, header and views."""
        # getattr: Widget.__del__ calls close() also when __init__ raised before anything
        # was created.
        if getattr(self, "_closing", True):
            return
        self._closing = True
        self.stop()
        for column in self._columns:
            column.close()
        self._header.close()
        self._row.close()
        super().close()

    # -- teaching views, on every column ------------------------------------------------------
    def _all(self, name: str) -> bool:
        return all(bool(getattr(column, name)) for column in self._columns)

    def _set_all(self, name: str, value: bool) -> None:
        for column in self._columns:
            setattr(column, name, value)

    @property
    def show_tokens(self) -> bool:
        """Every column shows its answer as tokens (setting it sets every column's)."""
        return self._all("show_tokens")

    @show_tokens.setter
    def show_tokens(self, value: bool) -> None:
        self._set_all("show_tokens", value)

    @property
    def show_probabilities(self) -> bool:
        """Every column shades its tokens by probability (setting it sets every column's)."""
        return self._all("show_probabilities")

    @show_probabilities.setter
    def show_probabilities(self, value: bool) -> None:
        self._set_all("show_probabilities", value)

    @property
    def show_alternatives(self) -> bool:
        """Every column shows a token's alternatives (setting it sets every column's)."""
        return self._all("show_alternatives")

    @show_alternatives.setter
    def show_alternatives(self, value: bool) -> None:
        self._set_all("show_alternatives", value)

    # -- the header and the columns -----------------------------------------------------------
    def _seed_for_run(self) -> int | None:
        """The seed a sampled column's run gets while same seed is on (drawn once if needed)."""
        if not self.same_seed:
            return None
        with self._view_lock:
            if self._shared_seed is None:
                self._shared_seed = self._seed if self._seed is not None else _draw_seed()
            return self._shared_seed

    def _handle_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        # Possibly on a subshell's thread while a cell runs (see nbstream.widgets.route).
        self._header.route.note(self._header.comm)
        try:
            self._handle_header_message(content)
        finally:
            self._header.route.handled(self._header.comm)

    def _handle_header_message(self, content: Any) -> None:
        if not isinstance(content, dict):
            return
        kind = content.get("type")
        if kind == "sync":
            # The view turns its controls off unless a kernel answers (a saved notebook).
            self._header.send({"type": "synced"})
        elif kind == "stop":
            self.stop()
        elif kind in ("vote", "reveal"):
            self._vote_from_page(kind, content.get("label"))
        elif kind == "run":
            if any(c.status in (QUEUED, RUNNING) for c in self._columns):
                logger.debug("Run all ignored: a column is still queued or running")
                return
            prompt = content.get("prompt")
            # The checkbox travels with the click, as the prompt does: its state update
            # may still be held back by ipywidgets' throttle.
            same_seed = content.get("same_seed")
            if isinstance(same_seed, bool) and same_seed != self.same_seed:
                self.same_seed = same_seed
            if isinstance(prompt, str) and not prompt.strip():
                # The API's words ("pass some text") are for code; here nothing was typed.
                self._header.input_error = "Type a prompt first, then Run all."
                return
            try:
                self.generate(prompt if isinstance(prompt, str) else None)
            except (TypeError, ValueError, RuntimeError) as exc:
                self._header.input_error = str(exc)

    def _vote_from_page(self, kind: str, label: Any) -> None:
        """A vote button or Reveal; a refusal is said in the header's ``vote_error``."""
        try:
            if kind == "vote":
                self.vote(label)
            else:
                self.reveal()
        except (ValueError, RuntimeError) as exc:
            self._header.vote_error = str(exc)
            return
        self._header.vote_error = ""

    def _column_changed(self, change: dict[str, Any]) -> None:
        # A column's state, or the Same seed checkbox: the header's summary follows.
        self._refresh()
        if change.get("name") in ("status", "run_id"):
            self._mark_divergence(change.get("owner"))

    # -- where the columns part (each column's compare_mark) ----------------------------------
    def _mark_divergence(self, owner: Any = None) -> None:
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
        ``_view_lock``, never the other way, and never two columns' locks at once: so only
        ``owner``'s own mark is written here; the others' on a thread.
        """
        with self._view_lock:
            self._mark_generation += 1
            generation = self._mark_generation
            # run.done too: a column starting a run has its new run before its new status.
            ended = all(
                c.run is not None and c.run.done and c.status not in (QUEUED, RUNNING)
                for c in self._columns
            )
            divergence = self.divergence if ended else None
        if divergence is None:
            if isinstance(owner, _Column):
                self._write_mark(owner, generation, None)
            if any(c.compare_mark is not None for c in self._columns if c is not owner):
                self._start_marking(self._set_marks, generation, None)
            return
        if isinstance(divergence, TextDivergence):
            lines = text_divergence_words(divergence)
            marks = [
                {"step": step if step is not None else 0, "words": words}
                for step, words in zip(divergence.steps, lines, strict=True)
            ]
            self._start_marking(self._set_marks, generation, marks)
            return
        self._start_marking(self._words_of_divergence, generation, *divergence)

    def _start_marking(self, target: Callable[..., None], *args: Any) -> None:
        # Not a daemon: the interpreter joins it before it shuts down, so it never ends the
        # process inside a forward pass (torch aborts then).
        thread = threading.Thread(
            target=target, args=args, name="nbstream-compare-mark", daemon=False
        )
        with self._view_lock:
            self._marking = [t for t in self._marking if t.is_alive()]
            self._marking.append(thread)
        try:
            thread.start()
        except RuntimeError:  # out of threads: the marks stay as they were, said in the log
            with self._view_lock:
                self._marking.remove(thread)  # never started: nothing for wait() to join
            logger.warning("nbstream: no thread to mark where the compare columns part")

    def _words_of_divergence(self, generation: int, step: int, tokens: list[int | None]) -> None:
        with self._view_lock:
            if generation != self._mark_generation:
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
        # Never with _view_lock held while a column's trait is written (its lock would
        # then be taken after _view_lock: the other order deadlocks); one column at a time.
        for i, column in enumerate(self._columns):
            self._write_mark(column, generation, None if marks is None else marks[i])

    def _write_mark(self, column: _Column, generation: int, mark: dict[str, Any] | None) -> None:
        """Set ``column``'s mark, unless the columns changed since ``generation``."""
        # The column's lock (as its own writes take it), then _view_lock, held across the
        # check and the write: a newer state's marks (or its clearing) come after this one.
        # What the write sends is held back until hold_sync ends, outside _view_lock.
        with column.hold_sync(), self._view_lock:
            if generation != self._mark_generation:
                return  # the columns changed since: a newer mark (or none) applies
            if column.compare_mark != mark:
                column.compare_mark = mark  # type: ignore[assignment]

    def _column_closed(self, change: dict[str, Any]) -> None:
        # A column closed from elsewhere: its cell ran again (the new widgets close the old
        # ones), or its output was cleared. With every column gone, so is the comparison.
        closed = all(column.comm is None for column in self._columns)
        if change["new"] is None and closed and not self._closing:
            logger.debug("every column of a CompareWidget closed; closing it")
            self.close()

    def _summary(self, statuses: list[str]) -> str:
        line = states_summary(statuses)
        seed = self.shared_seed
        if seed is not None and any(s != "idle" for s in statuses):
            line += f" · same seed {seed}"
        if self._competing and any(s != "idle" for s in statuses):
            line += f" · {self._competing}"
        rounds = self._rounds
        if rounds.round_blind and rounds.number and not rounds.revealed:
            line += f" · blind round {rounds.number}"
        return line

    def _refresh(self) -> None:
        """Show the columns' states in the header, and in the saved output (any thread)."""
        with self._view_lock:
            statuses = self.statuses
            header = self._header
            if header.comm is None:
                return
            with header.hold_sync():
                header.statuses = statuses
                header.in_run_all = [c.in_run_all for c in self._columns]
                header.summary = self._summary(statuses)
                self._vote_traits(header)
            self._publish_fallback()

    def _vote_traits(self, header: _Header) -> None:
        """The header's vote row: labels, votes, whether a vote is open, what was revealed."""
        header.voting = self._lettered()
        header.labels = self._rounds.labels
        header.votes = dict(self._rounds.votes)
        try:
            self._rounds.check_vote_open(self._going())
            open_now = True
        except RuntimeError:
            open_now = False
        header.can_vote = open_now
        header.revealed = self._mapping() if self._rounds.revealed else {}

    # -- display ------------------------------------------------------------------------------
    def _fallback(self) -> dict[str, str]:
        """The text/plain and text/markdown fallbacks: each column's label, state and text."""
        entries: list[tuple[str, str, str, Mapping[str, Any] | None, dict[str, str] | None]] = []
        for column in self._columns:
            run = column.run
            if run is None:
                entries.append((column.label, "idle", "", {}, None))
                continue
            # Read once, state first: the text of an ended run is final.
            status = run.status
            error = column.error_words(run)
            metrics = shown_metrics(run.metrics) if self._hidden() else run.metrics
            entries.append((column.label, status, run.partial_text, metrics, error))
        bundle = compare_fallback_bundle(self.prompt, entries)
        extra = self._vote_words()
        if extra:
            bundle = {kind: f"{text}\n\n{extra}" for kind, text in bundle.items()}
        return bundle

    def _vote_words(self) -> str:
        """The round's votes and what was revealed, in one line ("" before any vote)."""
        with self._view_lock:
            if not self._rounds.number or not self._lettered():
                return ""
            return self._rounds.words(self._mapping() if self._rounds.revealed else {})

    def _bundle(self) -> dict[str, Any] | None:
        if self.comm is None:
            return None
        view = super()._repr_mimebundle_()
        if view is None:
            return None
        data = view[0] if isinstance(view, tuple) else view
        return {**data, **self._fallback()}

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        # The live view, plus each column's label, state and text for everything that
        # cannot run widgets (nbconvert, GitHub).
        return self._bundle()

    def _ipython_display_(self) -> None:
        # As StreamWidget; the fallback is rewritten whenever a column's state changes.
        self._output.display(lambda: self.model_id, self._shown, self._fallback)

    def _shown(self) -> Bundle | None:
        data = self._bundle()
        return None if data is None else (None, data, {})

    def _publish_fallback(self) -> None:
        self._output.republish(self._shown)

    def __repr__(self) -> str:
        # The default repr serializes every trait (children included); this one stays cheap,
        # and names no model while a blind round hides them.
        if self._hidden():
            return f"<CompareWidget blind labels={self.labels!r} statuses={self.statuses!r}>"
        if self._by_model:
            return f"<CompareWidget models={self._names!r} statuses={self.statuses!r}>"
        return f"<CompareWidget statuses={self.statuses!r}>"
