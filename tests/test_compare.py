"""CompareWidget's kernel side without a browser: checks before anything exists, columns
that run in order on a shared model, Stop per column and Stop all, same seed, records,
the saved fallback, and closing.

The header is driven the way its front end drives it (custom messages and synced traits).
"""

from __future__ import annotations

import gc
import itertools
import signal
import sys
import threading
import time

import ipywidgets
import pytest

import nbstream
from nbstream.testing import tiny_model

pytestmark = pytest.mark.usefixtures("no_leftover_runs")

THREE = [{"temperature": 0}, {"temperature": 0.7}, {"temperature": 1.3, "top_p": 0.9}]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.fixture
def line():
    """The tiny model that streams exactly max_new_tokens tokens on one line."""
    return tiny_model(one_line=True)


def widget_count() -> int:
    return len(ipywidgets.widgets.widget._instances)


def thread_names() -> set[str]:
    return {t.name for t in threading.enumerate()}


def wait_until(predicate, timeout: float = 60.0, what: str = ""):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"not within {timeout} s: {what or predicate}"
        time.sleep(0.01)
    return value


def wait_followers(timeout: float = 30.0) -> None:
    prefixes = ("nbstream-view-", "nbstream-run-")
    wait_until(
        lambda: not any(t.name.startswith(prefixes) for t in threading.enumerate()),
        timeout,
        "widget and run threads to end",
    )


def run_steps(p):
    """The threads of probe ``p``'s forward calls made by runs: not the marks' one forward
    pass (the model's odds where the columns part), which comes once they have ended,
    maybe after wait() returned, on a thread that may reuse an ended run thread's id."""
    names: dict[int, str] = {}
    p.on_call = lambda calls: names.__setitem__(calls, threading.current_thread().name)

    def threads() -> list[int]:
        return [
            ident
            for call, ident in enumerate(list(p.threads), 1)
            if names.get(call, "").startswith("nbstream-run")
        ]

    return threads


def send(cw, content) -> None:
    """A custom message from the header's view."""
    cw._header._handle_custom_msg(content, [])


# -- checks before anything is created ----------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"settings": {"temperature": 0}}, TypeError, r"list of 2 to 4 dicts.*got dict"),
        ({"settings": "temperature=0"}, TypeError, r"list of 2 to 4 dicts.*got str"),
        ({"settings": None}, TypeError, r"list of 2 to 4 dicts"),
        ({"settings": [{"temperature": 0}]}, ValueError, r"2 to 4 settings, got 1.*StreamWidget"),
        ({"settings": [{}] * 5}, ValueError, r"got 5; split them"),
        ({"settings": [{}, 0.7]}, TypeError, r"settings\[1\] must be a dict.*got float"),
        (
            {"settings": [{}, {"temperature": -1}]},
            ValueError,
            r"settings\[1\]: temperature must be >= 0",
        ),
        ({"settings": [{}, {}, {"temp": 1}]}, TypeError, r"settings\[2\]: unknown setting 'temp'"),
        (
            {"settings": [{"temperature": 0, "do_sample": True}, {}]},
            ValueError,
            r"settings\[0\]: temperature=0 means greedy",
        ),
        ({"max_new_tokens": 0}, ValueError, r"keyword settings: max_new_tokens must be positive"),
        ({"max_new_tokens": 10, "settings": [{}, {"top_p": 2}]}, ValueError, r"settings\[1\]"),
        ({"prompt": ["Hi"]}, TypeError, r"prompt must be a string"),
        ({"seed": -1, "same_seed": True}, ValueError, r"seed must be >= 0"),
        ({"seed": 3, "same_seed": False}, ValueError, r"pass same_seed=True too"),
        ({"same_seed": "yes"}, TypeError, r"same_seed must be True or False"),
    ],
)
def test_bad_arguments_raise_before_anything_is_created(line, kwargs, error, match):
    widgets, threads = widget_count(), thread_names()
    with pytest.raises(error, match=match):
        nbstream.CompareWidget(*line, **{"prompt": "Hi", **kwargs})
    assert widget_count() == widgets  # no column, header or container was made
    assert thread_names() == threads


def test_a_failed_constructor_leaves_nothing_to_close(line, monkeypatch):
    caught = []
    monkeypatch.setattr(sys, "unraisablehook", caught.append)
    with pytest.raises(ValueError):
        nbstream.CompareWidget(*line, "Hi", settings=[{}])
    gc.collect()  # Widget.__del__ calls close() on the half-made object: nothing to do
    assert caught == []


# -- columns, generate, wait ----------------------------------------------------------------------
def test_columns_are_stream_widgets_with_their_settings_and_labels(line):
    cw = nbstream.CompareWidget(*line, "Hello", settings=THREE, max_new_tokens=12)
    columns = cw.columns
    assert len(columns) == 3
    assert all(isinstance(c, nbstream.StreamWidget) for c in columns)
    assert all("nbstream-column" in c._dom_classes for c in columns)
    assert all(c.show_prompt is False for c in columns)
    assert [c.label for c in columns] == [
        "temperature 0 (greedy)",
        "temperature 0.7",
        "temperature 1.3 · top-p 0.9",
    ]
    assert [c.temperature for c in columns] == [0, 0.7, 1.3]
    assert [c.max_new_tokens for c in columns] == [12, 12, 12]  # keyword settings: every column
    assert [c.prompt for c in columns] == ["Hello"] * 3
    assert cw.settings == THREE
    assert cw.statuses == ["idle"] * 3 and cw.results == [None] * 3
    # The container: header, then the row of columns.
    header, row = cw.children
    assert header is cw._header and list(row.children) == columns
    assert header.summary == "3 columns · not run yet"
    with pytest.raises(RuntimeError, match=r"call generate\(\) first"):
        cw.wait()


def test_a_columns_own_settings_win_over_the_keyword_settings(line):
    cw = nbstream.CompareWidget(
        *line, "Hello", settings=[{"temperature": 0}, {"max_new_tokens": 4}], max_new_tokens=9
    )
    cw.generate()
    cw.wait(60)
    assert [c.metrics["tokens"] for c in cw.columns] == [9, 4]
    assert [c.record["settings"]["max_new_tokens"] for c in cw.columns] == [9, 4]
    assert cw.columns[1].label == "max new tokens 4"


def test_generate_starts_every_column_and_wait_returns_their_results(line, greedy):
    model, tokenizer = line
    cw = nbstream.CompareWidget(model, tokenizer, "Hello there", settings=THREE, max_new_tokens=20)
    runs = cw.generate()
    assert [c.run for c in cw.columns] == runs
    assert cw.statuses[0] in ("running", "complete")
    results = cw.wait(60)
    assert results == cw.results == [run.result for run in runs]
    assert all(isinstance(text, str) and text for text in results)
    assert cw.statuses == ["complete"] * 3
    assert cw._header.statuses == ["complete"] * 3  # published before wait() returns
    assert cw._header.summary.startswith("3 columns · 3 complete")
    # The greedy column is the model's own greedy decode.
    assert results[0] == greedy(model, tokenizer, "Hello there", 20)[1]
    # Each record says what produced its column.
    records = cw.records
    assert [r["settings"]["temperature"] for r in records] == [None, 0.7, 1.3]
    assert [r["settings"]["do_sample"] for r in records] == [False, True, True]
    assert records[2]["settings"]["top_p"] == 0.9
    assert all(r["prompt"] == "Hello there" and r["status"] == "complete" for r in records)
    assert records[0]["seed"] is None  # greedy: no seed
    drawn = [r["seed"] for r in records[1:]]
    assert all(isinstance(s, int) for s in drawn) and drawn[0] != drawn[1]  # each its own
    assert cw.columns[1].label == f"temperature 0.7 · seed {drawn[0]}"
    # A column's record reruns it.
    for column in cw.columns:
        assert nbstream.rerun(column.record, model, tokenizer).wait(60) == column.result


def test_runs_on_a_shared_model_queue_in_order_and_never_interleave(line, probe):
    model, tokenizer = line
    p = probe(model)
    steps = run_steps(p)
    cw = nbstream.CompareWidget(model, tokenizer, "Hello", settings=THREE, max_new_tokens=40)
    runs = cw.generate()
    assert cw.statuses[1:] == ["queued", "queued"]
    assert cw._header.summary.startswith("3 columns · 1 running, 2 queued")
    cw.wait(60)
    # Every forward call of the model, by the thread of the run that made it: all of the
    # first column's, then all of the second's, then the third's.
    owners = {run._thread.ident: i for i, run in enumerate(runs)}
    sequence = [owners[ident] for ident in steps()]
    assert sequence == sorted(sequence), "the columns' decode steps interleaved"
    assert [sequence.count(i) for i in range(3)] == [40, 40, 40]
    # And in time: each run got the model only after the one before it ended.
    for before, after in itertools.pairwise(runs):
        assert after._lifecycle.started >= before._lifecycle.ended
    assert runs[2].metrics["queued_s"] > runs[1].metrics["queued_s"] > 0


def test_one_column_stopped_while_the_others_complete(line):
    # The first two would run long; the third is short.
    settings = [*THREE[:2], {**THREE[2], "max_new_tokens": 30}]
    cw = nbstream.CompareWidget(*line, "Hello", settings=settings, max_new_tokens=3000)
    runs = cw.generate()
    wait_until(lambda: runs[0].partial_text, what="text in the first column")
    assert cw.columns[0].stop() is True
    # The second column gets the model; stop it from its own view (its Stop button).
    wait_until(lambda: runs[1].partial_text, what="text in the second column")
    cw.columns[1]._handle_message(cw.columns[1], {"type": "stop"}, [])
    results = cw.wait(120)
    assert cw.statuses == ["cancelled", "cancelled", "complete"]
    assert results[:2] == [None, None] and results[2] == runs[2].result
    assert runs[0].partial_text and runs[0].metrics["tokens"] < 3000
    assert runs[2].metrics["tokens"] == 30
    assert cw.records[0]["status"] == "cancelled"
    assert cw._header.summary == "3 columns · 1 complete, 2 cancelled"


def test_a_queued_column_stopped_never_runs(line, probe):
    p = probe(line[0])
    p.hold()  # the first column holds the model until released, however fast the machine
    cw = nbstream.CompareWidget(*line, "Hello", settings=THREE, max_new_tokens=200)
    runs = cw.generate()
    assert runs[1].status == "queued"
    assert cw.columns[1].stop() is True
    p.release()
    cw.wait(60)
    assert cw.statuses == ["complete", "cancelled", "complete"]
    assert runs[1].metrics["tokens"] == 0 and runs[1].partial_text == ""


@pytest.mark.parametrize("how", ["method", "button"])
def test_stop_all_withdraws_queued_columns_and_stops_the_running_one(line, probe, how):
    model, tokenizer = line
    p = probe(model)
    steps = run_steps(p)
    cw = nbstream.CompareWidget(model, tokenizer, "Hello", settings=THREE, max_new_tokens=5000)
    runs = cw.generate()
    wait_until(lambda: runs[0].partial_text, what="text in the first column")
    if how == "method":
        assert cw.stop() is True
    else:
        send(cw, {"type": "stop"})
    assert cw.wait(60) == [None, None, None]
    assert cw.statuses == ["cancelled"] * 3
    assert runs[0].metrics["tokens"] < 5000
    # The queued columns never got the model: no decode step on their threads.
    assert {run._thread.ident for run in runs[1:]}.isdisjoint(steps())
    assert [run.metrics["tokens"] for run in runs[1:]] == [0, 0]
    assert cw.stop() is False  # nothing left to stop


def test_wait_timeout_bounds_the_whole_wait_and_the_runs_go_on(line):
    cw = nbstream.CompareWidget(*line, "Hello", settings=THREE, max_new_tokens=5000)
    runs = cw.generate()
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"still running after 0.3 s \(running, queued"):
        cw.wait(0.3)
    assert time.monotonic() - started < 2
    assert runs[0].status != "cancelled"  # a timeout stops nothing
    cw.stop()
    assert cw.wait(30) == [None, None, None]


def test_an_interrupt_during_wait_stops_every_column(line):
    cw = nbstream.CompareWidget(*line, "Hello", settings=THREE, max_new_tokens=5000)
    runs = cw.generate()
    wait_until(lambda: runs[0].partial_text)
    main = threading.main_thread()
    # What the kernel's interrupt button does: SIGINT to the main thread.
    timer = threading.Timer(0.2, signal.pthread_kill, (main.ident, signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        cw.wait(60)
    timer.join()
    assert [run.status for run in runs] == ["cancelled"] * 3


def test_wait_after_one_column_ran_alone(line):
    cw = nbstream.CompareWidget(*line, "Hello", settings=THREE[:2], max_new_tokens=4)
    cw.columns[1].generate()  # its own Run
    assert cw.wait(60) == [None, cw.columns[1].result]
    assert cw.statuses == ["idle", "complete"]


def test_run_all_from_the_header(line):
    cw = nbstream.CompareWidget(*line, settings=THREE[:2], max_new_tokens=5)
    send(cw, {"type": "run", "prompt": "   "})
    # The user typed nothing: the page's words, not the API's.
    assert cw._header.input_error == "Type a prompt first, then Run all."
    assert cw.statuses == ["idle", "idle"]
    send(cw, {"type": "run", "prompt": "Hello"})
    assert cw.prompt == "Hello" and cw._header.input_error == ""
    first = [c.run for c in cw.columns]
    for _ in range(5):  # more clicks while the columns run start nothing
        send(cw, {"type": "run", "prompt": "Hello"})
    cw.wait(60)
    assert [c.run for c in cw.columns] == first and [c.run_id for c in cw.columns] == [1, 1]
    with pytest.raises(ValueError, match="prompt is empty"):
        cw.generate("")


def test_generate_while_a_column_runs_starts_nothing(line):
    cw = nbstream.CompareWidget(*line, "Hello", settings=THREE[:2], max_new_tokens=3000)
    cw.columns[1].generate()  # the second column alone
    with pytest.raises(RuntimeError, match="column 2 still has a run in progress"):
        cw.generate()
    assert cw.columns[0].run is None
    cw.stop()


def test_a_column_with_a_bad_setting_stops_generate_before_anything_starts(line):
    cw = nbstream.CompareWidget(*line, "Hello", settings=THREE[:2], max_new_tokens=5)
    cw.columns[1].temperature = -2  # as from its settings panel
    with pytest.raises(ValueError, match="column 2: fix its settings first: temperature"):
        cw.generate()
    assert [c.run for c in cw.columns] == [None, None]


def test_generate_settings_apply_to_every_column_for_that_run(line):
    cw = nbstream.CompareWidget(*line, "Hello", settings=THREE[:2], max_new_tokens=5)
    with pytest.raises(TypeError, match="the settings given to generate"):
        cw.generate(max_tokens=3)  # checked before anything starts
    assert [c.run for c in cw.columns] == [None, None]
    runs = cw.generate(max_new_tokens=3)
    cw.wait(60)
    assert [run.metrics["tokens"] for run in runs] == [3, 3]
    assert [r["settings"]["temperature"] for r in cw.records] == [None, 0.7]  # theirs kept
    cw.generate()
    cw.wait(60)
    assert [c.metrics["tokens"] for c in cw.columns] == [5, 5]  # for that run only


def test_run_is_a_deprecated_generate(line):
    cw = nbstream.CompareWidget(*line, "Hello", settings=THREE[:2], max_new_tokens=3)
    with pytest.warns(
        DeprecationWarning, match=r"CompareWidget\.run\(\) is now CompareWidget\.generate\(\)"
    ):
        runs = cw.run("Hi", max_new_tokens=2)
    assert [c.run for c in cw.columns] == runs
    cw.wait(60)
    assert cw.prompt == "Hi" and [c.metrics["tokens"] for c in cw.columns] == [2, 2]


def test_the_prompt_is_shared_both_ways(line):
    cw = nbstream.CompareWidget(*line, "Hello", settings=THREE[:2], max_new_tokens=3)
    cw._header.prompt = "typed in the page"  # the front end saves the box
    assert cw.prompt == "typed in the page"
    assert [c.prompt for c in cw.columns] == ["typed in the page"] * 2
    cw.prompt = "from code"
    assert cw._header.prompt == "from code" and cw.columns[0].prompt == "from code"
    cw.generate()
    cw.wait(60)
    assert [r["prompt"] for r in cw.records] == ["from code"] * 2
    with pytest.raises(TypeError):
        cw.prompt = 3


# -- same seed ------------------------------------------------------------------------------------
def test_same_seed_given_makes_sampled_columns_reproducible(line):
    settings = [
        {"temperature": 0},
        {"temperature": 1.0},
        {"temperature": 1.0, "repetition_penalty": 1.0},  # the same sampling, spelled out
    ]
    cw = nbstream.CompareWidget(*line, "Hello", settings=settings, max_new_tokens=30, seed=1234)
    assert cw.same_seed is True and cw._header.same_seed is True  # seed= implies it
    cw.generate()
    first = cw.wait(60)
    cw.generate()
    second = cw.wait(60)
    assert first == second
    # One seed for the sampled columns: the same settings sample the same text.
    assert first[1] == first[2] != first[0]
    assert [r["seed"] for r in cw.records] == [None, 1234, 1234]
    assert [c.label for c in cw.columns][1] == "temperature 1 · seed 1234"
    assert cw.shared_seed == 1234
    assert "same seed 1234" in cw._header.summary


def test_same_seed_drawn_once_per_run_and_recorded(line):
    model, tokenizer = line
    cw = nbstream.CompareWidget(
        model, tokenizer, "Hello", settings=THREE, max_new_tokens=20, same_seed=True
    )
    cw.generate()
    first = cw.wait(60)
    seed = cw.shared_seed
    assert isinstance(seed, int)
    assert [r["seed"] for r in cw.records] == [None, seed, seed]
    cw.generate()
    cw.wait(60)
    assert cw.shared_seed != seed  # a new one each run
    assert [r["seed"] for r in cw.records] == [None, cw.shared_seed, cw.shared_seed]
    # The first run's seed, given, reproduces its sampled columns.
    cw.seed = seed
    cw.generate()
    assert cw.wait(60) == first


def test_same_seed_checkbox_from_the_page(line):
    cw = nbstream.CompareWidget(*line, "Hello", settings=THREE, max_new_tokens=10)
    assert cw.same_seed is False
    cw._header.same_seed = True  # the checkbox ticked
    assert cw.same_seed is True
    cw.generate()
    cw.wait(60)
    seeds = [r["seed"] for r in cw.records]
    assert seeds[0] is None and seeds[1] == seeds[2] == cw.shared_seed
    cw.same_seed = False
    assert cw._header.same_seed is False and cw.shared_seed is None
    assert "same seed" not in cw._header.summary


def test_run_all_carries_the_checkbox_ahead_of_its_state_update(line):
    """Ticked then Run all at once: the click may reach the kernel before the checkbox's
    state update (ipywidgets throttles those, not custom messages)."""
    cw = nbstream.CompareWidget(*line, "Hello", settings=THREE, max_new_tokens=6)
    send(cw, {"type": "run", "prompt": "Hello", "same_seed": True})
    cw.wait(60)
    assert cw.same_seed is True
    seeds = [r["seed"] for r in cw.records]
    assert seeds[1] is not None and seeds[1] == seeds[2] == cw.shared_seed


def test_a_columns_own_run_uses_the_shared_seed_and_its_own_seed_wins(line):
    settings = [{"temperature": 0.9}, {"temperature": 0.9, "seed": 7}]
    cw = nbstream.CompareWidget(*line, "Hello", settings=settings, max_new_tokens=15, seed=99)
    cw.generate()
    texts = cw.wait(60)
    assert [r["seed"] for r in cw.records] == [99, 7]
    column = cw.columns[0]
    column._handle_message(column, {"type": "run", "prompt": "Hello"}, [])  # its own Run
    assert column.wait(60) == texts[0]
    assert column.record["seed"] == 99


# -- teaching views --------------------------------------------------------------------------------
def test_teaching_views_set_on_every_column(line):
    cw = nbstream.CompareWidget(*line, "Hello", settings=THREE, max_new_tokens=5)
    assert cw.show_tokens is False
    cw.show_tokens = True
    assert cw.show_tokens is True and all(c.show_tokens for c in cw.columns)
    cw.columns[0].show_probabilities = True
    assert cw.show_probabilities is False  # not every column
    cw.show_probabilities = True
    cw.show_alternatives = True
    assert all(c.show_probabilities and c.show_alternatives for c in cw.columns)


# -- display: the live view plus a static fallback -------------------------------------------------
def test_fallback_of_a_comparison_that_never_ran(line):
    cw = nbstream.CompareWidget(*line, "Name two colors.", settings=THREE[:2])
    data = cw._repr_mimebundle_()
    assert data[WIDGET_VIEW]["model_id"] == cw.model_id
    assert data["text/plain"] == (
        "nbstream compare · 2 columns · not run yet\nPrompt: Name two colors.\n\n"
        "[1] temperature 0 (greedy) · idle · no run yet\n\n"
        "[2] temperature 0.7 · idle · no run yet"
    )
    assert data["text/markdown"].startswith("**nbstream compare** · 2 columns · not run yet")
    assert "**1. temperature 0 (greedy)** · **idle** · *no run yet*" in data["text/markdown"]


def test_fallback_lists_each_columns_label_state_and_text(line):
    settings = [THREE[0], *({**s, "max_new_tokens": 20} for s in THREE[1:])]
    cw = nbstream.CompareWidget(*line, "Hello", settings=settings, max_new_tokens=3000, seed=5)
    runs = cw.generate()
    wait_until(lambda: runs[0].partial_text)
    cw.columns[0].stop()
    cw.wait(120)
    plain = cw._repr_mimebundle_()["text/plain"]
    blocks = plain.split("\n\n")
    assert blocks[0] == "nbstream compare · 3 columns · 2 complete, 1 cancelled\nPrompt: Hello"
    assert blocks[1].startswith(
        "[1] temperature 0 (greedy) · cancelled · partial answer: the run was stopped · "
    )
    assert blocks[2] == runs[0].partial_text
    assert blocks[3].startswith(
        "[2] temperature 0.7 · max new tokens 20 · seed 5 · complete · stopped at max_new_tokens · "
        "20 tokens · "
    )
    assert "partial" not in blocks[3]
    assert blocks[4] == runs[1].result
    assert blocks[5].startswith(
        "[3] temperature 1.3 · top-p 0.9 · max new tokens 20 · seed 5 · complete"
    )
    markdown = cw._repr_mimebundle_()["text/markdown"]
    assert "**1. temperature 0 (greedy)** · **cancelled** · *partial answer" in markdown
    assert runs[2].result in markdown


def test_displayed_comparison_rewrites_its_saved_output_as_columns_change(line, monkeypatch):
    import IPython.display

    published: list[tuple[str, str]] = []  # (kind, first line of text/plain)
    views: list[str] = []

    def record(kind):
        def publish(data, *, display_id=None, **kwargs):
            if display_id is None:
                views.append(data[WIDGET_VIEW]["model_id"])
                return
            assert data[WIDGET_VIEW]["model_id"] == ""  # hidden in live front ends
            assert display_id == f"nbstream-compare-{cw.model_id}"
            published.append((kind, data["text/plain"].splitlines()[0]))

        return publish

    monkeypatch.setattr(nbstream.widgets.display, "in_kernel", lambda: True)
    monkeypatch.setattr(IPython.display, "display", record("display"))
    monkeypatch.setattr(IPython.display, "update_display", record("update"))
    cw = nbstream.CompareWidget(*line, "Hello", settings=THREE[:2], max_new_tokens=5)
    cw._ipython_display_()
    cw.generate()
    cw.wait(60)
    assert views == [cw.model_id]  # the live view: shown once, never rewritten
    assert published[0] == ("display", "nbstream compare · 2 columns · not run yet")
    assert published[-1] == ("update", "nbstream compare · 2 columns · 2 complete")
    assert all(kind == "update" for kind, _ in published[1:])
    assert any("running" in line for _, line in published)


def test_a_closed_comparison_shows_its_fallback(line, monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda data, **k: shown.append(data))
    cw = nbstream.CompareWidget(*line, "Hello", settings=THREE[:2], max_new_tokens=3)
    cw.generate()
    cw.wait(60)
    cw.close()
    cw._ipython_display_()
    assert shown[0]["text/plain"].startswith("nbstream compare · 2 columns · 2 complete")
    assert WIDGET_VIEW not in shown[0]


# -- closing ---------------------------------------------------------------------------------------
def test_close_stops_and_closes_columns_header_and_container(line):
    cw = nbstream.CompareWidget(*line, "Hello", settings=THREE, max_new_tokens=5000)
    runs = cw.generate()
    wait_until(lambda: runs[0].partial_text)
    cw.close()
    assert all(run.wait_done(30) for run in runs)
    assert [run.status for run in runs] == ["cancelled"] * 3
    assert all(c.comm is None for c in cw.columns)
    assert cw._header.comm is None and cw._row.comm is None and cw.comm is None
    cw.close()  # twice: nothing more
    wait_followers()


def test_rerunning_the_cell_closes_the_earlier_comparison(line, monkeypatch):
    context = {"value": ("cell-1", "exec-1")}
    monkeypatch.setattr(nbstream.widgets.cells, "cell_context", lambda: context["value"])
    first = nbstream.CompareWidget(*line, "Hello", settings=THREE, max_new_tokens=5000)
    runs = first.generate()
    context["value"] = ("cell-1", "exec-2")  # the cell runs again
    second = nbstream.CompareWidget(*line, "Hello", settings=THREE, max_new_tokens=5)
    assert all(run.wait_done(30) for run in runs)
    assert [run.status for run in runs] == ["cancelled"] * 3
    assert first.comm is None and first._header.comm is None and first._row.comm is None
    assert second.comm is not None and all(c.comm is not None for c in second.columns)
    second.close()


def test_cleared_output_closes_the_comparison(line):
    """Each column's view says it was removed (the cell's output cleared): once every
    column has closed, so do the header and the container."""
    cw = nbstream.CompareWidget(*line, "Hello", settings=THREE[:2], max_new_tokens=5000)
    for i, column in enumerate(cw.columns):
        column._handle_message(column, {"type": "sync", "view": f"v{i}", "page": "p"}, [])
    runs = cw.generate()
    wait_until(lambda: runs[0].partial_text)
    first, second = cw.columns
    first._handle_message(first, {"type": "removed", "view": "v0", "page": "p"}, [])
    assert cw.comm is not None  # one column left
    second._handle_message(second, {"type": "removed", "view": "v1", "page": "p"}, [])
    assert cw.comm is None and cw._header.comm is None
    assert all(run.wait_done(30) for run in runs)
    assert [run.status for run in runs] == ["cancelled"] * 2


# -- the embedded default model --------------------------------------------------------------------
@pytest.mark.model
def test_default_model_greedy_column_and_same_seed_columns(real_model, greedy):
    model, tokenizer = real_model
    cw = nbstream.CompareWidget(
        prompt="Name two colors.",
        settings=[
            {"temperature": 0},
            {"temperature": 0.8},
            {"temperature": 0.8, "repetition_penalty": 1.0},
        ],
        max_new_tokens=8,
        seed=11,
    )
    assert cw.columns[0]._model is model  # no model: the embedded one, loaded once
    cw.generate()
    texts = cw.wait(300)
    assert cw.statuses == ["complete"] * 3
    assert texts[0] == greedy(model, tokenizer, "Name two colors.", 8)[1]
    assert texts[1] == texts[2]  # same seed, same sampling: the same text
    assert cw.records[1]["model"]["name"] == cw.records[0]["model"]["name"]
    assert [r["seed"] for r in cw.records] == [None, 11, 11]
    cw.close()


# -- where the columns part: each column's compare_mark -------------------------------------------
PARTING = [{"temperature": 0.7, "seed": 1}, {"temperature": 1.5, "seed": 2}]


def marks_agree(cw) -> bool:
    """Every column's mark says what cw.divergence says: none, or its step."""
    divergence = cw.divergence
    marks = [column.compare_mark for column in cw.columns]
    if divergence is None:
        return all(mark is None for mark in marks)
    return all(mark is not None and mark["step"] == divergence[0] for mark in marks)


def test_the_marks_are_written_when_wait_returns(line):
    """Their forward pass is work on the model: done before wait() returns, so nothing of
    the comparison is still running when the caller goes on (or its process ends)."""
    cw = nbstream.CompareWidget(*line, "Hi", PARTING, max_new_tokens=12)
    cw.generate()
    cw.wait()
    assert "nbstream-compare-mark" not in thread_names()
    assert cw.divergence is not None and marks_agree(cw)
    assert all(c.compare_mark["words"].startswith("Columns part at token") for c in cw.columns)
    cw.close()


def test_a_column_starting_a_run_while_the_marks_are_written_does_not_hang(line, monkeypatch):
    """The marks are written (a thread, once every column has ended) at the moment a
    column starts a run: the column holds its lock while its state changes, and the
    compare's header follows that state. Neither may wait for the other (a deadlock hung
    the kernel: the user's generate() never returned)."""
    from nbstream.widgets import divergence

    words_of = divergence.divergence_words
    go = threading.Event()

    def held(*args):  # the marks' forward pass, held until the column below starts
        assert go.wait(60), "the test never released the marks"
        return words_of(*args)

    monkeypatch.setattr(divergence, "divergence_words", held)
    cw = nbstream.CompareWidget(*line, "Hello", settings=PARTING, max_new_tokens=6)
    first, last = cw.columns
    started = threading.Event()
    failed: list[BaseException] = []

    def rerun_last_column() -> None:
        try:
            # As _launch does: the column's lock held (hold_sync takes it) while its run
            # starts and its status changes.
            with last.hold_sync():
                go.set()  # the marks are written now: the first column's, then this one's
                wait_until(lambda: first.compare_mark is not None, 60, "the first mark")
                last.generate()
            started.set()
        except BaseException as exc:
            failed.append(exc)

    cw.generate()
    # Each column's wait (its end state published, as cw.wait() has it), not cw.wait(): that
    # also waits for the marks, held here on purpose.
    for column in cw.columns:
        column.wait(60)
    assert cw.divergence is not None, "the columns were expected to part"
    rerun = threading.Thread(target=rerun_last_column, daemon=True)
    rerun.start()
    rerun.join(60)
    assert not failed, failed
    assert started.is_set(), "deadlock: the column's generate() did not return in 60 s"
    cw.wait(60)
    wait_until(lambda: marks_agree(cw), 60, "the marks to follow the rerun column")
    cw.close()


def test_run_all_in_a_loop_never_hangs(line):
    """What a notebook does: Run all, wait, again. Each end starts the marks' thread, and
    the next Run all runs into it (it hung within 20 rounds)."""
    cw = nbstream.CompareWidget(*line, "Hello", settings=PARTING, max_new_tokens=3)
    finished = threading.Event()
    failed: list[BaseException] = []

    def loop() -> None:
        try:
            for _ in range(25):
                cw.generate()
                cw.wait(60)
            finished.set()
        except BaseException as exc:
            failed.append(exc)

    runner = threading.Thread(target=loop, daemon=True)
    runner.start()
    runner.join(120)
    assert not failed, failed
    assert finished.is_set(), "Run all hung (25 rounds did not end in 120 s)"
    wait_until(lambda: marks_agree(cw), 60, "the marks of the last round")
    cw.close()


def test_a_column_showing_another_answer_gets_its_mark_again(line):
    """show(i) (a show_branch click) replays an ended answer: the column's status often
    stays "complete", but the marks must follow the answer now shown."""
    cw = nbstream.CompareWidget(*line, "Hello", settings=PARTING, max_new_tokens=6, alternatives=3)
    first = cw.columns[0]
    cw.generate()
    cw.wait(60)
    step, tokens = cw.divergence
    wait_until(lambda: marks_agree(cw), 60, "the marks of Run all")
    # The first column continues from the second's token where they parted: they agree
    # one step longer.
    first.branch(step, tokens[1])
    first.wait(60)
    wait_until(lambda: marks_agree(cw), 60, "the marks after the branch")
    assert cw.divergence[0] > step
    first.show(0)
    assert first.status == "complete"
    assert cw.divergence[0] == step
    wait_until(lambda: marks_agree(cw), 60, "the marks after show(0)")
    first.show(1)
    wait_until(lambda: marks_agree(cw), 60, "the marks after show(1)")
    assert first.compare_mark["step"] > step
    cw.close()


def test_marks_without_the_models_odds_when_they_cannot_be_computed(line, monkeypatch, caplog):
    """The forward pass for the odds fails (out of memory, say): the marks still say where
    the columns part, without odds, and the log says why; never no mark, which would say
    the columns agree."""
    from nbstream.generation import Generation

    def fails(*_args, **_kwargs):
        raise RuntimeError("CUDA out of memory (a test)")

    monkeypatch.setattr(Generation, "distribution", fails)
    cw = nbstream.CompareWidget(*line, "Hello", settings=PARTING, max_new_tokens=6)
    with caplog.at_level("WARNING", logger="nbstream"):
        cw.generate()
        cw.wait(60)
        step, _tokens = cw.divergence
        wait_until(lambda: marks_agree(cw), 60, "the marks, without odds")
    for column in cw.columns:
        assert column.compare_mark["words"].startswith(f"Columns part at token {step + 1}: ")
        assert "%)" not in column.compare_mark["words"]
    assert "CUDA out of memory (a test)" in caplog.text
    cw.close()


# -- which runs a Run all started (in_run_all: what the page announces, announce.js) ---------


def test_in_run_all_says_which_runs_a_run_all_started_before_their_first_state(line):
    """A column's run started by Run all has ``in_run_all`` true already when its status
    changes (the page reads it then: the header announces those runs, the column does not);
    a column's own run (generate, its Run button, a branch) false. The header's list
    follows every column's."""
    cw = nbstream.CompareWidget(*line, "Hello", settings=THREE[:2], max_new_tokens=4)
    seen: list[tuple[int, str, bool]] = []
    for i, column in enumerate(cw.columns):
        column.observe(
            lambda change, i=i: seen.append((i, change["new"], cw.columns[i].in_run_all)),
            names=["status"],
        )
    assert [c.in_run_all for c in cw.columns] == [False, False]
    assert cw._header.in_run_all == [False, False]

    send(cw, {"type": "run", "prompt": "Hello"})  # Run all
    cw.wait(60)
    assert seen and all(flag for _i, _s, flag in seen), seen
    assert {i for i, _s, _f in seen} == {0, 1}
    assert cw._header.in_run_all == [True, True]

    seen.clear()
    cw.columns[1]._on_view_message("run", {})  # the second column's own Run
    cw.columns[1].wait(60)
    assert seen and all(i == 1 and not flag for i, _s, flag in seen), seen
    assert cw._header.in_run_all == [True, False]

    seen.clear()
    first = cw.columns[0]
    step_token = first.run.token_ids[1]
    first.branch(1, (step_token + 1) % 50)  # Continue in its popover
    first.wait(60)
    assert seen and all(i == 0 and not flag for i, _s, flag in seen), seen
    assert cw._header.in_run_all == [False, False]

    seen.clear()
    cw.generate()  # Run all from code
    cw.wait(60)
    assert seen and all(flag for _i, _s, flag in seen), seen
    assert cw._header.in_run_all == [True, True]
    cw.close()


def test_a_busy_column_keeps_in_run_all(line):
    """A refused start (the column runs) changes nothing: the running Run all's column
    stays silent in the page and counted in the header."""
    cw = nbstream.CompareWidget(*line, "Hello", settings=THREE[:2], max_new_tokens=3000)
    cw.generate()
    with pytest.raises(RuntimeError):
        cw.columns[0].generate()
    assert [c.in_run_all for c in cw.columns] == [True, True]
    cw.stop()
    cw.wait(60)
    cw.close()


def test_generate_as_a_cells_value_shows_nothing_that_goes_stale(line, monkeypatch):
    from nbstream.widgets import compare_records
    from nbstream.widgets import display as _display

    model, tokenizer = line
    shown: list[object] = []
    monkeypatch.setattr(_display, "show_with_fallback", lambda d, _m, i: shown.append(d))
    monkeypatch.setattr(_display, "republish", lambda d, i: True)
    monkeypatch.setattr(_display, "in_kernel", lambda: True)
    cw = nbstream.CompareWidget(model, tokenizer, "Hello", settings=THREE, max_new_tokens=5)
    cw._ipython_display_()  # the widget is on the page
    assert len(shown) == 1
    runs = cw.generate()
    # As a cell's last value, each run is displayed as a run (never the list's snapshot of
    # "running" states), and a run its shown CompareWidget follows shows nothing more.
    displayed: list[object] = []
    monkeypatch.setattr(compare_records, "show", displayed.append)
    runs._ipython_display_()
    assert displayed == list(runs) == [c.run for c in cw.columns]
    for run in runs:
        _display.show_run(run)
    assert len(shown) == 1
    cw.wait(60)
    cw.close()
