"""What binder/ tells repo2docker, checked without building: the Python, and where the model goes.

tests/test_binder.py builds the image's environment for real (slow tier); these check the
choices that a build here cannot see: repo2docker picks its own default Python without
``runtime.txt``, and a JupyterHub that mounts a persistent home hides whatever the build
wrote under ``~/.cache``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import tomllib
from packaging.specifiers import SpecifierSet

REPO = Path(__file__).resolve().parents[1]
BINDER = REPO / "binder"


def test_runtime_txt_pins_a_python_the_project_and_its_torch_support():
    line = (BINDER / "runtime.txt").read_text().strip()
    match = re.fullmatch(r"python-(3\.\d+)", line)
    assert match, f"repo2docker reads 'python-X.Y', got {line!r}"
    version = match.group(1)
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert SpecifierSet(requires).contains(f"{version}.0")
    # The Python the suite runs on, and so the one tests/test_binder.py installs the pinned
    # wheels (torch, tokenizers) into and runs the quickstart with.
    assert version == f"{sys.version_info.major}.{sys.version_info.minor}"


def _fake_python(folder: Path, log: Path) -> Path:
    """A `python` on PATH that logs each call with the NBSTREAM_CACHE it saw."""
    folder.mkdir()
    python = folder / "python"
    python.write_text(
        "#!/usr/bin/env bash\n"
        f'if [ "$1" = "-c" ]; then exec {sys.executable} "$@"; fi\n'
        f'echo "NBSTREAM_CACHE=$NBSTREAM_CACHE $*" >> {log}\n'
    )
    python.chmod(0o755)
    return folder


def test_the_build_converts_the_model_where_the_session_looks_outside_home(tmp_path):
    log = tmp_path / "calls.log"
    bin_dir = _fake_python(tmp_path / "bin", log)
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp_path / "home"),
        "NB_PYTHON_PREFIX": str(tmp_path / "env"),
    }
    subprocess.run(["bash", str(BINDER / "postBuild")], cwd=REPO, env=env, check=True)
    prepare = [line for line in log.read_text().splitlines() if "nbstream prepare" in line]
    cache = tmp_path / "env" / "share" / "nbstream"
    assert prepare == [f"NBSTREAM_CACHE={cache} -m nbstream prepare"]

    # At run time, binder/start points nbstream at the same folder, then runs the server.
    session = subprocess.run(
        ["bash", str(BINDER / "start"), "bash", "-c", 'echo "$NBSTREAM_CACHE"'],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert session.stdout.strip() == str(tmp_path / "env" / "share" / "nbstream")
    assert not session.stdout.strip().startswith(env["HOME"])
    # A cache the platform chose already is kept.
    chosen = subprocess.run(
        ["bash", str(BINDER / "start"), "bash", "-c", 'echo "$NBSTREAM_CACHE"'],
        env={**env, "NBSTREAM_CACHE": "/data/models"}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert chosen.stdout.strip() == "/data/models"
