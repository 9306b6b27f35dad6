"""Script-style use: a plain ``python`` process that ends right after its last ``wait()``.

Nothing nbstream started may still be working on the model then: torch aborts the process
(SIGABRT, "terminate called without an active exception") when a thread is inside an
operation while the interpreter shuts down. Each script runs in its own process, and its
exit status is the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

TIMEOUT = 240  # a hang fails the test instead of blocking the suite

TINY = """\
import nbstream
from nbstream.testing import tiny_model
model, tokenizer = tiny_model(one_line=True)
"""
DEFAULT = """\
import nbstream
model, tokenizer = nbstream.load_model()
"""

SCRIPTS = {
    "stream": """\
run = nbstream.stream(model, tokenizer, "Name two colors.", max_new_tokens=40)
print(len(run.wait()) > 0)
""",
    "stream widget": """\
w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=40)
w.generate("Name two colors.")
print(len(w.wait()) > 0)
""",
    "chat widget": """\
chat = nbstream.ChatWidget(model, tokenizer, max_new_tokens=40)
chat.generate("Name two colors.")
chat.wait()
chat.generate("And two more?")
print(len(chat.wait()) > 0)
""",
    # Two columns that part at once (greedy, and sampled hot): their marks need a forward
    # pass of the model, after the runs.
    "compare": """\
cw = nbstream.CompareWidget(model, tokenizer, "Name two colors.", max_new_tokens=40,
                            settings=[{"temperature": 0}, {"temperature": 5.0, "seed": 3}])
cw.generate()
print(all(r is not None for r in cw.wait()))
""",
    "branch": """\
run = nbstream.stream(model, tokenizer, "Name two colors.", max_new_tokens=40)
run.wait()
branch = run.branch(3, run.token_ids[3] + 1)
print(len(branch.wait()) > 0)
""",
    "explainer": """\
run = nbstream.stream(model, tokenizer, "Name two colors.", max_new_tokens=40, alternatives=3)
run.wait()
print(run.distribution(5, temperature=0.7, top_p=0.9).describe()[:20])
""",
    # The sampling panel's request, sent as the page sends it: answered on the widget's
    # worker thread, which is still at it when the script ends.
    "sampling panel": """\
w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=40)
w.generate("Name two colors.")
w.wait()
request = {"type": "distribution", "view": "v1", "request": 1, "run_id": w.run_id, "step": 5}
w._handle_message(w, request, [])
print(True)
""",
}


def run_script(setup: str, body: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-c", setup + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT,
    )


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_a_script_exits_0_right_after_its_last_wait(name):
    """A fresh interpreter per script (its exit is the test): torch and transformers imported
    again and the tiny model built, about 4 s of CPU, up to a minute on a busy machine."""
    done = run_script(TINY, SCRIPTS[name])
    assert done.returncode == 0, f"exit status {done.returncode}:\n{done.stderr[-3000:]}"
    assert done.stdout.strip().splitlines()[-1] not in ("", "False")


@pytest.mark.parametrize("how", ["running", "queued behind another"])
def test_a_script_that_ends_before_its_run_exits_0(how):
    """A fresh interpreter (see test_a_script_exits_0_right_after_its_last_wait): seconds on
    an idle machine, up to a minute on a busy one."""
    # No wait(): the run is still generating (and, queued, another still waits) when the
    # interpreter exits; each is stopped and its worker joined first.
    body = """\
first = nbstream.stream(model, tokenizer, "Name two colors.", max_new_tokens=5000)
for _ in first:
    break
runs = [first]
if HOW == "queued behind another":
    runs.append(nbstream.stream(model, tokenizer, "And two more?", max_new_tokens=5000))
print(all(run.status in ("running", "queued") for run in runs))
"""
    done = run_script(TINY + f"HOW = {how!r}\n", body)
    assert done.returncode == 0, f"exit status {done.returncode}:\n{done.stderr[-3000:]}"
    assert done.stdout.strip().splitlines()[-1] == "True"


def test_work_queued_behind_a_run_at_exit_does_not_keep_the_process(tmp_path):
    """A fresh interpreter (see test_a_script_exits_0_right_after_its_last_wait): seconds on
    an idle machine, up to a minute on a busy one."""
    # The sampling panel's forward pass (on a non-daemon worker) waits in the model's queue
    # behind a long run when the script ends: the run is stopped before the interpreter
    # joins that worker, instead of the exit waiting for all its tokens.
    out = tmp_path / "status"
    body = f"""\
w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=40)
w.generate("Name two colors.")
w.wait()
long = nbstream.stream(model, tokenizer, "Count.", max_new_tokens=8000)
long.add_done_callback(lambda run: open({str(out)!r}, "w").write(run.status))
for _ in long:
    break
request = {{"type": "distribution", "view": "v1", "request": 1, "run_id": w.run_id, "step": 5}}
w._handle_message(w, request, [])
print(True)
"""
    done = run_script(TINY, body)
    assert done.returncode == 0, f"exit status {done.returncode}:\n{done.stderr[-3000:]}"
    assert out.read_text() == "cancelled"


def test_a_hung_name_lookup_does_not_hold_the_exit():
    # A resolver that never answers: the run is stopped, and the process exits although the
    # lookup's thread is still inside getaddrinfo.
    body = """\
import socket, threading, time
def hang(*args, **kwargs):
    time.sleep(600)
socket.getaddrinfo = hang
endpoint = nbstream.Endpoint("http://slowhost.invalid:9/v1", "m", server="vllm")
run = nbstream.stream(endpoint, None, "Hi")
time.sleep(0.5)
run.stop()
print(run.join(30) and run.status == "cancelled")
"""
    done = run_script("import nbstream\n", body)  # TIMEOUT (240 s) < the lookup's 600 s
    assert done.returncode == 0, f"exit status {done.returncode}:\n{done.stderr[-3000:]}"
    assert done.stdout.strip().splitlines()[-1] == "True"
