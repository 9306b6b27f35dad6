"""The README gallery's dark pictures: docs/dark-stream.png, docs/dark-chat.png and
docs/dark-compare.png, on the default model in JupyterLab Dark.

Not a test (pytest does not collect it): run it by hand when the look changes,

    .venv/bin/python tests/browser/dark_gallery.py

It starts its own JupyterLab (the harness's isolated folders), switches it to JupyterLab
Dark with JupyterLab's own command, runs the three widgets on the default model and writes
a picture of each widget's output into docs/ (about two minutes on a 2-core CPU).
test_themes_browser.py checks that everything in them is legible in every theme.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from browser_helpers import MS, REPO, SETUP, STREAM_TIMEOUT, kval, set_theme, wait_until  # noqa: E402
from jupyter_harness import CHROMIUM, CHROMIUM_ARGS, Jupyter, JupyterServer  # noqa: E402
from playwright.sync_api import expect, sync_playwright  # noqa: E402

DOCS = REPO / "docs"
STREAM = """\
w = nbstream.StreamWidget(max_new_tokens=40, temperature=0.8, seed=3,
                          show_tokens=True, show_probabilities=True)
w.prompt = 'Complete the sentence: The best thing about autumn is'
w"""
CHAT = """\
chat = nbstream.ChatWidget(max_new_tokens=60)
chat.generate('Name two colors.')
chat.wait()
chat.generate('Which one is warmer?')
chat.wait()
chat"""
COMPARE = """\
cw = nbstream.CompareWidget(None, None, 'Write one sentence about the sea.',
                            settings=[{"temperature": 0}, {"temperature": 0.9}],
                            max_new_tokens=40, seed=7)
cw"""
CELLS = [SETUP, STREAM, CHAT, COMPARE]
SHOTS = {"stream": 1, "chat": 2, "compare": 3}


def main() -> None:
    server = JupyterServer("lab")
    server.start()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            jupyter = Jupyter(server, browser)
            try:
                nb = jupyter.open_notebook(CELLS, name="Gallery.ipynb")
                set_theme(nb, "JupyterLab Dark")
                for i in range(len(CELLS)):
                    nb.run_cell(i, timeout=600)
                stream = nb.cell(1).locator(".nbstream").first
                nb.kernel_eval("w.generate() and None")
                expect(stream).to_have_attribute(
                    "data-status", "complete", timeout=STREAM_TIMEOUT * MS
                )
                nb.kernel_eval("cw.run() and None")
                wait_until(
                    lambda: kval(nb, "cw.statuses") == ["complete", "complete"],
                    STREAM_TIMEOUT,
                    what="both columns complete",
                )
                nb.page.wait_for_timeout(500)  # the last frame rendered
                for name, cell in SHOTS.items():
                    out = nb.cell(cell).locator(".jp-OutputArea-output").first
                    out.scroll_into_view_if_needed()
                    out.screenshot(path=str(DOCS / f"dark-{name}.png"))
                    print(f"wrote docs/dark-{name}.png")
            finally:
                jupyter.close()
                browser.close()
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()
