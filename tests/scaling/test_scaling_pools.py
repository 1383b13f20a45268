"""Scaling recommendations per pool (#30, "roles as pools"): a disaggregated model's prefill
and decode pools are each sized from their own instances, recorded apart, listed and served
to KEDA per pool — SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from sqlalchemy import Engine, MetaData, Table, insert, inspect, select, text

from infersight.api import create_app
from infersight.api.settings import ApiSettings
from infersight.core.scaling import Recommendation, ScalingPolicy
from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.service.evaluation import default_policy
from infersight.service.scaling import Recommender
from infersight.storage import migrate
from infersight.storage import scaling as scaling_store
from infersight.storage.engine import create_store_engine
from infersight.storage.sql_store import SqlStore
from infersight.storage.tables import scaling_recommendations
from infersight.storage.writer import open_writer
from tests.api.conftest import Api
from tests.conftest import POSTGRES_ADMIN_URL, Store, fresh_database
from tests.doubles import NOW, FakeClock
from tests.factories import make_records
from tests.scaling.split_fleet import BUSY, MODEL, seed_split
from tests.scaling.test_scaling_store import rec

POLICY = ScalingPolicy(name="pd", model=MODEL)
TTFT = SloSpec("pd-ttft", Sli(SliKind.LATENCY, "ttft", 0.2), 0.99, timedelta(days=28))
TPOT = SloSpec("pd-tpot", Sli(SliKind.LATENCY, "tpot", 0.05), 0.99, timedelta(days=28))


def _by_pool(engine: Engine) -> dict[str, Recommendation]:
    scaling_store.put_policy(engine, POLICY, NOW)
    recs = Recommender(SqlStore(engine), default_policy()).run(NOW)
    assert all(r.model == MODEL for r in recs)
    return {r.pool: r for r in recs}


def test_each_pool_s_inputs_come_from_its_own_instances(store: Store) -> None:
    seed_split(store.engine, NOW, prefill_waiting=3.0, decode_waiting=1.0)
    recommender = Recommender(store.sql, default_policy())
    prefill = recommender.inputs(MODEL, POLICY, [TTFT, TPOT], NOW, "prefill")
    decode = recommender.inputs(MODEL, POLICY, [TTFT, TPOT], NOW, "decode")
    assert (prefill.pool, decode.pool) == ("prefill", "decode")
    assert (prefill.observed_instances, decode.observed_instances) == (2, 3)
    # Each split request takes one leg of each pool: the users' rate drives both.
    assert prefill.demand_rps == decode.demand_rps == pytest.approx(1.0)
    assert prefill.queue_per_instance == pytest.approx(3.0)
    assert decode.queue_per_instance == pytest.approx(1.0)
    assert prefill.kv_usage == pytest.approx(0.1)
    assert decode.kv_usage == pytest.approx(0.6)
    assert prefill.gpu_util == pytest.approx(0.9)
    assert decode.gpu_util == pytest.approx(0.4)
    # Prefill: the busiest prefill-instance-minute whose legs did not queue (the 240 legs of
    # the slow minute waited 0.5 s each, past 10 % of the TTFT target).
    assert prefill.capacity_rps == pytest.approx(BUSY / 60)
    assert "pd-prefill-0" in (recommender.capacity_source(MODEL, "prefill") or "")
    # Decode: production's busiest decode-instance-minute within the TPOT target.
    assert decode.capacity_rps == pytest.approx(2 * BUSY / 60)
    # The users' TTFT (0.3 s against 0.2 s) burns the prefill pool's budget, not the decode's.
    assert prefill.burn_rate_short is not None
    assert prefill.burn_rate_short > 1
    assert decode.burn_rate_short == pytest.approx(0.0)


def test_without_fresh_scrapes_a_pool_counts_the_instances_that_did_its_work(
    store: Store,
) -> None:
    seed_split(store.engine, NOW, scrapes=False)
    recommender = Recommender(store.sql, default_policy())
    prefill = recommender.inputs(MODEL, POLICY, [], NOW, "prefill")
    decode = recommender.inputs(MODEL, POLICY, [], NOW, "decode")
    assert (prefill.observed_instances, decode.observed_instances) == (2, 3)
    assert prefill.queue_per_instance is None
    # Without an SLO the prefill bound is PREFILL_QUEUE_DEFAULT_S (legs queued 10 ms).
    assert prefill.capacity_rps == pytest.approx(BUSY / 60)


def test_a_split_model_gets_a_recommendation_per_pool_and_a_queued_prefill_pool_scales_out(
    store: Store,
) -> None:
    seed_split(store.engine, NOW, prefill_waiting=12.0)
    found = _by_pool(store.engine)
    assert set(found) == {"prefill", "decode"}
    prefill, decode = found["prefill"], found["decode"]
    assert (prefill.observed, decode.observed) == (2, 3)
    assert prefill.driver == "queue"
    assert prefill.desired > 2
    # The decode pool is sized by its own inputs: nothing of it runs hot, so it does not grow.
    assert decode.reactive is None
    assert decode.desired <= 3
    stored = {r.pool: r for r in scaling_store.latest(store.engine)}
    assert stored == found


def test_a_queued_decode_pool_scales_out_while_the_prefill_pool_holds(store: Store) -> None:
    seed_split(store.engine, NOW, decode_waiting=30.0)
    found = _by_pool(store.engine)
    prefill, decode = found["prefill"], found["decode"]
    assert decode.driver == "queue"
    assert decode.desired > 3
    assert prefill.reactive is None
    assert prefill.desired <= 2


def test_requests_held_for_their_kv_cache_do_not_scale_the_decode_pool(store: Store) -> None:
    """30 waiting on each decode instance, all deferred for their KV cache (a slow transfer):
    more decode instances would not serve them sooner — no queue-driven scale-out."""
    seed_split(store.engine, NOW, decode_waiting=30.0, decode_deferred=30.0)
    decode = _by_pool(store.engine)["decode"]
    assert decode.driver != "queue"
    assert decode.desired <= 3


def test_an_unsplit_model_keeps_its_one_recommendation(store: Store) -> None:
    open_writer(store.engine).write_requests(
        make_records(
            np.random.default_rng(3),
            NOW - timedelta(minutes=4),
            60,
            span=timedelta(minutes=3),
            models=("llama-8b",),
        )
    )
    [rec] = Recommender(store.sql, default_policy()).run(NOW)
    assert (rec.model, rec.pool) == ("llama-8b", "")


def test_the_keda_endpoint_answers_per_pool_and_refuses_a_split_model_without_one(
    store: Store,
) -> None:
    seed_split(store.engine, NOW, prefill_waiting=12.0)
    found = _by_pool(store.engine)
    api = Api(create_app(ApiSettings(run_jobs=False), store.engine, FakeClock()), FakeClock())
    for pool in ("prefill", "decode"):
        answer = api.get(f"/api/v1/scaling/keda/{MODEL}?pool={pool}")
        assert answer.status_code == 200, answer.text
        assert answer.json()["desiredReplicas"] == found[pool].desired
        assert answer.json()["pool"] == pool
    missing = api.get(f"/api/v1/scaling/keda/{MODEL}")
    assert missing.status_code == 400
    error = missing.json()["error"]
    assert error["details"]["pools"] == ["decode", "prefill"]
    assert "pool=decode or pool=prefill" in error["message"]
    assert api.get(f"/api/v1/scaling/keda/{MODEL}?pool=both").status_code == 400
    listed = api.get("/api/v1/scaling").json()["models"]
    assert [(m["model"], m["pool"]) for m in listed] == [(MODEL, "decode"), (MODEL, "prefill")]
    metrics = api.get("/metrics").text
    assert f'infersight_desired_replicas{{model="{MODEL}",pool="prefill"}}' in metrics
    assert 'infersight_scaling_keda_refusals_total{reason="pool_required"} 1.0' in metrics


def test_an_unsplit_model_ignores_the_pool_parameter(store: Store) -> None:
    scaling_store.record(store.engine, rec("llama-8b", NOW.timestamp() - 5, 4))
    api = Api(create_app(ApiSettings(run_jobs=False), store.engine, FakeClock()), FakeClock())
    for path in ("", "?pool=decode"):
        answer = api.get(f"/api/v1/scaling/keda/llama-8b{path}")
        assert answer.status_code == 200, answer.text
        assert (answer.json()["desiredReplicas"], answer.json()["pool"]) == (4, "")


def test_a_model_that_became_split_lists_only_its_pools(store: Store) -> None:
    scaling_store.record(store.engine, rec(MODEL, NOW.timestamp() - 120, 5))
    seed_split(store.engine, NOW)
    _by_pool(store.engine)
    api = Api(create_app(ApiSettings(run_jobs=False), store.engine, FakeClock()), FakeClock())
    listed = api.get("/api/v1/scaling").json()["models"]
    assert [m["pool"] for m in listed] == ["decode", "prefill"]


# -- migration 0016 ---------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def bare_engine(request: pytest.FixtureRequest, tmp_path):  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        engine = create_store_engine(f"sqlite:///{tmp_path / 'pools.db'}")
        yield engine
        engine.dispose()
        return
    assert POSTGRES_ADMIN_URL
    with fresh_database() as url:
        engine = create_store_engine(url)
        yield engine
        engine.dispose()


def test_0016_keys_recommendations_by_pool_and_its_downgrade_keeps_whole_models(
    bare_engine: Engine,
) -> None:
    at = NOW.replace(microsecond=0)
    row = {
        "model": "m",
        "at": at,
        "observed": 2,
        "desired": 3,
        "driver": "forecast",
        "reason": "r",
        "stale": "[]",
    }
    migrate.upgrade(bare_engine, "0015")
    with bare_engine.begin() as connection:
        columns = {c["name"] for c in inspect(connection).get_columns("scaling_recommendations")}
        assert "pool" not in columns
        legacy = Table("scaling_recommendations", MetaData(), autoload_with=connection)
        connection.execute(insert(legacy).values(row))
    migrate.upgrade(bare_engine, "0016")
    with bare_engine.begin() as connection:
        [old] = connection.execute(select(scaling_recommendations)).all()
        assert (old.model, old.pool, old.desired) == ("m", "", 3)
        for pool, desired in (("prefill", 5), ("decode", 4)):  # same model and time
            values = {**row, "pool": pool, "desired": desired}
            connection.execute(insert(scaling_recommendations).values(values))
    assert {r.pool for r in scaling_store.latest(bare_engine)} == {"", "prefill", "decode"}
    migrate.downgrade(bare_engine, "0015")
    with bare_engine.connect() as connection:
        columns = {c["name"] for c in inspect(connection).get_columns("scaling_recommendations")}
        assert "pool" not in columns
        rows = connection.execute(text("SELECT model, desired FROM scaling_recommendations")).all()
    assert [tuple(r) for r in rows] == [("m", 3)]
