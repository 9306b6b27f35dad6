"""The protocol between the kernel and the page (PROTOCOL.md) is one protocol.

Three things describe it: the Python widget classes, the typed mirrors at the top of
js/src/stream.js, chat.js and compare.js (JSDoc typedefs, one ``@property`` per synced
trait), and PROTOCOL.md. These tests fail when a synced trait or a message type is in one
of them and not in the others, and when the settings' schema the page checks with
(``settings_schema()``) disagrees with ``validate_settings`` at any bound, or the panel
(js/src/settings_panel.js) with either.

``NBSTREAM_UPDATE_SCHEMA=1`` rewrites js/test/settings-schema.json (the schema the Node unit
tests and the front-end harness use) from ``panel_schema()``.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import anywidget
import pytest

from nbstream.settings import SETTINGS, settings_schema, validate_settings
from nbstream.widgets.base import RunWidget
from nbstream.widgets.chat import ChatWidget
from nbstream.widgets.compare import CompareWidget, _Column, _Header
from nbstream.widgets.feed import RunFeed
from nbstream.widgets.settings_panel import PANEL_SETTINGS, panel_schema
from nbstream.widgets.stream import StreamWidget

REPO = Path(__file__).resolve().parents[1]
JS = REPO / "js" / "src"
SCHEMA_FIXTURE = REPO / "js" / "test" / "settings-schema.json"

# -- reading the three descriptions ------------------------------------------------------------


def synced_traits(cls: type) -> set[str]:
    """The synced traits a widget class adds to anywidget's own (``_model_name``, ...)."""
    base = set(anywidget.AnyWidget.class_trait_names(sync=True))
    return set(cls.class_trait_names(sync=True)) - base  # type: ignore[attr-defined]


def _braced(text: str, start: int) -> tuple[str, int]:
    """The text inside the braces opening at ``text[start]``, and the index after them."""
    assert text[start] == "{", text[start : start + 40]
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + 1 : i], i + 1
    raise ValueError(f"unbalanced braces: {text[start : start + 80]!r}")


def typedefs(source: str) -> dict[str, tuple[str, list[str]]]:
    """Every JSDoc ``@typedef`` of ``source``: name -> (its type, its ``@property`` names)."""
    found: dict[str, tuple[str, list[str]]] = {}
    for block in re.findall(r"/\*\*(.*?)\*/", source, flags=re.S):
        text = "\n".join(re.sub(r"^\s*\*?", "", line) for line in block.splitlines())
        for part in text.split("@typedef")[1:]:
            kind, end = _braced(part, part.index("{"))
            name = re.match(r"\s*(\w+)", part[end:])
            assert name, f"a typedef without a name: {part[:80]!r}"
            props = []
            for prop in re.finditer(r"@property\s*(?=\{)", part):
                _type, after = _braced(part, prop.end())
                match = re.match(r"\s*\[?(\w+)", part[after:])
                assert match, f"a property without a name: {part[prop.start() : after + 40]!r}"
                props.append(match.group(1))
            found[name.group(1)] = (kind.strip(), props)
    return found


def js_traits(file: str, name: str, source: str | None = None) -> set[str]:
    """The trait names of typedef ``name`` in js/src/``file``: its properties, or those of
    each part of an intersection (``A & import("./stream.js").B``)."""
    defs = typedefs(source if source is not None else (JS / file).read_text("utf-8"))
    assert name in defs, f"no typedef {name} in js/src/{file}"
    kind, props = defs[name]
    if kind == "object":
        return set(props)
    names: set[str] = set()
    for part in kind.split("&"):
        imported = re.fullmatch(r'\s*import\("\./([\w.]+)"\)\.(\w+)\s*', part)
        if imported:
            names |= js_traits(imported.group(1), imported.group(2))
        else:
            names |= js_traits(file, part.strip(), source)
    return names


def js_message_types(file: str, name: str, source: str | None = None) -> set[str]:
    """The ``type`` literals of the message typedef ``name``, and of the typedefs it names."""
    defs = typedefs(source if source is not None else (JS / file).read_text("utf-8"))
    assert name in defs, f"no typedef {name} in js/src/{file}"
    kind = defs[name][0]
    types = set(re.findall(r'\btype:\s*"(\w+)"', kind))
    for word in set(re.findall(r"\b[A-Z]\w*", kind)) & set(defs) - {name}:
        types |= js_message_types(file, word, source)
    return types


def protocol_tables(text: str | None = None) -> dict[str, list[str]]:
    """PROTOCOL.md's tables: ``### heading`` -> the names in the first column."""
    if text is None:
        text = (REPO / "PROTOCOL.md").read_text("utf-8")
    tables: dict[str, list[str]] = {}
    heading = ""
    for line in text.splitlines():
        if line.startswith("### "):
            heading = line[4:].strip()
        match = re.match(r"\|\s*`(\w+)`\s*\|", line)
        if match and heading:
            tables.setdefault(heading, []).append(match.group(1))
    return tables


def handled_kinds(function: Any) -> set[str]:
    """The message types a Python handler compares its ``kind`` with."""
    source = inspect.getsource(function)
    kinds = set(re.findall(r'\bkind\s*[!=]=\s*"(\w+)"', source))
    for group in re.findall(r"\bkind\s+(?:not\s+)?in\s+\(([^)]*)\)", source):
        kinds |= set(re.findall(r'"(\w+)"', group))
    return kinds


def mismatch(what: str, one: tuple[str, set[str]], other: tuple[str, set[str]]) -> str | None:
    """None if both sides name the same things, else what each lacks."""
    (a, left), (b, right) = one, other
    if left == right:
        return None
    return (
        f"{what}: only in {a}: {sorted(left - right)}; only in {b}: {sorted(right - left)}. "
        "Change the Python class, its JS mirror and PROTOCOL.md together."
    )


def check(*problems: str | None) -> None:
    found = [p for p in problems if p]
    assert not found, "\n".join(found)


# -- synced traits -----------------------------------------------------------------------------

CLASSES = {
    # class: (its JS mirror: file, typedef), (its PROTOCOL.md tables)
    RunWidget: (("stream.js", "RunWidgetTraits"), ("RunWidget",)),
    StreamWidget: (("stream.js", "StreamWidgetTraits"), ("RunWidget", "Branches", "StreamWidget")),
    ChatWidget: (("chat.js", "ChatWidgetTraits"), ("RunWidget", "Branches", "ChatWidget")),
    _Header: (("compare.js", "CompareHeaderTraits"), ("CompareWidget header",)),
    _Column: (
        ("stream.js", "CompareColumnTraits"),
        ("RunWidget", "Branches", "StreamWidget", "CompareWidget column"),
    ),
}


@pytest.mark.parametrize("cls", list(CLASSES), ids=lambda c: c.__name__)
def test_js_mirror_and_protocol_name_every_synced_trait(cls: type) -> None:
    (file, typedef), headings = CLASSES[cls]
    python = synced_traits(cls)
    tables = protocol_tables()
    documented: set[str] = set()
    for heading in headings:
        assert heading in tables, f"PROTOCOL.md has no table under '### {heading}'"
        documented |= set(tables[heading])
    check(
        mismatch(
            f"{cls.__name__}'s synced traits",
            (f"nbstream ({cls.__name__})", python),
            (f"js/src/{file} ({typedef})", js_traits(file, typedef)),
        ),
        mismatch(
            f"{cls.__name__}'s synced traits",
            (f"nbstream ({cls.__name__})", python),
            ("PROTOCOL.md", documented),
        ),
    )


def test_the_check_sees_a_trait_on_one_side_only() -> None:
    """The comparison above really fails on a trait added to one side."""
    import traitlets

    class Wider(StreamWidget):
        extra = traitlets.Int(0).tag(sync=True)

    js = js_traits("stream.js", "StreamWidgetTraits")
    assert mismatch("t", ("py", synced_traits(Wider)), ("js", js)) is not None
    source = (JS / "stream.js").read_text("utf-8")
    prop = " * @property {boolean} show_prompt"
    wider_js = source.replace(prop, " * @property {number} extra  only the page knows\n" + prop)
    assert wider_js != source
    more = js_traits("stream.js", "StreamWidgetTraits", wider_js)
    assert more - js == {"extra"}
    assert mismatch("t", ("py", synced_traits(StreamWidget)), ("js", more)) is not None
    # And a table row of PROTOCOL.md counts.
    text = (REPO / "PROTOCOL.md").read_text("utf-8")
    row = "| `extra` | int | kernel → page | never |\n"
    wider_doc = text.replace("| `show_prompt` |", row + "| `show_prompt` |", 1)
    assert "extra" in protocol_tables(wider_doc)["StreamWidget"]


# -- custom messages ---------------------------------------------------------------------------


def test_messages_from_the_kernel() -> None:
    sent = set(re.findall(r'"type":\s*"(\w+)"', inspect.getsource(RunFeed)))
    common = (JS / "common.js").read_text("utf-8")
    handled = set(re.findall(r'\bmsg\.type\s*===\s*"(\w+)"', common))
    check(
        mismatch(
            "kernel → page", ("nbstream/widgets/feed.py", sent), ("js/src/common.js", handled)
        ),
        mismatch(
            "kernel → page",
            ("nbstream/widgets/feed.py", sent),
            ("stream.js IncomingMessage", js_message_types("stream.js", "IncomingMessage")),
        ),
        mismatch(
            "kernel → page",
            ("nbstream/widgets/feed.py", sent),
            ("PROTOCOL.md", set(protocol_tables()["Kernel to page"])),
        ),
    )


def test_the_sampling_panels_reply() -> None:
    from nbstream.widgets.sampling import Explainer

    sent = set(re.findall(r'"type":\s*"(\w+)"', inspect.getsource(Explainer)))
    panel = (JS / "sampling.js").read_text("utf-8")
    handled = set(re.findall(r"\bmsg\?*\.type\s*===\s*\"(\w+)\"", panel)) - {"tokens"}
    check(
        mismatch("panel reply", ("nbstream/widgets/sampling.py", sent), ("sampling.js", handled)),
        mismatch(
            "panel reply",
            ("nbstream/widgets/sampling.py", sent),
            (
                "sampling.js DistributionReply",
                js_message_types("sampling.js", "DistributionReply"),
            ),
        ),
        mismatch(
            "panel reply",
            ("nbstream/widgets/sampling.py", sent),
            ("PROTOCOL.md", set(protocol_tables()["Kernel to page: the sampling panel"])),
        ),
    )


PAGE_TO_KERNEL = {
    # heading in PROTOCOL.md: (the kernel's handlers, the JS mirror or None)
    "Page to kernel: every RunWidget view": ([RunWidget._handle_view_message], None),
    "Page to kernel: StreamWidget": (
        [StreamWidget._on_view_message],
        ("stream.js", "Page to kernel: every RunWidget view"),
    ),
    "Page to kernel: ChatWidget": (
        [ChatWidget._on_view_message],
        ("chat.js", "Page to kernel: every RunWidget view"),
    ),
    "Page to kernel: CompareWidget header": (
        [CompareWidget._handle_header_message],
        ("compare.js", None),
    ),
}


@pytest.mark.parametrize("heading", list(PAGE_TO_KERNEL))
def test_messages_from_the_page(heading: str) -> None:
    handlers, mirror = PAGE_TO_KERNEL[heading]
    tables = protocol_tables()
    assert heading in tables, f"PROTOCOL.md has no table under '### {heading}'"
    documented = set(tables[heading])
    handled: set[str] = set()
    for handler in handlers:
        handled |= handled_kinds(handler)
    problems = [mismatch(heading, ("PROTOCOL.md", documented), ("the kernel", handled))]
    if mirror is not None:
        file, shared = mirror
        # What a view sends: its own messages and those every view of a RunWidget sends.
        expected = documented | (set(tables[shared]) if shared else set())
        sent = js_message_types(file, "OutgoingMessage")
        problems.append(
            mismatch(heading, ("PROTOCOL.md", expected), (f"{file} OutgoingMessage", sent))
        )
    check(*problems)


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
        # "tags" (thinking_tags) is for code only: no panel field has it (the page's
        # typedef knows the other five).
        page_types = ("int", "float", "bool", "strings", "string")
        assert entry["type"] in (*page_types, "tags"), name
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
    }
    invalid: dict[str, list[Any]] = {
        "int": [True, 1.0, 1.5, "1", [1]],
        "float": [True, "0.5", [0.5]],
        "bool": [1, 0, "true"],
        "strings": ["a", [], [""], [1]],
        "string": ["yaml", 1, ["json"]],
        "tags": ["<think>", ["<think>"], ["", "b"], [1, 2], ["a", "b", "c"]],
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
