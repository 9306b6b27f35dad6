"""A saved notebook shows each StreamWidget's last run, and a chat's turns, without a kernel.

One notebook, executed once as `make notebooks` does (widget state stored), is opened
three times: converted with `jupyter nbconvert --to html` and loaded from a file with no
Jupyter server and no network; reopened in JupyterLab, whose fresh kernel holds none of its
widgets; and opened in JupyterLab with "No Kernel" chosen in the kernel picker, where only
nbstream's JupyterLab extension (labextension/src) makes the widgets load from the saved
state (ipywidgets' own manager waits for a kernel) and no kernel is started. Each time the
views show the answer, its state, a token's alternatives on click, and a Replay that
streams to the same text; axe finds nothing in the kernel-less view.

The HTML page loads its widget manager from a CDN (require.js, @jupyter-widgets/html-manager,
then the widgets' module, anywidget). They are served from local copies, as a reader's CDN
would serve them: `npm pack` puts them in test-artifacts/cdn once (npm's cache keeps them
for later runs); nothing else the page asks for is served.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from axe_audit import assert_accessible
from cdn_pages import cdn_copies, serve_cdn_copies
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
JUPYTER = Path(sys.executable).parent / "jupyter"
ANSWER = "Red and **blue** are two colors; *green* is a third, and grey is a shade."
TOKENS_ANSWER = "Red and blue are colors."
CHAT_QUESTION = "What is the capital of France?"
CHAT_ANSWER = "Paris is the capital of France."
WAIT_MS = 60_000

NOTEBOOK_CELLS = [
    "import nbstream\nfrom nbstream.testing import forced_model",
    f"model, tokenizer = forced_model({ANSWER!r})\nw = nbstream.StreamWidget(model, tokenizer)\nw",
    "w.generate('Name two colors.', max_new_tokens=60)\nw.wait()",
    f"model2, tokenizer2 = forced_model({TOKENS_ANSWER!r})\n"
    "t = nbstream.StreamWidget(model2, tokenizer2, show_alternatives=True)\nt",
    "t.generate('Name colors.', max_new_tokens=30)\nt.wait()",
    f"c = nbstream.ChatWidget(*forced_model({CHAT_ANSWER!r}), max_new_tokens=20)\nc",
    f"c.generate({CHAT_QUESTION!r})\nc.wait()",
]


@pytest.fixture(scope="module")
def cdn() -> dict[str, Path]:
    """Local copies of the scripts the exported page loads from CDNs (npm pack, once)."""
    return cdn_copies()


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The notebook executed with its widget state stored, and its HTML export."""
    folder = tmp_path_factory.mktemp("kernelless")
    notebook = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {},
             "outputs": [], "source": source}
            for i, source in enumerate(NOTEBOOK_CELLS)
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                    "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }  # fmt: skip
    source = folder / "lesson.ipynb"
    source.write_text(json.dumps(notebook))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    run = [str(JUPYTER), "nbconvert", "--log-level=ERROR"]
    subprocess.run(
        [*run, "--to", "notebook", "--execute", "--inplace",
         "--ExecutePreprocessor.timeout=300", "--ExecutePreprocessor.store_widget_state=True",
         "--ExecutePreprocessor.record_timing=False", str(source)],
        check=True, env=env, timeout=600,
    )  # fmt: skip
    subprocess.run([*run, "--to", "html", str(source)], check=True, env=env, timeout=300)
    executed = json.loads(source.read_text())
    state = executed["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    snapshots = [m["state"]["snapshot"] for m in state.values() if "snapshot" in m["state"]]
    assert len(snapshots) == 2 and all(snapshots), "the saved state has no snapshot of a run"
    by_text = {s["text"]: s for s in snapshots}
    assert set(by_text) == {ANSWER, TOKENS_ANSWER}
    return {
        "notebook": executed,
        "html": folder / "lesson.html",
        "snapshots": by_text,
    }


def _serve_from_copies(page: Page, cdn: dict[str, Path]) -> list[str]:
    """Serve the page's CDN scripts from `cdn`, refuse everything else; returns the refused."""
    return serve_cdn_copies(page, cdn, lambda url: url.startswith("file:"))


# Every text (and token count) the output shows while a Replay plays, then how long it
# played (ms).
_REPLAY = """async (root) => {
  const output = root.querySelector('.nbstream-output');
  const now = () => ({
    text: output.textContent, tokens: output.querySelectorAll('.nbstream-token').length,
  });
  const seen = [now()];
  const watch = new MutationObserver(() => seen.push(now()));
  watch.observe(output, {subtree: true, childList: true, characterData: true});
  const t0 = performance.now();
  root.querySelector('.nbstream-replay').click();
  await new Promise((resolve) => {
    const done = () => root.getAttribute('data-replay') == null;
    const poll = () => (done() ? resolve() : setTimeout(poll, 5));
    poll();
  });
  const took = performance.now() - t0;
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  watch.disconnect();
  seen.push(now());
  return {seen, took};
}"""


def _recorded_ms(snapshot: dict[str, Any]) -> int:
    return sum(snapshot["steps"][0::2])


def _check_views(page: Page, snapshots: dict[str, dict[str, Any]], where: str) -> None:
    """The two saved views: answer, state, alternatives on click, Replay, no axe violation."""
    views = page.locator(".nbstream:not(.nbstream-chat)")
    expect(views).to_have_count(2, timeout=WAIT_MS)
    plain, tokens = views.nth(0), views.nth(1)
    for view in (plain, tokens):
        expect(view).to_have_attribute("data-status", "complete", timeout=WAIT_MS)
        expect(view.locator(".nbstream-badge")).to_contain_text("complete")
        # No kernel answered: the view says so and offers Replay; nothing can Run.
        expect(view.locator(".nbstream-saved")).to_be_visible(timeout=WAIT_MS)
        expect(view.get_by_role("button", name="Run", exact=True)).to_be_disabled()
    # The answer, rendered as Markdown.
    rendered = plain.locator(".nbstream-rendered")
    expect(rendered.locator("strong")).to_have_text("blue")
    expect(rendered.locator("em")).to_have_text("green")
    expect(rendered).to_have_text(ANSWER.replace("**", "").replace("*", ""))
    # The token view, and a token's alternatives on click.
    spans = tokens.locator(".nbstream-token")
    expect(spans.first).to_be_visible()
    assert "".join(spans.all_text_contents()).startswith(TOKENS_ANSWER), where
    spans.nth(1).click()
    pop = tokens.get_by_role("dialog", name="Alternatives at step 2")
    expect(pop).to_be_visible()
    expect(pop.locator("tbody tr").nth(1)).to_be_attached()  # two rows or more
    expect(pop.locator(".nbstream-alt-chosen")).to_have_count(1)
    # Continuing from another token needs the model: not offered, and said why, once for
    # every action of the token.
    expect(pop.locator(".nbstream-branch-continue")).to_have_count(0)
    expect(pop.locator(".nbstream-no-kernel-note")).to_contain_text("Saved output")
    expect(pop.locator(".nbstream-branch-unavailable")).to_have_count(0)
    page.keyboard.press("Escape")
    expect(pop).to_have_count(0)
    assert_accessible(page, f"a saved StreamWidget without a kernel ({where})")

    # Replay: from an empty answer, growing, to the same text, no faster than recorded.
    played = plain.evaluate(_REPLAY)
    final = (rendered.text_content() or "").strip()
    texts = [seen["text"] for seen in played["seen"]]
    assert any(len(t) < len(final) for t in texts), f"{where}: the replay never streamed"
    assert texts[-1].strip() == final
    assert final == ANSWER.replace("**", "").replace("*", "")
    assert played["took"] >= _recorded_ms(snapshots[ANSWER]), played["took"]
    # The token view replays its tokens too, to the same list.
    before = spans.all_text_contents()
    played = tokens.evaluate(_REPLAY)
    counts = [seen["tokens"] for seen in played["seen"]]
    assert min(counts) < len(before), f"{where}: the tokens were not replayed: {counts}"
    assert spans.all_text_contents() == before


def _check_chat(page: Page, where: str) -> None:
    """The saved chat: both turns' text, the answer's state, nothing to send to."""
    chat = page.locator(".nbstream-chat")
    expect(chat).to_have_count(1, timeout=WAIT_MS)
    messages = chat.locator(".nbstream-message")
    expect(messages).to_have_count(2, timeout=WAIT_MS)
    expect(messages.nth(0)).to_contain_text(CHAT_QUESTION)
    expect(messages.nth(1)).to_contain_text(CHAT_ANSWER)
    expect(chat).to_have_attribute("data-status", "complete", timeout=WAIT_MS)
    # No kernel answered: the chat says so, and nothing can be sent.
    expect(chat.locator(".nbstream-saved")).to_be_visible(timeout=WAIT_MS)
    expect(chat.locator(".nbstream-send")).to_be_disabled()
    assert_accessible(page, f"a saved ChatWidget without a kernel ({where})")


def test_the_html_export_shows_the_runs_with_no_server_and_no_network(
    chromium: Any, cdn: dict[str, Path], saved: dict[str, Any]
) -> None:
    """Up to 50 s, most of it the module's `saved` fixture (shared by every test here): the
    notebook executed headless with its widget state stored, then exported to HTML."""
    context = chromium.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    refused = _serve_from_copies(page, cdn)
    try:
        page.goto(saved["html"].as_uri())
        _check_views(page, saved["snapshots"], "nbconvert --to html")
        _check_chat(page, "nbconvert --to html")
        assert errors == []
        # What the page asked for beyond the widget manager: MathJax only, refused.
        assert all("mathjax" in url.lower() for url in refused), refused
    finally:
        context.close()


def _trust(server: Any, path: Path) -> None:
    """Sign the notebook for this server, as for the reader who ran it (an untrusted notebook
    shows no widget view, only the text fallback)."""
    env = {**os.environ, "JUPYTER_DATA_DIR": str(server.base_dir / "data")}
    subprocess.run([str(JUPYTER), "trust", str(path)], check=True, env=env, timeout=120)


def _open(chromium: Any, url: str) -> tuple[Any, Page, list[str]]:
    context = chromium.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url, wait_until="domcontentloaded")
    return context, page, errors


def test_jupyterlab_reopened_shows_the_runs_without_their_kernel(
    lab_server: Any, chromium: Any, saved: dict[str, Any]
) -> None:
    # Reopened: JupyterLab starts a fresh kernel, which holds none of the saved widgets (the
    # cells are not run again), so no kernel answers their views.
    name = "saved-lesson.ipynb"
    path = lab_server.root_dir / name
    path.write_text(json.dumps(saved["notebook"]))
    _trust(lab_server, path)
    context, page, errors = _open(chromium, lab_server.notebook_url(name))
    try:
        _check_views(page, saved["snapshots"], "JupyterLab, reopened")
        _check_chat(page, "JupyterLab, reopened")
        assert errors == []
    finally:
        context.close()
        lab_server.shutdown_sessions(name)


def test_jupyterlab_with_no_kernel_shows_the_runs_and_starts_none(
    lab_server: Any, chromium: Any, saved: dict[str, Any]
) -> None:
    # A notebook that names no kernel (nor language) makes JupyterLab ask which one; the
    # reader picks "No Kernel". Without nbstream's extension every widget output says
    # "Loading widget..." for ever.
    name = "no-kernel-lesson.ipynb"
    notebook = copy.deepcopy(saved["notebook"])
    del notebook["metadata"]["kernelspec"], notebook["metadata"]["language_info"]
    path = lab_server.root_dir / name
    path.write_text(json.dumps(notebook))
    _trust(lab_server, path)
    context = chromium.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    sockets: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("websocket", lambda ws: sockets.append(ws.url))
    try:
        page.goto(lab_server.notebook_url(name), wait_until="domcontentloaded")
        picker = page.locator(".jp-Dialog").filter(has_text="Select Kernel")
        expect(picker).to_be_visible(timeout=WAIT_MS)
        picker.locator("select").select_option(label="No Kernel")
        picker.locator(".jp-Dialog-footer .jp-mod-accept").click()
        expect(picker).to_have_count(0)
        _check_views(page, saved["snapshots"], "JupyterLab, No Kernel")
        _check_chat(page, "JupyterLab, No Kernel")
        expect(page.get_by_text("Loading widget").filter(visible=True)).to_have_count(0)
        assert errors == []
        # No kernel was started or connected for the notebook.
        shown = page.evaluate(
            "() => window.jupyterapp.shell.currentWidget.sessionContext.kernelDisplayName"
        )
        assert shown == "No Kernel"
        sessions = lab_server.api("GET", "/api/sessions")
        assert [s for s in sessions if s["path"] == name] == []
        assert [url for url in sockets if "/api/kernels/" in url] == []
    finally:
        context.close()
        lab_server.shutdown_sessions(name)
