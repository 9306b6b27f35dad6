"""ChatWidget's kernel side without a browser: the history rules, turns, and what the views get.

The history is checked against what the model really got: each run's ``prompt`` (and its
record's) is the message list the engine rendered through the chat template.
"""

from __future__ import annotations

import threading
import time
import warnings

import ipywidgets
import pytest

import nbstream
from nbstream.backends.local import ContextLengthError


def wait_threads(timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    prefixes = ("nbstream-view-", "nbstream-run-")
    while any(t.name.startswith(prefixes) for t in threading.enumerate()):
        assert time.monotonic() < deadline, "a widget or run thread outlived its run"
        time.sleep(0.01)


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


def stopped_turn(chat: nbstream.ChatWidget, text: str) -> nbstream.Generation:
    """Send ``text`` with a long answer and stop it once some text is out."""
    run = chat.generate(text, max_new_tokens=8000)
    while not run.partial_text:
        time.sleep(0.01)
    chat.stop()
    with pytest.raises(nbstream.GenerationCancelled):
        chat.wait()
    return run


@pytest.fixture
def chat(tiny_line, no_leftover_runs):
    w = nbstream.ChatWidget(*tiny_line, system="Be brief.", max_new_tokens=6)
    yield w
    w.close()
    wait_threads()


# -- the history is what the model gets --------------------------------------------------------
def test_history_is_exactly_what_the_next_generate_gives_the_model(chat):
    assert chat.history == [{"role": "system", "content": "Be brief."}]
    before = chat.history
    first = chat.generate("Hello")
    assert first.prompt == [*before, user("Hello")]
    answer = chat.wait()
    assert chat.result == answer and chat.status == "complete"
    assert chat.history == [*before, user("Hello"), assistant(answer)]

    before = chat.history
    second = chat.generate("And more?")
    second_answer = chat.wait()
    assert second.prompt == [*before, user("And more?")]
    assert second.record["prompt"] == second.prompt  # the record says the same
    assert chat.record == second.record
    assert "Hello" in second.prompt_text and answer in second.prompt_text  # templated
    assert chat.history == [*before, user("And more?"), assistant(second_answer)]
    assert [(m["role"], m.get("status")) for m in chat.transcript] == [
        ("user", None),
        ("assistant", "complete"),
        ("user", None),
        ("assistant", "complete"),
    ]


def test_without_a_system_message_the_history_starts_with_the_user(tiny_line, no_leftover_runs):
    chat = nbstream.ChatWidget(*tiny_line, max_new_tokens=3)
    run = chat.generate("Hi")
    text = chat.wait()
    assert run.prompt == [user("Hi")]
    assert chat.history == [user("Hi"), assistant(text)]
    chat.close()


def test_cancelled_turn_is_shown_but_kept_out_of_the_history(chat):
    chat.generate("Hello")
    answer = chat.wait()
    before = chat.history
    run = stopped_turn(chat, "Tell me a long story")
    wait_threads()
    assert chat.status == "cancelled" and chat.result is None
    assert chat.partial_text == run.partial_text != ""
    assert chat.history == before  # neither the user message nor the partial answer
    last = chat.transcript[-2:]
    assert last == [
        {"role": "user", "content": "Tell me a long story", "in_history": False},
        {
            "role": "assistant",
            "content": run.partial_text,
            "status": "cancelled",
            "kept": False,
            "in_history": False,
        },
    ]
    nxt = chat.generate("Something else")
    chat.wait()
    assert nxt.prompt == [*before, user("Something else")]
    assert "Tell me a long story" not in nxt.prompt_text  # the model never saw that turn
    assert answer in nxt.prompt_text


def test_keep_partial_puts_the_stopped_turn_in_the_history(chat):
    before = chat.history
    run = stopped_turn(chat, "Tell me a long story")
    chat.keep_partial()
    assert chat.history == [*before, user("Tell me a long story"), assistant(run.partial_text)]
    assert chat.transcript[-1]["kept"] and chat.transcript[-1]["in_history"]
    assert chat.transcript[-1]["status"] == "cancelled"  # still marked as what it was
    nxt = chat.generate("Go on")
    chat.wait()
    assert nxt.prompt == [*before, user("Tell me a long story"), assistant(run.partial_text),
                          user("Go on")]  # fmt: skip


def test_keep_partial_refuses_what_is_not_a_partial_answer(chat):
    with pytest.raises(ValueError, match="no turn"):
        chat.keep_partial()
    chat.generate("Hello")
    chat.wait()
    with pytest.raises(ValueError, match="complete; only a cancelled or failed"):
        chat.keep_partial()
    with pytest.raises(TypeError, match="int"):
        chat.keep_partial("0")


def test_failed_turn_is_marked_and_kept_out_unless_kept(tiny, no_leftover_runs, probe):
    model, tokenizer = tiny
    chat = nbstream.ChatWidget(model, tokenizer, max_new_tokens=40)
    p = probe(model)
    p.fail_at, p.error = 4, RuntimeError("injected fault at step 4")
    run = chat.generate("Hello")
    with pytest.raises(nbstream.GenerationFailed):
        chat.wait()
    p.remove()
    wait_threads()
    assert chat.status == "failed" and chat.result is None
    assert chat.error_info == {"type": "RuntimeError", "message": "injected fault at step 4"}
    assert chat.transcript[-1]["status"] == "failed"
    assert chat.history == []
    view_message = chat._messages[-1]
    assert view_message["status"] == "failed" and view_message["error"] == chat.error_info
    if run.partial_text:
        chat.keep_partial(0)
        assert chat.history == [user("Hello"), assistant(run.partial_text)]
    chat.close()


# -- clear, edit, regenerate, seed --------------------------------------------------------------
def test_clear_stops_the_answer_and_empties_the_chat(chat):
    chat.generate("Hello")
    chat.wait()
    run = chat.generate("Tell me a long story", max_new_tokens=8000)
    while not run.partial_text:
        time.sleep(0.01)
    chat.clear()
    assert run.join(10) and run.status == "cancelled"
    assert chat.transcript == [] and chat._messages == []
    assert chat.history == [{"role": "system", "content": "Be brief."}]  # the system stays
    assert chat.status == "idle" and chat.run is None and chat.result is None
    nxt = chat.generate("Fresh start")
    chat.wait()
    assert nxt.prompt == [{"role": "system", "content": "Be brief."}, user("Fresh start")]


def test_edit_last_replaces_the_last_turn(chat):
    chat.generate("Hello")
    first = chat.wait()
    before = chat.history
    stopped_turn(chat, "Tell me a story")
    run = chat.edit_last("Tell me a joke")
    answer = chat.wait()
    assert run.prompt == [*before, user("Tell me a joke")]
    assert chat.history == [*before, user("Tell me a joke"), assistant(answer)]
    assert [m["content"] for m in chat.transcript if m["role"] == "user"] == [
        "Hello",
        "Tell me a joke",
    ]
    assert first in run.prompt_text


def test_regenerate_answers_the_last_message_again(chat):
    chat.generate("Hello")
    chat.wait()
    before = chat.history
    chat.generate("Name a color")
    old = chat.wait()
    run = chat.regenerate(max_new_tokens=4)
    new = chat.wait()
    assert run.prompt == [*before, user("Name a color")]
    assert run.settings["max_new_tokens"] == 4
    assert chat.history == [*before, user("Name a color"), assistant(new)]
    assert len(chat.transcript) == 4
    assert old.startswith(new)  # greedy: the same answer, cut at 4 tokens


def test_edit_and_regenerate_need_a_turn(chat):
    with pytest.raises(ValueError, match="no message to edit"):
        chat.edit_last("Hi")
    with pytest.raises(ValueError, match="no answer to regenerate"):
        chat.regenerate()
    assert chat.run is None


def test_seeded_history_is_what_the_model_gets(chat):
    seed = [
        {"role": "system", "content": "You are a pirate."},
        user("Hi"),
        assistant("Arr, hello!"),
        user("Where is the gold?"),
        assistant(""),  # an empty answer is still an answer
    ]
    chat.history = seed
    assert chat.history == seed and chat.system == "You are a pirate."
    assert [m.get("status") for m in chat.transcript] == [None, "complete", None, "complete"]
    assert chat.status == "idle" and chat.result is None
    run = chat.generate("And the ship?")
    chat.wait()
    assert run.prompt == [*seed, user("And the ship?")]
    assert "Arr, hello!" in run.prompt_text
    chat.history = [user("Only this"), assistant("ok")]  # no system message: none is sent
    assert chat.system is None
    run = chat.generate("Next")
    chat.wait()
    assert run.prompt == [user("Only this"), assistant("ok"), user("Next")]
    chat.history = []
    assert chat.transcript == [] and chat.history == []


@pytest.mark.parametrize(
    ("history", "error", "match"),
    [
        ("hello", TypeError, "list of"),
        ([["user", "hi"]], ValueError, r"history\[0\] must be a dict"),
        ([{"role": "user", "content": "hi", "name": "x"}], ValueError, "exactly the keys"),
        ([{"role": "tool", "content": "hi"}, assistant("x")], ValueError, "role 'tool'"),
        ([user("hi"), {"role": "assistant", "content": 3}], TypeError, r"\['content'\] must be"),
        ([user("hi"), assistant("x"), {"role": "system", "content": "s"}], ValueError, "first"),
        ([user("a"), user("b")], ValueError, "alternate"),
        ([assistant("a")], ValueError, "answers no user message"),
        ([user("a")], ValueError, "ends with a user message"),
        ([user("  "), assistant("a")], ValueError, "empty"),
        ([user("\ud800"), assistant("a")], ValueError, "not valid Unicode"),
    ],
)
def test_bad_history_is_rejected_and_changes_nothing(chat, history, error, match):
    seeded = [user("Hi"), assistant("Hello")]
    chat.history = seeded
    with pytest.raises(error, match=match):
        chat.history = history
    assert chat.history == seeded


def test_history_and_system_cannot_change_while_answering(chat):
    chat.generate("Tell me a long story", max_new_tokens=8000)
    with pytest.raises(RuntimeError, match="answering"):
        chat.history = []
    with pytest.raises(RuntimeError, match="answering"):
        chat.system = "Be long."
    with pytest.raises(RuntimeError, match="in progress"):
        chat.generate("Another")
    chat.stop()


def test_keep_partial_is_refused_while_answering(chat):
    """Keeping an earlier partial answer while the next one is generated would make the
    history claim the answer being generated followed it, which the model never saw."""
    stopped = stopped_turn(chat, "Tell me a long story")
    chat.generate("Something else", max_new_tokens=8000)
    with pytest.raises(RuntimeError, match="answering"):
        chat.keep_partial(0)
    chat.stop()
    with pytest.raises(nbstream.GenerationCancelled):
        chat.wait()
    assert not chat.transcript[1]["kept"]
    assert user("Tell me a long story") not in chat.history
    chat.keep_partial(0)  # once the chat is idle, it is accepted
    assert chat.history[-2:] == [user("Tell me a long story"), assistant(stopped.partial_text)]


def test_bad_messages_start_nothing(chat):
    for bad, error in (("", ValueError), ("   ", ValueError), (3, TypeError)):
        with pytest.raises(error):
            chat.generate(bad)
    with pytest.raises(TypeError, match="allowed settings"):
        chat.generate("Hi", max_tokens=3)
    assert chat.run is None and chat.transcript == []


def test_bad_input_from_code_points_at_the_callers_line(chat):
    """As on StreamWidget: the one line that says what to do comes straight after the
    caller's own frame, not after the chat's and the engine's."""
    import traceback

    chat.generate("Hello")
    chat.wait()
    wait_threads()
    calls = (lambda: chat.generate(""), lambda: chat.edit_last("  "),
             lambda: chat.generate("Hi", max_tokens=3), lambda: chat.keep_partial(0))  # fmt: skip
    for call in calls:
        with pytest.raises((TypeError, ValueError)) as caught:
            call()
        frames = traceback.extract_tb(caught.value.__traceback__)
        inside = [f for f in frames if "/nbstream/" in f.filename.replace("\\", "/")]
        assert len(inside) == 1, [f"{f.filename}:{f.name}" for f in frames]
    assert len(chat.transcript) == 2


def test_a_conversation_over_the_context_is_an_error_before_generation(chat):
    long_turn = [user("word " * 9000), assistant("ok")]  # ~9,000 tokens; the context is 8,192
    chat.history = long_turn
    runs_before = {t for t in threading.enumerate() if t.name.startswith("nbstream-run-")}
    with pytest.raises(ContextLengthError, match="conversation is too long") as info:
        chat.generate("And now?")
    assert isinstance(info.value, ValueError)
    assert "8192" in str(info.value) and "Clear the chat" in str(info.value)
    assert info.value.context == 8192 and info.value.prompt_tokens > 8192
    assert chat.run is None and chat.history == long_turn and len(chat.transcript) == 2
    assert {t for t in threading.enumerate() if t.name.startswith("nbstream-run-")} == runs_before
    # From the view: the same error is shown as an input error, nothing starts.
    chat._handle_message(chat, {"type": "send", "text": "And now?"}, [])
    assert "conversation is too long" in chat.input_error
    assert chat.run is None and chat.run_id == 1  # one bump: the history was set
    # A shorter conversation fits again.
    chat.history = [user("Hi"), assistant("ok")]
    chat.generate("And now?")
    chat.wait()
    assert chat.status == "complete"


# -- the views: messages, deltas, reset --------------------------------------------------------
class Recorder:
    """Captures the custom messages and state updates a chat sends to its views."""

    def __init__(self, w: nbstream.ChatWidget) -> None:
        self.messages: list[dict] = []
        self.states: list[object] = []
        original = w.send_state

        def send(content, buffers=None):
            self.messages.append(content)

        w.send = send

        def send_state(key=None):
            self.states.append(key)
            original(key)

        w.send_state = send_state


def test_the_newest_answer_streams_as_deltas_and_the_transcript_changes_per_turn(
    tiny_line, no_leftover_runs
):
    chat = nbstream.ChatWidget(*tiny_line, max_new_tokens=300)
    rec = Recorder(chat)
    chat.generate("Hello")
    text = chat.wait()
    wait_threads()
    deltas = [m for m in rec.messages if m["type"] == "delta"]
    assert len(deltas) > 3
    offset = 0
    for d in deltas:
        assert d["run_id"] == chat.run_id and d["offset"] == offset
        offset += len(d["text"])
    assert "".join(d["text"] for d in deltas) == text
    # The transcript trait: set when the turn started (answer empty) and when it ended.
    assert len(rec.states) <= 4, rec.states
    assert chat._messages[-1] == {
        "role": "assistant",
        "content": text,
        "turn": 0,
        "in_history": True,
        "status": "complete",
        "run_id": chat.run_id,
        "kept": False,
        "error": None,
        "finish_reason": "length",  # 300 tokens of a model that never ends on its own
        "replayed": False,
    }
    # A view opened now (or reloaded) asks for the text so far: the newest answer's.
    chat._handle_message(chat, {"type": "sync", "view": "v1"}, [])
    assert rec.messages[-1] == {"type": "reset", "run_id": chat.run_id, "view": "v1", "text": text}
    chat.close()


def test_answer_in_progress_is_never_in_the_transcript_trait(tiny_line, no_leftover_runs):
    chat = nbstream.ChatWidget(*tiny_line, max_new_tokens=8000)
    rec = Recorder(chat)
    run = chat.generate("Hello")
    while len(run.partial_text) < 50:
        time.sleep(0.01)
    assert chat._messages[-1]["content"] == "" and chat._messages[-1]["status"] in (
        "queued",
        "running",
    )
    assert chat.transcript[-1]["content"].startswith(run.partial_text[:50])  # Python sees it
    chat._handle_message(chat, {"type": "sync", "view": "v"}, [])
    reset = rec.messages[-1]
    assert reset["type"] == "reset" and run.partial_text.startswith(reset["text"])
    chat._handle_message(chat, {"type": "stop"}, [])
    assert run.join(10) and run.status == "cancelled"
    wait_threads()
    assert chat._messages[-1]["status"] == "cancelled"
    assert chat._messages[-1]["content"] == run.partial_text
    chat.close()


def test_an_answer_being_generated_is_not_marked_out_of_the_conversation(chat):
    """A first message and its answer are in the conversation while it streams: only a turn
    that ended out of it (stopped, failed) is labelled "not in the conversation"."""
    run = chat.generate("Tell me a long story", max_new_tokens=8000)
    while not run.partial_text:
        time.sleep(0.01)
    assert [m["in_history"] for m in chat._messages] == [True, True]  # what the views label
    data, _ = chat._repr_mimebundle_()
    assert "not in the conversation" not in data["text/plain"]  # the saved output agrees
    # Not in the history yet either: the model gets it only if it completes.
    assert chat.history == [{"role": "system", "content": "Be brief."}]
    chat.stop()
    assert run.join(10) and run.status == "cancelled"
    wait_threads()
    assert [m["in_history"] for m in chat._messages] == [False, False]
    data, _ = chat._repr_mimebundle_()
    assert "not in the conversation" in data["text/plain"]


def test_view_requests_drive_the_chat(chat, probe, tiny_line):
    chat._handle_message(chat, {"type": "send", "text": "   "}, [])
    assert "empty" in chat.input_error and chat.run is None
    chat._handle_message(chat, {"type": "send", "text": "Hello"}, [])
    assert chat.input_error == ""
    first = chat.wait()
    wait_threads()
    chat._handle_message(chat, {"type": "regenerate"}, [])
    assert chat.wait() == first and len(chat.transcript) == 2
    wait_threads()
    chat._handle_message(chat, {"type": "edit_last", "text": "Hi again"}, [])
    chat.wait()
    wait_threads()
    assert chat.transcript[0]["content"] == "Hi again"
    # Ten sends while one answer is running start exactly one run: the model waits at its
    # first step until all ten were handled (a 6-token answer could end between two sends).
    gate = probe(tiny_line[0])
    gate.hold()
    for _ in range(10):
        chat._handle_message(chat, {"type": "send", "text": "Long", "x": 1}, [])
    assert chat.run.settings["max_new_tokens"] == 6 and len(chat.transcript) == 4
    gate.remove()
    chat.wait()
    wait_threads()
    run = stopped_turn(chat, "Long one")
    wait_threads()
    chat._handle_message(chat, {"type": "keep", "turn": 2}, [])
    assert chat.input_error == "" and chat.history[-1] == assistant(run.partial_text)
    chat._handle_message(chat, {"type": "keep", "turn": "x"}, [])
    assert "int" in chat.input_error
    chat._handle_message(chat, {"type": "clear"}, [])
    assert chat.transcript == [] and chat.input_error == ""


def test_on_complete_only_after_complete_answers(chat):
    seen: list[str] = []
    chat.on_complete(seen.append)
    chat.generate("Hello")
    text = chat.wait()
    wait_threads()
    stopped_turn(chat, "Long")
    wait_threads()
    assert seen == [text]


def test_saved_output_shows_every_turn_and_marks_partial_answers(chat):
    data, _ = chat._repr_mimebundle_()
    assert data["text/plain"] == "nbstream chat · no messages yet"
    chat.generate("Hello")
    answer = chat.wait()
    run = stopped_turn(chat, "Tell me a story")
    wait_threads()
    data, _ = chat._repr_mimebundle_()
    plain = data["text/plain"]
    assert plain.startswith("nbstream chat · cancelled · 2 turns")
    # The one-line model always runs to max_new_tokens: a complete answer, marked as cut.
    assert f"You: Hello\n\nAssistant (complete · stopped at max_new_tokens): {answer}" in plain
    assert (
        "Assistant (cancelled, partial answer: the run was stopped, not in the conversation): "
        + run.partial_text
    ) in plain
    assert "**You:** Tell me a story" in data["text/markdown"]


def test_rerunning_the_cell_closes_the_old_chat(tiny_line, no_leftover_runs, monkeypatch):

    context = {"value": ("cell-1", "exec-1")}
    monkeypatch.setattr(nbstream.widgets.cells, "cell_context", lambda: context["value"])
    old = nbstream.ChatWidget(*tiny_line, max_new_tokens=8000)
    run = old.generate("Hello")
    context["value"] = ("cell-1", "exec-2")
    new = nbstream.ChatWidget(*tiny_line)
    assert run.join(10) and run.status == "cancelled"
    assert old.comm is None and new.comm is not None
    new.close()


# -- settings traits (the settings panel) and the prompt view --------------------------------


def test_system_and_settings_are_traits_checked_like_the_rest(tiny_line, no_leftover_runs):
    chat = nbstream.ChatWidget(*tiny_line, system="Be brief.", max_new_tokens=3)
    assert chat.system == "Be brief." and chat.max_new_tokens == 3
    chat.set_state({"system": "   ", "seed": -2})  # what the settings panel sends
    assert chat.settings_errors["system"].startswith("the system message is empty")
    assert chat.settings_errors["seed"] == "seed must be >= 0, got -2"
    chat._on_view_message("send", {"type": "send", "text": "Hello"})
    assert chat.run is None and chat.transcript == [] and "system message" in chat.input_error
    with pytest.raises(ValueError, match="seed must be >= 0"):
        chat.generate("Hello", seed=None)
    chat.set_state({"system": "Be kind.", "seed": 7, "temperature": 0.8})
    assert chat.settings_errors == {}
    run = chat.generate("Hello")
    chat.wait()
    assert run.prompt[0] == {"role": "system", "content": "Be kind."}
    assert run.settings["seed"] == 7 and run.settings["temperature"] == 0.8
    # The prompt view: the whole conversation as templated.
    run = chat.generate("And again?", max_new_tokens=2)
    chat.wait()
    assert chat.prompt_text == run.prompt_text and chat.prompt_tokens == run.prompt_tokens
    text = chat.prompt_text
    assert text.count("<|im_start|>user") == 2 and "<|im_start|>system\nBe kind." in text
    chat.clear()
    assert chat.prompt_text is None and chat.prompt_tokens is None


# -- the old name: ChatWidget.send ---------------------------------------------------------------
def test_send_with_text_is_a_deprecated_generate(chat):
    with pytest.warns(
        DeprecationWarning, match=r"ChatWidget\.send\(text\) is now ChatWidget\.generate\(text\)"
    ):
        run = chat.send("Hello", max_new_tokens=3)
    assert chat.run is run
    chat.wait()
    assert run.settings["max_new_tokens"] == 3
    assert chat.history[-2:] == [user("Hello"), assistant(run.result)]


def test_send_with_anything_else_is_ipywidgets_send(chat):
    sent = []
    chat.comm.send = lambda data=None, metadata=None, buffers=None: sent.append((data, buffers))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no DeprecationWarning: this is not the old turn
        assert chat.send({"type": "ping"}) is None
        chat.send({"type": "ping"}, [b"1"])
    ipywidgets.Widget.send(chat, {"type": "ping"})
    ipywidgets.Widget.send(chat, {"type": "ping"}, [b"1"])
    assert sent[0] == ({"method": "custom", "content": {"type": "ping"}}, None)
    assert sent[:2] == sent[2:]  # exactly what ipywidgets' own send does
    assert chat.run is None and chat.transcript == []  # not a turn
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_new_tokens'"):
        chat.send({"type": "ping"}, max_new_tokens=3)
