"""The Binder build, reproduced without docker: what repo2docker does with binder/.

repo2docker installs binder/requirements.txt into a fresh environment, runs binder/postBuild
in the repository, and the user opens a notebook. Here: a fresh virtual environment, the
same requirements (with one difference: pip takes the CPU torch build from this machine
instead of download.pytorch.org, which is not reachable from it), postBuild run in a copy of
the repository, then notebooks/quickstart.ipynb executed headlessly in that environment with
the hub offline: a Binder user's first run must download and convert nothing. The executed
quickstart is checked as tests/test_notebooks.py checks every lesson: this is the suite's only
top-to-bottom execution of the quickstart.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
from lessons import check_claims, check_widget_outputs, printed

REPO = Path(__file__).resolve().parents[1]
BINDER = REPO / "binder"


def _run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def test_binder_build_then_quickstart_runs_offline(tmp_path: Path) -> None:
    """Two minutes or so: installing the requirements, converting the default model as
    postBuild does, and the quickstart on that model are what a Binder build does."""
    requirements = (BINDER / "requirements.txt").read_text().splitlines()
    local = [line for line in requirements if not line.startswith("--extra-index-url")]
    assert len(local) == len(requirements) - 1, "binder/requirements.txt changed shape"
    (tmp_path / "requirements.txt").write_text("\n".join(local) + "\n")

    # The repository as repo2docker sees it: the tracked files.
    files = _run(["git", "ls-files", "-z"], cwd=REPO).stdout.split("\0")
    repo = tmp_path / "repo"
    for name in filter(None, files):
        if (REPO / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, repo / name)

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
        # the image's own model cache, empty at the start of the build
        NBSTREAM_CACHE=str(tmp_path / "cache"),
    )
    # --no-compile: pip would otherwise byte-compile every module of torch and transformers
    # (transformers alone installed in 64 s with, 13 s without, on a busy 2-core machine);
    # Python compiles what the session imports when it imports it.
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile"]
    _run([*pip, "-r", str(tmp_path / "requirements.txt")], env=env, timeout=1200)
    _run(["bash", str(repo / "binder" / "postBuild")], cwd=repo, env=env, timeout=900)
    assert any((tmp_path / "cache").rglob("*.safetensors")), "postBuild did not convert the model"

    # The user's session: no hub, the converted model only.
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    out = tmp_path / "executed.ipynb"
    _run(
        [
            str(venv / "bin" / "jupyter"),
            "nbconvert",
            "--to",
            "notebook",
            "--execute",
            "--ExecutePreprocessor.timeout=600",
            "--ExecutePreprocessor.store_widget_state=True",
            "--output",
            str(out),
            str(repo / "notebooks" / "quickstart.ipynb"),
        ],
        cwd=repo / "notebooks",
        env=env,
        timeout=900,
    )
    nb = nbformat.read(out, as_version=4)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors == []
    # nbstream came from the Binder environment, and the widget's run completed there.
    where = _run(
        [str(venv / "bin" / "python"), "-c", "import nbstream; print(nbstream.__file__)"],
        cwd=tmp_path,
        env=env,
    ).stdout.strip()
    assert Path(where).is_relative_to(repo), where
    texts = "".join(
        o.get("text", "")
        for c in nb.cells
        for o in c.get("outputs", [])
        if o.output_type == "stream"
    )
    assert "complete" in texts
    check_widget_outputs("quickstart.ipynb", nb)
    check_claims("quickstart.ipynb", printed(nb))
