"""Cost from ClickHouse (``storage_clickhouse.cost``) equals the SQL store's on the same data,
to the Decimal: totals, groups, lines, instances, idle cost, energy and goodput-priced figures,
under several cost models (per-GPU-hour prices blended with reservations, an instance's own
price, energy and overheads, an idle floor on and off the utilisation histogram's edges, a
sample gap other than the rollups'), with good tokens held to the cost model's limits and to
SLOs, grouped and pinned by model, instance and tenant, over windows read from raw samples and
rows alone and from rollups between raw edges (and past minute retention), with requests
attributed by gateway spans after they were stored and disaggregated requests' prefill legs
(SQLite and PostgreSQL as the reference)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from infersight.core.attribution import Attribution
from infersight.core.cost import CostModel, CostResult, GoodRequest, GpuPrice
from infersight.core.goodput import GoodLimits, GoodPolicy
from infersight.core.query import Selector
from infersight.core.records import GROUP_LABELS, RequestRecord, Role
from infersight.core.samples import GpuSample
from infersight.core.slo import Sli, SliKind, SloSpec, goodput_sli
from infersight.core.window import Resolution, Window
from infersight.storage import good_tokens
from infersight.storage.engine import create_store_engine
from infersight.storage.migrate import upgrade
from infersight.storage.tables import good_token_counts
from infersight.storage_clickhouse.cost import CostReads
from infersight.storage_clickhouse.hybrid import HybridStore, Telemetry
from infersight.storage_clickhouse.schema import Layout, migrate
from infersight.storage_clickhouse.transport import ChdbTransport
from tests.clickhouse.test_samples_parity import T0, _same
from tests.conftest import Store, fresh_database
from tests.factories import make_records

SPAN = timedelta(days=1, hours=14)
#: Instances with GPUs; ``cpu-x`` serves requests but sends no samples (unmetered).
GPUS = {"g-a": 2, "g-b": 1, "g-c": 1}
#: Windows: a short one read from raw samples and rows alone; a long one with ragged edges
#: (rollups between raw edges, good tokens from kept or recounted hours and the day); one
#: inside a minute; whole days; and one with no data.
WINDOWS = (
    Window(T0 + timedelta(hours=2, seconds=17.25), T0 + timedelta(hours=5, seconds=3.5)),
    Window(T0 + timedelta(hours=3, seconds=1403.25), T0 + timedelta(days=1, hours=9, seconds=47.5)),
    Window(T0 + timedelta(hours=6, seconds=5), T0 + timedelta(hours=6, seconds=55)),
    Window(T0, T0 + timedelta(days=2)),
    Window(T0 - timedelta(days=2), T0 - timedelta(days=1)),
)
H100 = GpuPrice(Decimal("4.10"), Decimal("2.45"), Decimal("0.6"))
MODELS = (
    # Per GPU-hour prices blended with a reserved share, energy, overheads; idle floor on a
    # histogram edge (exact from the rollups too).
    CostModel(
        "list",
        "USD",
        gpu_prices={"H100": H100},
        electricity_per_kwh=Decimal("0.137"),
        overhead_per_gpu_hour=Decimal("0.35"),
        overhead_ratio=Decimal("0.08"),
        good=GoodRequest(ttft_s=0.12, tpot_s=0.014),
    ),
    # An instance's own price, a default for the rest; an idle floor off the edges
    # (interpolated in its bin where rollups serve the window).
    CostModel(
        "own",
        "EUR",
        instance_prices={"g-b": GpuPrice(Decimal("1.99"))},
        default_price=GpuPrice(Decimal("3.333333")),
        idle_utilisation_floor=0.33,
        good=GoodRequest(ttft_s=0.2, tpot_s=0.02),
    ),
    # A sample gap other than the rollups': every window from raw samples.
    CostModel("gap", "USD", gpu_prices={"H100": H100}, sample_gap_s=120.0),
)
SLOS = (
    SloSpec(
        "llama-goodput",
        goodput_sli(ttft_s=0.09, e2e_s=6.0),
        0.9,
        timedelta(days=7),
        Selector(model="llama-8b"),
    ),
    SloSpec(
        "gw-ttft",
        Sli(SliKind.LATENCY, metric="ttft", threshold_s=0.15),
        0.95,
        timedelta(days=7),
        Selector(tenant="gw"),
    ),
)
#: (group_by, selector) each window is asked for.
GROUPINGS = (
    (("instance", "tenant"), Selector()),
    (("model",), Selector(tenant="gw")),
    (("tenant", "priority"), Selector(instance="g-b", model="llama-70b")),
)


def _gpu_samples() -> list[GpuSample]:
    """Samples at irregular times (mostly seconds to minutes apart, some silences longer than
    the gap), figures missing at random, a MIG slice on ``g-c``; energy counters that reset."""
    rng = np.random.default_rng(3690)
    out = []
    for instance, count in GPUS.items():
        for index in range(count):
            t = float(rng.uniform(0, 60))
            energy = float(rng.uniform(0, 1e6))
            while t < SPAN.total_seconds():
                power = float(rng.uniform(60, 700)) if rng.random() > 0.05 else None
                energy = 0.0 if rng.random() < 0.002 else energy + float(rng.uniform(1e3, 1e5))
                sliced = instance == "g-c"
                out.append(
                    GpuSample(
                        ts=T0 + timedelta(microseconds=int(t * 1e6)),
                        instance=instance,
                        gpu_index=index,
                        uuid=f"GPU-{instance}-{index}",
                        name="NVIDIA H100 80GB HBM3" + (" MIG 3g.40gb" if sliced else ""),
                        gpu_slice="mig:3g.40gb:3/7" if sliced else "",
                        util_gpu=float(rng.uniform(0, 1)) if rng.random() > 0.1 else None,
                        power_w=power,
                        energy_j=energy if rng.random() > 0.1 else None,
                    )
                )
                t += float(rng.exponential(200)) if rng.random() > 0.01 else 900.0
    order = rng.permutation(len(out))
    return [out[i] for i in order]


def _records() -> tuple[list[RequestRecord], list[Attribution]]:
    """Users' requests on the GPU instances and on ``cpu-x``; a fifth without a tenant that a
    gateway span (stored after them) fills; a disaggregated model's users on ``g-c`` with
    their prefill legs on ``g-b``, a quarter of both attributed by spans stored after them."""
    rng = np.random.default_rng(3691)
    unified = make_records(
        rng,
        T0,
        1000,
        span=SPAN,
        models=("llama-8b", "qwen-7b"),
        instances=("g-a", "g-b", "cpu-x"),
        error_rate=0.05,
    )
    records: list[RequestRecord] = []
    spans: list[Attribution] = []
    for i, shipped in enumerate(unified):
        r = shipped
        if i % 5 == 0:
            r = replace(r, tenant="")
            spans.append(
                Attribution(
                    r.trace_id,
                    f"a{i:015x}",
                    r.start - timedelta(seconds=0.5),
                    duration_s=3.0,
                    tenant="gw",
                    team="search",
                    source="litellm",
                )
            )
        records.append(r)
    users = make_records(rng, T0, 300, span=SPAN, models=("llama-70b",), instances=("g-c",))
    kv = rng.lognormal(np.log(0.004), 0.4, len(users))
    for i, shipped in enumerate(users):
        r = shipped
        if i % 4 == 0:  # the user's and its leg's tenant, from a gateway span stored after them
            r = replace(r, tenant="")
            spans.append(
                Attribution(
                    r.trace_id,
                    f"b{i:015x}",
                    r.start - timedelta(seconds=0.25),
                    duration_s=2.0,
                    tenant="gw",
                    workload="batch-eval",
                    source="litellm",
                )
            )
        records.append(replace(r, role=Role.DECODE, peer="g-b", kv_transfer_s=float(kv[i])))
        records.append(
            replace(
                r,
                span_id=f"{i + 1:016x}",
                instance="g-b",
                role=Role.PREFILL,
                e2e_s=r.ttft_s,
                tpot_s=None,
                decode_s=None,
                prefill_s=None if i % 3 == 0 else r.prefill_s,
                output_tokens=1,
            )
        )
    order = rng.permutation(len(records))
    return [records[i] for i in order], spans


Both = tuple[HybridStore, Store]


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def both(
    request: pytest.FixtureRequest, chdb: ChdbTransport, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Both]:
    """The same samples, requests and spans written through the hybrid store into the SQL
    store and ClickHouse: requests first, then the spans that attribute a fifth of them."""
    records, spans = _records()
    samples = _gpu_samples()
    layout = Layout(database=f"cost_{uuid.uuid4().hex[:12]}")
    migrate(chdb, layout)

    def fill(url: str) -> Iterator[Both]:
        engine = create_store_engine(url)
        upgrade(engine)
        sql = Store(url, engine)
        hybrid = HybridStore(sql.sql, Telemetry(chdb, layout), sql_copy=True)
        sink = hybrid.ingest.open_writer()
        for i in range(0, len(samples), 1500):
            sink.write_gpu_samples(samples[i : i + 1500])
        for i in range(0, len(records), 700):
            sink.write_requests(records[i : i + 700])
        sink.write_attributions(spans)  # type: ignore[attr-defined]
        yield hybrid, sql
        engine.dispose()

    if request.param == "sqlite":
        path: Path = tmp_path_factory.mktemp("cost") / "infersight.db"
        yield from fill(f"sqlite:///{path}")
    else:
        with fresh_database() as url:
            yield from fill(url)
    chdb.command(f"DROP DATABASE IF EXISTS {layout.database}")


def _equal(ours: CostResult, theirs: CostResult, where: str) -> None:
    """Equal field by field: every Decimal (money, hours, kWh), count and label exactly,
    utilisation floats to 1e-9 relative (sums of floats in another order)."""
    _same(ours, theirs, where)


@pytest.mark.parametrize("w", range(len(WINDOWS)))
def test_cost_equals_the_sql_store_s(both: Both, w: int) -> None:
    """Every cost model over each window, good tokens held to the cost model's limits and to
    the SLOs: the whole answer, its lines (one per series) included."""
    hybrid, sql = both
    window = WINDOWS[w]
    for k, model in enumerate(MODELS):
        slos = SLOS if k % 2 == 0 else ()
        ours = hybrid.cost.cost(window, model, group_by=("model",), slos=slos)
        theirs = sql.sql.cost.cost(window, model, group_by=("model",), slos=slos)
        _equal(ours, theirs, model.name)


@pytest.mark.parametrize(("group_by", "selector"), GROUPINGS)
def test_cost_grouped_and_pinned_equals_the_sql_store_s(
    both: Both, group_by: tuple[str, ...], selector: Selector
) -> None:
    """Grouped by model, instance and tenant, pinned to a model, an instance (read for that
    instance alone) or the gateway's tenant."""
    hybrid, sql = both
    model = MODELS[1]
    ours = hybrid.cost.cost(WINDOWS[1], model, selector, group_by, slos=SLOS)
    theirs = sql.sql.cost.cost(WINDOWS[1], model, selector, group_by, slos=SLOS)
    assert ours.groups
    _equal(ours, theirs, f"{group_by} {selector}")


def test_cost_past_minute_retention_equals_the_sql_store_s(both: Both) -> None:
    """``finest`` an hour: GPU time from hour and day rollups alone (idle time interpolated
    off the edges), good tokens from hours and days (counted from raw rows and kept, then
    read back kept)."""
    hybrid, sql = both
    model = MODELS[1]
    for _ in range(2):  # the second read finds the counts the first kept
        ours = hybrid.cost.cost(WINDOWS[1], model, finest=Resolution.HOUR)
        theirs = sql.sql.cost.cost(WINDOWS[1], model, finest=Resolution.HOUR)
        _equal(ours, theirs, model.name)


def test_kept_good_token_counts_stand_for_their_buckets(both: Both) -> None:
    """A window of whole hours and a whole day keeps their good-token counts in ClickHouse;
    read again, the kept counts answer (the same figures as the SQL store's)."""
    hybrid, sql = both
    telemetry = hybrid.telemetry
    table = telemetry.layout.table("good_token_counts")
    window = Window(T0 + timedelta(hours=20, seconds=30), T0 + timedelta(days=2))
    model = MODELS[0]
    first = hybrid.cost.cost(window, model, group_by=("model", "tenant"), slos=SLOS)
    kept = telemetry.transport.rows(
        f"SELECT DISTINCT resolution FROM {table} FINAL"
        f" WHERE bucket >= '{T0 + timedelta(hours=21):%Y-%m-%d %H:%M:%S}'"
    )
    assert sorted(r[0] for r in kept) == ["1d", "1h"]
    again = hybrid.cost.cost(window, model, group_by=("model", "tenant"), slos=SLOS)
    _equal(again, first, "again")
    theirs = sql.sql.cost.cost(window, model, group_by=("model", "tenant"), slos=SLOS)
    _equal(again, theirs, "sql")
    assert again.total.good_tokens > 0


def test_the_answers_see_the_data(both: Both) -> None:
    """Not vacuous: GPU time, energy and idle cost, good tokens below tokens, the gateway's
    tenant, the unmetered instance, prefill and decode pools, SLO and cost-model bases."""
    hybrid, _ = both
    result = hybrid.cost.cost(WINDOWS[1], MODELS[0], group_by=("instance", "tenant"), slos=SLOS)
    total = result.total
    assert total.cost > 0
    assert 0 < total.good_tokens < total.tokens
    assert total.idle_cost > 0
    assert result.unmetered == ("cpu-x",)
    assert {i.instance for i in result.instances} == {*GPUS, "cpu-x"}
    assert all(i.idle_cost.amount > 0 for i in result.instances if i.instance in GPUS)
    assert all(i.energy_kwh > 0 for i in result.instances if i.instance in GPUS)
    assert {"instance": "g-a", "tenant": "gw"} in [dict(g.labels) for g in result.groups]
    # The prefill legs' series on g-b carry cost and no requests of their own.
    legs = [
        x
        for x in result.lines
        if x.labels["instance"] == "g-b" and x.labels["model"] == "llama-70b"
    ]
    assert legs
    assert all(x.cost > 0 and x.requests == 0 for x in legs)
    assert {x.labels["tenant"] for x in legs} == {"acme", "globex", "gw"}
    assert {rule.basis.value for rule, _ in result.good_rules} == {"slo", "cost_model"}
    assert result.good_tokens_exact


def test_idle_method_and_good_policy_answer_as_the_sql_store(both: Both) -> None:
    hybrid, sql = both
    for floor in (0.05, 0.33):
        for window in WINDOWS:
            for finest in (Resolution.MINUTE, Resolution.HOUR):
                assert hybrid.cost.idle_method(floor, window, finest=finest) == (
                    sql.sql.cost.idle_method(floor, window, finest=finest)
                )
    for model in MODELS:
        assert hybrid.cost.good_policy(model, SLOS) == sql.sql.cost.good_policy(model, SLOS)
        assert hybrid.cost.good_policy(model) == sql.sql.cost.good_policy(model)


def _kept_rows(rows: Iterable[Sequence[Any]]) -> set[tuple[Any, ...]]:
    """Kept rows as comparable tuples: limits, resolution, bucket (epoch), series, counts."""
    return {
        (
            *(round(float(v), 9) for v in r[:3]),
            str(r[3]),
            int(r[4]),
            *(str(v) for v in r[5:12]),
            int(r[12]),
            int(r[13]),
        )
        for r in rows
    }


def test_the_maintenance_job_keeps_the_sql_store_s_counts(both: Both) -> None:
    """``CostReads.keep_days`` (the maintenance job's step) keeps every day and its hours of
    the series held to each policy's limits, the rows the SQL store's ``keep_days`` keeps;
    run again, it counts nothing."""
    hybrid, sql = both
    # Limits no other test reads with: these rows are this test's alone.
    keep_slo = SloSpec(
        "keep-goodput", goodput_sli(ttft_s=0.077), 0.9, timedelta(days=7), Selector(model="qwen-7b")
    )
    policies = [GoodPolicy.of([keep_slo], GoodLimits(ttft_s=0.111, tpot_s=0.0222))]
    days = [T0.date(), (T0 + timedelta(days=1)).date()]
    reads = CostReads(hybrid.telemetry.transport, hybrid.telemetry.layout)
    assert reads.keep_days(policies, days) == good_tokens.keep_days(sql.engine, policies, days)
    assert reads.keep_days(policies, days) == 0
    keys = {(0.111, 0.0222, 0.0), (0.077, 0.0, 0.0)}
    k = good_token_counts.c
    with sql.engine.connect() as connection:
        theirs = connection.execute(
            select(
                k.ttft_s,
                k.tpot_s,
                k.e2e_s,
                k.resolution,
                k.bucket,
                *(k[n] for n in GROUP_LABELS),
                k.requests,
                k.good_tokens,
            )
        ).all()
    theirs_set = {
        r
        for r in _kept_rows([[*row[:4], row[4].timestamp(), *row[5:]] for row in theirs])
        if r[:3] in keys
    }
    table = hybrid.telemetry.layout.table("good_token_counts")
    ours = hybrid.telemetry.transport.rows(
        f"SELECT ttft_s, tpot_s, e2e_s, resolution, toUnixTimestamp(bucket),"
        f" {', '.join(GROUP_LABELS)}, requests, good_tokens FROM {table} FINAL"
    )
    ours_set = {r for r in _kept_rows(ours) if r[:3] in keys}
    assert len(ours_set) > 48
    assert {r[3] for r in ours_set} == {"1h", "1d"}
    assert ours_set == theirs_set
