"""A record is the run: for any combination of settings, ``rerun`` of the record read back
from JSON builds the same prompt, runs with the same settings in effect, and gives the same
text (greedy, seeded, and sampled with a drawn seed), for branches too.

The settings are drawn from :func:`nbstream.settings.settings_schema`, so a setting added
later is drawn here at once: if its record leaves it out, or ``rerun`` does not pass it
again, this fails (and a setting of a type this test cannot draw fails until it can).
"""

from __future__ import annotations

import copy
import json
import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import nbstream
from nbstream.settings import settings_schema, validate_settings

# Values that keep each example a fraction of a second, and every run deterministic: a few
# tokens, a budget no run reaches, stop strings and thinking tags the gibberish can hold.
OVERRIDES = {
    "max_new_tokens": st.integers(1, 8),
    "budget_s": st.floats(30, 600),
    "alternatives": st.integers(0, 5),
    "temperature": st.one_of(st.just(0.0), st.floats(0.3, 2.0)),
    "top_k": st.integers(0, 100),
    "repetition_penalty": st.floats(0.5, 2.0),
    "stop": st.lists(st.text(alphabet="aer ", min_size=1, max_size=2), min_size=1, max_size=3),
    "thinking_tags": st.one_of(
        st.just([]),
        st.lists(st.text(alphabet="[]<>ab", min_size=1, max_size=3), min_size=2, max_size=2),
    ),
}
PROMPTS = ["Hi", "Tell me a story", [{"role": "user", "content": "Name a colour"}]]
# A greedy run's sampling values are not in effect (the record says None for them).
SAMPLING = ("temperature", "top_p", "top_k")


def _steer(layer: int, strength: float, seed: int) -> tuple:
    """steer=(direction, strength): a random direction for the tiny model (64 wide, 2 layers)."""
    import torch

    from nbstream.steering import Direction

    vector = torch.randn(64, generator=torch.Generator().manual_seed(seed))
    return Direction(vector=vector, layer=layer), strength


def _strategy(name: str, entry: dict) -> st.SearchStrategy:
    """Values of one setting, from its schema (its type and bounds)."""
    if name in OVERRIDES:
        return OVERRIDES[name]
    kind, low, high = entry["type"], entry["min"], entry["max"]
    if kind == "bool":
        return st.booleans()
    if kind == "int":
        low = 0 if low is None else low + bool(entry["min_exclusive"])
        return st.integers(low, low + 10**6 if high is None else high)
    if kind == "float":
        return st.floats(
            0.0 if low is None else low,
            1e6 if high is None else high,
            exclude_min=entry["min_exclusive"],
            exclude_max=entry["max_exclusive"],
            allow_nan=False,
            allow_infinity=False,
        )
    if kind == "string":
        return st.sampled_from(entry["values"])
    if kind == "strings":
        return st.lists(st.text(min_size=1, max_size=4), min_size=entry.get("min_items", 0))
    if kind == "steer":
        return st.builds(_steer, st.integers(0, 1), st.floats(-8, 8), st.integers(0, 99))
    raise AssertionError(f"setting {name!r} of type {kind!r}: teach this test to draw it")


# max_new_tokens always (the default, 256 tokens, would make an example take seconds).
SETTINGS = st.fixed_dictionaries(
    {"max_new_tokens": OVERRIDES["max_new_tokens"]},
    optional={
        name: _strategy(name, entry)
        for name, entry in settings_schema().items()
        if name != "max_new_tokens"
    },
)
# What a branch may set of its own.
BRANCH_SETTINGS = st.fixed_dictionaries(
    {},
    optional={
        "temperature": OVERRIDES["temperature"],
        "seed": st.integers(0, 2**32),
        "top_p": st.floats(0.5, 1.0),
        "stop": OVERRIDES["stop"],
    },
)


@pytest.fixture(scope="module")
def switching(tiny_line):
    """The tiny model with a chat template that takes enable_thinking, as Qwen3's does."""
    model, tokenizer = tiny_line
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.chat_template += (
        "{% if enable_thinking is defined and enable_thinking is false %}"
        "<think>\n\n</think>\n\n{% endif %}"
    )
    return model, tokenizer


def _contradicts(given: dict) -> bool:
    return given.get("temperature") == 0 and given.get("do_sample") is True


def _same_run_again(run, model, tokenizer):
    """rerun of ``run``'s record read back from JSON: the same prompt, settings and text."""
    record = json.loads(json.dumps(run.record, allow_nan=False))
    again = nbstream.rerun(record, model, tokenizer)
    assert again.wait_done(60)
    assert again.prompt_text == run.prompt_text
    assert again.record["settings"] == record["settings"]
    assert again.record["seed"] == record["seed"]
    assert again.token_ids == run.token_ids
    assert again.partial_text == run.partial_text
    assert again.thinking == run.thinking
    assert again.status == run.status
    return record


def _each_setting_is_recorded(record: dict, given: dict) -> None:
    """Every setting given is in the record, as given (or, for a greedy run's sampling
    values, as not in effect)."""
    recorded = record["settings"]
    for name, value in validate_settings(given).items():
        assert name in recorded, f"{name} is missing from the record"
        if name in SAMPLING and not recorded["do_sample"]:
            assert recorded[name] is None
        elif isinstance(value, float):
            assert math.isclose(recorded[name], value), name
        else:
            assert recorded[name] == value, name


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data(), given_settings=SETTINGS, prompt=st.sampled_from(PROMPTS))
def test_a_record_read_back_from_json_reruns_the_same_run(switching, data, given_settings, prompt):
    assume(not _contradicts(given_settings))
    model, tokenizer = switching
    run = nbstream.stream(model, tokenizer, prompt, **given_settings)
    assert run.wait_done(60)
    record = _same_run_again(run, model, tokenizer)
    _each_setting_is_recorded(record, given_settings)

    ids = run.token_ids
    if not ids or not data.draw(st.booleans(), label="branch"):
        return
    step = data.draw(st.integers(0, len(ids) - 1), label="step")
    token = data.draw(st.integers(0, len(tokenizer) - 1), label="token")
    own = data.draw(BRANCH_SETTINGS, label="branch settings")
    asked = {k: v for k, v in given_settings.items() if k not in own}
    assume(not _contradicts({**asked, **own}))
    assume(step + 1 <= given_settings["max_new_tokens"])
    branch = run.branch(step, token, **own)
    assert branch.wait_done(60)
    branch_record = _same_run_again(branch, model, tokenizer)
    _each_setting_is_recorded(branch_record, own)
