"""Settings: validation, what each one does to a run, and the model's defaults."""

from __future__ import annotations

import math
import threading

import pytest
import torch

import nbstream
from nbstream.settings import DEFAULT_MAX_NEW_TOKENS, SETTINGS, validate_settings

pytestmark = pytest.mark.usefixtures("no_leftover_runs")

ALLOWED = (
    "max_new_tokens",
    "temperature",
    "top_p",
    "top_k",
    "repetition_penalty",
    "do_sample",
    "seed",
    "budget_s",
    "stop",
    "expect",
    "alternatives",
    "thinking_tags",
    "enable_thinking",
    "steer",
)


def generate_reference(model, tokenizer, prompt, **kwargs):
    """Plain ``model.generate`` in this thread, decoded the way nbstream promises."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )
    encoded = tokenizer(text, add_special_tokens=False, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**encoded, pad_token_id=tokenizer.pad_token_id, **kwargs)
    return tokenizer.decode(out[0, encoded["input_ids"].shape[-1] :], skip_special_tokens=True)


# -- validation --------------------------------------------------------------------------------


def test_the_allowed_settings():
    assert tuple(SETTINGS) == ALLOWED


def test_unknown_setting_names_the_allowed_ones():
    with pytest.raises(TypeError) as info:
        validate_settings({"max_tokens": 10})
    message = str(info.value)
    assert "max_tokens" in message
    for name in ALLOWED:
        assert name in message


def test_valid_settings_pass_and_none_is_unset():
    clean = validate_settings(
        {
            "max_new_tokens": 12,
            "temperature": 1,
            "top_p": 0.9,
            "top_k": 0,
            "repetition_penalty": 1.1,
            "do_sample": True,
            "seed": 0,
            "budget_s": 2,
            "num_beams": 1,
            "num_return_sequences": None,
        }
    )
    assert clean == {
        "max_new_tokens": 12,
        "temperature": 1.0,
        "top_p": 0.9,
        "top_k": 0,
        "repetition_penalty": 1.1,
        "do_sample": True,
        "seed": 0,
        "budget_s": 2.0,
    }
    assert isinstance(clean["temperature"], float)
    assert validate_settings({"temperature": None, "seed": None}) == {}


@pytest.mark.parametrize(
    "settings, exc",
    [
        ({"max_new_tokens": True}, TypeError),
        ({"max_new_tokens": "20"}, TypeError),
        ({"max_new_tokens": 1_000_001}, ValueError),
        ({"temperature": True}, TypeError),
        ({"temperature": -1e-9}, ValueError),
        ({"temperature": float("-inf")}, ValueError),
        ({"top_p": 1.5}, ValueError),
        ({"top_p": math.nan}, ValueError),
        ({"top_k": 2.0}, TypeError),
        ({"repetition_penalty": -1}, ValueError),
        ({"seed": 1.5}, TypeError),
        ({"seed": -3}, ValueError),
        ({"do_sample": 1}, TypeError),
        ({"budget_s": -1}, ValueError),
        ({"budget_s": math.nan}, ValueError),
        ({"num_beams": 4}, ValueError),
        ({"num_return_sequences": 2}, ValueError),
        ({"stopping_criteria": []}, TypeError),
        ({"logits_processor": []}, TypeError),
        ({"generation_config": None}, TypeError),
        ({"input_ids": None}, TypeError),
        ({"stop": "END"}, TypeError),
        ({"stop": []}, ValueError),
        ({"stop": ["END", ""]}, ValueError),
        ({"stop": ["END", 3]}, TypeError),
        ({"stop": {"END"}}, TypeError),
        ({"stop": ["\ud800"]}, ValueError),
        ({"expect": "xml"}, ValueError),
        ({"expect": "JSON "}, ValueError),
        ({"expect": True}, TypeError),
        ({"expect": {"type": "object"}}, TypeError),
    ],
)
def test_invalid_settings(settings, exc):
    with pytest.raises(exc) as info:
        validate_settings(settings)
    assert next(iter(settings)) in str(info.value)


def test_stop_and_expect_are_kept_as_given():
    clean = validate_settings({"stop": ("END", "\n\n", "END"), "expect": "json"})
    # A list (as JSON has), in order, each stop string once.
    assert clean == {"stop": ["END", "\n\n"], "expect": "json"}
    assert validate_settings({"stop": None, "expect": None}) == {}


def test_a_bare_string_for_stop_says_to_pass_a_list():
    with pytest.raises(TypeError, match=r"list of strings, e\.g\. stop=\["):
        validate_settings({"stop": "END"})


def test_bad_stop_or_expect_starts_nothing(tiny):
    model, tokenizer = tiny
    for bad in ({"stop": "END"}, {"expect": "yaml"}):
        with pytest.raises((TypeError, ValueError)):
            nbstream.stream(model, tokenizer, "Hi", **bad)
    assert not [t for t in threading.enumerate() if t.name.startswith("nbstream-run-")]


def test_max_new_tokens_limit_is_accepted():
    assert validate_settings({"max_new_tokens": 1_000_000}) == {"max_new_tokens": 1_000_000}


# -- what each setting does ---------------------------------------------------------------------


def test_seed_reproduces_and_leaves_the_global_rng_alone(tiny):
    model, tokenizer = tiny
    torch.manual_seed(1234)
    before = torch.random.get_rng_state()
    texts = [
        nbstream.stream(model, tokenizer, "Hi", max_new_tokens=30, temperature=1.0, seed=42).wait()
        for _ in range(2)
    ]
    assert torch.equal(torch.random.get_rng_state(), before)
    other = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=30, temperature=1.0, seed=43)
    greedy = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=30).wait()
    assert texts[0] == texts[1]
    assert other.wait() != texts[0]
    assert texts[0] != greedy  # it really sampled
    # The caller's sequence continues as if no seeded run had happened.
    torch.manual_seed(1234)
    expected = torch.rand(4)
    torch.manual_seed(1234)
    nbstream.stream(model, tokenizer, "Hi", max_new_tokens=10, temperature=1.0, seed=42).wait()
    assert torch.equal(torch.rand(4), expected)


def test_seed_reproduces_while_another_thread_draws_random_numbers(tiny):
    model, tokenizer = tiny
    alone = nbstream.stream(
        model, tokenizer, "Hi", max_new_tokens=40, temperature=1.0, seed=7
    ).wait()
    stop = threading.Event()

    def draw() -> None:
        while not stop.is_set():
            torch.rand(16)

    noise = threading.Thread(target=draw)
    noise.start()
    try:
        busy = nbstream.stream(
            model, tokenizer, "Hi", max_new_tokens=40, temperature=1.0, seed=7
        ).wait()
    finally:
        stop.set()
        noise.join()
    assert busy == alone


def test_temperature_zero_is_greedy(tiny_line, greedy):
    model, tokenizer = tiny_line
    reference = greedy(model, tokenizer, "Hello", 20)[1]
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=20, temperature=0)
    assert run.wait() == reference
    assert run.settings["do_sample"] is False


def test_temperature_above_zero_samples(tiny_line, greedy):
    model, tokenizer = tiny_line
    reference = greedy(model, tokenizer, "Hello", 20)[1]
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=20, temperature=1.0, seed=0)
    assert run.settings["do_sample"] is True
    assert run.wait() != reference


def test_do_sample_false_wins_over_temperature(tiny_line, greedy):
    model, tokenizer = tiny_line
    reference = greedy(model, tokenizer, "Hello", 20)[1]
    run = nbstream.stream(
        model, tokenizer, "Hello", max_new_tokens=20, temperature=1.5, do_sample=False, seed=0
    )
    assert run.wait() == reference
    assert run.settings["do_sample"] is False


def test_top_k_and_top_p_reach_the_sampler(tiny_line, greedy):
    # Sampling among the 1 most likely token (or a vanishing nucleus) is greedy decoding.
    model, tokenizer = tiny_line
    reference = greedy(model, tokenizer, "Hello", 20)[1]
    for setting in ({"top_k": 1}, {"top_p": 1e-9}):
        run = nbstream.stream(
            model, tokenizer, "Hello", max_new_tokens=20, temperature=5.0, seed=1, **setting
        )
        assert run.wait() == reference, setting


def test_repetition_penalty_reaches_generate(tiny_line, greedy):
    model, tokenizer = tiny_line
    plain = greedy(model, tokenizer, "Hello", 20)[1]
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=20, repetition_penalty=3.0)
    text = run.wait()
    assert text != plain
    assert text == generate_reference(
        model, tokenizer, "Hello", do_sample=False, max_new_tokens=20, repetition_penalty=3.0
    )


def test_unset_settings_fall_back_to_the_generation_config(tiny_line, monkeypatch):
    model, tokenizer = tiny_line
    monkeypatch.setattr(model.generation_config, "max_new_tokens", 7)
    run = nbstream.stream(model, tokenizer, "Hello")
    run.wait()
    assert run.settings["max_new_tokens"] == 7
    assert run.metrics["tokens"] == 7
    # An explicit setting wins.
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=3)
    run.wait()
    assert run.metrics["tokens"] == 3


def test_do_sample_falls_back_to_the_generation_config(tiny_line, greedy, monkeypatch):
    model, tokenizer = tiny_line
    reference = greedy(model, tokenizer, "Hello", 20)[1]
    monkeypatch.setattr(model.generation_config, "do_sample", True)
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=20, seed=3)
    assert run.settings["do_sample"] is True
    assert run.wait() != reference
    # temperature=0 still means greedy, whatever the config says.
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=20, temperature=0)
    assert run.wait() == reference


def test_without_any_max_new_tokens_the_engine_default_applies(tiny_line):
    model, tokenizer = tiny_line
    assert model.generation_config.max_new_tokens is None
    run = nbstream.stream(model, tokenizer, "Hello")
    assert run.settings["max_new_tokens"] == DEFAULT_MAX_NEW_TOKENS
    run.stop()
    with pytest.raises(nbstream.GenerationCancelled):
        run.wait()


def test_budget_is_kept_in_the_runs_settings(tiny_line):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=2, budget_s=60)
    run.wait()
    assert run.settings["budget_s"] == 60.0


# -- what the panel says the next run will do (the next_run_samples trait) -----------------
@pytest.mark.parametrize(
    ("panel", "defaults", "expected"),
    [
        ({"temperature": None, "do_sample": None}, {"do_sample": False}, False),  # greedy model
        ({"temperature": None, "do_sample": None}, {"do_sample": True}, True),
        ({"temperature": 0.7, "do_sample": None}, {"do_sample": False}, True),  # the case
        ({"temperature": 0.0, "do_sample": None}, {"do_sample": True}, False),
        ({"temperature": 0.7, "do_sample": False}, {"do_sample": True}, False),
        ({"temperature": None, "do_sample": True}, {"do_sample": False}, True),
        ({"temperature": None, "do_sample": None}, {}, None),  # an endpoint decides
        ({"temperature": 0.0, "do_sample": True}, {"do_sample": False}, None),  # refused
        ({"temperature": -1.0, "do_sample": None}, {"do_sample": False}, None),  # invalid
    ],
)
def test_next_run_samples_says_what_the_run_will_do(panel, defaults, expected):
    from nbstream.widgets.settings_panel import next_run_samples

    assert next_run_samples(panel, defaults) is expected


def test_next_run_samples_matches_what_the_local_backend_passes_to_generate(tiny):
    """The panel's label and the run agree: the same rule, read from the generate kwargs."""
    from nbstream.widgets.settings_panel import model_defaults, next_run_samples

    model, tokenizer = tiny
    defaults = model_defaults(model)
    for temperature in (None, 0.0, 0.5):
        for do_sample in (None, False, True):
            if temperature == 0.0 and do_sample:
                continue  # refused before anything starts (tested above)
            settings = {
                k: v
                for k, v in {"temperature": temperature, "do_sample": do_sample}.items()
                if v is not None
            }
            run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=1, **settings)
            run.wait(60)
            said = next_run_samples({"temperature": temperature, "do_sample": do_sample}, defaults)
            # A local run has a seed exactly when it samples (one is drawn if none was given).
            assert said is (run.seed is not None), (settings, said)
