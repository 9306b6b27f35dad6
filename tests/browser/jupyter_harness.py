"""Drive a real Jupyter server and Chromium from pytest.

`JupyterServer` starts `jupyter lab` or `jupyter notebook` (Notebook 7) in an isolated set of
folders; `Notebook` is one open notebook in one browser page. `conftest.py` turns them into
fixtures; tests import from it only helpers such as `decode_ws_frame`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import kernel_fork
import psutil
from jupyter_client import BlockingKernelClient

REPO_ROOT = Path(__file__).resolve().parents[2]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

# Environment every kernel (and the server) runs with: nothing may reach the network.
KERNEL_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

# JupyterLab user settings written for every server (file name -> content). Each one removes a
# source of surprise in the page:
USER_SETTINGS = {
    # the "Would you like to get notified about official Jupyter news?" toast, and its fetch
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    # windowing would take cells far from the viewport out of the DOM
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}

# Console errors the stock front end logs on every page load (app -> regexes).
KNOWN_CONSOLE_ERRORS = {
    # Notebook 7.6.5: its shortcuts plugin reads the schema of a plugin not loaded yet
    # (TypeError in notebook_core.js, SettingRegistry.load -> pluginChanged), on every load.
    "notebook": [r"^TypeError: Cannot read properties of undefined \(reading 'schema'\)$"],
}

SERVER_START_TIMEOUT = 90.0
PAGE_TIMEOUT_MS = 30_000
KERNEL_IDLE_TIMEOUT = 60.0
CELL_TIMEOUT = 120.0

# What every test kernel imports first (SETUP's torch, nbstream.testing.tiny_model's
# transformers classes): about 5 s of a small test's 9 s on this machine when a kernel starts
# cold; a kernel forked from kernel_fork.py's server has torch and most of what transformers
# imports already. A spare kernel is started, and made to import these, while the previous
# test runs; open_notebook hands it to the next notebook (a session on its path). Each test
# still gets a fresh kernel process, and nothing of nbstream is imported ahead of the test.
# Expression statements run silently: no name in the user's namespace, no execution count,
# no history, nothing shown.
WARM_UP = "\n".join(
    [
        "__import__('torch')",
        "getattr(__import__('transformers'), 'LlamaForCausalLM')",
        "getattr(__import__('transformers'), 'LlamaConfig')",
        "getattr(__import__('transformers'), 'AutoTokenizer')",
        "getattr(__import__('transformers'), 'PreTrainedTokenizerFast')",
    ]
)
WARM_UP_TIMEOUT = 180.0
# How long start() waits for the kernel fork server's imports (kernel_fork.IMPORTS); a kernel
# asked for sooner starts the ordinary way.
FORK_SERVER_TIMEOUT = 90.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def decode_ws_frame(payload: bytes) -> dict[str, Any]:
    """Decode one kernel websocket frame into a message dict.

    Handles the binary `v1.kernel.websocket.jupyter.org` protocol JupyterLab uses and plain
    JSON (legacy protocol). The result has `channel`, `header`, `parent_header`, `metadata`,
    `content` and `buffers`; `msg_type` is copied up from the header for convenience.
    """
    if payload[:1] == b"{":
        msg = json.loads(payload)
        msg.setdefault("buffers", [])
    else:
        n = int.from_bytes(payload[:8], "little")
        offsets = [int.from_bytes(payload[8 * (i + 1) : 8 * (i + 2)], "little") for i in range(n)]
        parts = [payload[offsets[i] : offsets[i + 1]] for i in range(n - 1)]
        channel, header, parent, metadata, content, *buffers = parts
        msg = {
            "channel": channel.decode(),
            "header": json.loads(header),
            "parent_header": json.loads(parent),
            "metadata": json.loads(metadata),
            "content": json.loads(content),
            "buffers": buffers,
        }
    msg["msg_type"] = msg["header"].get("msg_type")
    return msg


class JupyterServer:
    """A `jupyter lab` / `jupyter notebook` process in its own folders and process group.

    Isolated per server: root dir (the notebooks), JUPYTER_DATA_DIR (holding a `python3`
    kernelspec that runs this interpreter with KERNEL_ENV), config, runtime (connection files),
    JUPYTERLAB_SETTINGS_DIR (USER_SETTINGS), JUPYTERLAB_WORKSPACES_DIR (fresh, so no tabs of an
    earlier run are restored) and IPYTHONDIR.
    """

    def __init__(self, app: str = "lab", base_dir: Path | None = None) -> None:
        if app not in ("lab", "notebook"):
            raise ValueError(f"app must be 'lab' or 'notebook', not {app!r}")
        self.app = app
        self._own_base = base_dir is None
        self.base_dir = Path(base_dir or tempfile.mkdtemp(prefix=f"nbstream-{app}-"))
        self.root_dir = self.base_dir / "root"
        self.runtime_dir = self.base_dir / "runtime"
        self.log_path = self.base_dir / "server.log"
        self.token = secrets.token_hex(16)
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_file: Any = None
        # A spare kernel warmed up for the next notebook (see WARM_UP); False (or
        # NBSTREAM_SPARE_KERNEL=0 in the environment) turns it off.
        self.spare_kernels = os.environ.get("NBSTREAM_SPARE_KERNEL", "1") != "0"
        self._spare: str | None = None
        # Kernels forked from a process that has imported torch (kernel_fork.IMPORTS)
        # (kernel_fork.py); False (or NBSTREAM_KERNEL_FORK=0) starts each the ordinary way.
        self.fork_kernels = os.environ.get(kernel_fork.SWITCH_ENV, "1") != "0"
        self.fork_socket = self.base_dir / "kernel-fork.sock"
        self._fork_server: subprocess.Popen[bytes] | None = None
        self._spare_thread: threading.Thread | None = None
        self._closing = threading.Event()
        self._retiring: list[threading.Thread] = []  # background session deletions

    # ----- lifecycle

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _prepare(self) -> dict[str, str]:
        dirs = {
            name: self.base_dir / name
            for name in ("root", "data", "config", "runtime", "settings", "workspaces", "ipython")
        }
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        kdir = dirs["data"] / "kernels" / "python3"
        kdir.mkdir(parents=True, exist_ok=True)
        launcher = (
            [str(Path(kernel_fork.__file__))] if self.fork_kernels else ["-m", "ipykernel_launcher"]
        )
        (kdir / "kernel.json").write_text(
            json.dumps(
                {
                    "argv": [sys.executable, *launcher, "-f", "{connection_file}"],
                    "display_name": "Python 3 (nbstream test venv)",
                    "language": "python",
                    "env": KERNEL_ENV,
                    # no debugger: its debug_request traffic would show in ws_frames()
                    "metadata": {"debugger": False},
                    "kernel_protocol_version": "5.5",
                },
                indent=1,
            )
        )
        # No announcements or update checks from the server (there is no network anyway).
        (dirs["config"] / "jupyter_lab_config.json").write_text(
            json.dumps(
                {
                    "LabApp": {
                        "news_url": None,
                        "check_for_updates_class": "jupyterlab.handlers.announcements"
                        ".NeverCheckForUpdate",
                    }
                }
            )
        )
        for rel, content in USER_SETTINGS.items():
            path = dirs["settings"] / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(content))
        env = dict(os.environ)
        # The package under test need not be installed: the kernel imports it from the repo,
        # unless the run tests an installed copy (tests/test_packaging.py sets this).
        repo = [] if os.environ.get("NBSTREAM_EXPECT_INSTALLED") else [str(REPO_ROOT)]
        pythonpath = [*repo, *filter(None, [env.get("PYTHONPATH")])]
        env.update(KERNEL_ENV)
        env.update(
            {
                "JUPYTER_DATA_DIR": str(dirs["data"]),
                "JUPYTER_CONFIG_DIR": str(dirs["config"]),
                "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
                "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]),
                "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]),
                "IPYTHONDIR": str(dirs["ipython"]),
                "JUPYTER_PLATFORM_DIRS": "0",
                # in a venv jupyter_core would otherwise look in sys.prefix before our data
                # dir, and the venv's own python3 kernelspec would win
                "JUPYTER_PREFER_ENV_PATH": "0",
                "PYTHONPATH": os.pathsep.join(pythonpath),
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.pop("JUPYTER_PATH", None)
        env.pop("JUPYTER_TOKEN", None)
        env.pop(kernel_fork.SOCKET_ENV, None)
        if self.fork_kernels:
            env[kernel_fork.SOCKET_ENV] = str(self.fork_socket)
        return env

    def start(self, timeout: float = SERVER_START_TIMEOUT, attempts: int = 3) -> JupyterServer:
        """Start the server and wait until /api/status answers (with the token).

        Raises RuntimeError with the tail of the server log when it exits or does not
        answer within `timeout`; a port taken between choosing and binding it is retried.
        """
        env = self._prepare()
        for attempt in range(attempts):
            self._start_fork_server(env)  # it imports while the server starts
            self.port = free_port()
            if self._launch(env, timeout):
                self._closing.clear()
                self._wait_fork_server()
                self.warm_spare()
                return self
            log = self.log_tail()
            port_taken = "could not be started because port" in log
            self.stop()
            if not port_taken or attempt == attempts - 1:
                raise RuntimeError(f"jupyter {self.app} did not start.\n{log}")
        raise AssertionError("unreachable")

    def _launch(self, env: dict[str, str], timeout: float) -> bool:
        module = "jupyterlab" if self.app == "lab" else "notebook"
        app_class = "LabApp" if self.app == "lab" else "JupyterNotebookApp"
        cmd = [
            sys.executable,
            "-m",
            module,
            "--no-browser",
            "--allow-root",
            "--ip=127.0.0.1",
            f"--port={self.port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root_dir}",
            "--ServerApp.open_browser=False",
            # window.jupyterapp: lets the harness read kernel and cell state from the page
            f"--{app_class}.expose_app_in_browser=True",
            "--LanguageServerManager.autodetect=False",
        ]
        self.proc = self._spawn(cmd, env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._log_file.write(
                    f"### harness: exited with {self.proc.returncode} during start-up\n".encode()
                )
                return False
            try:
                if "started" in self.api("GET", "/api/status", timeout=2):
                    return True
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        self._log_file.write(f"### harness: no /api/status within {timeout:.0f} s\n".encode())
        return False

    def _start_fork_server(self, env: dict[str, str]) -> None:
        if not self.fork_kernels or self._fork_server is not None:
            return
        with contextlib.suppress(FileNotFoundError):
            self.fork_socket.unlink()
        self._fork_server = self._spawn(
            [sys.executable, kernel_fork.__file__, "serve", str(self.fork_socket)], env
        )

    def _spawn(self, cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        """Start `cmd` in the notebook folder, in a session of its own, writing to the log."""
        if self._log_file is None:
            self._log_file = open(self.log_path, "ab", buffering=0)  # noqa: SIM115 - see stop()
        self._log_file.write(f"\n### harness: {' '.join(cmd)}\n".encode())
        return subprocess.Popen(
            cmd,
            cwd=self.root_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def _wait_fork_server(self) -> None:
        proc = self._fork_server
        if proc is None:
            return
        deadline = time.monotonic() + FORK_SERVER_TIMEOUT
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as probe:
                probe.connect(str(self.fork_socket))
                return
            time.sleep(0.1)
        self._note("kernel fork server not ready: kernels start the ordinary way until it is")

    def _stop_fork_server(self) -> None:
        """The fork server kills the kernels it forked as it exits (SIGTERM)."""
        proc, self._fork_server = self._fork_server, None
        if proc is None or proc.poll() is not None:
            return
        try:
            kernels = psutil.Process(proc.pid).children()
        except psutil.Error:
            kernels = []
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        _gone, alive = psutil.wait_procs(kernels, timeout=5)
        for kernel in alive:
            with contextlib.suppress(psutil.Error):
                kernel.kill()

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the server, its process group and any kernel it started (kernels run in
        sessions of their own, so the group alone would miss them), then the kernel fork
        server and the kernels it forked."""
        # no spare kernel may be started after the kernels to stop are listed
        self._closing.set()
        thread, self._spare_thread, self._spare = self._spare_thread, None, None
        if thread is not None:
            thread.join(30)
        retiring, self._retiring = self._retiring, []
        for thread in retiring:
            thread.join(30)
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            try:
                children = psutil.Process(proc.pid).children(recursive=True)
            except psutil.Error:
                children = []
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
            _gone, alive = psutil.wait_procs(children, timeout=5)
            for child in alive:
                with contextlib.suppress(psutil.Error):
                    child.kill()
        self._stop_fork_server()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def cleanup(self) -> None:
        self.stop()
        if self._own_base:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def log_tail(self, chars: int = 6000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        return f"--- last of {self.log_path} ---\n" + text[-chars:]

    # ----- REST

    def api(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def shutdown_sessions(self, path: str | None = None) -> None:
        """Delete sessions (and so shut their kernels down), all or those of one notebook."""
        for s in self.api("GET", "/api/sessions"):
            if path is None or s.get("path") == path:
                with contextlib.suppress(urllib.error.HTTPError):
                    self.api("DELETE", f"/api/sessions/{s['id']}", timeout=30)

    def retire_sessions(self, path: str) -> None:
        """Shut down the sessions of one notebook without waiting for their kernels to exit
        (about 2.6 s each here): each session is moved off the notebook's path at once, so
        that the next page on that path starts (or is given) a kernel of its own, and is
        deleted in the background; stop() waits for those deletions."""
        self._retiring = [t for t in self._retiring if t.is_alive()]
        for s in self.api("GET", "/api/sessions"):
            if s.get("path") != path:
                continue
            retired = {"path": f".retired/{uuid.uuid4().hex[:12]}-{path}"}
            try:
                self.api("PATCH", f"/api/sessions/{s['id']}", retired, timeout=30)
            except (OSError, ValueError):  # not moved: delete it now, waiting
                with contextlib.suppress(urllib.error.HTTPError):
                    self.api("DELETE", f"/api/sessions/{s['id']}", timeout=30)
                continue
            thread = threading.Thread(
                target=self._delete_session, args=(s["id"],), name="harness-retire", daemon=True
            )
            thread.start()
            self._retiring.append(thread)

    def _delete_session(self, session_id: str) -> None:
        try:
            self.api("DELETE", f"/api/sessions/{session_id}", timeout=60)
        except Exception as err:  # stop() kills whatever kernel is left
            self._note(f"session {session_id} not deleted: {err!r}")

    # ----- a spare kernel, warmed up for the next notebook

    def warm_spare(self) -> None:
        """Start a kernel and make it import WARM_UP, in the background (take_spare gets it)."""
        if not self.spare_kernels or self._closing.is_set() or self._spare_thread is not None:
            return
        self._spare_thread = threading.Thread(
            target=self._warm_spare, name="harness-spare-kernel", daemon=True
        )
        self._spare_thread.start()

    def _warm_spare(self) -> None:
        kid = None
        client = None
        try:
            kid = self.api("POST", "/api/kernels", {"name": "python3"}, timeout=60)["id"]
            client = BlockingKernelClient()
            client.load_connection_file(str(self.runtime_dir / f"kernel-{kid}.json"))
            client.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
            content = {
                "code": WARM_UP,
                "silent": True,
                "store_history": False,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": True,
            }
            msg = client.session.msg("execute_request", content)
            client.shell_channel.send(msg)
            deadline = time.monotonic() + WARM_UP_TIMEOUT
            while not self._closing.is_set():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no reply within {WARM_UP_TIMEOUT:.0f} s")
                try:
                    reply = client.shell_channel.get_msg(timeout=1.0)
                except Exception:  # queue.Empty: not yet
                    continue
                if reply["parent_header"].get("msg_id") != msg["header"]["msg_id"]:
                    continue
                if reply["content"].get("status") != "ok":
                    raise RuntimeError(f"warm-up failed: {reply['content']}")
                self._spare, kid = kid, None
                return
        except Exception as err:  # the next notebook starts a kernel of its own
            self._note(f"spare kernel not warmed up: {err!r}")
        finally:
            if client is not None:
                with contextlib.suppress(Exception):
                    client.stop_channels()
            if kid is not None and not self._closing.is_set():
                with contextlib.suppress(Exception):
                    self.api("DELETE", f"/api/kernels/{kid}", timeout=30)

    def take_spare(self) -> str | None:
        """The warmed-up spare kernel's id (waiting for its warm-up), or None; a new spare
        is started by the next warm_spare()."""
        thread, self._spare_thread = self._spare_thread, None
        if thread is not None:
            thread.join(WARM_UP_TIMEOUT + 60)
        kid, self._spare = self._spare, None
        return kid

    def _note(self, text: str) -> None:
        if self._log_file is not None:
            with contextlib.suppress(Exception):
                self._log_file.write(f"### harness: {text}\n".encode())

    def write_notebook(self, name: str, cells: list[str]) -> Path:
        nb = {
            "cells": [
                {
                    "cell_type": "code",
                    "execution_count": None,
                    "id": f"cell-{i}",
                    "metadata": {},
                    "outputs": [],
                    "source": src,
                }
                for i, src in enumerate(cells)
            ],
            "metadata": {
                "kernelspec": {
                    "display_name": "Python 3 (nbstream test venv)",
                    "language": "python",
                    "name": "python3",
                },
                "language_info": {"name": "python"},
            },
            "nbformat": 4,
            "nbformat_minor": 5,
        }
        path = self.root_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(nb, indent=1))
        return path

    def notebook_url(self, name: str) -> str:
        # A fresh Lab workspace per page: otherwise Lab restores the tabs an earlier page of
        # this server had open, and the notebook asked for may sit behind a hidden tab.
        prefix = (
            f"/lab/workspaces/nb-{uuid.uuid4().hex[:12]}/tree/"
            if self.app == "lab"
            else "/notebooks/"
        )
        return f"{self.url}{prefix}{urllib.request.quote(name)}?token={self.token}"


# JavaScript run in the page. `window.jupyterapp` exists because the server runs with
# expose_app_in_browser; the notebook panel is found through the app's shell (Lab and Notebook 7
# both keep the opened notebook as `currentWidget`).
_JS_PANEL = """
  const app = window.jupyterapp;
  const shell = app && app.shell;
  const w = shell && shell.currentWidget;
  const panel = w && w.sessionContext && w.content && w.content.model ? w : null;
"""

_JS_KERNEL_STATE = (
    "() => {"
    + _JS_PANEL
    + """
  if (!panel) return {ready: false};
  const sc = panel.sessionContext;
  const kernel = sc.session && sc.session.kernel;
  return {
    ready: true,
    path: sc.path,
    kernelId: kernel ? kernel.id : null,
    kernelName: kernel ? kernel.name : null,
    status: kernel ? kernel.status : null,
    connection: kernel ? kernel.connectionStatus : null,
    dirty: panel.content.model.dirty,
    cells: panel.content.model.cells.length,
  };
}"""
)

_JS_EXEC_COUNT = (
    "(index) => {"
    + _JS_PANEL
    + """
  const cell = panel ? panel.content.model.cells.get(index) : null;
  return cell ? cell.executionCount : null;
}"""
)

_JS_SAVE = (
    "async () => {"
    + _JS_PANEL
    + """
  await panel.context.save();
  return panel.content.model.dirty;
}"""
)


class Notebook:
    """One notebook opened in its own browser context and page.

    Cell indices are positions in the notebook as the page shows it (0-based).
    """

    def __init__(self, server: JupyterServer, context: Any, name: str) -> None:
        self.server = server
        self.context = context
        self.name = name
        self.page = context.new_page()
        self.page.set_default_timeout(PAGE_TIMEOUT_MS)
        self.console: list[tuple[str, str]] = []  # (type, text), every console message
        self._errors: list[str] = []
        self._frames: list[tuple[str, bytes]] = []
        self._client: BlockingKernelClient | None = None
        self._client_kernel: str | None = None
        self._subshell: str | None = None
        self._before: dict[int, int | None] = {}  # execution count before run_cell
        self.dialogs: list[str] = []  # text of every JupyterLab dialog dismissed
        self.page.on("console", self._on_console)
        self.page.on("pageerror", self._on_pageerror)
        self.page.on("websocket", self._on_websocket)
        self.page.on("dialog", self._on_dialog)

    # ----- page events

    def _on_console(self, msg: Any) -> None:
        text = msg.text
        self.console.append((msg.type, text))
        if msg.type == "error":
            self._errors.append(text)

    def _on_pageerror(self, err: Any) -> None:
        text = f"{getattr(err, 'name', 'Error')}: {getattr(err, 'message', err)}"
        self.console.append(("pageerror", getattr(err, "stack", None) or text))
        self._errors.append(text)

    def _on_websocket(self, ws: Any) -> None:
        if "/channels" not in ws.url:
            return

        def keep(direction: str, payload: str | bytes) -> None:
            data = payload.encode() if isinstance(payload, str) else bytes(payload)
            self._frames.append((direction, data))

        ws.on("framesent", lambda payload: keep("sent", payload))
        ws.on("framereceived", lambda payload: keep("received", payload))

    def _on_dialog(self, dialog: Any) -> None:
        # The native dialog JupyterLab raises is "leave page with unsaved changes?" on
        # reload/close; accept it (and any alert/confirm) so that nothing hangs.
        self.console.append(("harness", f"accepted native {dialog.type} dialog"))
        with contextlib.suppress(Exception):
            dialog.accept()

    # ----- opening

    def open(self, timeout: float = KERNEL_IDLE_TIMEOUT) -> Notebook:
        self.page.goto(self.server.notebook_url(self.name), wait_until="domcontentloaded")
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = KERNEL_IDLE_TIMEOUT) -> None:
        """Wait until the notebook is rendered and its kernel connected and idle."""
        self.page.locator(".jp-Notebook .jp-Cell").first.wait_for(
            state="visible", timeout=timeout * 1000
        )
        self.wait_kernel_idle(timeout)
        self.dismiss_dialogs()

    def kernel_state(self) -> dict[str, Any]:
        return self.page.evaluate(_JS_KERNEL_STATE)

    def wait_kernel_idle(self, timeout: float = KERNEL_IDLE_TIMEOUT) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        state: dict[str, Any] = {}
        while time.monotonic() < deadline:
            state = self.kernel_state()
            if state.get("status") == "idle" and state.get("connection") == "connected":
                return state
            self.dismiss_dialogs()
            self.page.wait_for_timeout(100)
        raise TimeoutError(f"kernel not idle and connected after {timeout:.0f} s: {state}")

    def dismiss_dialogs(self) -> None:
        """Close any JupyterLab modal dialog: they intercept every click.

        A kernel picker is accepted (it preselects the notebook's kernel); any other dialog
        is cancelled. Each one is recorded in `self.dialogs` and the console log.
        """
        dialogs = self.page.locator(".jp-Dialog")
        for _ in range(5):
            if dialogs.count() == 0:
                return
            dialog = dialogs.first
            try:
                text = dialog.inner_text(timeout=2000)
            except Exception:  # closed meanwhile
                continue
            self.dialogs.append(text)
            self.console.append(("harness", f"dismissed dialog: {text!r}"))
            kind = ".jp-mod-accept" if "Select Kernel" in text else ".jp-mod-reject"
            button = dialog.locator(f".jp-Dialog-footer button{kind}")
            if button.count():
                button.first.click()
            else:
                self.page.keyboard.press("Escape")
            self.page.wait_for_timeout(200)

    # ----- cells

    def cell(self, index: int) -> Any:
        return self.page.locator(".jp-Notebook .jp-Cell").nth(index)

    def execution_count(self, index: int) -> int | None:
        return self.page.evaluate(_JS_EXEC_COUNT, index)

    def run_cell(self, index: int, wait: bool = True, timeout: float = CELL_TIMEOUT) -> int | None:
        """Click into the cell's editor and press Shift+Enter, as a user would.

        With `wait`, return the cell's new execution count once it finished (see wait_cell).
        Without, return None at once; call wait_cell(index) later to wait. Shift+Enter on
        the last cell adds an empty cell below it, as in JupyterLab by hand.
        """
        cell = self.cell(index)
        cell.scroll_into_view_if_needed()
        self._before[index] = self.execution_count(index)
        cell.locator(".jp-InputArea-editor").click()
        self.page.keyboard.press("Shift+Enter")
        return self.wait_cell(index, timeout) if wait else None

    def wait_cell(self, index: int, timeout: float = CELL_TIMEOUT) -> int:
        """Wait until the last run of cell `index` (by run_cell) finished; return its count.

        Finished means: the prompt shows an execution count other than the one before the
        run (JupyterLab sets it only after the execute reply *and* all of the cell's output
        arrived) and the kernel is idle again. For a cell never started by run_cell, any
        execution count will do. Raises TimeoutError after `timeout` seconds.
        """
        before = self._before.get(index)
        prompt = self.cell(index).locator(".jp-InputPrompt")
        deadline = time.monotonic() + timeout
        while True:
            count = self.execution_count(index)
            text = prompt.inner_text().strip()
            if count is not None and count != before and "*" not in text:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"cell {index} still running after {timeout:.0f} s (prompt {text!r})"
                )
            self.page.wait_for_timeout(50)
        self._before.pop(index, None)
        self.wait_kernel_idle(max(1.0, deadline - time.monotonic()))
        return count

    def outputs(self, index: int) -> list[str]:
        """The rendered text of each output of the cell (prompts left out)."""
        return self.cell(index).locator(".jp-OutputArea-output").all_inner_texts()

    def output(self, index: int) -> str:
        """The text of the cell's outputs, joined by newlines ('' when there is none)."""
        return "\n".join(text.rstrip("\n") for text in self.outputs(index))

    # ----- saving and reloading

    def save(self) -> None:
        dirty = self.page.evaluate(_JS_SAVE)
        if dirty:
            raise RuntimeError("notebook still dirty after save")

    def reload(self, timeout: float = KERNEL_IDLE_TIMEOUT) -> None:
        """Reload the page (unsaved changes are dropped: call save() first to keep them), then
        wait until the notebook is rendered and its kernel reconnected and idle."""
        self.page.reload(wait_until="domcontentloaded")
        self.wait_ready(timeout)

    # ----- websocket traffic

    def _pump(self) -> None:
        # The sync API delivers page events only while it talks to the browser: a round trip
        # makes every frame the browser saw before it visible here.
        self.page.evaluate("0")

    def ws_frames(self) -> list[tuple[str, bytes]]:
        """(direction, payload) of every frame on the kernel's `/channels` websockets since
        the page opened (including across reloads); direction is 'sent' or 'received'."""
        self._pump()
        return list(self._frames)

    def clear_ws_frames(self) -> None:
        self._frames.clear()

    def ws_messages(self, include_harness: bool = False) -> list[tuple[str, dict[str, Any]]]:
        """ws_frames() decoded with decode_ws_frame. Unless include_harness, messages caused by
        kernel_eval (its busy/idle status, broadcast to every client) are left out."""
        harness = self._client.session.session if self._client is not None else None
        out = []
        for direction, payload in self.ws_frames():
            msg = decode_ws_frame(payload)
            if (
                not include_harness
                and harness is not None
                and msg["parent_header"].get("session") == harness
            ):
                continue
            out.append((direction, msg))
        return out

    # ----- console

    def console_errors(self, ignore_known: bool = True) -> list[str]:
        """Console messages of type 'error' and uncaught page errors, in order.

        With `ignore_known`, errors in KNOWN_CONSOLE_ERRORS (raised by the unmodified
        Jupyter front end on every page load, nothing to do with the code under test) are
        left out.
        """
        self._pump()
        if not ignore_known:
            return list(self._errors)
        known = KNOWN_CONSOLE_ERRORS.get(self.server.app, [])
        return [e for e in self._errors if not any(re.search(k, e) for k in known)]

    # ----- the kernel, from Python

    def kernel_id(self) -> str:
        kid = self.kernel_state().get("kernelId")
        if not kid:
            raise RuntimeError("the notebook has no kernel")
        return kid

    def interrupt_kernel(self) -> None:
        """Interrupt the kernel (as the toolbar's stop button does), through the REST API."""
        self.server.api("POST", f"/api/kernels/{self.kernel_id()}/interrupt", timeout=30)

    def _kernel_client(self) -> BlockingKernelClient:
        kid = self.kernel_id()
        if self._client is not None and self._client_kernel == kid:
            return self._client
        self._close_client()
        client = BlockingKernelClient()
        client.load_connection_file(str(self.server.runtime_dir / f"kernel-{kid}.json"))
        client.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=True)
        # kernel_info over the *control* channel: on the shell channel it would queue behind
        # a running cell.
        msg = client.session.msg("kernel_info_request", {})
        client.control_channel.send(msg)
        info = self._reply(client.control_channel, msg["header"]["msg_id"], 10.0)["content"]
        self._client, self._client_kernel = client, kid
        if "kernel subshells" in info.get("supported_features", []):
            msg = client.session.msg("create_subshell_request", {})
            client.control_channel.send(msg)
            reply = self._reply(client.control_channel, msg["header"]["msg_id"], 10.0)
            self._subshell = reply["content"]["subshell_id"]
        return client

    @staticmethod
    def _reply(channel: Any, msg_id: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no reply from the kernel within {timeout:.0f} s")
            try:
                msg = channel.get_msg(timeout=left)
            except Exception as err:  # queue.Empty
                raise TimeoutError(f"no reply from the kernel within {timeout:.0f} s") from err
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg

    def kernel_eval(self, expr: str, timeout: float = 10.0) -> str:
        """Evaluate `expr` in the notebook's kernel and return its repr (text/plain).

        Runs through a separate ZMQ client on the kernel's connection file, as a silent
        execute request with `expr` as a user expression: no cell is added, the execution
        count does not move, nothing is printed in the notebook. On ipykernel >= 7 the request
        goes to a subshell of the harness's own, so it answers while a cell blocks the main
        shell (e.g. in `w.wait()`); the expression then runs on another thread, concurrently
        with that cell. Without subshells it queues behind the running cell. Either way it
        raises TimeoutError after `timeout` seconds; an exception in `expr` raises
        RuntimeError with the kernel's traceback. Its busy/idle status messages reach the
        page too (ws_messages() leaves them out).
        """
        content = {
            "code": "",
            "silent": True,
            "store_history": False,
            "user_expressions": {"value": expr},
            "allow_stdin": False,
            "stop_on_error": False,
        }
        for attempt in range(2):
            client = self._kernel_client()
            msg = client.session.msg("execute_request", content)
            if self._subshell is not None:
                msg["header"]["subshell_id"] = self._subshell
            client.shell_channel.send(msg)
            reply = self._reply(client.shell_channel, msg["header"]["msg_id"], timeout)
            reply = reply["content"]
            if reply.get("ename") != "UnknownSubshellError" or attempt:
                break
            # the kernel was restarted (same id and ports, no subshells): make a new one
            self._close_client()
        if reply.get("status") != "ok":
            raise RuntimeError(f"kernel_eval({expr!r}) failed: {reply}")
        value = reply["user_expressions"]["value"]
        if value.get("status") != "ok":
            tb = "\n".join(value.get("traceback", []))
            raise RuntimeError(
                f"kernel_eval({expr!r}) raised {value.get('ename')}: {value.get('evalue')}\n"
                + re.sub(r"\x1b\[[0-9;]*m", "", tb)
            )
        # A value IPython shows through a display formatter of its own (a run: a live view,
        # or nothing beside its widget) has no text/plain here; it is evaluated all the same.
        return value["data"].get("text/plain", "")

    def _close_client(self) -> None:
        client, self._client, self._subshell = self._client, None, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.stop_channels()

    # ----- teardown

    def close(self) -> None:
        self._close_client()
        with contextlib.suppress(Exception):
            self.context.close()


class Jupyter:
    """What the `lab` / `notebook7` fixtures give a test: the session's server plus the
    pages this test opened. Everything opened is closed, and its kernels shut down, when
    the test ends."""

    def __init__(self, server: JupyterServer, browser: Any) -> None:
        self.server = server
        self.browser = browser
        self.notebooks: list[Notebook] = []

    @property
    def root_dir(self) -> Path:
        return self.server.root_dir

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def token(self) -> str:
        return self.server.token

    def open_notebook(
        self, cells: list[str], name: str = "NB.ipynb", timeout: float = KERNEL_IDLE_TIMEOUT
    ) -> Notebook:
        """Write `cells` (code cells, no outputs, kernelspec python3 = this venv) as `name`
        into the root dir, open it in a fresh browser context and page, and return once it
        is rendered and its new kernel connected and idle."""
        # A kernel left over from an earlier page on the same path would be reused.
        self.server.shutdown_sessions(name)
        self.server.write_notebook(name, cells)
        # The warmed-up spare kernel (WARM_UP) becomes this notebook's: the page finds the
        # session on its path and connects to it, as to a kernel it started itself. A
        # notebook in a sub-folder gets a kernel of its own (its working directory).
        kid = self.server.take_spare() if "/" not in name else None
        if kid is not None:
            session = {"path": name, "name": name, "type": "notebook", "kernel": {"id": kid}}
            self.server.api("POST", "/api/sessions", session, timeout=30)
        context = self.browser.new_context(viewport={"width": 1280, "height": 900})
        nb = Notebook(self.server, context, name)
        self.notebooks.append(nb)
        nb.open(timeout)
        self.server.warm_spare()
        return nb

    def save_artifacts(self, folder: Path) -> list[Path]:
        """Screenshot and console log of every open page, and the server log, into folder."""
        shutil.rmtree(folder, ignore_errors=True)  # no stale files from an earlier failure
        folder.mkdir(parents=True, exist_ok=True)
        saved = []
        for i, nb in enumerate(self.notebooks):
            stem = f"{self.server.app}-{i}-{Path(nb.name).stem}"
            shot = folder / f"{stem}.png"
            with contextlib.suppress(Exception):
                nb.page.screenshot(path=str(shot), full_page=True, timeout=10_000)
                saved.append(shot)
            with contextlib.suppress(Exception):
                nb._pump()
            log = folder / f"{stem}.console.txt"
            lines = [f"[{kind}] {text}" for kind, text in nb.console]
            with contextlib.suppress(Exception):
                lines.append(f"[harness] kernel state: {nb.kernel_state()}")
            log.write_text("\n".join(lines) + "\n")
            saved.append(log)
        server_log = folder / f"{self.server.app}-server.log"
        with contextlib.suppress(OSError):
            shutil.copyfile(self.server.log_path, server_log)
            saved.append(server_log)
        return saved

    def close(self) -> None:
        for nb in self.notebooks:
            nb.close()
        for nb in self.notebooks:
            with contextlib.suppress(Exception):
                self.server.retire_sessions(nb.name)
        self.notebooks.clear()
