"""The notebook widgets: :class:`StreamWidget`, :class:`ChatWidget` and :class:`CompareWidget`.

Each kernel module here has a page module of the same name in ``js/src`` (``stream.py`` and
``stream.js``, ``chat.py`` and ``chat.js``, ...). The engine (``nbstream.generation`` and what it
imports) never imports this package; this package never imports a front end (the magics, the
CLI, the terminal chat).
"""

from __future__ import annotations

from .chat import ChatWidget
from .compare import CompareWidget
from .stream import StreamWidget

__all__ = ["ChatWidget", "CompareWidget", "StreamWidget"]
