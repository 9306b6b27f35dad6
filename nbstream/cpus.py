"""How many CPUs this process may use, and torch's threads fitted to them.

A Binder, JupyterHub or Colab pod sees every core of its host in ``os.cpu_count()``, while
its cgroup lets it run only a share of them (``cpu.max``), and a process may be pinned to
some cores (its affinity). torch starts one intra-op thread per core it sees: on a pod
limited to 1 CPU of a 64-core host that is 64 threads taking turns on one CPU, and a model
that streams at a fraction of its speed. This module reads the limits the way loky (joblib's
process pool) does, and :func:`fit_torch_threads` lowers torch's thread count to them when
nobody chose it.

Example:
    >>> from nbstream import cpus
    >>> budget = cpus.usable_cpus()
    >>> 1 <= budget.usable <= budget.host
    True
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import sys
import threading
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["CpuBudget", "fit_torch_threads", "release_idle_openmp_threads", "usable_cpus"]

#: Where Linux mounts the cgroup file system (inside a container: the container's own).
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: Variables by which a user (or a platform) has already chosen the thread count.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")

_fitted_lock = threading.Lock()
_fitted = False

#: Where Linux lists the files mapped into this process (the OpenMP runtime torch loaded).
PROC_MAPS = Path("/proc/self/maps")
_openmp_lock = threading.Lock()
# The omp_pause_resource_all of each libgomp in this process once found; None: not looked up
# yet (or torch not loaded then); False: this process has none.
_pause_all: Any = None


@dataclasses.dataclass(frozen=True)
class CpuBudget:
    """What a process may use: ``usable`` CPUs of the ``host``'s.

    Attributes:
        host: The cores the machine has (``os.cpu_count()``).
        affinity: The cores this process may be scheduled on.
        quota: The cgroup's CPU quota in CPUs (``cpu.max``, e.g. ``1.5``), or ``None`` for none.
        usable: The CPUs to plan threads for: the affinity, capped by the quota rounded up.
    """

    host: int
    affinity: int
    quota: float | None
    usable: int

    def describe(self) -> str:
        """The budget in words, e.g. ``"2 of the host's 64 cores (a cgroup quota of 1.5)"``."""
        limits = []
        if self.affinity < self.host:
            limits.append(f"pinned to {self.affinity}")
        if self.quota is not None:
            limits.append(f"a cgroup quota of {self.quota:g}")
        why = f" ({', '.join(limits)})" if limits else ""
        return f"{self.usable} of the host's {self.host} cores{why}"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def cgroup_quota(root: Path = CGROUP_ROOT) -> float | None:
    """The CPU quota of this process's cgroup, in CPUs, or ``None`` where there is none.

    Reads cgroup v2's ``cpu.max`` (``"150000 100000"``: 1.5 CPUs; ``"max 100000"``: none),
    else cgroup v1's ``cpu/cpu.cfs_quota_us`` over ``cpu.cfs_period_us`` (-1: none). A file
    that is missing or unreadable means no quota: the limit is then what the affinity says.

    Args:
        root: Where the cgroup file system is mounted.

    Returns:
        The quota in CPUs (a float > 0), or ``None``.
    """
    v2 = _read(root / "cpu.max")
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        return _ratio(quota, period or "100000")
    v1_quota = _read(root / "cpu" / "cpu.cfs_quota_us")
    v1_period = _read(root / "cpu" / "cpu.cfs_period_us")
    if v1_quota is None or v1_period is None:
        return None
    return _ratio(v1_quota, v1_period)


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:  # "max", or something unexpected: no quota to honour
        return None
    return q / p if q > 0 and p > 0 else None


def usable_cpus(root: Path = CGROUP_ROOT) -> CpuBudget:
    """How many CPUs this process may use: its affinity, capped by its cgroup's quota.

    The quota is rounded up (1.5 CPUs plan for 2 threads), as loky does: rounding down would
    leave half a CPU idle, and one thread more than a fractional quota costs little.

    Args:
        root: Where the cgroup file system is mounted (tests point it at a folder).

    Returns:
        A :class:`CpuBudget`.

    Example:
        >>> from nbstream.cpus import usable_cpus
        >>> usable_cpus().usable >= 1
        True
    """
    host = os.cpu_count() or 1
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else host
    quota = cgroup_quota(root)
    usable = affinity if quota is None else min(affinity, math.ceil(quota))
    return CpuBudget(host=host, affinity=affinity, quota=quota, usable=max(1, usable))


def fit_torch_threads(root: Path = CGROUP_ROOT, *, force: bool = False) -> int | None:
    """Lower torch's intra-op threads to the CPUs this process may use, once per process.

    Left alone when the user chose already (``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` set)
    or when torch uses no more threads than there are usable CPUs; never raised. nbstream
    calls it before it loads a model, so a notebook on a pod with a CPU quota does not start
    a thread per host core.

    Args:
        root: Where the cgroup file system is mounted.
        force: Check again even if this process already did.

    Returns:
        The new thread count, or ``None`` where nothing changed.

    Example:
        >>> from nbstream.cpus import fit_torch_threads
        >>> new = fit_torch_threads()  # an int where torch had more threads than CPUs
    """
    global _fitted
    with _fitted_lock:
        if _fitted and not force:
            return None
        _fitted = True
        chosen = [name for name in THREAD_VARIABLES if os.environ.get(name)]
        if chosen:
            logger.debug("torch threads left as %s set them", " and ".join(chosen))
            return None
        import torch

        budget = usable_cpus(root)
        threads = torch.get_num_threads()
        if threads <= budget.usable:
            return None
        torch.set_num_threads(budget.usable)
        logger.info(
            "torch would start %d threads; this process may use %s: using %d",
            threads,
            budget.describe(),
            budget.usable,
        )
        return budget.usable


def _libgomp_paths(maps: bytes) -> list[str]:
    """Every libgomp mapped into this process (torch's own copy, others'), once each."""
    paths: list[str] = []
    for line in maps.decode(errors="replace").splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6:
            continue
        path = fields[5].removesuffix(" (deleted)")
        if os.path.basename(path).startswith("libgomp") and path not in paths:
            paths.append(path)
    return paths


def _find_pause_all() -> Any:
    global _pause_all
    with _openmp_lock:
        if _pause_all is not None:
            return _pause_all
        found: Any = False
        try:
            import ctypes

            functions = []
            for path in _libgomp_paths(PROC_MAPS.read_bytes()):
                function = ctypes.CDLL(path).omp_pause_resource_all  # OpenMP 5.0
                function.argtypes, function.restype = [ctypes.c_int], ctypes.c_int
                functions.append(function)
            found = functions or False
        except Exception:  # not Linux, no such symbol: nothing to release
            found = False
        if found is not False or "torch" in sys.modules:
            _pause_all = found  # torch loads its OpenMP as it is imported: final
        return found


def release_idle_openmp_threads() -> bool:
    """End the calling thread's idle OpenMP thread team, so that other threads' teams spin.

    libgomp, the OpenMP runtime of torch's Linux wheels, gives each thread that runs a
    parallel region a team of threads of its own and keeps it, idle, for the next region.
    Once the teams hold more threads than there are CPUs, every waiting thread spins about
    300 times less before it sleeps in the kernel, and each step of a model on the CPU waits
    on those sleeps. A notebook's main thread has a team once it has loaded or run a model;
    nbstream generates on a thread of its own, which then gets a second team: on 2 cores the
    default model generated 0.92× the tokens a second of ``generate`` on the main thread,
    and 1.01× with the main thread's team ended first (``benchmarks/engine.py``). nbstream
    calls this as it starts a run and after it loads a model; the next parallel region on
    this thread starts a new team, at the cost of starting its threads.

    Returns:
        ``True`` where libgomp ended this thread's team (or it had none), in each libgomp
        loaded; ``False`` where this process has no libgomp with OpenMP 5.0's
        ``omp_pause_resource_all`` (macOS, Windows, another OpenMP) or libgomp refused
        (called inside a parallel region).

    Example:
        >>> from nbstream.cpus import release_idle_openmp_threads
        >>> released = release_idle_openmp_threads()  # True with torch's Linux wheels
    """
    functions = _find_pause_all()
    if not functions:
        return False
    return all([pause_all(1) == 0 for pause_all in functions])  # omp_pause_soft, each
