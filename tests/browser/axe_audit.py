"""Accessibility audits with axe-core in a real page.

axe-core comes from npm as a dev dependency of the front end (js/package.json): it is
injected into the page under test by the browser tests only, never bundled into nbstream.
`make test` installs it (`make js` runs `npm ci`); on its own, run `make js` once.

Use::

    from axe_audit import assert_accessible
    assert_accessible(nb.page, "a complete StreamWidget")            # every .nbstream root
    assert_accessible(nb.page, "the open popover", ".nbstream-popover")

Only what nbstream draws is audited (`.nbstream` roots by default): JupyterLab's own chrome
is not ours to fix. The rules are WCAG 2.0/2.1 A and AA, colour contrast included.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

AXE_JS = Path(__file__).resolve().parents[2] / "js" / "node_modules" / "axe-core" / "axe.min.js"

#: The WCAG rule sets audited.
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]


def _inject(page: Any) -> None:
    if page.evaluate("() => typeof window.axe === 'object'"):
        return
    if not AXE_JS.exists():
        raise RuntimeError(
            f"axe-core is not installed ({AXE_JS} is missing): run `make js` "
            "(it runs npm ci in js/), then run the test again"
        )
    page.add_script_tag(path=str(AXE_JS))


# JupyterLab's and Notebook 7's <body> has no height (everything in it is positioned
# absolutely) and overflow: hidden, so axe took every element as clipped by the body, hence
# invisible, and skipped its colour contrast (it checked none of the text in the page). Sized
# to the viewport, the body clips nothing that is on screen. (Axe still skips what a scrolled
# container hides: scroll what you audit into view.)
_FIT_BODY = """() => {
  for (const e of [document.documentElement, document.body]) {
    if (e.offsetHeight === 0) e.style.height = '100%';
  }
}"""


def _fit_body(page: Any) -> None:
    page.evaluate(_FIT_BODY)


def audit(
    page: Any,
    selector: str = ".nbstream",
    rules: list[str] | None = None,
    kind: str = "violations",
) -> list[dict[str, Any]]:
    """axe's violations over every element matching `selector` (and what is inside them):
    a list of {id, impact, help, nodes: [{target, summary}]}; empty when all is well.
    `rules` limits the audit to those rule ids (e.g. ["color-contrast"]). `kind="incomplete"`
    gives what axe could not decide instead (colour contrast over a background image or
    an element it cannot see comes back there, not as a violation: check it too)."""
    _inject(page)
    _fit_body(page)
    options: dict[str, Any] = (
        {"runOnly": {"type": "rule", "values": rules}}
        if rules
        else {"runOnly": {"type": "tag", "values": TAGS}}
    )
    found = page.evaluate(
        """async ([selector, options, kind]) => {
            const roots = [...document.querySelectorAll(selector)];
            if (!roots.length) return {missing: true};
            const result = await window.axe.run(roots, options);
            return {violations: result[kind].map((v) => ({
                id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.map((n) => ({
                    target: n.target.join(" "), summary: n.failureSummary,
                })),
            }))};
        }""",
        [selector, options, kind],
    )
    if found.get("missing"):
        raise AssertionError(f"nothing on the page matches {selector!r}: nothing to audit")
    violations: list[dict[str, Any]] = found["violations"]
    return violations


def describe(violations: list[dict[str, Any]]) -> str:
    """The violations in words, one node per line (for an assertion message)."""
    lines = []
    for v in violations:
        lines.append(f"{v['id']} ({v['impact']}): {v['help']}")
        for node in v["nodes"][:8]:
            summary = " ".join(str(node["summary"] or "").split())
            lines.append(f"    {node['target']}: {summary[:300]}")
    return "\n".join(lines)


def assert_accessible(
    page: Any, what: str, selector: str = ".nbstream", rules: list[str] | None = None
) -> None:
    """Fail, naming each violation and where, unless axe finds none in `selector`."""
    violations = audit(page, selector, rules)
    assert not violations, f"axe-core found violations in {what}:\n{describe(violations)}"


def dump(violations: list[dict[str, Any]]) -> str:
    return json.dumps(violations, indent=1)
