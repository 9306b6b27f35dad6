"""``python -m nbstream``: the terminal front end (see :mod:`nbstream.cli`)."""

import sys

from .cli import main

sys.exit(main())
