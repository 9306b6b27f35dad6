"""Threads that fit the host: the CPUs a pod may use, and torch's threads fitted to them."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest
import torch

import nbstream
from nbstream import cpus
from nbstream.doctor import OK, WARN

# The modules (``nbstream.doctor`` is also the name of the function).
DOCTOR = importlib.import_module("nbstream.doctor")
MODELS = importlib.import_module("nbstream.models")


def _cgroup_v2(tmp_path: Path, line: str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "cpu.max").write_text(line + "\n")
    return tmp_path


def _cgroup_v1(tmp_path: Path, quota: str, period: str) -> Path:
    (tmp_path / "cpu").mkdir(parents=True)
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text(quota + "\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text(period + "\n")
    return tmp_path


@pytest.mark.parametrize(
    ("line", "quota"),
    [("150000 100000", 1.5), ("100000 100000", 1.0), ("50000 100000", 0.5),
     ("max 100000", None), ("max", None), ("garbage", None), ("0 100000", None)],
)  # fmt: skip
def test_cgroup_v2_quota_in_cpus(tmp_path, line, quota):
    assert cpus.cgroup_quota(_cgroup_v2(tmp_path, line)) == quota


def test_cgroup_v1_quota_and_no_cgroup_at_all(tmp_path):
    assert cpus.cgroup_quota(_cgroup_v1(tmp_path / "a", "200000", "100000")) == 2.0
    assert cpus.cgroup_quota(_cgroup_v1(tmp_path / "b", "-1", "100000")) is None
    assert cpus.cgroup_quota(tmp_path / "nothing-mounted") is None


def test_a_quota_caps_the_affinity_rounded_up_and_never_below_one(tmp_path):
    affinity = len(os.sched_getaffinity(0))
    half = cpus.usable_cpus(_cgroup_v2(tmp_path / "half", "50000 100000"))
    assert (half.quota, half.usable, half.affinity) == (0.5, 1, affinity)
    assert "a cgroup quota of 0.5" in half.describe()
    assert half.describe().startswith(f"1 of the host's {os.cpu_count()} cores")
    many = cpus.usable_cpus(_cgroup_v2(tmp_path / "many", "6400000 100000"))
    assert many.usable == affinity  # a quota above the affinity: the affinity is the limit
    none = cpus.usable_cpus(tmp_path / "nothing-mounted")
    assert (none.quota, none.usable) == (None, affinity)


@pytest.fixture
def torch_threads():
    """torch's thread count as the test found it, restored after."""
    before = torch.get_num_threads()
    yield before
    torch.set_num_threads(before)


def test_torch_threads_come_down_to_the_quota_unless_the_user_chose(
    tmp_path, monkeypatch, torch_threads
):
    one_cpu = _cgroup_v2(tmp_path, "100000 100000")
    torch.set_num_threads(2)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's choice: left alone
    assert cpus.fit_torch_threads(one_cpu, force=True) is None
    assert torch.get_num_threads() == 2

    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    assert cpus.fit_torch_threads(one_cpu, force=True) == 1
    assert torch.get_num_threads() == 1
    # Never raised: a quota above torch's count changes nothing.
    assert cpus.fit_torch_threads(_cgroup_v2(tmp_path / "wide", "max 100000"), force=True) is None
    assert torch.get_num_threads() == 1


def test_load_model_fits_the_threads_before_it_loads(monkeypatch):
    calls = []
    monkeypatch.setattr(MODELS, "fit_torch_threads", lambda: calls.append(1))
    monkeypatch.setattr(MODELS, "_load", lambda *a: (_ for _ in ()).throw(OSError("x")))
    with pytest.raises(OSError):
        nbstream.load_model("/nonexistent/folder-for-the-thread-check")
    assert calls == [1]


def test_doctor_reports_the_host_the_budget_and_torch_s_threads(monkeypatch, torch_threads):
    budget = cpus.CpuBudget(host=64, affinity=64, quota=1.0, usable=1)
    monkeypatch.setattr(DOCTOR, "usable_cpus", lambda: budget)
    torch.set_num_threads(2)
    device = nbstream.doctor().finding("device")
    assert device.status == WARN
    assert "1 of the host's 64 cores (a cgroup quota of 1)" in device.detail
    assert "torch uses 2 threads" in device.detail
    assert "torch.set_num_threads(1)" in device.advice
    torch.set_num_threads(1)
    assert nbstream.doctor().finding("device").status == OK


# In a process of its own: no other test's thread may start an OpenMP team meanwhile.
TEAM_SCRIPT = """
import json, os, threading, time
import torch
torch.set_num_threads(2)
import nbstream
from nbstream import cpus
from nbstream.testing import tiny_model

def native_threads():
    python = {t.native_id for t in threading.enumerate()}
    return set(os.listdir("/proc/self/task")) - {str(n) for n in python}

def team_gone(team, seconds=30.0):
    deadline = time.monotonic() + seconds
    while team & native_threads():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True

def main_thread_team():
    before = native_threads()
    torch.ones(1 << 20).add_(1.0)  # a parallel region: this thread's team starts
    return native_threads() - before

out = {}
out["libgomp"] = bool(cpus._find_pause_all())
out["no_team_yet"] = cpus.release_idle_openmp_threads()
team = main_thread_team()
out["team"] = len(team)
out["released"] = cpus.release_idle_openmp_threads()
out["gone"] = team_gone(team)
model, tokenizer = tiny_model()
team = main_thread_team()
out["team_before_run"] = len(team)
run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=8)
out["gone_once_a_run_started"] = team_gone(team)
out["text"] = "".join(run)
out["status"] = run.status
print(json.dumps(out))
"""


def test_a_run_ends_the_calling_thread_s_idle_openmp_team():
    """libgomp keeps an idle team of threads for each thread that ran a parallel region, and
    with more of them than CPUs every team sleeps where it would spin: a run's own thread
    generated 0.92× as fast beside the main thread's idle team on 2 cores. Ending the
    calling thread's team is what a run does as it starts (and load_model after it loads)."""
    import json
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", TEAM_SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    if not out["libgomp"]:  # macOS, Windows, a torch built with another OpenMP
        assert out["no_team_yet"] is False and out["status"] == "complete"
        return
    assert out["no_team_yet"] is True  # torch's Linux wheels load a libgomp with OpenMP 5.0
    assert out["team"] == 1  # two threads: this one and one of libgomp's
    assert out["released"] is True and out["gone"] is True
    assert out["team_before_run"] == 1
    assert out["gone_once_a_run_started"] is True
    assert out["status"] == "complete" and out["text"]


def test_every_libgomp_mapped_is_found_once_whatever_its_path():
    maps = (
        b"7f00-7f01 r-xp 00000000 08:01 1 /opt/a dir/torch/lib/libgomp.so.1\n"
        b"7f01-7f02 r--p 00001000 08:01 1 /opt/a dir/torch/lib/libgomp.so.1\n"
        b"7f02-7f03 r-xp 00000000 08:01 2 /usr/lib/libgomp-a34b3233.so.1 (deleted)\n"
        b"7f03-7f04 rw-p 00000000 00:00 0\n"
        b"7f04-7f05 r-xp 00000000 08:01 3 /usr/lib/libc.so.6\n"
    ) + b"7f05-7f06 r-xp 00000000 08:01 4 /tmp/\xff/libm.so\n"
    assert cpus._libgomp_paths(maps) == [
        "/opt/a dir/torch/lib/libgomp.so.1",
        "/usr/lib/libgomp-a34b3233.so.1",
    ]


def test_without_libgomp_releasing_says_so(monkeypatch, tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 00000000 00:00 0 /usr/lib/libc.so.6\n")
    monkeypatch.setattr(cpus, "PROC_MAPS", maps)
    monkeypatch.setattr(cpus, "_pause_all", None)
    assert cpus.release_idle_openmp_threads() is False
    monkeypatch.setattr(cpus, "PROC_MAPS", tmp_path / "missing")  # not Linux
    monkeypatch.setattr(cpus, "_pause_all", None)
    assert cpus.release_idle_openmp_threads() is False
