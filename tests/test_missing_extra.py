"""A command run without its optional dependencies names the extra of its own role (issue
#33): a sidecar host installs ``infersight[sidecar]``, not every role's dependencies."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The third-party modules of the extras (none of the core's): hidden, as on a core install.
OPTIONAL = (
    "fastapi", "fastapi_offline", "uvicorn", "starlette", "httpx", "grpc", "opentelemetry",
    "google", "prometheus_client", "jinja2", "apscheduler", "orjson", "httptools", "pynvml",
    "locust", "gevent",
)  # fmt: skip
CORE_ONLY = f"""
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {OPTIONAL!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Hide())
from infersight.cli import main
main()
"""


@pytest.mark.parametrize(
    ("command", "extra"),
    [
        ("sidecar", "sidecar"),
        ("serve", "server"),
        ("report", "server"),
        ("simulate", "simulator"),
        ("loadtest", "loadtest"),
        ("demo", "all"),
    ],
)
def test_a_command_without_its_dependencies_names_its_roles_extra(
    command: str, extra: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CORE_ONLY, "--store", f"sqlite:///{tmp_path / 's.db'}", command,
         "--help"],
        check=False, capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode != 0
    assert f"'{command}' needs an optional dependency that is not installed" in done.stderr
    assert done.stderr.rstrip().endswith(f"install infersight[{extra}]"), done.stderr
    assert "Traceback" not in done.stderr


def test_commands_of_the_core_run_on_a_core_install(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CORE_ONLY, "capacity", "--help"],
        check=False, capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
