"""The code's shape: the figures that say whether it reads as its layers promise.

Printed, not asserted (the tests assert the limits: ``tests/test_code_shape.py``,
``tests/test_layers.py``, ``tests/test_test_layout.py``, ``tests/test_backend_interface.py``
and Biome's ``noExcessiveLinesPerFunction``):

1. Modules per package of ``nbstream``.
2. Functions over 60 lines, Python (``ast``) and JavaScript (``js/tools/function-sizes.mjs``).
3. ``getattr``/``hasattr`` probes of a backend or a job.
4. Modules under no import-linter layer.
5. Imports of one test module (or a ``conftest``) by another.
6. The longest docstring.

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
