"""nbstream/steering.py against independent computations, and its hook's lifetime and reach.

The direction's reference reads ``output_hidden_states`` (``hidden_states[L + 1]`` is decoder
layer ``L``'s output) over prompts templated here; the steered forward's reference is a forward
hook written here, adding ``strength * vector`` to layer ``L``'s output. Concurrency is held
with gates inside a forward pass, never with sleeps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from nbstream.steering import (
    FORMAT,
    Direction,
    SteeringUnavailable,
    decoder_layers,
    steered,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parent.parent

TOWARD = ["Tell me about the sea.", "Waves crash on the shore.", "Sailors cross the ocean."]
AWAY = ["Tell me about the desert.", "Sand dunes stretch far away."]


def family_model(family: str, tokenizer: Any) -> Any:
    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}
    t = transformers
    if family == "gpt2":
        config = t.GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=3, n_head=4, **ids)
    else:
        kind = {"llama": t.LlamaConfig, "phi": t.PhiConfig, "gemma2": t.Gemma2Config}[family]
        config = kind(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            **ids,
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        model = t.AutoModelForCausalLM.from_config(config).eval()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def templated(tokenizer: Any, text: str) -> Any:
    messages = [{"role": "user", "content": text}]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(rendered, add_special_tokens=False, return_tensors="pt")["input_ids"]


def reference_vector(model: Any, tokenizer: Any, layer: int) -> Any:
    def mean(texts: list[str]) -> Any:
        states = []
        for text in texts:
            with torch.no_grad():
                out = model(input_ids=templated(tokenizer, text), output_hidden_states=True)
            states.append(out.hidden_states[layer + 1][0, -1].float())
        return torch.stack(states).mean(0)

    return mean(TOWARD) - mean(AWAY)


def logits_with_own_hook(model: Any, ids: Any, layer: int, added: Any) -> Any:
    def add(module: Any, args: Any, output: Any) -> Any:
        if isinstance(output, tuple):
            return (output[0] + added, *output[1:])
        return output + added

    handle = decoder_layers(model)[layer].register_forward_hook(add)
    try:
        with torch.no_grad():
            return model(input_ids=ids).logits
    finally:
        handle.remove()


def plain_logits(model: Any, ids: Any) -> Any:
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.mark.parametrize("family", ["llama", "phi", "gemma2", "gpt2"])
def test_direction_and_steered_logits_match_independent_computations(family, tiny):
    tokenizer = tiny[1]
    model = family_model(family, tokenizer)
    direction = Direction.from_examples(model, tokenizer, TOWARD, AWAY, layer=1)
    expected = reference_vector(model, tokenizer, 1)
    assert direction.vector.dtype == torch.float32 and direction.vector.shape == (32,)
    assert torch.allclose(direction.vector, expected, atol=1e-6, rtol=0)
    assert (direction.layer, direction.family, direction.templated) == (1, family, True)
    assert (direction.toward, direction.away) == (tuple(TOWARD), tuple(AWAY))
    ids = templated(tokenizer, "Where do whales live?")
    with steered(model, direction, 4.0):
        steered_logits = plain_logits(model, ids)
    assert torch.equal(steered_logits, logits_with_own_hook(model, ids, 1, 4.0 * direction.vector))
    assert not torch.equal(steered_logits, plain_logits(model, ids))


def test_raw_text_and_the_last_layer(tiny):
    # template=False reads the text as a run reads plain text (with the BOS); the last
    # layer's output is read before the final norm (hidden_states[-1] is after it).
    model, tokenizer = family_model("llama", tiny[1]), tiny[1]
    direction = Direction.from_examples(model, tokenizer, TOWARD, AWAY, layer=-1, template=False)
    kept: list[Any] = []
    handle = model.model.layers[2].register_forward_hook(
        lambda module, args, output: kept.append(output[0, -1].float())
    )
    try:
        for text in TOWARD + AWAY:
            plain_logits(model, tokenizer(text, return_tensors="pt")["input_ids"])
    finally:
        handle.remove()
    toward, away = torch.stack(kept[: len(TOWARD)]), torch.stack(kept[len(TOWARD) :])
    assert direction.layer == 2 and not direction.templated
    assert torch.allclose(direction.vector, toward.mean(0) - away.mean(0), atol=1e-6, rtol=0)


def test_strength_zero_and_after_the_block_are_exactly_unsteered(tiny):
    tokenizer = tiny[1]
    model, fresh = family_model("llama", tokenizer), family_model("llama", tokenizer)
    direction = Direction.from_examples(model, tokenizer, TOWARD, AWAY, layer=1)
    inputs = {"input_ids": templated(tokenizer, "Hello"), "max_new_tokens": 12, "do_sample": False}
    with torch.no_grad():
        unsteered = model.generate(**inputs)
    ids = inputs["input_ids"]
    with steered(model, direction, 0.0), torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, plain_logits(fresh, ids))
        assert torch.equal(model.generate(**inputs), unsteered)
    with steered(model, direction, 8.0), torch.no_grad():
        assert not torch.equal(model(input_ids=ids).logits, plain_logits(fresh, ids))
    # The block is over: byte for byte what a model that was never steered computes.
    assert torch.equal(plain_logits(model, ids), plain_logits(fresh, ids))
    with torch.no_grad():
        assert torch.equal(model.generate(**inputs), fresh.generate(**inputs))
    assert all(not layer._forward_hooks for layer in decoder_layers(model))


def test_a_failure_inside_generation_still_removes_the_hook(tiny):
    tokenizer = tiny[1]
    model, fresh = family_model("llama", tokenizer), family_model("llama", tokenizer)
    direction = Direction.from_examples(model, tokenizer, TOWARD, AWAY, layer=0)
    calls = {"n": 0}

    def fail_on_the_third_step(module: Any, args: Any, output: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("injected")

    handle = model.model.layers[2].register_forward_hook(fail_on_the_third_step)
    try:
        with pytest.raises(RuntimeError, match="injected"), steered(model, direction, 6.0):
            model.generate(input_ids=templated(tokenizer, "Hi"), max_new_tokens=8)
    finally:
        handle.remove()
    assert calls["n"] == 3
    assert all(not layer._forward_hooks for layer in decoder_layers(model))
    ids = templated(tokenizer, "Hi")
    assert torch.equal(plain_logits(model, ids), plain_logits(fresh, ids))


def run_held(model: Any, ids: Any, held_at: Any, work: Any) -> tuple[dict[str, Any], Any]:
    """Start ``work`` on a thread and hold it inside its forward pass (after ``held_at``)."""
    state: dict[str, Any] = {"inside": threading.Event(), "gate": threading.Event()}

    def hold(module: Any, args: Any, output: Any) -> None:
        if threading.get_ident() == state.get("thread") and not state["inside"].is_set():
            state["inside"].set()
            assert state["gate"].wait(60)

    def body() -> None:
        state["thread"] = threading.get_ident()
        state["logits"] = work()

    state["handle"] = held_at.register_forward_hook(hold)
    worker = threading.Thread(target=body, daemon=True)
    worker.start()
    assert state["inside"].wait(60)
    return state, worker


def test_another_threads_forward_never_sees_the_steering(tiny):
    tokenizer = tiny[1]
    model, fresh = family_model("llama", tokenizer), family_model("llama", tokenizer)
    direction = Direction.from_examples(model, tokenizer, TOWARD, AWAY, layer=0)
    ids = templated(tokenizer, "What is under the waves?")

    def steered_forward(strength: float) -> Any:
        with steered(model, direction, strength):
            return plain_logits(model, ids)

    # Thread A is steered (+5) and held inside its forward pass, past the steered layer.
    a, worker_a = run_held(model, ids, model.model.layers[1], lambda: steered_forward(5.0))
    try:
        # Meanwhile: an unsteered forward here, and a thread B steered the other way.
        assert torch.equal(plain_logits(model, ids), plain_logits(fresh, ids))
        b: dict[str, Any] = {}
        worker_b = threading.Thread(target=lambda: b.update(logits=steered_forward(-5.0)))
        worker_b.start()
        worker_b.join(60)
    finally:
        a["gate"].set()
        worker_a.join(60)
        a["handle"].remove()
    assert not worker_a.is_alive() and not worker_b.is_alive()
    own = direction.vector
    assert torch.equal(a["logits"], logits_with_own_hook(fresh, ids, 0, 5.0 * own))
    assert torch.equal(b["logits"], logits_with_own_hook(fresh, ids, 0, -5.0 * own))


def test_save_and_load(tiny, tmp_path):
    model, tokenizer = family_model("llama", tiny[1]), tiny[1]
    direction = Direction.from_examples(model, tokenizer, TOWARD, AWAY, layer=1)
    path = direction.save(tmp_path / "sea.safetensors")
    loaded = Direction.load(path)
    assert torch.equal(loaded.vector, direction.vector) and loaded.digest == direction.digest
    assert (loaded.layer, loaded.family, loaded.toward, loaded.away, loaded.templated) == (
        1,
        "llama",
        tuple(TOWARD),
        tuple(AWAY),
        True,
    )
    assert len(direction.digest) == 64 and "Direction(layer=1, size=32" in repr(direction)
    assert direction.norm == pytest.approx(float(direction.vector.norm()))


def test_a_file_that_is_not_a_direction_is_refused_in_words(tiny, tmp_path):
    from safetensors.torch import save_file

    model = family_model("llama", tiny[1])
    weights = tmp_path / "model.safetensors"
    save_file({"lm_head": model.lm_head.weight.detach().contiguous()}, str(weights))
    with pytest.raises(ValueError, match=r"metadata does not say format='nbstream\.direction'"):
        Direction.load(weights)
    pickled = tmp_path / "vector.pt"
    torch.save({"vector": torch.zeros(32)}, pickled)  # never unpickled
    with pytest.raises(ValueError, match="is not a direction file: it is not a safetensors"):
        Direction.load(pickled)
    text = tmp_path / "direction.json"
    text.write_text(json.dumps({"vector": [0.0] * 32, "layer": 1}))
    with pytest.raises(ValueError, match="not a safetensors file"):
        Direction.load(text)
    two = tmp_path / "two.safetensors"
    metadata = {"format": FORMAT, "version": "1", "layer": "1"}
    save_file({"vector": torch.zeros(2, 32)}, str(two), metadata=metadata)
    with pytest.raises(ValueError, match="one 1-D tensor 'vector'"):
        Direction.load(two)
    with pytest.raises(FileNotFoundError):
        Direction.load(tmp_path / "missing.safetensors")


def test_refused_by_name(tiny):
    tokenizer = tiny[1]
    model = family_model("llama", tokenizer)
    direction = Direction.from_examples(model, tokenizer, TOWARD, AWAY, layer=1)
    with pytest.raises(SteeringUnavailable, match="layer 3 is not a decoder layer"):
        Direction.from_examples(model, tokenizer, TOWARD, AWAY, layer=3)
    with pytest.raises(ValueError, match="toward must hold at least one prompt"):
        Direction.from_examples(model, tokenizer, [], AWAY, layer=1)
    with pytest.raises(TypeError, match="away must be a list"):
        Direction.from_examples(model, tokenizer, TOWARD, "desert", layer=1)
    with pytest.raises(SteeringUnavailable, match="strength must be a finite number"):
        steered(model, direction, float("nan")).__enter__()
    wider = family_model("gpt2", tokenizer)
    wider.transformer.wte = torch.nn.Embedding(len(tokenizer), 48)
    with pytest.raises(SteeringUnavailable, match=r"the direction has 32 numbers but .* 48"):
        steered(wider, direction, 1.0).__enter__()
    config = transformers.GPTNeoXConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
    )
    neox = transformers.GPTNeoXForCausalLM(config).eval()
    with pytest.raises(SteeringUnavailable, match=r"GPTNeoXForCausalLM.*'gpt_neox'.*Known: gemma"):
        steered(neox, direction, 1.0).__enter__()
    assert all(not layer._forward_hooks for layer in decoder_layers(model))


@pytest.mark.model
def test_the_default_model(real_model):
    model, tokenizer = real_model
    sea = Direction.from_examples(
        model,
        tokenizer,
        toward=["Tell me about the sea.", "Describe ocean waves."],
        away=["Tell me about a city.", "Describe city streets."],
        layer=15,
    )
    assert sea.vector.shape == (576,) and sea.family == "llama"
    inputs = {
        "input_ids": templated(tokenizer, "Write one sentence about your day."),
        "max_new_tokens": 16,
        "do_sample": False,
    }
    with torch.no_grad():
        plain = model.generate(**inputs)
        with steered(model, sea, 0.0):
            assert torch.equal(model.generate(**inputs), plain)
        with steered(model, sea, 8.0):
            pulled = model.generate(**inputs)
        assert torch.equal(model.generate(**inputs), plain)
    assert not torch.equal(pulled, plain)
    ids = inputs["input_ids"]
    with steered(model, sea, 8.0):
        mine = plain_logits(model, ids)
    assert torch.equal(mine, logits_with_own_hook(model, ids, 15, 8.0 * sea.vector))


def test_the_benchmark_runs_end_to_end(tmp_path):
    # The figures of benchmarks/steering.py can be redone: its script on the tiny model.
    out = tmp_path / "steering.json"
    command = ["-m", "benchmarks.steering", "--tiny", "--tokens", "6", "--rounds", "1"]
    proc = subprocess.run(
        [sys.executable, *command, "--tries", "1", "--json", str(out)],
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["problems"] == [] and len(report["runs"]["rounds"]) == 1
    assert "| steered / plain, per round" in proc.stdout
