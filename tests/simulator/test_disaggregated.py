"""Disaggregated prefill/decode in the simulator (#30): the spec, the faults' mechanics, and a
short P/D run through the real path (OTLP spans → real sidecars, prefill and decode roles →
SQLite), where the store must hold what the simulator says the users felt."""

from __future__ import annotations

import dataclasses
import statistics
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import create_engine, select

from infersight.core.errors import InvalidInput
from infersight.core.records import RequestRecord, Role
from infersight.simulator.events import Completion
from infersight.simulator.faults import Fault, FaultKind
from infersight.simulator.fleet import build_instances, run_scenario
from infersight.simulator.scenario import Scenario
from infersight.simulator.sinks import MemorySink
from infersight.simulator.sinks.otlp import OtlpSink
from infersight.simulator.specs import SCENARIOS_DIR, load_scenario, scenario_from_data
from infersight.storage import migrate
from infersight.storage.tables import request_parts, requests
from infersight.storage.writer import open_writer
from tests.collector.harness import running_sidecar, sidecar_config


def _document(**deployment: Any) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((SCENARIOS_DIR / "quiet-pd.yaml").read_text("utf-8"))
    data["spec"]["fleet"][0].update(deployment)
    return data


def _run(scenario: Scenario, seconds: float) -> list[Completion]:
    sink = MemorySink()
    run_scenario(dataclasses.replace(scenario, duration_s=seconds), [sink])
    return sink.completions


def _users(completions: list[Completion]) -> list[RequestRecord]:
    return [c.record for c in completions if c.record.role is not Role.PREFILL]


# -- the spec -------------------------------------------------------------------------


def test_a_disaggregated_deployment_names_its_two_pools() -> None:
    scenario = load_scenario("quiet-pd")
    (deployment,) = scenario.deployments
    pd = deployment.disaggregated
    assert pd is not None
    assert pd.prefill == ("vllm-70b-prefill-0", "vllm-70b-prefill-1")
    assert pd.decode == ("vllm-70b-decode-0", "vllm-70b-decode-1")
    assert deployment.instances == pd.prefill + pd.decode
    assert pd.kv_transfer_s == pytest.approx(0.03)
    assert scenario.role("vllm-70b-decode-1") == "decode"
    assert scenario.role("vllm-70b-prefill-0") == "prefill"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"instances": 4}, "not instances"),
        ({"engines": 2}, "one engine per instance"),
        ({"disaggregated": {"prefill_instances": 0, "decode_instances": 1}}, "invalid"),
        (
            {"disaggregated": {"prefill_instances": 1, "decode_instances": 1, "kv_transfer": "x"}},
            "not a duration",
        ),
        (
            {"disaggregated": {"prefill_instances": 1, "decode_instances": 1, "extra": 1}},
            "invalid",
        ),
    ],
)
def test_a_wrong_disaggregated_spec_is_refused_clearly(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        scenario_from_data(_document(**change))


@pytest.mark.parametrize(
    ("kind", "instance"),
    [
        ("kv_transfer_slow", "vllm-70b-prefill-0"),
        ("prefill_pool_overload", "vllm-70b-decode-0"),
        ("decode_pool_overload", "vllm-70b-prefill-1"),
    ],
)
def test_a_pd_fault_needs_an_instance_of_its_pool(kind: str, instance: str) -> None:
    data = _document()
    data["spec"]["faults"] = [{"kind": kind, "instance": instance, "start": "1m", "end": "2m"}]
    with pytest.raises(InvalidInput, match="pool"):
        scenario_from_data(data)


def test_only_a_kv_transfer_fault_has_a_failing_share() -> None:
    with pytest.raises(InvalidInput, match="failing"):
        Fault(FaultKind.PREFILL_POOL_OVERLOAD, "p", 0.0, 1.0, 2.0, failing=0.1)
    with pytest.raises(InvalidInput, match="failing"):
        Fault(FaultKind.KV_TRANSFER_SLOW, "d", 0.0, 1.0, 2.0, failing=1.0)


def test_real_time_serving_refuses_a_disaggregated_fleet() -> None:
    with pytest.raises(InvalidInput, match="virtual time"):
        build_instances(load_scenario("quiet-pd"))


# -- one user request, its parts ------------------------------------------------------------


def test_each_user_request_is_a_prefill_part_and_a_decode_side_in_one_trace() -> None:
    completions = _run(load_scenario("quiet-pd"), 120)
    parts = {c.record.trace_id: c for c in completions if c.record.role is Role.PREFILL}
    users = [c for c in completions if c.pd is not None]
    assert len(users) > 500
    assert len(users) + len(parts) == len(completions)
    for c in users:
        user, engine, legs = c.record, c.pd.engine, c.pd  # type: ignore[union-attr]
        part = parts[user.trace_id].record
        assert user.role is Role.DECODE
        assert engine.role is Role.UNIFIED
        assert part.output_tokens == 1
        assert part.input_tokens == user.input_tokens
        assert parts[user.trace_id].parent_span_id == legs.prefill_span
        assert c.parent_span_id == legs.decode_span
        assert user.peer == f"{part.instance}:8000"
        # The user's first token is the decode instance's, counted from the proxy's arrival.
        lead = (engine.start - user.start).total_seconds()
        assert user.ttft_s == pytest.approx(lead + engine.ttft_s)
        assert user.kv_transfer_s == pytest.approx(
            lead - legs.route_s - legs.prefill_leg_s + engine.queue_s
        )
        # The prefill leg holds the prefill instance's whole request.
        assert legs.prefill_leg_s > (part.e2e_s or 0.0)
        assert user.e2e_s > (engine.e2e_s or 0.0) + lead


# -- the faults' mechanics ------------------------------------------------------------------


def _halves(name: str, seconds: float = 240.0) -> tuple[list[RequestRecord], list[RequestRecord]]:
    """The users' requests before and during the fault (moved to the run's second half)."""
    scenario = load_scenario(name)
    faults = tuple(
        dataclasses.replace(f, start_s=seconds / 2, end_s=seconds) for f in scenario.faults
    )
    users = _users(_run(dataclasses.replace(scenario, faults=faults), seconds))
    mid = scenario.start + timedelta(seconds=seconds / 2 + 30)
    before = [r for r in users if r.start < scenario.start + timedelta(seconds=seconds / 2)]
    return before, [r for r in users if r.start >= mid]


def _mean(records: list[RequestRecord], field: str) -> float:
    return statistics.mean(v for r in records if (v := getattr(r, field)) is not None)


def test_a_slow_kv_transfer_delays_the_first_token_not_the_next() -> None:
    before, during = _halves("fault-kv-transfer-slow")
    slowed = [r for r in during if r.instance == "vllm-70b-decode-1"]
    assert _mean(slowed, "kv_transfer_s") > 10 * _mean(before, "kv_transfer_s")
    assert _mean(slowed, "ttft_s") > 2 * _mean(before, "ttft_s")
    assert _mean(slowed, "tpot_s") == pytest.approx(_mean(before, "tpot_s"), rel=0.1)
    other = [r for r in during if r.instance == "vllm-70b-decode-0"]
    assert _mean(other, "kv_transfer_s") < 2 * _mean(before, "kv_transfer_s")
    failed = [r for r in slowed if r.is_error]
    assert failed
    assert all(r.error_type == "kv_transfer_failed" for r in failed)


def test_a_slow_kv_transfer_shows_in_the_decode_instance_s_deferred_requests() -> None:
    sink = MemorySink()
    scenario = load_scenario("fault-kv-transfer-slow")
    faults = tuple(dataclasses.replace(f, start_s=0.0, end_s=120.0) for f in scenario.faults)
    run_scenario(dataclasses.replace(scenario, duration_s=120, faults=faults), [sink])
    deferred = {
        name: statistics.mean(
            s.requests_deferred or 0.0 for s in sink.server_samples if s.instance == name
        )
        for name in ("vllm-70b-decode-0", "vllm-70b-decode-1")
    }
    assert deferred["vllm-70b-decode-1"] > 5 * max(deferred["vllm-70b-decode-0"], 0.1)
    prefill = [s for s in sink.server_samples if s.instance == "vllm-70b-prefill-0"]
    assert all(s.requests_deferred is None for s in prefill)
    decode = [s for s in sink.server_samples if s.instance == "vllm-70b-decode-0"]
    assert decode[-1].kv_transfer_tokens_total
    assert decode[-1].kv_transfer_tokens_total > 0


def test_an_overloaded_prefill_pool_delays_the_first_token_not_the_next() -> None:
    before, during = _halves("fault-prefill-pool-overload")
    assert _mean(during, "prefill_s") > 3 * _mean(before, "prefill_s")
    assert _mean(during, "ttft_s") > 3 * _mean(before, "ttft_s")
    assert _mean(during, "tpot_s") == pytest.approx(_mean(before, "tpot_s"), rel=0.1)
    assert _mean(during, "kv_transfer_s") < 1.5 * _mean(before, "kv_transfer_s")
    assert _mean(during, "input_tokens") < 1.2 * _mean(before, "input_tokens")


def test_an_overloaded_decode_pool_slows_every_token() -> None:
    before, during = _halves("fault-decode-pool-overload")
    assert _mean(during, "tpot_s") > 2 * _mean(before, "tpot_s")
    assert _mean(during, "prefill_s") < 1.5 * _mean(before, "prefill_s")


# -- the real path --------------------------------------------------------------------------


def test_a_pd_run_through_real_sidecars_stores_each_user_request_once(tmp_path: Path) -> None:
    scenario = load_scenario("quiet-pd")
    completions = _run(scenario, 40)
    users = [c for c in completions if c.pd is not None]
    done = {c.record.trace_id for c in users}
    # Requests still decoding when the run ends have only their prefill part: left out.
    parts = [c for c in completions if c.record.role is Role.PREFILL and c.record.trace_id in done]
    completions = [c for c in completions if c.record.trace_id in done]
    assert users
    assert len(parts) == len(users)
    engine = create_engine(f"sqlite:///{tmp_path / 'store.db'}")
    migrate.upgrade(engine)
    writer = open_writer(engine)
    (deployment,) = scenario.deployments
    pd = deployment.disaggregated
    assert pd is not None
    with (
        running_sidecar(
            writer, sidecar_config(pd.prefill[0], tmp_path / "p0", role=Role.PREFILL, window_s=600)
        ) as p0,
        running_sidecar(
            writer, sidecar_config(pd.prefill[1], tmp_path / "p1", role=Role.PREFILL, window_s=600)
        ) as p1,
        running_sidecar(
            writer, sidecar_config(pd.decode[0], tmp_path / "d0", role=Role.DECODE, window_s=600)
        ) as d0,
        running_sidecar(
            writer, sidecar_config(pd.decode[1], tmp_path / "d1", role=Role.DECODE, window_s=600)
        ) as d1,
    ):
        sidecars = {app.config.instance: app for app in (p0, p1, d0, d1)}
        sink = OtlpSink(lambda i: f"http://127.0.0.1:{sidecars[i].http.port}/v1/traces")
        for c in completions:
            sink.emit(c)
        assert sink.flush()
        sink.close()
        assert sink.failed == 0
        for app in sidecars.values():
            result = app.shipper.ship_once(ignore_window=True)
            assert result.ok, result.error
    with engine.connect() as connection:
        stored = [dict(r._mapping) for r in connection.execute(select(requests))]
        stored_parts = [dict(r._mapping) for r in connection.execute(select(request_parts))]
    engine.dispose()
    assert len(stored) == len(users)  # one row per user request, not two
    assert len(stored_parts) == len(parts)
    assert {r["role"] for r in stored} == {"decode"}
    assert sum(r["input_tokens"] for r in stored) == sum(c.record.input_tokens for c in users)
    assert sum(r["output_tokens"] for r in stored) == sum(c.record.output_tokens for c in users)
    truth = sorted(c.record.ttft_s for c in users if c.record.ttft_s is not None)
    seen = sorted(r["ttft_s"] for r in stored if r["ttft_s"] is not None)
    for q in (0.5, 0.99):
        assert seen[int(q * (len(seen) - 1))] == pytest.approx(
            truth[int(q * (len(truth) - 1))], rel=0.01
        )
    assert statistics.mean(r["kv_transfer_s"] for r in stored) == pytest.approx(
        statistics.mean(c.record.kv_transfer_s for c in users), rel=0.01
    )
