"""Test kernels forked from a process that has already imported what every one imports.

A kernel of the browser tier spends most of its start importing IPython, torch and
transformers: about 3.5 s of CPU on this machine, paid again by each of the tier's hundred-odd
kernels on a 2-core machine the whole suite keeps busy. The harness starts one *fork server*
per Jupyter server, which imports once the part of those that does not depend on being in a
kernel (IMPORTS); the kernelspec runs this file as the kernel's *launcher*, which asks the
fork server for a kernel. The fork server forks, and the child becomes the kernel
`python -m ipykernel_launcher -f CONNECTION_FILE` would have been, with the launcher's
environment, working directory and standard streams, in a session of its own.

Each kernel is still a fresh process of its own, started for its notebook; nothing of nbstream
is imported before the test imports it (IMPORTS names what is). The Jupyter server only knows
the launcher's process, so the launcher stands in for the kernel: it passes on the signals the
server sends (an interrupt, a terminate) and exits with the kernel's exit status; if the
launcher is killed, the fork server kills its kernel. Without a fork server (no
NBSTREAM_KERNEL_FORK_SOCKET in the environment, or nothing listening on it) the launcher
becomes the ordinary kernel.

    python kernel_fork.py serve SOCKET        # the fork server (JupyterServer starts it)
    python kernel_fork.py -f CONNECTION_FILE  # the launcher (the kernelspec's argv)

Only the standard library is imported at the top: the launcher starts in milliseconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import sys
from typing import Any

#: Set to 0 in the tests' environment: the harness starts kernels the ordinary way.
SWITCH_ENV = "NBSTREAM_KERNEL_FORK"
#: The fork server's socket, in the environment the harness gives the Jupyter server.
SOCKET_ENV = "NBSTREAM_KERNEL_FORK_SOCKET"

# What the fork server imports before it forks: what `python -m ipykernel_launcher` imports,
# and the parts of what every test kernel imports first (jupyter_harness.WARM_UP) whose import
# does not depend on where it happens: torch and the torch, numpy and tokenizer modules
# transformers pulls in (about 2 of WARM_UP's 3 s). Not transformers itself: it imports
# `tqdm.auto`, which picks its notebook flavour, and so imports ipywidgets, only inside a
# kernel, and ipywidgets registers its comm targets only if imported inside one (NOT_BEFORE).
# No torch operation runs here: libgomp's thread pool, once started, does not survive a fork.
IMPORTS = (
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "IPython",
    "torch",
    "torch._dynamo",
    "torch.distributed.tensor",
    "torch.distributed.checkpoint",
    "torch.fx.experimental.symbolic_shapes",
    "sympy",
    "numpy",
    "safetensors",
    "tokenizers",
    "regex",
    "jinja2",
    "yaml",
)
# Imported by IMPORTS, none of these may be: each behaves differently when imported outside a
# kernel, or is what a test imports.
NOT_BEFORE = (
    "ipywidgets",
    "tqdm.auto",
    "tqdm.autonotebook",
    "tqdm.notebook",
    "transformers",
    "huggingface_hub",
    "accelerate",
    "matplotlib",
    "anywidget",
    "nbstream",
)

# Signals the Jupyter server sends a kernel's process group, passed on to the kernel.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


# ----- the launcher


def launch(argv: list[str]) -> int:
    """Ask the fork server for a kernel run with `argv`; return its exit status."""
    kernel: list[int] = []
    early: list[int] = []  # signals that came before the kernel's pid

    def forward(signum: int, _frame: object) -> None:
        if not kernel:
            early.append(signum)
            return
        # its process group, as the Jupyter server signals a kernel's (the kernel leads one)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(kernel[0], signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    path = os.environ.get(SOCKET_ENV)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if not path:
            raise OSError("no fork server")
        conn.connect(path)
        socket.send_fds(conn, [b"F"], [0, 1, 2])
        request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}
        conn.sendall(json.dumps(request).encode() + b"\n")
        kernel.append(int(_read_line(conn)))
    except (OSError, ValueError):
        conn.close()
        # The ordinary kernel, in this process: as if the kernelspec had named it.
        os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *argv])
    for signum in early:
        forward(signum, None)
    reply = _read_line(conn).split()
    if len(reply) != 2:  # the fork server is gone (its kernels die with it: _die_with)
        with contextlib.suppress(ProcessLookupError):
            os.kill(kernel[0], signal.SIGKILL)
        return 1
    kind, value = reply[0], int(reply[1])
    if kind == b"signal":  # die of the same signal, as the kernel did
        signal.signal(value, signal.SIG_DFL)
        os.kill(os.getpid(), value)
    return value


# ----- the fork server


def _warm() -> None:
    import importlib

    for name in IMPORTS:
        importlib.import_module(name)
    early = [name for name in NOT_BEFORE if name in sys.modules]
    if early:
        raise SystemExit(f"kernel_fork: {early} imported before a kernel starts; not serving")


def _die_with(server: int) -> None:
    """Be killed when the fork server exits, however it does (Linux's PR_SET_PDEATHSIG)."""
    import ctypes

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != server:  # it exited before the call
        os._exit(1)


def _become_kernel(
    conn: socket.socket, fds: list[int], request: dict[str, object], server: int
) -> None:
    """In the forked child: become `python -m ipykernel_launcher ARGV`; never returns."""
    code: object = 1
    try:
        # the signal handlers a fresh interpreter has, then the signals the fork held back
        for signum in (*FORWARDED, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        _die_with(server)
        os.setsid()
        for target, fd in enumerate(fds):
            if fd != target:
                os.dup2(fd, target)
                os.close(fd)
        conn.close()
        cwd = str(request["cwd"])
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(request["env"])  # type: ignore[arg-type]
        argv = list(request["argv"])  # type: ignore[call-overload]
        import ipykernel_launcher

        sys.argv = [ipykernel_launcher.__file__, *argv]
        sys.path[0] = cwd  # `python -m` puts the working directory first
        import random

        random.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        from ipykernel import kernelapp

        try:
            kernelapp.launch_new_instance(argv=argv)
            code = 0
        except SystemExit as exit_:
            code = exit_.code
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        # What an interpreter does on its way out, then out: never back into the server's loop.
        try:
            import atexit
            import threading

            threading._shutdown()  # type: ignore[attr-defined]  # joins non-daemon threads
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 1)


def _alive(conn: Any) -> bool:
    """A launcher sends nothing after its request: its connection is readable once it is gone."""
    try:
        return bool(conn.recv(1))
    except OSError:  # reset: it died with the kernel's pid unread
        return False


def serve(path: str) -> None:
    """Listen on the unix socket `path` and fork a kernel for each launcher that asks."""
    _warm()
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    kernels: dict[int, socket.socket] = {}  # kernel pid -> its launcher's connection

    def stop(_signum: int, _frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        while os.getppid() == parent:  # the harness is gone: so are its kernels
            for key, _events in selector.select(timeout=0.2):
                if key.fileobj is listener:
                    _accept(listener, selector, kernels)
                elif not _alive(key.fileobj):
                    # the launcher is gone (killed): its kernel goes too
                    selector.unregister(key.fileobj)
                    if key.data in kernels:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(key.data, signal.SIGKILL)
            while kernels:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                conn = kernels.pop(pid, None)
                if conn is None:
                    continue
                if os.WIFSIGNALED(status):
                    reply = f"signal {os.WTERMSIG(status)}\n"
                else:
                    reply = f"exit {os.waitstatus_to_exitcode(status)}\n"
                with contextlib.suppress(OSError):
                    conn.sendall(reply.encode())
                with contextlib.suppress(KeyError, ValueError):
                    selector.unregister(conn)
                conn.close()
    finally:
        for pid in kernels:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        listener.close()
        with contextlib.suppress(OSError):
            os.unlink(path)


def _accept(listener: socket.socket, selector: Any, kernels: dict[int, socket.socket]) -> None:
    conn, _ = listener.accept()
    fds: list[int] = []
    try:
        conn.settimeout(10)
        _msg, fds, _flags, _addr = socket.recv_fds(conn, 1, 3)
        request = json.loads(_read_line(conn))
        conn.settimeout(None)
        if len(fds) != 3:
            raise ValueError(f"{len(fds)} descriptors, not 3")
    except (OSError, ValueError):
        for fd in fds:
            os.close(fd)
        conn.close()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    # The child must not run this server's handlers (SIGTERM's would run serve()'s `finally`
    # in it, killing the other kernels): signals wait until it has reset them.
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    server = os.getpid()
    try:
        pid = os.fork()
    except OSError:  # out of processes: this launcher starts the ordinary kernel
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        for fd in fds:
            os.close(fd)
        conn.close()
        return
    if pid == 0:
        try:
            selector.close()
            listener.close()
            for other in kernels.values():
                other.close()
            _become_kernel(conn, fds, request, server)
        finally:
            os._exit(1)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    for fd in fds:
        os.close(fd)
    kernels[pid] = conn
    try:
        conn.sendall(f"{pid}\n".encode())
    except OSError:  # the launcher is gone already: so goes its kernel
        os.kill(pid, signal.SIGKILL)
        return
    selector.register(conn, selectors.EVENT_READ, pid)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2])
    else:
        sys.exit(launch(sys.argv[1:]))
