"""nbstream/attention.py and ``run.attention`` against transformers' own eager attention.

Each family is a tiny random model built from its config (no download, SDPA as transformers
picks by default), with SmolLM2's tokenizer. The reference is a second model of the same
config built with ``attn_implementation="eager"`` and loaded with the same weights, asked for
``output_attentions=True`` over the same input: its last query row, every layer and head.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers import FAMILIES, family_config

import nbstream
from nbstream.attention import SINK_HEADS, AttentionUnavailable, attention_at

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parent.parent

PROMPT = "Why is the sky blue?"
# A sliding window shorter than the input, so the windowed masks are exercised too;
# Gemma 2's attention logits are soft-capped in eager attention only.
WINDOW = {"sliding_window": 6}
EXTRA: dict[str, dict[str, Any]] = {
    "mistral": WINDOW,
    "gemma2": {"attn_logit_softcapping": 5.0, **WINDOW},
    "gemma3_text": WINDOW,
}


def attention_config(family: str, tokenizer: Any) -> Any:
    return family_config(family, tokenizer, **EXTRA.get(family, {}))


_models: dict[str, Any] = {}


def family_model(family: str, tokenizer: Any) -> Any:
    if family not in _models:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(1)
            model = transformers.AutoModelForCausalLM.from_config(
                attention_config(family, tokenizer)
            ).eval()
            # Random weights this small give flat attention; larger ones make heads differ.
            with torch.no_grad():
                for parameter in model.parameters():
                    if parameter.ndim == 2:
                        parameter.mul_(8.0)
        _models[family] = model
    return _models[family]


def eager_reference(model: Any) -> Any:
    """The same weights in a model built eager from the start (not nbstream's twin)."""
    config = copy.deepcopy(model.config)
    reference = transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation="eager"
    ).eval()
    reference.load_state_dict(model.state_dict())
    return reference


def reference_rows(reference: Any, ids: list[int]) -> Any:
    """(layers, heads, positions): eager ``output_attentions`` at the last position."""
    with torch.no_grad():
        out = reference(input_ids=torch.tensor([ids]), output_attentions=True, use_cache=False)
    assert len(out.attentions) == reference.config.num_hidden_layers
    return torch.stack([layer[0, :, -1, :] for layer in out.attentions]).float()


def run_ids(tokenizer: Any, answer: str = " Rayleigh scattering of sunlight") -> tuple[list, int]:
    messages = [{"role": "user", "content": PROMPT}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
    return prompt + tokenizer(answer, add_special_tokens=False)["input_ids"], len(prompt)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_layer_and_head_is_eager_attention(family, tiny):
    tokenizer = tiny[1]
    model = family_model(family, tokenizer)
    # SDPA (which computes no weights) as transformers loads them; Gemma 2 has only eager.
    loaded = "eager" if family == "gemma2" else "sdpa"
    assert model.config._attn_implementation == loaded
    reference = eager_reference(model)
    ids, prompt_len = run_ids(tokenizer)
    answer = len(ids) - prompt_len
    for step in (0, answer // 2, answer - 1):
        seen = attention_at(model, tokenizer, ids, prompt_len, step)
        expected = reference_rows(reference, ids[: prompt_len + step])
        assert seen.weights.dtype == torch.float32 and seen.weights.shape == expected.shape
        assert torch.equal(seen.weights, expected)
        assert seen.weights.sum(-1) == pytest.approx(1.0, abs=1e-5)
        assert (seen.family, seen.step, seen.token_id) == (family, step, ids[prompt_len + step])
        assert list(seen.token_ids) == ids[: prompt_len + step]
    # The live model was not switched, and none of its modules was touched.
    assert model.config._attn_implementation == loaded
    assert not [m for m in model.modules() if "forward" in vars(m)]


def test_views_of_the_weights(tiny):
    model, tokenizer = family_model("qwen2", tiny[1]), tiny[1]
    ids, prompt_len = run_ids(tokenizer)
    seen = attention_at(model, tokenizer, ids, prompt_len, 3)
    assert (seen.layers, seen.heads, seen.positions) == (3, 4, prompt_len + 3)
    assert torch.equal(seen.layer(1), seen.weights[1])
    assert torch.equal(seen.head(2, 3), seen.weights[2, 3])
    assert seen.prompt_tokens == prompt_len and seen.token == tokenizer.decode(
        [ids[prompt_len + 3]]
    )
    assert seen.tokens[0] == "<|im_start|>" and len(seen.tokens) == seen.positions
    top = seen.top(1, 3)
    mean = seen.weights[1].mean(0)
    assert [p for p, _t, _w in top] == mean.topk(3).indices.tolist()
    assert [w for _p, _t, w in top] == pytest.approx(mean.topk(3).values.tolist())
    assert all(text == seen.tokens[p] for p, text, _w in top)
    one = seen.top(2, 2, head=1)
    assert [p for p, _t, _w in one] == seen.weights[2, 1].topk(2).indices.tolist()
    assert seen.top(-1, 99) == seen.top(2, seen.positions)
    with pytest.raises(IndexError, match="layer 3 out of range"):
        seen.top(3)
    argmax = seen.weights.argmax(-1)
    assert seen.sink_heads == int((argmax == 0).sum())
    assert seen.sink == (seen.sink_heads >= SINK_HEADS * 12)
    assert seen.sink_share == pytest.approx(float(seen.weights[..., 0].mean()))
    said = seen.describe()
    assert seen.token in said and "3 layers × 4 heads" in said and "previous token" in said
    assert ("Attention sink" in said) == seen.sink
    assert "Attention(step=3" in repr(seen)


def test_the_sink_is_labelled_and_explained(tiny):
    # A model whose every head looks at the first token (its keys pulled towards the
    # queries there): the sink is named, not hidden, and the weights are left as they are.
    model, tokenizer = family_model("llama", tiny[1]), tiny[1]
    ids, prompt_len = run_ids(tokenizer)
    seen = attention_at(model, tokenizer, ids, prompt_len, 0)
    rest = torch.full((3, 4, prompt_len - 1), 0.1 / (prompt_len - 1))
    sunk = dataclasses.replace(seen, weights=torch.cat((torch.full((3, 4, 1), 0.9), rest), -1))
    assert sunk.sink and sunk.sink_heads == 12 and sunk.sink_share == pytest.approx(0.9)
    said = sunk.describe()
    assert "Attention sink: the first token ('<|im_start|>')" in said and "12 of 12 heads" in said
    assert "where a head rests, not what it reads" in said
    assert sunk.top(0, 1)[0][:2] == (0, "<|im_start|>")


def test_refused_by_name(tiny):
    tokenizer = tiny[1]
    config = transformers.GPTNeoXConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
    )
    neox = transformers.GPTNeoXForCausalLM(config).eval()
    ids, prompt_len = run_ids(tokenizer)
    with pytest.raises(AttentionUnavailable, match=r"GPTNeoXForCausalLM.*'gpt_neox'.*Known: gemma"):
        attention_at(neox, tokenizer, ids, prompt_len, 0)
    model = family_model("llama", tokenizer)
    answer = len(ids) - prompt_len
    with pytest.raises(AttentionUnavailable, match=f"step {answer} is not a step of this run"):
        attention_at(model, tokenizer, ids, prompt_len, answer)
    with pytest.raises(AttentionUnavailable, match="step -1"):
        attention_at(model, tokenizer, ids, prompt_len, -1)
    with pytest.raises(TypeError, match="step must be an int"):
        attention_at(model, tokenizer, ids, prompt_len, "1")
    offloaded = copy.deepcopy(model)
    offloaded.hf_device_map = {"model.layers.0": "cpu", "model.layers.1": "disk"}
    with pytest.raises(AttentionUnavailable, match="offloaded"):
        attention_at(offloaded, tokenizer, ids, prompt_len, 0)
    assert issubclass(AttentionUnavailable, ValueError)


def test_beside_a_generating_thread_it_switches_nothing(tiny_line):
    # A generate() on another thread is held inside its forward pass (layer 0) while the
    # attention is computed on this one: it goes on with its own attention, and makes the
    # same tokens as undisturbed.
    model, tokenizer = tiny_line
    inputs = tokenizer("The sea", return_tensors="pt")
    settings = {"max_new_tokens": 12, "do_sample": False}
    with torch.no_grad():
        alone = model.generate(**inputs, **settings)[0].tolist()
    ids, prompt_len = run_ids(tokenizer)
    generator: dict[str, Any] = {}
    inside, gate = threading.Event(), threading.Event()

    def hold(module: Any, args: Any, output: Any) -> None:
        if threading.get_ident() == generator.get("id") and not inside.is_set():
            inside.set()
            assert gate.wait(60)

    def generate() -> None:
        generator["id"] = threading.get_ident()
        with torch.no_grad():
            generator["ids"] = model.generate(**inputs, **settings)[0].tolist()

    handle = model.model.layers[0].register_forward_hook(hold)
    worker = threading.Thread(target=generate, daemon=True)
    try:
        worker.start()
        assert inside.wait(60)
        seen = attention_at(model, tokenizer, ids, prompt_len, 2)  # the held hook is copied too
        assert model.config._attn_implementation == "sdpa"
    finally:
        gate.set()
        worker.join(60)
        handle.remove()
    assert not worker.is_alive() and generator["ids"] == alone
    expected = reference_rows(eager_reference(model), ids[: prompt_len + 2])
    assert torch.equal(seen.weights, expected)


@pytest.mark.model
def test_the_default_model(real_model):
    model, tokenizer = real_model
    messages = [{"role": "user", "content": "Name the capital of France."}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        ids = model.generate(prompt, max_new_tokens=8, do_sample=False)[0].tolist()
    prompt_len = prompt.shape[-1]
    reference = copy.deepcopy(model)
    reference.set_attn_implementation("eager")
    for step in (0, len(ids) - prompt_len - 1):
        seen = attention_at(model, tokenizer, ids, prompt_len, step)
        assert (seen.layers, seen.heads) == (30, 9)
        assert torch.equal(seen.weights, reference_rows(reference, ids[: prompt_len + step]))
    assert seen.sink and "Attention sink" in seen.describe()
    assert model.config._attn_implementation == "sdpa"


def test_a_steered_thread_reads_its_steered_attention(tiny):
    # The twin keeps the model's hooks: inside a steered() block, the attention is the one
    # the steered run computes; outside it, the plain one.
    from nbstream.steering import Direction, steered

    model, tokenizer = family_model("llama", tiny[1]), tiny[1]
    ids, prompt_len = run_ids(tokenizer)
    direction = Direction(vector=torch.linspace(-1.0, 1.0, 32), layer=0)
    reference = eager_reference(model)

    def add(module: Any, args: Any, output: Any) -> Any:
        return output + 3.0 * direction.vector

    with steered(model, direction, 3.0):
        seen = attention_at(model, tokenizer, ids, prompt_len, 2)
    handle = reference.model.layers[0].register_forward_hook(add)
    try:
        expected = reference_rows(reference, ids[: prompt_len + 2])
    finally:
        handle.remove()
    assert torch.equal(seen.weights, expected)
    plain = attention_at(model, tokenizer, ids, prompt_len, 2)
    assert torch.equal(plain.weights, reference_rows(reference, ids[: prompt_len + 2]))
    assert not torch.equal(plain.weights, seen.weights)


def test_the_benchmark_runs_end_to_end(tmp_path):
    # The figures of benchmarks/attention.py can be redone: its script on the tiny model.
    out = tmp_path / "attention.json"
    command = ["-m", "benchmarks.attention", "--tiny", "--tokens", "6", "--tries", "1"]
    proc = subprocess.run(
        [sys.executable, *command, "--json", str(out)],
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["problems"] == [] and report["rows"]["last"]["positions"] > 6
    assert "| attention_at, last step" in proc.stdout


def test_hooks_are_shared_with_the_twin_never_copied(tiny):
    # A hook may be a bound method of an object that cannot be copied (a run's trace capture
    # holds a lock and its records): the twin calls that very object.
    model, tokenizer = family_model("phi", tiny[1]), tiny[1]

    class Holder:
        def __init__(self) -> None:
            self.lock = threading.Lock()
            self.calls = 0

        def hook(self, module: Any, args: Any, output: Any) -> None:
            with self.lock:
                self.calls += 1

    holder = Holder()
    handles = [
        model.register_forward_hook(holder.hook),
        model.model.layers[1].register_forward_hook(holder.hook),
    ]
    try:
        ids, prompt_len = run_ids(tokenizer)
        seen = attention_at(model, tokenizer, ids, prompt_len, 1)
    finally:
        for handle in handles:
            handle.remove()
    assert holder.calls == 1  # layer 1 of the twin; the twin runs its base model, not the root
    expected = reference_rows(eager_reference(model), ids[: prompt_len + 1])
    assert torch.equal(seen.weights, expected)


# -- run.attention(step) -----------------------------------------------------------------------
def prompt_ids(run: Any, tokenizer: Any) -> list[int]:
    """The run's prompt as the model read it, templated here (not nbstream's encoding)."""
    messages = [{"role": "user", "content": run.prompt}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def check_run_attention(run: Any, reference: Any, tokenizer: Any, step: int) -> None:
    seen = run.attention(step)
    read = prompt_ids(run, tokenizer) + run.token_ids[:step]
    assert torch.equal(seen.weights, reference_rows(reference, read))
    assert (seen.step, seen.token_id, list(seen.token_ids)) == (step, run.token_ids[step], read)
    assert seen.prompt_tokens == run.prompt_tokens


def test_run_attention_is_eager_attention_at_each_step(tiny, no_leftover_runs):
    tokenizer = tiny[1]
    model = family_model("qwen2", tokenizer)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    reference = eager_reference(model)
    run = nbstream.stream(model, tokenizer, PROMPT, max_new_tokens=5, temperature=1.2, seed=3)
    run.wait()
    for step in range(len(run.token_ids)):
        check_run_attention(run, reference, tokenizer, step)
    assert model.config._attn_implementation == "sdpa"
    # A branch: its forced tokens, the one it took, then its own.
    branch = run.branch(1, run.token_ids[0], max_new_tokens=4)
    branch.wait()
    for step in (1, 2, len(branch.token_ids) - 1):
        check_run_attention(branch, reference, tokenizer, step)
    with pytest.raises(AttentionUnavailable, match=f"step {len(run.token_ids)} is not a step"):
        run.attention(len(run.token_ids))
    with pytest.raises(TypeError, match="step must be an int"):
        run.attention("1")


def test_run_attention_beside_a_streaming_run_never_holds_it(tiny_line, no_leftover_runs):
    # The attention's pass is held inside its layer 0 (the twin keeps the model's hooks):
    # meanwhile the run streams on, and its Stop ends it at once.
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, PROMPT, max_new_tokens=8000)
    assert run.wait_for_progress(0, 60) and run.wait_for_progress(4, 60)
    attention_thread: dict[str, Any] = {}
    inside, gate = threading.Event(), threading.Event()

    def hold(module: Any, args: Any, output: Any) -> None:
        if threading.get_ident() == attention_thread.get("id"):
            inside.set()
            assert gate.wait(60)

    handle = model.model.layers[0].register_forward_hook(hold)
    result: dict[str, Any] = {}

    def compute() -> None:
        attention_thread["id"] = threading.get_ident()
        result["seen"] = run.attention(3)

    worker = threading.Thread(target=compute, daemon=True)
    try:
        worker.start()
        assert inside.wait(60)
        seen = run.progress
        assert run.wait_for_progress(seen, 60)
        run.stop()
        assert run.join(30) and run.status == "cancelled"
    finally:
        gate.set()
        worker.join(60)
        handle.remove()
    assert not worker.is_alive()
    read = prompt_ids(run, tokenizer) + run.token_ids[:3]
    assert torch.equal(result["seen"].weights, reference_rows(eager_reference(model), read))
    assert model.config._attn_implementation == "sdpa"


def test_a_moving_rope_waits_its_turn(tiny, no_leftover_runs):
    # A rope that moves ("dynamic" here; "longrope" rewrites its frequencies in place, in a
    # buffer the twin shares) gets no pass beside a run: the attention waits, as the lens.
    tokenizer = tiny[1]
    config = attention_config("llama", tokenizer)
    config.max_position_embeddings = 8192
    config.rope_parameters = {**config.rope_parameters, "rope_type": "dynamic", "factor": 2.0}
    model = transformers.LlamaForCausalLM(config).eval()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    run = nbstream.stream(model, tokenizer, PROMPT, max_new_tokens=8000)
    assert run.wait_for_progress(0, 60) and run.wait_for_progress(4, 60)
    seen: dict[str, Any] = {}

    def compute() -> None:
        seen["attention"] = run.attention(3)
        seen["status"] = run.status  # it had its turn only once the run let go

    worker = threading.Thread(target=compute, daemon=True)
    worker.start()
    queue = run._queue
    while not queue.snapshot()[1] and worker.is_alive():
        worker.join(0.01)
    assert queue.snapshot()[1], "the attention never took a place in the model's queue"
    run.stop()
    worker.join(60)
    assert not worker.is_alive() and seen["status"] == "cancelled"
    assert seen["attention"].step == 3


def test_a_server_run_is_refused(fake, no_leftover_runs):
    run = nbstream.stream(nbstream.Endpoint(fake.url("ok"), "fake-model"), None, "Hi")
    run.wait()
    with pytest.raises(AttentionUnavailable, match=r"model server .* no attention weights"):
        run.attention(0)


def test_a_replayed_recording_is_refused(tiny, tmp_path, no_leftover_runs):
    run = nbstream.stream(*tiny, PROMPT, max_new_tokens=3)
    run.wait()
    replay = nbstream.replay(run.save(tmp_path / "run.json"), speed=None)
    replay.wait()
    with pytest.raises(AttentionUnavailable, match="replayed recording has no model"):
        replay.attention(0)
