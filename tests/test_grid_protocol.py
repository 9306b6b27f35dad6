"""The grid table's protocol: the traits and messages of ``GridTable``
(nbstream/widgets/grid_view.py) against their types in nbstream/protocol.py, the page's
messages against the kernel's handler, the kernel's against the page's (js/src/grid.js), and
what a real grid sends against the types.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
import time
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import anywidget
import pytest
import traitlets

import nbstream
from nbstream import protocol
from nbstream.protocol import keys
from nbstream.widgets.grid_view import GridTable

pytestmark = pytest.mark.usefixtures("no_leftover_runs")

JS = Path(__file__).resolve().parents[1] / "js" / "src"


def problems(value: Any, hint: Any, where: str = "value") -> list[str]:
    """What is wrong with ``value`` as JSON of type ``hint`` (a TypedDict: exactly its keys)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        found = [problems(value, arg, where) for arg in args]
        return [] if any(not p for p in found) else [f"{where}: {value!r:.60} is not {hint}"]
    if origin is Literal:
        return [] if value in args else [f"{where}: {value!r:.60} not in {args}"]
    if hint is type(None):
        return [] if value is None else [f"{where}: not null"]
    if typing.is_typeddict(hint):
        if not isinstance(value, dict):
            return [f"{where}: not an object"]
        fields = keys(hint)
        wrong = [f"{where}: no {k!r}" for k, (_, needed) in fields.items()
                 if needed and k not in value]  # fmt: skip
        wrong += [f"{where}: {k!r} is not a key" for k in value if k not in fields]
        return wrong + [p for k, v in value.items() if k in fields
                        for p in problems(v, fields[k][0], f"{where}[{k!r}]")]  # fmt: skip
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: not an array"]
        return [p for i, v in enumerate(value) for p in problems(v, args[0], f"{where}[{i}]")]
    if hint is float:
        return [] if isinstance(value, (int, float)) and not isinstance(value, bool) else [where]
    if hint is int:
        return [] if isinstance(value, int) and not isinstance(value, bool) else [where]
    return [] if isinstance(value, hint) else [f"{where}: {value!r:.60} is not {hint}"]


def test_the_checker_sees_a_wrong_value() -> None:
    good = {"type": "grid_delta", "cells": []}
    assert problems(good, protocol.GridDeltaMessage) == []
    assert problems({**good, "more": 1}, protocol.GridDeltaMessage)
    assert problems({"type": "grid_delta"}, protocol.GridDeltaMessage)
    assert problems({"type": "grid_reset", "cells": []}, protocol.GridDeltaMessage)


def test_the_types_name_every_synced_trait_of_the_table() -> None:
    base = set(anywidget.AnyWidget.class_trait_names(sync=True))
    traits = {n: t for n, t in GridTable.class_traits(sync=True).items() if n not in base}
    assert set(traits) == set(keys(protocol.GridTableTraits))
    kinds = {traitlets.Unicode: str, traitlets.Bool: bool, traitlets.List: list}
    for name, trait in traits.items():
        hint = keys(protocol.GridTableTraits)[name][0]
        expected = next(k for cls, k in kinds.items() if isinstance(trait, cls))
        assert (typing.get_origin(hint) or hint) is expected, name


def _type_literals(union: Any) -> set[str]:
    members = typing.get_args(union) if typing.get_origin(union) else (union,)
    return {lit for m in members for lit in typing.get_args(keys(m)["type"][0])}


def test_the_kernel_handles_exactly_the_page_s_messages() -> None:
    source = textwrap.dedent(inspect.getsource(GridTable.handle_page_message))
    handled = {
        node.comparators[0].value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Compare)
        and getattr(node.left, "id", None) == "kind"
        and isinstance(node.comparators[0], ast.Constant)
    }
    assert handled == _type_literals(protocol.GridTableRequest)
    assert handled == {"sync", "stop", "run", "open", "pull"}


def test_the_page_handles_every_message_the_kernel_sends_and_sends_the_requests() -> None:
    page = (JS / "grid.js").read_text("utf-8") + (JS / "grid_cell.js").read_text("utf-8")
    # The probe and the pull's answer are handled by pull.js, which sends the pull.
    pulls = "pullWhenUnpushed(" in page
    page += (JS / "pull.js").read_text("utf-8") if pulls else ""
    handled = set(re.findall(r"\bmsg\.type\s*===\s*\"(\w+)\"", page))
    assert _type_literals(protocol.GridTableMessage) <= handled
    sent = set(re.findall(r"send\(\{\s*type:\s*\"(\w+)\"", page)) | ({"pull"} if pulls else set())
    assert sent == _type_literals(protocol.GridTableRequest)


def test_what_a_grid_sends_has_the_protocol_s_types(tiny_line: tuple[Any, Any]) -> None:
    model, tokenizer = tiny_line
    g = nbstream.Grid(["a", "b"], model=model, tokenizer=tokenizer, settings=[{}, {}],
                      max_new_tokens=6)  # fmt: skip
    table = g.widget.table
    sent: list[Any] = []
    states: list[Any] = []
    table.send = lambda content, buffers=None: sent.append(content)  # type: ignore[method-assign]
    table.observe(lambda change: states.append((change["name"], change["new"])))
    g.generate()
    g.wait(timeout=60)
    table.handle_page_message(g.widget, {"type": "sync", "view": "v", "page": "p"})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(
        c["status"] != "complete" for row in table.cells for c in row
    ):
        time.sleep(0.02)
    assert {m["type"] for m in sent} == {"grid_delta", "grid_reset"}
    found = [p for m in sent for p in problems(m, protocol.GridTableMessage, m["type"])]
    state = {name: getattr(table, name) for name in keys(protocol.GridTableTraits)}
    found += problems(state, protocol.GridTableTraits, "traits")
    found += [p for name, value in states
              for p in problems(value, keys(protocol.GridTableTraits)[name][0], name)]  # fmt: skip
    assert found == []
    g.widget.close()
