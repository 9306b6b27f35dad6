"""The ``snapshot`` trait: an ended run kept in the widget state a saved notebook stores.

A view with no kernel (a notebook reopened, ``nbconvert --to html``) draws the run from it
(js/src/replay.js); the browser tier checks that (tests/browser/test_kernelless_browser.py).
Here: what it holds, that it is the state saved with a notebook, and what it costs.
"""

from __future__ import annotations

import json
from typing import Any

import ipywidgets
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbstream
from nbstream.protocol import RunSnapshot, keys
from nbstream.testing import forced_model, tiny_model
from nbstream.widgets.snapshot import SNAPSHOT_VERSION, _steps

ANSWER = "Red and **blue** are two colours 🙂; green is a third."


@pytest.fixture(scope="module")
def forced() -> tuple[Any, Any]:
    return forced_model(ANSWER)


def ended(widget: nbstream.StreamWidget, prompt: str = "Name two colors.", **settings: Any) -> str:
    widget.generate(prompt, **settings)
    return widget.wait()


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def compact(value: Any) -> int:
    """Bytes as ipywidgets' JSON puts it in a notebook's widget state."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def test_an_ended_run_leaves_its_text_and_its_course(forced: tuple[Any, Any]) -> None:
    w = nbstream.StreamWidget(*forced)
    assert w.snapshot is None
    text = ended(w)
    s = w.snapshot
    assert set(s) == set(keys(RunSnapshot)) - {"thinking_tokens"}
    assert s["v"] == SNAPSHOT_VERSION and s["run_id"] == w.run_id
    assert s["text"] == text == ANSWER and s["thinking"] is None
    # Per token: ms since the one before, and what the answer grew by (UTF-16 units, as the
    # page slices it): together the whole answer, the emoji's two units included.
    steps = s["steps"]
    assert len(steps) % 2 == 0 and len(steps) >= 2 * w.metrics["tokens"]
    assert all(isinstance(n, int) and n >= 0 for n in steps)
    assert sum(steps[1::2]) == utf16(text) == len(text) + 1
    # No token view was on: no token entries.
    assert s["tokens"] is None


def test_the_token_views_entries_are_kept_only_when_shown(forced: tuple[Any, Any]) -> None:
    tokens_only = nbstream.StreamWidget(*forced, show_tokens=True)
    ended(tokens_only)
    entries = tokens_only.snapshot["tokens"]
    assert len(entries) == tokens_only.metrics["tokens"]
    assert all(entry[5] is None for entry in entries)  # no alternatives unless shown
    with_alternatives = nbstream.StreamWidget(*forced, show_alternatives=True)
    ended(with_alternatives)
    entries = with_alternatives.snapshot["tokens"]
    assert all(len(entry[5]) >= 2 for entry in entries)
    assert "".join(entry[1] for entry in entries).startswith(ANSWER)


def test_a_new_run_clears_it_before_it_starts(forced: tuple[Any, Any]) -> None:
    w = nbstream.StreamWidget(*forced)
    ended(w)
    first = w.snapshot
    seen: list[Any] = []
    w.observe(lambda change: seen.append(change["new"]), names="snapshot")
    ended(w)
    # None first: a view never shows the last run's snapshot as the new run's.
    assert seen[0] is None and seen[-1]["run_id"] == w.run_id == first["run_id"] + 1


def test_it_is_in_the_widget_state_a_notebook_saves(forced: tuple[Any, Any]) -> None:
    w = nbstream.StreamWidget(*forced)
    ended(w)
    saved = ipywidgets.Widget.get_manager_state(widgets=[w])["state"][w.model_id]["state"]
    assert saved["snapshot"] == json.loads(json.dumps(w.snapshot))
    assert saved["status"] == "complete" and saved["run_id"] == w.snapshot["run_id"]


def test_a_replayed_recording_leaves_one_too(forced: tuple[Any, Any], tmp_path: Any) -> None:
    run = nbstream.stream(*forced, "Name two colors.")
    run.wait()
    w = nbstream.StreamWidget(nbstream.load(run.save(tmp_path / "run.json")))
    ended(w, w.prompt)
    assert w.snapshot["text"] == ANSWER
    assert sum(w.snapshot["steps"][1::2]) == utf16(ANSWER)


def test_its_size_per_run_stays_small() -> None:
    """The snapshot's bytes per run: the text, a few bytes per token, the entries if shown."""
    model, tokenizer = tiny_model(one_line=True)
    plain = nbstream.StreamWidget(model, tokenizer)
    text = ended(plain, "Tell a story.", max_new_tokens=300, do_sample=False)
    tokens = plain.metrics["tokens"]
    assert tokens == 300
    course = compact(plain.snapshot) - compact(text)
    # The per-token course (two small ints) and the frame: well under 10 bytes a token.
    assert course < 10 * tokens, course
    shown = nbstream.StreamWidget(model, tokenizer, show_alternatives=True, alternatives=5)
    ended(shown, "Tell a story.", max_new_tokens=300, do_sample=False)
    entries = compact(shown.snapshot["tokens"])
    # Each token's id, text, kind, logprob, rank and its 5 alternatives (the same fields):
    # bounded, not growing with the answer so far.
    assert entries < 400 * tokens, entries / tokens


def test_a_thinking_run_keeps_its_thinking_apart_from_the_answer() -> None:
    w = nbstream.StreamWidget(*forced_model("<think>Two plus two.</think>It is 4."))
    ended(w, "What is 2+2?", max_new_tokens=40)
    s = w.snapshot
    assert s["text"] == "It is 4." and s["thinking"] == "Two plus two."
    # The thinking's tokens add nothing to the answer: the course grows only by the answer.
    grown = s["steps"][1::2]
    assert sum(grown) == len("It is 4.") and grown[0] == 0


@settings(max_examples=300, deadline=None)
@given(
    tokens=st.lists(
        st.tuples(
            st.sampled_from(["a", "bc", "", " ", "é", "🙂", "\n", "x🙂y", "<think>", "</think>"]),
            st.floats(0, 5, allow_nan=False),
        ),
        max_size=12,
    ),
    cut=st.integers(0, 40),
    kind=st.sampled_from(["whole", "tail", "head", "other"]),
)
def test_the_course_replays_the_answer_as_the_stream_grew(
    tokens: list[tuple[str, float]], cut: int, kind: str
) -> None:
    pieces, times = [p for p, _ in tokens], [t for _, t in tokens]
    stream = "".join(pieces)
    cut = min(cut, len(stream))
    text = {"whole": stream, "tail": stream[cut:], "head": stream[:cut], "other": "zz"}[kind]
    steps = _steps(text, pieces, times)
    assert all(isinstance(n, int) and n >= 0 for n in steps)
    # The answer is the stream's end when it is one (a thinking run's thinking comes first).
    skip = utf16(stream) - utf16(text) if stream.endswith(text) else 0
    for i in range(len(pieces)):
        # After token i the page shows the answer up to where the stream so far reaches.
        reached = utf16("".join(pieces[: i + 1])) - skip
        assert sum(steps[1 : 2 * i + 2 : 2]) == min(utf16(text), max(0, reached))
        # And it plays token i when it came, never before the token ahead of it.
        assert sum(steps[0 : 2 * i + 1 : 2]) == max([0] + [round(t * 1000) for t in times[: i + 1]])
    assert sum(steps[1::2]) == utf16(text)  # the rest comes with the last token
