"""nbstream.template: one template filled from many rows, each row checked before any run."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbstream
from nbstream.prompt_template import Prompts, template_fields


def test_fills_each_row_and_keeps_its_fields():
    rows = [{"text": "a cat", "id": 1}, {"text": "the sea", "id": 2}]
    prompts = nbstream.template("Translate to French: {text}", rows)
    assert isinstance(prompts, Prompts) and isinstance(prompts, list)
    assert prompts == ["Translate to French: a cat", "Translate to French: the sea"]
    assert prompts.fields == rows
    assert prompts.template == "Translate to French: {text}"


def test_a_missing_field_names_the_row_and_the_field():
    rows = [{"text": "a"}, {"txt": "b"}]
    with pytest.raises(KeyError) as info:
        nbstream.template("Translate: {text}", rows)
    message = str(info.value)
    assert "row 1" in message and "'text'" in message and "'txt'" in message


@pytest.mark.parametrize("empty", [None, float("nan")])
def test_an_empty_value_is_missing(empty):
    with pytest.raises(KeyError, match="row 0"):
        nbstream.template("Say {word}", [{"word": empty}])


def test_a_positional_field_is_refused_with_a_hint():
    with pytest.raises(ValueError, match="must be named"):
        nbstream.template("Say {}", [{"word": "hi"}])


def test_message_list_templates_fill_each_content():
    pattern = [
        {"role": "system", "content": "You translate to {lang}."},
        {"role": "user", "content": "{text}"},
    ]
    prompts = nbstream.template(pattern, [{"lang": "French", "text": "cat"}])
    assert prompts[0] == [
        {"role": "system", "content": "You translate to French."},
        {"role": "user", "content": "cat"},
    ]


def test_format_specs_and_attributes_name_their_top_field():
    assert template_fields("{n:.2f} {user.name} {items[0]} {n}") == ["n", "user", "items"]


@pytest.mark.parametrize("rows", ["abc", {"text": "a"}, 3, [["text", "a"]]])
def test_rows_of_the_wrong_kind_are_refused(rows):
    with pytest.raises(TypeError):
        nbstream.template("{text}", rows)


def test_a_dataframe_gives_its_rows():
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame({"text": ["a", "b"], "n": [1, 2]})
    prompts = nbstream.template("{text}!", frame)
    assert prompts == ["a!", "b!"]
    assert [row["n"] for row in prompts.fields] == [1, 2]


names = st.from_regex(r"[a-z][a-z_]{0,6}", fullmatch=True)
values = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=8)


@settings(max_examples=50, deadline=None)
@given(
    fields=st.lists(names, min_size=1, max_size=3, unique=True),
    rows=st.integers(0, 6),
    data=st.data(),
)
def test_one_prompt_per_row_with_every_value_in_it(fields, rows, data):
    pattern = " | ".join("{" + name + "}" for name in fields)
    table = [{name: data.draw(values) for name in fields} for _ in range(rows)]
    prompts = nbstream.template(pattern, table)
    assert len(prompts) == rows == len(prompts.fields)
    for prompt, row in zip(prompts, table, strict=True):
        assert prompt == " | ".join(row[name] for name in fields)
