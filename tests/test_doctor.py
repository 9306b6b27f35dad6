"""nbstream.doctor(): the self-check a teacher runs before class."""

from __future__ import annotations

import importlib.metadata

import nbstream
from nbstream.doctor import FAIL, OK, WARN


def test_the_report_lists_versions_model_and_device_each_with_advice_when_off():
    checkup = nbstream.doctor()
    names = [f.name for f in checkup.findings]
    for name in ("Python", "torch", "transformers", "ipywidgets", "anywidget", "ipykernel"):
        assert name in names
        assert checkup.finding(name).status == OK
        assert checkup.finding(name).detail  # its version
    assert checkup.finding("torch").detail == importlib.metadata.version("torch")
    assert checkup.finding("default model").status == OK  # prepared by the test setup
    assert "MiB" in checkup.finding("default model").detail
    assert checkup.finding("device").detail.startswith("CPU")
    # Outside a kernel the front end cannot be checked, and the report says where to run it.
    front = checkup.finding("front end")
    assert front.status == WARN and "notebook" in front.advice
    assert checkup.ok
    text = str(checkup)
    assert "✓ torch:" in text and "— run doctor() in a notebook" in text
    assert checkup._repr_markdown_().startswith("| | check | found | what to do |")


def test_a_missing_package_and_an_unconverted_model_say_what_to_do(monkeypatch, tmp_path):
    real = importlib.metadata.version

    def version(name):
        if name == "anywidget":
            raise importlib.metadata.PackageNotFoundError(name)
        if name == "ipykernel":
            return "6.29.5"
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.setenv("NBSTREAM_CACHE", str(tmp_path))
    checkup = nbstream.doctor()
    missing = checkup.finding("anywidget")
    assert (missing.status, missing.advice) == (FAIL, "pip install anywidget")
    old = checkup.finding("ipykernel")
    assert old.status == WARN and "interrupt" in old.advice
    model = checkup.finding("default model")
    assert model.status == WARN and "python -m nbstream prepare" in model.advice
    assert not checkup.ok


def test_the_command_line_prints_the_same_report():
    import os
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "nbstream", "doctor"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "✓ torch:" in proc.stdout and "✓ default model: ready in" in proc.stdout
    assert "front end: not in a notebook kernel" in proc.stdout
