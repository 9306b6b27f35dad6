"""The lessons as a newcomer clones them: untouched when opened; `make demo` as light as said.

Opening a notebook makes JupyterLab write the live kernel's spec into its metadata; a saved
``display_name`` that differs marks the notebook modified at once, so closing an untouched
lesson asks to save it and a teacher's git shows a change nobody made (checked in JupyterLab
4.6: "Python 3" was marked modified on open, "Python 3 (ipykernel)" was not).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from jupyter_client.kernelspec import KernelSpecManager

REPO = Path(__file__).resolve().parents[1]
LESSONS = sorted((REPO / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_a_lesson_names_the_kernel_spec_jupyter_will_write_back(path):
    spec = KernelSpecManager().get_kernel_spec("python3")
    saved = json.loads(path.read_text())["metadata"]["kernelspec"]
    assert saved == {"name": "python3", "display_name": spec.display_name, "language": "python"}


def _dry_run(target: str) -> str:
    env = {**os.environ, "MAKEFLAGS": ""}
    proc = subprocess.run(
        ["make", "-n", "-B", target], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    return proc.stdout


def test_make_demo_installs_the_lab_not_the_test_tools_trusts_and_stays_online():
    plan = _dry_run("demo")
    assert '-e ".[lab]"' in plan and ".[test]" not in plan
    for tool in ("pytest", "mypy", "ruff", "playwright", "llama-cpp", "chromium"):
        assert tool not in plan, tool
    assert "jupyter trust notebooks/*.ipynb" in plan
    lab = next(line for line in plan.splitlines() if "jupyter lab" in line)
    assert "env -u HF_HUB_OFFLINE -u TRANSFORMERS_OFFLINE" in lab
