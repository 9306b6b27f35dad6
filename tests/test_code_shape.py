"""The shape of the code: short functions, so each one reads at a glance.

The front end has the same limit through Biome's ``noExcessiveLinesPerFunction`` rule
(``make js-lint``); this is the kernel side's.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "nbstream"
#: Lines of a function, from its ``def`` to its last line, docstring and comments included.
MAX_LINES = 60


def long_functions(package: Path, limit: int = MAX_LINES) -> list[tuple[int, str]]:
    """(lines, "path:line name") of every function longer than ``limit`` lines."""
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    where = f"{path.relative_to(package.parent)}:{node.lineno} {node.name}"
                    found.append((lines, where))
    return sorted(found, reverse=True)


def test_no_function_is_longer_than_sixty_lines():
    assert long_functions(PACKAGE) == []


def test_the_check_finds_a_long_function(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (package / "m.py").write_text(f"def short():\n    pass\n\n\ndef long():\n{body}\n")
    assert long_functions(package) == [(MAX_LINES + 1, "pkg/m.py:5 long")]
