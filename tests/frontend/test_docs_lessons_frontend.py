"""The documentation site's lesson pages show each saved widget's run, with no kernel.

The site is built once for the module (`mkdocs build --strict`, into a temporary folder),
served on 127.0.0.1 and opened in Chromium with no network: the CDN scripts the page loads
(require.js, @jupyter-widgets/html-manager, anywidget) come from local copies
(tests/cdn_pages.py); nothing else outside the local server is served. What the reader must
see is read from the notebook's own saved widget state, not from the page.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cdn_pages import cdn_copies, serve_cdn_copies
from playwright.sync_api import Browser, Page, expect

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
MKDOCS = Path(sys.executable).parent / "mkdocs"
LESSON = "recorded-lesson"
WAIT_MS = 60_000
#: What a lesson page may ask for beyond its own site and the widget manager's scripts: the
#: theme's web fonts, refused here (the page falls back to the system's fonts).
FONTS = ("fonts.googleapis.com", "fonts.gstatic.com")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documentation site, built strictly into a temporary folder."""
    folder = tmp_path_factory.mktemp("site")
    subprocess.run(
        [str(MKDOCS), "build", "--strict", "--quiet", "-d", str(folder)],
        cwd=REPO, check=True, timeout=600, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    return folder


@pytest.fixture(scope="module")
def site_url(site: Path, serve_folder: Any) -> Iterator[str]:
    """The built site, served on 127.0.0.1."""
    with serve_folder(site) as url:
        yield url


def _saved_runs(name: str) -> list[dict[str, Any]]:
    """The `snapshot` of each StreamWidget saved in notebooks/<name>.ipynb, in cell order."""
    notebook = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text(encoding="utf-8"))
    state = notebook["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]
    models = state["state"]
    shown = [
        output["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
        for cell in notebook["cells"]
        for output in cell.get("outputs", [])
        if "application/vnd.jupyter.widget-view+json" in output.get("data", {})
    ]
    return [
        models[model_id]["state"]["snapshot"]
        for model_id in shown
        # A view whose model was gone when the notebook was saved names none.
        if model_id in models
        and models[model_id]["state"].get("_anywidget_id", "").endswith(".StreamWidget")
    ]


# Every text the output's tokens show while a Replay plays, from the click until it ends.
_REPLAY = """async (root) => {
  const output = root.querySelector('.nbstream-output');
  const tokens = () => output.querySelectorAll('.nbstream-token');
  const now = () => [...tokens()].map((t) => t.textContent).join('');
  const seen = [now()];
  const watch = new MutationObserver(() => seen.push(now()));
  watch.observe(output, {subtree: true, childList: true, characterData: true});
  root.querySelector('.nbstream-replay').click();
  await new Promise((resolve) => {
    const poll = () => (root.getAttribute('data-replay') == null ? resolve() : setTimeout(poll, 5));
    poll();
  });
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  watch.disconnect();
  seen.push(now());
  return seen;
}"""


def test_every_lesson_has_a_page_in_the_nav(site: Path) -> None:
    home = (site / "index.html").read_text(encoding="utf-8")
    for notebook in sorted(NOTEBOOKS.glob("*.ipynb")):
        page = site / "lessons" / notebook.stem / "index.html"
        assert page.is_file(), f"{notebook.name} has no page in the site"
        assert f'href="lessons/{notebook.stem}/"' in home, f"{notebook.name} is not in the nav"
        # The page carries the saved widget state, which the widget manager draws from, and
        # asks for the widget manager's 1.x (not whatever unpkg has newest).
        text = page.read_text(encoding="utf-8")
        assert "application/vnd.jupyter.widget-state+json" in text
        assert "html-manager@^1.0/dist/embed-amd.js" in text and "html-manager@*" not in text


def test_the_site_publishes_no_build_code(site: Path) -> None:
    # The hooks and the griffe extension build the site; they are none of its files.
    published = sorted(p.name for p in site.rglob("*.py"))
    assert published == [], published


_CONTENTS_LINK = re.compile(
    r'<a href="#([^"]+)" class="md-nav__link">\s*<span class="md-ellipsis">\s*(.*?)\s*</span>', re.S
)


def test_the_contents_of_a_lesson_show_each_heading_whole(site: Path) -> None:
    """A heading with inline code is listed with its code, linked to the heading's id."""
    for notebook in sorted(NOTEBOOKS.glob("*.ipynb")):
        text = (site / "lessons" / notebook.stem / "index.html").read_text(encoding="utf-8")
        links = _CONTENTS_LINK.findall(text)
        assert links, f"{notebook.name}: no contents"
        ids = set(re.findall(r'<h[1-6] id="([^"]+)"', text))
        broken = [(anchor, title) for anchor, title in links if anchor not in ids]
        assert broken == [], f"{notebook.name}: contents linking no heading"
    quickstart = (site / "lessons" / "quickstart" / "index.html").read_text(encoding="utf-8")
    titles = {html.unescape(title) for _anchor, title in _CONTENTS_LINK.findall(quickstart)}
    assert "Before a class: nbstream.doctor()" in titles
    assert "From a cell: the %%nbstream magic" in titles


# The code blocks of the page whose shown code lies under their copy button (clipped to what
# each block's code shows), and how many blocks have a button: [[index, first line], count].
_UNDER_THE_BUTTON = """() => {
  const hits = [];
  let buttons = 0;
  document.querySelectorAll('pre').forEach((pre, i) => {
    const button = pre.querySelector('.md-code__button, .md-clipboard');
    const code = pre.querySelector(':scope > code');
    if (!button || !code) return;
    buttons += 1;
    const b = button.getBoundingClientRect();
    const c = code.getBoundingClientRect();
    const left = c.left + code.clientLeft, right = left + code.clientWidth;
    const top = c.top + code.clientTop, bottom = top + code.clientHeight;
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (!node.textContent.trim()) continue;
      const range = document.createRange();
      range.selectNodeContents(node);
      const under = [...range.getClientRects()].some((r) => {
        const l = Math.max(r.left, left, b.left), rt = Math.min(r.right, right, b.right);
        const t = Math.max(r.top, top, b.top), bt = Math.min(r.bottom, bottom, b.bottom);
        return rt > l && bt > t;
      });
      if (under) {
        hits.push([i, code.textContent.split('\\n')[0]]);
        return;
      }
    }
  });
  return [hits, buttons];
}"""


@pytest.mark.parametrize("width", [1280, 400])
def test_no_code_runs_under_a_copy_button(fe_browser: Browser, site_url: str, width: int) -> None:
    # install.md's first block has a first line longer than the page is wide.
    context = fe_browser.new_context(viewport={"width": width, "height": 900})
    page: Page = context.new_page()
    page.route(lambda url: not url.startswith(site_url), lambda route: route.abort())
    try:
        for path in ("install/", "guide/stream/"):
            page.goto(f"{site_url}/{path}")
            page.wait_for_selector(".md-code__button, .md-clipboard", state="attached")
            hits, buttons = page.evaluate(_UNDER_THE_BUTTON)
            assert buttons > 1, path
            assert hits == [], f"{path}: code under the copy button"
    finally:
        context.close()


def test_the_recorded_lesson_shows_its_run_and_replays_it(
    fe_browser: Browser, site_url: str
) -> None:
    (saved,) = _saved_runs(LESSON)
    context = fe_browser.new_context(viewport={"width": 1280, "height": 1000})
    page: Page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    # What the page asked its own site for and did not get (a module it looked for beside
    # itself before the CDN, say).
    missing: list[str] = []
    page.on("response", lambda r: r.status >= 400 and missing.append(f"{r.status} {r.url}"))
    refused = serve_cdn_copies(page, cdn_copies(), lambda url: url.startswith(site_url))
    try:
        page.goto(f"{site_url}/lessons/{LESSON}/")
        view = page.locator(".nbstream:not(.nbstream-chat)")
        expect(view).to_have_count(1, timeout=WAIT_MS)
        # The saved run, as it ended: its answer, its state, and no kernel to run it again.
        expect(view).to_have_attribute("data-status", "complete", timeout=WAIT_MS)
        expect(view.locator(".nbstream-badge")).to_contain_text("complete")
        expect(view.locator(".nbstream-saved")).to_be_visible(timeout=WAIT_MS)
        # A docs page has no cell to run again: the note says what the page is.
        expect(view.locator(".nbstream-saved-note")).to_have_text(
            "Saved output: this page has no kernel. It shows the last run as it was saved."
        )
        expect(view.get_by_role("button", name="Run", exact=True)).to_be_disabled()
        # The answer, shown token by token: every token the run recorded (the answer, then
        # the end-of-text token that ended it).
        shown = "".join(token[1] for token in saved["tokens"])
        assert shown.startswith(saved["text"]) and len(saved["tokens"]) > 2, saved
        output = view.locator(".nbstream-output")
        expect(output).to_have_text(shown)
        spans = view.locator(".nbstream-token")
        assert "".join(spans.all_text_contents()) == shown
        # A token's alternatives, as recorded, on click.
        spans.nth(1).click()
        pop = view.get_by_role("dialog", name="Alternatives at step 2")
        expect(pop).to_be_visible()
        expect(pop.locator("tbody tr")).to_have_count(len(saved["tokens"][1][5]))
        expect(pop.locator(".nbstream-alt-chosen")).to_contain_text(saved["tokens"][1][1].strip())
        # Why the token's actions are not offered: said once, not once per action.
        expect(pop.locator(".nbstream-no-kernel-note")).to_have_count(1)
        assert pop.inner_text().count("kernel") == 1, pop.inner_text()
        page.keyboard.press("Escape")
        expect(pop).to_have_count(0)
        # Replay: from less than the answer, growing, to the same text.
        seen = view.evaluate(_REPLAY)
        assert any(len(text) < len(saved["text"]) for text in seen), seen
        assert seen[-1] == shown
        assert "".join(spans.all_text_contents()) == shown
        assert errors == []
        assert missing == []
        assert all(any(host in url for host in FONTS) for url in refused), refused
    finally:
        context.close()
