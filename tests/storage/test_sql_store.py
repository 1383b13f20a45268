"""``storage.sql_store.SqlStore``, the store seam over SQLAlchemy: the state written through
``transaction()`` commits together or not at all, the concerns answer what the storage
modules answer, and opening a store loads neither pydantic nor Alembic."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from infersight.core.burn import AlertState, Severity, Transition
from infersight.core.query import Method, Selector
from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.core.window import Resolution, Window
from infersight.storage import incident_history, incidents, queries, signals, slo_store, timeseries
from infersight.storage.outbox import Outbox
from infersight.storage.sql_store import SqlStore, open_store
from tests.conftest import Store
from tests.factories import make_records

T0 = datetime(2026, 11, 28, 9, tzinfo=UTC)
WINDOW = Window(T0, T0 + timedelta(hours=2))


class Refused(Exception):
    pass


def _change(tx: SqlStore, at: datetime) -> int:
    """An incident opened with its diagnosis, history entry and notification, through ``tx``."""
    opened = tx.incidents.apply_step(
        "slo", "*", AlertState(Severity.PAGE, at), Transition.OPENED, {"5m": 20.0}, at
    )
    assert opened is not None
    tx.incidents.save_diagnosis(opened.id, {"slo": "slo"}, {"cause": "overload"}, at)
    tx.history.append(opened.id, at, "onset", "overload", {"cause": "overload"})
    assert tx.outbox.enqueue("slack", f"incident:{opened.id}", "{}", at)
    return opened.id


def _changed_then_refused(sql: SqlStore) -> None:
    with sql.transaction() as tx:
        _change(tx, T0)
        assert tx.incidents.all_firing()  # its own writes, in the transaction
        raise Refused


def _nested_then_refused(sql: SqlStore) -> None:
    with sql.transaction() as outer:
        with outer.transaction() as inner:
            assert inner is outer
            _change(inner, T0)
        raise Refused  # the inner block's writes go with the outer's


def test_a_transaction_commits_the_state_writes_together_or_not_at_all(store: Store) -> None:
    sql = store.sql
    with pytest.raises(Refused):
        _changed_then_refused(sql)
    assert incidents.list_incidents(store.engine) == []
    assert Outbox(store.engine).messages() == []

    with sql.transaction() as tx:
        incident_id = _change(tx, T0)
    assert [i.id for i in sql.incidents.all("firing")] == [incident_id]
    assert sql.incidents.notes([incident_id])[incident_id].diagnosis == {"cause": "overload"}
    assert [e.verdict for e in incident_history.entries(store.engine, incident_id)] == ["onset"]
    assert [m.key for m in sql.outbox.messages()] == [f"incident:{incident_id}"]
    # Bound to no transaction, each write commits on its own.
    [resolved] = sql.incidents.resolve([incident_id], T0 + timedelta(minutes=5))
    assert resolved.resolved_at == T0 + timedelta(minutes=5)
    assert signals.notes(store.engine, [incident_id])[incident_id].symptom == {"slo": "slo"}


def test_a_nested_transaction_is_the_callers(store: Store) -> None:
    sql = store.sql
    with pytest.raises(Refused):
        _nested_then_refused(sql)
    assert sql.incidents.all() == []


def _loaded(store: Store) -> Store:
    """Two hours of requests, written through the seam's writer."""
    records = make_records(np.random.default_rng(5), T0, 3_000, span=timedelta(hours=2))
    store.sql.ingest.open_writer().write_requests(records)
    return store


def test_the_telemetry_concerns_answer_what_the_storage_modules_answer(store: Store) -> None:
    loaded = _loaded(store)
    sql, engine = loaded.sql, loaded.engine
    inside = Window(T0 + timedelta(minutes=7, seconds=13), T0 + timedelta(minutes=98))
    for method in (Method.EXACT, Method.SKETCH):
        assert sql.requests.latency(
            "ttft", inside, group_by=["model"], method=method
        ) == queries.latency(engine, "ttft", inside, group_by=["model"], method=method)
    assert sql.requests.throughput(inside, group_by=["instance"]) == queries.throughput(
        engine, inside, group_by=["instance"]
    )
    assert sql.requests.breakdown(inside) == queries.breakdown(engine, inside)
    assert sql.requests.data_span(WINDOW) == queries.data_span(engine, WINDOW)
    assert sql.requests.series(WINDOW, Resolution.MINUTE, bucket_s=600) == (
        timeseries.request_series(engine, WINDOW, Resolution.MINUTE, bucket_s=600)
    )
    assert sql.requests.label_sets(WINDOW) == timeseries.label_sets(engine, WINDOW)
    assert sql.requests.window_signals(inside, Selector(model="llama-8b")) == (
        signals.window_signals(engine, inside, Selector(model="llama-8b"))
    )


def test_event_counts_agree_alone_in_a_cycle_and_without_a_cache(store: Store) -> None:
    loaded = _loaded(store)
    sql = loaded.sql
    now = T0 + timedelta(hours=2, seconds=30)
    spec = SloSpec("ttft", Sli(SliKind.LATENCY, "ttft", 0.2), 0.99, timedelta(hours=1))
    windows = [timedelta(minutes=5), timedelta(minutes=30), timedelta(hours=1)]
    with loaded.engine.connect() as connection:
        direct = {
            w: slo_store.count_events(connection, spec.sli, Window(now - w, now)) for w in windows
        }
    assert {w: sql.events.count(spec.sli, Window(now - w, now)) for w in windows} == direct
    with sql.reading() as reader:
        with reader.reading() as again:
            assert again is reader  # bound already: the same connection
        for cached in (True, False):
            with reader.events.cycle(now, cached=cached) as counter:
                counter.prepare(windows, [spec.sli])
                assert counter.count(spec, windows) == direct
    with sql.events.cycle(now, cache=sql.events.new_cache()) as counter:
        assert counter.count(spec, windows) == direct
    with pytest.raises(TypeError), sql.events.cycle(now, cache=object()):
        pass


def test_open_store_hides_the_password_and_connects_on_first_use() -> None:
    opened = open_store("postgresql://reader:secret@store.invalid:5432/infersight")
    try:
        assert "secret" not in opened.describe()
        assert "reader:***@store.invalid" in opened.describe()
        assert opened.dialect == "postgresql"
    finally:
        opened.dispose()


def test_opening_a_store_loads_neither_pydantic_nor_alembic(tmp_path) -> None:
    """``slo list`` and ``db current`` open the store: they must stay light
    (``tests/test_cli.py`` checks the commands; this checks the seam itself)."""
    code = (
        "import sys\n"
        "from infersight.service.store import open_store\n"
        f"store = open_store('sqlite:///{tmp_path / 'light.db'}')\n"
        "from infersight.storage import seam\n"
        "seam.Store, seam.RetentionPolicy\n"
        "store.dispose()\n"
        "print(sorted(m for m in ('pydantic', 'alembic', 'fastapi', 'yaml') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]"


def test_a_dry_run_sees_its_writes_and_stores_none(store: Store) -> None:
    sql = store.sql
    spec = SloSpec("avail", Sli(SliKind.AVAILABILITY), 0.999, timedelta(days=7))
    with sql.transaction(dry_run=True) as tx:
        assert tx.slos.put(spec, T0)  # created, in the transaction
        assert not tx.slos.put(spec, T0)  # then replaced
        _change(tx, T0)
        assert tx.incidents.all_firing()
    assert sql.slos.all() == []
    assert sql.incidents.all() == []
    with sql.transaction() as tx, pytest.raises(ValueError, match="not a nested one"):
        tx.transaction(dry_run=True).__enter__()
