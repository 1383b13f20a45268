"""Disaggregated serving from ClickHouse answers as the SQL store's on the same data: the prefill
legs stored in ``request_parts`` (each once, a replay storing nothing), the pool table
(``pool_summaries``: each instance's role, requests, tokens and stage means, over windows read
from raw edges and minute, hour and day rollups), the pools' members, the busiest prefill
minute within a queue bound, and the stage breakdown."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from infersight.core.query import Selector
from infersight.core.records import RequestRecord, Role, Status
from infersight.core.samples import ServerSample
from infersight.core.window import Resolution, Window
from infersight.storage.engine import create_store_engine
from infersight.storage.migrate import upgrade
from infersight.storage_clickhouse.hybrid import HybridStore, Telemetry
from infersight.storage_clickhouse.schema import Layout, migrate
from infersight.storage_clickhouse.transport import ChdbTransport
from tests.conftest import Store, fresh_database
from tests.factories import make_records

pytestmark = pytest.mark.postgres

T0 = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)
WINDOW = Window(
    T0 + timedelta(hours=5, seconds=1403.25), T0 + timedelta(days=2, hours=13, seconds=47.5)
)
SHORT = Window(T0 + timedelta(hours=7, seconds=12.5), T0 + timedelta(hours=9, seconds=3))
#: A minute in which ``pre-0`` completed many legs with short queues.
BURST = T0 + timedelta(hours=8, minutes=17)
DISAGGREGATED = "llama-70b"

Both = tuple[HybridStore, Store]


def _records() -> tuple[list[RequestRecord], list[RequestRecord]]:
    """Unified requests, decode-side users' requests of a disaggregated model with their
    prefill legs (same trace, their own span, on a prefill instance), and a burst of legs."""
    rng = np.random.default_rng(3637)
    span = timedelta(days=2, hours=20)
    unified = make_records(
        rng, T0, 1500, span=span, models=("llama-8b", "qwen-7b"), instances=("gpu-0", "gpu-1")
    )
    users = make_records(
        rng, T0, 1200, span=span, models=(DISAGGREGATED,), instances=("dec-0", "dec-1")
    )
    kv = rng.lognormal(np.log(0.004), 0.4, len(users))
    queues = rng.exponential(0.03, len(users))
    decoded, legs = [], []
    for i, r in enumerate(users):
        prefill = f"pre-{i % 2}"
        decoded.append(replace(r, role=Role.DECODE, peer=prefill, kv_transfer_s=float(kv[i])))
        legs.append(
            replace(
                r,
                span_id=f"{i + 1:016x}",
                instance=prefill,
                role=Role.PREFILL,
                e2e_s=r.ttft_s,
                tpot_s=None,
                decode_s=None,
                output_tokens=1,
                queue_s=float(queues[i]) if i % 7 else None,
                status=Status.ERROR if i % 29 == 0 else Status.OK,
            )
        )
    for k in range(40):
        legs.append(
            RequestRecord(
                trace_id=f"{k + 1:032x}",
                span_id=f"{k + 1:016x}",
                start=BURST + timedelta(seconds=1.25 * k),
                instance="pre-0",
                engine="vllm",
                model=DISAGGREGATED,
                ttft_s=0.05,
                e2e_s=0.05,
                queue_s=0.002 * (k % 5),
                prefill_s=0.045,
                input_tokens=900,
                output_tokens=1,
                role=Role.PREFILL,
            )
        )
    return unified + decoded, legs


#: A model only scraped (no request), scraped from a minute after ``SHORT`` ends.
SCRAPED_ONLY = "mistral-7b"


def _scrapes() -> list[ServerSample]:
    """Scrapes every 15 s for two hours: one model only scraped, one server naming no model."""
    start = SHORT.end + timedelta(minutes=1)
    out = []
    for k in range(480):
        at = start + timedelta(seconds=15 * k)
        out.append(ServerSample(ts=at, instance="gpu-9", model=SCRAPED_ONLY, requests_waiting=1.0))
        out.append(ServerSample(ts=at, instance="gpu-8", requests_waiting=0.0))
    return out


@pytest.fixture(scope="module")
def both(chdb: ChdbTransport) -> Iterator[Both]:
    users, legs = _records()
    records = sorted(users + legs, key=lambda r: r.start)
    layout = Layout(database=f"pools_{uuid.uuid4().hex[:12]}")
    migrate(chdb, layout)
    with fresh_database() as url:
        engine = create_store_engine(url)
        upgrade(engine)
        pg = Store(url, engine)
        hybrid = HybridStore(pg.sql, Telemetry(chdb, layout), sql_copy=True)
        sink = hybrid.ingest.open_writer()
        for i in range(0, len(records), 800):
            sink.write_requests(records[i : i + 800])
        # A replay of two batches at once (the spool reads more than failed): nothing new.
        sink.write_requests(records[:1600])
        sink.write_server_samples(_scrapes())
        yield hybrid, pg
        engine.dispose()
    chdb.command(f"DROP DATABASE IF EXISTS {layout.database}")


def test_prefill_legs_are_stored_once_apart_from_the_users_requests(both: Both) -> None:
    hybrid, _ = both
    users, legs = _records()
    telemetry = hybrid.telemetry
    parts = telemetry.layout.table("request_parts")
    requests = telemetry.layout.table("requests")
    assert telemetry.transport.rows(f"SELECT count() FROM {parts}") == [[len(legs)]]
    assert telemetry.transport.rows(f"SELECT count() FROM {requests}") == [[len(users)]]
    roles = telemetry.transport.rows(f"SELECT DISTINCT role FROM {parts}")
    assert roles == [["prefill"]]


def _same_lines(ours: Sequence[object], theirs: Sequence[object]) -> None:
    assert [line.to_dict() for line in ours] != []  # type: ignore[attr-defined]
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        left, right = a.to_dict(), b.to_dict()  # type: ignore[attr-defined]
        assert left.keys() == right.keys()
        for key, value in left.items():
            if isinstance(value, float):
                assert math.isclose(value, right[key], rel_tol=1e-9), (key, left, right)
            else:
                assert value == right[key], (key, left, right)


@pytest.mark.parametrize(
    ("window", "finest"),
    [
        (WINDOW, Resolution.MINUTE),
        (WINDOW, Resolution.HOUR),
        (SHORT, Resolution.MINUTE),
        (Window(T0, T0 + timedelta(days=3)), Resolution.MINUTE),
    ],
)
def test_pool_summaries_equal_the_sql_store_s(
    both: Both, window: Window, finest: Resolution
) -> None:
    hybrid, pg = both
    ours = hybrid.requests.pool_summaries(window, finest)
    theirs = pg.sql.requests.pool_summaries(window, finest)
    _same_lines(ours, theirs)
    roles = {line.instance: line.role for line in ours}
    assert roles == {
        "pre-0": "prefill",
        "pre-1": "prefill",
        "dec-0": "decode",
        "dec-1": "decode",
        "gpu-0": "unified",
        "gpu-1": "unified",
    }


@pytest.mark.parametrize("model", [None, DISAGGREGATED, "llama-8b", "absent"])
@pytest.mark.parametrize("window", [WINDOW, SHORT])
def test_pool_members_equal_the_sql_store_s(both: Both, window: Window, model: str | None) -> None:
    hybrid, pg = both
    ours = hybrid.demand.pool_members(window, model)
    assert ours == pg.sql.demand.pool_members(window, model)
    if model in (None, DISAGGREGATED):
        assert ours[DISAGGREGATED] == {
            "prefill": frozenset({"pre-0", "pre-1"}),
            "decode": frozenset({"dec-0", "dec-1"}),
        }
    else:
        assert ours == {}


@pytest.mark.parametrize("queue_max_s", [0.0, 0.001, 0.004, 0.02, 10.0])
@pytest.mark.parametrize("instances", [None, {"pre-1"}, {"pre-0", "gpu-0"}, set()])
@pytest.mark.parametrize("window", [WINDOW, SHORT])
def test_the_busiest_prefill_minute_is_the_sql_store_s(
    both: Both, window: Window, queue_max_s: float, instances: set[str] | None
) -> None:
    hybrid, pg = both
    ours = hybrid.demand.busiest_prefill_minute(DISAGGREGATED, window, queue_max_s, instances)
    theirs = pg.sql.demand.busiest_prefill_minute(DISAGGREGATED, window, queue_max_s, instances)
    if theirs is None:
        assert ours is None
        return
    assert ours is not None
    assert (ours.instance, ours.minute, ours.legs_per_s) == (
        theirs.instance,
        theirs.minute,
        theirs.legs_per_s,
    )
    assert math.isclose(ours.queue_mean_s, theirs.queue_mean_s, rel_tol=1e-9, abs_tol=1e-15)


def test_the_burst_is_the_busiest_prefill_minute(both: Both) -> None:
    hybrid, _ = both
    found = hybrid.demand.busiest_prefill_minute(DISAGGREGATED, WINDOW, 0.01)
    assert found is not None
    assert (found.instance, found.minute, found.legs_per_s) == ("pre-0", BURST, 40 / 60)
    # Below the burst's mean queue (0.004 s) the burst no longer qualifies.
    other = hybrid.demand.busiest_prefill_minute(DISAGGREGATED, WINDOW, 0.003)
    assert other is not None
    assert other.minute != BURST


@pytest.mark.parametrize(
    ("window", "finest"),
    [(WINDOW, Resolution.MINUTE), (WINDOW, Resolution.DAY), (SHORT, Resolution.MINUTE)],
)
@pytest.mark.parametrize(
    ("group_by", "selector"),
    [
        ((), Selector()),
        (("model", "instance"), Selector()),
        (("tenant",), Selector(model=DISAGGREGATED)),
        (("priority",), Selector(model="absent")),
    ],
)
def test_the_breakdown_equals_the_sql_store_s(
    both: Both,
    window: Window,
    finest: Resolution,
    group_by: Sequence[str],
    selector: Selector,
) -> None:
    hybrid, pg = both
    ours = hybrid.requests.breakdown(window, selector, group_by, finest=finest)
    theirs = pg.sql.requests.breakdown(window, selector, group_by, finest=finest)
    assert len(ours) == len(theirs)
    if selector.model != "absent":
        assert ours
        assert any(s.stage == "kv_transfer" and s.share for b in ours for s in b.stages)
    for a, b in zip(ours, theirs, strict=True):
        assert (a.labels, a.requests) == (b.labels, b.requests)
        assert math.isclose(a.e2e_seconds_total, b.e2e_seconds_total, rel_tol=1e-9)
        assert math.isclose(a.scaled_by, b.scaled_by, rel_tol=1e-9)
        for x, y in zip(a.stages, b.stages, strict=True):
            assert x.stage == y.stage
            assert x.coverage == y.coverage
            assert math.isclose(x.seconds_total, y.seconds_total, rel_tol=1e-9, abs_tol=1e-12)
            if y.share is None:
                assert x.share is None
            else:
                assert x.share is not None
                assert math.isclose(x.share, y.share, rel_tol=1e-9, abs_tol=1e-12)


@pytest.mark.parametrize(
    "window",
    [
        WINDOW,
        SHORT,
        Window(SHORT.end + timedelta(seconds=75.5), SHORT.end + timedelta(minutes=20)),
        Window(T0 - timedelta(days=2), T0),
    ],
)
def test_the_models_seen_are_the_sql_store_s(both: Both, window: Window) -> None:
    hybrid, pg = both
    ours = hybrid.demand.models_seen(window)
    assert ours == pg.sql.demand.models_seen(window)
    if window is WINDOW:
        assert ours == sorted(["llama-8b", "qwen-7b", DISAGGREGATED, SCRAPED_ONLY])
    if window is SHORT:
        assert SCRAPED_ONLY not in ours
