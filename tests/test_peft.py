"""``run.trace`` (``alternatives=k``) on a model that wraps another: a PEFT adapter, a compile.

A wrapper's ``generate`` runs the model inside it (``PeftModel.generate`` calls its base
model's; ``torch.compile``'s module forwards ``generate`` to the original), so a hook on the
wrapper sees no logits. The adapter here is a real LoRA adapter made with peft on the tiny
model (random, non-zero weights, so that it changes the logits), saved to disk, and met the
two ways a user meets one: ``nbstream.load_model(..., adapter=...)`` and a ``PeftModel``
passed directly. References: one forward pass of the adapted model (independent of
nbstream), and the base model's, which the trace must not match.
"""

from __future__ import annotations

import copy

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model

import nbstream
from nbstream.testing import tiny_model

pytestmark = pytest.mark.usefixtures("no_leftover_runs")

K = 3
TOL = 1e-4
PROMPT = "Hello there"


def fresh_tiny():
    """A copy of the tiny model: peft injects its layers into the model it is given."""
    base, tokenizer = tiny_model()
    return copy.deepcopy(base), tokenizer


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """``(base folder, adapter folder)``: the tiny model and a LoRA adapter made on it."""
    root = tmp_path_factory.mktemp("peft")
    model, tokenizer = fresh_tiny()
    model.save_pretrained(root / "base")
    tokenizer.save_pretrained(root / "base")
    config = LoraConfig(
        r=8,
        lora_alpha=16,
        target_modules=["q_proj", "v_proj", "o_proj", "down_proj"],
        init_lora_weights=False,  # random B: a default (zero) adapter changes nothing
        task_type="CAUSAL_LM",
    )
    torch.manual_seed(1)
    peft_model = get_peft_model(model, config)
    peft_model.save_pretrained(root / "adapter")
    return root / "base", root / "adapter"


def forward_logprobs(model, tokenizer, run):
    """log_softmax of the logits ``model`` gives at each generated position: [tokens, vocab]."""
    prompt = tokenizer(run.prompt_text, add_special_tokens=False, return_tensors="pt")
    prompt_ids = prompt["input_ids"]
    assert prompt_ids.shape[1] == run.prompt_tokens
    sequence = torch.cat([prompt_ids, torch.tensor([run.token_ids])], dim=1)
    with torch.no_grad():
        logits = model(input_ids=sequence).logits[0].float()
    start = prompt_ids.shape[1] - 1
    return torch.log_softmax(logits[start : start + len(run.token_ids)], dim=-1)


def check_trace(model, tokenizer, settings):
    """Run with a trace; every step matches the model's own forward pass."""
    run = nbstream.stream(model, tokenizer, PROMPT, max_new_tokens=8, alternatives=K, **settings)
    run.wait()
    assert run.status == "complete", run.error
    trace = run.trace
    assert trace is not None and len(trace) == len(run.token_ids) == run.metrics["tokens"] > 0
    reference = forward_logprobs(model, tokenizer, run)
    for row, step in zip(reference, trace, strict=True):
        assert step.logprob == pytest.approx(row[step.id].item(), abs=TOL)
        assert [a.logprob for a in step.alternatives] == pytest.approx(
            row.topk(K).values.tolist(), abs=TOL
        )
    return run


def forward_hooks(model):
    """Every forward hook on the model's modules (transformers' own output-capturing hooks,
    installed once a forward asks for hidden states, stay: a lens on the shared tiny model
    leaves them on the copies fresh_tiny makes)."""
    return {(id(m), key) for m in model.modules() for key in m._forward_hooks}


@pytest.mark.parametrize(
    "settings", [{}, {"temperature": 0.9, "seed": 3}], ids=["greedy", "sampled"]
)
def test_trace_on_an_adapter_loaded_by_load_model(saved, settings):
    base_dir, adapter_dir = saved
    model, tokenizer = nbstream.load_model(base_dir, adapter=adapter_dir)
    assert isinstance(model, PeftModel)
    before = forward_hooks(model)
    run = check_trace(model, tokenizer, settings)
    # The adapter's logits, not the base model's: the adapter changes them.
    plain, _ = tiny_model()
    base_reference = forward_logprobs(plain, tokenizer, run)
    assert any(
        abs(step.logprob - row[step.id].item()) > 1e-2
        for row, step in zip(base_reference, run.trace, strict=True)
    )
    assert forward_hooks(model) == before


def test_trace_on_a_peft_model_passed_directly(saved):
    _base_dir, adapter_dir = saved
    base, tokenizer = fresh_tiny()
    model = PeftModel.from_pretrained(base, str(adapter_dir))
    model.eval()
    before = forward_hooks(model)
    check_trace(model, tokenizer, {})
    assert forward_hooks(model) == before


def test_probability_view_on_a_peft_model(saved):
    """What the issue saw: a widget with a probability view on an adapter model."""
    _base_dir, adapter_dir = saved
    base, tokenizer = fresh_tiny()
    model = PeftModel.from_pretrained(base, str(adapter_dir))
    model.eval()
    w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=6, show_probabilities=True)
    run = w.generate(PROMPT)
    run.wait()
    assert run.status == "complete", run.error
    assert len(run.trace) == len(run.token_ids) > 0


def test_trace_on_a_compiled_model():
    """``torch.compile(model).generate`` runs the original module (nothing is compiled)."""
    base, tokenizer = fresh_tiny()
    compiled = torch.compile(base)
    assert compiled is not base
    before = forward_hooks(base)
    check_trace(compiled, tokenizer, {})
    assert forward_hooks(base) == before


def test_an_adapter_model_and_its_base_share_one_queue(saved, probe):
    """They share weights: a run on one waits for a run on the other, never interleaved."""
    _base_dir, adapter_dir = saved
    base, tokenizer = fresh_tiny()
    model = PeftModel.from_pretrained(base, str(adapter_dir))
    model.eval()
    inner = model.get_base_model()
    p = probe(inner)
    p.hold()  # the first run holds the model until released, however fast the machine
    first = nbstream.stream(model, tokenizer, PROMPT, max_new_tokens=400)
    second = nbstream.stream(inner, tokenizer, PROMPT, max_new_tokens=3)
    compiled = torch.compile(inner)
    third = nbstream.stream(compiled, tokenizer, PROMPT, max_new_tokens=3)
    # Queued behind the first, whatever the machine's speed: the queue decides at start.
    assert first.status != "queued"
    assert second.status == "queued" and third.status == "queued"
    first.stop()
    p.release()
    for run in (first, second, third):
        run.wait_done(120)
    assert second.status == third.status == "complete"
