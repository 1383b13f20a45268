"""The hybrid store's maintenance: the SQL store's job, then ClickHouse's good-token counts of
every raw day before today, under the limits the SQL store keeps them for (the plain request's
and each cost model's, held to the stored SLOs): the same rows in both; run again, nothing
more is counted."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import numpy as np

from infersight.core.cost import CostModel, GoodRequest, GpuPrice
from infersight.core.query import Selector
from infersight.core.records import GROUP_LABELS
from infersight.core.retention import RetentionPolicy
from infersight.core.slo import SloSpec, goodput_sli
from infersight.storage import cost, slo_store
from infersight.storage.tables import good_token_counts
from infersight.storage_clickhouse.hybrid import HybridStore, Telemetry
from tests.clickhouse.test_cost_parity import _kept_rows
from tests.clickhouse.test_samples_parity import T0
from tests.conftest import Store
from tests.factories import make_records


def test_maintenance_keeps_clickhouse_s_good_tokens_as_the_sql_store_s(
    store: Store, telemetry: Telemetry
) -> None:
    hybrid = HybridStore(store.sql, telemetry, sql_copy=True)
    records = make_records(
        np.random.default_rng(11), T0, 1200, span=timedelta(days=2), models=("llama-8b",)
    )
    sink = hybrid.ingest.open_writer()
    sink.write_requests(records)
    now = T0 + timedelta(days=3)
    slo_store.put_slo(
        store.engine,
        SloSpec(
            "goodput", goodput_sli(ttft_s=0.2), 0.9, timedelta(days=7), Selector(model="llama-8b")
        ),
        now,
    )
    priced = CostModel(
        name="kept",
        currency="USD",
        gpu_prices={"H100": GpuPrice(Decimal("2.50"))},
        good=GoodRequest(ttft_s=0.3, tpot_s=0.02),
    )
    cost.put_model(store.engine, priced, now)

    hybrid.maintenance.maintain(now, RetentionPolicy(raw_days=30, minute_days=30))

    k = good_token_counts.c
    with store.engine.connect() as connection:
        theirs = connection.execute(
            good_token_counts.select().with_only_columns(
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
    expected = _kept_rows([[*r[:4], r[4].timestamp(), *r[5:]] for r in theirs])
    table = telemetry.layout.table("good_token_counts")
    query = (
        f"SELECT ttft_s, tpot_s, e2e_s, resolution, toUnixTimestamp(bucket),"
        f" {', '.join(GROUP_LABELS)}, requests, good_tokens FROM {table} FINAL"
    )
    assert len(expected) > 10
    assert _kept_rows(telemetry.transport.rows(query)) == expected
    hybrid.maintenance.maintain(now, RetentionPolicy(raw_days=30, minute_days=30))
    assert _kept_rows(telemetry.transport.rows(query)) == expected
