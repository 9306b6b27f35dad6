"""The code's shape: the figures that say whether it reads as its layers promise.

Printed, not asserted (the tests assert the limits: ``tests/test_code_shape.py``,
``tests/test_layers.py``, ``tests/test_test_layout.py``, ``tests/test_backend_interface.py``
and Biome's ``noExcessiveLinesPerFunction``):

1. Modules per package of ``nbstream``.
2. Functions over 60 lines, Python (``ast``) and JavaScript (``js/tools/function-sizes.mjs``).
3. Rooms: Python classes over 400 lines or 40 methods, and the largest ones; Python modules
   over 1,000 lines; the largest page modules of ``js/src`` (its generated ``.d.ts`` aside),
   those over 800 lines flagged.
4. ``getattr``/``hasattr`` probes of a backend or a job.
5. Modules under no import-linter layer.
6. Imports of one test module (or a ``conftest``) by another.
7. The longest docstring.

Usage::

    python -m benchmarks.shape
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "nbstream"
LIMIT = 60
#: A room a newcomer can hold in their head (issue 40): a class's lines and methods, a
#: Python module's lines, a page module's lines.
CLASS_LINES = 400
CLASS_METHODS = 40
PYTHON_MODULE_LINES = 1000
JS_MODULE_LINES = 800
#: How many of the largest classes and page modules are printed.
LARGEST = 5
#: A probe of a backend or a job: ``getattr(backend, ...)``, ``hasattr(self._job, ...)``.
PROBE = re.compile(r"\b(getattr|hasattr)\((self\.)?_?(backend|job|endpoint)\s*,")


def _modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found.append((".".join(parts), path))
    return found


def modules_per_package() -> dict[str, int]:
    """How many modules each package holds (its ``__init__`` included)."""
    return dict(Counter(str(path.parent.relative_to(ROOT)) for _, path in _modules()))


def long_python_functions() -> list[str]:
    """Every Python function of nbstream over the limit, as "lines path:line name"."""
    found = []
    for _, path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > LIMIT:
                    found.append(f"{lines} {path.relative_to(ROOT)}:{node.lineno} {node.name}")
    return found


def long_js_functions() -> str:
    """What ``js/tools/function-sizes.mjs --max 60`` prints (needs Node.js and js/node_modules)."""
    node = shutil.which("node")
    if node is None or not (ROOT / "js" / "node_modules").is_dir():
        return "not measured: needs Node.js and `make js-lint` once (js/node_modules)"
    result = subprocess.run(
        [node, "tools/function-sizes.mjs", "--max", str(LIMIT)],
        cwd=ROOT / "js",
        capture_output=True,
        text=True,
        timeout=120,
    )
    return (result.stdout + result.stderr).strip()


def python_classes() -> list[tuple[int, int, str]]:
    """(lines, methods, "path:line name") of every class of nbstream, largest first.

    Its methods are the functions defined in its body (properties included); its lines run
    from ``class`` to its last line, docstring and comments included.
    """
    found = []
    for _, path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                methods = sum(
                    isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) for item in node.body
                )
                where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
                found.append((lines, methods, where))
    return sorted(found, reverse=True)


def _line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def long_python_modules() -> list[tuple[int, str]]:
    """(lines, path) of every module of nbstream over PYTHON_MODULE_LINES, longest first."""
    sizes = [(_line_count(path), str(path.relative_to(ROOT))) for _, path in _modules()]
    return sorted((s for s in sizes if s[0] > PYTHON_MODULE_LINES), reverse=True)


def js_modules() -> list[tuple[int, str]]:
    """(lines, name) of every page module of js/src (the generated ``.d.ts`` aside), longest
    first."""
    sizes = [(_line_count(path), path.name) for path in (ROOT / "js" / "src").glob("*.js")]
    return sorted(sizes, reverse=True)


def backend_probes() -> list[str]:
    """Lines of nbstream that probe a backend or a job with getattr/hasattr."""
    return [
        f"{path.relative_to(ROOT)}:{number}"
        for _, path in _modules()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if PROBE.search(line)
    ]


def modules_outside_the_layers() -> list[str]:
    """Modules that sit in no layer of pyproject.toml's root layers contract."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (root,) = [c for c in contracts if c["type"] == "layers" and not c.get("containers")]
    named = {name.strip() for layer in root["layers"] for name in layer.split("|")}
    missing = []
    for module, _ in _modules():
        parts = module.split(".")
        if len(parts) > 1 and not {".".join(parts[:i]) for i in range(2, len(parts) + 1)} & named:
            missing.append(module)
    return missing


def test_cross_imports() -> list[str]:
    """Imports of a ``test_*`` module or a ``conftest`` by a file under tests/."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            for name in names:
                first = name.split(".")[0]
                if first.startswith("test_") or first == "conftest":
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    return found


def longest_docstring() -> tuple[int, str]:
    """(lines, "path name") of nbstream's longest docstring."""
    best = (0, "")
    for _, path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    name = getattr(node, "name", "(module)")
                    best = max(best, (doc.count("\n") + 1, f"{path.relative_to(ROOT)} {name}"))
    return best


def main() -> None:
    packages = modules_per_package()
    print("modules per package:", ", ".join(f"{k} {v}" for k, v in sorted(packages.items())))
    python = long_python_functions()
    print(f"Python functions over {LIMIT} lines: {len(python)}", *python, sep="\n  ")
    print(f"JavaScript functions over {LIMIT} lines:", long_js_functions())
    classes = python_classes()
    big = [c for c in classes if c[0] > CLASS_LINES or c[1] > CLASS_METHODS]
    rows = [f"{lines} lines, {methods} methods: {where}" for lines, methods, where in big]
    print(
        f"Python classes over {CLASS_LINES} lines or {CLASS_METHODS} methods: {len(big)}",
        *rows,
        sep="\n  ",
    )
    largest = [f"{where} ({lines} lines, {methods} methods)" for lines, methods, where in classes]
    print("largest Python classes:", *largest[:LARGEST], sep="\n  ")
    modules = [f"{lines} {where}" for lines, where in long_python_modules()]
    heading = f"Python modules over {PYTHON_MODULE_LINES:,} lines: {len(modules)}"
    print(heading, *modules, sep="\n  ")
    pages = js_modules()
    over = [f"{lines} js/src/{name}" for lines, name in pages if lines > JS_MODULE_LINES]
    print(f"JavaScript modules over {JS_MODULE_LINES} lines: {len(over)}", *over, sep="\n  ")
    top = ", ".join(f"{name} {lines}" for lines, name in pages[:LARGEST])
    print(f"largest JavaScript modules ({len(pages)} in js/src): {top}")
    probes = backend_probes()
    print(f"getattr/hasattr probes of a backend or job: {len(probes)}", *probes, sep="\n  ")
    outside = modules_outside_the_layers()
    print(f"modules under no contract: {len(outside)}", *outside, sep="\n  ")
    cross = test_cross_imports()
    print(f"test-module cross-imports: {len(cross)}", *cross, sep="\n  ")
    lines, where = longest_docstring()
    print(f"longest docstring: {lines} lines ({where})")


if __name__ == "__main__":
    main()
