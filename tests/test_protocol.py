"""The protocol between the kernel and the page is written once: ``nbstream.protocol``.

Its types are compared with what they describe: the widgets' synced traits (names and JSON
types), js/src/protocol.d.ts (the same types in TypeScript, which ``tsc`` checks the front
end with), PROTOCOL.md's tables (every trait, message and field), the message types the
kernel's handlers answer, and the messages a widget really sends while it runs, each checked
against its ``TypedDict``. The settings' schema the page checks with (``settings_schema()``)
is compared with ``validate_settings`` at every bound, and the panel
(js/src/settings_panel.js) with both.

``NBSTREAM_UPDATE_PROTOCOL=1`` rewrites js/src/protocol.d.ts from ``nbstream.protocol``;
``NBSTREAM_UPDATE_SCHEMA=1`` rewrites js/test/settings-schema.json (the schema the Node unit
tests and the front-end harness use) from ``panel_schema()``.
"""

from __future__ import annotations

import ast
import inspect
import json
import math
import os
import re
import shutil
import subprocess
import textwrap
import threading
import time
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Union

import anywidget
import pytest
import traitlets

import nbstream
from nbstream import protocol
from nbstream.protocol import keys
from nbstream.settings import SETTINGS, settings_schema, validate_settings
from nbstream.testing import forced_model, tiny_model
from nbstream.widgets.base import RunWidget
from nbstream.widgets.chat import ChatWidget
from nbstream.widgets.compare import CompareWidget, _Column, _Header
from nbstream.widgets.settings_panel import PANEL_SETTINGS, panel_schema
from nbstream.widgets.stream import StreamWidget

REPO = Path(__file__).resolve().parents[1]
JS = REPO / "js" / "src"
DTS = JS / "protocol.d.ts"
SCHEMA_FIXTURE = REPO / "js" / "test" / "settings-schema.json"


def mismatch(what: str, one: tuple[str, set[str]], other: tuple[str, set[str]]) -> str | None:
    """None if both sides name the same things, else what each lacks."""
    (a, left), (b, right) = one, other
    if left == right:
        return None
    return (
        f"{what}: only in {a}: {sorted(left - right)}; only in {b}: {sorted(right - left)}. "
        "Change nbstream/protocol.py, the kernel and PROTOCOL.md together."
    )


def check(*problems: str | None) -> None:
    found = [p for p in problems if p]
    assert not found, "\n".join(found)


# -- a value against a type ------------------------------------------------------------------


def conforms(value: Any, hint: Any, where: str = "value") -> list[str]:
    """What is wrong with ``value`` as JSON of type ``hint`` (a TypedDict checks its keys,
    none missing and none more; a tuple is a JSON array of that length); [] when nothing."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return []
    if hint is type(None):
        return [] if value is None else [f"{where}: {value!r:.60} is not null"]
    if origin in (Union, types.UnionType):
        problems = [conforms(value, arg, where) for arg in args]
        if any(not p for p in problems):
            return []
        why = "; ".join(p for ps in problems for p in ps)
        return [f"{where}: {value!r:.80} is none of {hint}: {why}"]
    if origin is Literal:
        return [] if value in args else [f"{where}: {value!r:.60} is not one of {args}"]
    if typing.is_typeddict(hint):
        if not isinstance(value, dict):
            return [f"{where}: {value!r:.60} is not an object"]
        fields = keys(hint)
        missing = [k for k, (_, required) in fields.items() if required and k not in value]
        extra = [k for k in value if k not in fields]
        problems = [f"{where}: no {k!r}" for k in missing]
        problems += [f"{where}: {k!r} is not a key of {hint.__name__}" for k in extra]
        for key, item in value.items():
            if key in fields:
                problems += conforms(item, fields[key][0], f"{where}[{key!r}]")
        return problems
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return [f"{where}: {value!r:.60} is not an array"]
        if origin is tuple:
            if len(value) != len(args):
                return [f"{where}: {len(value)} items, not {len(args)}"]
            pairs = zip(value, args, strict=True)
        else:
            pairs = zip(value, [args[0]] * len(value), strict=True)
        return [p for i, (v, a) in enumerate(pairs) for p in conforms(v, a, f"{where}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: {value!r:.60} is not an object"]
        return [p for k, v in value.items() for p in conforms(v, args[1], f"{where}[{k!r}]")]
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, hint)
    return [] if ok else [f"{where}: {value!r:.60} is not {hint.__name__}"]


def test_the_checker_sees_a_wrong_value() -> None:
    """conforms() below really fails on a missing key, an extra one and a wrong type."""
    good = {"type": "delta", "run_id": 1, "offset": 0, "text": "a", "tokens": 1, "elapsed_s": 0}
    assert conforms(good, protocol.DeltaMessage) == []
    assert conforms(good, protocol.FeedMessage) == []
    assert conforms({**good, "offset": "0"}, protocol.DeltaMessage)
    assert conforms({**good, "more": 1}, protocol.DeltaMessage)
    assert conforms({k: v for k, v in good.items() if k != "text"}, protocol.DeltaMessage)
    assert conforms({**good, "type": "deltas"}, protocol.FeedMessage)
    assert conforms({**good, "tokens": True}, protocol.DeltaMessage)
    entry = [5, "a", "text", -0.1, 1, None]
    assert conforms(entry, protocol.TokenEntry) == []
    assert conforms([*entry, True], protocol.TokenEntry) == []
    assert conforms([*entry, True, 1], protocol.TokenEntry)
    assert conforms([5, "a", "word", -0.1, 1, None], protocol.TokenEntry)


def of_type(message: dict[str, Any], union: Any) -> Any:
    """The member of ``union`` whose ``type`` is the message's (the first, if several)."""
    for member in typing.get_args(union):
        if message.get("type") in typing.get_args(keys(member)["type"][0]):
            return member
    raise AssertionError(f"a {message.get('type')!r} message is not in {union}")


# -- reading PROTOCOL.md -----------------------------------------------------------------------


def _cells(line: str) -> list[str]:
    """The cells of a Markdown table row (a ``|`` inside backticks is text)."""
    cells, cell, code = [], "", False
    for char in line.strip().strip("|"):
        if char == "`":
            code = not code
        if char == "|" and not code:
            cells.append(cell.strip())
            cell = ""
        else:
            cell += char
    return [*cells, cell.strip()]


def protocol_tables(text: str | None = None) -> dict[str, dict[str, list[str]]]:
    """PROTOCOL.md's tables: ``### heading`` -> {the name in the first column: its cells}."""
    if text is None:
        text = (REPO / "PROTOCOL.md").read_text("utf-8")
    tables: dict[str, dict[str, list[str]]] = {}
    heading = ""
    for line in text.splitlines():
        if line.startswith("### "):
            heading = line[4:].strip()
        match = re.match(r"\|\s*`(\w+)`\s*\|", line)
        if match and heading:
            tables.setdefault(heading, {})[match.group(1)] = _cells(line)[1:]
    return tables


def named_fields(cell: str) -> set[str]:
    """The names in backticks of a "fields" cell, leaving out what parentheses explain."""
    depth, kept = 0, ""
    for char in cell:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and char != ")":
            kept += char
    return set(re.findall(r"`(\w+)`", kept))


def test_the_markdown_reader() -> None:
    """protocol_tables and named_fields read what the tests below compare."""
    text = textwrap.dedent(
        """
        ### A
        | type | fields | sent when |
        | --- | --- | --- |
        | `run` | `settings` (`{trait: value}`), `prompt` (absent (`x`) when hidden) | `a | b` |
        | `stop` | | Stop |
        """
    )
    table = protocol_tables(text)["A"]
    assert list(table) == ["run", "stop"]
    assert table["run"][1] == "`a | b`"
    assert named_fields(table["run"][0]) == {"settings", "prompt"}
    assert named_fields(table["stop"][0]) == set()
    assert named_fields("`run_id`, `step`, and `token` or `alternative` (as `x`'s)") == {
        "run_id",
        "step",
        "token",
        "alternative",
    }


# -- synced traits -----------------------------------------------------------------------------


def synced_traits(cls: type) -> dict[str, traitlets.TraitType]:
    """The synced traits a widget class adds to anywidget's own (``_model_name``, ...)."""
    base = set(anywidget.AnyWidget.class_trait_names(sync=True))
    traits = cls.class_traits(sync=True)  # type: ignore[attr-defined]
    return {name: trait for name, trait in traits.items() if name not in base}


#: Each widget class, the TypedDict of its synced traits, and PROTOCOL.md's tables of them.
CLASSES: dict[type, tuple[Any, tuple[str, ...]]] = {
    RunWidget: (protocol.RunWidgetTraits, ("RunWidget",)),
    StreamWidget: (protocol.StreamWidgetTraits, ("RunWidget", "Branches", "StreamWidget")),
    ChatWidget: (protocol.ChatWidgetTraits, ("RunWidget", "Branches", "ChatWidget")),
    _Header: (protocol.CompareHeaderTraits, ("CompareWidget header",)),
    _Column: (
        protocol.CompareColumnTraits,
        ("RunWidget", "Branches", "StreamWidget", "CompareWidget column"),
    ),
}
#: Each table of traits in PROTOCOL.md, and the TypedDict it documents.
TRAIT_TABLES = {
    "RunWidget": protocol.RunWidgetTraits,
    "Branches": protocol.BranchTraits,
    "StreamWidget": protocol.StreamWidgetOwnTraits,
    "ChatWidget": protocol.ChatWidgetOwnTraits,
    "CompareWidget header": protocol.CompareHeaderTraits,
    "CompareWidget column": protocol.CompareColumnOwnTraits,
}


def json_kinds(hint: Any) -> set[str]:
    """What JSON a type hint allows: "string", "number", "boolean", "null", "object",
    "array", or "any"."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return {"any"}
    if origin in (Union, types.UnionType):
        return set().union(*(json_kinds(arg) for arg in typing.get_args(hint)))
    if origin is Literal:
        return set().union(*(json_kinds(type(arg)) for arg in typing.get_args(hint)))
    if typing.is_typeddict(hint) or origin is dict or hint is dict:
        return {"object"}
    if origin in (list, tuple):
        return {"array"}
    simple = {str: "string", int: "number", float: "number", bool: "boolean"}
    return {simple.get(hint, "null")}


def trait_kinds(trait: traitlets.TraitType) -> set[str]:
    """What JSON a traitlet holds."""
    kinds = {
        traitlets.Unicode: "string",
        traitlets.Int: "number",
        traitlets.Float: "number",
        traitlets.Bool: "boolean",
        traitlets.Dict: "object",
        traitlets.List: "array",
    }
    found = {kind for cls, kind in kinds.items() if isinstance(trait, cls)} or {"any"}
    if trait.allow_none and found != {"any"}:
        found.add("null")
    return found


@pytest.mark.parametrize("cls", list(CLASSES), ids=lambda c: c.__name__)
def test_the_types_name_every_synced_trait_with_its_json_type(cls: type) -> None:
    typed, _ = CLASSES[cls]
    traits = synced_traits(cls)
    fields = keys(typed)
    problems = [
        mismatch(
            f"{cls.__name__}'s synced traits",
            (f"nbstream ({cls.__name__})", set(traits)),
            (f"nbstream.protocol ({typed.__name__})", set(fields)),
        )
    ]
    for name in set(traits) & set(fields):
        hint = fields[name][0]
        if trait_kinds(traits[name]) != json_kinds(hint):
            problems.append(
                f"{cls.__name__}.{name} holds {sorted(trait_kinds(traits[name]))}, "
                f"{typed.__name__} says {sorted(json_kinds(hint))}"
            )
        item = getattr(traits[name], "_trait", None)
        if item is not None and typing.get_origin(hint) is list:
            expected = json_kinds(typing.get_args(hint)[0])
            if trait_kinds(item) != expected:
                problems.append(f"{cls.__name__}.{name}'s items: not {sorted(expected)}")
    check(*problems)


@pytest.mark.parametrize("cls", list(CLASSES), ids=lambda c: c.__name__)
def test_protocol_md_names_every_synced_trait(cls: type) -> None:
    typed, headings = CLASSES[cls]
    tables = protocol_tables()
    documented: set[str] = set()
    for heading in headings:
        assert heading in tables, f"PROTOCOL.md has no table under '### {heading}'"
        documented |= set(tables[heading])
    check(
        mismatch(
            f"{cls.__name__}'s synced traits",
            (f"nbstream.protocol ({typed.__name__})", set(keys(typed))),
            ("PROTOCOL.md", documented),
        )
    )


@pytest.mark.parametrize("heading", list(TRAIT_TABLES))
def test_each_trait_table_is_one_type(heading: str) -> None:
    typed = TRAIT_TABLES[heading]
    tables = protocol_tables()
    assert heading in tables, f"PROTOCOL.md has no table under '### {heading}'"
    check(
        mismatch(
            f"'### {heading}'",
            ("PROTOCOL.md", set(tables[heading])),
            (f"nbstream.protocol ({typed.__name__})", set(keys(typed))),
        )
    )


def test_protocol_md_names_every_metric() -> None:
    """The ``metrics`` row lists the keys of ``Metrics``."""
    cell = protocol_tables()["RunWidget"]["metrics"][0]
    check(
        mismatch(
            "metrics",
            ("PROTOCOL.md", named_fields(cell) - {"Metrics"}),
            ("nbstream.protocol (Metrics)", set(keys(protocol.Metrics))),
        )
    )


def test_the_check_sees_a_trait_on_one_side_only() -> None:
    """The comparisons above really fail on a trait added to one side."""

    class Wider(StreamWidget):
        extra = traitlets.Int(0).tag(sync=True)

    fields = set(keys(protocol.StreamWidgetTraits))
    assert set(synced_traits(Wider)) - fields == {"extra"}
    assert mismatch("t", ("py", set(synced_traits(Wider))), ("types", fields)) is not None
    # A trait of the wrong JSON type is seen too.
    assert trait_kinds(traitlets.Unicode("")) != json_kinds(int)
    assert trait_kinds(traitlets.Int(None, allow_none=True)) == json_kinds(int | None)
    # And a table row of PROTOCOL.md counts.
    text = (REPO / "PROTOCOL.md").read_text("utf-8")
    row = "| `extra` | int | kernel → page | never |\n"
    wider_doc = text.replace("| `show_prompt` |", row + "| `show_prompt` |", 1)
    assert "extra" in protocol_tables(wider_doc)["StreamWidget"]


# -- the same types in TypeScript ----------------------------------------------------------------


def test_protocol_d_ts_is_what_the_types_write() -> None:
    """js/src/protocol.d.ts is ``nbstream.protocol.typescript()``, as committed."""
    text = protocol.typescript()
    if os.environ.get("NBSTREAM_UPDATE_PROTOCOL") == "1":
        DTS.write_text(text, "utf-8")
    assert DTS.read_text("utf-8") == text, (
        "js/src/protocol.d.ts is out of date: rerun this test with NBSTREAM_UPDATE_PROTOCOL=1 "
        "and commit it"
    )
    assert protocol.typescript() == text  # the same every time


def test_every_public_type_is_written_in_typescript() -> None:
    text = protocol.typescript()
    written = set(re.findall(r"^export (?:interface|type) (\w+)", text, flags=re.M))
    public = {name for name in protocol.__all__ if name[0].isupper()}
    check(mismatch("TypeScript", ("nbstream.protocol", public), ("protocol.d.ts", written)))
    # Each interface has the keys of its TypedDict (inherited ones through `extends`).
    assert "export interface DeltaMessage {" in text
    assert '  type: "delta";' in text
    assert "  view: string | null;" in text  # a reset's view: null means every view
    assert "export type StreamWidgetTraits = RunWidgetTraits & BranchTraits" in text
    assert "  thinking?: ThinkingState;" in text  # total=False: optional


# -- custom messages ---------------------------------------------------------------------------


def type_literals(union: Any) -> set[str]:
    """The ``type`` values of the messages of a union (or of one message)."""
    members = typing.get_args(union) if typing.get_origin(union) else (union,)
    return set().union(*(set(typing.get_args(keys(m)["type"][0])) for m in members))


def fields_by_type(union: Any) -> dict[str, set[str]]:
    """``type`` -> the keys of the messages of that type, ``type`` itself left out."""
    found: dict[str, set[str]] = {}
    members = typing.get_args(union) if typing.get_origin(union) else (union,)
    for member in members:
        for kind in typing.get_args(keys(member)["type"][0]):
            found.setdefault(kind, set()).update(set(keys(member)) - {"type"})
    return found


def handled_kinds(function: Callable[..., Any]) -> set[str]:
    """The message types a Python handler compares its ``kind`` with (its syntax tree)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    kinds: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and getattr(node.left, "id", None) == "kind":
            for right in node.comparators:
                items = right.elts if isinstance(right, (ast.Tuple, ast.List, ast.Set)) else [right]
                kinds |= {i.value for i in items if isinstance(i, ast.Constant)}
    return kinds


#: PROTOCOL.md's message tables: (the types, the kernel's handlers of them, or None).
MESSAGE_TABLES: dict[str, tuple[Any, list[Callable[..., Any]] | None]] = {
    "Kernel to page": (protocol.FeedMessage, None),
    "Kernel to page: pulling": (protocol.ProbeMessage | protocol.PulledMessage, None),
    "Kernel to page: the sampling panel": (protocol.DistributionReply, None),
    "Kernel to page: Inside the model": (protocol.LensReply | protocol.AttentionReply, None),
    "Kernel to page: CompareWidget header": (protocol.CompareHeaderMessage, None),
    "Page to kernel: every RunWidget view": (
        protocol.ViewRequest,
        [RunWidget._handle_view_message],
    ),
    "Page to kernel: StreamWidget": (
        protocol.StreamWidgetRequest,
        [RunWidget._handle_view_message, StreamWidget._on_view_message],
    ),
    "Page to kernel: ChatWidget": (
        protocol.ChatWidgetRequest,
        [RunWidget._handle_view_message, ChatWidget._on_view_message],
    ),
    "Page to kernel: CompareWidget header": (
        protocol.CompareHeaderRequest,
        [CompareWidget._handle_header_message],
    ),
}
#: What a widget's own table leaves to "every RunWidget view"'s.
SHARED = {
    "Page to kernel: StreamWidget": protocol.ViewRequest,
    "Page to kernel: ChatWidget": protocol.ViewRequest,
}


@pytest.mark.parametrize("heading", list(MESSAGE_TABLES))
def test_protocol_md_names_every_message_and_field(heading: str) -> None:
    union, _ = MESSAGE_TABLES[heading]
    tables = protocol_tables()
    assert heading in tables, f"PROTOCOL.md has no table under '### {heading}'"
    table = tables[heading]
    fields = fields_by_type(union)
    shared = type_literals(SHARED[heading]) if heading in SHARED else set()
    problems = [
        mismatch(
            heading,
            ("PROTOCOL.md", set(table)),
            ("nbstream.protocol", set(fields) - shared),
        )
    ]
    for kind, cells in table.items():
        if kind in fields:
            problems.append(
                mismatch(
                    f"{heading}, `{kind}`'s fields",
                    ("PROTOCOL.md", named_fields(cells[0])),
                    ("nbstream.protocol", fields[kind]),
                )
            )
    check(*problems)


@pytest.mark.parametrize(
    "heading", [h for h, (_, handlers) in MESSAGE_TABLES.items() if handlers is not None]
)
def test_the_kernel_handles_exactly_the_page_s_messages(heading: str) -> None:
    union, handlers = MESSAGE_TABLES[heading]
    handled: set[str] = set()
    for handler in handlers or []:
        handled |= handled_kinds(handler)
    check(
        mismatch(heading, ("the kernel's handlers", handled), ("the types", type_literals(union)))
    )


def test_the_page_handles_every_message_the_kernel_sends() -> None:
    """Each kernel-to-page message type is compared with in the page's code (js/src)."""
    handled: set[str] = set()
    for path in JS.glob("*.js"):
        handled |= set(re.findall(r"\bmsg\??\.type\s*===\s*\"(\w+)\"", path.read_text("utf-8")))
    sent = type_literals(protocol.RunWidgetMessage) | type_literals(protocol.CompareHeaderMessage)
    assert sent <= handled, f"no code of js/src handles {sorted(sent - handled)}"


def test_the_handler_reader_sees_every_comparison() -> None:
    def handler(kind: Any) -> None:
        if kind == "a":
            return
        if kind in ("b", "c"):
            return
        if kind != "d":
            return

    assert handled_kinds(handler) == {"a", "b", "c", "d"}


# -- what the kernel really sends --------------------------------------------------------------


class Page:
    """Stands in for the page: sends what a view sends, and keeps what the widget sends to
    its views, as JSON (what crosses the wire)."""

    def __init__(self, widget: Any) -> None:
        self.widget = widget
        self.sent: list[dict[str, Any]] = []
        self.arrived = threading.Condition()
        original = widget._send_msg

        def capture(content: Any) -> None:
            with self.arrived:
                self.sent.append(json.loads(json.dumps(content, allow_nan=False)))
                self.arrived.notify_all()
            original(content)

        widget._send_msg = capture

    def says(self, **content: Any) -> None:
        self.widget._handle_message(self.widget, content, [])

    def wait_for(self, found: Callable[[list[dict[str, Any]]], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        with self.arrived:
            while not found(self.sent):
                left = deadline - time.monotonic()
                assert left > 0, f"not sent within {timeout} s: {self.sent[-3:]}"
                self.arrived.wait(left)


def state(widget: Any, cls: type) -> dict[str, Any]:
    """The synced traits of ``widget`` as the page gets them."""
    full = json.loads(json.dumps(widget.get_state(), allow_nan=False))
    return {name: value for name, value in full.items() if name in synced_traits(cls)}


def wait_views_done(timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while nbstream.widgets.feed.view_threads():
        assert time.monotonic() < deadline, "a view thread outlived its run"
        time.sleep(0.01)


def assert_all_conform(sent: list[dict[str, Any]], union: Any) -> None:
    problems = [p for message in sent for p in conforms(message, of_type(message, union))]
    assert not problems, "\n".join(problems[:20])


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    return tiny_model()


def test_what_a_stream_widget_sends_has_the_protocol_s_types(tiny: tuple[Any, Any]) -> None:
    w = StreamWidget(*tiny, max_new_tokens=12, show_tokens=True, show_alternatives=True)
    try:
        assert conforms(state(w, StreamWidget), protocol.StreamWidgetTraits) == []
        page = Page(w)
        run = w.generate("Hello")
        run.wait(60)
        wait_views_done()
        page.says(type="sync", view="v1", page="p1")
        page.says(type="distribution", view="v1", request=1, run_id=w.run_id, step=0)
        page.says(type="distribution", view="v2", request=1, run_id=w.run_id, step=10_000)
        page.wait_for(lambda sent: sum(m["type"] == "distribution" for m in sent) == 2)
        kinds = {m["type"] for m in page.sent}
        assert kinds >= {"delta", "reset", "tokens", "distribution"}, kinds
        assert_all_conform(page.sent, protocol.RunWidgetMessage)
        replies = [m for m in page.sent if m["type"] == "distribution"]
        assert {r["error"] is None for r in replies} == {True, False}  # an answer, a refusal
        assert conforms(state(w, StreamWidget), protocol.StreamWidgetTraits) == []
        assert conforms(run.metrics, protocol.Metrics) == []
        assert conforms(json.loads(json.dumps(run.record)), protocol.RunRecord) == []
        assert run.status in typing.get_args(protocol.Status)
        # A branch: its entry in _branches, and the answer shown.
        step = 1
        token = run.token_ids[step]
        alternative = run.trace[step].alternatives[-1][0]
        assert alternative != token
        w.branch(step, alternative).wait(60)
        wait_views_done()
        assert len(w._branches) == 1
        assert conforms(state(w, StreamWidget), protocol.StreamWidgetTraits) == []
        assert_all_conform(page.sent, protocol.RunWidgetMessage)
    finally:
        w.close()


def test_a_reasoning_model_s_messages_have_the_protocol_s_types() -> None:
    thought, answer = "Two and two make four.", "It is 4."
    w = StreamWidget(*forced_model(f"<think>{thought}</think>\n\n{answer}"), max_new_tokens=40)
    try:
        w.show_tokens = True
        page = Page(w)
        run = w.generate("What is 2+2?")
        run.wait(60)
        wait_views_done()
        page.says(type="sync", view="v1", page="p1")
        page.wait_for(lambda sent: any(m["type"] == "reset" for m in sent))
        kinds = {m["type"] for m in page.sent}
        assert kinds >= {"thinking", "delta", "tokens", "reset"}, kinds
        assert "thinking" in next(m for m in page.sent if m["type"] == "reset")
        assert_all_conform(page.sent, protocol.RunWidgetMessage)
        assert conforms(run.metrics, protocol.Metrics) == []
        assert run.metrics["thinking_tokens"]
    finally:
        w.close()


def test_a_chat_s_state_has_the_protocol_s_types(tiny: tuple[Any, Any]) -> None:
    w = ChatWidget(*tiny, max_new_tokens=8)
    try:
        assert conforms(state(w, ChatWidget), protocol.ChatWidgetTraits) == []
        page = Page(w)
        w.generate("Hi").wait(60)
        wait_views_done()
        w.generate("And?").wait(60)
        wait_views_done()
        current = state(w, ChatWidget)
        assert len(current["_messages"]) == 4
        assert conforms(current, protocol.ChatWidgetTraits) == []
        assert_all_conform(page.sent, protocol.RunWidgetMessage)
        w.clear()
        assert conforms(state(w, ChatWidget), protocol.ChatWidgetTraits) == []
    finally:
        w.close()


def test_a_compare_s_state_has_the_protocol_s_types(tiny: tuple[Any, Any]) -> None:
    cw = CompareWidget(
        *tiny, prompt="Hi", settings=[{"temperature": 0}, {"temperature": 1.5}], seed=3
    )
    try:
        header, columns = cw._header, cw.columns
        assert conforms(state(header, _Header), protocol.CompareHeaderTraits) == []
        cw.generate(max_new_tokens=8)
        cw.wait(60)
        wait_views_done()
        assert conforms(state(header, _Header), protocol.CompareHeaderTraits) == []
        for column in columns:
            assert conforms(state(column, _Column), protocol.CompareColumnTraits) == []
    finally:
        cw.close()


# -- the settings' schema ----------------------------------------------------------------------


def refused(name: str, value: Any) -> str | None:
    """validate_settings' message for ``value``, or None if it is accepted."""
    try:
        validate_settings({name: value})
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


def outside(kind: str, bound: float, exclusive: bool, direction: int) -> Any:
    """The nearest value past ``bound`` (``direction`` -1: below) that the bound refuses."""
    if exclusive:
        return bound
    if kind == "int":
        return bound + direction
    return math.nextafter(bound, direction * math.inf)


def inside(kind: str, bound: float, exclusive: bool, direction: int) -> Any:
    """The nearest value at or within ``bound`` (``direction`` -1: the lower one)."""
    if not exclusive:
        return bound
    if kind == "int":
        return bound - direction
    return math.nextafter(bound, -direction * math.inf)


def test_the_schema_names_every_setting() -> None:
    schema = settings_schema()
    assert list(schema) == list(SETTINGS)
    for name, entry in schema.items():
        # "tags" (thinking_tags) and "steer" are for code only: no panel field has them (the
        # page's typedef knows the other five).
        page_types = ("int", "float", "bool", "strings", "string")
        assert entry["type"] in (*page_types, "tags", "steer"), name
        if name in PANEL_SETTINGS.values():
            assert entry["type"] in page_types, name
        assert entry["nullable"] is True and refused(name, None) is None, name
        assert entry["help"] == SETTINGS[name]
    json.dumps(schema)  # it crosses the wire as JSON


@pytest.mark.parametrize("name", list(SETTINGS))
def test_the_schema_agrees_with_validate_settings_at_every_bound(name: str) -> None:
    entry = settings_schema()[name]
    kind = entry["type"]
    for side, direction in (("min", -1), ("max", 1)):
        bound = entry[side]
        if bound is None:
            continue
        exclusive = entry[f"{side}_exclusive"]
        ok = inside(kind, bound, exclusive, direction)
        bad = outside(kind, bound, exclusive, direction)
        assert refused(name, ok) is None, f"{name}={ok!r}: the schema allows it"
        message = refused(name, bad)
        assert message is not None, f"{name}={bad!r}: the schema refuses it"
        shown = str(float(bad)) if kind == "float" else str(bad)
        template = entry["messages"]["below" if direction < 0 else "above"]
        assert template.replace("{value}", shown) == message
        # Well past the bound is refused too, with the same words.
        far = bad + direction * 10**6
        assert refused(name, far) == template.replace(
            "{value}", str(float(far)) if kind == "float" else str(far)
        )
    assert set(entry["messages"]) == {
        side for side, key in (("below", "min"), ("above", "max")) if entry[key] is not None
    }


def within(entry: dict[str, Any], value: float) -> bool:
    """Whether ``value`` is within the schema's bounds."""
    low, high = entry["min"], entry["max"]
    if low is not None and (value <= low if entry["min_exclusive"] else value < low):
        return False
    return high is None or (value < high if entry["max_exclusive"] else value <= high)


@pytest.mark.parametrize("name", list(SETTINGS))
def test_the_schema_types_agree_with_validate_settings(name: str) -> None:
    entry = settings_schema()[name]
    kind = entry["type"]
    numbers = [n for n in (1, 0.5, 2, 0) if within(entry, n)]
    valid: dict[str, list[Any]] = {
        "int": [n for n in numbers if isinstance(n, int)],
        "float": [float(n) for n in numbers] + [n for n in numbers if isinstance(n, int)],
        "bool": [True, False],
        "strings": [["a"], ["\n\n", "END"]],
        "string": list(entry.get("values", [])),
        "tags": [[], ["<think>", "</think>"]],
        # A run's recorded steer (a Direction in memory: tests/test_steering_runs.py).
        "steer": [{"digest": "0" * 64, "layer": 1, "size": 64, "strength": 4, "file": None}],
    }
    invalid: dict[str, list[Any]] = {
        "int": [True, 1.0, 1.5, "1", [1]],
        "float": [True, "0.5", [0.5]],
        "bool": [1, 0, "true"],
        "strings": ["a", [], [""], [1]],
        "string": ["yaml", 1, ["json"]],
        "tags": ["<think>", ["<think>"], ["", "b"], [1, 2], ["a", "b", "c"]],
        "steer": [4.0, ("sea", 4.0), {"digest": "0" * 64}, [None, 1]],
    }
    assert valid[kind], f"{name}: no valid sample"
    for value in valid[kind]:
        assert refused(name, value) is None, f"{name}={value!r} ({kind}) refused"
    for value in invalid[kind]:
        assert refused(name, value) is not None, f"{name}={value!r} accepted (not {kind})"
    if kind == "strings":
        assert entry["min_items"] == 1


def test_widgets_send_the_panel_schema() -> None:
    schema = panel_schema()
    assert list(schema) == list(PANEL_SETTINGS)
    full = settings_schema()
    for trait, setting in PANEL_SETTINGS.items():
        assert schema[trait] == {**full[setting], "setting": setting}
    trait = RunWidget.class_traits()["settings_schema"]
    assert trait.metadata.get("sync") is True and trait.read_only
    assert trait.default() == schema


def test_the_js_fixture_is_the_schema_a_kernel_sends() -> None:
    """js/test/settings-schema.json stands for the trait in the Node tests and the harness."""
    text = json.dumps(panel_schema(), indent=2, ensure_ascii=True) + "\n"
    if os.environ.get("NBSTREAM_UPDATE_SCHEMA") == "1":
        SCHEMA_FIXTURE.write_text(text, "ascii")
    assert json.loads(SCHEMA_FIXTURE.read_text("utf-8")) == json.loads(text), (
        "js/test/settings-schema.json is out of date: rerun this test with "
        "NBSTREAM_UPDATE_SCHEMA=1 and commit it"
    )


# The panel (js/src/settings_panel.js) with the kernel's schema: which fields it shows, and what
# it makes of typed text at every bound.
_NODE_SCRIPT = """
import { FIELDS, fieldSpecs, parseField } from %(module)s;
const schema = %(schema)s;
const cases = %(cases)s;
const specs = fieldSpecs(schema);
const out = { fields: FIELDS.map((f) => f.name), shown: specs.map((f) => f.name), cases: [] };
for (const [name, text] of cases) {
  const spec = specs.find((f) => f.name === name);
  out.cases.push([name, text, parseField(spec, text), String(Number(text))]);
}
console.log(JSON.stringify(out));
"""


def _js_text(value: Any) -> str:
    # What a user would type: Python's repr of a float is valid JS number syntax.
    return repr(value) if isinstance(value, float) else str(value)


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js (js/ front end)")
def test_the_panel_shows_every_setting_and_agrees_with_the_kernel_at_every_bound() -> None:
    schema = panel_schema()
    cases: list[tuple[str, str, Any, str]] = []
    for trait, entry in schema.items():
        kind = entry["type"]
        if kind not in ("int", "float"):
            continue
        for side, direction, message in (("min", -1, "below"), ("max", 1, "above")):
            bound = entry[side]
            if bound is None:
                continue
            exclusive = entry[f"{side}_exclusive"]
            for value in (
                inside(kind, bound, exclusive, direction),
                outside(kind, bound, exclusive, direction),
            ):
                # A seed beyond 2**53 - 1 travels as its digits (tests/test_panel.py and
                # the browser tests check it); this harness compares JS numbers only.
                if kind == "int" and abs(value) > 2**53 - 1:
                    continue
                cases.append((trait, _js_text(value), value, entry["messages"][message]))
    script = _NODE_SCRIPT % {
        "module": json.dumps((JS / "settings_panel.js").as_uri()),
        "schema": json.dumps(schema),
        "cases": json.dumps([[trait, text] for trait, text, _, _ in cases]),
    }
    done = subprocess.run(
        ["node", "--input-type=module", "-e", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    check(
        mismatch(
            "the settings panel's fields",
            ("PANEL_SETTINGS (nbstream/widgets/settings_panel.py)", set(PANEL_SETTINGS)),
            ("FIELDS (js/src/settings_panel.js)", set(out["fields"])),
        )
    )
    assert out["shown"] == out["fields"]  # the schema gives every field its kind
    for (trait, text, value, template), (_name, _text, parsed, js_value) in zip(
        cases, out["cases"], strict=True
    ):
        python = refused(PANEL_SETTINGS[trait], value)
        if python is None:
            assert parsed == {"value": value}, f"{trait}={text}: the page refuses {parsed}"
            continue
        # The kernel's words, the value as each side writes it (Python: 0.0, JS: 0).
        shown = str(float(value)) if schema[trait]["type"] == "float" else str(value)
        assert python == template.replace("{value}", shown)
        assert parsed == {"error": template.replace("{value}", js_value)}, f"{trait}={text}"
