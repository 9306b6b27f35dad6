"""A griffe extension: Sphinx cross-reference roles in docstrings become autorefs links.

nbstream's docstrings name other objects the Sphinx way (``:class:`~nbstream.Generation```,
``:meth:`generate```); mkdocstrings reads them as Google-style Markdown, where a role is
raw text. When the package is loaded, this rewrites each role in every docstring:

- to ``[`Generation`][nbstream.Generation]`` (``~`` keeps the last name as the text,
  without it the text is the name as written), where the name resolves, from the
  docstring's class and module, to an object the API page renders;
- to plain ``` `generate` ``` code otherwise (a private name, a module the API page leaves
  out, a typo), so a role can never become a broken link that fails the strict build.

Loaded by mkdocs.yml (``mkdocstrings`` → ``handlers.python.options.extensions``). Which
objects are rendered mirrors the API page (``docs/hooks.py``: the names of
``nbstream.__all__`` and ``PUBLIC_MODULES``) and the handler options in mkdocs.yml (names
starting with ``_`` filtered out, none without a docstring, inherited members only for the
classes of ``INHERITED_MEMBERS``).
"""

from __future__ import annotations

import importlib.util
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import griffe

logger = logging.getLogger("mkdocs.plugins.griffe_roles")

#: ``:class:`x```, ``:py:meth:`x```, ...: the role's name, then its target.
ROLE = re.compile(r":(?:py:)?(class|func|meth|attr|mod|data|exc|obj):`([^`]+)`")
#: A role's target with its own title: ``the title <target>``.
TITLED = re.compile(r"(.+?)\s*<([^<>]+)>", re.DOTALL)


def _hooks() -> Any:
    """``docs/hooks.py``, read from the file beside this one."""
    spec = importlib.util.spec_from_file_location("_nbstream_docs_hooks",
                                                  Path(__file__).with_name("hooks.py"))
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return hooks


def _api_roots(package: str) -> list[str]:
    """The documented roots: ``hooks.PUBLIC_MODULES``."""
    return [m for m in _hooks().PUBLIC_MODULES if m.startswith(package + ".")]


def _final(obj: griffe.Object | griffe.Alias) -> griffe.Object | None:
    try:
        return obj.final_target if isinstance(obj, griffe.Alias) else obj
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def _rendered_members(obj: griffe.Object | griffe.Alias,
                      inherited: bool = False) -> Iterator[tuple[str, griffe.Object]]:
    """The members the handler renders (``filters: ["!^_"]``, docstrings; ``inherited``:
    a class of ``hooks.INHERITED_MEMBERS``, whose inherited members are rendered too)."""
    target = _final(obj)
    if target is None or not (target.is_class or target.is_module):
        return
    members = target.all_members if inherited and target.is_class else target.members
    for name, member in members.items():
        if name.startswith("_"):
            continue
        final = _final(member)
        if final is None or final.is_module or not final.has_docstrings:
            continue
        if member.is_alias and not member.is_public:
            continue
        yield name, final


class RolesExtension(griffe.Extension):
    """Rewrites the Sphinx roles of every docstring of the package once it is loaded."""

    def __init__(self, package: str = "nbstream") -> None:
        self.package = package
        #: An object's canonical path → the identifier its heading has on the API page.
        self.anchors: dict[str, str] = {}

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader,
                   **kwargs: Any) -> None:
        if pkg.name != self.package:
            return
        self._collect(pkg)
        for obj in self._walk(pkg):
            if obj.docstring is not None and ROLE.search(obj.docstring.value):
                obj.docstring.value = ROLE.sub(lambda m, o=obj: self._link(m, o),
                                               obj.docstring.value)

    def _collect(self, pkg: griffe.Module) -> None:
        roots: list[tuple[str, griffe.Object | griffe.Alias]] = []
        inherited = set(_hooks().INHERITED_MEMBERS)
        for name in pkg.exports or ():
            if isinstance(name, str) and not name.startswith("_") and name in pkg.members:
                roots.append((f"{pkg.path}.{name}", pkg.members[name], name in inherited))
        for path in _api_roots(pkg.path):
            try:
                roots.append((path, pkg.modules_collection[path], False))
            except KeyError:
                logger.warning("griffe_roles: no module %s", path)
        for identifier, obj, with_inherited in roots:
            self._add(identifier, obj, with_inherited)

    def _add(self, identifier: str, obj: griffe.Object | griffe.Alias,
             inherited: bool = False) -> None:
        final = _final(obj)
        if final is None:
            return
        # The first root that renders an object wins: ``nbstream.X`` before its module.
        self.anchors.setdefault(final.canonical_path, identifier)
        for name, member in _rendered_members(final, inherited):
            self._add(f"{identifier}.{name}", member)

    def _walk(self, obj: griffe.Object) -> Iterator[griffe.Object]:
        yield obj
        for member in obj.members.values():
            if not member.is_alias and member.parent is obj:
                yield from self._walk(member)  # type: ignore[arg-type]

    def _link(self, match: re.Match[str], where: griffe.Object) -> str:
        role, target = match.groups()
        title = None
        if titled := TITLED.fullmatch(target):  # :meth:`the title <target>`
            title, target = titled.groups()
        short = target.startswith("~")
        target = target.lstrip("~!")
        text = title or (target.rsplit(".", 1)[-1] if short else target)
        if not match.group(2).startswith("!"):
            found = self._resolve(target, where)
            if found is not None and found.canonical_path in self.anchors:
                return f"[`{text}`][{self.anchors[found.canonical_path]}]"
        logger.debug("griffe_roles: %s:%s in %s shown as code", role, target, where.path)
        return f"`{text}`"

    def _resolve(self, target: str, where: griffe.Object) -> griffe.Object | None:
        """The object ``target`` names, seen from ``where`` as Sphinx would look it up."""
        first, _, rest = target.partition(".")
        scopes: list[griffe.Object] = []
        scope: griffe.Object | None = where
        while scope is not None:  # The docstring's object, its class, its module, ...
            scopes.append(scope)
            scope = scope.parent
        for scope in scopes:
            # A class's inherited members too (a widget's ``show``, from its base class).
            members = scope.all_members if scope.is_class else scope.members
            if first in members:
                found = _final(members[first])
                if found is not None and rest:
                    found = self._lookup(found, rest)
                if found is not None:
                    return found
        try:
            return _final(where.modules_collection[target])
        except (KeyError, ValueError):
            return None

    @staticmethod
    def _lookup(obj: griffe.Object, dotted: str) -> griffe.Object | None:
        for name in dotted.split("."):
            if name not in obj.members:
                return None
            found = _final(obj.members[name])
            if found is None:
                return None
            obj = found
        return obj
