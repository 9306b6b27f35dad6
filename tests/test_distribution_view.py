"""The sampling panel's kernel side (nbstream/widgets/sampling.py): the ``distribution`` request a
view sends when a token's panel opens or a slider moves, and the reply to that view.

The numbers are checked on the default model (a short greedy run); the tiny model where
they do not matter.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import nbstream
from nbstream.distribution import STAGES

PROMPT = "Name a color."


class Page:
    """Stands in for the page: sends view messages the way the comm does, and collects the
    custom messages the widget sends."""

    def __init__(self, widget: Any) -> None:
        self.widget = widget
        self.sent: list[dict[str, Any]] = []
        self.arrived = threading.Condition()
        original = widget._send_msg

        def capture(content: dict[str, Any]) -> None:
            with self.arrived:
                self.sent.append(content)
                self.arrived.notify_all()
            original(content)

        widget._send_msg = capture

    def ask(self, **fields: Any) -> None:
        content = {"type": "distribution", "view": "v1", **fields}
        self.widget._handle_message(self.widget, content, [])

    def replies(self, view: str = "v1") -> list[dict[str, Any]]:
        with self.arrived:
            return [m for m in self.sent if m.get("type") == "distribution" and m["view"] == view]

    def reply(self, request: int, timeout: float = 120) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self.arrived:
            while True:
                found = [m for m in self.replies() if m["request"] == request]
                if found:
                    return found[0]
                left = deadline - time.monotonic()
                assert left > 0, f"no reply to request {request}: {self.sent[-3:]}"
                self.arrived.wait(left)


@pytest.fixture(scope="module")
def answered(real_model):
    """A StreamWidget with a short greedy answer on the default model."""
    w = nbstream.StreamWidget(*real_model, max_new_tokens=12, temperature=0)
    w.generate(PROMPT)
    w.wait(120)
    assert w.status == "complete" and len(w.run.token_ids) > 5
    yield w
    w.close()


def test_the_reply_holds_run_distribution_numbers(answered, real_model):
    w, run = answered, answered.run
    page = Page(w)
    step = 2
    page.ask(request=1, run_id=w.run_id, step=step, temperature=0.8, top_k=20, top_p=0.9)
    reply = page.reply(1)
    assert reply["error"] is None
    assert (reply["run_id"], reply["step"]) == (w.run_id, step)
    d = run.distribution(step, temperature=0.8, top_k=20, top_p=0.9)
    assert reply["stages"] == list(STAGES)
    assert reply["settings"] == {"temperature": 0.8, "top_k": 20, "top_p": 0.9}
    # The run was greedy: the sliders start at temperature 0, the filters off.
    assert reply["run_settings"] == {"temperature": 0.0, "top_k": 0, "top_p": 1.0}
    assert reply["chosen"][0] == run.token_ids[step]
    tops = d.top(10)
    assert [entry[0] for entry in reply["top"][:10]] == [c.id for c in tops]
    for entry, candidate in zip(reply["top"], tops, strict=False):
        assert entry[1] == candidate.text or entry[2] != "text"
        assert entry[3] == pytest.approx([candidate.probs[s] for s in STAGES], abs=1e-6)
        assert entry[4] == candidate.removed_by
    assert reply["kept"] == [d.kept(s) for s in STAGES]
    assert reply["rest"][0] == pytest.approx(d.rest(10), abs=1e-5)
    assert reply["size"] == d.size
    assert reply["words"] == d.describe()
    assert reply["phrases"]["top_p"] == f"top-p 0.9 keeps {d.kept('top_p'):,} of {d.size:,} tokens"
    # Something is cut at these settings, and the bars say by which filter.
    removed = {entry[4] for entry in reply["top"]}
    assert removed & {"top_k", "top_p"}


def test_a_slider_move_reuses_the_steps_logits(answered, real_model, probe):
    w = answered
    page = Page(w)
    calls = probe(real_model[0])
    page.ask(request=10, run_id=w.run_id, step=4)
    first = page.reply(10)
    assert first["error"] is None and calls.calls == 1  # the forward pass
    page.ask(request=11, run_id=w.run_id, step=4, temperature=1.2, top_p=0.5)
    second = page.reply(11)
    assert second["error"] is None
    assert calls.calls == 1, "the second request of a step ran the model again"
    assert second["settings"]["temperature"] == 1.2
    assert second["top"][0][3][3] > first["top"][0][3][3] - 1  # a real answer, other numbers
    assert second["top"][0][3] != first["top"][0][3]
    # Another step needs its own logits.
    page.ask(request=12, run_id=w.run_id, step=5)
    assert page.reply(12)["error"] is None and calls.calls == 2


def test_the_forward_pass_is_off_the_comm_handler_thread(answered, real_model, probe):
    w = answered
    page = Page(w)
    calls = probe(real_model[0])
    calls.hold()
    page.ask(request=20, run_id=w.run_id, step=1)  # returns while the model is held
    assert calls.held.wait(60), "the request never reached the model"
    assert threading.get_ident() not in calls.threads
    assert page.replies() == []
    calls.release()
    assert page.reply(20)["error"] is None


def test_bad_and_stale_requests_get_an_error_reply_or_nothing(answered):
    w = answered
    page = Page(w)
    # Each bad request is answered with words the panel shows; nothing raises.
    page.ask(request=30, run_id=w.run_id, step=999)
    assert "not a step of this run" in page.reply(30)["error"]
    page.ask(request=31, run_id=w.run_id + 5, step=0)
    assert "no longer shown" in page.reply(31)["error"]
    page.ask(request=32, run_id=w.run_id, step=0, temperature=-1)
    assert "temperature" in page.reply(32)["error"]
    page.ask(request=33, run_id=w.run_id, step="two")
    assert "step must be" in page.reply(33)["error"]
    # Without a view or a request id there is nobody to answer: ignored.
    w._handle_message(w, {"type": "distribution", "run_id": w.run_id, "step": 0}, [])
    # A request older than one already answered is dropped (the page would drop its reply).
    page.ask(request=29, run_id=w.run_id, step=0)
    page.ask(request=34, run_id=w.run_id, step=0)
    assert page.reply(34)["error"] is None
    assert [m["request"] for m in page.replies()] == [30, 31, 32, 33, 34]
    # Replies name their view: another view's request is not this one's.
    page.ask(request=1, run_id=w.run_id, step=0, view="other")
    assert page.reply(34)["view"] == "v1"


def test_a_run_that_sampled_starts_the_sliders_at_its_settings(tiny):
    w = nbstream.StreamWidget(*tiny, max_new_tokens=4, temperature=0.7, top_k=5, top_p=0.8)
    try:
        w.generate("Hi")
        w.wait(60)
        page = Page(w)
        page.ask(request=1, run_id=w.run_id, step=0)
        reply = page.reply(1)
        assert reply["error"] is None
        assert reply["run_settings"] == {"temperature": 0.7, "top_k": 5, "top_p": 0.8}
        assert reply["settings"] == reply["run_settings"]
        # The token the run took is always among the bars, with the filters it passed.
        chosen = [entry for entry in reply["top"] if entry[0] == reply["chosen"][0]]
        assert chosen and chosen[0][4] is None
    finally:
        w.close()


def test_a_chat_answer_is_explained_by_its_turns_run_id(tiny):
    chat = nbstream.ChatWidget(*tiny, max_new_tokens=4)
    try:
        chat.generate("Hi")
        chat.wait(60)
        first = chat.run_id
        chat.generate("Again")
        chat.wait(60)
        page = Page(chat)
        page.ask(request=1, run_id=first, step=1)  # the earlier answer, still shown
        reply = page.reply(1)
        assert reply["error"] is None
        assert reply["chosen"][0] == chat._conversation.turns[1].run.token_ids[1]
    finally:
        chat.close()


# -- compare: where the columns part --------------------------------------------------------------
def _wait_for(condition: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_compare_columns_mark_where_they_part_with_the_models_odds(real_model):
    cw = nbstream.CompareWidget(
        *real_model,
        "Name a color.",
        settings=[{"temperature": 0}, {"temperature": 1.6, "seed": 3}],
        max_new_tokens=16,
    )
    try:
        assert [c.compare_mark for c in cw.columns] == [None, None]  # nothing to mark yet
        cw.generate()
        cw.wait(120)
        assert cw.divergence is not None, "the columns were expected to part"
        step, tokens = cw.divergence
        _wait_for(lambda: all(c.compare_mark is not None for c in cw.columns))
        d = cw.columns[0].run.distribution(step, temperature=1.0, top_k=0, top_p=1.0)
        _, tokenizer = real_model
        for i, column in enumerate(cw.columns):
            mark = column.compare_mark
            assert mark["step"] == step
            mine, other = tokens[i], tokens[1 - i]
            mine_text = tokenizer.decode([mine])
            other_text = tokenizer.decode([other])
            assert mark["words"] == (
                f"Columns part at token {step + 1}: this column took "
                f"{mine_text!r} ({d.prob(mine, 'model'):.0%}); the other took "
                f"{other_text!r} ({d.prob(other, 'model'):.0%})"
            )
        # A new Run all clears the marks; columns that agree get none.
        cw.columns[1].temperature = 0
        cw.columns[1].seed = None
        cw.generate()
        cw.wait(120)
        assert cw.divergence is None
        _wait_for(lambda: all(c.compare_mark is None for c in cw.columns))
    finally:
        cw.close()


# -- the explainer's own bookkeeping ------------------------------------------------------------
def _explain_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("nbstream-explain")}


def test_an_answer_shown_again_reuses_its_steps_logits(tiny_line):
    """show() gives the answer shown again a new run_id; it is still the same run, whose
    step's logits the panel already has."""
    w = nbstream.StreamWidget(*tiny_line, max_new_tokens=6, alternatives=3)
    try:
        w.generate("Hi")
        w.wait(60)
        w.branch(1, w.run.token_ids[1] + 1)
        w.wait(60)
        page = Page(w)
        page.ask(request=1, run_id=w.run_id, step=3)
        first = page.reply(1)
        assert first["error"] is None
        w.show(0)
        w.show(1)
        page.ask(request=2, run_id=w.run_id, step=3)
        again = page.reply(2)
        assert again["error"] is None and again["top"] == first["top"]
        assert w._explainer.forward_passes == 1, "the same run's step ran the model again"
    finally:
        w.close()


def test_a_request_after_close_starts_no_thread(tiny):
    w = nbstream.StreamWidget(*tiny, max_new_tokens=3)
    w.generate("Hi")
    w.wait(60)
    run_id = w.run_id
    w.close()
    before = _explain_threads()
    Page(w).ask(request=1, run_id=run_id, step=0)
    assert _explain_threads() - before == set(), "a closed widget started a worker thread"


def test_the_newest_request_of_each_view_is_kept_for_a_bounded_number_of_views(tiny):
    """A view id per panel ever opened (page reloads make new ones): the table of their
    newest requests must not grow without end; the newest views' are kept."""
    w = nbstream.StreamWidget(*tiny, max_new_tokens=3)
    try:
        page = Page(w)
        for i in range(500):
            page.ask(request=1, run_id=-1, step=0, view=f"view-{i}")
        assert len(w._explainer._latest) <= 100
        # The newest view still skips a request older than its newest.
        newest = "view-499"
        page.ask(request=5, run_id=-1, step=0, view=newest)
        page.ask(request=4, run_id=-1, step=0, view=newest)
        page.ask(request=6, run_id=-1, step=0, view=newest)
        deadline = time.monotonic() + 60
        while not [m for m in page.replies(newest) if m["request"] == 6]:
            assert time.monotonic() < deadline, "no reply to request 6"
            time.sleep(0.02)
        assert 4 not in [m["request"] for m in page.replies(newest)]
    finally:
        w.close()


def test_two_first_requests_at_once_are_answered_by_one_worker_that_close_ends(tiny):
    """The main shell and a subshell each handle a panel's first request at the same
    moment: both are answered, and close() leaves no worker thread behind."""
    before = _explain_threads()
    w = nbstream.StreamWidget(*tiny, max_new_tokens=3)
    try:
        w.generate("Hi")
        w.wait(60)
        page = Page(w)
        both = threading.Barrier(2)

        def ask(request: int) -> None:
            both.wait(30)
            page.ask(request=request, run_id=w.run_id, step=0, view=f"v{request}")

        askers = [threading.Thread(target=ask, args=(i,)) for i in (1, 2)]
        for t in askers:
            t.start()
        for t in askers:
            t.join(60)
        for request in (1, 2):
            deadline = time.monotonic() + 60
            while not page.replies(f"v{request}"):
                assert time.monotonic() < deadline, f"no reply to view v{request}"
                time.sleep(0.02)
            assert page.replies(f"v{request}")[0]["error"] is None
    finally:
        w.close()
    _wait_for(lambda: _explain_threads() - before == set())


def test_the_panel_shows_the_models_bans_as_a_stage_and_agrees_with_the_trace(
    tiny_line, monkeypatch
):
    import copy

    import torch

    model, tokenizer = tiny_line
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    with torch.no_grad():
        first = model(**tokenizer(text, add_special_tokens=False, return_tensors="pt")).logits
    favourites = first[0, -1].topk(5).indices.tolist()  # the model's top 5 at step 0
    config = copy.deepcopy(model.generation_config)
    config.sequence_bias = [*config.sequence_bias, *([[t], float("-inf")] for t in favourites)]
    monkeypatch.setattr(model, "generation_config", config)
    w = nbstream.StreamWidget(
        model,
        tokenizer,
        max_new_tokens=3,
        temperature=1.0,
        top_k=0,
        top_p=0.9,
        seed=3,
        alternatives=20,
    )
    try:
        w.generate("Hi")
        w.wait(60)
        trace = w.run.trace[0]
        page = Page(w)
        page.ask(request=1, run_id=w.run_id, step=0)
        reply = page.reply(1)
        assert reply["error"] is None
        assert reply["stages"] == ["model", "sequence_bias", "temperature", "top_k", "top_p"]
        assert "sequence_bias" in reply["phrases"] and reply["words"].startswith("sequence_bias")
        bars = {entry[0]: entry for entry in reply["top"]}
        assert set(favourites) <= set(bars)
        for token in favourites:
            assert bars[token][4] == "sequence_bias" and bars[token][3][-1] == 0.0
        # The bars and the trace agree on every token both show.
        for alt, cut in zip(trace.alternative_ids, trace.cut, strict=True):
            if alt in bars:
                assert cut == (bars[alt][3][-1] == 0.0)
    finally:
        w.close()
