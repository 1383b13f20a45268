"""What the recommender reads of the store per model (``service.scaling.Recommender.inputs``)
and the scheduled job that records one recommendation per model — SQLite and PostgreSQL."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import pytest
from sqlalchemy import Engine

from infersight.api import create_app
from infersight.api.settings import ApiSettings
from infersight.core.query import Selector
from infersight.core.records import RequestRecord
from infersight.core.samples import GpuSample, ServerSample
from infersight.core.scaling import ScalingPolicy
from infersight.core.slo import Sli, SliKind, SloSpec, burn_rate
from infersight.core.window import Resolution, Window
from infersight.service.evaluation import Evaluator, default_policy
from infersight.service.jobs import Jobs, SoleLeader
from infersight.service.scaling import Recommender
from infersight.storage import scaling as scaling_store
from infersight.storage import slo_store
from infersight.storage.capacity import production_capacity
from infersight.storage.maintenance import RetentionPolicy
from infersight.storage.sql_store import SqlStore
from infersight.storage.writer import open_writer
from tests.api.conftest import Api
from tests.conftest import Store
from tests.doubles import NOW, FakeClock
from tests.factories import make_records

MODEL = "llama-8b"
MINUTE = Resolution.MINUTE.floor(NOW)
SLO = SloSpec("chat-ttft", Sli(SliKind.LATENCY, "ttft", 0.2), 0.99, timedelta(days=28))
POLICY = ScalingPolicy(name="chat", model=MODEL, lead_time_s=600.0, history_weeks=4)


def _records(seed: int, start: datetime, count: int, span: timedelta) -> list[RequestRecord]:
    return make_records(
        np.random.default_rng(seed), start, count, span=span, models=(MODEL,), error_rate=0.0
    )


def _peak(records: list[RequestRecord]) -> float:
    per_minute = Counter(Resolution.MINUTE.floor(r.start) for r in records)
    return max(per_minute.values()) / 60


@dataclass(frozen=True)
class Seeded:
    engine: Engine
    recent: list[RequestRecord]
    weeks: tuple[list[RequestRecord], list[RequestRecord]]


@pytest.fixture
def seeded(store: Store) -> Seeded:
    writer = open_writer(store.engine)
    recent = _records(1, MINUTE - timedelta(minutes=5), 300, timedelta(minutes=5))
    week1 = _records(2, NOW - timedelta(days=7), 1200, timedelta(minutes=10))
    week2 = _records(3, NOW - timedelta(days=14), 600, timedelta(minutes=10))
    writer.write_requests(recent + week1 + week2)
    samples = [
        ServerSample(NOW - timedelta(seconds=90), "gpu-0", "vllm", MODEL, requests_waiting=40.0),
        ServerSample(
            NOW - timedelta(seconds=20),
            "gpu-0",
            "vllm",
            MODEL,
            requests_waiting=4.0,
            kv_cache_usage=0.5,
        ),
        ServerSample(
            NOW - timedelta(seconds=10),
            "gpu-1",
            "vllm",
            MODEL,
            requests_waiting=6.0,
            kv_cache_usage=0.7,
            kv_cache_usage_max=0.8,
        ),
    ]
    writer.write_server_samples(samples)
    writer.write_gpu_samples(
        [
            GpuSample(NOW - timedelta(seconds=s), f"gpu-{i}", 0, util_gpu=u)
            for s in (60, 30)
            for i, u in ((0, 0.6), (1, 0.8))
        ]
    )
    slo_store.put_slo(store.engine, SLO, NOW)
    return Seeded(store.engine, recent, (week1, week2))


def test_the_inputs_of_a_model_come_from_its_rollups_scrapes_gpus_and_slos(
    seeded: Seeded,
) -> None:
    recent = seeded.recent
    week1, week2 = seeded.weeks
    recommender = Recommender(SqlStore(seeded.engine), default_policy())
    inputs = recommender.inputs(MODEL, POLICY, [SLO], NOW)
    assert inputs.model == MODEL
    assert inputs.observed_instances == 2
    assert inputs.demand_rps == pytest.approx(300 / 300)
    # The same ten minutes one and two weeks ago: the mean of their busiest minutes.
    assert inputs.forecast_rps == pytest.approx((_peak(week1) + _peak(week2)) / 2)
    assert inputs.queue_per_instance == pytest.approx(5.0)  # the newest scrape of each
    assert inputs.kv_usage == pytest.approx(0.8)  # the hottest engine's
    assert inputs.gpu_util == pytest.approx(0.7)
    with seeded.engine.connect() as connection:
        counts = slo_store.count_events(
            connection, SLO.sli, Window(NOW - timedelta(minutes=5), NOW), Selector(model=MODEL)
        )
    assert counts.total == sum(r.start >= NOW - timedelta(minutes=5) for r in recent)
    assert counts.bad > 0
    assert inputs.burn_rate_short == pytest.approx(burn_rate(counts, SLO.objective))
    expected = production_capacity(
        seeded.engine,
        Window(NOW - timedelta(days=7), NOW),
        Selector(model=MODEL),
        ttft_p99_max_s=0.2,
    )
    assert inputs.capacity_rps == pytest.approx(expected.throughput_rps)
    assert set(inputs.input_times) == {
        "service_rate_rps",
        "demand_rps",
        "forecast_rps",
        "capacity_rps",
        "queue_per_instance",
        "kv_usage",
        "gpu_util",
        "burn_rate_short",
    }
    assert inputs.input_times["queue_per_instance"] == (NOW - timedelta(seconds=10)).timestamp()
    assert inputs.input_times["demand_rps"] == max(
        inputs.input_times["queue_per_instance"], MINUTE.timestamp()
    )


def test_a_model_without_history_or_scrapes_has_none_for_what_was_not_measured(
    store: Store,
) -> None:
    """No earlier week holds the model (a young store, the demo's first hour): the forecast is
    the busiest minute of the last lead time, and says so; the rest is not measured."""
    writer = open_writer(store.engine)
    records = _records(4, MINUTE - timedelta(minutes=3), 30, timedelta(minutes=2))
    writer.write_requests(records)
    inputs = Recommender(store.sql, default_policy()).inputs(MODEL, POLICY, [], NOW)
    assert inputs.observed_instances == 2
    assert inputs.forecast_basis == "recent"
    assert inputs.forecast_rps == pytest.approx(_peak(records))
    assert inputs.queue_per_instance is None
    assert inputs.kv_usage is None
    assert inputs.gpu_util is None
    assert inputs.burn_rate_short is None
    assert not {"queue_per_instance", "kv_usage", "gpu_util"} & set(inputs.input_times)


def test_a_model_with_history_is_forecast_from_its_weeks(seeded: Seeded) -> None:
    inputs = Recommender(SqlStore(seeded.engine), default_policy()).inputs(
        MODEL, POLICY, [SLO], NOW
    )
    assert inputs.forecast_basis == "weeks"


def test_low_load_runs_from_the_first_minute_that_fits_one_instance_fewer(store: Store) -> None:
    writer = open_writer(store.engine)
    busy = _records(5, MINUTE - timedelta(minutes=30), 600, timedelta(minutes=15))
    quiet = _records(6, MINUTE - timedelta(minutes=15), 15, timedelta(minutes=15))
    writer.write_requests(busy + quiet)
    recommender = Recommender(store.sql, default_policy())
    # 0.2 req/s each: three instances with 40 % headroom fit 0.43 req/s (26 a minute); the
    # busy quarter hour ran at 40 a minute, the quiet one at about 1.
    since = recommender.low_load_since(MODEL, POLICY, 4, 0.2, NOW)
    first_quiet = min(Resolution.MINUTE.floor(r.start) for r in quiet)
    assert since == first_quiet.timestamp()
    assert recommender.low_load_since(MODEL, POLICY, 4, 0.01, NOW) is None  # nothing fits
    assert recommender.low_load_since(MODEL, POLICY, 4, None, NOW) is None  # cannot tell


def test_the_scaling_job_records_one_recommendation_per_model_and_is_counted(
    seeded: Seeded,
) -> None:
    open_writer(seeded.engine).write_requests(
        make_records(
            np.random.default_rng(7),
            MINUTE - timedelta(minutes=3),
            50,
            span=timedelta(minutes=2),
            models=("llama-70b",),
        )
    )
    scaling_store.put_policy(seeded.engine, POLICY, NOW)
    clock = FakeClock()
    evaluator = Evaluator(SqlStore(seeded.engine), default_policy())
    jobs = Jobs(
        SqlStore(seeded.engine),
        evaluator,
        RetentionPolicy(),
        clock,
        SoleLeader(),
        30.0,
        3600.0,
        scale=Recommender(SqlStore(seeded.engine), default_policy()),
        scaling_interval_s=60.0,
    )
    assert jobs.tick_scaling() is True
    assert jobs.runs["scale"] == 1
    found = {r.model: r for r in scaling_store.latest(seeded.engine)}
    assert set(found) == {MODEL, "llama-70b"}
    assert all(r.at == NOW.timestamp() for r in found.values())
    assert found[MODEL].observed == 2


def test_a_cycle_over_the_store_gives_the_keda_endpoint_a_number_it_can_serve(
    seeded: Seeded,
) -> None:
    [rec] = Recommender(SqlStore(seeded.engine), default_policy()).run(NOW)
    assert rec.model == MODEL
    assert rec.predictive is not None  # demand, forecast and capacity were all measured
    assert "demand_rps" not in rec.stale
    app = create_app(ApiSettings(run_jobs=False), seeded.engine, FakeClock())
    api = Api(app, FakeClock())
    answer = api.get(f"/api/v1/scaling/keda/{MODEL}")
    assert answer.status_code == 200, answer.text
    assert answer.json()["desiredReplicas"] == rec.desired >= POLICY.min_replicas
    listed = api.get("/api/v1/scaling").json()["models"]
    assert [(m["model"], m["usable"], m["reason"]) for m in listed] == [(MODEL, True, rec.reason)]
