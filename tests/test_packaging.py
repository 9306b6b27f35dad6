"""The release artifacts: a wheel and an sdist built from this tree, checked with twine, and
the wheel installed into a fresh virtual environment with no Node.js on the PATH, where
`import nbstream` and the quickstart browser test pass.

The fresh environment gets nbstream from the wheel only. Its dependencies (torch,
transformers, JupyterLab... about 2 GB) are borrowed from the test environment through a
.pth file rather than installed again: what is under test is what the wheel carries.
"""

from __future__ import annotations

import email
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

import nbstream

REPO = Path(__file__).resolve().parents[1]
STATIC = (
    "nbstream/static/stream.js",
    "nbstream/static/stream.css",
    "nbstream/static/chat.js",
    "nbstream/static/chat.css",
    "nbstream/static/compare.js",
    "nbstream/static/compare.css",
)


def _run(
    cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def _no_node_env() -> dict[str, str]:
    """This environment without Node.js: PATH keeps only folders with no node or npm."""
    env = dict(os.environ)
    keep = [
        p
        for p in env.get("PATH", "").split(os.pathsep)
        if p and not any((Path(p) / exe).exists() for exe in ("node", "npm", "nodejs"))
    ]
    env["PATH"] = os.pathsep.join(keep)
    env.pop("PYTHONPATH", None)
    return env


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: the build backend (hatchling) comes from the test environment, so the
    # build needs no network and no Node.js (the front end is built and committed).
    _run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO)],
        env=_no_node_env(),
    )
    wheels = list(out.glob("nbstream-*.whl"))
    sdists = list(out.glob("nbstream-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list(out.iterdir())
    return {"wheel": wheels[0], "sdist": sdists[0], "dir": out}


def test_wheel_carries_the_built_front_end_and_type_information(dist: dict[str, Path]) -> None:
    with zipfile.ZipFile(dist["wheel"]) as whl:
        names = set(whl.namelist())
        for path in STATIC:
            assert whl.read(path) == (REPO / path).read_bytes(), path
        assert "nbstream/py.typed" in names
        # The JupyterLab extension (No Kernel), where JupyterLab looks for it once installed.
        lab = "data/share/jupyter/labextensions/nbstream/package.json"
        assert f"nbstream-{nbstream.__version__}.data/{lab}" in names
        assert not any(n.startswith(("tests/", "js/", "benchmarks/")) for n in names)
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_bytes(whl.read(info))
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    # The version lives in one place: nbstream/_version.py.
    assert meta["Version"] == nbstream.__version__
    assert dist["wheel"].name.startswith(f"nbstream-{nbstream.__version__}-")
    classifiers = meta.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers and "Framework :: Jupyter" in classifiers
    assert meta["License-Expression"] == "MIT"
    requires = " ".join(meta.get_all("Requires-Dist") or [])
    for dep in ("torch", "transformers", "anywidget", "ipywidgets"):
        assert dep in requires
    bundle = (REPO / STATIC[0]).read_text(encoding="ascii")
    assert f'"{nbstream.__version__}"' in bundle  # the front end's copy of the version


def test_sdist_carries_sources_and_the_built_front_end(dist: dict[str, Path]) -> None:
    with tarfile.open(dist["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for path in (
        *STATIC,
        "js/src/stream.js",
        "js/src/stream.css",
        "js/src/chat.js",
        "js/src/chat.css",
        "js/src/compare.js",
        "js/src/compare.css",
        "js/src/live_text.js",
        "js/package-lock.json",
        "js/build.mjs",
        "pyproject.toml",
        "README.md",
        "CHANGELOG.md",
        "LICENSE",
        "nbstream/py.typed",
        "notebooks/quickstart.ipynb",
    ):
        assert path in names, path
    assert not any("node_modules" in n for n in names)


def test_twine_check_passes(dist: dict[str, Path]) -> None:
    proc = _run(
        [sys.executable, "-m", "twine", "check", "--strict", str(dist["wheel"]), str(dist["sdist"])]
    )
    assert proc.stdout.count("PASSED") == 2, proc.stdout


def test_sdist_builds_a_wheel_without_node(dist: dict[str, Path], tmp_path: Path) -> None:
    """A user installing from the sdist has no Node.js: the sdist's wheel has the front end."""
    with tarfile.open(dist["sdist"]) as tar:
        tar.extractall(tmp_path, filter="data")
    (src,) = tmp_path.iterdir()
    out = tmp_path / "out"
    _run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(out),
            str(src),
        ],
        env=_no_node_env(),
    )
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as whl:
        for path in STATIC:
            assert whl.read(path) == (REPO / path).read_bytes(), path


@pytest.mark.browser
def test_installed_wheel_works_in_a_fresh_environment(
    dist: dict[str, Path], tmp_path: Path
) -> None:
    """A minute or so: a JupyterLab of its own in the fresh environment, and the quickstart
    run cell by cell in it on the default model (tests/browser/quickstart_in_jupyterlab.py,
    which only this test runs)."""
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    site = Path(
        _run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
        ).stdout.strip()
    )
    # Dependencies from the test environment (see the module docstring). A .pth line only
    # adds the folder: the .pth files in it, among them this checkout's editable install,
    # are not processed, so the checkout stays out of the fresh environment.
    (site / "_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    # ...and the Jupyter data files that come with them (JupyterLab's app, the widget
    # manager's and anywidget's lab extensions) under <prefix>/share/jupyter.
    (venv / "share").mkdir(exist_ok=True)
    (venv / "share" / "jupyter").symlink_to(Path(sys.prefix) / "share" / "jupyter")
    _run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(dist["wheel"])])
    env = _no_node_env()
    assert shutil.which("node", path=env["PATH"]) is None
    check = (
        "import importlib.metadata as m, pathlib, nbstream, sys;"
        "w = nbstream.StreamWidget.__dict__;"
        "print(nbstream.__file__);"
        "print(m.version('nbstream') == nbstream.__version__);"
        "print(pathlib.Path(nbstream.__file__).with_name('static').joinpath('stream.js').is_file())"
    )
    out = _run([str(py), "-c", check], cwd=tmp_path, env=env).stdout.split()
    assert Path(out[0]).resolve().is_relative_to(site.resolve()), out
    assert out[1:] == ["True", "True"], out
    # The quickstart, in JupyterLab, with the kernel on the fresh environment's Python.
    env["NBSTREAM_EXPECT_INSTALLED"] = str(site)
    proc = subprocess.run(
        [
            str(py),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(REPO / "tests" / "browser" / "quickstart_in_jupyterlab.py"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert "1 passed" in proc.stdout


def test_mypy_strict_is_clean() -> None:
    """The package ships py.typed, so its annotations are a promise: mypy --strict (the
    settings in pyproject.toml) finds nothing.

    A minute on a clean clone (mypy reads torch's and transformers' stubs); incremental, so
    after `make check` (which runs the same mypy) it reuses its cache and takes seconds.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "mypy"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert "Success: no issues found" in proc.stdout
