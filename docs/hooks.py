"""mkdocs hooks: the reference pages written from the code at build time.

- ``reference/api.md``: a mkdocstrings block for every name in ``nbstream.__all__`` and for
  the public modules, so a name added to the package is documented the day it exists and
  a name that no longer exists fails the strict build.
- ``reference/settings.md``: a table from ``nbstream.settings.settings_schema()``.
- ``reference/cli.md``: the ``--help`` of ``python -m nbstream`` and of its ``chat``.
- ``lessons/<name>.ipynb``: each notebook of ``notebooks/``, as saved (executed, with its
  widget state), rendered by mkdocs-jupyter; nothing is executed or copied into ``docs/``.
  What every lesson page would repeat (JupyterLab's stylesheet, each widget's front end and
  stylesheet from the saved state) is written once under ``assets/lessons/`` and linked.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page
from mkdocs.utils import get_relative_url

#: The lesson notebooks, published under ``lessons/`` (the nav lists them, in order).
NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
LESSONS = "lessons"
# Under "mkdocs.": a warning here fails the strict build, as mkdocs' own do.
log = logging.getLogger("mkdocs.hooks")

#: Modules documented whole, besides the names of ``nbstream.__all__``.
PUBLIC_MODULES = (
    "nbstream.run_steps",
    "nbstream.distribution",
    "nbstream.lens",
    "nbstream.attention",
    "nbstream.steering",
    "nbstream.trace",
    "nbstream.record",
    "nbstream.settings",
    "nbstream.testing.models",
    "nbstream.testing.servers",
)

#: Classes shown with the members they inherit: ``Generation`` is made of parts
#: (``StepsView``, ``BranchesView``, ``RecordView``) whose public methods are its own.
INHERITED_MEMBERS = ("Generation",)


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
        lines += [f"::: nbstream.{name}", "    options:", "      heading_level: 3"]
        if name in INHERITED_MEMBERS:
            lines += ["      inherited_members: true"]
        lines += [""]
    lines += ["## Modules", ""]
    for module in PUBLIC_MODULES:
        lines += [
            f"::: {module}",
            "    options:",
            "      heading_level: 3",
            "      show_root_full_path: true",
            "",
        ]
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
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    return proc.stdout.rstrip()


def cli_page() -> str:
    return "\n".join(
        [
            "# Command line reference",
            "",
            "Generated at build time from `--help`. `nbstream` is also `python -m nbstream`.",
            "",
            '## `nbstream "prompt"`',
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
        ]
    )


# Before mkdocs-jupyter's on_files (priority 0), which makes a page of each notebook it is given.
@event_priority(50)
def on_files(files: Files, config: Any) -> Files:
    for uri, content in (
        ("reference/api.md", api_page()),
        ("reference/settings.md", settings_page()),
        ("reference/cli.md", cli_page()),
    ):
        files.append(File.generated(config, uri, content=content))
    for notebook in sorted(NOTEBOOKS.glob("*.ipynb")):
        uri = f"{LESSONS}/{notebook.name}"
        files.append(File.generated(config, uri, abs_src_path=str(notebook)))
    return files


def on_nav(nav: Any, config: Any, files: Files) -> None:
    # mkdocs-jupyter wraps each notebook's File in one that finds the source from `src_dir`,
    # which a file from outside docs_dir has not: give the wrapper the path itself.
    for file in files:
        if file.src_uri.startswith(f"{LESSONS}/") and file.src_uri.endswith(".ipynb"):
            file.abs_src_path = str(NOTEBOOKS / Path(file.src_uri).name)


# A notebook links its neighbours as they lie in notebooks/ ("chat.ipynb", "README.md"): on
# the site, the lesson's page and the home page's list of lessons.
_HREF = re.compile(r'href="([\w.-]+\.(?:ipynb|md))(#[\w-]*)?"')


def on_page_content(html: str, page: Page, config: Any, files: Files) -> str:
    if not page.file.src_uri.startswith(f"{LESSONS}/"):
        return html

    def site_link(match: re.Match[str]) -> str:
        name, anchor = match.group(1), match.group(2) or ""
        if name == "README.md":
            target, anchor = files.get_file_from_path("index.md"), "#lessons"
        else:
            target = files.get_file_from_path(f"{LESSONS}/{name}")
        if target is None:
            log.warning("%s links %s, which is no page of the site", page.file.src_uri, name)
            return match.group(0)
        return f'href="{target.url_relative_to(page.file)}{anchor}"'

    page.toc = _lesson_toc(page, html)
    return _HREF.sub(site_link, html)


def _lesson_toc(page: Page, html: str) -> Any:
    """A lesson page's contents, its headings whole.

    mkdocs-jupyter reads the headings with every inline code span removed (so that a
    ``# comment`` in code is no heading): "Before a class: `nbstream.doctor()`" became
    "Before a class:", linked to an id the page does not have. Here the markdown cells are
    read as Markdown (fenced code is code), each id made as nbconvert makes the heading's.
    """
    import markdown
    from mkdocs.structure.toc import get_toc
    from mkdocs_jupyter.utils import slugify

    cells = json.loads(Path(page.file.abs_src_path).read_text(encoding="utf-8"))["cells"]
    text = "\n\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")
    md = markdown.Markdown(
        extensions=["fenced_code", "toc"],
        extension_configs={"toc": {"slugify": lambda value, _separator: slugify(value)}},
    )
    md.convert(text)
    tokens = md.toc_tokens  # type: ignore[attr-defined]
    ids = set(re.findall(r'<h[1-6] id="([^"]+)"', html))
    stack = list(tokens)
    while stack:
        token = stack.pop()
        stack.extend(token["children"])
        if token["id"] not in ids:
            log.warning("%s: the contents link #%s, no heading of the page", page.url, token["id"])
    return get_toc(tokens)


# -- the lesson pages' weight ------------------------------------------------------------
#: Where the lesson pages' shared files go in the site.
SHARED = "assets/lessons"
#: A <style> block of a notebook page at least this long is JupyterLab's stylesheet, the
#: same on every lesson page (the page's own little rules stay inline).
SHARED_STYLE = 8_000
_STYLE = re.compile(r"<style[^>]*>(.*?)</style>", re.S)
_STATE = re.compile(
    r'(<script type="application/vnd\.jupyter\.widget-state\+json">)(.*?)(</script>)', re.S
)
# anywidget imports `_esm` (and links `_css`) from a URL only when it is absolute http(s),
# which the site's address is known only once it is served: the saved state names the shared
# file by a marker, which this script (run as the page is read, before the widget manager
# reads the state on DOMContentLoaded) turns into the file's absolute URL. So the widgets
# draw on a served site (`make docs`, any web host), not on pages opened as files.
_MARKER = "nbstream-site-asset:"
_MANAGER_ANY = "@jupyter-widgets/html-manager@*/"
_MANAGER_1 = "@jupyter-widgets/html-manager@^1.0/"
# The attribute (read from any script of the page by the widget manager) makes it load each
# widget's module from the CDN at once: it would first ask require.js for a relative
# "anywidget.js", which no lesson page has (a 404 on every page).
_RESOLVE = f"""<script data-jupyter-widgets-cdn-only>
(() => {{
  const state = document.querySelector('script[type="application/vnd.jupyter.widget-state+json"]');
  state.textContent = state.textContent.replace(
    /("_(?:esm|css)": )"{_MARKER}([^"\\\\]+)"/g,
    (_, key, path) => key + JSON.stringify(new URL(path, document.baseURI).href));
}})();
</script>"""


def _shared(config: Any, page: Page, text: str, suffix: str) -> str:
    """Write `text` once as a file of the site (named by its hash); its URL from `page`."""
    name = f"{SHARED}/{hashlib.sha256(text.encode()).hexdigest()[:16]}{suffix}"
    path = Path(config["site_dir"]) / name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return get_relative_url(name, page.url)


def _state_from_shared(config: Any, page: Page, match: re.Match[str]) -> str:
    # Written back with every "<" as "\u003c": nothing in it can end its <script> ("</")
    # or open a comment that would swallow the page ("<!--").
    state = json.loads(match.group(2))
    for model in state["state"].values():
        values = model["state"]
        for key, suffix in (("_esm", ".js"), ("_css", ".css")):
            text = values.get(key)
            if isinstance(text, str) and text and not text.startswith(("http:", "https:")):
                values[key] = _MARKER + _shared(config, page, text, suffix)
    text = json.dumps(state).replace("<", "\\u003c")
    return match.group(1) + text + match.group(3) + _RESOLVE


def on_post_page(output: str, page: Page, config: Any) -> str:
    if not page.file.src_uri.startswith(f"{LESSONS}/"):
        return output

    def style_from_shared(match: re.Match[str]) -> str:
        if len(match.group(1)) < SHARED_STYLE:
            return match.group(0)
        return f'<link rel="stylesheet" href="{_shared(config, page, match.group(1), ".css")}">'

    output = _STYLE.sub(style_from_shared, output)
    # nbconvert's template asks unpkg for the newest html-manager ("@*"): a major version
    # that changed the embedding would break every lesson page; 1.x is what it was made for.
    output = output.replace(_MANAGER_ANY, _MANAGER_1)
    return _STATE.sub(lambda match: _state_from_shared(config, page, match), output, count=1)
