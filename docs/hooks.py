"""mkdocs hooks: the reference pages written from the code at build time.

- ``reference/api.md``: a mkdocstrings block for every name in ``nbstream.__all__`` and for
  the public modules, so a name added to the package is documented the day it exists and
  a name that no longer exists fails the strict build.
- ``reference/settings.md``: a table from ``nbstream.settings.settings_schema()``.
- ``reference/cli.md``: the ``--help`` of ``python -m nbstream`` and of its ``chat``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from mkdocs.structure.files import File, Files

#: Modules documented whole, besides the names of ``nbstream.__all__``.
PUBLIC_MODULES = (
    "nbstream.distribution",
    "nbstream.lens",
    "nbstream.trace",
    "nbstream.record",
    "nbstream.settings",
    "nbstream.testing.models",
    "nbstream.testing.servers",
)


def api_page() -> str:
    import nbstream

    names = [n for n in nbstream.__all__ if not n.startswith("_")]
    lines = [
        "# API reference",
        "",
        "Generated from the docstrings at build time: every name of `nbstream.__all__`, then",
        "the public modules. `nbstream.__version__` is the installed version string.",
        "",
        "## The package",
        "",
    ]
    for name in names:
        lines += [f"::: nbstream.{name}", "    options:", "      heading_level: 3", ""]
    lines += ["## Modules", ""]
    for module in PUBLIC_MODULES:
        lines += [f"::: {module}", "    options:", "      heading_level: 3",
                  "      show_root_full_path: true", ""]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    # Help texts hold tags such as <think>: shown as text, not taken for HTML.
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("|", "\\|").replace("\n", " ")


def _range(entry: dict[str, Any]) -> str:
    low, high = entry.get("min"), entry.get("max")
    if "values" in entry:
        return "one of " + ", ".join(f"`{v!r}`" for v in entry["values"])
    parts = []
    if low is not None:
        parts.append(f"{'>' if entry.get('min_exclusive') else '≥'} {low}")
    if high is not None:
        parts.append(f"{'<' if entry.get('max_exclusive') else '≤'} {high:,}")
    if "min_items" in entry:
        parts.append(f"at least {entry['min_items']} item(s)")
    return ", ".join(parts)


def _sentence(text: str) -> str:
    text = _cell(text)
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def settings_page() -> str:
    from nbstream.settings import settings_schema

    schema = settings_schema()
    lines = [
        "# Settings reference",
        "",
        "Generated at build time from `nbstream.settings.settings_schema()`, the schema the",
        "widgets' Settings panel checks values against. Every setting is a keyword of",
        "`nbstream.stream`, of each widget and of `generate()`; `None` (unset) means the",
        "model's own default. A value out of range is refused before anything starts.",
        "",
        "| setting | type | range |",
        "|---|---|---|",
    ]
    for name, entry in schema.items():
        lines.append(f"| [`{name}`](#{name}) | {entry['type']} | {_cell(_range(entry))} |")
    for name, entry in schema.items():
        lines += ["", f"## `{name}` {{#{name}}}", "", _sentence(entry["help"]), ""]
        lines.append(f"- type: {entry['type']}" + (", or `None`" if entry["nullable"] else ""))
        if _range(entry):
            lines.append(f"- range: {_cell(_range(entry))}")
        # The kernel's own words, once each (below and above may be the same sentence).
        for message in dict.fromkeys(entry.get("messages", {}).values()):
            lines.append(f"- refused with: `{message}`")
    return "\n".join(lines) + "\n"


def _help(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "88", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "nbstream", *args, "--help"],
        capture_output=True, text=True, env=env, check=True, timeout=120,
    )
    return proc.stdout.rstrip()


def cli_page() -> str:
    return "\n".join([
        "# Command line reference",
        "",
        "Generated at build time from `--help`. `nbstream` is also `python -m nbstream`.",
        "",
        "## `nbstream \"prompt\"`",
        "",
        "Streams one answer to the terminal; exits 0 when it completed, 1 when it failed,",
        "2 when a setting or the prompt is refused, 130 when cancelled (Ctrl-C).",
        "",
        "```text",
        _help(),
        "```",
        "",
        "## `nbstream chat`",
        "",
        "A conversation in the terminal ([guide](../guide/terminal.md)).",
        "",
        "```text",
        _help("chat"),
        "```",
        "",
        "## `nbstream prepare`",
        "",
        "Converts the embedded default model ahead of time (Binder builds, CI) and prints its",
        "folder. Takes no options.",
        "",
        "## `nbstream doctor`",
        "",
        "Prints [`nbstream.doctor()`](../guide/doctor.md)'s report; exits 1 when it found a",
        "problem. Takes no options.",
        "",
    ])


def on_files(files: Files, config: Any) -> Files:
    for uri, content in (
        ("reference/api.md", api_page()),
        ("reference/settings.md", settings_page()),
        ("reference/cli.md", cli_page()),
    ):
        files.append(File.generated(config, uri, content=content))
    return files
