"""A chat's recording: ``ChatWidget.save(path)``, then replay or resume it from ``nbstream.load``.

A replayed chat has no model: each message sent gets its recorded answer at the recorded
pace. A resumed chat has a model and the recorded turns: the model gets the recorded
history. No assertion depends on timing: a Stop uses a recording whose tokens were
recorded a minute apart, and a stopped answer is stopped at a gate on the model.
"""

from __future__ import annotations

import dataclasses
import io
import json
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_followers

import nbstream
from nbstream import recording as recording_module
from nbstream.backends.replay import ReplayBackend
from nbstream.recording import ChatRecording, Recording
from nbstream.terminal import ChatSession
from nbstream.testing import forced_model
from nbstream.widgets.display import REPLAY_NOTE, run_bundle, run_html

# Bounds a wait that must end; never the expected duration of anything.
HANG_S = 60.0
SYSTEM = "Answer briefly."


def wait_status(w: nbstream.ChatWidget, status: str) -> None:
    deadline = time.monotonic() + HANG_S
    while w.status != status:
        assert time.monotonic() < deadline, f"status stayed {w.status!r}"
        time.sleep(0.01)


def stopped_turn(chat: nbstream.ChatWidget, probe: Any, model: Any, text: str) -> None:
    """An answer stopped at its third step, whatever the timing (the model waits at a gate)."""
    gate = probe(model)
    gate.hold()
    run = chat.generate(text, max_new_tokens=200)
    gate.on_call = lambda calls: run.stop("enough") if calls >= 3 else None
    gate.release()
    run.wait_done(HANG_S)
    assert run.status == "cancelled" and run.partial_text
    gate.remove()
    wait_status(chat, "cancelled")


@pytest.fixture
def saved_chat(tiny_line, probe, tmp_path) -> tuple[nbstream.ChatWidget, Path]:
    """Three turns (the second stopped and kept, the third stopped and left out), saved."""
    model, tokenizer = tiny_line
    chat = nbstream.ChatWidget(model, tokenizer, SYSTEM, max_new_tokens=6, alternatives=3)
    chat.generate("Name two colors.").wait(HANG_S)
    stopped_turn(chat, probe, model, "Tell me a long story.")
    chat.keep_partial()
    chat.generate("And two more?").wait(HANG_S)
    stopped_turn(chat, probe, model, "Once more?")
    path = chat.save(tmp_path / "chat.json")
    yield chat, path
    chat.close()
    wait_followers()


def runs_of(chat: nbstream.ChatWidget) -> list[nbstream.Generation]:
    return [chat._conversation.turns[i].run for i in range(len(chat.transcript) // 2)]


# -- save and load ----------------------------------------------------------------------------
def test_save_load_round_trips_every_turn(saved_chat):
    chat, path = saved_chat
    loaded = nbstream.load(path)
    assert isinstance(loaded, ChatRecording)
    assert loaded.system == SYSTEM and loaded.keep_thinking is False
    assert loaded.settings["max_new_tokens"] == 6 and loaded.settings["alternatives"] == 3
    assert loaded.history == chat.history
    answers = chat.transcript[1::2]
    assert [t.user for t in loaded.turns] == [m["content"] for m in chat.transcript[0::2]]
    for turn, answer, run in zip(loaded.turns, answers, runs_of(chat), strict=True):
        assert (turn.answer, turn.status, turn.kept, turn.in_history) == (
            answer["content"], answer["status"], answer["kept"], answer["in_history"],
        )  # fmt: skip
        recorded = turn.recording
        assert isinstance(recorded, Recording)
        assert recorded.prompt == run.prompt and recorded.prompt_text == run.prompt_text
        assert recorded.text == run.partial_text
        assert recorded.token_ids == run.token_ids
        assert "".join(token.piece for token in recorded.tokens) == run.partial_text
        assert recorded.record == json.loads(json.dumps(run.record))
        assert recorded.metrics == run.record["metrics"]
        assert recorded.cancel_reason == run.cancel_reason
        assert recorded.alternatives == 3
        assert [
            (step.id, step.text, step.rank, [alt.id for alt in step.alternatives])
            for step in recorded.trace or []
        ] == [
            (step.id, step.text, step.rank, [alt.id for alt in step.alternatives])
            for step in run.trace
        ]
        times = [token.time_s for token in recorded.tokens]
        assert times == sorted(times)
    assert [t.status for t in loaded.turns] == ["complete", "cancelled", "complete", "cancelled"]
    assert [t.kept for t in loaded.turns] == [False, True, False, False]
    document = json.loads(path.read_text(encoding="utf-8"))
    assert document["format"] == "nbstream.chat/1" and document["minor"] == 1
    assert document["history"] == chat.history


def test_each_prompt_is_stored_once_not_again_in_each_later_turn(saved_chat):
    _chat, path = saved_chat
    text = path.read_text(encoding="utf-8")
    # The first message is in its turn, the history, and the first answer's prompt and
    # prompt text: never again in a later answer's, however many turns follow.
    first = json.dumps("Name two colors.", ensure_ascii=False)[1:-1]
    assert text.count(first) == 4
    document = json.loads(text)
    # The first answer shares the system message; each later one, the prompt text before.
    assert document["prompts"][0] == {"history": 1, "text": None}
    assert all(ref["text"][0] == i for i, ref in enumerate(document["prompts"][1:]))
    for answer in document["messages"][1::2]:
        assert answer["record"]["prompt"][0]["role"] == "user"  # its own message only
    for answer in document["messages"][3::2]:
        assert answer["recording"]["prompt_text"] is None


def as_minor_0(document: dict[str, Any], chat: nbstream.ChatWidget) -> dict[str, Any]:
    """The chat's document as minor 0 wrote it: every prompt whole in its answer."""
    for answer, run in zip(document["messages"][1::2], runs_of(chat), strict=True):
        answer["record"]["prompt"] = run.prompt
        answer["recording"]["prompt_text"] = run.prompt_text
    del document["prompts"]
    return {**document, "minor": 0}


def test_a_file_of_minor_0_still_loads_whole(saved_chat, tmp_path):
    chat, path = saved_chat
    old = as_minor_0(json.loads(path.read_text(encoding="utf-8")), chat)
    older = tmp_path / "minor0.json"
    older.write_text(json.dumps(old), encoding="utf-8")
    assert older.stat().st_size > path.stat().st_size
    for file in (older, path):
        loaded = nbstream.load(file)
        assert isinstance(loaded, ChatRecording) and loaded.history == chat.history
        for turn, run in zip(loaded.turns, runs_of(chat), strict=True):
            assert turn.recording is not None
            assert turn.recording.prompt == turn.recording.record["prompt"] == run.prompt
            assert turn.recording.prompt_text == run.prompt_text


def test_a_chat_replays_each_turn_as_recorded(saved_chat):
    chat, path = saved_chat
    loaded = nbstream.load(path)
    assert isinstance(loaded, ChatRecording)
    replayed = nbstream.ChatWidget(ReplayBackend(loaded, speed=None))
    try:
        assert replayed.transcript == [] and replayed.system == SYSTEM
        assert replayed.can_trace and not replayed.can_explain
        for turn in loaded.turns:
            run = replayed.generate()  # the next recorded message
            run.wait_done(HANG_S)
            assert run.status == turn.status
            assert run.partial_text == turn.answer
            assert run.token_ids == (turn.recording.token_ids if turn.recording else [])
            assert run.record is not None and run.record["replay"]["speed"] is None
        wait_status(replayed, "cancelled")
        assert replayed.transcript == chat.transcript
        assert replayed.history == chat.history
    finally:
        replayed.close()
    wait_followers()


def test_a_replayed_chat_has_no_model_and_says_what_is_recorded(saved_chat):
    _chat, path = saved_chat
    loaded = nbstream.load(path)
    replayed = nbstream.ChatWidget(ReplayBackend(loaded, speed=None))
    try:
        with pytest.raises(ValueError, match=r"the next recorded message is 'Name two colors\.'"):
            replayed.generate("What is your name?")
        assert replayed.transcript == [] and replayed.run is None
        # From the view: the words are the input error; an empty message is the next one.
        replayed._handle_view_message({"type": "send", "text": "Hi"})
        assert "no model to answer 'Hi'" in replayed.input_error
        assert "ChatWidget(model, tokenizer, history=nbstream.load(path))" in replayed.input_error
        replayed._handle_view_message({"type": "send", "text": ""})
        assert replayed.run is not None and replayed.input_error == ""
        replayed.run.wait_done(HANG_S)
        assert replayed.transcript[0]["content"] == "Name two colors."
        for _ in loaded.turns[1:]:
            replayed.generate().wait_done(HANG_S)
        wait_status(replayed, "cancelled")
        with pytest.raises(ValueError, match=r"every recorded turn \(4\) has been replayed"):
            replayed.generate()
        with pytest.raises(RuntimeError, match="its history is the recorded one"):
            replayed.history = []
    finally:
        replayed.close()
    wait_followers()


def spread_out(recording: Recording) -> Recording:
    """The same recording with its tokens a minute apart: a replay is still going after one."""
    slow = tuple(
        dataclasses.replace(token, time_s=60.0 * index)
        for index, token in enumerate(recording.tokens)
    )
    return dataclasses.replace(recording, tokens=slow)


def test_stop_during_a_chat_replay_ends_cancelled_with_partial_text_and_no_result(tmp_path):
    model, tokenizer = forced_model("Blue, red and green.")
    chat = nbstream.ChatWidget(model, tokenizer, max_new_tokens=12)
    chat.generate("Name three colors.").wait(HANG_S)
    loaded = nbstream.load(chat.save(tmp_path / "chat.json"))
    chat.close()
    assert isinstance(loaded, ChatRecording)
    (turn,) = loaded.turns
    assert turn.recording is not None and len(turn.recording.tokens) > 2
    slow = dataclasses.replace(turn, recording=spread_out(turn.recording))
    replayed = nbstream.ChatWidget(dataclasses.replace(loaded, turns=(slow,)))
    try:
        assert "replay" in repr(replayed)
        run = replayed.generate()
        first = next(iter(run))  # recorded at once; the next one a minute later
        assert replayed.stop()
        with pytest.raises(nbstream.GenerationCancelled):
            replayed.wait(HANG_S)
        wait_status(replayed, "cancelled")
        assert run.result is None and replayed.result is None
        assert replayed.partial_text.startswith(first)
        assert len(run.partial_text) < len(turn.answer) and turn.answer.startswith(run.partial_text)
        (answer,) = replayed.transcript[1::2]
        assert answer["status"] == "cancelled" and not answer["in_history"]
        data, _metadata = replayed._repr_mimebundle_()
        assert data["text/plain"].startswith(f"nbstream chat · {REPLAY_NOTE} · cancelled")
    finally:
        replayed.close()
    wait_followers()


# -- resume -----------------------------------------------------------------------------------
def prefill_inputs(model: Any) -> list[list[int]]:
    """The input ids of every prefill the model gets (what it was really asked)."""
    seen: list[list[int]] = []

    def hook(module: Any, args: Any, kwargs: Any) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None and ids.shape[1] > 1:
            seen.append(ids[0].tolist())

    model.register_forward_pre_hook(hook, with_kwargs=True)
    return seen


def test_a_resumed_chat_continues_with_the_recorded_history(saved_chat):
    chat, path = saved_chat
    loaded = nbstream.load(path)
    assert isinstance(loaded, ChatRecording)
    model, tokenizer = forced_model("Purple.")
    asked = prefill_inputs(model)
    resumed = nbstream.ChatWidget(model, tokenizer, history=loaded, max_new_tokens=8)
    try:
        assert resumed.history == loaded.history == chat.history
        assert resumed.system == SYSTEM
        # Every recorded turn shows, the one left out still marked out.
        assert resumed.transcript == chat.transcript
        assert asked == []  # nothing ran on the model to resume
        run = resumed.generate("Name a last one.")
        assert resumed.wait(HANG_S) == "Purple."
        expected = [*chat.history, {"role": "user", "content": "Name a last one."}]
        assert run.prompt == expected
        template = tokenizer.apply_chat_template(
            expected, tokenize=False, add_generation_prompt=True
        )
        assert len(asked) == 1
        assert tokenizer.decode(asked[0]) == template
        # The stopped answer left out of the recording is left out of what the model got.
        left_out = loaded.turns[3]
        assert not left_out.in_history and left_out.user not in template
        kept = loaded.turns[1]
        assert kept.kept and kept.answer in template
        assert "replayed from a recording" in repr(resumed)
        plain = resumed._repr_mimebundle_()[0]["text/plain"]
        assert "Assistant, replayed from a recording (complete · " in plain
        assert plain.endswith("Assistant: Purple.")  # the live answer is not marked
        assert REPLAY_NOTE not in plain.splitlines()[0]
    finally:
        resumed.close()
    wait_followers()


def test_a_resumed_chat_saved_again_keeps_the_recorded_pace(tmp_path):
    model, tokenizer = forced_model("Blue, red and green.")
    chat = nbstream.ChatWidget(model, tokenizer, max_new_tokens=12)
    chat.generate("Name three colors.").wait(HANG_S)
    loaded = nbstream.load(chat.save(tmp_path / "first.json"))
    chat.close()
    assert isinstance(loaded, ChatRecording) and loaded.turns[0].recording is not None
    # A pace no instant replay could show, to tell the recorded times from the replay's.
    slow = spread_out(loaded.turns[0].recording)
    loaded = dataclasses.replace(
        loaded, turns=(dataclasses.replace(loaded.turns[0], recording=slow),)
    )
    resumed = nbstream.ChatWidget(*forced_model("Purple."), history=loaded, max_new_tokens=4)
    try:
        resumed.generate("And one more?").wait(HANG_S)
        again = nbstream.load(resumed.save(tmp_path / "again.json"))
    finally:
        resumed.close()
    assert isinstance(again, ChatRecording) and len(again.turns) == 2
    first = again.turns[0].recording
    assert first is not None
    assert [token.time_s for token in first.tokens] == [token.time_s for token in slow.tokens]
    assert first.metrics == slow.metrics and first.text == slow.text
    wait_followers()


def replayed_flags(chat: nbstream.ChatWidget) -> list[bool]:
    """Each answer's ``replayed`` flag, as the views get it (``_messages``)."""
    return [m["replayed"] for m in chat._messages if m["role"] == "assistant"]


def test_the_page_is_told_which_answers_are_replayed(saved_chat):
    chat, path = saved_chat
    loaded = nbstream.load(path)
    assert isinstance(loaded, ChatRecording)
    assert replayed_flags(chat) == [False] * 4  # the original chat's answers are live
    replayed = nbstream.ChatWidget(ReplayBackend(loaded, speed=None))
    model, tokenizer = forced_model("Purple.")
    resumed = nbstream.ChatWidget(model, tokenizer, history=loaded, max_new_tokens=8)
    try:
        replayed.generate().wait_done(HANG_S)
        wait_status(replayed, "complete")
        assert replayed_flags(replayed) == [True]
        # A resumed chat: its recorded answers are replays, the model's new one is not.
        assert replayed_flags(resumed) == [True] * 4
        resumed.generate("Name a last one.").wait_done(HANG_S)
        wait_status(resumed, "complete")
        assert replayed_flags(resumed) == [True] * 4 + [False]
        assert all("replayed" not in m for m in resumed._messages if m["role"] == "user")
    finally:
        replayed.close()
        resumed.close()
    wait_followers()


def test_history_takes_a_chat_recording_and_refuses_a_path(saved_chat):
    chat, path = saved_chat
    model, tokenizer = forced_model("Ok.")
    w = nbstream.ChatWidget(model, tokenizer)
    try:
        with pytest.raises(TypeError, match=r"history=nbstream.load\(path\)"):
            w.history = str(path)
        w.history = nbstream.load(path)
        assert w.history == chat.history
        assert [m["status"] for m in w.transcript[1::2]] == [
            "complete", "cancelled", "complete", "cancelled",
        ]  # fmt: skip
    finally:
        w.close()
    wait_followers()


# -- hostile and foreign files ----------------------------------------------------------------
@pytest.fixture
def document(saved_chat) -> dict[str, Any]:
    _chat, path = saved_chat
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def write(tmp_path: Path, document: Any) -> Path:
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_a_truncated_chat_is_refused(tmp_path, saved_chat):
    _chat, path = saved_chat
    cut = tmp_path / "cut.json"
    cut.write_text(path.read_text(encoding="utf-8")[:-60], encoding="utf-8")
    with pytest.raises(ValueError, match=r"not complete JSON \(truncated"):
        nbstream.load(cut)


def _answer(d: dict[str, Any], index: int = 1) -> dict[str, Any]:
    answer: dict[str, Any] = d["messages"][index]
    return answer


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (lambda d: d.update(format="nbstream.chat/2"), "reads 'nbstream.chat/1'"),
        (lambda d: d.update(minor=-1), "'minor' must be an int"),
        (lambda d: d.pop("messages"), "'messages' is missing"),
        (lambda d: d.update(system=7), "'system' is a int"),
        (lambda d: d["messages"].pop(), "not user and assistant pairs"),
        (lambda d: d["messages"][0].update(role="assistant"), r"messages\[0\] has role"),
        (lambda d: _answer(d).update(content="Something else"), "not its recording's"),
        (lambda d: _answer(d).update(status="cancelled"), "not its recording's"),
        (lambda d: _answer(d).update(kept=True), "only a stopped or failed answer can be kept"),
        (lambda d: _answer(d).update(kept="yes"), "'kept' is a str"),
        (lambda d: _answer(d)["recording"]["tokens"][0].__setitem__(1, 7), r"tokens\[0\]"),
        (lambda d: _answer(d)["recording"].update(text=None), "'text' is a NoneType"),
        (lambda d: _answer(d)["recording"].update(record={}), "repeats record"),
        (lambda d: _answer(d).update(recording=None, status="cancelled"), "has no recording"),
        (lambda d: _answer(d)["record"].update(status="running"), "not an end state"),
        (lambda d: d.update(keep_thinking="no"), "'keep_thinking' must be true or false"),
        (lambda d: d.update(prompts=[]), "'prompts' must be a list of one entry per turn"),
        (lambda d: d["prompts"].__setitem__(1, "all"), r"prompts\[1\]: expected"),
        (lambda d: d["prompts"][1].update(history=99), r"prompts\[1\]: .*cannot share 99"),
        (lambda d: d["prompts"][1]["text"].__setitem__(0, 1), r"prompts\[1\]: 'text' must be"),
        (lambda d: d["prompts"][1]["text"].__setitem__(1, 10**6), "an earlier turn"),
    ],
)
def test_a_tampered_chat_is_refused_with_what_is_wrong(tmp_path, document, tamper, message):
    tamper(document)
    path = write(tmp_path, document)
    with pytest.raises(ValueError, match=message) as refused:
        nbstream.load(path)
    assert str(refused.value).startswith(f"{path} is not a recording nbstream can load")
    assert str(refused.value).endswith("save the chat again with chat.save(path)")


def test_an_answer_without_its_recording_after_recorded_ones_is_refused(tmp_path, document):
    _answer(document, 5).update(recording=None)  # a complete answer: text alone is allowed
    with pytest.raises(ValueError, match=r"messages\[5\] has no recording, after answers"):
        nbstream.load(write(tmp_path, document))


def test_a_newer_minor_version_warns_naming_what_it_cannot_show(tmp_path, document):
    newer = recording_module.CHAT_MINOR + 1
    document["minor"] = newer
    document["branches"] = []
    with pytest.warns(UserWarning, match=rf"cannot show .*minor {newer}.*: branches"):
        loaded = nbstream.load(write(tmp_path, document))
    assert isinstance(loaded, ChatRecording) and len(loaded.turns) == 4


def test_a_newer_minor_names_the_message_fields_it_adds(tmp_path, document):
    document["minor"] = recording_module.CHAT_MINOR + 1
    _answer(document)["rating"] = 5
    with pytest.warns(UserWarning, match=r"cannot show .*the chat's messages.*: rating"):
        loaded = nbstream.load(write(tmp_path, document))
    assert isinstance(loaded, ChatRecording) and len(loaded.turns) == 4


def test_a_chat_is_not_a_run_recording_and_says_where_it_goes(saved_chat):
    _chat, path = saved_chat
    with pytest.raises(ValueError, match=r"a chat's recording \(4 turns\).*ChatWidget"):
        nbstream.replay(path)
    w = nbstream.StreamWidget(nbstream.load(path))
    try:
        with pytest.raises(ValueError, match=r"replay it with ChatWidget\(recording\)"):
            w.generate("Name two colors.")
        assert w.run is None
    finally:
        w.close()


def test_the_terminal_chat_saves_the_same_document(tmp_path):
    model, tokenizer = forced_model("Green.")
    out = io.StringIO()
    session = ChatSession(model, tokenizer, {"max_new_tokens": 5}, SYSTEM, out=out, err=out)
    session.ask("A color?")
    path = tmp_path / "terminal.json"
    session.save(str(path))
    loaded = nbstream.load(path)
    assert isinstance(loaded, ChatRecording)
    assert loaded.history == session.conversation.history
    (turn,) = loaded.turns
    assert turn.recording is not None and turn.recording.text == "Green."
    replayed = nbstream.ChatWidget(ReplayBackend(loaded, speed=None))
    try:
        assert replayed.generate("A color?").wait(HANG_S) == "Green."
    finally:
        replayed.close()
    wait_followers()


# -- a replay is marked everywhere it shows ---------------------------------------------------
def test_a_replayed_run_is_marked_in_every_view_of_it(tmp_path):
    model, tokenizer = forced_model("Blue.")
    live = nbstream.stream(model, tokenizer, "Name a color.", max_new_tokens=8)
    live.wait()
    run = nbstream.replay(live.save(tmp_path / "blue.json"), speed=None)
    run.wait()
    assert run.is_replay and not live.is_replay
    assert run.record is not None and "replay" in run.record
    assert repr(run).startswith("<Generation replay complete")
    _status, bundle = run_bundle(run)
    assert bundle["text/plain"].startswith(f"nbstream · {REPLAY_NOTE} · complete")
    assert bundle["text/markdown"].startswith(f"**nbstream** · *{REPLAY_NOTE}* · **complete**")
    assert f"nbstream run · {REPLAY_NOTE} · complete" in run_html(run)
    assert run._repr_markdown_().startswith(f"*{REPLAY_NOTE}*")
    # The live run says nothing of a replay.
    assert REPLAY_NOTE not in run_bundle(live)[1]["text/plain"]
    assert REPLAY_NOTE not in run_html(live) and REPLAY_NOTE not in live._repr_markdown_()


def test_the_terminal_marks_a_replayed_answer(tmp_path):
    model, tokenizer = forced_model("Green.")
    out = io.StringIO()
    live = ChatSession(model, tokenizer, {"max_new_tokens": 5}, out=out, err=out)
    live.ask("A color?")
    assert "replay" not in out.getvalue()
    path = tmp_path / "terminal.json"
    live.save(str(path))
    shown = io.StringIO()
    replayed = ReplayBackend(nbstream.load(path), speed=None)
    session = ChatSession(replayed, None, {}, out=shown, err=shown)
    assert session.ask("A color?") == "complete"
    assert "Green." in shown.getvalue()
    assert "[replay of a recorded run, not a live model · complete]" in shown.getvalue()


def test_a_chat_refuses_one_runs_recording_saying_where_it_goes(tmp_path):
    model, tokenizer = forced_model("Blue.")
    run = nbstream.stream(model, tokenizer, "Name a color.", max_new_tokens=4)
    run.wait()
    with pytest.raises(TypeError, match=r"one run's recording .*StreamWidget\(recording\)"):
        nbstream.ChatWidget(nbstream.load(run.save(tmp_path / "run.json")))
