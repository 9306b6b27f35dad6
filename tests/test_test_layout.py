"""The test suite's own layout: shared code lives in helper modules, not in test modules.

A test module imports no other test module and no conftest.py (pytest loads a conftest on
its own, and `from conftest import` finds whichever tier's conftest comes first on
`sys.path`). Helpers are in a module per tier (tests/helpers.py, tests/fake_server.py,
tests/branching_server.py, tests/frontend/frontend_helpers.py,
tests/browser/browser_helpers.py, ...), fixtures in the tier's conftest.py. Every tier's
folder is on `sys.path` at once, so no two helper modules share a name.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
FILES = sorted(TESTS.rglob("*.py"))


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in the file, at any depth (functions included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
    return found


def is_test_or_conftest(module: str) -> bool:
    last = module.rsplit(".", 1)[-1]
    return last.startswith("test_") or last == "conftest"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(TESTS)))
def test_no_file_imports_a_test_module_or_a_conftest(path: Path) -> None:
    wrong = [f"line {line}: {module}" for line, module in imported_modules(path)]
    wrong = [w for w in wrong if is_test_or_conftest(w.split(": ", 1)[1])]
    assert not wrong, (
        f"{path.relative_to(TESTS)} imports a test module or a conftest: {wrong}; move what "
        "it needs to the tier's helper module (or, for a fixture, to its conftest.py)"
    )


def test_no_two_helper_modules_share_a_name() -> None:
    helpers = [p for p in FILES if not p.name.startswith("test_") and p.name != "conftest.py"]
    counts = Counter(p.name for p in helpers)
    assert [name for name, n in counts.items() if n > 1] == []


def test_the_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    source = tmp_path / "sample.py"
    source.write_text(
        "import test_widget\n"
        "from conftest import REPO\n"
        "def f():\n"
        "    from test_remote import fake\n"
        "from helpers import Recorder\n"
        "import tests.conftest\n"
    )
    wrong = [m for _, m in imported_modules(source) if is_test_or_conftest(m)]
    assert wrong == ["test_widget", "conftest", "tests.conftest", "test_remote"]
