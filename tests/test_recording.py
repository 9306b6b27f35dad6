"""Recordings: ``run.save(path)``, ``nbstream.load(path)`` and ``nbstream.replay``."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nbstream
from nbstream import recording as recording_module
from nbstream import recording_checks
from nbstream.backends.replay import RecordedFailure, ReplayBackend, ReplayJob
from nbstream.testing import forced_model


def trace_rows(trace: Any) -> list[tuple[Any, ...]]:
    """A trace as plain values, log-probabilities to the recording's 4 decimals."""
    return [
        (
            step.id,
            step.text,
            round(step.logprob, 4),
            step.rank,
            tuple(step.cut),
            tuple((alt.id, alt.text, round(alt.logprob, 4)) for alt in step.alternatives),
        )
        for step in trace
    ]


def ended(run: nbstream.Generation) -> nbstream.Generation:
    run.wait_done()
    return run


def stopped_run(tiny: tuple[Any, Any], probe: Any) -> nbstream.Generation:
    """A run stopped at its fifth step, whatever the timing (the model waits at a gate)."""
    model, tokenizer = tiny
    gate = probe(model)
    gate.hold()
    run = nbstream.stream(model, tokenizer, "Stop me", max_new_tokens=200, temperature=0.8, seed=3)
    gate.on_call = lambda calls: run.stop("enough for the demo") if calls >= 5 else None
    gate.release()
    assert ended(run).status == "cancelled"
    return run


def assert_same_end(replayed: nbstream.Generation, run: nbstream.Generation) -> None:
    assert replayed.status == run.status
    assert replayed.partial_text == run.partial_text
    assert replayed.result == run.result
    assert replayed.thinking == run.thinking
    assert replayed.metrics["finish_reason"] == run.metrics["finish_reason"]
    assert replayed.token_ids == run.token_ids
    assert replayed.cancel_reason == run.cancel_reason


# -- save and load ----------------------------------------------------------------------------
@pytest.mark.parametrize("alternatives", [0, 3])
def test_save_load_round_trips_every_field(tiny, tmp_path, alternatives):
    model, tokenizer = tiny
    run = nbstream.stream(
        model, tokenizer, "Hello", max_new_tokens=40, temperature=0.8, seed=1,
        alternatives=alternatives,
    )  # fmt: skip
    text = run.wait()
    loaded = nbstream.load(run.save(tmp_path / "run.json"))
    assert isinstance(loaded, recording_module.Recording)
    assert loaded.prompt == run.prompt == "Hello"
    assert loaded.prompt_text == run.prompt_text
    assert loaded.text == text
    assert loaded.status == "complete"
    assert loaded.finish_reason == run.metrics["finish_reason"]
    assert loaded.record == json.loads(json.dumps(run.record))
    assert loaded.metrics == loaded.record["metrics"]
    assert loaded.token_ids == run.token_ids
    assert "".join(token.piece for token in loaded.tokens) == text
    times = [token.time_s for token in loaded.tokens]
    assert times == sorted(times)
    if alternatives:
        assert loaded.alternatives == alternatives
        assert trace_rows(loaded.trace) == trace_rows(run.trace)
    else:
        assert loaded.trace is None
        assert all(token.logprob is None for token in loaded.tokens)


def test_a_stopped_run_round_trips(tiny, probe, tmp_path):
    run = stopped_run(tiny, probe)
    loaded = nbstream.load(run.save(tmp_path / "stopped.json"))
    assert loaded.status == run.status == "cancelled"
    assert loaded.cancel_reason == "enough for the demo"
    assert loaded.text == run.partial_text
    assert loaded.token_ids == run.token_ids


def test_a_failed_run_round_trips(tiny, tmp_path):
    model, tokenizer = tiny
    run = ended(nbstream.stream(model, tokenizer, "Hi", max_new_tokens=8, expect="json"))
    assert run.status == "failed"
    loaded = nbstream.load(run.save(tmp_path / "failed.json"))
    assert loaded.status == "failed"
    assert loaded.error == {"type": "InvalidJSON", "message": str(run.error)}
    assert loaded.text == run.partial_text


def test_a_thinking_run_round_trips(tmp_path):
    model, tokenizer = forced_model("<think>Two plus two.</think>Four.")
    run = nbstream.stream(model, tokenizer, "2+2?", max_new_tokens=30)
    assert run.wait() == "Four."
    loaded = nbstream.load(run.save(tmp_path / "thinking.json"))
    assert loaded.thinking == run.thinking == "Two plus two."
    assert "".join(token.piece for token in loaded.tokens).startswith("<think>")
    replayed = ended(nbstream.replay(loaded, speed=None))
    assert_same_end(replayed, run)


def test_saving_a_run_that_has_not_ended_is_refused(tiny, probe, tmp_path):
    model, tokenizer = tiny
    gate = probe(model)
    gate.hold()
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=5)
    with pytest.raises(RuntimeError, match="has not ended"):
        run.save(tmp_path / "early.json")
    gate.release()
    run.wait()
    assert not (tmp_path / "early.json").exists()


def timeline_of(recording: Any) -> tuple[list[str], list[float]]:
    return [t.piece for t in recording.tokens], [t.time_s for t in recording.tokens]


def test_the_timeline_is_the_recordings_tokens(tiny, probe, tmp_path):
    # What a widget's saved notebook replays from: the same pieces and times as a saved file.
    model, tokenizer = tiny
    done = ended(
        nbstream.stream(model, tokenizer, "Hi", max_new_tokens=40, temperature=1.5, seed=4)
    )
    stopped = stopped_run(tiny, probe)
    for run in (done, stopped):
        pieces, times = run.timeline()
        assert (pieces, times) == timeline_of(run.to_recording())
        assert len(pieces) == len(run.token_ids) and "".join(pieces) == run.partial_text
    # A replay stopped partway: the recorded pace, not the replay's.
    loaded = nbstream.load(done.save(tmp_path / "run.json"))
    # Three tokens at once, then one a minute: the replay is still going after the third.
    assert len(loaded.tokens) > 4
    paced = [0.0, 0.0, 0.0] + [60.0 * n for n in range(1, len(loaded.tokens) - 2)]
    slow = tuple(
        dataclasses.replace(token, time_s=at)
        for token, at in zip(loaded.tokens, paced, strict=True)
    )
    replayed = nbstream.replay(dataclasses.replace(loaded, tokens=slow), speed=1.0)
    while len(replayed.token_ids) < 3:
        replayed.wait_for_progress(replayed.progress, 5)
    replayed.stop()
    pieces, times = ended(replayed).timeline()
    assert (pieces, times) == timeline_of(replayed.to_recording())
    assert 3 <= len(times) < len(slow) and times == paced[: len(times)]


def test_the_timeline_of_a_run_that_has_not_ended_is_refused(tiny, probe):
    model, tokenizer = tiny
    gate = probe(model)
    gate.hold()
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=5)
    with pytest.raises(RuntimeError, match="has not ended"):
        run.timeline()
    gate.release()
    run.wait()


# -- replay -----------------------------------------------------------------------------------
def test_replay_reaches_the_same_end_text_and_trace(tiny, tmp_path):
    model, tokenizer = tiny
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=30, alternatives=3)
    text = run.wait()
    path = run.save(tmp_path / "run.json")
    replayed = nbstream.replay(path, speed=None)
    chunks = list(replayed)
    assert "".join(chunks) == text
    assert_same_end(replayed, run)
    assert trace_rows(replayed.trace) == trace_rows(run.trace)
    assert [token.piece for token in nbstream.load(path).tokens] == [
        token.piece for token in nbstream.load(replayed.save(tmp_path / "again.json")).tokens
    ]


def test_replay_of_a_stopped_run_ends_cancelled_with_its_reason(tiny, probe, tmp_path):
    run = stopped_run(tiny, probe)
    replayed = ended(nbstream.replay(run.save(tmp_path / "stopped.json"), speed=None))
    assert_same_end(replayed, run)
    with pytest.raises(nbstream.GenerationCancelled, match="enough for the demo"):
        replayed.wait()


def test_every_observer_of_a_replayed_cancel_sees_its_reason(tiny, probe, tmp_path):
    path = stopped_run(tiny, probe).save(tmp_path / "stopped.json")
    for _ in range(20):
        seen: list[Any] = []
        called = threading.Event()

        def observe(run: Any, seen: list[Any] = seen, called: threading.Event = called) -> None:
            seen.append((run.status, run.cancel_reason))
            called.set()

        replayed = nbstream.replay(path, speed=None)
        replayed.add_done_callback(observe)
        assert replayed.wait_done(30)
        # Done-callbacks run on the worker after the end is set: wait_done may return first.
        assert called.wait(30)
        assert seen == [("cancelled", "enough for the demo")]


def test_replay_of_a_failed_run_fails_with_the_recorded_failure(tiny, tmp_path):
    model, tokenizer = tiny
    run = ended(nbstream.stream(model, tokenizer, "Hi", max_new_tokens=8, expect="json"))
    replayed = ended(nbstream.replay(run.save(tmp_path / "failed.json"), speed=None))
    assert replayed.status == "failed"
    assert replayed.result is None
    assert replayed.partial_text == run.partial_text
    assert isinstance(replayed.error, RecordedFailure)
    with pytest.raises(nbstream.GenerationFailed, match="the recorded run failed: InvalidJSON"):
        replayed.wait()


def test_stop_during_a_replay_ends_cancelled_with_partial_text(tiny, tmp_path):
    model, tokenizer = tiny
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=30, temperature=0.8, seed=2)
    text = run.wait()
    loaded = nbstream.load(run.save(tmp_path / "run.json"))
    # One token a minute from the first, at once: the replay is still going after it.
    slow = tuple(
        dataclasses.replace(token, time_s=60.0 * index) for index, token in enumerate(loaded.tokens)
    )
    replayed = nbstream.replay(dataclasses.replace(loaded, tokens=slow), speed=1.0)
    seen = []
    with pytest.raises(nbstream.GenerationCancelled):
        for chunk in replayed:
            seen.append(chunk)
            replayed.stop("the lesson moved on")
    assert replayed.status == "cancelled"
    assert replayed.result is None
    assert replayed.cancel_reason == "the lesson moved on"
    assert seen and text.startswith(replayed.partial_text)
    assert len(replayed.partial_text) < len(text)


def test_replay_keeps_at_least_the_recorded_pace_divided_by_speed(tiny, tmp_path):
    model, tokenizer = tiny
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=20)
    run.wait()
    loaded = nbstream.load(run.save(tmp_path / "run.json"))
    started = time.perf_counter()
    nbstream.replay(loaded, speed=4.0).wait()
    # A lower bound only: the replay never runs ahead of its pace, however slow the machine.
    assert time.perf_counter() - started >= loaded.duration_s / 4.0


def test_a_replay_says_it_is_one(tiny, tmp_path):
    model, tokenizer = tiny
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=5)
    run.wait()
    replayed = ended(nbstream.replay(run.save(tmp_path / "run.json"), speed=None))
    record = replayed.record
    assert record["replay"] == {
        "of": {"created_at": run.record["created_at"], "model": run.record["model"]["name"]},
        "speed": None,
    }
    assert record["model"]["replayed"] is True
    assert "replay" in repr(replayed)
    assert "replay" not in repr(run)


@pytest.mark.parametrize("speed", [0, -1.0, "fast", True])
def test_a_bad_speed_is_refused(tiny, tmp_path, speed):
    model, tokenizer = tiny
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=3)
    run.wait()
    with pytest.raises(ValueError, match="speed must be a number > 0"):
        nbstream.replay(run.save(tmp_path / "run.json"), speed=speed)


# -- hostile and foreign files ----------------------------------------------------------------
@pytest.fixture
def saved(tiny, tmp_path) -> dict[str, Any]:
    model, tokenizer = tiny
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=6, alternatives=2)
    run.wait()
    document: dict[str, Any] = json.loads(run.save(tmp_path / "good.json").read_text())
    return document


def nested(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = [value]
    return value


def write(tmp_path: Any, document: Any) -> Any:
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_a_truncated_file_is_refused(tmp_path, saved):
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(saved)[:-40], encoding="utf-8")
    with pytest.raises(ValueError, match=r"not complete JSON .*truncated.*run.save"):
        nbstream.load(path)
    with pytest.raises(ValueError, match="truncated"):
        nbstream.replay(path)


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (lambda d: d.update(format="someone.else/1"), "format is 'someone.else/1'"),
        (lambda d: d.update(format="nbstream.recording/2"), "reads 'nbstream.recording/1'"),
        (lambda d: d.pop("tokens"), "'tokens' is missing"),
        (lambda d: d.update(text=42), "'text' is a int, not str"),
        (lambda d: d.update(minor="1"), "'minor' must be an int"),
        (lambda d: d["record"].update(status="running"), "not an end state"),
        (lambda d: d["tokens"][0].__setitem__(1, 7), r"tokens\[0\] is not \[id, piece, ms"),
        (lambda d: d["tokens"][0].__setitem__(5, [[1, "a"]]), r"tokens\[0\]"),
        (lambda d: d["tokens"][0].__setitem__(6, ["yes"]), r"tokens\[0\]"),
        (lambda d: d.update(thinking_tags=["<a>"]), "two non-empty strings"),
        # What a replay could not show, refused before it runs.
        (lambda d: d["tokens"][0][6].append(0), r"tokens\[0\] .*one cut flag per alternative"),
        (lambda d: d["tokens"][0][6].clear(), r"tokens\[0\] .*one cut flag per alternative"),
        (lambda d: d["tokens"][1].__setitem__(2, float("inf")), r"tokens\[1\] .*ms from 0"),
        (lambda d: d["tokens"][1].__setitem__(2, float("nan")), r"tokens\[1\] .*ms from 0"),
        (lambda d: d["tokens"][1].__setitem__(2, 1e300), r"tokens\[1\] .*ms from 0"),
        (lambda d: d.update(text=d["text"] + "!"), "'text' is not what its tokens replay"),
        (lambda d: d.update(text=""), "'text' is not what its tokens replay"),
        (lambda d: d.update(thinking_tags=["", ""]), "two non-empty strings"),
        (lambda d: d["settings"].update(stop=[""]), r"settings .*stop\[0\] is empty"),
        (lambda d: d["settings"].update(thinking_tags=["<a>", ""]), "settings .*non-empty"),
        (lambda d: d["settings"].update(alternatives=1000), "settings .*alternatives must be"),
        (lambda d: d.update(kinds=[[5, "bytes", "zz"]]), r"kinds\[0\] is not \[id, 'special'\]"),
        (lambda d: d.update(kinds=[[5, "odd"]]), r"kinds\[0\]"),
        (lambda d: d.update(prompt=nested(40)), "'prompt' nests deeper than 32 levels"),
        (lambda d: d["record"].update(extra=nested(40)), "'record' nests deeper than 32"),
    ],
)
def test_a_tampered_file_is_refused_and_nothing_runs(tmp_path, saved, tamper, message):
    tamper(saved)
    path = write(tmp_path, saved)
    with pytest.raises(ValueError, match=message):
        nbstream.load(path)
    with pytest.raises(ValueError, match=message):
        nbstream.replay(path, speed=None)


def test_a_file_of_another_kind_is_refused(tmp_path):
    path = write(tmp_path, [1, 2, 3])
    with pytest.raises(ValueError, match="JSON list, not an object"):
        nbstream.load(path)


def test_too_many_tokens_are_refused(tmp_path, saved, monkeypatch):
    monkeypatch.setattr(recording_checks, "MAX_TOKENS", 3)
    path = write(tmp_path, saved)
    with pytest.raises(ValueError, match="over the 3-token limit"):
        nbstream.load(path)


def test_too_large_a_file_is_refused_before_it_is_read(tmp_path, saved, monkeypatch):
    monkeypatch.setattr(recording_checks, "MAX_BYTES", 100)
    path = write(tmp_path, saved)
    with pytest.raises(ValueError, match="over the 100-byte limit"):
        nbstream.load(path)


def test_a_recording_load_would_refuse_is_not_saved(tiny, tmp_path, monkeypatch):
    model, tokenizer = tiny
    run = ended(nbstream.stream(model, tokenizer, "Hello", max_new_tokens=8))
    monkeypatch.setattr(recording_checks, "MAX_BYTES", 100)
    with pytest.raises(ValueError, match=r"over the 100-byte limit of nbstream\.load"):
        run.save(tmp_path / "big.json")
    assert not (tmp_path / "big.json").exists()


def test_a_newer_minor_version_warns_naming_what_it_cannot_show(tmp_path, saved):
    saved["minor"] = recording_module.MINOR + 1
    saved["branches"] = []
    path = write(tmp_path, saved)
    with pytest.warns(UserWarning, match=rf"cannot show .*minor {saved['minor']}.*: branches"):
        loaded = nbstream.load(path)
    assert ended(nbstream.replay(loaded, speed=None)).result == loaded.text


def test_a_missing_file_or_a_folder_says_so(tmp_path):
    with pytest.raises(ValueError, match="cannot read the recording"):
        nbstream.load(tmp_path / "nowhere.json")
    with pytest.raises(ValueError, match="cannot read the recording"):
        nbstream.load(tmp_path)


def test_replay_takes_only_a_recording_or_a_path():
    with pytest.raises(TypeError, match="expected a recording"):
        nbstream.replay(42)  # type: ignore[arg-type]


def test_json_nested_past_the_recursion_limit_is_refused_in_words(tmp_path):
    path = tmp_path / "deep.json"
    depth = 100_000
    path.write_text(
        '{"format": "nbstream.recording/1", "prompt": ' + "[" * depth + "]" * depth + "}"
    )
    with pytest.raises(ValueError, match="nests deeper than Python can read"):
        nbstream.load(path)
    with pytest.raises(ValueError, match="nests deeper than Python can read"):
        nbstream.replay(path, speed=None)


def test_a_file_over_the_limit_says_what_a_lesson_needs(tmp_path, saved, monkeypatch):
    monkeypatch.setattr(recording_checks, "MAX_BYTES", 100)
    path = write(tmp_path, saved)
    with pytest.raises(ValueError, match=r"over the 100-byte limit; .*0\.1 MiB.*shorter run"):
        nbstream.load(path)
    # A lesson's recording is far under the limit: the limit is what a 2 GB Binder can spare.
    assert recording_module.MAX_BYTES <= 16 * 2**20


@pytest.mark.parametrize("speed", [0, -1.0, float("nan"), "fast", True])
def test_one_speed_check_refuses_a_bad_speed_everywhere(tiny, tmp_path, speed):
    model, tokenizer = tiny
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=3)
    run.wait()
    loaded = nbstream.load(run.save(tmp_path / "run.json"))
    message = "speed must be a number > 0, or None for instant"
    with pytest.raises(ValueError, match=message):
        ReplayBackend(loaded, speed=speed)
    with pytest.raises(ValueError, match=message):
        ReplayJob(loaded, speed=speed)
    with pytest.raises(ValueError, match=message):
        nbstream.replay(loaded, speed=speed)


def test_an_infinite_speed_replays_at_once(tiny, tmp_path):
    model, tokenizer = tiny
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=3)
    text = run.wait()
    loaded = nbstream.load(run.save(tmp_path / "run.json"))
    assert ReplayBackend(loaded, speed=float("inf")).speed is None
    assert ended(nbstream.replay(loaded, speed=float("inf"))).result == text


_PIECE = st.text(alphabet="ab <>/\n", max_size=4)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pieces=st.lists(_PIECE, max_size=12),
    stop=st.one_of(
        st.none(),
        st.lists(st.text(alphabet="ab<>", min_size=1, max_size=3), min_size=1, max_size=2),
    ),
    tags=st.sampled_from([None, ("<a>", "</a>"), ("<", ">")]),
    opened=st.booleans(),
)
def test_the_text_load_checks_is_the_text_a_replay_shows(
    tmp_path_factory, pieces, stop, tags, opened
):
    """load() accepts the text a replay shows, whatever the pieces, stop strings and tags."""
    prompt_text = "Q" + (tags[0] if tags and opened else "")
    document = {
        "format": recording_module.FORMAT, "minor": 1, "nbstream": "test", "prompt": "Q",
        "prompt_text": prompt_text, "thinking_tags": None if tags is None else list(tags),
        "settings": {} if stop is None else {"stop": stop}, "alternatives": 0, "text": "?",
        "tokens": [[None, piece, index] for index, piece in enumerate(pieces)],
        "record": {"status": "complete", "metrics": {"finish_reason": "eos"}, "error": None,
                   "cancel_reason": None, "thinking": None},
    }  # fmt: skip
    folder = tmp_path_factory.mktemp("text")
    # What a replay shows, from the recording in memory (load() is not asked).
    in_memory = recording_module.Recording(
        prompt="Q", prompt_text=prompt_text, thinking_tags=tags, settings=document["settings"],
        alternatives=0, text="?", record=document["record"],
        tokens=tuple(recording_module.RecordedToken(None, p, 0.0, p) for p in pieces),
    )  # fmt: skip
    document["text"] = ended(nbstream.replay(in_memory, speed=None)).partial_text
    loaded = nbstream.load(write(folder, document))
    assert loaded.text == document["text"]
    # Any other text is refused.
    document["text"] = loaded.text + "x"
    with pytest.raises(ValueError, match="not what its tokens replay"):
        nbstream.load(write(folder, document))


def test_token_kinds_are_recorded_and_replayed(tmp_path):
    """A byte token and a special token keep their kinds in the file and in the replay."""
    model, tokenizer = forced_model("你好<|im_start|>")
    run = nbstream.stream(model, tokenizer, "Say hi", max_new_tokens=10, alternatives=3)
    run.wait()
    live = [step.shown() for step in run.trace]
    kinds = [kind for _shown, kind in live]
    assert "bytes" in kinds and "special" in kinds
    path = run.save(tmp_path / "kinds.json")
    rows = json.loads(path.read_text())["kinds"]
    assert [18645, "bytes", "e4 bd"] in rows  # 你's first two bytes
    loaded = nbstream.load(path)
    assert [token.shown() for token in loaded.tokens] == live
    replayed = ended(nbstream.replay(loaded, speed=None))
    assert [step.shown() for step in replayed.trace] == live
    # Saved again from the replay: the same kinds.
    again = nbstream.load(replayed.save(tmp_path / "again.json"))
    assert again.kinds == loaded.kinds


def test_a_file_without_kinds_still_loads_as_text(tmp_path, saved):
    saved.pop("kinds", None)
    saved["minor"] = 0
    loaded = nbstream.load(write(tmp_path, saved))
    assert loaded.kinds == {}
    assert all(token.shown()[1] == "text" for token in loaded.tokens)
