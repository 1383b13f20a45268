"""Read routing to a hot standby (#19), against a real primary and standby (``tests.replication``):
a standby that lags gives answers that say so and miss what it has not replayed; caught up, its
lag is 0 (the answers are as of now, their staleness only their own age) and they have
everything; ``infersight serve`` wires the standby in from ``INFERSIGHT_DATABASE_READ_URL`` and
refuses it with a SQLite store or URL (exit status 2)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from infersight.api import create_app
from infersight.api.reads import HEADER
from infersight.api.settings import ApiSettings
from infersight.cli import commands_serve
from infersight.core.errors import ConfigurationError
from infersight.storage import migrate
from infersight.storage.engine import create_store_engine
from infersight.storage.replica import check_read_routing, create_read_engine, standby_lag
from infersight.storage.writer import open_writer
from tests.api.conftest import Api
from tests.doubles import NOW, FakeClock
from tests.factories import make_records
from tests.replication import Replication, bindir, missing_reason, running_replication
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[2]
DATABASE = "infersight"
WINDOW = {
    "start": (NOW - timedelta(hours=1)).isoformat().replace("+00:00", "Z"),
    "end": NOW.isoformat().replace("+00:00", "Z"),
}


@pytest.fixture(scope="module")
def replication() -> Iterator[Replication]:
    """A primary and its hot standby, of their own, for this module."""
    if bindir() is None:
        if os.environ.get("CI"):
            pytest.fail(missing_reason())
        pytest.skip(missing_reason())
    with running_replication() as pair:
        yield pair


@pytest.fixture(scope="module")
def engines(replication: Replication) -> Iterator[tuple[Engine, Engine]]:
    """The store migrated on the primary, and the standby's read engine (never migrated: the
    standby replays the primary's schema)."""
    with replication.primary.connect() as connection:
        connection.execute(f'CREATE DATABASE "{DATABASE}"'.encode())
    primary = create_store_engine(replication.primary.url(DATABASE))
    migrate.upgrade(primary)
    standby = create_read_engine(replication.standby.url(DATABASE))
    replication.wait_caught_up()
    yield primary, standby
    standby.dispose()
    primary.dispose()


def _api(primary: Engine, standby: Engine) -> Api:
    """The real app reading from ``standby``, its answer cache off (every call asks anew)."""
    clock = FakeClock()
    settings = ApiSettings(run_jobs=False, dashboard_answer_ttl_s=0)
    return Api(create_app(settings, primary, clock, read_store=standby), clock)


def _write(primary: Engine, seed: int, count: int) -> int:
    rows = make_records(
        np.random.default_rng(seed), NOW - timedelta(minutes=50), count, span=timedelta(minutes=40)
    )
    open_writer(primary).write_requests(rows)
    return count


def _get(api: Api, path: str, params: dict[str, str]) -> tuple[httpx.Response, float]:
    """The answer, and how long asking took (a bound on the time it was computed in)."""
    started = time.monotonic()
    response = api.get(path, params=params)
    assert response.status_code == 200, response.text
    return response, time.monotonic() - started


def _read(api: Api) -> dict[str, Any]:
    """Latency and cost of the last hour: their request counts, staleness, ``as_of`` and
    header, and how long each request took."""
    latency, latency_s = _get(api, "/api/v1/latency", {**WINDOW, "metric": "ttft"})
    cost, cost_s = _get(api, "/api/v1/cost", WINDOW)
    answers = {"latency": latency.json(), "cost": cost.json()}
    return {
        "requests": {
            "latency": sum(g["count"] for g in answers["latency"]["groups"]),
            "cost": answers["cost"]["total"]["requests"],
        },
        "staleness_s": {name: a["staleness_s"] for name, a in answers.items()},
        "as_of": {
            name: None if a["as_of"] is None else datetime.fromisoformat(a["as_of"])
            for name, a in answers.items()
        },
        "header": {"latency": latency.headers[HEADER], "cost": cost.headers[HEADER]},
        "took_s": {"latency": latency_s, "cost": cost_s},
    }


def _current(api: Api) -> dict[str, Any] | None:
    """Both answers when both were read from a caught-up standby: data as of the app's now
    (``as_of``), so the staleness is the answer's own age alone (the time it took to compute,
    which the request's time bounds). A WAL record with no transaction, such as the
    bgwriter's, can keep the standby a few milliseconds behind: then ``None``, ask again."""
    read = _read(api)
    if set(read["as_of"].values()) != {NOW}:
        return None
    for name in ("latency", "cost"):
        assert 0 <= read["staleness_s"][name] <= read["took_s"][name] + 0.001, read
        assert 0 <= float(read["header"][name]) <= read["took_s"][name] + 0.001, read
    return read


@pytest.mark.postgres
def test_a_paused_standby_answers_stale_without_the_new_rows_then_catches_up(
    replication: Replication, engines: tuple[Engine, Engine]
) -> None:
    primary, standby = engines
    api = _api(primary, standby)
    before = _write(primary, seed=1, count=300)
    replication.wait_caught_up()
    read = until(lambda: _current(api), "the standby's answers current")
    assert read["requests"] == {"latency": before, "cost": before}

    replication.pause_replay()
    try:
        added = _write(primary, seed=2, count=200)
        lag = standby_lag(primary, standby)
        assert lag.staleness_s is not None
        assert lag.staleness_s > 0
        assert lag.behind_bytes is not None
        assert lag.behind_bytes > 0
        stale = _read(api)
        # The answers miss what the standby has not replayed, and say how stale they are.
        assert stale["requests"] == {"latency": before, "cost": before}
        for name in ("latency", "cost"):
            # At least the lag behind the last commit it replayed, besides its own age.
            assert stale["staleness_s"][name] >= round(lag.staleness_s, 3), stale
            assert stale["staleness_s"][name] > 0, stale
            assert float(stale["header"][name]) >= round(lag.staleness_s, 3), stale
            assert stale["as_of"][name] < NOW, stale
        # The primary has them all.
        with primary.connect() as connection:
            stored = connection.execute(text("SELECT count(*) FROM requests")).scalar_one()
        assert stored >= before + added
    finally:
        replication.resume_replay()

    replication.wait_caught_up()
    read = until(lambda: _current(api), "the standby's answers current again")
    assert read["requests"] == {"latency": before + added, "cost": before + added}


@pytest.mark.postgres
def test_an_idle_caught_up_standby_is_current_however_old_its_last_commit(
    replication: Replication, engines: tuple[Engine, Engine]
) -> None:
    primary, standby = engines
    replication.wait_caught_up()
    lag = until(
        lambda: (found := standby_lag(primary, standby)).staleness_s == 0.0 and found,
        "the standby caught up",
    )
    assert (lag.staleness_s, lag.behind_bytes) == (0.0, 0)
    assert lag.as_of is not None
    # What "now() - the last replayed commit" would have called its lag: not 0.
    (since,) = replication.standby.query("SELECT now() - pg_last_xact_replay_timestamp()", DATABASE)
    assert since > timedelta(0)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.postgres
def test_with_the_primary_out_of_reach_the_staleness_is_unknown(
    engines: tuple[Engine, Engine],
) -> None:
    _, standby = engines
    gone = create_store_engine(
        f"postgresql+psycopg://postgres@127.0.0.1:{_closed_port()}/{DATABASE}",
        connect_args={"connect_timeout": 5},
    )
    try:
        with pytest.raises(DBAPIError):
            standby_lag(gone, standby)
        read = _read(_api(gone, standby))
        # The standby still answers; how stale it is cannot be told.
        assert read["staleness_s"] == {"latency": None, "cost": None}
        assert read["as_of"] == {"latency": None, "cost": None}
        assert read["header"] == {"latency": "unknown", "cost": "unknown"}
    finally:
        gone.dispose()


@pytest.mark.postgres
def test_the_read_engine_never_writes_even_pointed_at_the_primary(
    replication: Replication, engines: tuple[Engine, Engine]
) -> None:
    reader = create_read_engine(replication.primary.url(DATABASE))
    try:
        with reader.connect() as connection:
            assert connection.execute(text("SHOW transaction_read_only")).scalar_one() == "on"
        with pytest.raises(DBAPIError, match="read-only transaction"), reader.begin() as c:
            c.execute(text("CREATE TABLE written_by_the_reader (x int)"))
    finally:
        reader.dispose()


def test_read_routing_refuses_sqlite_on_either_side_and_hides_passwords() -> None:
    with pytest.raises(ConfigurationError, match="the store is SQLite") as refused:
        check_read_routing("sqlite:///x.db", "postgresql://u:secret@standby/db")
    with pytest.raises(ConfigurationError, match="must be a PostgreSQL URL") as bad_url:
        check_read_routing("postgresql://u:secret@primary/db", "sqlite:///x.db")
    with pytest.raises(ConfigurationError, match="must be a PostgreSQL URL"):
        create_read_engine("sqlite:///x.db")
    for error in (refused.value, bad_url.value):
        assert "secret" not in error.message + str(error.details)


def _serve(tmp_path: Path, store: str, read_url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("INFERSIGHT_")}
    env |= {
        "INFERSIGHT_DATABASE_URL": store,
        "INFERSIGHT_DATABASE_READ_URL": read_url,
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.run(
        [sys.executable, "-c", "from infersight.cli import main; main()", "serve"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        check=False,
    )


@pytest.mark.parametrize(
    ("store", "read_url", "says"),
    [
        (
            "sqlite:///{tmp}/store.db",
            "postgresql://infersight:secret@127.0.0.1:1/infersight",
            "error: INFERSIGHT_DATABASE_READ_URL is for a PostgreSQL store and its hot standby; "
            "the store is SQLite (unset it)",
        ),
        (
            "postgresql://infersight:secret@127.0.0.1:1/infersight",
            "sqlite:///{tmp}/store.db",
            "error: INFERSIGHT_DATABASE_READ_URL must be a PostgreSQL URL of a hot standby; "
            "SQLite has none",
        ),
    ],
    ids=["sqlite-store", "sqlite-read-url"],
)
def test_serve_refuses_a_standby_with_sqlite_with_exit_status_2(
    tmp_path: Path, store: str, read_url: str, says: str
) -> None:
    done = _serve(tmp_path, store.format(tmp=tmp_path), read_url.format(tmp=tmp_path))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[0] == says
    assert "secret" not in done.stderr
    assert not (tmp_path / "store.db").exists()  # refused before the store was touched


class _NoServer:
    def __init__(self, _config: object) -> None:
        pass

    def run(self, sockets: object = None) -> None:
        pass


def _served(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> tuple[dict[str, Any], str]:
    """What ``serve`` gives ``create_app`` under ``env``, and what it says; the server itself
    (uvicorn, and its logging set-up) is not started."""
    made: dict[str, Any] = {}
    real = commands_serve.create_app

    def create_app_spy(*args: Any, **wiring: Any) -> Any:
        made.update(engine=args[1].engine, **wiring)
        return real(*args, **wiring)

    monkeypatch.setattr(commands_serve, "create_app", create_app_spy)
    monkeypatch.setattr(commands_serve, "server_config", lambda *_args: None)
    monkeypatch.setattr(commands_serve.uvicorn, "Server", _NoServer)
    for name in list(os.environ):
        if name.upper().startswith("INFERSIGHT_"):
            monkeypatch.delenv(name)
    result = CliRunner().invoke(
        commands_serve.serve, ["--no-jobs", "--listen", "127.0.0.1:0"], env=env
    )
    assert result.exit_code == 0, result.output
    return made, result.output


PRIMARY_URL = "postgresql://infersight@primary.invalid/infersight"


def test_serve_passes_the_standby_as_the_read_engine_and_migrates_only_the_primary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    upgraded: list[Engine] = []
    monkeypatch.setattr(commands_serve, "migrate", lambda store: upgraded.append(store.engine))
    made, said = _served(
        monkeypatch,
        {
            "INFERSIGHT_DATABASE_URL": PRIMARY_URL,
            "INFERSIGHT_DATABASE_READ_URL": "postgresql://reader:secret@standby.invalid/infersight",
        },
    )
    assert made["read_store"] is not None
    read_engine = made["read_store"].engine
    assert read_engine.url.host == "standby.invalid"
    assert made["engine"].url.host == "primary.invalid"
    assert read_engine.get_execution_options()["postgresql_readonly"] is True
    assert "read-only answers from the hot standby postgresql://reader:***@standby" in said
    assert "secret" not in said
    made["prepare"]()
    assert upgraded == [made["engine"]]  # the primary alone


def test_serve_without_a_read_url_reads_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    for unset in ({}, {"INFERSIGHT_DATABASE_READ_URL": ""}):
        made, said = _served(monkeypatch, {"INFERSIGHT_DATABASE_URL": PRIMARY_URL, **unset})
        assert made["read_store"] is None
        assert "standby" not in said
