"""A benchmark's ``--json FILE``: the figures it returns, for a program to read (the smoke tests
run each benchmark as a user does and read them back from this file)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def write_json(path: Path | None, figures: Mapping[str, Any]) -> None:
    """Write ``figures`` to ``path`` (nothing without one); what JSON has no type for is text."""
    if path is not None:
        path.write_text(json.dumps(figures, indent=2, default=str))
