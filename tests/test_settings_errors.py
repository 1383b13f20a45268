"""A setting the environment gets wrong is one line naming the variable and exit status 2,
never a pydantic traceback, and never its value (it may be a secret)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from infersight.config.parts import PREFIX

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("variable", "command", "problem"),
    [
        ("INFERSIGHT_RAW_RETENTION_DAYS", ("slo", "list"), "valid integer"),
        ("INFERSIGHT_MAX_FUTURE_SKEW_S", ("db", "current"), "valid number"),
    ],
)
def test_a_bad_setting_is_one_line_naming_its_variable(
    tmp_path: Path, variable: str, command: tuple[str, ...], problem: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(PREFIX)}
    done = subprocess.run(
        [sys.executable, "-c", "from infersight.cli import main; main()",
         "--store", f"sqlite:///{tmp_path / 's.db'}", *command],
        check=False, capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT), variable: "s3cret-value"},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: invalid setting: {variable}: "), done.stderr
    assert problem in done.stderr
    assert "Traceback" not in done.stderr
    assert "s3cret-value" not in done.stderr
