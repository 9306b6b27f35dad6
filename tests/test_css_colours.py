"""Nothing nbstream draws is hard-coded white or black.

A white or black in a stylesheet is right in one theme and wrong in the other (white text on
JupyterLab Dark's lighter blue reads 3.1:1), so colours come from JupyterLab's --jp-*
variables. A literal is allowed only as the fallback of a `var()` (what a host without
JupyterLab's variables, VS Code or Colab, gets) or in ALLOWED below, each with its reason.
tests/browser/test_themes_browser.py checks the result in each theme with axe-core.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "js" / "src"

# A white or a black, in any CSS spelling (hex with or without alpha, keyword, rgb()/rgba(),
# hsl()). "white" in `white-space` is no colour: the keyword must stand alone.
_HEX = r"#(?:fff|ffff|ffffff|ffffff[0-9a-f]{2}|000|0000|000000|000000[0-9a-f]{2})(?![0-9a-f])"
_KEYWORD = r"(?<![\w-])(?:white|black)(?![\w-])"
_RGB = r"rgba?\(\s*(?:0\s*[, ]\s*0\s*[, ]\s*0|255\s*[, ]\s*255\s*[, ]\s*255)(?:\s*[,/][^)]*)?\)"
_HSL = r"hsla?\(\s*[\d.]+(?:deg)?\s*[, ]\s*[\d.]+%\s*[, ]\s*(?:0|100)%[^)]*\)"
WHITE_OR_BLACK = re.compile(f"{_HEX}|{_KEYWORD}|{_RGB}|{_HSL}", re.IGNORECASE)

#: (file, the literal's line with surrounding spaces stripped) -> why it may stay.
ALLOWED: dict[tuple[str, str], str] = {
    (
        "shading.js",
        'const fg = (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) ? "#000" : "#fff";',
    ): "the text on a probability shade: the shades are a fixed palette (viridis) that is "
    "the same in every theme, so the text on each is black or white, whichever contrasts "
    "more with that shade (at least 4.58:1, js/test/tokens.test.js)",
}


def _strip_css_comments(text: str) -> str:
    # keep the line count (and so the line numbers) of what is left
    return re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group().count("\n"), text, flags=re.DOTALL)


def _in_var_fallback(text: str, pos: int) -> bool:
    """Whether `pos` lies in the fallback of a var(): after the first top-level comma of an
    enclosing `var(` call."""
    depth_commas: list[tuple[bool, bool]] = []  # per open paren: (is var(, comma seen)
    for i in range(pos):
        c = text[i]
        if c == "(":
            depth_commas.append((text[max(0, i - 3) : i] == "var", False))
        elif c == ")" and depth_commas:
            depth_commas.pop()
        elif c == "," and depth_commas:
            is_var, _ = depth_commas[-1]
            depth_commas[-1] = (is_var, True)
        elif c in ";{}":
            depth_commas.clear()
    return any(is_var and comma for is_var, comma in depth_commas)


def hard_coded(name: str, text: str) -> list[str]:
    """Each white or black literal in `text` (a stylesheet, or a script's string literals)
    that is neither a var() fallback nor allowed, as 'file:line: the line'."""
    if name.endswith(".css"):
        text = _strip_css_comments(text)
    lines = text.splitlines()
    found = []
    for m in WHITE_OR_BLACK.finditer(text):
        if name.endswith(".js") and not _in_js_string(text, m.start()):
            continue
        if _in_var_fallback(text, m.start()):
            continue
        line_no = text.count("\n", 0, m.start())
        line = lines[line_no].strip()
        if (name, line) in ALLOWED:
            continue
        found.append(f"{name}:{line_no + 1}: {line}")
    return found


def _in_js_string(text: str, pos: int) -> bool:
    """Whether `pos` is inside a string literal ('...', "..." or `...`) on its line: a
    colour in a script is a string (comments and identifiers such as `whitespace` are not)."""
    start = text.rfind("\n", 0, pos) + 1
    line = text[start:pos]
    if line.lstrip().startswith(("//", "*", "/*")):
        return False
    quote = None
    for c in line:
        if quote is None and c in "'\"`":
            quote = c
        elif c == quote:
            quote = None
    return quote is not None


def sources() -> list[Path]:
    files = sorted([*SRC.glob("*.css"), *SRC.glob("*.js")])
    assert files, f"no sources in {SRC}"
    return files


@pytest.mark.parametrize("path", sources(), ids=lambda p: p.name)
def test_no_hard_coded_white_or_black(path: Path) -> None:
    found = hard_coded(path.name, path.read_text(encoding="utf-8"))
    assert not found, (
        "hard-coded white or black (use a JupyterLab --jp-* variable, a --nbs-* one built "
        "on them, or a var() fallback; or add it to ALLOWED with the reason):\n" + "\n".join(found)
    )


def test_allowed_literals_still_exist() -> None:
    """An entry of ALLOWED whose line is gone is stale: remove it."""
    for name, line in ALLOWED:
        text = (SRC / name).read_text(encoding="utf-8")
        assert line in (x.strip() for x in text.splitlines()), f"stale ALLOWED entry: {name}"


@pytest.mark.parametrize(
    ("css", "flagged"),
    [
        ("a { color: #fff; }", True),
        ("a { color: #FFFFFF; }", True),
        ("a { background: #000000cc; }", True),
        ("a { color: white; }", True),
        ("a { border: 1px solid black; }", True),
        ("a { box-shadow: 0 1px 2px rgba(0, 0, 0, 0.3); }", True),
        ("a { color: rgb(255 255 255 / 50%); }", True),
        ("a { color: hsl(0, 0%, 100%); }", True),
        ("a { white-space: pre-wrap; }", False),
        ("a { color: #fffe00; }", False),
        ("a { color: #0000ff; }", False),
        ("a { color: var(--jp-ui-font-color1, #000); }", False),
        ("a { color: var(--jp-x, var(--vscode-y, rgba(0, 0, 0, 0.87))); }", False),
        ("a { color: var(--jp-x); background: #fff; }", True),
        ("/* white text */ a { color: var(--jp-x); }", False),
    ],
)
def test_the_scan_tells_a_hard_coded_colour_from_a_fallback(css: str, flagged: bool) -> None:
    assert bool(hard_coded("x.css", css)) is flagged


@pytest.mark.parametrize(
    ("js", "flagged"),
    [
        ('el.style.color = "#fff";', True),
        ("const c = 'black';", True),
        ("el.style.background = `rgba(0,0,0,0.5)`;", True),
        ("// white text on the shade", False),
        ("const whitespace = 1; // black box", False),
        ('el.style.color = "var(--jp-ui-font-color1, #000)";', False),
    ],
)
def test_the_scan_reads_colours_in_script_strings(js: str, flagged: bool) -> None:
    assert bool(hard_coded("x.js", js)) is flagged
