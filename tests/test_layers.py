"""The package's seams: no module reaches into another's private names, no import circles.

The layers themselves (the engine never imports a widget, no widget imports the magics or
the CLI) are import-linter contracts in pyproject.toml, run by ``lint-imports`` in
``make check`` and ``make test``; the last test here runs them too, so a plain ``pytest``
catches a broken layer.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "nbstream"

#: Private names of other libraries read on purpose, each where and why. Nothing else may be.
FOREIGN_PRIVATE = {
    # namedtuple's documented API (its leading underscore only avoids field names).
    ("backends/remote/transport.py", "parts._replace"): "urllib.parse.SplitResult._replace",
    # The logits processors of a sampled step exactly as generate() builds them: transformers
    # has no public call for this list. tests/test_warpers.py fails when a transformers
    # changes what these build, before a user sees a run differ from generate().
    ("backends/local.py", "model._prepare_generation_config"): "transformers GenerationMixin",
    ("backends/local.py", "model._prepare_special_tokens"): "transformers GenerationMixin",
    ("backends/local.py", "model._prepare_generated_length"): "transformers GenerationMixin",
    ("backends/local.py", "model._get_logits_processor"): "transformers GenerationMixin",
}


def _defined_names(tree: ast.AST) -> set[str]:
    """Every name a file defines or assigns (functions, classes, attributes, variables)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def private_reach_ins(package: Path) -> list[str]:
    """Private names used across modules: imported from another module, or read from an
    object (a run, a model, a module) whose private names the reading file does not define.

    A private *module* (``_feed``, ``_cells``) is fine to import: its public names are the
    package's internal API. ``self._x`` and names the file itself defines are its own.
    """
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        own = _defined_names(tree)
        where = path.relative_to(package)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    name = alias.name
                    if not name.startswith("_") or name.startswith("__"):
                        continue
                    # `from . import _cells`: a private module of the package, not a name.
                    if node.module is None and (package / f"{name}.py").exists():
                        continue
                    found.append(f"{where}:{node.lineno} imports {name}")
            elif isinstance(node, ast.Attribute):
                name = node.attr
                if not name.startswith("_") or name.startswith("__") or name in own:
                    continue
                base = node.value
                if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                    continue
                if isinstance(base, ast.Call) and getattr(base.func, "id", None) == "super":
                    continue
                if (str(where), ast.unparse(node)) in FOREIGN_PRIVATE:
                    continue
                found.append(f"{where}:{node.lineno} reads {ast.unparse(node)}")
    return found


def test_no_module_reads_another_modules_private_names():
    assert private_reach_ins(PACKAGE) == []


def test_the_check_finds_a_reach_in(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text("def f(run):\n    return run._buffer\n")
    (package / "b.py").write_text("from .a import _helper\n")
    assert private_reach_ins(package) == ["a.py:2 reads run._buffer", "b.py:1 imports _helper"]


def test_no_import_circles():
    import grimp  # comes with import-linter (the test extra)

    graph = grimp.build_graph("nbstream")
    circles = sorted(
        {
            tuple(sorted((module, imported)))
            for module in graph.modules
            for imported in graph.find_modules_directly_imported_by(module)
            if graph.chain_exists(importer=imported, imported=module)
        }
    )
    assert circles == []


def test_import_linter_contracts_hold():
    command = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert command is not None, "install the test extra: pip install -e '.[test]'"
    result = subprocess.run(
        [command], cwd=PACKAGE.parent, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "0 broken" in result.stdout


def _layered(layers: list[str]) -> set[str]:
    return {name.strip() for layer in layers for name in layer.split("|")}


def uncovered_modules(package: Path, layers: list[str]) -> list[str]:
    """Modules of ``package`` that sit in no layer (a layer names a module or a package)."""
    named = _layered(layers)
    missing = []
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if len(parts) == 1:
            continue  # the root package itself
        prefixes = {".".join(parts[:i]) for i in range(2, len(parts) + 1)}
        if not prefixes & named:
            missing.append(".".join(parts))
    return missing


def _root_layers() -> list[str]:
    import tomllib

    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (root,) = [c for c in contracts if c["type"] == "layers" and not c.get("containers")]
    layers: list[str] = root["layers"]
    return layers


def _contained_layers() -> list[tuple[str, list[str]]]:
    import tomllib

    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    return [
        (container, c["layers"])
        for c in contracts
        if c["type"] == "layers"
        for container in c.get("containers", [])
    ]


def test_every_module_sits_in_a_layer():
    assert uncovered_modules(PACKAGE, _root_layers()) == []


def test_every_module_of_a_layered_package_sits_in_one_of_its_layers():
    """A package with layers of its own (the widgets, the remote backend) places each of its
    modules: one left out could import anything in that package unchecked."""
    contained = _contained_layers()
    assert {name for name, _ in contained} >= {"nbstream.widgets", "nbstream.backends.remote"}
    for container, layers in contained:
        package = PACKAGE.parent.joinpath(*container.split("."))
        short = container.rsplit(".", 1)[-1]  # as uncovered_modules names them
        named = [f"{short}.{name}" for name in _layered(layers)]
        missing = uncovered_modules(package, named)
        assert missing == [], f"{container}: add {missing} to a layer in pyproject.toml"


def test_a_new_module_outside_the_layers_is_found(tmp_path):
    package = tmp_path / "nbstream"
    (package / "widgets").mkdir(parents=True)
    for name in ("__init__.py", "engine.py", "loose.py", "widgets/__init__.py", "widgets/new.py"):
        (package / name).write_text("")
    assert uncovered_modules(package, ["nbstream.widgets", "nbstream.engine"]) == ["nbstream.loose"]
