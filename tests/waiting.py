"""Waiting on an event, not on a wall-clock budget (#16).

``until(check)`` polls ``check`` until it returns something true. It has no deadline of its own,
so a slow, loaded machine only makes it wait longer; a test that never sees the event is
stopped by pytest-timeout (``[tool.pytest.ini_options] timeout``), and one waiting on a child
process fails as soon as that process has exited.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def until(
    check: Callable[[], T],
    what: str,
    *,
    process: subprocess.Popen[bytes] | subprocess.Popen[str] | None = None,
    every_s: float = 0.1,
) -> T:
    """The first true result of ``check``; fails when ``process`` exits before it comes."""
    while True:
        result = check()
        if result:
            return result
        if process is not None and process.poll() is not None:
            raise AssertionError(f"{what}: the process exited ({process.returncode}) first")
        time.sleep(every_s)
