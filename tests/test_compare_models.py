"""CompareWidget with a column per model (``models=``): columns on different models run at once
and end in their own states, Stop all ends them all, records name their models, answers on
different tokenizers part by text, a model that fails to load fails only its column, and a
blind round (shuffled labels, votes, Reveal) hides every model name until Reveal.

The header is driven the way its front end drives it (custom messages and synced traits).
"""

from __future__ import annotations

import copy
import json
import random
import re
import time

import pytest

import nbstream
from nbstream.testing import forced_model, tiny_model
from nbstream.widgets.blind import HIDDEN_MODEL
from nbstream.widgets.compare import HIDDEN_ERROR, HIDDEN_LENS, HIDDEN_RUN, LABELS, TextDivergence

pytestmark = pytest.mark.usefixtures("no_leftover_runs")

MISSING = "no-such-org/no-such-model-for-compare"


def wait_until(predicate, timeout: float = 60.0, what: str = ""):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"not within {timeout} s: {what or predicate}"
        time.sleep(0.01)
    return value


def send(cw, content) -> None:
    """A custom message from the header's view."""
    cw._header._handle_custom_msg(content, [])


@pytest.fixture
def two_models():
    """Two different tiny models (different weights): each has its own queue."""
    return tiny_model(one_line=True, seed=0), tiny_model(one_line=True, seed=1)


def test_columns_on_different_models_run_at_once_and_end_in_their_own_states(
    two_models, fake, probe
):
    first, second = two_models
    gate = probe(first[0])
    gate.hold()
    cw = nbstream.CompareWidget(
        models=[first, second, nbstream.Endpoint(fake.url("drop"), "fake-model")],
        prompt="Hi",
        max_new_tokens=6,
    )
    try:
        runs = cw.generate()
        assert gate.held.wait(30)
        # The second model and the server do not wait for the first: no shared queue.
        assert runs[1].wait(60) is not None
        wait_until(lambda: runs[2].done, what="the server's column to end")
        assert runs[0].status == "running"
        cw.columns[0].stop()
        gate.release()
        cw.wait(60)
        assert cw.statuses == ["cancelled", "complete", "failed"]
        assert [run.status for run in runs] == cw.statuses
    finally:
        cw.close()


def test_stop_all_ends_every_column_whatever_it_runs_on(two_models, fake, probe):
    probes = [probe(model) for model, _ in two_models]
    cw = nbstream.CompareWidget(
        models=[*two_models, nbstream.Endpoint(fake.url("stall"), "fake-model")],
        prompt="Hi",
        max_new_tokens=4000,
    )
    try:
        runs = cw.generate()
        wait_until(lambda: all(run.partial_text for run in runs), what="every column to stream")
        assert cw.stop()
        at_stop = [p.calls for p in probes]
        assert all(run.wait_done(30) for run in runs)
        assert [run.status for run in runs] == ["cancelled"] * 3
        # Each model finishes at most the step it was computing when Stop all landed.
        assert all(p.calls - calls <= 1 for p, calls in zip(probes, at_stop, strict=True))
    finally:
        cw.close()


def test_each_record_names_its_model_and_the_prompt_view_shows_each_template(two_models, fake):
    endpoint = nbstream.Endpoint(fake.url("ok"), "fake-model")
    cw = nbstream.CompareWidget(models=[*two_models, endpoint], prompt="Hi", max_new_tokens=3)
    try:
        cw.generate()
        cw.wait(60)
        records = cw.records
        assert all(record is not None for record in records)
        names = [record["compare"]["model"] for record in records]  # type: ignore[index]
        assert names == cw.model_names
        assert len(set(names)) == 3
        assert names[2] == f"fake-model on 127.0.0.1:{fake.server_address[1]}"
        assert records[2]["model"]["name"] == "fake-model"  # type: ignore[index]
        assert [r["compare"]["label"] for r in records] == ["A", "B", "C"]  # type: ignore[index]
        # Each column's heading names its model; its Prompt view shows its own template.
        for column, name in zip(cw.columns, names, strict=True):
            assert name in column.label
        assert cw.columns[0].prompt_text == cw.columns[0].run.prompt_text
        assert "<|im_start|>" in cw.columns[0].prompt_text
    finally:
        cw.close()


def test_a_model_that_fails_to_load_fails_its_column_while_the_others_run(two_models):
    cw = nbstream.CompareWidget(models=[two_models[0], MISSING], prompt="Hi", max_new_tokens=3)
    try:
        runs = cw.generate()
        cw.wait(60)
        assert [run.status for run in runs] == ["complete", "failed"]
        message = str(runs[1].error)
        assert f"the model {MISSING!r} could not be loaded" in message
        assert "the other columns run without it" in message
        assert cw.columns[1].error_info["type"] == "ModelLoadFailed"
        assert MISSING in cw.columns[1].label
    finally:
        cw.close()


def test_answers_on_two_tokenizers_part_by_text(tiny):
    from transformers import AutoTokenizer

    from nbstream.models import default_model_dir

    model_a, tokenizer_a = forced_model("Hello, world")
    model_b, _ = forced_model("Hello, there")
    # Another tokenizer (one more token): ids of one are not the other's, so only text counts.
    tokenizer_b = AutoTokenizer.from_pretrained(default_model_dir())
    tokenizer_b.add_tokens(["<nbstream-test-extra>"])
    cw = nbstream.CompareWidget(
        models=[(model_a, tokenizer_a), (model_b, tokenizer_b)], prompt="Hi", max_new_tokens=8
    )
    try:
        cw.generate()
        cw.wait(60)
        assert cw.results == ["Hello, world", "Hello, there"]
        found = cw.divergence
        assert isinstance(found, TextDivergence)
        assert found.char == len("Hello, ")
        step = len(tokenizer_a.encode("Hello,", add_special_tokens=False))
        assert found.steps == [step, step]
        assert [t.strip() for t in found.tokens] == ["world", "there"]  # type: ignore[union-attr]
        marks = [column.compare_mark for column in cw.columns]
        assert [mark["step"] for mark in marks] == [step, step]  # type: ignore[index]
        assert "Answers part at character 8: this column has ' world'" in marks[0]["words"]  # type: ignore[index]
    finally:
        cw.close()


def test_a_server_without_token_ids_parts_by_text(fake):
    model, tokenizer = forced_model("Hello, world")
    cw = nbstream.CompareWidget(
        models=[(model, tokenizer), nbstream.Endpoint(fake.url("ok"), "fake-model")],
        prompt="Hi",
        max_new_tokens=8,
    )
    try:
        cw.generate()
        cw.wait(60)
        assert cw.results == ["Hello, world", "Hello, wor"]
        found = cw.divergence
        assert isinstance(found, TextDivergence)
        assert found.char == len("Hello, wor")
        assert found.tokens[1] is None and found.steps[1] is None  # its answer had ended
        assert found.tokens[0] is not None and "ld" in found.tokens[0]
    finally:
        cw.close()


def test_a_blind_round_moves_the_models_between_columns_that_stay_in_place(two_models):
    third = tiny_model(one_line=True, seed=2)
    cw = nbstream.CompareWidget(
        models=[*two_models, third],
        settings=[{}, {"max_new_tokens": 1}, {}],
        prompt="Hi",
        max_new_tokens=3,
        blind=True,
    )
    try:
        cw._shuffler = random.Random(7)
        expected = list(range(3))
        random.Random(7).shuffle(expected)
        assert expected != [0, 1, 2]  # this seed's shuffle moves the models
        runs = cw.generate()
        cw.wait(60)
        # The columns stay where they are (A, B, C left to right in the DOM and the saved
        # state); no CSS order puts them elsewhere.
        assert list(cw._row.children) == cw.columns
        assert all(column.layout.order is None for column in cw.columns)
        assert cw.labels == ["A", "B", "C"] == cw._header.labels
        # Column p ran model expected[p], with that model's own settings.
        assert [run.metrics["tokens"] for run in runs] == [1 if i == 1 else 3 for i in expected]
        for position, record in enumerate(cw.records):
            note = record["compare"]  # type: ignore[index]
            # Held back until Reveal: which model, and the order.
            assert note == {
                "round": 1,
                "label": LABELS[position],
                "blind": True,
                "column": position,
            }
        mapping = cw.reveal()
        # Label to model, with the model's own settings where it has some.
        assert {label: words.split(" · ")[0] for label, words in mapping.items()} == {
            LABELS[p]: cw.model_names[i] for p, i in enumerate(expected)
        }
        assert mapping[LABELS[expected.index(1)]].endswith("max new tokens 1")
        for position, record in enumerate(cw.records):
            note = record["compare"]  # type: ignore[index]
            assert note["model"] == cw.model_names[expected[position]]
            assert note["order"] == [cw.model_names[i] for i in expected]
        # A non-blind round gives every model its own column again, in the order given.
        cw.blind = False
        runs = cw.generate()
        cw.wait(60)
        assert [run.metrics["tokens"] for run in runs] == [3, 1, 3]
        assert [r["compare"]["model"] for r in cw.records] == cw.model_names  # type: ignore[index]
    finally:
        cw.close()


def test_a_hidden_round_covers_defaults_prompt_tokens_and_capabilities(two_models, fake):
    second, tokenizer = tiny_model(one_line=True, seed=1)
    # Other generation defaults, as another family's checkpoint ships them (on a copy: the
    # test models are shared).
    second = copy.deepcopy(second)
    config = second.generation_config
    config.temperature, config.top_p, config.top_k, config.do_sample = 0.7, 0.8, 20, True
    endpoint = nbstream.Endpoint(fake.url("ok"), "fake-model")
    cw = nbstream.CompareWidget(
        models=[two_models[0], (second, tokenizer), endpoint],
        prompt="Hi",
        max_new_tokens=3,
        blind=True,
    )
    covered = ("settings_defaults", "prompt_tokens", "can_trace", "can_explain", "can_lens")
    try:
        cw.generate()
        cw.wait(60)
        states = [{k: c.get_state()[k] for k in covered} for c in cw.columns]
        assert states[0] == states[1] == states[2]  # nothing tells the columns apart
        assert states[0]["prompt_tokens"] is None and states[0]["can_lens"] is False
        cw.reveal()
        shown = {c.run.record["model"]["name"]: c for c in cw.columns}  # type: ignore[index]
        local = [c for c in cw.columns if c.prompt_tokens is not None]
        assert len(local) == 2 and all(c.can_lens and c.can_explain for c in local)
        assert local[0].settings_defaults != local[1].settings_defaults
        assert shown["fake-model"].can_explain is False
    finally:
        cw.close()


def synced(column) -> str:
    """The column's synced traits as JSON, its front end's code and widget ids left out.

    An id is random hex (``IPY_MODEL_71080ea4...``): about one in a hundred holds "404",
    which is no word of a model's.
    """
    state = column.get_state()
    shown = json.dumps({k: v for k, v in state.items() if k not in ("_esm", "_css")}, default=str)
    return re.sub(r"IPY_MODEL_[0-9a-f]+", "IPY_MODEL_<id>", shown)


def test_two_local_models_show_no_probabilities_until_reveal(two_models):
    # A small model's probabilities are flatter, and its tokenizer ends tokens elsewhere:
    # the token views would tell the columns apart, so they wait for Reveal too.
    cw = nbstream.CompareWidget(models=two_models, prompt="Hi", max_new_tokens=3, blind=True)
    try:
        cw.show_probabilities = True
        sent = [lens_replies(c) for c in cw.columns]
        cw.generate()
        cw.wait(60)
        assert [(c.can_trace, c.can_explain) for c in cw.columns] == [(False, False)] * 2
        assert not [m for said in sent for m in said if m.get("type") == "tokens"]
        # Nor does the saved notebook's copy of each answer carry its tokens.
        assert [c.get_state()["snapshot"]["tokens"] for c in cw.columns] == [None, None]
        cw.reveal()
        assert all(c.can_trace and c.can_explain for c in cw.columns)
        for column, said in zip(cw.columns, sent, strict=True):
            tokens = [m for m in said if m.get("type") == "tokens"]
            assert tokens and tokens[-1]["run_id"] == column.run_id
    finally:
        cw.close()


def test_a_local_column_s_tokens_come_at_reveal_when_a_server_hid_them(two_models, fake):
    endpoint = nbstream.Endpoint(fake.url("ok"), "fake-model")
    cw = nbstream.CompareWidget(
        models=[two_models[0], endpoint], prompt="Hi", max_new_tokens=3, blind=True
    )
    try:
        cw.show_tokens = True
        cw.generate()
        cw.wait(60)
        # A server sends no logits: while hidden, no column shows tokens (it would say which).
        assert [c.can_trace for c in cw.columns] == [False, False]
        # The draw puts the local model in either column.
        local = next(
            c
            for c in cw.columns
            if c.run.record["model"]["class"] != "Endpoint"  # type: ignore[index]
        )
        sent = lens_replies(local)
        cw.reveal()
        assert local.can_trace is True
        tokens = [m for m in sent if m.get("type") == "tokens"]
        assert tokens and tokens[-1]["run_id"] == local.run_id
    finally:
        cw.close()


def test_a_hidden_round_says_no_error_s_words_until_reveal(two_models, fake):
    endpoint = nbstream.Endpoint(fake.url("404"), "secret-model-name")
    cw = nbstream.CompareWidget(
        models=[two_models[0], endpoint], prompt="Hi", max_new_tokens=3, blind=True
    )
    try:
        cw.generate()
        cw.wait(60)
        failed = next(c for c in cw.columns if c.status == "failed")
        assert failed.error_info == {"type": "RunFailed", "message": HIDDEN_ERROR}
        saved = json.dumps(cw._fallback())
        for word in ("404", "127.0.0.1", "secret-model-name", "http"):
            assert word not in saved and word not in synced(failed)
        cw.reveal()
        assert "404" in failed.error_info["message"]  # type: ignore[index]
        assert "404" in json.dumps(cw._fallback())
    finally:
        cw.close()


def lens_replies(column) -> list[dict]:
    """What the column sends its views, kept (the lens replies among them)."""
    sent: list[dict] = []
    column._send_msg = sent.append
    return sent


def test_a_hidden_round_offers_no_lens_and_refuses_one_asked_for(two_models):
    cw = nbstream.CompareWidget(models=two_models, prompt="Hi", max_new_tokens=3, blind=True)
    try:
        cw.generate()
        cw.wait(60)
        column = cw.columns[0]
        assert column.can_lens is False
        sent = lens_replies(column)
        ask = {"type": "lens", "view": "v", "request": 1, "run_id": column.run_id, "step": 1}
        column._handle_message(column, ask, [])
        replies = [m for m in sent if m.get("type") == "lens"]
        assert [r["error"] for r in replies] == [HIDDEN_LENS]
        said = json.dumps(sent)
        assert "im_start" not in said and "layers" not in said
        # Once revealed, the section shows, with the templated prompt (its tokens joined:
        # a name can be split across tokens).
        cw.reveal()
        assert column.can_lens is True
        column._handle_message(column, {**ask, "request": 2}, [])
        reply = wait_until(
            lambda: next((m for m in sent if m.get("request") == 2 and m.get("attribution")), None),
            what="the lens after Reveal",
        )
        assert reply["error"] is None and reply["lens"]["layers"] == 2
        # The chat template's marks, split across tokens: what the hidden round held back.
        assert "<|im_start|>" in "".join(reply["attribution"]["tokens"])
    finally:
        cw.close()


def test_a_column_s_own_run_is_refused_while_its_round_is_hidden(two_models):
    cw = nbstream.CompareWidget(models=two_models, prompt="Hi", max_new_tokens=2, blind=True)
    try:
        runs = cw.generate()
        cw.wait(60)
        column = cw.columns[1]
        column._handle_message(column, {"type": "run", "prompt": "Hi"}, [])
        assert column.input_error == HIDDEN_RUN
        with pytest.raises(RuntimeError, match="blind round is hidden"):
            column.generate()
        with pytest.raises(RuntimeError, match="blind round is hidden"):
            column.branch(0, 5)
        assert column.run is runs[1]  # the round's answer is the one voted on
        cw.reveal()
        column.generate().wait(60)
        assert column.run is not runs[1]
    finally:
        cw.close()


def test_votes_are_refused_until_every_column_ended_and_then_count(two_models, probe):
    gate = probe(two_models[0][0])
    cw = nbstream.CompareWidget(models=two_models, prompt="Hi", max_new_tokens=3, blind=True)
    try:
        with pytest.raises(RuntimeError, match="no answer to vote on"):
            cw.vote("A")
        gate.hold()
        cw.generate()
        assert gate.held.wait(30)
        with pytest.raises(RuntimeError, match="once every answer has ended"):
            cw.vote("A")
        send(cw, {"type": "vote", "label": "B"})
        assert "once every answer has ended" in cw._header.vote_error
        assert cw._header.can_vote is False
        with pytest.raises(RuntimeError, match="once every answer has ended"):
            cw.vote("tie")  # a tie is refused when a letter is
        assert cw.votes == {"A": 0, "B": 0, "tie": 0}
        gate.release()
        cw.wait(60)
        wait_until(lambda: cw._header.can_vote, what="the vote to open")
        cw.vote("A")
        send(cw, {"type": "vote", "label": "A"})
        send(cw, {"type": "vote", "label": "B"})
        send(cw, {"type": "vote", "label": "tie"})
        assert cw.vote("tie") == {"A": 2, "B": 1, "tie": 2}
        assert cw.votes == {"A": 2, "B": 1, "tie": 2}
        assert cw._header.votes == {"A": 2, "B": 1, "tie": 2}
        assert cw._header.vote_error == ""
        with pytest.raises(ValueError, match="no column is labelled 'C'"):
            cw.vote("C")
        # A new round counts from zero.
        cw.generate()
        cw.wait(60)
        assert cw.votes == {"A": 0, "B": 0, "tie": 0}
    finally:
        cw.close()


def test_a_reveal_is_final_for_its_round(two_models):
    cw = nbstream.CompareWidget(models=two_models, prompt="Hi", max_new_tokens=2, blind=True)
    try:
        with pytest.raises(RuntimeError, match="nothing to reveal"):
            cw.reveal()
        cw.generate()
        cw.wait(60)
        cw.vote("B")
        send(cw, {"type": "reveal"})
        mapping = cw._header.revealed
        assert sorted(mapping.values()) == sorted(cw.model_names)
        assert cw.reveal() == mapping  # the same answer again
        with pytest.raises(RuntimeError, match="this round is revealed"):
            cw.vote("A")
        with pytest.raises(RuntimeError, match="this round is revealed"):
            cw.vote("tie")
        assert cw._header.can_vote is False
        assert cw.votes == {"A": 0, "B": 1, "tie": 0}
        # The columns now name their models, after their letters.
        for column, label in zip(cw.columns, cw.labels, strict=True):
            assert column.label == f"{label} · {mapping[label]}"
            assert column.prompt_text == column.run.prompt_text
        assert "Revealed: A = " in cw._fallback()["text/plain"]
    finally:
        cw.close()


def test_turning_blind_off_during_a_blind_round_reveals_it(two_models):
    cw = nbstream.CompareWidget(models=two_models, prompt="Hi", max_new_tokens=2, blind=True)
    try:
        cw.generate()
        cw.wait(60)
        cw._header.blind = False  # the checkbox
        assert cw._header.revealed
        with pytest.raises(RuntimeError, match="revealed"):
            cw.vote("A")
    finally:
        cw.close()


def names_in(text: str, names: list[str]) -> list[str]:
    return [name for name in names if name.lower() in text.lower()]


def test_blind_mode_names_no_model_in_repr_state_or_saved_output(two_models, fake):
    endpoint = nbstream.Endpoint(fake.url("ok"), "fake-model")
    cw = nbstream.CompareWidget(
        models=[*two_models, endpoint, MISSING], prompt="Hi", max_new_tokens=3, blind=True
    )
    try:
        hidden = [*cw.model_names, "LlamaForCausalLM", "fake-model", "127.0.0.1", "no-such-org"]
        runs = cw.generate()
        cw.wait(60)
        shown = [
            repr(cw),
            repr(runs),
            json.dumps(cw._fallback()),
            json.dumps(cw._header.get_state(), default=str),
            *(json.dumps(column.get_state(), default=str) for column in cw.columns),
            *(str(column.label) for column in cw.columns),
        ]
        for text in shown:
            assert names_in(text, hidden) == [], text[:400]
        # No chat template in the Prompt view (it names a model family) until Reveal.
        assert all(column.prompt_text is None for column in cw.columns)
        cw.reveal()
        assert names_in(repr(cw), cw.model_names) == cw.model_names
        assert names_in(json.dumps(cw._fallback()), cw.model_names) == cw.model_names
    finally:
        cw.close()


def named(pair, name: str, temperature: float):
    """A copy of a tiny model under another name, with its own generation default."""
    model, tokenizer = pair
    model = copy.deepcopy(model)
    model.config._name_or_path = model.name_or_path = name
    model.generation_config.temperature = temperature
    return model, tokenizer


def every_view_of(cw, runs) -> list[str]:
    """Everything a user can print of the compare and its columns, as text."""
    return [
        repr(cw),
        repr(runs),
        json.dumps(cw.records, default=str),
        json.dumps(cw._fallback()),
        *(repr(column) for column in cw.columns),
        *(synced(column) for column in cw.columns),
        *(json.dumps(column._fallback(), default=str) for column in cw.columns),
        *(json.dumps(column._shown_fallback(), default=str) for column in cw.columns),
        *(json.dumps(column.record, default=str) for column in cw.columns),
    ]


def test_a_hidden_round_s_records_and_errors_name_no_model_until_reveal(two_models):
    secret = named(two_models[0], "secret-org/first-model", temperature=0.123)
    cw = nbstream.CompareWidget(models=[secret, MISSING], prompt="Hi", max_new_tokens=3, blind=True)
    try:
        runs = cw.generate()
        cw.wait(60)
        hidden = ["secret-org", "first-model", "no-such-org", "Llama", "0.123", "parameters"]
        for text in every_view_of(cw, runs):
            assert names_in(text, hidden) == [], text[:400]
        for record in cw.records:
            assert record is not None
            assert record["model"]["name"] == HIDDEN_MODEL
            assert record["generation_config"] is None and record["settings"] == {}
        failed = next(record for record in cw.records if record["status"] == "failed")
        assert failed["error"] == {"type": "RunFailed", "message": HIDDEN_ERROR}
        assert [r["prompt"] for r in cw.records] == ["Hi", "Hi"]  # the answers' own parts stay
        cw.reveal()
        records = json.dumps(cw.records, default=str)
        assert names_in(records, hidden[:4]) == hidden[:4]
        assert "0.123" in records  # the model's generation config
    finally:
        cw.close()


def test_a_replay_column_looks_like_a_live_one_until_reveal(two_models):
    run = nbstream.stream(*two_models[1], "Hi", max_new_tokens=3)
    run.wait(60)
    cw = nbstream.CompareWidget(
        models=[run.to_recording(), two_models[0]], prompt="Hi", max_new_tokens=3, blind=True
    )
    try:
        for when in ("before the round", "after it"):
            runs = cw.generate() if when == "after it" else []
            if runs:
                cw.wait(60)
            # The headings follow the shuffle: each is a letter, whichever column replays.
            assert [column.label for column in cw.columns] == cw.labels, when
            states = [column.get_state() for column in cw.columns]
            assert states[0]["branch_unavailable"] == states[1]["branch_unavailable"], when
            for text in every_view_of(cw, runs):
                assert names_in(text, ["replay", "recording", "recorded"]) == [], text[:400]
        cw.reveal()
        replay = next(c for c in cw.columns if "replay of" in c.label)
        assert "recording" in replay.get_state()["branch_unavailable"].lower()
        assert "replay" in repr(replay)
    finally:
        cw.close()


def test_per_model_settings_reach_the_page_only_at_reveal(two_models):
    settings = [{"temperature": 0}, {"temperature": 0.9, "top_k": 7}]
    cw = nbstream.CompareWidget(
        models=two_models, settings=settings, prompt="Hi", max_new_tokens=3, blind=True
    )
    panel = ("temperature", "top_k", "max_new_tokens", "next_run_samples", "settings_defaults")
    try:
        cw._shuffler = random.Random(1)
        for when in ("before the round", "after it"):
            if when == "after it":
                cw.generate()
                cw.wait(60)
            for column in cw.columns:
                state = column.get_state()
                assert [state[name] for name in panel] == [None, None, None, None, {}], when
            assert cw.settings == settings, when  # in the order given, whatever the draw
        # An edit from a page that shows the fields blank is not taken while hidden.
        cw.columns[0].set_state({"top_k": 3})
        cw.reveal()
        shown = sorted((c.get_state()["temperature"], c.get_state()["top_k"]) for c in cw.columns)
        assert shown == [(0, None), (0.9, 7)]
        assert cw.settings == settings
        assert {c.get_state()["next_run_samples"] for c in cw.columns} == {True, False}
    finally:
        cw.close()


def test_a_hidden_round_shows_its_answers_and_states_but_no_figures(two_models):
    cw = nbstream.CompareWidget(models=two_models, prompt="Hi", max_new_tokens=3, blind=True)
    sent: list[list[dict]] = [[], []]
    for column, kept in zip(cw.columns, sent, strict=True):
        column.send = lambda content, buffers=None, kept=kept: kept.append(content)
    try:
        runs = cw.generate()
        cw.wait(60)
        for column, kept in zip(cw.columns, sent, strict=True):
            # A cut answer still says so; no count, time or rate.
            assert column.metrics == {"finish_reason": "length"}
            assert column.get_state()["metrics"] == {"finish_reason": "length"}
            steps = column.get_state()["snapshot"]["steps"]
            assert steps[0::2] == [0] * (len(steps) // 2)  # its Replay is instant
            live = [m for m in kept if m.get("type") in ("delta", "thinking")]
            assert live and not [m for m in live if "tokens" in m or "elapsed_s" in m]
        figures = ["tok/s", "3 tokens", "tokens=3", "ttft_s", "tokens_per_s", "elapsed="]
        for text in every_view_of(cw, runs):
            assert names_in(text, figures) == [], text[:400]
        assert cw.results == [run.result for run in runs] and cw.statuses == ["complete"] * 2
        cw.reveal()
        assert [column.metrics["tokens"] for column in cw.columns] == [3, 3]
        assert "3 tokens" in cw._fallback()["text/plain"]
        assert all(column.get_state()["snapshot"]["steps"][0] > 0 for column in cw.columns)
    finally:
        cw.close()


def test_the_summary_says_when_models_compete_for_the_cpu(two_models):
    cw = nbstream.CompareWidget(models=two_models, prompt="Hi", max_new_tokens=2)
    try:
        cw.generate()
        cw.wait(60)
        assert "the models run at once on the CPU" in cw._header.summary
    finally:
        cw.close()
    one = tiny_model(one_line=True)
    same = nbstream.CompareWidget(models=[one, one], prompt="Hi", max_new_tokens=2)
    try:
        same.generate()
        same.wait(60)
        assert "at once" not in same._header.summary  # one model: its columns take turns
    finally:
        same.close()


def test_saved_columns_replay_side_by_side(two_models, tmp_path):
    cw = nbstream.CompareWidget(models=two_models, prompt="Hi", max_new_tokens=4)
    try:
        with pytest.raises(RuntimeError, match="has no ended run to save"):
            cw.save(tmp_path)
        cw.generate()
        texts = cw.wait(60)
        paths = cw.save(tmp_path / "lesson")
    finally:
        cw.close()
    assert [p.name for p in paths] == ["column-1.json", "column-2.json"]
    replay = nbstream.CompareWidget(models=[nbstream.load(p) for p in paths])
    try:
        assert replay.prompt == "Hi"  # the recorded prompt
        assert all(name.startswith("replay of ") for name in replay.model_names)
        replay.generate()
        assert replay.wait(60) == texts
        assert all(r["model"]["replayed"] for r in replay.records)  # type: ignore[index]
    finally:
        replay.close()


def test_a_saved_folder_keeps_every_round_s_votes_and_who_was_which(two_models, tmp_path):
    cw = nbstream.CompareWidget(models=two_models, prompt="Hi", max_new_tokens=2, blind=True)
    try:
        cw.generate()
        cw.wait(60)
        cw.vote("A")
        cw.vote("tie")
        first = cw.reveal()
        cw.generate()  # round 2: voted, never revealed
        cw.wait(60)
        cw.vote("B")
        cw.generate()  # round 3: revealed, saved
        cw.wait(60)
        cw.vote("B")
        with pytest.raises(RuntimeError, match="this blind round is hidden"):
            cw.save(tmp_path / "hidden")
        assert not (tmp_path / "hidden").exists()  # nothing written while hidden
        third = cw.reveal()
        cw.save(tmp_path / "alice")
    finally:
        cw.close()
    index = json.loads((tmp_path / "alice" / "index.json").read_text())
    assert index["format"] == "nbstream.compare/1"
    assert index["models"] == cw.model_names
    assert index["files"] == ["column-1.json", "column-2.json"]
    rounds = index["rounds"]
    assert [r["round"] for r in rounds] == [1, 2, 3]
    assert rounds[0]["votes"] == {"A": 1, "B": 0, "tie": 1}
    assert {c["label"]: c["model"] for c in rounds[0]["columns"]} == first
    for entry in (rounds[0], rounds[2]):
        for column in entry["columns"]:  # each column's model index is the model's
            assert cw.model_names[column["model_index"]] == column["model"]
    # The round never revealed keeps its votes and nothing of who was which.
    assert rounds[1] == {"round": 2, "blind": True, "revealed": False, "votes": rounds[1]["votes"]}
    assert {c["label"]: c["model"] for c in rounds[2]["columns"]} == third
    # The class's board reads it: two rounds count, the unrevealed one is refused, named.
    with pytest.warns(UserWarning, match="round 2 was never revealed"):
        board = nbstream.arena(tmp_path / "alice")
    assert sorted(row["model"] for row in board.table) == sorted(cw.model_names)
    assert board.votes == 3
    assert sum(row["ties"] for row in board.table) == 2  # one tie, counted for each model
    assert board.refused == [(str(tmp_path / "alice" / "index.json"), board.refused[0][1])]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"models": "gpt2"}, TypeError, r"models must be a list"),
        ({"models": [None]}, ValueError, r"2 to 4 models, got 1"),
        ({"models": [None] * 5}, ValueError, r"2 to 4 models, got 5"),
        ({"models": [None, None], "settings": [{}]}, ValueError, r"1 dicts for 2 models"),
        ({"models": [None, 3]}, TypeError, r"models entries are.*got int"),
        ({"models": [None, (1, 2, 3)]}, TypeError, r"pair has two items"),
        ({"models": [None, None], "blind": "yes"}, TypeError, r"blind must be True or False"),
    ],
)
def test_bad_models_arguments_raise_before_anything_is_created(kwargs, error, match):
    with pytest.raises(error, match=match):
        nbstream.CompareWidget(prompt="Hi", **kwargs)


def test_models_and_a_model_are_not_both_given(tiny):
    with pytest.raises(TypeError, match="not both"):
        nbstream.CompareWidget(*tiny, models=[tiny, tiny])


def test_three_models_the_default_one_among_them_end_in_their_own_states(real_model, fake):
    tiny = tiny_model(one_line=True)
    cw = nbstream.CompareWidget(
        models=[None, tiny, nbstream.Endpoint(fake.url("drop"), "fake-model")],
        prompt="Name a color.",
        max_new_tokens=5,
    )
    try:
        runs = cw.generate()
        cw.wait(300)
        assert [run.status for run in runs] == ["complete", "complete", "failed"]
        assert cw.model_names[0] == "SmolLM2-135M-Instruct"
        assert cw.records[0]["model"]["name"] == "SmolLM2-135M-Instruct"  # type: ignore[index]
        assert [r["compare"]["model"] for r in cw.records] == cw.model_names  # type: ignore[index]
        # Each model counts the prompt with its own tokenizer and template.
        assert all(isinstance(run.prompt_tokens, int) for run in runs[:2])
    finally:
        cw.close()


def test_where_two_models_part_each_token_has_its_own_model_s_odds(two_models):
    cw = nbstream.CompareWidget(models=two_models, prompt="Hi", max_new_tokens=4)
    try:
        cw.generate()
        cw.wait(60)
        found = cw.divergence
        assert found is not None and not isinstance(found, TextDivergence)  # one tokenizer
        step, tokens = found
        for i, column in enumerate(cw.columns):
            own = column.run.distribution(step, temperature=1.0, top_k=0, top_p=1.0)
            words = column.compare_mark["words"]  # type: ignore[index]
            assert f"({own.prob(tokens[i], 'model'):.0%} to its model)" in words.split(";")[0]
    finally:
        cw.close()
