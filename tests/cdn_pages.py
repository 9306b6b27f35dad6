"""The CDN scripts of a saved notebook's HTML page, served from local copies.

A page of a notebook saved with its widget state (`jupyter nbconvert --to html`, a lesson
page of the documentation site) loads its widget manager from CDNs: require.js, then
@jupyter-widgets/html-manager's embed-amd.js, then each widget's module (anywidget). `npm
pack` puts copies of them in test-artifacts/cdn once (npm's cache keeps them for later
runs); `serve_cdn_copies` answers a page's requests for them with those copies, as a
reader's CDN would, so a test needs no network.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock
from playwright.sync_api import Page, Route

__all__ = ["CDN", "PACKAGES", "cdn_copies", "cdn_copy_for", "serve_cdn_copies"]

REPO = Path(__file__).resolve().parent.parent
CDN = REPO / "test-artifacts" / "cdn"
#: The npm packages such a page loads, and the file of each it loads.
PACKAGES = {
    "requirejs@2.3.7": "require.js",
    "@jupyter-widgets/html-manager@1.0.15": "dist/embed-amd.js",
    "anywidget@0.11.0": "dist/index.js",
}


def _copy(spec: str) -> Path:
    name = spec.rsplit("@", 1)[0].replace("/", "-").lstrip("@")
    return CDN / name / "package" / PACKAGES[spec]


def cdn_copies() -> dict[str, Path]:
    """The local copy of each package's file, packed from npm the first time.

    Returns:
        The file of each of `PACKAGES`, by its spec.

    Example:
        >>> cdn_copies()["anywidget@0.11.0"].name
        'index.js'
    """
    CDN.mkdir(parents=True, exist_ok=True)
    # Two test processes (make test's xdist workers) may ask at once: one packs, the other
    # waits, and a copy appears whole or not at all (unpacked beside it, then renamed).
    with FileLock(CDN / ".lock"):
        for spec in PACKAGES:
            target = _copy(spec)
            if not target.exists():
                _pack(spec, target)
    return {spec: _copy(spec) for spec in PACKAGES}


def _pack(spec: str, target: Path) -> None:
    packed = subprocess.run(
        ["npm", "pack", spec, "--pack-destination", str(CDN), "--silent"],
        capture_output=True, text=True, cwd=CDN, timeout=300, check=True,
    )  # fmt: skip
    tarball = CDN / packed.stdout.strip().splitlines()[-1]
    folder = target.parents[len(Path(PACKAGES[spec]).parts)]  # the package's own folder
    with tempfile.TemporaryDirectory(dir=CDN) as scratch:
        with tarfile.open(tarball) as archive:
            archive.extractall(scratch, filter="data")
        unpacked = Path(scratch) / "package"
        assert (unpacked / PACKAGES[spec]).exists(), f"{spec} has no {PACKAGES[spec]}"
        shutil.rmtree(folder / "package", ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
        os.replace(unpacked, folder / "package")


def cdn_copy_for(url: str, copies: dict[str, Path]) -> Path | None:
    """The local copy that answers `url`, or None when it asks for anything else.

    The page names require.js on cdnjs (whichever version: 2.3.7 answers), the html-manager
    on unpkg or jsDelivr (a version or a range), anywidget on jsDelivr.

    Args:
        url: the URL the page asked for.
        copies: what `cdn_copies` returned.

    Returns:
        The file to answer with, or None.

    Example:
        >>> cdn_copy_for("https://unpkg.com/@jupyter-widgets/html-manager@*/dist/embed-amd.js",
        ...              cdn_copies()).name
        'embed-amd.js'
    """
    if "cdnjs" in url and "require" in url and url.endswith(".js"):
        return copies["requirejs@2.3.7"]
    if "/@jupyter-widgets/html-manager@" in url and url.endswith("/embed-amd.js"):
        return copies["@jupyter-widgets/html-manager@1.0.15"]
    if "/anywidget@" in url and url.endswith("/index.js"):
        return copies["anywidget@0.11.0"]
    return None


def serve_cdn_copies(
    page: Page, copies: dict[str, Path], local: Callable[[str], bool]
) -> list[str]:
    """Answer `page`'s CDN requests from `copies`, let the `local` ones through, refuse the
    rest.

    Args:
        page: the page, before it is opened.
        copies: what `cdn_copies` returned.
        local: whether a URL is the test's own (a file:// page, a local server).

    Returns:
        The list (filled as the page runs) of the URLs refused.

    Example:
        >>> refused = serve_cdn_copies(page, cdn_copies(), lambda u: u.startswith("file:"))
    """
    refused: list[str] = []

    def handle(route: Route) -> None:
        url = route.request.url
        copy = cdn_copy_for(url, copies)
        if local(url):
            route.continue_()
        elif copy is not None:
            route.fulfill(path=copy, content_type="text/javascript")
        else:
            refused.append(url)
            route.abort()

    page.route("**/*", handle)
    return refused
