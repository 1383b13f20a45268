"""ClickHouse's engine in process (chdb) for the telemetry tests: one data directory per test
process (chdb serves one per process), one database per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip(
    "chdb", reason="chdb (ClickHouse's engine in process) is not installed: pip install -e '.[dev]'"
)

from infersight.storage_clickhouse.hybrid import Telemetry
from infersight.storage_clickhouse.schema import Layout, migrate
from infersight.storage_clickhouse.transport import ChdbTransport


@pytest.fixture(scope="session")
def chdb_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("chdb")


@pytest.fixture(scope="session")
def chdb(chdb_path: Path) -> Iterator[ChdbTransport]:
    transport = ChdbTransport(str(chdb_path))
    yield transport
    transport.close()


@pytest.fixture
def telemetry(chdb: ChdbTransport) -> Iterator[Telemetry]:
    """A migrated database of its own."""
    layout = Layout(database=f"t_{uuid.uuid4().hex[:12]}")
    migrate(chdb, layout)
    yield Telemetry(chdb, layout)
    chdb.command(f"DROP DATABASE IF EXISTS {layout.database}")
