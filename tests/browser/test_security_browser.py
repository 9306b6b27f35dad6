"""Hostile model output in a real JupyterLab: nothing executes, nothing escapes the output.

A language model's answer is untrusted input (prompt injection puts anything in it). The
forced model (nbstream.testing.forced_model) generates exactly the payload's tokens, which
go through the whole path a real answer takes: engine, deltas, Markdown, sanitizer, DOM.
"""

from __future__ import annotations

import ast
import base64

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

SETUP = """\
import torch
torch.set_num_threads(1)
import nbstream
from nbstream.testing import forced_model
"""

_HTML_PAGE = base64.b64encode(b"<script>parent.__pwned=1</script>").decode()
_SVG = base64.b64encode(
    b'<svg xmlns="http://www.w3.org/2000/svg" onload="parent.__pwned=1"><script>'
    b"parent.__pwned=1</script></svg>"
).decode()
_PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJ"
    "RU5ErkJggg=="
)

# Each line is one way output has been used to attack a page that renders it.
ATTACKS = [
    "<script>window.__pwned=1</script>",
    '<img src=x onerror="window.__pwned=1">',
    '<svg onload="window.__pwned=1"><script>window.__pwned=1</script></svg>',
    "[js link](javascript:window.__pwned=1) and [JS upper](JAVASCRIPT:window.__pwned=1)",
    f"[data page](data:text/html;base64,{_HTML_PAGE})",
    f"![svg image](data:image/svg+xml;base64,{_SVG})",
    f"![png pixel](data:image/png;base64,{_PNG})",
    "<javascript:window.__pwned=1>",
    '<a href="javascript:window.__pwned=1">raw anchor</a>',
    '<iframe src="javascript:window.__pwned=1"></iframe>',
    "<style>body { display: none !important }</style>",
    '<div style="position:fixed;inset:0;z-index:2147483647;background:red">overlay</div>',
    "[ref link][r]\n\n[r]: javascript:window.__pwned=1",
    '<math><mi xlink:href="javascript:window.__pwned=1">m</mi></math>',
    "```html\n<script>window.__pwned=1</script>\n```",
]
PAYLOAD = "\n\n".join(["Here is the answer.", *ATTACKS, "The end."])

_ESCAPES = """(out) => {
  const box = out.getBoundingClientRect();
  const inside = (r) => r.left >= box.left - 1 && r.right <= box.right + 1;
  const bad = [];
  for (const e of out.querySelectorAll('*')) {
    const cs = getComputedStyle(e);
    const pos = cs.position;
    if (pos === 'fixed' || pos === 'sticky') bad.push(e.tagName + ' ' + pos);
    if (e.hasAttribute('style')) bad.push(e.tagName + ' has a style attribute');
    const r = e.getBoundingClientRect();
    if (r.width && !inside(r)) bad.push(e.tagName + ' sticks out sideways');
  }
  if (out.querySelector('style, link, meta, base')) bad.push('a style/link/meta/base element');
  return bad;
}"""

# Points of the page outside the widget: what is on top there must not be the widget's output.
_TOPMOST = """(out) => {
  const pts = [[5, 5], [innerWidth - 5, 5], [5, innerHeight - 5], [innerWidth / 2, 5]];
  return pts.map(([x, y]) => { const e = document.elementFromPoint(x, y);
    return e && out.contains(e) ? 'output at ' + x + ',' + y : null; }).filter(Boolean);
}"""


def test_hostile_output_executes_nothing_and_stays_inside_the_output(lab, figures):
    nb = lab.open_notebook(
        [
            SETUP,
            f"model, tokenizer = forced_model({PAYLOAD!r})\n"
            "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=2000)\n"
            "w",
            "run = w.generate('say it')",
        ]
    )
    for i in range(3):
        nb.run_cell(i)
    v = nb.cell(1).locator(".nbstream").first
    expect(v).to_have_attribute("data-status", "complete", timeout=120_000)
    assert ast.literal_eval(nb.kernel_eval("w.result")) == PAYLOAD  # the model said it all
    out = v.locator(".nbstream-output")
    expect(out).to_contain_text("The end.")
    # Shown as text, not markup.
    expect(out).to_contain_text("<script>window.__pwned=1</script>")
    expect(out).to_contain_text("<style>body { display: none !important }</style>")

    # Click everything that looks like a link, hover everything else.
    for a in out.locator("a").all():
        href = a.get_attribute("href")
        assert href is None or href.startswith(("https:", "http:", "mailto:")), href
        if href is None:
            a.click()
    for text in (
        "js link",
        "JS upper",
        "data page",
        "svg image",
        "png pixel",
        "raw anchor",
        "ref link",
        "overlay",
    ):
        target = out.get_by_text(text).first
        target.hover()
        target.click()
    nb.page.wait_for_timeout(300)  # give anything that would run a chance to

    for frame in nb.page.frames:
        assert frame.evaluate("typeof window.__pwned") == "undefined"
    assert len(nb.context.pages) == 1  # no window opened
    assert out.locator("script, img, iframe, object, embed, svg, math, style").count() == 0
    handlers = out.evaluate(
        """(o) => [...o.querySelectorAll('*')].flatMap((e) => [...e.attributes]
              .filter((a) => a.name.startsWith('on')
                 || /^\\s*(javascript|data|vbscript):/i.test(a.value))
              .map((a) => e.tagName + ' ' + a.name))"""
    )
    assert handlers == []
    assert out.evaluate(_ESCAPES) == []
    assert out.evaluate(_TOPMOST) == []
    # The page itself is untouched: the notebook is still visible around the widget.
    assert nb.page.evaluate("getComputedStyle(document.body).display") != "none"
    expect(nb.page.locator(".jp-NotebookPanel-toolbar").first).to_be_visible()
    assert nb.console_errors() == []
    figures["xss"] = {"payloads": len(ATTACKS), "executed": 0}
