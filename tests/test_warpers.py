"""Every logits processor transformers' ``generate`` builds from a generation config: a
seeded run samples what transformers' own sampling samples, ``run.trace`` marks ``cut``
what transformers' processors leave no chance, and ``run.distribution`` gives the
probabilities they give; a processor nbstream cannot apply and show is refused by name
before anything starts.

The reference is transformers itself: ``generate(do_sample=True)`` after
``torch.manual_seed(seed)`` (a run's private generator seeded the same way draws the same
numbers), with ``output_scores=True``: the scores it sampled from, after every processor.
"""

from __future__ import annotations

import copy
import inspect
import re
import threading

import pytest
import torch
from transformers import LogitsProcessor, WatermarkingConfig

import nbstream

pytestmark = pytest.mark.usefixtures("no_leftover_runs")

PROMPT = "Hello there"
STEPS = 8
K = 20
# The tiny model's odds are nearly flat (its weights are random): a low temperature makes
# them steep enough for the cut-offs below to keep some of the top K and cut others.
SAMPLED = {"temperature": 0.1, "top_k": 0, "seed": 11}


def _top_ids(tokenizer, n):
    """Ids the tiny model likes first for PROMPT (worth banning: a ban of them shows)."""
    from nbstream.testing import tiny_model

    model, _ = tiny_model(one_line=True)
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}], tokenize=False, add_generation_prompt=True
    )
    encoded = tokenizer(text, add_special_tokens=False, return_tensors="pt")
    with torch.no_grad():
        logits = model(**encoded).logits[0, -1]
    return logits.topk(n).indices.tolist()


def _cases(tokenizer):
    """One generation config change per processor ``_get_logits_processor`` builds."""
    top = _top_ids(tokenizer, 6)
    eos = tokenizer.eos_token_id
    return {
        "min_p": {"min_p": 0.02},
        "typical_p": {"typical_p": 0.5},
        "epsilon_cutoff": {"epsilon_cutoff": 0.001},
        "eta_cutoff": {"eta_cutoff": 0.02},
        "top_h": {"top_h": 0.4},
        "repetition_penalty": {"repetition_penalty": 3.0},
        "encoder_repetition_penalty": {"encoder_repetition_penalty": 3.0},
        "sequence_bias": {"sequence_bias": [[[top[0]], float("-inf")], [[top[1]], -2.0]]},
        "bad_words_ids": {"bad_words_ids": [[top[2]], [top[3], top[4]]]},
        "no_repeat_ngram_size": {"no_repeat_ngram_size": 1},
        "encoder_no_repeat_ngram_size": {"encoder_no_repeat_ngram_size": 1},
        "min_length": {"min_length": 12, "sequence_bias": None},
        "min_new_tokens": {"min_new_tokens": 4, "sequence_bias": None},
        "forced_bos_token_id": {"forced_bos_token_id": tokenizer.bos_token_id},
        "forced_eos_token_id": {"forced_eos_token_id": eos},
        "remove_invalid_values": {"remove_invalid_values": True},
        "exponential_decay_length_penalty": {
            "exponential_decay_length_penalty": (2, 1.5),
            "sequence_bias": None,
        },
        "suppress_tokens": {"suppress_tokens": top[:3]},
        "begin_suppress_tokens": {"begin_suppress_tokens": top[:3]},
        "renormalize_logits": {"renormalize_logits": True},
        "several": {"min_p": 0.05, "top_p": 0.9, "typical_p": 0.95, "repetition_penalty": 1.5},
    }


# The fields _get_logits_processor reads that are no processor of their own (the run's
# shape, and the sliders a run sets itself: temperature, top_k, top_p are in "several"
# and every run's settings).
NOT_PROCESSORS = {
    "do_sample",
    "num_beams",
    "num_return_sequences",
    "max_length",
    "use_cache",
    "temperature",
    "top_k",
    "top_p",
}
REFUSED = {"guidance_scale", "watermarking_config"}


def test_every_field_generate_builds_a_processor_from_is_tested(tiny_line):
    """A processor a later transformers adds fails here until it is tested or refused."""
    model, tokenizer = tiny_line
    source = inspect.getsource(type(model)._get_logits_processor)
    read = set(re.findall(r"generation_config\.([a-z]\w*)", source))
    covered = {name for case in _cases(tokenizer).values() for name in case}
    assert read - NOT_PROCESSORS - REFUSED - covered == set()


def _with_config(model, changes):
    config = copy.deepcopy(model.generation_config)
    for name, value in changes.items():
        setattr(config, name, value)
    return config


def _reference(model, tokenizer, run, settings):
    """transformers' own sampled (or greedy) run of the same prompt: its tokens and the
    scores it chose from at each step, after every processor it applies."""
    ids = tokenizer(run.prompt_text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    options = {k: v for k, v in settings.items() if k != "seed"}
    if settings.get("temperature") == 0:
        options = {"do_sample": False}
    else:
        options["do_sample"] = True
        torch.manual_seed(settings["seed"])
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=STEPS,
            output_scores=True,
            return_dict_in_generate=True,
            **options,
        )
    return out.sequences[0, ids.shape[-1] :].tolist(), [s[0] for s in out.scores]


@pytest.mark.parametrize("mode", ["sampled", "greedy"])
@pytest.mark.parametrize(
    "case",
    [
        "min_p",
        "typical_p",
        "epsilon_cutoff",
        "eta_cutoff",
        "top_h",
        "repetition_penalty",
        "encoder_repetition_penalty",
        "sequence_bias",
        "bad_words_ids",
        "no_repeat_ngram_size",
        "encoder_no_repeat_ngram_size",
        "min_length",
        "min_new_tokens",
        "forced_bos_token_id",
        "forced_eos_token_id",
        "remove_invalid_values",
        "exponential_decay_length_penalty",
        "suppress_tokens",
        "begin_suppress_tokens",
        "renormalize_logits",
        "several",
    ],
)
def test_sampler_trace_and_distribution_agree_with_transformers(tiny_line, monkeypatch, case, mode):
    model, tokenizer = tiny_line
    changes = _cases(tokenizer)[case]
    monkeypatch.setattr(model, "generation_config", _with_config(model, changes))
    settings = dict(SAMPLED) if mode == "sampled" else {"temperature": 0}
    run = nbstream.stream(
        model, tokenizer, PROMPT, max_new_tokens=STEPS, alternatives=K, **settings
    )
    run.wait(60)
    tokens, scores = _reference(model, tokenizer, run, settings)
    assert run.token_ids == tokens
    for step, (record, ref) in enumerate(zip(run.trace, scores, strict=True)):
        d = run.distribution(step)
        shown = d.probs[d.stages[-1]]
        if mode == "sampled":
            expected_cut = tuple(bool(ref[alt] == float("-inf")) for alt in record.alternative_ids)
            assert record.cut == expected_cut, f"step {step}"
            expected = torch.softmax(ref.float(), dim=-1)
            assert torch.allclose(shown, expected, atol=1e-6), f"step {step}"
        else:
            assert int(shown.argmax()) == tokens[step] == int(ref.argmax())
            assert float(shown.max()) == 1.0
        for alt, cut in zip(record.alternative_ids, record.cut, strict=True):
            # The trace and the explainer agree on every alternative's chance.
            assert cut == (d.prob(alt) == 0.0), f"step {step} token {alt}"
    # The explainer shows each processor the run applied as a stage of its own, by the
    # name of the setting that adds it.
    applied = {name for name, value in changes.items() if value is not None}
    assert applied - {"top_k", "top_p"} <= set(d.stages) - {"model"}


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"guidance_scale": 1.5}, "guidance_scale"),
        ({"watermarking_config": WatermarkingConfig()}, "watermarking_config"),
    ],
)
def test_what_cannot_be_applied_and_shown_is_refused(tiny_line, monkeypatch, changes, words):
    model, tokenizer = tiny_line
    monkeypatch.setattr(model, "generation_config", _with_config(model, changes))
    before = {t for t in threading.enumerate() if t.name.startswith("nbstream-run-")}
    for settings in (SAMPLED, {"temperature": 0}):
        with pytest.raises(ValueError, match=words) as caught:
            nbstream.stream(model, tokenizer, PROMPT, max_new_tokens=4, **settings)
        assert "generation_config" in str(caught.value)
    assert {t for t in threading.enumerate() if t.name.startswith("nbstream-run-")} <= before


def test_a_processor_nbstream_does_not_know_is_refused_by_name(tiny_line, monkeypatch):
    model, tokenizer = tiny_line

    class FutureLogitsWarper(LogitsProcessor):
        def __call__(self, input_ids, scores):
            return scores

    original = type(model)._get_logits_processor

    def with_future(self, generation_config, *args, **kwargs):
        processors = original(self, generation_config, *args, **kwargs)
        if generation_config.do_sample:
            processors.append(FutureLogitsWarper())
        return processors

    monkeypatch.setattr(type(model), "_get_logits_processor", with_future)
    with pytest.raises(ValueError, match="FutureLogitsWarper"):
        nbstream.stream(model, tokenizer, PROMPT, max_new_tokens=4, **SAMPLED)


def test_the_models_own_min_p_makes_a_seeded_run_what_transformers_samples(tiny_line, monkeypatch):
    """The case that showed it: a min_p so high that only the favourite survives."""
    model, tokenizer = tiny_line
    monkeypatch.setattr(model, "generation_config", _with_config(model, {"min_p": 0.999}))
    greedy = nbstream.stream(model, tokenizer, PROMPT, max_new_tokens=STEPS, temperature=0)
    run = nbstream.stream(model, tokenizer, PROMPT, max_new_tokens=STEPS, temperature=1.0, seed=1)
    assert run.wait(60) == greedy.wait(60)
    assert run.record["settings"]["do_sample"] is True
