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


def run_script(*args: str, timeout: int) -> subprocess.CompletedProcess[str]:
    """``python <args>`` in the repository, offline; it must exit 0 (else its stderr's end)."""
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.browser
def test_widget_benchmark_quick(tmp_path):
    """About a minute: the script starts a JupyterLab and a Chromium of its own and streams
    the same answer with nbstream and with the hand-written recipe (what it compares)."""
    out = tmp_path / "widget.json"
    command = ["-m", "benchmarks.widget", "--quick", "--only", "tiny", "--json", str(out)]
    proc = run_script(*command, timeout=900)
    report = json.loads(out.read_text())
    assert report["invalid"] == []
    tiny = report["results"]["tiny"]
    assert tiny["same_text"] and tiny["nbstream"]["status"] == "complete"
    # Both sides streamed the same text; the widget sent fewer bytes than the full resend.
    summary = tiny["summary"]
    assert summary["nbstream_bytes_per_char"] < summary["recipe_bytes_per_char"]
    assert "| metric |" in proc.stdout


def test_remote_benchmark_quick(tmp_path):
    """About 25 s: a real `transformers serve` of the default model is started, streamed
    from and stopped twice (the stop on both sides of the wire is what it measures)."""
    out = tmp_path / "remote.json"
    proc = run_script("-m", "benchmarks.remote", "--quick", "--json", str(out), timeout=900)
    report = json.loads(out.read_text())
    assert report["problems"] == []
    # Every stopped request ended cancelled, and the server stopped far short of its length.
    assert len(report["samples"]) == 2
    assert all(tokens < 4000 for tokens in report["server_tokens"])
    assert "Stop → `cancelled`" in proc.stdout


@pytest.mark.model
def test_branching_benchmark_quick(tmp_path):
    """About 30 to 50 s: a fresh interpreter loads the default model and times
    `run.distribution` and a branch on a 40-token answer, the script's whole path."""
    out = tmp_path / "branching.json"
    proc = run_script("-m", "benchmarks.branching", "--quick", "--json", str(out), timeout=900)
    report = json.loads(out.read_text())
    assert report["problems"] == []
    assert set(report["distribution_ms"]) == {"5", "20", "35"} and report["ratio"] > 0
    assert "Branch at step 35" in proc.stdout


def test_review_benchmark_quick(tmp_path):
    """About 30 to 50 s: every figure of the review (memory after kept runs, queues, faults
    and races) measured as the full run measures it, the timed ones once instead of three
    times."""
    out = tmp_path / "review.json"
    run_script("-m", "benchmarks.review", "--quick", "--json", str(out), timeout=600)
    report = json.loads(out.read_text())
    assert report["problems"] == []
    # Kept runs hold no tensors, whichever way they ended.
    memory = report["memory"]
    assert memory["failed"]["statuses"] == ["failed"] and memory["failed"]["caught"] == 20
    assert memory["complete"]["statuses"] == ["complete"]
    for kind in ("failed", "complete"):
        assert (memory[kind]["cache"], memory[kind]["logits"]) == (0, 0)
    queue = report["queue_table"]
    assert queue["after"] == queue["before"] and queue["statuses"] == ["complete"]
    assert report["banned_mass"]["max"] == 0.0
    min_p = report["min_p"]
    assert min_p["sampled"] and min_p["equals_greedy"] and min_p["worst_rank"] == 0
    forced = report["stop_in_forced"]
    assert (forced["status"], forced["finish_reason"]) == ("complete", "stop")
    assert forced["token_ids"] < forced["max_new_tokens"]
    assert [x["status"] for x in report["slow_dns"]] == ["cancelled"]
    assert [(x["status"], x["key_shown"]) for x in report["gzip_bomb"]] == [("failed", False)]
    scripts = report["scripts"]
    assert scripts["hung_lookup"]["statuses"] == [0] and scripts["compare"]["statuses"] == [0]
    assert scripts["hung_lookup"]["said"] == ["True cancelled"]
    assert scripts["compare"]["said"] == ["True ['complete', 'complete']"]
    assert "browser" in report["markdown"] and "| item | measure | now |" in report["markdown"]


def test_shape_prints_each_figure_of_the_code():
    proc = run_script("-m", "benchmarks.shape", timeout=300)
    for heading in (
        "modules per package: nbstream ",
        "Python functions over 60 lines: ",
        "JavaScript functions over 60 lines: ",
        "getattr/hasattr probes of a backend or job: ",
        "modules under no contract: ",
        "test-module cross-imports: ",
        "longest docstring: ",
    ):
        assert heading in proc.stdout


def test_trace_benchmark_quick(tmp_path):
    """Up to a minute and a half on a busy 2-core machine: the tiny model's runs with and
    without the trace, interleaved, then the widget's views of tokens, probabilities and
    alternatives."""
    # Figures come from the full run (python -m benchmarks.trace); only validity here.
    out = tmp_path / "trace.json"
    command = ["-m", "benchmarks.trace", "--quick", "--models", "tiny", "--json", str(out)]
    proc = run_script(*command, timeout=600)
    report = json.loads(out.read_text())
    assert report["problems"] == []
    assert all(r["valid"] for r in report["cases"][0]["result"]["rounds"])
    assert "| median ratio on/off |" in proc.stdout
    # The widget part: every view sends tokens; the candidates cost the most by far.
    per_token = report["cases"][0]["views"]["bytes_per_token"]
    assert per_token["tokens"] > 0 and per_token["probabilities"] > 0
    assert per_token["tokens+probabilities+alternatives"] > 2 * per_token["tokens"]
    assert "| views off tok/s |" in proc.stdout


@pytest.mark.model
def test_lens_benchmark_quick(tmp_path):
    """About 30 to 45 s: a fresh interpreter loads the default model and streams a 40-token
    run with and without a lens computed beside it (the side by side it reports)."""
    out = tmp_path / "lens.json"
    proc = run_script("-m", "benchmarks.lens", "--quick", "--json", str(out), timeout=900)
    report = json.loads(out.read_text())
    assert report["problems"] == []
    measured = report["side_by_side"]
    assert measured["ratio"] > 0 and measured["off_tok_per_s"] > 0
    assert set(report["times"]) == {
        "lens_ms", "attribution_ms", "both_ms", "input_tokens",
        "lens_cpu_ms", "attribution_cpu_ms", "both_cpu_ms",
    }  # fmt: skip
    assert 0 < report["times"]["lens_ms"] <= report["times"]["both_ms"]
    assert "Streaming while a lens is computed" in proc.stdout


@pytest.mark.model
def test_coldstart_benchmark_quick(tmp_path):
    """About a minute: a cold start is what it measures, so each sample is a new interpreter
    importing torch and transformers and loading the default model (one pair, and the
    breakdown of each program's imports)."""
    out = tmp_path / "coldstart.json"
    proc = run_script("-m", "benchmarks.coldstart", "--quick", "--json", str(out), timeout=900)
    report = json.loads(out.read_text())
    assert report["summary"]["pairs"] == 1 and report["summary"]["median_ratio"] > 0
    # Each phase's imports were found between the program's marks.
    for program in ("nbstream", "bare"):
        split = report["breakdown"][program]
        assert split["imports_s"] > 0 and split["total_s"] > 0
        phases = report["breakdown"]["phase_imports"][program]
        assert phases["import"]["top_modules"] or phases["load"]["top_modules"]
    assert "nbstream / bare" in proc.stdout


def test_the_median_interval_covers_the_median_as_often_as_it_says():
    import random
    import statistics

    from benchmarks.engine import median_interval

    assert median_interval([1.0, 2.0, 3.0, 4.0, 5.0]) is None  # 94% at best: too few
    # Order statistics: the 10th and 22nd of 31 (97% coverage; the 11th and 21st give 93%).
    assert median_interval([float(v) for v in range(31, 0, -1)]) == (10.0, 22.0)
    rng = random.Random(7)
    for n, draw in ((9, lambda: rng.expovariate(1.0)), (31, lambda: rng.lognormvariate(0, 0.3))):
        true_median = statistics.median(draw() for _ in range(200_001))
        covered = 0
        for _ in range(2000):
            low, high = median_interval([draw() for _ in range(n)])
            covered += low <= true_median <= high
        # At least 95% by construction (exactly 96.1% and 97.1% here), whatever the skew.
        assert 0.945 <= covered / 2000 <= 0.985, (n, covered)


def test_the_engine_benchmark_says_when_noise_decides_a_verdict(tmp_path):
    """Seven seconds: two rounds of the tiny model, too few for an interval of the median."""
    out = tmp_path / "engine.json"
    command = ["-m", "benchmarks.engine", "--quick", "--models", "tiny", "--no-fresh-load"]
    command += ["--only", "nbstream_widget"]  # (1) and (3) always, the widget's (3w) beside
    proc = run_script(*command, "--json", str(out), timeout=300)
    summary = json.loads(out.read_text())["cases"][0]["throughput"]["summary"]
    assert set(summary) == {"generate", "nbstream", "nbstream_widget"}
    assert summary["nbstream"]["cpu_ratio_interval"] is None
    assert "median's 95% interval" in proc.stdout
    assert "too few rounds for an interval of the median" in proc.stdout


def test_a_verdict_inside_the_noise_says_so():
    from benchmarks.engine import _noise_note

    assert "holds the target" in _noise_note((0.95, 1.01), 0.98)
    assert _noise_note((0.981, 1.01), 0.98) == ""  # the whole interval clears it
    assert _noise_note((0.90, 0.97), 0.98) == ""  # the whole interval misses it
