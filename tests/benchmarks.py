"""Running a benchmark of ``bench/`` as a user does, for the smoke tests that run them:
``python bench/<name>.py ARGS`` from the repository root, this checkout's packages importable
(as the other tests' subprocesses have them), its figures read back from its ``--json`` file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Ran:
    out: str
    """What the benchmark printed (its standard output)."""
    figures: Any
    """What it wrote to its ``--json`` file; ``None`` without one."""


def run_bench(name: str, *args: str | Path, figures: Path | None = None) -> Ran:
    """``bench/<name>.py ARGS`` (and ``--json FIGURES`` with ``figures``), which must succeed."""
    command = [sys.executable, f"bench/{name}.py", *map(str, args)]
    if figures is not None:
        command += ["--json", str(figures)]
    done = subprocess.run(
        command,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    read = json.loads(figures.read_text(encoding="utf-8")) if figures is not None else None
    return Ran(done.stdout, read)
