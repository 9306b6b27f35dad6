"""`voila notebooks/quickstart.ipynb` serves a working app: teachers publish demos this way.

Voila runs the notebook in a fresh kernel and shows only its outputs; the StreamWidget it
displays must then stream from the page and stop from the page, as in JupyterLab.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_helpers import RENDER_TIMEOUT_MS, voila_serving
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def voila_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("voila") / "voila.log"
    with voila_serving(REPO / "notebooks" / "quickstart.ipynb", log) as url:
        yield url


def test_voila_serves_the_quickstart_and_the_widget_streams_and_stops(
    chromium, voila_url: str
) -> None:
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page: Page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(voila_url, timeout=RENDER_TIMEOUT_MS)
        root = page.locator(".nbstream").first
        expect(root).to_be_visible(timeout=RENDER_TIMEOUT_MS)
        # The tour's runs are over: the view shows the widget's last state, not "running".
        expect(root).to_have_attribute(
            "data-status", _one_of("complete", "failed", "cancelled"), timeout=RENDER_TIMEOUT_MS
        )
        # No code is shown: Voila serves outputs only.
        expect(page.get_by_text("nbstream.StreamWidget(max_new_tokens=")).to_have_count(0)

        prompt = root.get_by_role("textbox", name="Prompt", exact=True)
        prompt.fill("Write a long story about a lighthouse keeper and the sea.")
        root.get_by_role("button", name="Run", exact=True).click()
        output = root.locator(".nbstream-output")
        expect(root).to_have_attribute("data-status", "running", timeout=60_000)
        # Text appears and grows while it runs.
        expect(output).not_to_have_text("", timeout=60_000)
        first = len(output.inner_text())
        deadline = time.monotonic() + 60
        while len(output.inner_text()) <= first and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(output.inner_text()) > first, "the text did not grow"
        expect(root).to_have_attribute("data-status", "running")
        root.get_by_role("button", name="Stop", exact=True).click()
        expect(root).to_have_attribute("data-status", "cancelled", timeout=30_000)
        expect(output).to_have_attribute("data-partial", "true")
        expect(root.get_by_role("button", name="Run", exact=True)).to_be_enabled()
        assert errors == []
    finally:
        context.close()


def _one_of(*values: str) -> re.Pattern[str]:
    return re.compile("^(" + "|".join(map(re.escape, values)) + ")$")
