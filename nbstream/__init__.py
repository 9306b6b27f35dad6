"""nbstream: watch a language model think in a Jupyter notebook.

Streams text from a Hugging Face ``transformers`` model on a background thread, with honest
end states (complete, failed, cancelled), a Stop that really stops generation, and a result
that exists only when the run completed.
"""

from __future__ import annotations

import importlib
import logging
import sys
import types
from typing import TYPE_CHECKING, Any

from . import recording
from ._version import __version__
from .generation import (
    Generation,
    GenerationCancelled,
    GenerationError,
    GenerationFailed,
    replay,
    rerun,
    stream,
)
from .models import ModelNotFoundError, default_model_dir, load_model
from .prompt_template import template
from .recording import load
from .steering import Direction

if TYPE_CHECKING:
    from .arena import arena
    from .backends.remote import Endpoint, EndpointError
    from .doctor import doctor
    from .widgets.chat import ChatWidget
    from .widgets.compare import CompareWidget
    from .widgets.grid import Grid
    from .widgets.stream import StreamWidget

logging.getLogger(__name__).addHandler(logging.NullHandler())

# Imported on first use, not by `import nbstream`: the widgets bring in ipywidgets, anywidget
# and IPython, and the endpoint its HTTP client, none of which a script or the first run of a
# local model needs (about 0.3 s of a fresh process). Each name -> the module defining it.
_LAZY = {
    "ChatWidget": ".widgets.chat",
    # A class's votes into a leaderboard: numpy, and a function named like its module.
    "arena": ".arena",
    "CompareWidget": ".widgets.compare",
    "Endpoint": ".backends.remote",
    # A prompt grid's cells are runs; it shows as a table (a widget), so it comes with them.
    "Grid": ".widgets.grid",
    "EndpointError": ".backends.remote",
    "StreamWidget": ".widgets.stream",
    "doctor": ".doctor",
}
# Subpackages that `import nbstream` used to import as a side effect, so that code reaching
# them as attributes (``nbstream.widgets.stream``) after a plain `import nbstream` still
# finds them.
_LAZY_SUBMODULES = ("widgets",)


class _Package(types.ModuleType):
    """nbstream's module type: ``nbstream.doctor`` stays the function.

    Importing the submodule ``nbstream.doctor`` (the command line does) binds it on the
    package under the same name; with the function imported lazily, nothing would put the
    function back over it, as `from .doctor import doctor` at import time used to.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value  # once: later lookups never come back here
        return value
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_LAZY_SUBMODULES))


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext nbstream``: register the ``%%nbstream`` and ``%nbstream`` magics.

    Args:
        ipython: The running IPython shell (IPython passes it).
    """
    # Imported here, so `import nbstream` does not pull in IPython's magics machinery.
    from .magic import load_ipython_extension as load

    load(ipython)


def _show_run(run: Generation) -> None:
    # The widgets' display of a run, imported when a run is first shown.
    from .widgets.display import show_run

    show_run(run)


def _read_grid_folder(folder: Any) -> Any:
    # nbstream.load(folder): a saved grid, read by the widgets, imported only for a folder.
    from .widgets.grid import read_grid_folder

    return read_grid_folder(folder)


recording.FOLDER_READERS.append(_read_grid_folder)


def _register_run_display() -> None:
    """In a Jupyter kernel, show a run as a live view without importing the widgets now.

    The widgets register the same display when they are imported; until then this stands in,
    so a cell ending in ``nbstream.stream(...)`` shows the run whether or not a widget was
    imported. A kernel has IPython imported already: nothing is imported to find out.
    """
    ipython_module = sys.modules.get("IPython")
    get_ipython = getattr(ipython_module, "get_ipython", None)
    shell = get_ipython() if callable(get_ipython) else None
    if shell is None or getattr(shell, "kernel", None) is None:
        return
    shell.display_formatter.ipython_display_formatter.for_type(Generation, _show_run)


_register_run_display()


__all__ = [
    "ChatWidget",
    "CompareWidget",
    "Direction",
    "Endpoint",
    "EndpointError",
    "Generation",
    "GenerationCancelled",
    "GenerationError",
    "GenerationFailed",
    "Grid",
    "ModelNotFoundError",
    "StreamWidget",
    "__version__",
    "arena",
    "default_model_dir",
    "doctor",
    "load",
    "load_ipython_extension",
    "load_model",
    "replay",
    "rerun",
    "stream",
    "template",
]
