"""The ``%%nbstream`` / ``%nbstream`` magics and the saved fallback output, in a real kernel.

Each notebook runs once per module in a real IPython kernel through nbclient (the way
``jupyter nbconvert --execute`` runs it); the tests read what each cell showed. ``--model``
points at the tiny random model saved to a folder, so the kernel loads it the way a user's
own checkpoint is loaded, and nothing is downloaded (HF_HUB_OFFLINE is set by conftest and
inherited by the kernel).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient
from nbconvert import HTMLExporter, MarkdownExporter

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The tiny model (ends on its own) and the one-line one (never ends early), saved."""
    from nbstream.testing import tiny_model

    dirs = {}
    for key, one_line in (("tiny", False), ("line", True)):
        folder = tmp_path_factory.mktemp(key)
        model, tokenizer = tiny_model(one_line=one_line)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        dirs[key] = shlex.quote(str(folder))
    return dirs


def execute(cells: dict[str, str], folder: Path) -> tuple[Any, dict[str, Any]]:
    """Run the cells in a fresh kernel (errors kept as outputs); (notebook, cell by key)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells.values()]
    client = NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(folder)}},
    )
    client.execute()
    return nb, dict(zip(cells, nb.cells, strict=True))


def stdout(cell: Any) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stdout")


def stderr(cell: Any) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stderr")


def reported(cell: Any) -> dict[str, Any]:
    """The JSON line a report cell printed."""
    assert not any(o.output_type == "error" for o in cell.outputs), cell.outputs
    return json.loads(stdout(cell).strip().splitlines()[-1])


def error_text(cell: Any) -> str:
    """What the user sees for a failed magic: IPython shows a UsageError on stderr."""
    errors = [f"{o.ename}: {o.evalue}" for o in cell.outputs if o.output_type == "error"]
    return stderr(cell) + "\n".join(errors)


def displays(cell: Any) -> list[Any]:
    return [o for o in cell.outputs if o.output_type in ("display_data", "execute_result")]


def live_view(cell: Any) -> dict[str, Any]:
    """The output a live front end renders as the widget."""
    (output,) = [o for o in displays(cell) if o.data.get(WIDGET_VIEW, {}).get("model_id")]
    return output.data


def widget_output(cell: Any) -> dict[str, Any]:
    """The saved fallback that goes with the widget: hidden in live views, rewritten at the end."""
    (output,) = [o for o in displays(cell) if o.data.get(WIDGET_VIEW, {}).get("model_id") == ""]
    return output.data


REPORT = "print(json.dumps({}))"
SETUP = """%load_ext nbstream
import json, time
import nbstream
from nbstream.generation import active_runs
topic = "colors"
"""


@pytest.fixture(scope="module")
def session(model_dirs: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Any:
    tiny, line = model_dirs["tiny"], model_dirs["line"]
    cells = {
        "setup": SETUP,
        # Bad input: each is a usage error, and nothing is loaded or started.
        "unknown_option": "%%nbstream --max-tokens 5\nHi",
        "bad_type": "%%nbstream --temperature hot\nHi",
        "bad_range": "%%nbstream --top-p 2\nHi",
        "bad_name": "%%nbstream -o 2x\nHi",
        "bad_expect": "%%nbstream --expect yaml\nHi",
        "missing_name": "%%nbstream --max-new-tokens 5\nTell me about {nope}.",
        "unknown_command": "%nbstream go",
        "missing_model": "%%nbstream --model no-such-owner/no-such-model\nHi",
        "after_errors": "status = %nbstream status\n"
        + REPORT.format('{"active": len(active_runs()), "status": repr(status)}'),
        # A short run that completes.
        "short": f"%%nbstream --model {tiny} --max-new-tokens 12 -o short\n"
        "Name two {topic} and write {{braces}}.",
        "short_done": "text = short.wait()\n"
        + REPORT.format(
            '{"status": short.status, "result": short.result, "text": text,'
            ' "prompt": short.run.prompt_text, "tokens": short.metrics["tokens"]}'
        ),
        "system": f'%%nbstream --model {tiny} --max-new-tokens 3 --system "Answer in French."'
        " -o french\nHi",
        "system_done": "french.wait()\n" + REPORT.format('{"prompt": french.run.prompt_text}'),
        # --expect json: the tiny model's gibberish is not JSON, so the run fails honestly.
        "expect": f"%%nbstream --model {line} --max-new-tokens 6 --expect json -o js\n"
        "Give me JSON.",
        "expect_done": "try:\n    js.wait()\n    failure = None\n"
        "except nbstream.GenerationFailed as exc:\n    failure = str(exc)\n"
        + REPORT.format(
            '{"status": js.status, "result": js.result, "value": js.value, "failure": failure,'
            ' "expect": js.run.settings.get("expect")}'
        ),
        # A long run: the cell returns while it streams; status lists it; stop stops it.
        "long": f"%%nbstream --model {line} --max-new-tokens 8000 --temperature 0.7 --seed 3"
        " -o long\nTell me a story.",
        "long_now": REPORT.format(
            '{"status": long.status, "result": long.result, "settings": long.run.settings}'
        ),
        "status": "%nbstream status",
        "stop": "while not long.partial_text:\n    time.sleep(0.01)\n"
        "stopped = %nbstream stop\n" + REPORT.format('{"title": stopped.title}'),
        "long_after": "try:\n    long.wait()\n    ended = 'complete'\n"
        "except nbstream.GenerationCancelled:\n    ended = 'cancelled'\n"
        + REPORT.format(
            '{"ended": ended, "status": long.status, "result": long.result,'
            ' "partial": long.partial_text, "active": len(active_runs()),'
            ' "tokens": long.metrics["tokens"]}'
        ),
        "status_after": "%nbstream status",
        # --chat: every such cell continues one ChatWidget; the model sees the earlier turns.
        "chat1": f'%%nbstream --chat --model {tiny} --max-new-tokens 6 --system "Be brief."'
        " -o chat\nName two {topic}.",
        "chat1_done": "first = chat.wait()\n"
        + REPORT.format('{"status": chat.status, "result": chat.result, "first": first}'),
        "chat2": "%%nbstream --chat --max-new-tokens 4 -o chat2\nAnd two more?",
        "chat2_done": "chat2.wait()\n"
        + REPORT.format(
            '{"same": chat2 is chat, "prompt": chat.run.prompt, "history": chat.history,'
            ' "tokens": chat.run.settings["max_new_tokens"], "turns": len(chat.transcript) // 2}'
        ),
        "chat_other_model": f"%%nbstream --chat --model {line}\nHi",
    }
    return execute(cells, tmp_path_factory.mktemp("session"))[1]


# -- bad input ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "named"),
    [
        ("unknown_option", "--max-tokens"),
        ("bad_type", "--temperature"),
        ("bad_range", "--top-p"),
        ("bad_name", "-o"),
        ("bad_expect", "--expect"),
    ],
)
def test_bad_options_are_usage_errors_naming_the_option(session, key, named):
    cell = session[key]
    message = error_text(cell)
    assert "UsageError" in message and named in message, message
    assert not displays(cell), "a widget was shown for a cell that started nothing"


def test_a_missing_model_is_one_line_saying_where_it_looked(session):
    """It used to print transformers' 325-line traceback about a hub connection."""
    cell = session["missing_model"]
    message = error_text(cell)
    assert "UsageError" in message and "'no-such-owner/no-such-model'" in message, message
    assert "local Hugging Face cache" in message and "HF_HUB_OFFLINE=1" in message
    assert "Traceback" not in message and len(message.strip().splitlines()) <= 2, message
    assert not [o for o in cell.outputs if o.output_type == "error" and o.traceback[1:]]
    assert not displays(cell)


def test_unknown_option_shows_the_usage(session):
    message = error_text(session["unknown_option"])
    assert "usage: %%nbstream" in message and "--max-new-tokens N" in message


def test_missing_variable_is_named_before_anything_runs(session):
    cell = session["missing_name"]
    message = error_text(cell)
    assert "UsageError" in message and "'nope' is not defined" in message, message
    assert not displays(cell)


def test_line_magic_rejects_unknown_commands(session):
    message = error_text(session["unknown_command"])
    assert "UsageError" in message and "status" in message and "stop" in message


def test_bad_input_started_and_loaded_nothing(session):
    report = reported(session["after_errors"])
    assert report["active"] == 0
    assert "0 model(s) loaded, 0 run(s) running, 0 queued" in report["status"]


# -- a run that completes ----------------------------------------------------------------------
def test_cell_streams_into_a_widget_bound_by_o(session):
    data = widget_output(session["short"])
    report = reported(session["short_done"])
    assert report["status"] == "complete"
    assert report["result"] == report["text"] and report["text"]
    assert 0 < report["tokens"] <= 12
    # The saved output was rewritten when the run ended: it holds the answer, marked complete.
    assert data["text/plain"].startswith("nbstream · complete")
    assert report["text"] in data["text/plain"]
    assert report["text"] in data["text/markdown"]


def test_placeholders_are_filled_and_double_braces_escape(session):
    prompt = reported(session["short_done"])["prompt"]
    assert "Name two colors and write {braces}." in prompt


def test_system_option_sends_a_system_message(session):
    prompt = reported(session["system_done"])["prompt"]
    assert "Answer in French." in prompt
    # The system message replaces the template's default one, and the cell is the user turn.
    assert prompt.index("Answer in French.") < prompt.index("Hi")


def test_expect_json_fails_a_run_whose_answer_is_not_json(session):
    report = reported(session["expect_done"])
    assert report["expect"] == "json"
    assert report["status"] == "failed" and "not valid JSON" in report["failure"]
    assert report["result"] is None and report["value"] is None
    assert widget_output(session["expect"])["text/plain"].startswith("nbstream · failed (")


# -- --chat: one conversation per kernel ------------------------------------------------------
def test_chat_cells_continue_one_conversation(session):
    first = reported(session["chat1_done"])
    assert first["status"] == "complete" and first["result"] == first["first"]
    report = reported(session["chat2_done"])
    assert report["same"] is True
    system = {"role": "system", "content": "Be brief."}
    turn1 = [
        {"role": "user", "content": "Name two colors."},
        {"role": "assistant", "content": first["first"]},
    ]
    # What the model got for the second cell: the system message, the first turn, the cell.
    assert report["prompt"] == [system, *turn1, {"role": "user", "content": "And two more?"}]
    assert report["history"][:-1] == report["prompt"]
    assert report["history"][-1]["role"] == "assistant"
    assert report["turns"] == 2 and report["tokens"] == 4  # the cell's own settings


def test_each_chat_cell_shows_the_shared_chat(session):
    views = [live_view(session[key])[WIDGET_VIEW]["model_id"] for key in ("chat1", "chat2")]
    assert views[0] == views[1]  # the same widget, shown again
    saved = widget_output(session["chat2"])["text/plain"]
    # Both answers ran to max_new_tokens: complete, and marked as cut off.
    assert saved.startswith("nbstream chat · complete · stopped at max_new_tokens · 2 turns")
    assert "You: Name two colors." in saved and "You: And two more?" in saved


def test_chat_errors_are_usage_errors(session):
    # The chat made by the first --chat cell keeps its model.
    message = error_text(session["chat_other_model"])
    assert "UsageError" in message and "drop --model" in message, message
    assert not displays(session["chat_other_model"])


# -- a long run: returns at once, status, stop ---------------------------------------------------
def test_magic_returns_while_the_answer_streams(session):
    report = reported(session["long_now"])
    assert report["status"] in ("queued", "running")
    assert report["result"] is None
    assert report["settings"]["temperature"] == 0.7 and report["settings"]["seed"] == 3
    # The cell's saved output never claims an answer for a run that had not ended.
    assert "nbstream · complete" not in widget_output(session["long"])["text/plain"]


def test_status_lists_loaded_models_and_running_runs(session, model_dirs):
    (output,) = displays(session["status"])
    text = output.data["text/plain"]
    assert "2 model(s) loaded, 1 run(s) running, 0 queued" in text
    assert shlex.split(model_dirs["line"])[0] in text and shlex.split(model_dirs["tiny"])[0] in text
    assert "running" in output.data["text/markdown"]


def test_stop_stops_every_run_and_result_stays_none(session):
    assert reported(session["stop"])["title"] == "nbstream: stopped 1 run(s)"
    report = reported(session["long_after"])
    assert report["ended"] == report["status"] == "cancelled"
    assert report["result"] is None
    assert report["partial"] and report["tokens"] < 8000
    assert report["active"] == 0
    (output,) = displays(session["status_after"])
    assert "0 run(s) running, 0 queued" in output.data["text/plain"]


def test_stopped_cell_output_is_marked_partial(session):
    data = widget_output(session["long"])
    partial = reported(session["long_after"])["partial"]
    assert data["text/plain"].startswith("nbstream · cancelled · partial answer")
    assert partial in data["text/plain"]
    assert "*partial answer" in data["text/markdown"]


def test_widget_view_stays_in_the_saved_output(session):
    # A live front end renders the widget itself, and hides the fallback (an empty model id
    # is how ipywidgets marks a closed widget's output); the answer is saved once.
    view = live_view(session["short"])
    fallback = widget_output(session["short"])
    assert set(fallback) == {WIDGET_VIEW, "text/plain", "text/markdown"}
    assert view["text/plain"] == "" and "text/markdown" not in view
    assert len(displays(session["short"])) == 2


# -- the exported notebook ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def exported(model_dirs: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Any:
    tiny, line = model_dirs["tiny"], model_dirs["line"]
    folder = tmp_path_factory.mktemp("export")
    cells = {
        "setup": SETUP + "import pathlib",
        "done": f"%%nbstream --model {line} --max-new-tokens 15 -o done\nSay hello.",
        "done_wait": "_ = done.wait()\n_ = pathlib.Path('done.txt').write_text(done.result)",
        "stopped": f"%%nbstream --model {line} --max-new-tokens 8000 -o stopped\nTell a story.",
        "stopped_wait": "while not stopped.partial_text:\n    time.sleep(0.01)\n"
        "stopped.stop()\n"
        "try:\n    stopped.wait()\nexcept nbstream.GenerationCancelled:\n    pass\n"
        "_ = pathlib.Path('stopped.txt').write_text(stopped.partial_text)",
        "idle": f"idle = nbstream.StreamWidget(*nbstream.load_model({tiny!r}))\nidle",
    }
    nb, by_key = execute(cells, folder)
    markdown, _ = MarkdownExporter().from_notebook_node(nb)
    # As JupyterLab saves a notebook by default: without the widget state, which the HTML
    # exporter would otherwise embed as a live widget (it has no kernel to stream from).
    del nb.metadata["widgets"]
    html, _ = HTMLExporter().from_notebook_node(nb)
    return {
        "markdown": markdown,
        "html": html,
        "cells": by_key,
        "done": (folder / "done.txt").read_text(),
        "stopped": (folder / "stopped.txt").read_text(),
    }


def test_markdown_export_shows_the_final_answer_and_state(exported):
    markdown = exported["markdown"]
    assert exported["done"] and exported["stopped"]
    assert "**nbstream** · **complete** · *stopped at max_new_tokens* · 15 tokens" in markdown
    assert exported["done"] in markdown
    assert "**cancelled** · *partial answer: the run was stopped" in markdown
    assert exported["stopped"] in markdown
    assert "idle · *no run yet*" in markdown


def test_html_export_shows_the_state(exported):
    html = exported["html"]
    assert "complete" in html and "cancelled" in html and "partial answer" in html
    assert "no run yet" in html
