"""The browser harness itself, against real JupyterLab and Notebook 7."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from jupyter_harness import REPO_ROOT as REPO
from jupyter_harness import decode_ws_frame

pytestmark = pytest.mark.browser


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


def test_run_cells_read_output_and_kernel_eval(lab):
    nb = lab.open_notebook(["import os, sys", "x = 1 + 1\nprint('hello', x)", "x * 21"])
    for i in range(3):
        nb.run_cell(i)
    assert nb.output(0) == ""
    assert nb.output(1) == "hello 2"
    assert nb.output(2) == "42"

    assert nb.kernel_eval("x") == "2"
    assert nb.kernel_eval("sys.executable") == repr(sys.executable)
    # the kernel finds nbstream in this source tree (not in site-packages)
    origin = nb.kernel_eval("__import__('importlib.util').util.find_spec('nbstream').origin")
    assert Path(origin.strip("'\"")).resolve().is_relative_to(REPO), origin
    assert nb.kernel_eval("os.environ.get('HF_HUB_OFFLINE')") == "'1'"
    assert nb.kernel_eval("os.environ.get('TRANSFORMERS_OFFLINE')") == "'1'"
    # silent: the execution count does not move and no cell is added
    count = nb.kernel_eval("get_ipython().execution_count")
    assert nb.kernel_eval("get_ipython().execution_count") == count
    assert nb.kernel_state()["cells"] == 4  # the 3 cells + the one Shift+Enter adds at the end
    with pytest.raises(RuntimeError, match="NameError"):
        nb.kernel_eval("undefined_name")
    assert nb.console_errors() == []


def test_kernel_eval_answers_while_a_cell_blocks(lab):
    nb = lab.open_notebook(
        [
            "import threading\nstarted, release = threading.Event(), threading.Event()",
            "started.set()\nrelease.wait(30)\n'released'",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1, wait=False)
    t0 = time.monotonic()
    wait_until(lambda: nb.kernel_eval("started.is_set()") == "True")
    assert nb.output(1) == ""
    assert nb.kernel_eval("threading.current_thread().name").startswith("'subshell-")
    # a stuck expression times out instead of hanging the test
    with pytest.raises(TimeoutError):
        nb.kernel_eval("release.wait(1.5)", timeout=0.3)
    nb.kernel_eval("release.set()", timeout=5)
    nb.wait_cell(1)
    assert nb.output(1) == "'released'"
    assert time.monotonic() - t0 < 20


def test_ipywidgets_slider_renders_and_syncs(lab):
    nb = lab.open_notebook(["import ipywidgets\nw = ipywidgets.IntSlider(value=7)\nw"])
    nb.run_cell(0)
    cell = nb.cell(0)
    slider = cell.locator(".widget-slider")
    slider.wait_for(state="visible")
    readout = cell.locator(".widget-readout")
    assert readout.inner_text() == "7"
    assert nb.kernel_eval("w.value") == "7"

    # kernel -> browser
    nb.kernel_eval("setattr(w, 'value', 9)")
    wait_until(lambda: readout.inner_text() == "9")
    # browser -> kernel
    cell.locator(".noUi-handle").focus()
    nb.page.keyboard.press("ArrowRight")
    wait_until(lambda: nb.kernel_eval("w.value") == "10")
    assert nb.console_errors() == []


def test_reload_keeps_the_saved_notebook(lab):
    nb = lab.open_notebook(["y = 6 * 7\nprint('saved', y)"])
    kernel = nb.kernel_id()
    nb.run_cell(0)
    nb.save()
    on_disk = json.loads((lab.root_dir / "NB.ipynb").read_text())
    assert "".join(on_disk["cells"][0]["outputs"][0]["text"]) == "saved 42\n"

    nb.reload()
    assert nb.output(0) == "saved 42"
    assert nb.kernel_id() == kernel
    assert nb.kernel_eval("y") == "42"
    nb.run_cell(0)  # the reconnected kernel runs cells
    assert nb.output(0) == "saved 42"


def test_ws_frames_count_a_printing_cell(lab):
    nb = lab.open_notebook(
        ["import time", "for i in range(5):\n    print(i)\n    time.sleep(0.05)"]
    )
    nb.run_cell(0)
    assert any(d == "received" for d, _ in nb.ws_frames())
    nb.clear_ws_frames()
    nb.run_cell(1)
    frames = nb.ws_frames()
    assert frames and all(isinstance(p, bytes) and p for _, p in frames)
    msgs = [(d, decode_ws_frame(p)) for d, p in frames]
    requests = [m for d, m in msgs if d == "sent" and m["msg_type"] == "execute_request"]
    assert len(requests) == 1
    assert requests[0]["content"]["code"].startswith("for i in range(5)")
    request_id = requests[0]["header"]["msg_id"]
    replies = [
        m for d, m in msgs if d == "received" and m["parent_header"].get("msg_id") == request_id
    ]
    types = [m["msg_type"] for m in replies]
    assert {"execute_input", "stream", "execute_reply", "status"} <= set(types)
    assert types.count("execute_reply") == 1
    streamed = "".join(m["content"]["text"] for m in replies if m["msg_type"] == "stream")
    assert streamed == "0\n1\n2\n3\n4\n"
    assert nb.output(1) == "0\n1\n2\n3\n4"


def test_notebook7(notebook7):
    nb = notebook7.open_notebook(
        ["import ipywidgets\nz = 40 + 2\nprint('nb7', z)", "ipywidgets.IntSlider(value=7)"]
    )
    assert "/notebooks/NB.ipynb" in nb.page.url
    nb.run_cell(0)
    nb.run_cell(1)
    assert nb.output(0) == "nb7 42"
    nb.cell(1).locator(".widget-slider").wait_for(state="visible")
    assert nb.kernel_eval("z") == "42"
    assert any(m["msg_type"] == "comm_open" for _, m in nb.ws_messages())
    nb.save()
    nb.reload()
    assert nb.output(0) == "nb7 42"
    assert nb.console_errors() == []


@pytest.mark.browser
def test_a_second_notebook_opens_in_view(lab):
    first = lab.open_notebook(["a = 'first'"], name="first.ipynb")
    first.run_cell(0)
    second = lab.open_notebook(["b = 'second'", "b"], name="second.ipynb")
    second.run_cell(0)
    second.run_cell(1)
    assert "second" in second.output(1)


def test_a_forked_kernel_is_the_kernel_its_kernelspec_names(lab):
    """Kernels come from the fork server (kernel_fork.py): each is still a process of its own,
    in its notebook's folder, with the launcher's environment and a random state of its own;
    an interrupt reaches it, and killing its launcher (as the Jupyter server kills a kernel
    that will not stop) kills it."""
    import psutil

    nb = lab.open_notebook(
        ["import os, sys, random, time, psutil, ipywidgets", "print('asleep')\ntime.sleep(60)"],
        name="sub/forked.ipynb",
    )
    other = lab.open_notebook(["import random"], name="other.ipynb")
    nb.run_cell(0)
    other.run_cell(0)
    parent = nb.kernel_eval("' '.join(psutil.Process(os.getppid()).cmdline())")
    assert "kernel_fork.py serve" in parent, parent
    folder = str(lab.root_dir / "sub")
    assert nb.kernel_eval("os.getcwd()") == repr(folder)
    assert nb.kernel_eval("sys.path[0]") == repr(folder)
    assert nb.kernel_eval("os.path.basename(sys.argv[0])") == "'ipykernel_launcher.py'"
    assert nb.kernel_eval("os.environ['JPY_SESSION_NAME']").endswith("forked.ipynb'")
    assert nb.kernel_eval("os.getsid(0) == os.getpid()") == "True"
    assert nb.kernel_eval("'torch' in sys.modules, 'nbstream' in sys.modules") == "(True, False)"
    assert nb.kernel_eval("random.random()") != other.kernel_eval("random.random()")
    # What looks for a kernel as it is imported finds one (not the fork server's absence).
    targets = nb.kernel_eval("sorted(get_ipython().kernel.comm_manager.targets)")
    assert targets == "['jupyter.widget', 'jupyter.widget.control']", targets
    notebook_tqdm = (
        "issubclass(__import__('tqdm.auto').auto.tqdm, __import__('tqdm.notebook').notebook.tqdm)"
    )
    assert nb.kernel_eval(notebook_tqdm) == "True"

    nb.run_cell(1, wait=False)
    # the cell is in its sleep (not merely queued) when the interrupt comes
    wait_until(lambda: "asleep" in nb.output(1), timeout=30)
    nb.interrupt_kernel()
    nb.wait_cell(1, timeout=30)
    assert "KeyboardInterrupt" in nb.output(1)

    kernel = psutil.Process(int(nb.kernel_eval("os.getpid()")))
    connection_file = f"kernel-{nb.kernel_id()}.json"
    launchers = [
        p
        for p in psutil.process_iter(["cmdline"])
        if any(connection_file in arg for arg in p.info["cmdline"] or [])
    ]
    assert len(launchers) == 1, launchers
    assert "kernel_fork.py" in " ".join(launchers[0].cmdline())
    launchers[0].kill()
    kernel.wait(timeout=10)  # psutil.TimeoutExpired: the kernel outlived its launcher


def test_voila_on_a_port_taken_before_it_binds_serves_on_another(tmp_path, monkeypatch):
    """The harness talks to Voila, not to whoever took the port it chose.

    Voila moves to a nearby port when told a taken one; the harness would then wait on, and
    open, the first port. It is told not to move, and the harness chooses again.
    """
    import socket
    import urllib.request

    import browser_helpers
    import nbformat

    notebook = tmp_path / "hello.ipynb"
    nbformat.write(
        nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('hello from voila')")]),
        notebook,
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([taken.getsockname()[1]])
        chosen = browser_helpers.free_port
        monkeypatch.setattr(browser_helpers, "free_port", lambda: next(ports, None) or chosen())
        with browser_helpers.voila_serving(notebook, tmp_path / "voila.log") as url:
            assert not url.endswith(f":{taken.getsockname()[1]}/"), url
            with urllib.request.urlopen(url, timeout=120) as response:
                assert "hello from voila" in response.read().decode()
