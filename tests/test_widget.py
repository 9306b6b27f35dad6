"""StreamWidget's kernel side without a browser: state, messages, Stop, result semantics.

The widget is driven the way its front end drives it (custom messages), and what it sends
to the views is captured from ``send`` and ``send_state``.
"""

from __future__ import annotations

import itertools
import threading
import time

import pytest
from helpers import Recorder, wait_followers

import nbstream
from nbstream.testing import tiny_model


def wait_status(w, statuses, timeout=60.0):
    deadline = time.monotonic() + timeout
    while w.status not in statuses:
        assert time.monotonic() < deadline, f"status stayed {w.status!r}"
        time.sleep(0.01)


@pytest.fixture
def tiny():
    return tiny_model()


@pytest.fixture
def long_tiny():
    return tiny_model(one_line=True)


def test_starts_idle_with_no_result(tiny):
    w = nbstream.StreamWidget(*tiny)
    assert w.status == "idle"
    assert w.result is None and w.partial_text == "" and w.error is None
    with pytest.raises(RuntimeError, match="generate"):
        w.wait()


def test_complete_run_deltas_rebuild_the_result(long_tiny):
    w = nbstream.StreamWidget(*long_tiny, max_new_tokens=300)
    rec = Recorder(w)
    run = w.generate("Hello there")
    assert w.status in ("queued", "running")
    text = w.wait()
    wait_status(w, {"complete"})
    wait_followers()
    deltas = rec.deltas(w.run_id)
    assert deltas, "no text reached the views"
    offset = 0
    for delta in deltas:
        assert delta["offset"] == offset  # contiguous: no gaps, no repeats
        offset += len(delta["text"])
    assert "".join(d["text"] for d in deltas) == text == w.result == run.result
    assert w.metrics["tokens"] == 300 and w.metrics["finish_reason"] == "length"
    assert w.error_info is None


def test_frames_are_coalesced_to_twenty_per_second(long_tiny):
    w = nbstream.StreamWidget(*long_tiny, max_new_tokens=600)
    rec = Recorder(w)
    w.generate("Hello there")
    w.wait()
    wait_followers()
    times = [t for t, m in rec.messages if m["type"] == "delta"]
    tokens = w.metrics["tokens"]
    assert len(times) < tokens  # never one frame per token
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # The last frame may follow the previous one early (the run ended); the rest are paced.
    assert all(g >= 0.045 for g in gaps[:-1]), min(gaps[:-1])


def test_no_synced_trait_carries_the_text_or_changes_per_frame(long_tiny):
    w = nbstream.StreamWidget(*long_tiny, max_new_tokens=400)
    rec = Recorder(w)
    w.generate("Hello there")
    text = w.wait()
    wait_followers()
    state = w.get_state()
    assert all(text not in str(value) for value in state.values() if isinstance(value, str))
    frames = len(rec.deltas())
    assert frames > 3
    # State updates happen at start and end only, however many frames there were.
    assert len(rec.states) <= 4, rec.states


def test_sync_returns_the_full_text_so_far(long_tiny):
    w = nbstream.StreamWidget(*long_tiny, max_new_tokens=300)
    rec = Recorder(w)
    w._handle_message(w, {"type": "sync", "view": "v1"}, [])
    assert rec.messages[-1][1] == {"type": "reset", "run_id": 0, "view": "v1", "text": ""}
    w.generate("Hello there")
    text = w.wait()
    wait_followers()
    w._handle_message(w, {"type": "sync", "view": "v2"}, [])
    reply = rec.messages[-1][1]
    assert reply["type"] == "reset" and reply["view"] == "v2"
    assert reply["text"] == text and reply["run_id"] == w.run_id


def test_stop_message_cancels_and_keeps_partial_text(long_tiny):
    w = nbstream.StreamWidget(*long_tiny, max_new_tokens=8000)
    rec = Recorder(w)
    run = w.generate("Hello there")
    while not run.partial_text:
        time.sleep(0.01)
    w._handle_message(w, {"type": "stop"}, [])
    with pytest.raises(nbstream.GenerationCancelled):
        w.wait()
    wait_status(w, {"cancelled"})
    wait_followers()
    assert w.result is None
    assert w.partial_text and run.metrics["tokens"] < 8000
    assert "".join(d["text"] for d in rec.deltas()) == w.partial_text
    assert w.metrics["finish_reason"] == "cancelled"


def test_removing_a_pages_last_view_closes_the_widget_and_stops_its_run(long_tiny):
    """A cleared output (the front end says its view was removed from an open notebook)
    closes the widget once that page has no view of it left; its run stops."""
    w = nbstream.StreamWidget(*long_tiny, max_new_tokens=8000)
    for page, view in (("p1", "a"), ("p1", "b"), ("p2", "c")):
        w._handle_message(w, {"type": "sync", "view": view, "page": page}, [])
    run = w.generate("Hello there")
    while not run.partial_text:
        time.sleep(0.01)
    # Strays change nothing: an unknown view, an unknown page, a malformed message.
    for content in (
        {"type": "removed", "view": "zz", "page": "p1"},
        {"type": "removed", "view": "a", "page": "p9"},
        {"type": "removed", "view": ["a"], "page": "p1"},
        {"type": "removed"},
    ):
        w._handle_message(w, content, [])
    w._handle_message(w, {"type": "removed", "view": "a", "page": "p1"}, [])
    assert w.comm is not None and run.status != "cancelled"  # view b still shows it
    w._handle_message(w, {"type": "removed", "view": "b", "page": "p1"}, [])
    # Page p1 has no view left (page p2's view "c" may be a reloaded page's ghost).
    assert run.wait_done(30)
    assert run.status == "cancelled" and run.metrics["tokens"] < 8000
    assert w.comm is None and w.result is None
    assert run.join(30)
    # The closed widget's traits still tell the truth, and the run says why it ended.
    with pytest.raises(nbstream.GenerationCancelled) as info:
        w.wait(30)
    message = "the run was cancelled because the widget was closed (its output was cleared)"
    assert str(info.value) == message
    assert w.status == "cancelled" and w.metrics["finish_reason"] == "cancelled"
    assert w.error_info is None and run.cancel_reason.endswith("(its output was cleared)")


def test_a_stopped_wait_shows_one_line_in_a_notebook(long_tiny, capsys):
    # IPython (a notebook's kernel, the terminal) shows a stopped run as what happened,
    # with no frames of nbstream's own files; the exception and its type are unchanged.
    from IPython.core.interactiveshell import InteractiveShell

    w = nbstream.StreamWidget(*long_tiny, max_new_tokens=8000)
    w.generate("Hello there")
    w.stop("Stop was pressed")
    shell = InteractiveShell.instance(colors="nocolor")
    try:
        shell.user_ns["w"] = w
        capsys.readouterr()
        result = shell.run_cell("w.wait()", store_history=False)
        shown = capsys.readouterr().out
    finally:
        InteractiveShell.clear_instance()
    assert isinstance(result.error_in_exec, nbstream.GenerationCancelled)
    lines = [line for line in shown.splitlines() if line.strip()]
    assert len(lines) == 1, shown
    message = "the run was cancelled because Stop was pressed"
    assert lines[0].endswith(f"GenerationCancelled\x1b[0m: {message}")
    assert "nbstream" not in lines[0].split(":", 1)[0] and ".py" not in shown


def test_printed_metrics_are_short_and_their_values_whole(long_tiny):
    import re

    w = nbstream.StreamWidget(*long_tiny, max_new_tokens=12)
    w.generate("Hello there")
    w.wait()
    printed = repr(w.metrics)
    floats = re.findall(r"\d+\.\d+(?:e-?\d+)?", printed)
    assert floats and all(len(re.sub(r"\D|e.*", "", f).lstrip("0")) <= 4 for f in floats), printed
    assert w.metrics == w.run.metrics  # the values themselves are not rounded
    assert isinstance(w.metrics, dict) and type(dict(w.metrics)) is dict


def test_run_clicks_while_running_start_exactly_one_run(long_tiny):
    w = nbstream.StreamWidget(*long_tiny, max_new_tokens=8000)
    w.prompt = "Hello there"
    for _ in range(10):
        w._handle_message(w, {"type": "run", "prompt": "Hello there"}, [])
    assert w.run_id == 1
    runs = [t for t in threading.enumerate() if t.name.startswith("nbstream-run-")]
    assert len(runs) == 1
    with pytest.raises(RuntimeError, match="in progress"):
        w.generate("another")
    w.stop()
    wait_followers()
    assert w.status == "cancelled"


def test_bad_prompt_from_the_view_is_reported_and_starts_nothing(tiny):
    w = nbstream.StreamWidget(*tiny)
    w._handle_message(w, {"type": "run", "prompt": "   "}, [])
    # The user typed nothing: the page says what to do in the page's words, not the API's.
    assert w.input_error == "Type a prompt first, then Run."
    assert w.status == "idle" and w.run_id == 0
    assert not [t for t in threading.enumerate() if t.name.startswith("nbstream-run-")]
    w._handle_message(w, {"type": "run", "prompt": "Hi"}, [])
    assert w.input_error == ""
    w.wait()


def test_failure_shows_error_and_no_result(tiny):
    model, tokenizer = tiny
    calls = {"n": 0}

    def explode(module, args, output):
        calls["n"] += 1
        if calls["n"] == 5:
            raise RuntimeError("injected fault at step 5")

    handle = model.register_forward_hook(explode)
    try:
        w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=50)
        w.generate("Hello there")
        with pytest.raises(nbstream.GenerationFailed):
            w.wait()
        wait_followers()
    finally:
        handle.remove()
    assert w.status == "failed"
    assert w.result is None
    assert w.error_info == {"type": "RuntimeError", "message": "injected fault at step 5"}
    assert "injected fault at step 5" in w.traceback and "Traceback" in w.traceback
    assert w.metrics["finish_reason"] == "error"


def test_on_complete_only_after_complete_runs(long_tiny):
    w = nbstream.StreamWidget(*long_tiny, max_new_tokens=30)
    seen: list[str] = []
    w.on_complete(seen.append)
    w.on_complete(lambda text: 1 / 0)  # a failing callback changes nothing
    w.generate("Hello")
    text = w.wait()
    wait_followers()
    assert seen == [text] and w.status == "complete"
    w.generate("Hello", max_new_tokens=8000)
    time.sleep(0.2)
    w.stop()
    wait_followers()
    assert seen == [text]


def test_status_is_final_when_wait_returns(long_tiny):
    w = nbstream.StreamWidget(*long_tiny, max_new_tokens=8000)
    run = w.generate("Hello")
    while not run.partial_text:
        time.sleep(0.01)
    w.stop()
    with pytest.raises(nbstream.GenerationCancelled):
        w.wait()
    assert w.status == "cancelled" and w.metrics["finish_reason"] == "cancelled"
    w.generate("Hello", max_new_tokens=5)
    w.wait()
    assert w.status == "complete" and w.metrics["tokens"] == 5


def test_settings_validated_and_overridable(tiny):
    with pytest.raises(TypeError, match="allowed settings"):
        nbstream.StreamWidget(*tiny, max_tokens=5)
    with pytest.raises(ValueError, match="temperature"):
        nbstream.StreamWidget(*tiny, temperature=-1)
    w = nbstream.StreamWidget(*tiny, max_new_tokens=7)
    run = w.generate("Hello")
    w.wait()
    assert run.metrics["tokens"] <= 7
    run = w.generate("Hello", max_new_tokens=3)
    w.wait()
    assert run.metrics["tokens"] <= 3 and run.settings["max_new_tokens"] == 3


def test_close_stops_the_run(long_tiny):
    w = nbstream.StreamWidget(*long_tiny, max_new_tokens=8000)
    run = w.generate("Hello")
    while not run.partial_text:
        time.sleep(0.01)
    w.close()
    assert run.join(10)
    assert run.status == "cancelled"
    wait_followers()
    assert run.cancel_reason == "the widget was closed (close() was called)"
    # The traits follow the run after the comm is gone (they stayed "running" before).
    assert w.status == "cancelled" and w.metrics == run.metrics
    # A run started from code on the closed widget: its end shows too.
    again = w.generate("Hello", max_new_tokens=3)
    assert w.wait(30) == again.result
    assert w.status == "complete" and w.metrics["tokens"] == again.metrics["tokens"]
    wait_followers()


def test_rerunning_a_cell_closes_its_earlier_widget(long_tiny, monkeypatch):
    context = {"value": ("cell-1", "exec-1")}
    monkeypatch.setattr(nbstream.widgets.cells, "cell_context", lambda: context["value"])
    first = nbstream.StreamWidget(*long_tiny, max_new_tokens=8000)
    sibling = nbstream.StreamWidget(*long_tiny)  # same execution: kept
    run = first.generate("Hello")
    context["value"] = ("cell-1", "exec-2")  # the cell runs again
    nbstream.StreamWidget(*long_tiny)
    assert run.join(10) and run.status == "cancelled"
    assert first.comm is None and sibling.comm is None
    assert run.cancel_reason == "the widget was closed (its cell was run again)"
    wait_status(first, {"cancelled"})
    context["value"] = ("cell-2", "exec-3")
    other = nbstream.StreamWidget(*long_tiny)
    assert other.comm is not None
    wait_followers()


def test_widgets_sharing_a_model_queue(long_tiny, probe):
    p = probe(long_tiny[0])
    p.hold()  # a holds the model until released, however fast the machine
    a = nbstream.StreamWidget(*long_tiny, max_new_tokens=200)
    b = nbstream.StreamWidget(*long_tiny, max_new_tokens=200)
    a.generate("Hello")
    b.generate("Hello")
    assert b.status == "queued"
    p.release()
    wait_status(b, {"running", "complete"})
    assert a.status == "complete"  # b started only after a finished
    assert a.wait() == b.wait()
    wait_followers()


# -- display: the widget view plus a static fallback ---------------------------------------------
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def bundle(w):
    data, _metadata = w._repr_mimebundle_()
    return data


def test_display_bundle_keeps_the_view_and_says_idle(tiny):
    w = nbstream.StreamWidget(*tiny)
    data = bundle(w)
    assert data[WIDGET_VIEW]["model_id"] == w.model_id  # live front ends render the widget
    assert data["text/plain"] == "nbstream · idle · no run yet"
    assert "idle" in data["text/markdown"] and "no run yet" in data["text/markdown"]


def test_display_fallback_of_a_complete_run_holds_the_answer(long_tiny):
    # The one-line model never ends on its own: its answer is cut at max_new_tokens, a
    # normal end that the state line says plainly.
    w = nbstream.StreamWidget(*long_tiny, max_new_tokens=20)
    w.generate("Hello")
    text = w.wait()
    assert w.metrics["finish_reason"] == "length"
    data = bundle(w)
    elapsed = f"{w.metrics['elapsed_s']:.1f} s"
    assert data["text/plain"] == (
        f"nbstream · complete · stopped at max_new_tokens · 20 tokens · {elapsed}\n\n{text}"
    )
    assert data["text/markdown"].startswith(
        "**nbstream** · **complete** · *stopped at max_new_tokens* · 20 tokens"
    )
    assert data["text/markdown"].endswith(text)
    assert "partial" not in data["text/plain"]
    wait_followers()


def test_fallbacks_mark_an_answer_cut_at_max_new_tokens_and_only_that():
    from nbstream.widgets.display import (
        chat_fallback_bundle,
        compare_fallback_bundle,
        fallback_bundle,
    )

    ended = {"tokens": 5, "elapsed_s": 1.0, "finish_reason": "eos"}
    cut = {**ended, "finish_reason": "length"}
    assert fallback_bundle("complete", "Hi", ended)["text/plain"] == (
        "nbstream · complete · 5 tokens · 1.0 s\n\nHi"
    )
    assert fallback_bundle("complete", "Hi", cut)["text/plain"] == (
        "nbstream · complete · stopped at max_new_tokens · 5 tokens · 1.0 s\n\nHi"
    )
    # Only a complete run is "cut": a stopped one keeps its own words.
    stopped = fallback_bundle("cancelled", "Hi", {**cut, "finish_reason": "cancelled"})
    assert "max_new_tokens" not in stopped["text/plain"]
    both = compare_fallback_bundle(
        "Q", [("a", "complete", "one", ended, None), ("b", "complete", "two", cut, None)]
    )
    assert "[1] a · complete · 5 tokens" in both["text/plain"]
    assert "[2] b · complete · stopped at max_new_tokens · 5 tokens" in both["text/plain"]
    assert "**2. b** · **complete** · *stopped at max_new_tokens*" in both["text/markdown"]
    user = {"role": "user", "content": "Q", "in_history": True}
    answer = {"role": "assistant", "content": "A", "status": "complete", "kept": False}
    chat = chat_fallback_bundle(
        "complete", [user, {**answer, "in_history": True, "finish_reason": "length"}]
    )
    assert chat["text/plain"].startswith("nbstream chat · complete · stopped at max_new_tokens")
    assert "Assistant (complete · stopped at max_new_tokens): A" in chat["text/plain"]
    plain = chat_fallback_bundle("complete", [user, {**answer, "in_history": True}])
    assert "max_new_tokens" not in plain["text/plain"]


def test_display_fallback_marks_a_stopped_answer_partial(long_tiny):
    w = nbstream.StreamWidget(*long_tiny, max_new_tokens=8000)
    run = w.generate("Hello")
    while not run.partial_text:
        time.sleep(0.01)
    w.stop()
    with pytest.raises(nbstream.GenerationCancelled):
        w.wait()
    data = bundle(w)
    head, _, body = data["text/plain"].partition("\n\n")
    assert head.startswith("nbstream · cancelled · partial answer")
    assert body == w.partial_text
    assert "**cancelled** · *partial answer" in data["text/markdown"]
    wait_followers()


def test_display_fallback_of_a_failed_run_names_the_error(tiny):
    model, tokenizer = tiny
    calls = {"n": 0}

    def explode(module, args, output):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("injected fault at step 3")

    handle = model.register_forward_hook(explode)
    try:
        w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=50)
        w.generate("Hello there")
        with pytest.raises(nbstream.GenerationFailed):
            w.wait()
    finally:
        handle.remove()
    plain = bundle(w)["text/plain"]
    assert plain.startswith("nbstream · failed (RuntimeError: injected fault at step 3)")
    assert "partial answer" in plain
    wait_followers()


def test_displayed_widget_rewrites_its_saved_output_as_runs_start_and_end(long_tiny, monkeypatch):
    import IPython.display

    published: list[tuple[str, str, str]] = []  # (kind, display_id, first line of text/plain)
    views: list[str] = []  # model ids of the live views shown

    def record(kind):
        def publish(data, *, display_id=None, **kwargs):
            if display_id is None:
                views.append(data[WIDGET_VIEW]["model_id"])
                return
            # The saved fallback: hidden in live front ends (empty model id), so rewriting
            # it never makes them re-create the live view.
            assert data[WIDGET_VIEW]["model_id"] == ""
            published.append((kind, display_id, data["text/plain"].splitlines()[0]))

        return publish

    monkeypatch.setattr(nbstream.widgets.display, "in_kernel", lambda: True)
    monkeypatch.setattr(IPython.display, "display", record("display"))
    monkeypatch.setattr(IPython.display, "update_display", record("update"))
    w = nbstream.StreamWidget(*long_tiny, max_new_tokens=10)
    w._ipython_display_()
    w.generate("Hello")
    w.wait()  # returns once the end state is published, saved output included
    w.generate("Hello", max_new_tokens=5)
    w.wait()
    wait_followers()
    kinds = [(kind, first.split(" · ")[1]) for kind, _, first in published]
    # Shown idle; complete at the end of run 1 (once: the view thread's end and wait()'s
    # answer the same request, so the answer is not sent again); the second run first
    # replaces the first run's "complete" (which would otherwise stand for it), then its
    # own end, once likewise.
    assert kinds == [
        ("display", "idle"),
        ("update", "complete"),
        ("update", "running"),
        ("update", "complete"),
    ]
    assert {display_id for _, display_id, _ in published} == {f"nbstream-{w.model_id}"}
    assert views == [w.model_id]  # the live view: shown once, never rewritten
    assert published[-1][2].startswith("nbstream · complete · stopped at max_new_tokens · 5 tokens")


def test_a_run_end_answering_another_request_is_sent_again(long_tiny, monkeypatch):
    # A headless runner (nbclient) keeps only what answers the cell it runs: wait() in a
    # later cell than the one the view thread's end answered sends the end once more.
    import IPython.display

    updates: list[str] = []

    def update(data, *, display_id=None, **kwargs):
        updates.append(data["text/plain"].split(" · ")[1])

    parent = {"msg_id": "cell-1"}
    monkeypatch.setattr(nbstream.widgets.display, "in_kernel", lambda: True)
    monkeypatch.setattr(nbstream.widgets.display, "publishing_parent", lambda: parent["msg_id"])
    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: None)
    monkeypatch.setattr(IPython.display, "update_display", update)
    w = nbstream.StreamWidget(*long_tiny, max_new_tokens=10)
    w._ipython_display_()
    w.generate("Hello")
    w.run.wait()
    wait_followers()  # the view thread has sent the end, answering cell-1
    assert updates == ["complete"]
    parent["msg_id"] = "cell-2"
    w.wait()
    assert updates == ["complete", "complete"]
    w.wait()  # the same end, the same request: nothing more
    assert updates == ["complete", "complete"]


def test_the_saved_text_copy_is_marked_only_beside_a_live_view(long_tiny, monkeypatch):
    # Beside its view, the copy's Markdown is one block of class TEXT_COPY, which the views'
    # stylesheet hides wherever a view was drawn; a closed widget's copy, with no view
    # beside it, is never marked.
    import IPython.display

    from nbstream.widgets.display import TEXT_COPY

    shown: list[dict] = []
    monkeypatch.setattr(nbstream.widgets.display, "in_kernel", lambda: True)
    monkeypatch.setattr(IPython.display, "display", lambda data, **k: shown.append(data))
    monkeypatch.setattr(IPython.display, "update_display", lambda data, **k: shown.append(data))
    w = nbstream.StreamWidget(*long_tiny, max_new_tokens=5)
    w._ipython_display_()
    w.generate("Hello")
    text = w.wait()
    view, *copies = shown
    assert view[WIDGET_VIEW]["model_id"] == w.model_id and view["text/plain"] == ""
    for copy in copies:
        markdown = copy["text/markdown"]
        assert markdown.startswith(f'<div class="{TEXT_COPY}">\n\n**nbstream**')
        assert markdown.endswith("\n\n</div>")
    assert text in copies[-1]["text/markdown"] and text in copies[-1]["text/plain"]
    w.close()
    shown.clear()
    w._ipython_display_()
    (closed,) = shown
    assert WIDGET_VIEW not in closed and TEXT_COPY not in closed["text/markdown"]


def test_a_widget_shown_outside_a_kernel_never_publishes_updates(long_tiny, monkeypatch):
    import IPython.display

    published = []
    monkeypatch.setattr(nbstream.widgets.display, "in_kernel", lambda: False)
    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: published.append(k))
    monkeypatch.setattr(IPython.display, "update_display", lambda *a, **k: published.append(k))
    w = nbstream.StreamWidget(*long_tiny, max_new_tokens=5)
    w._ipython_display_()
    w.generate("Hello")
    w.wait()
    wait_followers()
    # A terminal IPython prints updates when they come: the view thread would print the
    # answer into whatever the user is typing. One display, without a display id.
    assert published == [{"metadata": {}, "raw": True}]


# -- settings traits (the settings panel) and the prompt view --------------------------------


def test_setting_traits_feed_the_next_run_and_calls_override_them(tiny):
    w = nbstream.StreamWidget(*tiny, max_new_tokens=4, stop=["zz"], budget_s=30)
    assert (w.max_new_tokens, w.stop_sequences, w.temperature) == (4, ["zz"], None)
    assert w.settings_defaults["max_new_tokens"] > 0  # the panel's placeholders
    w.max_new_tokens = 3  # as code or the panel sets it
    w.top_k = 5
    run = w.generate("Hello")
    w.wait()
    used = {k: run.settings.get(k) for k in ("max_new_tokens", "top_k", "stop", "budget_s")}
    assert used == {"max_new_tokens": 3, "top_k": 5, "stop": ["zz"], "budget_s": 30.0}
    run = w.generate("Hello", max_new_tokens=2, top_k=None)  # None: no override
    w.wait()
    assert run.settings["max_new_tokens"] == 2 and run.settings["top_k"] == 5
    assert w.max_new_tokens == 3  # a call's settings are for that run only
    w.max_new_tokens = None  # unset: the model's default again
    run = w.generate("Hello")
    w.wait()
    assert run.settings["max_new_tokens"] == w.settings_defaults["max_new_tokens"]


def test_invalid_settings_from_the_page_are_reported_per_field_and_start_nothing(tiny):
    w = nbstream.StreamWidget(*tiny, max_new_tokens=3)
    # What the front end does: a state message, then a Run click.
    w.set_state({"temperature": -1, "top_p": 2, "stop_sequences": ["ok", ""]})
    assert set(w.settings_errors) == {"temperature", "top_p", "stop_sequences"}
    assert w.settings_errors["temperature"].startswith("temperature must be >= 0")
    assert "top_p must be in (0, 1]" in w.settings_errors["top_p"]
    assert "stop[1] is empty" in w.settings_errors["stop_sequences"]
    w._handle_message(w, {"type": "run", "prompt": "Hello"}, [])
    assert w.run is None and w.status == "idle" and w.run_id == 0
    assert "temperature must be >= 0" in w.input_error
    w.set_state({"temperature": 0.5, "top_p": None, "stop_sequences": None})
    assert w.settings_errors == {}
    w._handle_message(w, {"type": "run", "prompt": "Hello"}, [])
    assert w.run is not None and w.input_error == ""
    w.wait()
    assert w.run.settings["temperature"] == 0.5


def test_invalid_settings_from_python_get_the_same_message_and_start_nothing(tiny):
    w = nbstream.StreamWidget(*tiny, max_new_tokens=3)
    w.top_k = 2.5
    w.do_sample = "yes"
    assert w.settings_errors == {
        "top_k": "top_k must be an int, got 2.5",
        "do_sample": "do_sample must be True or False, got 'yes'",
    }
    with pytest.raises(ValueError, match="top_k must be an int"):
        w.generate("Hello")
    assert w.run is None and w.run_id == 0
    w.do_sample = None
    run = w.generate("Hello", top_k=4)  # the call overrides the bad one: it starts
    w.wait()
    assert run.settings["top_k"] == 4
    with pytest.raises(ValueError, match="top_k"):
        w.generate("Hello")
    w.top_k = 0
    assert w.settings_errors == {}


def test_prompt_traits_hold_the_templated_prompt_of_the_run(tiny):
    w = nbstream.StreamWidget(*tiny, max_new_tokens=2)
    assert w.prompt_text is None and w.prompt_tokens is None
    run = w.generate("Hello <b>there</b>")
    w.wait()
    assert w.prompt_text == run.prompt_text and w.prompt_tokens == run.prompt_tokens
    assert "<|im_start|>user\nHello <b>there</b><|im_end|>" in w.prompt_text
    assert w.prompt_tokens > 5


def test_bad_input_from_code_points_at_the_callers_line(tiny):
    """``w.generate("")`` raises with the one line that says what to do straight after the
    caller's own frame, not under a stack of nbstream's frames."""
    import traceback

    w = nbstream.StreamWidget(*tiny)
    calls = (
        lambda: w.generate(""),
        lambda: nbstream.stream(*tiny, ""),
        lambda: nbstream.stream(*tiny, "Hi", temperature=-1),
    )
    for call in calls:
        with pytest.raises(ValueError, match=r"prompt is empty|temperature must be") as caught:
            call()
        frames = traceback.extract_tb(caught.value.__traceback__)
        inside = [f for f in frames if "/nbstream/" in f.filename.replace("\\", "/")]
        assert len(inside) == 1, [f"{f.filename}:{f.name}" for f in frames]
    assert w.status == "idle" and w.run is None


def test_a_model_name_is_loaded_and_a_missing_one_says_where_it_looked(tmp_path, monkeypatch):
    from nbstream.models import ModelNotFoundError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelNotFoundError) as caught:
        nbstream.StreamWidget("no-such-owner/no-such-model")
    message = str(caught.value)
    assert "'no-such-owner/no-such-model'" in message and "local Hugging Face cache" in message
    assert "HF_HUB_OFFLINE=1" in message and "\n" not in message
    # One line, not transformers' page-long hub traceback as its chained cause.
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert isinstance(caught.value.original, OSError)
    with pytest.raises(ModelNotFoundError, match=r"no model folder at .*missing-folder"):
        nbstream.StreamWidget("./missing-folder")
    with pytest.raises(TypeError, match="load it first with"):
        nbstream.stream("no-such-owner/no-such-model", None, "Hi")
    with pytest.raises(TypeError, match="a tokenizer goes with a loaded model"):
        nbstream.StreamWidget("no-such-owner/no-such-model", object())
    with pytest.raises(TypeError, match="given no model"):
        nbstream.StreamWidget(tokenizer=object())
    with pytest.raises(ValueError, match=r"is a URL: a model on a server is nbstream.Endpoint"):
        nbstream.StreamWidget("http://127.0.0.1:8000/v1")


def test_a_widget_given_a_folder_loads_the_model_in_it(tiny, tmp_path):
    model, tokenizer = tiny
    model.save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    w = nbstream.StreamWidget(str(tmp_path / "tiny"), max_new_tokens=3)
    run = w.generate("Hi")
    assert w.wait() == run.result and w.status == "complete"


# -- which subshell handles a page's messages (nbstream/widgets/route.py) --------------------------
def _ipykernel_comm(**kwargs):
    """A comm of ipykernel 7's kind that publishes nowhere, as if from a cell (no subshell)."""
    from ipykernel.comm.comm import BaseComm

    class Quiet(BaseComm):
        def publish_msg(self, *args, **kwargs):
            self._reply_subshell_id = None  # what a publication under a cell's parent leaves

    return Quiet(**{"target_name": "nbstream-test", "primary": True, **kwargs})


def test_a_page_message_is_handled_on_the_subshell_it_was_sent_on():
    from nbstream.widgets.route import answer_on_sending_subshell

    comm = _ipykernel_comm()
    comm.send({"from": "a cell"})
    # ipykernel on its own hands the page's Stop to the main shell, behind the busy cell.
    assert comm._reply_subshell_for({"method": "custom"}, "page-subshell") is None
    assert answer_on_sending_subshell(comm) is True
    comm.send({"from": "a cell"})
    assert comm._reply_subshell_for({"method": "custom"}, "page-subshell") == "page-subshell"
    assert comm._reply_subshell_for({"method": "custom"}, None) is None  # no subshells


def test_routing_is_left_alone_where_ipykernel_has_no_per_comm_routing(caplog):
    from nbstream.widgets.route import answer_on_sending_subshell

    class OtherComm:
        pass

    comm = OtherComm()
    with caplog.at_level("DEBUG", logger="nbstream.widgets.route"):
        assert answer_on_sending_subshell(comm) is False
    assert not hasattr(comm, "_reply_subshell_for")
    assert "no per-comm routing" in caplog.text


@pytest.mark.parametrize("make", ["StreamWidget", "ChatWidget"])
def test_a_widget_routes_its_page_messages_to_the_subshell_they_came_on(tiny, make, monkeypatch):
    """A widget driven by a cell (which publishes with no subshell) still has the page's
    Stop handled on the page's subshell, not behind that cell."""
    import comm

    monkeypatch.setattr(comm, "create_comm", _ipykernel_comm)
    w = getattr(nbstream, make)(*tiny)
    try:
        w.max_new_tokens = 3  # a publication from this thread, under no subshell
        assert w.comm._reply_subshell_for({"method": "custom"}, "page-subshell") == (
            "page-subshell"
        )
    finally:
        w.close()


# -- a run shown as a cell's value (nbstream/widgets/display.py) -----------------------------------
def test_a_run_shown_on_its_own_is_followed_to_its_end_live_and_in_its_saved_fallback(
    tiny, monkeypatch
):
    import ipywidgets

    from nbstream.widgets import display as _display

    shown, rewritten, views = [], [], []

    class HTML(ipywidgets.HTML):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            views.append(self)

    monkeypatch.setattr(ipywidgets, "HTML", HTML)
    monkeypatch.setattr(_display, "show_with_fallback", lambda d, _m, i: shown.append((d, i)))
    monkeypatch.setattr(_display, "republish", lambda d, i: rewritten.append((d, i)) or True)
    run = nbstream.stream(*tiny, "Hello", max_new_tokens=5)
    _display.show_run(run)
    text = run.wait()
    for thread in threading.enumerate():
        if thread.name == _display.RUN_VIEW_THREAD:
            thread.join(10)  # it ends with the run: nothing of it outlives what it shows
    assert not [t for t in threading.enumerate() if t.name == _display.RUN_VIEW_THREAD]
    ((first, display_id),), ((last, rewritten_id),), (view,) = shown, rewritten, views
    assert rewritten_id == display_id
    assert first[_display.WIDGET_VIEW]["model_id"] == view.model_id
    assert last["text/plain"].startswith("nbstream · complete") and text in last["text/plain"]
    assert 'data-status="complete"' in view.value and "running" not in view.value


def test_a_running_runs_view_shows_the_end_of_a_long_answer_escaped():
    from nbstream.widgets import display as _display

    class Run:
        status, metrics = "running", {"tokens": 9000, "elapsed_s": 2.0}
        partial_text = "<b>" + "x" * 5000 + "</b>"
        is_replay = False

    shown = _display.run_html(Run())
    assert "&lt;/b&gt;" in shown and "</b>" not in shown  # the model's text is never markup
    assert shown.count("x") <= _display.LIVE_TAIL and "running · 9000 tokens · 2.0 s" in shown
