"""The ``infersight`` command line: the composition root that wires the other packages.

``group`` holds the root command group, the ``db`` commands and what every command shares;
each ``commands_*`` module is imported only when its command runs (``group.LazyGroup``).
"""

from infersight.cli.group import main

__all__ = ["main"]
