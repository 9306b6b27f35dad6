"""The benchmark scripts run end to end (short runs), so the README's figures can be redone.

Speed targets are read off the full runs (`make bench`), never asserted here; what is
asserted is what does not depend on the machine's speed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.browser
def test_widget_benchmark_quick(tmp_path):
    out = tmp_path / "widget.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    command = ["-m", "benchmarks.widget", "--quick", "--only", "tiny", "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, *command],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["invalid"] == []
    tiny = report["results"]["tiny"]
    assert tiny["same_text"] and tiny["nbstream"]["status"] == "complete"
    # Both sides streamed the same text; the widget sent fewer bytes than the full resend.
    summary = tiny["summary"]
    assert summary["nbstream_bytes_per_char"] < summary["recipe_bytes_per_char"]
    assert "| metric |" in proc.stdout


def test_remote_benchmark_quick(tmp_path):
    out = tmp_path / "remote.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.remote", "--quick", "--json", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["problems"] == []
    # Every stopped request ended cancelled, and the server stopped far short of its length.
    assert len(report["samples"]) == 2
    assert all(tokens < 4000 for tokens in report["server_tokens"])
    assert "Stop → `cancelled`" in proc.stdout


@pytest.mark.model
def test_branching_benchmark_quick(tmp_path):
    out = tmp_path / "branching.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.branching", "--quick", "--json", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["problems"] == []
    assert set(report["distribution_ms"]) == {"5", "20", "35"} and report["ratio"] > 0
    assert "Branch at step 35" in proc.stdout
