"""Fixtures for the front-end tests: a static file server and headless Chromium.

The built bundle (nbstream/static/stream.js) is loaded by tests/frontend/harness.html
with a fake anywidget model; no Jupyter server is involved.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page

REPO = Path(__file__).resolve().parents[2]


class _QuietHandler(SimpleHTTPRequestHandler):
    extensions_map = {  # noqa: RUF012 - class attribute of the stdlib handler
        **SimpleHTTPRequestHandler.extensions_map,
        ".js": "text/javascript",
        ".mjs": "text/javascript",
        ".css": "text/css",
    }

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def _serving(folder: Path) -> Iterator[str]:
    """Serve `folder` on 127.0.0.1 while the block runs; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="session")
def fe_server() -> Iterator[str]:
    """Serve the repository root on 127.0.0.1; yields the base URL."""
    with _serving(REPO) as url:
        yield url


@pytest.fixture(scope="session")
def serve_folder() -> Any:
    """Serve another folder (a built site): ``with serve_folder(path) as url: ...``."""
    return _serving


@pytest.fixture(scope="module")
def fe_browser(chromium: Browser) -> Browser:
    """The module's Chromium (tests/conftest.py)."""
    return chromium


# One browser context per Chromium and page height, each test's page a new page in it: the
# pages share the HTTP cache, so the bundles are fetched and compiled once per module instead
# of once per test (0.36 s a page instead of 0.5 here). Nothing of a page's own state (its
# DOM, scripts, focus, routes) outlives it; the bundles keep nothing in storage.
_CONTEXTS: dict[tuple[Browser, int], BrowserContext] = {}


def _context(browser: Browser, height: int) -> BrowserContext:
    for key in [k for k in _CONTEXTS if not k[0].is_connected()]:
        del _CONTEXTS[key]  # their Chromium was closed with its module
    context = _CONTEXTS.get((browser, height))
    if context is None:
        context = browser.new_context(viewport={"width": 900, "height": height})
        _CONTEXTS[(browser, height)] = context
    return context


@contextlib.contextmanager
def harness_page(
    browser: Browser, server: str, bundle: str = "widget", height: int = 900
) -> Iterator[Page]:
    """A fresh page with the harness loading `bundle` (widget, chat or compare); fails the
    test on any page error or on a fetch from outside the local server."""
    page = _context(browser, height).new_page()
    page_errors: list[str] = []
    page.on("pageerror", lambda exc: page_errors.append(str(exc)))
    # Nothing outside the local server may be fetched (the bundle is self-contained).
    outside: list[str] = []

    def block_outside(route):
        outside.append(route.request.url)
        route.abort()

    page.route(lambda url: not url.startswith(server), block_outside)
    query = "" if bundle == "widget" else f"?bundle={bundle}"
    page.goto(f"{server}/tests/frontend/harness.html{query}")
    page.wait_for_function("window.__ready === true")
    try:
        yield page
        errors = page.evaluate("window.__errors") + page_errors
        assert errors == [], f"errors in the page: {errors}"
        assert outside == [], f"the page tried to fetch {outside}"
    finally:
        page.close()


@pytest.fixture
def fe_page(fe_browser: Browser, fe_server: str) -> Iterator[Page]:
    """A fresh page with the harness loaded (the StreamWidget bundle)."""
    with harness_page(fe_browser, fe_server) as page:
        yield page


@pytest.fixture
def compare_page(fe_browser: Browser, fe_server: str) -> Iterator[Page]:
    """A fresh page with the harness loading the CompareWidget header's bundle."""
    with harness_page(fe_browser, fe_server, "compare", height=600) as page:
        yield page


@pytest.fixture
def chat_harness_page(fe_browser: Browser, fe_server: str) -> Iterator[Page]:
    """A fresh page with the harness loading the ChatWidget's bundle."""
    with harness_page(fe_browser, fe_server, "chat") as page:
        yield page


@pytest.fixture
def chat_page(fe_browser: Browser, fe_server: str) -> Iterator[Page]:
    """A fresh page, in a browser context of its own, with the harness loading the chat bundle."""
    context = fe_browser.new_context(viewport={"width": 900, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    outside: list[str] = []

    def block_outside(route: Any) -> None:
        outside.append(route.request.url)
        route.abort()

    page.route(lambda url: not url.startswith(fe_server), block_outside)
    page.goto(f"{fe_server}/tests/frontend/harness.html?bundle=chat")
    page.wait_for_function("window.__ready === true")
    try:
        yield page
        assert page.evaluate("window.__errors") + errors == []
        assert outside == []
    finally:
        context.close()
