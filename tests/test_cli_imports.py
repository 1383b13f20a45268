"""What ``infersight`` imports before it answers (#16): the start-up guard.

Each command runs as a user runs it, in a fresh interpreter under ``python -X importtime``, and
the test reads the modules it imported. ``--help`` imports neither the store (SQLAlchemy) nor the
settings (pydantic) nor the API; ``slo list``, ``baseline list`` and ``db current`` read the
store but import neither pydantic (the settings, the spec parsers) nor Alembic nor FastAPI.
The times themselves are ``bench/bench_cli.py``'s; here only which modules are loaded.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from config.parts import DEFAULT_DATABASE_URL, PREFIX, StorePart
from infersight import cli, store_settings
from infersight.settings import Settings
from storage.retention import RetentionPolicy

ROOT = Path(__file__).resolve().parents[1]
CLI = "from infersight.cli import main; main()"
_IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \| *(\S+)$", re.M)


def imported(args: list[str], cwd: Path) -> set[str]:
    """The top-level packages ``infersight ARGS`` imports (the command must succeed)."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("INFERSIGHT_")}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", CLI, *args],
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {name.split(".")[0] for name in _IMPORTED.findall(done.stderr)}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A migrated SQLite store (with ``slo apply``, which migrates)."""
    directory = tmp_path_factory.mktemp("cli-imports")
    url = f"sqlite:///{directory / 'store.db'}"
    spec = directory / "slo.yaml"
    spec.write_text(
        "apiVersion: infersight/v1\nkind: SLO\nmetadata: {name: chat-ttft}\n"
        "spec: {sli: {latency: {metric: ttft, threshold: 2s}}, window: 1d, objective: 0.99}\n"
    )
    subprocess.run(
        [sys.executable, "-c", CLI, "--store", url, "slo", "apply", str(spec)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
        capture_output=True,
    )
    return url


def test_help_imports_neither_the_store_nor_the_settings_nor_the_api(tmp_path: Path) -> None:
    loaded = imported(["--help"], tmp_path)
    assert "click" in loaded
    assert not loaded & {"sqlalchemy", "pydantic", "pydantic_settings", "alembic", "fastapi"}
    assert not loaded & {"numpy", "yaml", "uvicorn", "httpx"}


@pytest.mark.parametrize(
    "args", [["slo", "list"], ["baseline", "list"], ["db", "current"]], ids=" ".join
)
def test_listing_commands_import_no_pydantic_alembic_or_fastapi(
    args: list[str], store: str, tmp_path: Path
) -> None:
    loaded = imported(["--store", store, *args], tmp_path)
    assert "sqlalchemy" in loaded  # it did read the store
    assert not loaded & {"pydantic", "pydantic_settings", "alembic", "fastapi", "uvicorn"}


def test_the_light_store_settings_repeat_the_pydantic_ones() -> None:
    assert store_settings.DEFAULT_DATABASE_URL == DEFAULT_DATABASE_URL == cli.DEFAULT_STORE
    assert store_settings.PREFIX == PREFIX
    assert set(StorePart.model_fields) == {"database_url", *store_settings.OTHER_STORE_FIELDS}
    # the declared defaults (no environment read): the light reader's are the same
    assert RetentionPolicy() == Settings.model_construct().retention()
    assert StorePart.model_construct().database_url == DEFAULT_DATABASE_URL


def test_the_light_store_settings_read_the_environment_as_pydantic_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in list(os.environ):
        if name.upper().startswith(PREFIX):
            monkeypatch.delenv(name)
    assert store_settings.read() == store_settings.StoreSettings(DEFAULT_DATABASE_URL)
    assert store_settings.read("sqlite:///given.db").database_url == "sqlite:///given.db"
    monkeypatch.setenv("infersight_database_url", "sqlite:///lower.db")  # any case, as pydantic
    assert store_settings.read().database_url == Settings().database_url == "sqlite:///lower.db"
    monkeypatch.setenv("INFERSIGHT_MINUTE_ROLLUP_RETENTION_DAYS", "3")
    read = store_settings.read()
    assert read.retention() == Settings().retention()
    assert read.retention().minute_days == 3
    monkeypatch.setenv("INFERSIGHT_MINUTE_ROLLUP_RETENTION_DAYS", "zero")
    with pytest.raises(ValueError, match="minute_rollup_retention_days"):  # pydantic's refusal
        store_settings.read()
