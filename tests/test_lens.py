"""``run.lens`` and ``run.attribution`` (nbstream/lens.py) against independent computations.

Each family is a tiny random model built from its config (no download), with SmolLM2's
tokenizer. The independent computation here asks transformers for the hidden states and applies
the final norm and output layer itself, named in this file; the attribution's is a backward pass
through ``input_ids`` with the embedding layer's output kept by a hook, then the signed
gradient · input summed over the hidden dimension.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest
from helpers import FAMILIES, family_config

import nbstream
from nbstream.lens import LensUnavailable

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# float32, the same weights: rounding only (matmuls of other shapes; the default model's
# 576-wide layers round more than the tiny models' 32-wide ones).
TOL = 1e-5
MODEL_TOL = 1e-4
TRACE_TOL = 1e-4  # the run read through its cache, one token at a time
# bfloat16 keeps 8 bits: a full pass beside another full pass rounds alike, so this bounds
# rounding between two readings of the same pass's hidden states (the head's matmul alone).
BF16_TOL = 0.15
PROMPT = "Why is the sky blue?"


# Gemma 2's final logits soft-capped, so the lens's own capping is exercised.
EXTRA: dict[str, dict[str, Any]] = {"gemma2": {"final_logit_softcapping": 2.0}}


def lens_config(family: str, tokenizer: Any) -> Any:
    return family_config(family, tokenizer, **EXTRA.get(family, {}))


# The final norm and output layer, as this test names them (not nbstream's table).
HEADS = {
    "phi": lambda m: (m.model.final_layernorm, m.lm_head),
    "gpt2": lambda m: (m.transformer.ln_f, m.lm_head),
}


def own_head(model: Any) -> tuple[Any, Any]:
    family = model.config.model_type
    return HEADS[family](model) if family in HEADS else (model.model.norm, model.lm_head)


_models: dict[str, Any] = {}


def family_model(family: str, tokenizer: Any) -> Any:
    if family not in _models:
        config = lens_config(family, tokenizer)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(1)
            model = transformers.AutoModelForCausalLM.from_config(config).eval()
            # Random weights this small give flat odds; larger ones make layers disagree.
            with torch.no_grad():
                for parameter in model.parameters():
                    if parameter.ndim == 2:
                        parameter.mul_(8.0)
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        _models[family] = model
    return _models[family]


def step_input(run: Any, tokenizer: Any, step: int) -> Any:
    messages = [{"role": "user", "content": run.prompt}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    answer = torch.tensor([run.token_ids[:step]], dtype=prompt.dtype)
    return torch.cat((prompt, answer), dim=-1)


def reference_lens(model: Any, ids: Any) -> Any:
    """Every layer's log-probabilities at the last position: (layers, vocabulary)."""
    norm, head = own_head(model)
    cap = getattr(model.config, "final_logit_softcapping", None)
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
        rows = []
        for state in out.hidden_states[1:-1]:  # [0]: embeddings; [-1]: after the final norm
            logits = head(norm(state[0, -1]))
            rows.append(torch.tanh(logits / cap) * cap if cap else logits)
        rows.append(out.logits[0, -1])
    assert len(out.hidden_states) == model.config.num_hidden_layers + 1
    return torch.log_softmax(torch.stack(rows).float(), dim=-1)


def reference_shares(model: Any, ids: Any, chosen: int) -> list[float]:
    kept: dict[str, Any] = {}

    def keep(module: Any, args: Any, output: Any) -> None:
        output.retain_grad()
        kept["embedded"] = output

    handle = model.get_input_embeddings().register_forward_hook(keep)
    try:
        with torch.enable_grad():
            out = model(input_ids=ids)
            torch.log_softmax(out.logits[0, -1].float(), dim=-1)[chosen].backward()
    finally:
        handle.remove()
        model.zero_grad(set_to_none=True)
    embedded = kept["embedded"]
    scores = (embedded.grad[0] * embedded[0].detach()).sum(dim=-1)
    return (scores / scores.abs().sum()).tolist()


def rank_window(logprobs: Any, chosen: int, tol: float) -> tuple[int, int]:
    """The ranks (1 = top) the chosen token may have, given rounding of ``tol``."""
    value = float(logprobs[chosen])
    return int((logprobs > value + tol).sum()) + 1, int((logprobs > value - tol).sum())


def check_lens(run: Any, model: Any, tokenizer: Any, step: int, tol: float = TOL) -> None:
    lens = run.lens(step)
    expected = reference_lens(model, step_input(run, tokenizer, step))
    chosen = run.token_ids[step]
    assert lens.layers == model.config.num_hidden_layers == len(lens.probs) == len(lens.ranks)
    traced = run.trace is not None
    for layer in range(lens.layers - 1 if traced else lens.layers):
        row = expected[layer]
        assert lens.logprobs[layer] == pytest.approx(float(row[chosen]), abs=tol)
        assert lens.probs[layer] == pytest.approx(math.exp(float(row[chosen])), abs=tol)
        low, high = rank_window(row, chosen, tol)
        assert low <= lens.ranks[layer] <= high
        top = torch.exp(row.topk(5).values).tolist()
        assert [p for _text, p in lens.top(layer, 5)] == pytest.approx(top, abs=tol)
    if traced:
        # The last layer is the run's own output: the trace's numbers, exactly.
        record = run.trace[step]
        assert lens.logprobs[-1] == record.logprob and lens.probs[-1] == record.prob
        assert lens.ranks[-1] == record.rank
        assert lens.token == record.text
        k = len(record.alternative_ids)
        assert [p for _text, p in lens.top(-1, k)] == [
            math.exp(a.logprob) for a in record.alternatives
        ]
        assert lens.logprobs[-1] == pytest.approx(float(expected[-1][chosen]), abs=TRACE_TOL)
        low, high = rank_window(expected[-1], chosen, TRACE_TOL)
        assert low <= record.rank <= high


def check_attribution(run: Any, model: Any, tokenizer: Any, step: int, rel: float = 1e-4) -> None:
    ids = step_input(run, tokenizer, step)
    attr = run.attribution(step)
    expected = reference_shares(model, ids, run.token_ids[step])
    assert list(attr.token_ids) == ids[0].tolist()
    assert len(attr.tokens) == len(attr.shares) == ids.shape[-1]
    assert attr.prompt_tokens == run.prompt_tokens == ids.shape[-1] - step
    # Signed sums cancel: a small share is bounded in absolute terms (shares sum to 1 in size).
    assert attr.shares == pytest.approx(expected, rel=rel, abs=1e-5)
    assert sum(abs(share) for share in attr.shares) == pytest.approx(1.0, abs=1e-9)
    # The sign is the direction: each score's sign is its share's.
    assert all(
        (score > 0) == (share > 0) for score, share in zip(attr.scores, attr.shares, strict=True)
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_every_layer_matches_an_independent_reading(family, tiny, no_leftover_runs):
    tokenizer = tiny[1]
    model = family_model(family, tokenizer)
    run = nbstream.stream(model, tokenizer, PROMPT, max_new_tokens=5, alternatives=3)
    run.wait()
    assert run.lens(0).family == family
    for step in range(len(run.token_ids)):
        check_lens(run, model, tokenizer, step)
    for step in (0, len(run.token_ids) - 1):
        check_attribution(run, model, tokenizer, step)


def test_layers_disagree_so_the_check_means_something(tiny, no_leftover_runs):
    model = family_model("llama", tiny[1])
    run = nbstream.stream(model, tiny[1], PROMPT, max_new_tokens=5, alternatives=3)
    run.wait()
    lens = run.lens(2)
    assert len(set(lens.probs)) == lens.layers
    assert len({tuple(top) for top in (lens.top(i, 5) for i in range(lens.layers))}) > 1


def test_sampled_and_branched_runs(tiny, no_leftover_runs):
    model, tokenizer = tiny
    run = nbstream.stream(
        model, tokenizer, PROMPT, max_new_tokens=6, alternatives=5, temperature=1.3, seed=7
    )
    run.wait()
    for step in range(len(run.token_ids)):
        check_lens(run, model, tokenizer, step)
    check_attribution(run, model, tokenizer, 3)
    for step in range(len(run.token_ids)):
        lens = run.lens(step)
        said = lens.describe()
        assert lens.ranks[-1] == run.trace[step].rank
        if lens.ranks[-1] > 1:  # a sampled pick the model did not favour most
            assert "not the top token at any layer" in said or "but not at the output" in said
        else:
            assert "top token at layer" in said
    branch = run.branch(2, run.trace[2].alternatives[4], max_new_tokens=6)
    branch.wait()
    assert branch.token_ids[2] == run.trace[2].alternatives[4].id
    for step in range(len(branch.token_ids)):  # the forced tokens, the taken one, then on
        check_lens(branch, model, tokenizer, step)
    check_attribution(branch, model, tokenizer, 2)
    check_attribution(branch, model, tokenizer, len(branch.token_ids) - 1)


def test_describe_and_to_dict(tiny, no_leftover_runs):
    model = family_model("qwen2", tiny[1])
    run = nbstream.stream(model, tiny[1], PROMPT, max_new_tokens=4, alternatives=2)
    run.wait()
    lens, attr = run.lens(3), run.attribution(3)
    view = lens.to_dict()
    assert set(view) == {"step", "token", "layers", "probs", "ranks", "top", "changed"}
    assert (view["step"], view["token"], view["layers"]) == (3, lens.token, 3)
    assert view["probs"] == lens.probs and view["ranks"] == list(lens.ranks)
    assert [len(top) for top in view["top"]] == [5, 5, 5]
    tops = [lens.top(i, 1)[0][0] for i in range(3)]
    assert view["changed"] == [i for i in (1, 2) if tops[i] != tops[i - 1]]
    assert lens.token in lens.describe() and "layer" in lens.describe()
    data = attr.to_dict()
    assert set(data) == {"step", "token", "tokens", "shares", "prompt_tokens", "method"}
    assert data["tokens"] == attr.tokens and data["shares"] == attr.shares
    assert data["prompt_tokens"] == run.prompt_tokens and "gradient · input" in data["method"]
    said = attr.describe()
    assert "prompt holds" in said and repr(attr.strongest(1)[0][1]) in said
    sizes = [abs(share) for _i, _text, share in attr.strongest(len(attr.shares))]
    assert sizes == sorted(sizes, reverse=True)
    assert any(share < 0 for share in attr.shares) and any(share > 0 for share in attr.shares)
    assert "away" in said or "toward" in said
    with pytest.raises(ValueError, match="n must be between 0 and 50"):
        lens.top(0, 51)
    with pytest.raises(IndexError, match="layer 3 out of range"):
        lens.top(3, 1)
    # The caller's no_grad or inference_mode does not reach the attribution's backward pass.
    with torch.no_grad():
        assert run.attribution(3).shares == pytest.approx(attr.shares, rel=1e-6)
    with torch.inference_mode():
        assert run.attribution(3).shares == pytest.approx(attr.shares, rel=1e-6)
        assert run.lens(3).logprobs == pytest.approx(lens.logprobs, abs=1e-7)
    import json

    json.dumps(view), json.dumps(data)


def test_an_unknown_family_is_refused_by_name(tiny, no_leftover_runs):
    tokenizer = tiny[1]
    config = transformers.GPTNeoXConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    model = transformers.GPTNeoXForCausalLM(config).eval()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    run = nbstream.stream(model, tokenizer, PROMPT, max_new_tokens=2)
    run.wait()
    for ask in (run.lens, run.attribution):
        with pytest.raises(LensUnavailable, match=r"GPTNeoXForCausalLM.*'gpt_neox'.*Known: gemma"):
            ask(0)


def test_a_step_out_of_range_is_refused(tiny, no_leftover_runs):
    run = nbstream.stream(*tiny, PROMPT, max_new_tokens=3)
    run.wait()
    with pytest.raises(LensUnavailable, match="step 3 is not a step of this run: it has 3"):
        run.lens(3)
    with pytest.raises(LensUnavailable, match="step -1"):
        run.attribution(-1)
    with pytest.raises(TypeError, match="step must be an int"):
        run.lens("1")
    assert issubclass(LensUnavailable, ValueError)


def test_a_server_run_is_refused(fake, no_leftover_runs):
    run = nbstream.stream(nbstream.Endpoint(fake.url("ok"), "fake-model"), None, "Hi")
    run.wait()
    for ask in (run.lens, run.attribution):
        with pytest.raises(LensUnavailable, match=r"model server .* no hidden states"):
            ask(0)


def test_a_replayed_recording_is_refused(tiny, tmp_path, no_leftover_runs):
    run = nbstream.stream(*tiny, PROMPT, max_new_tokens=3, alternatives=2)
    run.wait()
    replay = nbstream.replay(run.save(tmp_path / "run.json"), speed=None)
    replay.wait()
    with pytest.raises(LensUnavailable, match="replayed recording has no model"):
        replay.lens(0)


def test_beside_a_running_stream_it_never_holds_the_run_or_its_stop(tiny_line, no_leftover_runs):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, PROMPT, max_new_tokens=8000, alternatives=2)
    assert run.wait_for_progress(0, 60) and run.wait_for_progress(4, 60)
    lens_thread: dict[str, Any] = {}
    inside, gate = threading.Event(), threading.Event()

    def hold_the_lens(module: Any, args: Any, output: Any) -> None:
        if threading.get_ident() == lens_thread.get("id"):
            inside.set()
            assert gate.wait(60)

    handle = model.model.layers[0].register_forward_hook(hold_the_lens)
    result: dict[str, Any] = {}

    def compute() -> None:
        lens_thread["id"] = threading.get_ident()
        result["lens"] = run.lens(3)

    worker = threading.Thread(target=compute, daemon=True)
    try:
        worker.start()
        assert inside.wait(60)
        # The lens is inside its forward pass: the run still streams, and stops at once.
        seen = run.progress
        assert run.wait_for_progress(seen, 60)
        run.stop()
        assert run.join(30) and run.status == "cancelled"
    finally:
        gate.set()
        worker.join(60)
        handle.remove()
    assert not worker.is_alive()
    assert result["lens"].logprobs[-1] == pytest.approx(run.trace[3].logprob, abs=TRACE_TOL)
    check_lens(run, model, tokenizer, 3)


@pytest.mark.model
def test_the_default_model(real_model, no_leftover_runs):
    model, tokenizer = real_model
    run = nbstream.stream(
        model, tokenizer, "Name the capital of France.", max_new_tokens=12, alternatives=5
    )
    run.wait()
    assert run.lens(0).layers == model.config.num_hidden_layers == 30
    for step in (0, 6, len(run.token_ids) - 1):
        check_lens(run, model, tokenizer, step, MODEL_TOL)
    check_attribution(run, model, tokenizer, 6, rel=1e-3)


def test_an_offloaded_model_waits_its_turn(tiny, no_leftover_runs):
    # accelerate moves an offloaded model's weights as it runs: no second forward beside a run.
    tokenizer = tiny[1]
    config = lens_config("llama", tokenizer)
    config.max_position_embeddings = 8192
    model = transformers.LlamaForCausalLM(config).eval()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.hf_device_map = {"model.layers.0": "cpu", "model.layers.1": "disk"}
    run = nbstream.stream(model, tokenizer, PROMPT, max_new_tokens=8000, alternatives=2)
    assert run.wait_for_progress(0, 60) and run.wait_for_progress(4, 60)
    seen: dict[str, Any] = {}

    def compute() -> None:
        seen["lens"] = run.lens(3)
        seen["status"] = run.status  # the lens had its turn only once the run let go

    worker = threading.Thread(target=compute, daemon=True)
    worker.start()
    queue = run._queue
    while not queue.snapshot()[1] and worker.is_alive():
        worker.join(0.01)
    assert queue.snapshot()[1], "the lens never took a place in the model's queue"
    run.stop()
    worker.join(60)
    assert not worker.is_alive() and seen["status"] == "cancelled"
    check_lens(run, model, tokenizer, 3)


def test_bfloat16_last_layer_is_the_trace_and_others_within_tolerance(tiny, no_leftover_runs):
    # In bfloat16 the run's cached steps and a full pass differ by up to ~0.15 nats: the last
    # layer must be the trace's own numbers (a greedy pick is the top token, always).
    import copy

    tokenizer = tiny[1]
    model = copy.deepcopy(family_model("llama", tokenizer)).to(torch.bfloat16)
    run = nbstream.stream(model, tokenizer, PROMPT, max_new_tokens=6, alternatives=3)
    run.wait()
    for step in range(len(run.token_ids)):
        lens, record = run.lens(step), run.trace[step]
        assert (lens.logprobs[-1], lens.ranks[-1]) == (record.logprob, record.rank)
        assert lens.ranks[-1] == 1  # greedy: the model's top token
        assert "not the top token at any layer" not in lens.describe()
        assert "but not at the output" not in lens.describe()
        expected = reference_lens(model, step_input(run, tokenizer, step))
        chosen = run.token_ids[step]
        for layer in range(lens.layers - 1):
            assert lens.logprobs[layer] == pytest.approx(
                float(expected[layer][chosen]), abs=BF16_TOL
            )
    last = len(run.token_ids) - 1
    attr = run.attribution(last)
    expected = reference_shares(model, step_input(run, tokenizer, last), run.token_ids[last])
    assert attr.shares == pytest.approx(expected, abs=0.05)


def test_a_moving_rope_waits_its_turn(tiny, no_leftover_runs):
    # A "dynamic" rope re-registers its frequencies on each forward pass: no pass beside a run.
    tokenizer = tiny[1]
    config = lens_config("llama", tokenizer)
    config.max_position_embeddings = 8192
    config.rope_parameters = {**config.rope_parameters, "rope_type": "dynamic", "factor": 2.0}
    model = transformers.LlamaForCausalLM(config).eval()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    run = nbstream.stream(model, tokenizer, PROMPT, max_new_tokens=8000, alternatives=2)
    assert run.wait_for_progress(0, 60) and run.wait_for_progress(4, 60)
    seen: dict[str, Any] = {}

    def compute() -> None:
        seen["lens"] = run.lens(3)
        seen["status"] = run.status

    worker = threading.Thread(target=compute, daemon=True)
    worker.start()
    queue = run._queue
    while not queue.snapshot()[1] and worker.is_alive():
        worker.join(0.01)
    assert queue.snapshot()[1], "the lens never took a place in the model's queue"
    run.stop()
    worker.join(60)
    assert not worker.is_alive() and seen["status"] == "cancelled"
