"""The rules of a blind round (nbstream/widgets/blind.py), without a widget: who runs in which
column, when a round is hidden, the votes, and what a hidden round shows of a column.
"""

from __future__ import annotations

import random

import pytest

from nbstream.widgets.blind import (
    HIDDEN_BRANCH,
    HIDDEN_ERROR,
    HIDDEN_MODEL,
    MASKED_TRAITS,
    SHOWN_TRAITS,
    BlindRound,
    shown_error,
    shown_message,
    shown_metrics,
    shown_record,
    shown_snapshot,
    shown_state,
)
from nbstream.widgets.settings_panel import PANEL_SETTINGS

FIGURES = {
    "queued_s": 0.0,
    "ttft_s": 1.45,
    "first_chunk_s": 1.46,
    "tokens": 12,
    "forced_tokens": 0,
    "tokens_per_s": 2.3,
    "elapsed_s": 5.2,
    "finish_reason": "eos",
    "thinking_tokens": None,
    "first_answer_s": 1.46,
}


def test_a_round_is_hidden_from_blind_on_until_reveal_and_a_new_round_hides_again():
    rounds = BlindRound(3, blind=True, shuffler=random.Random(7))
    assert rounds.hidden and rounds.number == 0  # blind on: hidden before any round
    with pytest.raises(RuntimeError, match="nothing to reveal"):
        rounds.reveal()
    expected = list(range(3))
    random.Random(7).shuffle(expected)
    moved = rounds.start()
    assert rounds.order == expected
    assert moved == [p for p, i in enumerate(expected) if i != p]
    assert rounds.hidden and rounds.round_blind
    rounds.reveal()
    assert not rounds.hidden
    rounds.start()
    assert rounds.hidden and rounds.number == 2
    rounds.blind = False
    assert not rounds.hidden
    assert rounds.start() != [] or rounds.order == [0, 1, 2]
    assert rounds.order == [0, 1, 2]  # a round that is not blind: each model its own column


def test_votes_open_once_every_answer_ended_and_close_at_reveal():
    rounds = BlindRound(2, blind=True)
    with pytest.raises(RuntimeError, match="no answer to vote on"):
        rounds.vote("A", going=[])
    rounds.start()
    with pytest.raises(RuntimeError, match="columns A, B still running"):
        rounds.vote("A", going=["B", "A"])
    with pytest.raises(RuntimeError, match="columns A, B still running"):
        rounds.vote("tie", going=["B", "A"])  # a tie waits for whole answers too
    with pytest.raises(ValueError, match=r"no column is labelled 'C'.*or 'tie' for neither"):
        rounds.vote("C", going=[])
    assert rounds.vote("B", going=[]) == {"A": 0, "B": 1, "tie": 0}
    assert rounds.words({}) == "Votes: A 0, B 1 · Blind round 1: not revealed"
    assert rounds.vote("tie", going=[]) == {"A": 0, "B": 1, "tie": 1}
    assert rounds.words({}) == "Votes: A 0, B 1, tie 1 · Blind round 1: not revealed"
    rounds.reveal()
    for label in ("A", "tie"):
        with pytest.raises(RuntimeError, match="this round is revealed"):
            rounds.vote(label, going=[])
    assert rounds.words({"A": "m1", "B": "m2"}) == (
        "Votes: A 0, B 1, tie 1 · Revealed: A = m1, B = m2"
    )
    rounds.start()
    assert rounds.votes == {"A": 0, "B": 0, "tie": 0}


@pytest.mark.parametrize("seed", range(6))
def test_a_saved_round_says_who_was_which_only_once_shown(seed):
    rounds = BlindRound(3, blind=True, shuffler=random.Random(seed))
    rounds.start()
    rounds.vote("C", going=[])
    words = [f"model {i}" for i in rounds.order]  # each column's model, left to right
    hidden = rounds.saved(words)
    assert hidden == {
        "round": 1,
        "blind": True,
        "revealed": False,
        "votes": {"A": 0, "B": 0, "C": 1, "tie": 0},
    }
    assert "model" not in repr(hidden)
    rounds.reveal()
    shown = rounds.saved(words)
    assert shown["revealed"] is True
    assert shown["columns"] == [
        {"label": label, "model": f"model {i}", "model_index": i}
        for label, i in zip("ABC", rounds.order, strict=True)
    ]
    rounds.close(words)  # the next Run all keeps it
    rounds.start()
    assert rounds.past == [shown]
    rounds.blind = False
    rounds.close(words)
    rounds.start()  # a round that was not blind shows its columns: nothing was hidden
    assert "columns" in rounds.saved(["m0", "m1", "m2"])


def test_a_record_s_note_names_the_model_only_once_revealed():
    rounds = BlindRound(2, blind=True, shuffler=random.Random(1))
    assert rounds.note(0, ["m1", "m2"]) is None  # no round yet
    rounds.start()
    note = rounds.note(1, ["m1", "m2"])
    assert note == {"round": 1, "label": "B", "blind": True, "column": 1}
    rounds.reveal()
    note = rounds.note(1, ["m1", "m2"])
    assert note is not None and note["model"] == ["m1", "m2"][rounds.order[1]]


def test_a_hidden_round_shows_no_figure_but_a_cut_answer():
    assert shown_metrics(FIGURES) == {}
    assert shown_metrics({**FIGURES, "finish_reason": "length"}) == {"finish_reason": "length"}
    assert shown_metrics(None) == {}


def test_a_hidden_error_says_it_failed_not_why():
    error = {"type": "EndpointError", "message": "404 from http://127.0.0.1:9/secret-model"}
    assert shown_error(error) == {"type": "RunFailed", "message": HIDDEN_ERROR}
    assert shown_error(None) is None


def test_a_hidden_record_keeps_every_key_but_names_no_model_setting_or_figure():
    record = {
        "format": "nbstream.run/1",
        "model": {"name": "SmolLM2-135M-Instruct", "class": "LlamaForCausalLM", "path": "/m"},
        "prompt": "Hi",
        "prompt_tokens": 31,
        "settings": {"temperature": 0.9, "top_k": 7},
        "generation_config": {"temperature": 0.2},
        "seed": 42,
        "seed_source": "drawn",
        "status": "failed",
        "metrics": FIGURES,
        "error": {"type": "OSError", "message": "no file /models/SmolLM2"},
        "created_at": "2026-01-01T00:00:00Z",
        "versions": {"nbstream": "0.1.0"},
        "warnings": ["SmolLM2 ignores top_k"],
        "settings_unconfirmed": {"top_k": 7},
        "server": {"family": "vllm"},
        "cancel_reason": None,
        "branch": None,
        "thinking": None,
        "trace": {"logprobs": "top 5 from the server"},
        "compare": {"round": 1, "label": "A", "blind": True, "column": 0},
    }
    shown = shown_record(record)  # type: ignore[arg-type]
    assert set(shown) == set(record) - {"trace"}  # a key unknown to the rule: left out
    text = repr(shown)
    for word in ("SmolLM2", "Llama", "/m", "0.9", "top_k", "42", "vllm", "1.45", "2.3"):
        assert word not in text, word
    assert shown["model"]["name"] == HIDDEN_MODEL
    assert (shown["prompt"], shown["status"], shown["compare"]) == (
        "Hi",
        "failed",
        record["compare"],
    )


def test_a_hidden_snapshot_replays_without_the_model_s_pace():
    snapshot = {"v": 1, "run_id": 2, "text": "Hi!", "steps": [70, 2, 380, 1], "thinking_tokens": 3}
    assert shown_snapshot(snapshot) == {"v": 1, "run_id": 2, "text": "Hi!", "steps": [0, 2, 0, 1]}
    assert shown_snapshot(None) is None


def test_a_hidden_message_carries_the_text_without_live_figures():
    delta = {"type": "delta", "run_id": 1, "offset": 0, "text": "Hi", "tokens": 3, "elapsed_s": 1.2}
    assert shown_message(delta) == {"type": "delta", "run_id": 1, "offset": 0, "text": "Hi"}
    reset = {"type": "reset", "run_id": 1, "view": None, "text": "Hi"}
    thinking = {"text": "hm", "tokens": 4, "elapsed_s": 0.3, "done": True}
    assert shown_message({**reset, "thinking": thinking})["thinking"] == {
        "text": "hm",
        "done": True,
    }
    tokens = {"type": "tokens", "run_id": 1, "offset": 0, "tokens": [[1, "Hi", "text"]]}
    assert shown_message(tokens) == tokens  # its tokens are the entries, not a count


def test_the_state_shows_the_answer_s_state_and_masks_the_rest():
    state = {
        "status": "complete",
        "label": "A",
        "temperature": 0.9,
        "top_k": 7,
        "next_run_samples": True,
        "metrics": FIGURES,
        "branch_unavailable": "A recording cannot branch",
        "layout": "IPY_MODEL_x",
        "a_trait_added_later": "names the model",
    }
    shown = shown_state(state, widget_keys={"layout"})
    assert shown == {
        "status": "complete",
        "label": "A",
        "temperature": None,
        "top_k": None,
        "next_run_samples": None,
        "metrics": {},
        "branch_unavailable": HIDDEN_BRANCH,
        "layout": "IPY_MODEL_x",
    }


def test_every_synced_trait_of_a_compare_column_has_a_rule(tiny_line):
    # A trait added to the columns must be placed here: shown as is, or masked (until then
    # a hidden round leaves it out of the page altogether).
    from nbstream.widgets.compare import _WIDGET_KEYS, _Column

    column = _Column(*tiny_line, {})
    try:
        unruled = set(column.keys) - SHOWN_TRAITS - set(MASKED_TRAITS) - _WIDGET_KEYS
        assert unruled == set()
        assert set(PANEL_SETTINGS) <= set(MASKED_TRAITS)
        assert not SHOWN_TRAITS & set(MASKED_TRAITS)
    finally:
        column.close()
