"""Production capacity and a window's baseline from ClickHouse answer as the SQL store's
(SQLite and PostgreSQL) on the same data: the busiest instance-minute within TTFT/TPOT P99
targets (with and without them, of an instance list, pinned by model, instance, tenant and a
tenant set, tenants filled by gateway spans before and after the requests were stored), and
a baseline captured field by field (exact quantiles, sketches, counts, rates, GPU utilisation
of the instances that served the selector, cost per million tokens) over windows with raw
edges and rollups, and a comparison of two such baselines giving the same verdicts."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine

from infersight.core.attribution import Attribution
from infersight.core.baseline import Baseline
from infersight.core.baseline_compare import Policy, Verdict
from infersight.core.errors import InvalidInput
from infersight.core.query import Selector
from infersight.core.records import RequestRecord
from infersight.core.samples import GpuSample
from infersight.core.window import Resolution, Window
from infersight.service.baselines import compare
from infersight.service.cost_spec import example_model
from infersight.storage.engine import create_store_engine
from infersight.storage.migrate import upgrade
from infersight.storage_clickhouse.hybrid import HybridStore, Telemetry
from infersight.storage_clickhouse.schema import Layout, migrate
from infersight.storage_clickhouse.transport import ChdbTransport
from tests.conftest import Store, fresh_database
from tests.factories import make_records

#: Recent days: ClickHouse drops rows past their TTL (the raw retention) as it writes them.
T0 = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)
INSTANCES = ("gpu-0", "gpu-1", "gpu-2")
TEAMS = ("search", "ads", "chat")
#: Requests stored before this had their gateway spans arrive after them (moved in
#: ClickHouse); later ones had them first (filled before insert).
LATE_SPANS_UNTIL = T0 + timedelta(hours=14)
#: A busy half hour: about ten requests per instance-minute, so the targets decide.
BURST = Window(T0 + timedelta(hours=12, minutes=10), T0 + timedelta(hours=12, minutes=40))
#: Ragged edges, minute, hour and day rollups between.
WINDOW = Window(
    T0 + timedelta(hours=3, seconds=1403.25), T0 + timedelta(days=1, hours=13, seconds=47.5)
)
#: Under a day (raw rows name the instances a selector served), ragged.
SHORT = Window(T0 + timedelta(hours=9, seconds=12.5), T0 + timedelta(hours=15, seconds=3.75))
#: Starts half a second into a minute (that minute's bucket is before it) and ends half a
#: second into one (that minute's bucket is in it).
NUDGED = Window(BURST.start + timedelta(minutes=3, seconds=0.5), BURST.end + timedelta(seconds=0.5))

Both = tuple[HybridStore, Store]


def _records() -> list[RequestRecord]:
    rng = np.random.default_rng(3661)
    spread = make_records(
        rng,
        T0,
        1000,
        span=timedelta(days=1, hours=20),
        models=("llama-8b", "qwen-7b"),
        instances=INSTANCES,
    )
    burst = make_records(
        np.random.default_rng(3662),
        BURST.start,
        600,
        span=timedelta(minutes=30),
        models=("llama-8b", "qwen-7b"),
        instances=INSTANCES,
    )
    # Globex's requests on gpu-2: the engine named no tenant, the gateway's fills it.
    return [
        replace(r, tenant="") if (r.instance, r.tenant) == ("gpu-2", "globex") else r
        for r in [*spread, *burst]
    ]


def _spans(records: list[RequestRecord]) -> list[Attribution]:
    return [
        Attribution(
            r.trace_id,
            f"{i + 1:016x}",
            r.start - timedelta(seconds=0.5),
            duration_s=3.0,
            tenant="gw-tenant",
            team=TEAMS[INSTANCES.index(r.instance)],  # each team on one instance
            source="litellm",
        )
        for i, r in enumerate(records)
        if i % 7 != 3  # a trace without a gateway span stays unattributed
    ]


def _gpu_samples() -> list[GpuSample]:
    rng = np.random.default_rng(3663)
    out = []
    for k, (instance, mean) in enumerate(zip(INSTANCES, (0.8, 0.5, 0.2), strict=True)):
        for index in range(2):
            at = T0 + timedelta(seconds=17.5 * (k + 1))
            while at < T0 + timedelta(days=2):
                util = float(np.clip(rng.normal(mean, 0.1), 0, 1))
                out.append(
                    GpuSample(
                        at,
                        instance,
                        index,
                        uuid=f"GPU-{instance}-{index}",
                        name="NVIDIA H100 80GB HBM3",
                        util_gpu=None if rng.random() < 0.05 else util,
                        power_w=300.0 + 200 * util,
                    )
                )
                at += timedelta(seconds=float(rng.uniform(300, 900)))
    return out


def _fill(hybrid: HybridStore) -> None:
    shipped = _records()
    spans = _spans(shipped)
    records = sorted(shipped, key=lambda r: r.start)
    late = {r.trace_id for r in records if r.start < LATE_SPANS_UNTIL}
    sink: Any = hybrid.ingest.open_writer()
    sink.write_attributions([s for s in spans if s.trace_id not in late])
    for i in range(0, len(records), 800):
        sink.write_requests(records[i : i + 800])
    sink.write_attributions([s for s in spans if s.trace_id in late])
    samples = _gpu_samples()
    for i in range(0, len(samples), 2000):
        sink.write_gpu_samples(samples[i : i + 2000])


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def both(
    request: pytest.FixtureRequest, chdb: ChdbTransport, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Both]:
    """The same requests, spans and GPU samples written through the hybrid store into the SQL
    store (SQLite, then PostgreSQL) and ClickHouse."""
    layout = Layout(database=f"capbase_{uuid.uuid4().hex[:12]}")
    migrate(chdb, layout)

    def opened(url: str) -> tuple[Engine, Both]:
        engine = create_store_engine(url)
        upgrade(engine)
        sql = Store(url, engine)
        hybrid = HybridStore(sql.sql, Telemetry(chdb, layout), sql_copy=True)
        _fill(hybrid)
        return engine, (hybrid, sql)

    try:
        if request.param == "sqlite":
            path: Path = tmp_path_factory.mktemp("capbase") / "store.db"
            engine, pair = opened(f"sqlite:///{path}")
            yield pair
            engine.dispose()
        else:
            with fresh_database() as url:
                engine, pair = opened(url)
                yield pair
                engine.dispose()
    finally:
        chdb.command(f"DROP DATABASE IF EXISTS {layout.database}")


# -- production capacity ---------------------------------------------------------------------

#: (TTFT P99 limit, TPOT P99 limit): none, each, both, and one no minute meets.
NONE, TTFT, TPOT, BOTH, NEVER = (
    (None, None),
    (0.25, None),
    (None, 0.0145),
    (0.3, 0.016),
    (0.001, None),
)
#: Every tenant the gateway's spans filled in, some after the request was stored.
GW = Selector(tenant="gw-tenant")
#: (window, selector, limits, instances): without and with targets, pinned by labels the
#: capacity read keeps (model, instance, tenant, priority, a tenant set) and one it does not
#: (team), attributed tenants, every minute read and refused, an instance list (and an empty
#: one), and windows with edges inside a minute.
CAPACITY_CASES: list[tuple[Window, Selector, tuple[float | None, float | None], Any]] = [
    (BURST, Selector(), NONE, None),
    (BURST, Selector(), BOTH, None),
    (BURST, GW, BOTH, None),
    (BURST, GW, TTFT, None),
    (BURST, Selector(model="qwen-7b").within({"acme", "gw-tenant"}), TPOT, None),
    (BURST, Selector(instance="gpu-1", priority="batch", team="ads"), BOTH, None),
    (BURST, GW, NEVER, None),
    (BURST, Selector(), BOTH, ["gpu-0", "gpu-2"]),
    (BURST, GW, NONE, []),
    (NUDGED, Selector(model="llama-8b"), BOTH, None),
    (WINDOW, GW, BOTH, None),
    (WINDOW, Selector(tenant="acme"), NONE, ["gpu-1", "absent"]),
]


def _capacity(store: Any, window: Window, selector: Selector, **kwargs: Any) -> Any:
    try:
        return store.requests.production_capacity(window, selector, **kwargs)
    except InvalidInput as error:
        return ("refused", str(error), error.details)


def test_production_capacity_is_the_sql_store_s(both: Both) -> None:
    hybrid, sql = both
    answers = []
    for window, selector, (ttft, tpot), instances in CAPACITY_CASES:
        kwargs = {"ttft_p99_max_s": ttft, "tpot_p99_max_s": tpot, "instances": instances}
        ours = _capacity(hybrid, window, selector, **kwargs)
        assert ours == _capacity(sql.sql, window, selector, **kwargs), (window, selector, kwargs)
        answers.append(ours)
    refused = [i for i, answer in enumerate(answers) if isinstance(answer, tuple)]
    assert refused == [6, 8]  # NEVER, and no instance
    assert answers[6][2]["minutes"] >= 25  # every minute of the burst read
    # Not vacuous: the targets pass over the busiest minutes; the listed instances are kept;
    # the tenant filled in after its requests were stored is counted in ClickHouse's minutes.
    assert answers[1].throughput_rps < answers[0].throughput_rps
    assert answers[7].phase.split(" at ")[0] in ("gpu-0", "gpu-2")
    assert answers[3].throughput_rps * 60 >= 2


# -- baselines -------------------------------------------------------------------------------


def _same_baseline(ours: Baseline, theirs: Baseline) -> None:
    """Field by field: counts, times and labels equal; exact quantiles to 1e-12 relative; the
    same sketch (buckets, counts, minimum and maximum; the sum to 1e-9); means, utilisation and
    cost to 1e-9 relative (sums in another order)."""
    for name in (
        "name",
        "created_at",
        "source",
        "duration_s",
        "requests",
        "errors",
        "request_throughput",
        "output_token_throughput",
        "input_tokens",
        "output_tokens",
        "description",
        "labels",
        "window_start",
        "window_end",
    ):
        assert getattr(ours, name) == getattr(theirs, name), name
    for name in ("gpu_utilization", "cost_per_million_tokens"):
        a, b = getattr(ours, name), getattr(theirs, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert math.isclose(float(a), float(b), rel_tol=1e-9), (name, a, b)
    assert ours.latency.keys() == theirs.latency.keys()
    for metric, summary in ours.latency.items():
        other = theirs.latency[metric]
        assert summary.count == other.count, metric
        assert summary.quantiles == pytest.approx(other.quantiles, rel=1e-12, abs=0), metric
        assert summary.mean == pytest.approx(other.mean, rel=1e-9), metric
        assert summary.distribution() == other.distribution(), metric


#: Before LATE_SPANS_UNTIL every gw-tenant request was moved to it after it was stored.
EARLY = Window(T0 + timedelta(seconds=30.5), LATE_SPANS_UNTIL)
#: (window, finest, selector, exact_max_rows): a window with raw edges and minute, hour and
#: day rollups (exact quantiles, and sketch ones), read down to hours, and ones under a day
#: (raw rows name the instances a selector served); attributed tenants and teams.
BASELINE_CASES: list[tuple[Window, Resolution, Selector, int | None]] = [
    (WINDOW, Resolution.MINUTE, Selector(), None),
    (WINDOW, Resolution.MINUTE, GW, None),
    (WINDOW, Resolution.MINUTE, Selector(team="ads"), 0),
    (WINDOW, Resolution.HOUR, Selector(model="qwen-7b").excluding("team", ["chat"]), None),
    (SHORT, Resolution.MINUTE, Selector(tenant="").within({"", "acme"}), None),
    (SHORT, Resolution.MINUTE, Selector(instance="gpu-2"), 0),
    (EARLY, Resolution.MINUTE, GW, None),
]


def test_a_baseline_is_the_sql_store_s(both: Both) -> None:
    hybrid, sql = both
    now = T0 + timedelta(days=2)
    captured = []
    for window, finest, selector, exact_max_rows in BASELINE_CASES:
        options: dict[str, Any] = {"finest": finest, "description": "parity"}
        if exact_max_rows is not None:
            options["exact_max_rows"] = exact_max_rows
        ours = hybrid.requests.capture_baseline("prod", window, selector, now, **options)
        theirs = sql.sql.requests.capture_baseline("prod", window, selector, now, **options)
        assert ours.latency.keys() == {"ttft", "tpot", "e2e"}, selector
        _same_baseline(ours, theirs)
        captured.append(ours)
    # Not vacuous: the tenant and team the spans filled in pick their own requests' part of
    # the window (gw-tenant's moved requests start with it) and their own instances' GPUs.
    assert captured[1].duration_s > WINDOW.seconds - 3 * 3600  # not from LATE_SPANS_UNTIL
    assert captured[1].gpu_utilization == pytest.approx(0.2, abs=0.03)  # gpu-2's alone
    assert captured[2].gpu_utilization == pytest.approx(0.5, abs=0.03)  # gpu-1's alone
    assert captured[6].requests > 50
    for store in (hybrid, sql.sql):
        with pytest.raises(InvalidInput, match="no requests"):
            store.requests.capture_baseline("none", WINDOW, Selector(model="nobody"), now)


def test_a_baseline_with_cost_and_its_comparison_are_the_sql_store_s(both: Both) -> None:
    hybrid, sql = both
    now = T0 + timedelta(days=2)
    model = example_model()
    before = Window(T0 + timedelta(hours=1, seconds=7.5), BURST.start)
    after = Window(BURST.start, T0 + timedelta(days=1, hours=2, seconds=0.25))
    captured = {}
    for label, store in (("ours", hybrid), ("theirs", sql.sql)):
        captured[label] = [
            store.requests.capture_baseline(name, window, GW, now, cost_model=model)
            for name, window in (("before", before), ("after", after))
        ]
    for ours, theirs in zip(captured["ours"], captured["theirs"], strict=True):
        assert ours.cost_per_million_tokens is not None
        assert ours.labels["cost_currency"] == model.currency
        _same_baseline(ours, theirs)
    policy = Policy(thresholds={"ttft": 0.05}, resamples=200)
    # As ``infersight baseline compare`` compares them (the same seeded bootstrap).
    verdicts = {
        label: compare(base, candidate, policy, seed=7)
        for label, (base, candidate) in captured.items()
    }
    ours, theirs = verdicts["ours"], verdicts["theirs"]
    assert ours.verdict == theirs.verdict
    assert {m.verdict for m in ours.metrics} - {Verdict.PASS}  # something moved
    assert [(m.name, m.verdict) for m in ours.metrics] == [
        (m.name, m.verdict) for m in theirs.metrics
    ]
