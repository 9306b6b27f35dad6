"""Hostile input: odd prompts, wrong settings, bad messages, code in a model folder.

Each bad input gets an error that says what is wrong, raised (or, from the view, shown as
the widget's ``input_error``) before any thread starts, and the widget stays usable: the
next run completes. test_generation.py covers the engine's own checks one by one; here the
inputs go through the widget, the way a notebook user or its front end sends them.
"""

from __future__ import annotations

import copy
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.session import json_packer

import nbstream
from nbstream.generation import active_runs

pytestmark = pytest.mark.usefixtures("no_leftover_runs")

HANG_S = 60.0
MEGABYTE = "All work and no play makes Jack a dull boy. " * (2**20 // 44 + 1)
CONTROL = "\x00\x01\x07\x08\x1b[2J\x1b]0;title\x07\x7f\u202e\u200b\ufeff\r\x0b\x0c"


@pytest.fixture
def widget(tiny_line: tuple[Any, Any]) -> Iterator[nbstream.StreamWidget]:
    """A widget whose every outgoing message is packed as the kernel would put it on the
    wire (jupyter_client's packer): a message that cannot be sent fails the test."""
    w = nbstream.StreamWidget(*tiny_line, max_new_tokens=6)
    original = w.comm.send

    def send(data: Any = None, metadata: Any = None, buffers: Any = None) -> None:
        json_packer(data)
        original(data=data, metadata=metadata, buffers=buffers)

    w.comm.send = send
    yield w
    w.close()


class NothingStarted:
    """Asserts that nothing started between entering and leaving: no run, no new thread."""

    def __enter__(self) -> NothingStarted:
        self.threads = set(threading.enumerate())
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None:
            assert not active_runs()
            assert set(threading.enumerate()) <= self.threads


def still_usable(w: nbstream.StreamWidget) -> None:
    """The widget's next run starts at once and completes."""
    run_id = w.run_id
    run = w.generate("Hello")
    assert w.wait(HANG_S) == run.result
    assert w.status == "complete" and w.run_id == run_id + 1 and w.input_error == ""
    assert run.metrics["queued_s"] == 0  # nothing held the model


# -- prompts ---------------------------------------------------------------------------------


def test_control_characters_are_text_like_any_other(widget):
    # Not an error: the model gets them verbatim (nothing silently stripped) and answers.
    run = widget.generate(f"Say hi{CONTROL}please")
    text = widget.wait(HANG_S)
    assert widget.status == "complete" and text == run.result
    assert CONTROL in run.prompt_text
    widget._handle_message(widget, {"type": "run", "prompt": CONTROL + " again"}, [])
    assert widget.wait(HANG_S) == widget.result and widget.run_id == 2


@pytest.mark.parametrize(
    "prompt, words",
    [
        (MEGABYTE, "exceeds the model's context of 8192 tokens; shorten the prompt"),
        ("half an emoji \ud83d", "not valid Unicode"),
        ("\udfff", "remove the lone surrogate characters"),
        (
            [{"role": "system", "content": "ok"}, {"role": "user", "content": "x\ud800y"}],
            "message 1 contains text that is not valid Unicode",
        ),
        (" \t\r\n\x0b\x0c\u3000 ", "the prompt is empty; pass some text"),
    ],
    ids=["1 MB", "cut emoji", "lone low surrogate", "surrogate in a message", "only spaces"],
)
def test_bad_prompt_from_python_is_refused_before_anything_starts(widget, prompt, words):
    with NothingStarted(), pytest.raises(ValueError) as info:
        widget.generate(prompt)
    message = str(info.value)
    assert words in message
    assert len(message) < 400  # says what is wrong; never echoes a megabyte back
    assert widget.status == "idle" and widget.run_id == 0
    still_usable(widget)


@pytest.mark.parametrize(
    "prompt, words",
    [
        (MEGABYTE, "exceeds the model's context"),
        # Nothing typed: the page's words ("Type a prompt first"), not the API's.
        ("   ", "Type a prompt first"),
        (None, "Type a prompt first"),  # not text: the prompt box (empty) is used
        (42, "Type a prompt first"),
        (["a", "list"], "Type a prompt first"),
        ({"role": "user", "content": "hi"}, "Type a prompt first"),
    ],
    ids=["1 MB", "spaces", "None", "number", "list", "dict"],
)
def test_bad_prompt_from_the_view_is_shown_and_starts_nothing(widget, prompt, words):
    with NothingStarted():
        widget._handle_message(widget, {"type": "run", "prompt": prompt}, [])
    assert words in widget.input_error and len(widget.input_error) < 400
    assert widget.status == "idle" and widget.run_id == 0
    still_usable(widget)  # and the error is cleared by the next run


@pytest.mark.parametrize(
    "content",
    [
        None,
        "run",
        ["run"],
        {},
        {"type": None},
        {"type": 5},
        {"type": "explode"},
        {"type": "stop"},  # nothing to stop
        {"type": "sync", "view": {"not": "a view id"}},
        {"type": "sync", "view": "x" * 10_000},
    ],
)
def test_malformed_messages_from_the_view_change_nothing(widget, content):
    with NothingStarted():
        widget._handle_message(widget, content, [])
    assert widget.status == "idle" and widget.run_id == 0 and widget.input_error == ""
    still_usable(widget)


def test_a_chat_template_that_raises(tiny_line):
    model, tokenizer = tiny_line
    broken = copy.deepcopy(tokenizer)
    templates = {
        "{{ raise_exception('system messages are not supported') }}": "TemplateError: system",
        "{{ messages[0].content // 0 }}": "TypeError",
        "{{ 1 // 0 }}": "ZeroDivisionError",
        "{{ undefined_helper() }}": "UndefinedError",
        "{% for m in messages %}": "TemplateSyntaxError",
    }
    w = nbstream.StreamWidget(model, broken, max_new_tokens=4)
    for template, words in templates.items():
        broken.chat_template = template
        with NothingStarted(), pytest.raises(ValueError) as info:
            w.generate("Hello")
        assert str(info.value).startswith("the tokenizer's chat template failed")
        assert words in str(info.value)
        with NothingStarted():
            w._handle_message(w, {"type": "run", "prompt": "Hello"}, [])
        assert w.input_error == str(info.value) and w.run_id == 0
    broken.chat_template = tokenizer.chat_template
    still_usable(w)
    w.close()


# -- settings --------------------------------------------------------------------------------

WRONG_TYPES = [
    ({"max_new_tokens": "20"}, "max_new_tokens must be an int, got '20'"),
    ({"max_new_tokens": 20.0}, "max_new_tokens must be an int"),
    ({"max_new_tokens": True}, "max_new_tokens must be an int"),
    ({"temperature": "0.7"}, "temperature must be a number, got '0.7'"),
    ({"temperature": [0.7]}, "temperature must be a number"),
    ({"top_p": None, "top_k": 2.5}, "top_k must be an int"),
    ({"do_sample": "False"}, "do_sample must be True or False"),
    ({"do_sample": 0}, "do_sample must be True or False"),
    ({"seed": 1.5}, "seed must be an int"),
    ({"budget_s": "10"}, "budget_s must be a number"),
    ({"stop": "END"}, "stop must be a list of strings"),
    ({"stop": ["END", 3]}, "stop[1] must be a str"),
    ({"stop": [b"END"]}, "stop[0] must be a str"),
    ({"expect": True}, "expect must be the string 'json'"),
    ({"max_length": 20}, "unknown setting 'max_length'"),
]


@pytest.mark.parametrize("settings, words", WRONG_TYPES)
def test_settings_of_the_wrong_type(tiny_line, settings, words):
    with NothingStarted(), pytest.raises(TypeError) as info:
        nbstream.StreamWidget(*tiny_line, **settings)
    assert words in str(info.value)
    w = nbstream.StreamWidget(*tiny_line, max_new_tokens=4)
    with NothingStarted(), pytest.raises(TypeError) as again:
        w.generate("Hello", **settings)
    assert str(again.value) == str(info.value)
    assert w.status == "idle" and w.run_id == 0
    still_usable(w)
    w.close()


# -- code in a model folder ----------------------------------------------------------------------

EVIL = """
import pathlib

pathlib.Path({marker!r}).write_text("this code ran")

from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast


class EvilConfig(LlamaConfig):
    model_type = {model_type!r}


class EvilModel(LlamaForCausalLM):
    config_class = EvilConfig


class EvilTokenizer(PreTrainedTokenizerFast):
    pass
"""


@pytest.fixture
def modules_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Where transformers copies a folder's code before importing it: a temporary folder,
    and the imported modules forgotten afterwards."""
    import transformers.dynamic_module_utils as dynamic

    cache = tmp_path / "modules"
    monkeypatch.setattr(dynamic, "HF_MODULES_CACHE", str(cache))
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield cache
    for name in [n for n in sys.modules if n.split(".")[0] == "transformers_modules"]:
        del sys.modules[name]


def evil_folder(root: Path, tiny: tuple[Any, Any], *, model_type: str, where: str) -> Path:
    """A saved tiny model whose config (or tokenizer config) points ``auto_map`` at a module
    that writes ``root/marker`` when imported."""
    model, tokenizer = tiny
    folder = root / f"evil-{where}-{model_type}"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    marker = str(root / "marker")
    (folder / "evil_code.py").write_text(EVIL.format(marker=marker, model_type=model_type))
    name = "config.json" if where == "config" else "tokenizer_config.json"
    config = json.loads((folder / name).read_text())
    if where == "config":
        config["model_type"] = model_type
        config["auto_map"] = {
            "AutoConfig": "evil_code.EvilConfig",
            "AutoModelForCausalLM": "evil_code.EvilModel",
        }
    else:
        config["tokenizer_class"] = "EvilTokenizer"
        config["auto_map"] = {"AutoTokenizer": [None, "evil_code.EvilTokenizer"]}
    (folder / name).write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    "model_type, where, refused",
    [
        ("llama", "config", False),  # a known architecture: the custom classes are ignored
        ("evil_llama", "config", True),  # only the folder's code knows it: refused
        ("llama", "tokenizer", True),
    ],
    ids=["known model_type", "custom model_type", "custom tokenizer"],
)
def test_load_model_never_runs_a_folders_code_by_default(
    tmp_path, tiny, modules_cache, model_type, where, refused
):
    folder = evil_folder(tmp_path, tiny, model_type=model_type, where=where)
    marker = tmp_path / "marker"
    if refused:
        with pytest.raises(ValueError, match="trust_remote_code=True"):
            nbstream.load_model(folder)
    else:
        model, tokenizer = nbstream.load_model(folder)
        assert type(model).__module__.startswith("transformers.models.llama.")
        assert type(tokenizer).__module__.startswith("transformers.")
    assert not marker.exists()
    assert not modules_cache.exists()  # not even copied aside for a later import
    # The proof that the folder does carry code that runs: asking for it runs it.
    model, tokenizer = nbstream.load_model(folder, trust_remote_code=True)
    assert marker.read_text() == "this code ran"
    assert "transformers_modules" in (type(model).__module__ + type(tokenizer).__module__)
