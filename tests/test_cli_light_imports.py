"""The light CLI commands stay light behind the store seam (``storage.sql_store`` imports each
storage module on first use, ``storage.seam`` its re-exported row types): ``db current``,
``slo list`` and ``baseline list`` load the storage modules of their own concern only, never
the sidecars' writer (psycopg) nor the telemetry reads, and ``db current`` not numpy either."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Modules no reading command loads: the writer (psycopg's COPY), the rollups, the telemetry,
#: signals, scaling, cost-bill and report reads.
NOT_FOR_ANY = {
    "psycopg",
    "infersight.storage.writer",
    "infersight.storage.batch",
    "infersight.storage.rollup",
    "infersight.storage.attribution",
    "infersight.storage.timeseries",
    "infersight.storage.signals",
    "infersight.storage.server_engines",
    "infersight.storage.scaling_reads",
    "infersight.storage.client_reads",
    "infersight.storage.demand",
    "infersight.storage.pools",
    "infersight.storage.capacity",
    "infersight.storage.purchasing",
    "infersight.storage.bills",
    "infersight.storage.outbox",
    "infersight.storage.reports",
    "infersight.storage.runs",
    "infersight.storage.replica",
}
#: ``db current`` reads one row with ``storage.revisions``: no query module, no numpy, no
#: PostgreSQL dialect for a SQLite store.
NOT_FOR_DB_CURRENT = NOT_FOR_ANY | {
    "numpy",
    "sqlalchemy.dialects.postgresql",
    "infersight.storage.sql",
    "infersight.storage.tables",
    "infersight.storage.queries",
    "infersight.storage.slo_store",
    "infersight.storage.baselines",
    "infersight.core.baseline",
}


def loaded_after(tmp_path: Path, *args: str) -> set[str]:
    """The modules loaded once ``infersight ARGS`` has run, in a fresh interpreter."""
    code = (
        "import sys, json\n"
        "from infersight.cli import main\n"
        "try:\n    main()\nexcept SystemExit as stop:\n    assert not stop.code, stop.code\n"
        "print(json.dumps(sorted(sys.modules)), file=sys.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERSIGHT_")}
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT)},
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    ("command", "never", "reads"),
    [
        (["db", "current"], NOT_FOR_DB_CURRENT, "infersight.storage.revisions"),
        (["slo", "list"], NOT_FOR_ANY, "infersight.storage.slo_store"),
        (["baseline", "list"], NOT_FOR_ANY, "infersight.storage.baselines"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_a_light_command_loads_only_its_concerns_storage_modules(
    tmp_path: Path, command: list[str], never: set[str], reads: str
) -> None:
    store = f"sqlite:///{tmp_path / 'light.db'}"
    loaded_after(tmp_path, "--store", store, "db", "upgrade")
    loaded = loaded_after(tmp_path, "--store", store, *command)
    assert {reads, "infersight.storage.sql_store"} <= loaded  # it read through the store seam
    assert not loaded & never, sorted(loaded & never)
