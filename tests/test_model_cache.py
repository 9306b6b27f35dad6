"""The default model's cache, shared by threads and processes (models.cached_conversion).

Most tests drive ``cached_conversion`` with a small source file and a fake ``write`` in
worker processes, held at a gate so that two of them overlap for certain (the test waits for
what a worker says it is doing, never for a moment in time). The last section races two
processes converting the real default model into a fresh cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import nbstream
from nbstream import models

NAME = "Model"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")

# A worker process: converts argv[1] into argv[2] with a fake write. Mode "gate" holds the
# write until the file "go" appears in argv[4], "hang" holds it until killed, "quick" does
# not hold it. The write notes each conversion in argv[4]/conversions, and creates its
# largest file 0600, as safetensors does.
WORKER = r"""
import logging, os, sys, time
from pathlib import Path
from nbstream import models

logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
source, folder, mode, signals = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])

def write(src, out):
    with open(signals / "conversions", "a") as log:
        log.write(f"{os.getpid()}\n")
    fd = os.open(out / "weights.bin", os.O_CREAT | os.O_WRONLY, 0o600)
    os.write(fd, src.read_bytes())
    os.close(fd)
    (signals / f"writing-{os.getpid()}").touch()
    if mode == "gate":
        while not (signals / "go").exists():
            time.sleep(0.01)
    elif mode == "hang":
        time.sleep(3600)
    (out / "config.json").write_text("{}")

print(models.cached_conversion(source, folder, write))
"""

WAIT_S = 60  # what a worker is expected to do takes well under a second


def wait_until(condition: Callable[[], Any], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.02)


class Cache:
    """A source file, a cache folder for it, and worker processes converting it."""

    def __init__(self, root: Path) -> None:
        self.source = root / "source.gguf"
        self.source.write_bytes(b"weights v1 " * 1000)
        self.folder = root / "cache" / NAME
        self.signals = root / "signals"
        self.signals.mkdir()
        self.workers: list[subprocess.Popen[str]] = []

    def start(self, mode: str, *, umask: int | None = None) -> subprocess.Popen[str]:
        args = [sys.executable, "-c", WORKER, str(self.source), str(self.folder), mode]
        with open(self.signals / f"stderr-{len(self.workers)}", "w") as stderr:
            worker = subprocess.Popen(
                [*args, str(self.signals)],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                preexec_fn=None if umask is None else (lambda: os.umask(umask)),
            )
        self.workers.append(worker)
        return worker

    def stderr(self, worker: subprocess.Popen[str]) -> str:
        return (self.signals / f"stderr-{self.workers.index(worker)}").read_text()

    def finish(self, worker: subprocess.Popen[str]) -> str:
        out, _ = worker.communicate(timeout=WAIT_S)
        assert worker.returncode == 0, self.stderr(worker)
        return out.strip()

    def writing(self, worker: subprocess.Popen[str]) -> bool:
        return (self.signals / f"writing-{worker.pid}").exists()

    def conversions(self) -> int:
        path = self.signals / "conversions"
        return len(path.read_text().split()) if path.exists() else 0

    def current(self) -> bool:
        # Not through cached_conversion: a load also tidies, which would hide leftovers.
        return models._check(self.folder, self.source)[0]

    def leftovers(self) -> list[str]:
        # The lock file may stay (filelock 3 keeps it): it holds nothing once released.
        names = [p.name for p in self.folder.parent.iterdir() if not p.name.endswith(".lock")]
        return sorted(set(names) - {NAME})


def refuse(source: Path, out: Path) -> None:
    raise AssertionError("converted although the cache was current")


def quick_write(text: str) -> Callable[[Path, Path], None]:
    def write(source: Path, out: Path) -> None:
        (out / "weights.bin").write_text(text)

    return write


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[Cache]:
    made = Cache(tmp_path)
    yield made
    for worker in made.workers:  # a failed test must not leave a worker behind
        if worker.poll() is None:
            worker.kill()
            worker.wait()


# -- processes at once ---------------------------------------------------------------------------


def test_two_processes_converting_at_once_both_succeed(cache):
    first = cache.start("gate")
    wait_until(lambda: cache.writing(first), "the first worker is writing")
    second = cache.start("gate")
    wait_until(
        lambda: "Waiting for another process" in cache.stderr(second), "the second one waits"
    )
    (cache.signals / "go").touch()
    assert cache.finish(first) == cache.finish(second) == str(cache.folder)
    assert cache.conversions() == 1  # the second one used the first one's conversion
    assert cache.current()
    assert (cache.folder / "weights.bin").read_bytes() == cache.source.read_bytes()
    assert cache.leftovers() == []


def test_a_killed_conversion_leaves_nothing_a_later_one_trips_on(cache):
    killed = cache.start("hang")
    wait_until(lambda: cache.writing(killed), "the worker is writing")
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=WAIT_S)
    assert cache.leftovers(), "the killed conversion should have left its temporary folder"
    # The lock died with its holder, and the next conversion removes what it left.
    assert cache.finish(cache.start("quick")) == str(cache.folder)
    assert cache.current()
    assert cache.leftovers() == []
    assert sorted(p.name for p in cache.folder.iterdir()) == [
        "config.json",
        models._STAMP,
        "weights.bin",
    ]


def test_leftovers_next_to_a_current_cache_are_removed_by_a_load(cache):
    models.cached_conversion(cache.source, cache.folder, quick_write("v1"))
    # What a conversion killed mid-way, or just after moving an outdated folder aside, left.
    for name in (f".{NAME}.convert-4242-dead", f".{NAME}.replaced-4242-dead"):
        (cache.folder.parent / name).mkdir()
        (cache.folder.parent / name / "model.safetensors").write_bytes(b"0" * 1000)
    assert models.cached_conversion(cache.source, cache.folder, refuse) == cache.folder
    assert cache.leftovers() == []


def test_a_conversion_in_progress_is_never_removed(cache, tmp_path):
    # Two venvs with different GGUF files share a cache: one converts while the other loads
    # the folder that is current for it, and sees the first one's temporary folder.
    models.cached_conversion(cache.source, cache.folder, quick_write("v1"))
    ours = cache.source
    cache.source = tmp_path / "other" / "source.gguf"
    cache.source.parent.mkdir()
    cache.source.write_bytes(b"weights v2 " * 1000)
    theirs = cache.start("gate")
    wait_until(lambda: cache.writing(theirs), "the other worker is writing")
    in_progress = cache.leftovers()
    assert models.cached_conversion(ours, cache.folder, refuse) == cache.folder
    assert cache.leftovers() == in_progress  # left alone: its owner holds the lock
    (cache.signals / "go").touch()
    assert cache.finish(theirs) == str(cache.folder)
    assert (cache.folder / "weights.bin").read_bytes() == cache.source.read_bytes()
    assert cache.leftovers() == []


# -- one process -------------------------------------------------------------------------------


def test_a_valid_folder_in_place_is_kept(cache, tmp_path):
    # Something the lock does not keep out (a copy by hand, another version of nbstream)
    # puts a valid conversion in place while we convert: it is kept, ours is discarded.
    other = tmp_path / "elsewhere" / NAME
    models.cached_conversion(cache.source, other, quick_write("theirs"))

    def write(source: Path, out: Path) -> None:
        (out / "weights.bin").write_text("ours")
        os.rename(other, cache.folder)

    models.cached_conversion(cache.source, cache.folder, write)
    assert (cache.folder / "weights.bin").read_text() == "theirs"
    assert cache.current()
    assert cache.leftovers() == []


def test_an_outdated_folder_is_replaced_whole(cache):
    cache.folder.mkdir(parents=True)
    (cache.folder / models._STAMP).write_text(json.dumps({"version": -1}))
    (cache.folder / "old.bin").write_text("old")
    with open(cache.folder / "old.bin") as reader:  # a process still reading it
        models.cached_conversion(cache.source, cache.folder, quick_write("new"))
        assert reader.read() == "old"
    assert sorted(p.name for p in cache.folder.iterdir()) == [models._STAMP, "weights.bin"]
    assert cache.current()
    assert cache.leftovers() == []


def test_a_failed_conversion_leaves_nothing(cache):
    def write(source: Path, out: Path) -> None:
        (out / "weights.bin").write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        models.cached_conversion(cache.source, cache.folder, write)
    assert not cache.folder.exists()
    assert cache.leftovers() == []
    models.cached_conversion(cache.source, cache.folder, quick_write("v1"))  # lock released
    assert cache.current()


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_the_cache_follows_the_umask(cache, umask):
    # A cache shared by a hub's users must be readable by them: no 0700 folder, no 0600 file
    # (the worker's write makes its weights 0600, as safetensors does).
    assert cache.finish(cache.start("quick", umask=umask)) == str(cache.folder)
    for path in (cache.folder.parent, cache.folder):
        assert path.stat().st_mode & 0o777 == 0o777 & ~umask, path
    for path in cache.folder.iterdir():
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask, path


# -- the stamp: which source a folder was made from ------------------------------------------------


def bump_mtime(path: Path) -> None:
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000_000))


def test_a_source_of_the_same_size_is_converted_again(cache):
    models.cached_conversion(cache.source, cache.folder, quick_write("v1"))
    cache.source.write_bytes(b"weights v2 " * 1000)  # same size, other bytes
    bump_mtime(cache.source)
    assert not cache.current()
    models.cached_conversion(cache.source, cache.folder, quick_write("v2"))
    assert (cache.folder / "weights.bin").read_text() == "v2"


def test_a_touched_source_is_not_converted_again(cache):
    # Reinstalled, same bytes: the hash says so, once; the stamp then notes the new mtime,
    # so later loads read the stamp only.
    models.cached_conversion(cache.source, cache.folder, quick_write("v1"))
    bump_mtime(cache.source)
    assert models.cached_conversion(cache.source, cache.folder, refuse) == cache.folder
    stamp = json.loads((cache.folder / models._STAMP).read_text())
    assert stamp["mtime_ns"] == cache.source.stat().st_mtime_ns
    assert stamp["size"] == cache.source.stat().st_size
    assert stamp["sha256"] == hashlib.sha256(cache.source.read_bytes()).hexdigest()
    assert cache.leftovers() == []


# -- the real default model: two processes convert it into a fresh cache at once ---------------

CONVERT = "import nbstream; print(nbstream.default_model_dir())"


@pytest.fixture(scope="module")
def fresh_conversion(tmp_path_factory):
    """Two processes convert the default model into one empty NBSTREAM_CACHE at once (about
    30 s: one converts, the other waits for it); then this process uses that cache."""
    cache = tmp_path_factory.mktemp("nbstream-cache")
    env = {**os.environ, "NBSTREAM_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", CONVERT],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [worker.communicate(timeout=600) for worker in workers]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NBSTREAM_CACHE", str(cache))
        folder = cache / models.DEFAULT_NAME
        mtime = (folder / "model.safetensors").stat().st_mtime_ns
        again = nbstream.default_model_dir()  # current now: no conversion
        loaded = nbstream.load_model()
    yield {
        "cache": cache,
        "folder": folder,
        "codes": [worker.returncode for worker in workers],
        "stdout": [out.strip() for out, _ in outputs],
        "stderr": [err for _, err in outputs],
        "again": again,
        "mtime": mtime,
        "model": loaded,
    }
    for key, entry in list(models._loaded.items()):
        if entry.model is loaded[0]:
            del models._loaded[key]


@pytest.mark.model
def test_two_processes_converting_the_default_model_both_succeed(fresh_conversion):
    assert fresh_conversion["codes"] == [0, 0], fresh_conversion["stderr"]
    folder = fresh_conversion["folder"]
    assert fresh_conversion["stdout"] == [str(folder), str(folder)]
    # One converted (its progress bar says so); the other waited for it, or found it done.
    progress = [err for err in fresh_conversion["stderr"] if "preparing the default model" in err]
    assert len(progress) == 1


@pytest.mark.model
def test_conversion_writes_a_complete_checkpoint(fresh_conversion):
    cache, folder = fresh_conversion["cache"], fresh_conversion["folder"]
    assert folder == cache / models.DEFAULT_NAME
    for name in ("config.json", "model.safetensors", "generation_config.json", *TOKENIZER_FILES):
        assert (folder / name).is_file(), name
    stamp = json.loads((folder / models._STAMP).read_text())
    assert stamp["version"] == models._CONVERSION_VERSION
    gguf = models.default_gguf_path()
    assert stamp["sha256"] == hashlib.sha256(gguf.read_bytes()).hexdigest()
    # What an older nbstream sharing the cache reads, so that it does not convert again.
    assert json.loads((folder / models._LEGACY_STAMP).read_text()) == {
        "version": 1,
        "source": models.DEFAULT_GGUF,
        "size": gguf.stat().st_size,
    }
    # Atomic: no half-written temporary folder is left behind.
    assert [p.name for p in cache.iterdir() if not p.name.endswith(".lock")] == [folder.name]


@pytest.mark.model
def test_conversion_is_readable_by_others(fresh_conversion, tmp_path):
    probe = tmp_path / "probe"  # created as the workers created theirs: through the umask
    os.close(os.open(probe, os.O_CREAT | os.O_WRONLY, 0o777))
    umask = 0o777 & ~probe.stat().st_mode
    folder = fresh_conversion["folder"]
    assert folder.stat().st_mode & 0o777 == 0o777 & ~umask
    for path in folder.iterdir():  # safetensors writes model.safetensors 0600
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask, path


@pytest.mark.model
def test_conversion_happens_once(fresh_conversion):
    folder = fresh_conversion["folder"]
    assert fresh_conversion["again"] == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == fresh_conversion["mtime"]


@pytest.mark.model
def test_converted_model_matches_the_cached_one(fresh_conversion, real_model, greedy):
    converted, converted_tok = fresh_conversion["model"]
    model, tokenizer = real_model
    assert converted is not model
    theirs, ours = converted.state_dict(), model.state_dict()
    assert theirs.keys() == ours.keys()
    assert all(torch.equal(theirs[k], ours[k]) for k in ours)
    prompt = "What is the capital of France?"
    expected = greedy(model, tokenizer, prompt, 20)
    assert greedy(converted, converted_tok, prompt, 20) == expected
    run = nbstream.stream(converted, converted_tok, prompt, max_new_tokens=20)
    assert run.wait() == expected[1]
