"""The ``infersight`` command line: the composition root that wires the other packages."""

__version__ = "0.1.0.dev0"
