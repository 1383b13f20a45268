"""LoRA adapters and parallel sampling in the simulator (#30): the spec, the request mix, the
``n`` > 1 spans in vLLM's shape, ``vllm:lora_requests_info`` on /metrics, and a short run
through the real path (OTLP spans → a running sidecar that scrapes the simulated /metrics →
SQLite), where the store must hold each user request once, with its base model and adapter.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, select

from infersight.collector.scrape.scraper import Scraper
from infersight.core.errors import InvalidInput
from infersight.simulator.events import Batch, Completion
from infersight.simulator.fleet import run_scenario
from infersight.simulator.scenario import Scenario
from infersight.simulator.sinks import MemorySink
from infersight.simulator.sinks.otlp import OtlpSink
from infersight.simulator.sinks.prometheus import MetricsServer, MetricsSink
from infersight.simulator.specs import SCENARIOS_DIR, load_scenario, scenario_from_data
from infersight.storage import migrate
from infersight.storage.tables import requests
from infersight.storage.writer import open_writer
from tests.collector.harness import running_sidecar, sidecar_config

BASE = "llama-8b-lora"
SHARES = {"chat-lora": 0.25, "sql-lora": 0.35}


def _document(mix: dict[str, Any] | None = None, **deployment: Any) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((SCENARIOS_DIR / "quiet-lora.yaml").read_text("utf-8"))
    data["spec"]["fleet"][0].update(deployment)
    data["spec"]["fleet"][0]["mix"].update(mix or {})
    return data


def _run(scenario: Scenario, seconds: float) -> MemorySink:
    sink = MemorySink()
    run_scenario(dataclasses.replace(scenario, duration_s=seconds), [sink])
    return sink


@pytest.fixture(scope="module")
def quiet() -> MemorySink:
    return _run(load_scenario("quiet-lora"), 300)


def _lora(sink: MemorySink) -> list[Completion]:
    return [c for c in sink.completions if c.record.model == BASE]


# -- the spec -------------------------------------------------------------------------------


def test_a_lora_deployment_names_its_adapters_and_their_shares() -> None:
    scenario = load_scenario("quiet-lora")
    lora = scenario.deployments[0].lora
    assert lora is not None
    assert {a.value: a.weight for a in lora.adapters} == SHARES
    assert lora.max_lora == 4
    assert scenario.deployments[0].profile.model_name == BASE
    parallel = scenario.deployments[0].mix.parallel
    assert parallel is not None
    assert (parallel.share, parallel.choices) == (0.1, (2, 4))
    assert scenario.deployments[1].lora is None


@pytest.mark.parametrize(
    ("lora", "message"),
    [
        ({"adapters": {"a": 0.6, "b": 0.5}}, "at most 1"),
        ({"adapters": {"a": 1.5}}, r"\(0, 1\]"),
        ({"adapters": {"a": 0.0}}, "positive"),
        ({"adapters": {"a,b": 0.2}}, "not a valid label"),
        ({"adapters": {"": 0.2}}, "not a valid label"),
        ({"adapters": {BASE: 0.2}}, "base model"),
        ({"adapters": {}}, "invalid"),
        ({"adapters": {"a": 0.2}, "max_lora": 0}, "invalid"),
        ({"adapters": {"a": 0.2}, "extra": 1}, "invalid"),
    ],
)
def test_a_wrong_lora_spec_is_refused_clearly(lora: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        scenario_from_data(_document(lora=lora))
    text = f"{caught.value} {caught.value.details}"
    assert re.search(message, text), text


def test_lora_runs_one_engine_per_instance() -> None:
    with pytest.raises(InvalidInput, match="one engine per instance"):
        scenario_from_data(_document(engines=2))


@pytest.mark.parametrize(
    ("parallel", "message"),
    [
        ({"share": 0.0}, "invalid"),
        ({"share": 0.1, "n": 1}, r"\[2, 16\]"),
        ({"share": 0.1, "n": [2, 17]}, r"\[2, 16\]"),
    ],
)
def test_a_wrong_parallel_spec_is_refused_clearly(parallel: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        scenario_from_data(_document(mix={"parallel": parallel}))
    text = f"{caught.value} {caught.value.details}"
    assert re.search(message, text), text


# -- the mix and the engine -----------------------------------------------------------------


def test_each_request_is_for_the_base_model_or_one_adapter_by_its_share(
    quiet: MemorySink,
) -> None:
    users = [c.record for c in _lora(quiet)]
    assert len(users) > 2000
    counts = Counter(r.adapter for r in users)
    for name, share in SHARES.items():
        assert counts[name] / len(users) == pytest.approx(share, abs=0.03)
    assert counts[""] / len(users) == pytest.approx(0.40, abs=0.03)
    # The other deployment serves its base model only.
    assert {c.record.adapter for c in quiet.completions if c.record.model != BASE} == {""}


def test_a_parallel_request_is_one_user_record_folded_from_its_sequences(
    quiet: MemorySink,
) -> None:
    families = [c for c in _lora(quiet) if c.sequences]
    assert Counter(len(c.sequences) for c in families).keys() == {2, 4}
    assert len(families) / len(_lora(quiet)) == pytest.approx(0.1, abs=0.02)
    for c in families:
        user, seqs = c.record, c.sequences
        assert {s.trace_id for s in seqs} == {user.trace_id}
        assert len({s.span_id for s in seqs}) == len(seqs)
        assert user.span_id == min(s.span_id for s in seqs)
        assert {s.input_tokens for s in seqs} == {user.input_tokens}  # the prompt once
        assert user.output_tokens == sum(s.output_tokens or 0 for s in seqs)
        assert user.ttft_s == min(s.ttft_s or 1e9 for s in seqs)
        ends = [s.start.timestamp() + (s.e2e_s or 0.0) for s in seqs]
        assert user.start.timestamp() + (user.e2e_s or 0.0) == pytest.approx(max(ends), abs=2e-6)
        assert {s.adapter for s in seqs} == {user.adapter}


def test_an_adapter_s_requests_cost_a_little_more_gpu_time() -> None:
    """The same traffic with every request for an adapter: slower per token by about the
    step overhead (8 % of the GPU time; a busier batch adds a little), not more."""
    base = _run(scenario_from_data(_document(lora=None)), 120)
    data = _document(lora={"adapters": {"chat-lora": 1.0}})
    adapted = _run(scenario_from_data(data), 120)

    def tpot(sink: MemorySink) -> float:
        return float(np.median([c.record.tpot_s for c in _lora(sink) if c.record.tpot_s]))

    assert 1.03 < tpot(adapted) / tpot(base) < 1.15


# -- the formats ----------------------------------------------------------------------------


def test_the_sequences_of_a_parallel_request_are_vllm_s_spans(quiet: MemorySink) -> None:
    family = next(c for c in _lora(quiet) if len(c.sequences) == 4 and c.record.adapter)
    memory = InMemorySpanExporter()
    sink = OtlpSink("http://unused", exporter_factory=lambda _url: memory)
    sink.write(Batch((family,)))
    sink.close()
    spans = [s for s in memory.get_finished_spans() if s.name == "llm_request"]
    assert len(spans) == 4
    assert {s.context.trace_id for s in spans} == {int(family.record.trace_id, 16)}
    assert len({s.parent.span_id if s.parent else None for s in spans}) == 1
    by_id = {f"{s.context.span_id:016x}": s for s in spans}
    assert set(by_id) == {s.span_id for s in family.sequences}
    for seq in family.sequences:
        attrs = dict(by_id[seq.span_id].attributes or {})
        assert attrs["gen_ai.request.id"] == family.request_id
        assert attrs["gen_ai.request.n"] == 1
        assert attrs["gen_ai.response.model"] == family.record.adapter
        assert attrs["gen_ai.usage.prompt_tokens"] == family.record.input_tokens
        assert attrs["gen_ai.usage.completion_tokens"] == seq.output_tokens
        assert attrs["gen_ai.latency.time_to_first_token"] == seq.ttft_s
        assert attrs["gen_ai.latency.e2e"] == seq.e2e_s


def test_metrics_keep_the_base_model_and_list_the_adapters() -> None:
    metrics = MetricsSink()
    run = load_scenario("quiet-lora")
    sink = _Engines()
    run_scenario(dataclasses.replace(run, duration_s=60), [sink, metrics])
    assert any(e.lora for e in sink.engine_samples)
    text = generate_latest(metrics.vllm_registry("vllm-lora-0")).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    info = families["vllm:lora_requests_info"]
    named = set()
    for sample in info.samples:
        assert set(sample.labels) == {"max_lora", "waiting_lora_adapters", "running_lora_adapters"}
        assert sample.labels["max_lora"] == "4"
        assert sample.value > 1.7e9  # a Unix time, as vLLM's set_to_current_time()
        for key in ("running_lora_adapters", "waiting_lora_adapters"):
            named.update(n for n in sample.labels[key].split(",") if n)
    assert named == set(SHARES)
    models = {
        s.labels["model_name"]
        for f in families.values()
        for s in f.samples
        if "model_name" in s.labels
    }
    assert models == {BASE}


class _Engines(MemorySink):
    def __init__(self) -> None:
        super().__init__()
        self.engine_samples: list[Any] = []

    def write(self, batch: Batch) -> None:
        super().write(batch)
        self.engine_samples.extend(batch.engine_samples)


# -- the real path --------------------------------------------------------------------------


def test_a_lora_and_parallel_run_through_a_real_sidecar_stores_each_request_once(
    tmp_path: Path,
) -> None:
    scenario = load_scenario("quiet-lora")
    metrics = MetricsSink(histograms=False)
    memory = _Engines()
    run_scenario(dataclasses.replace(scenario, duration_s=60), [memory, metrics])
    name = "vllm-lora-0"
    users = [c for c in memory.completions if c.record.instance == name]
    assert any(c.sequences for c in users)
    assert {c.record.adapter for c in users} == {"", *SHARES}
    engine = create_engine(f"sqlite:///{tmp_path / 'store.db'}")
    migrate.upgrade(engine)
    server = MetricsServer(metrics.vllm_registry(name))
    try:
        scraper = Scraper(server.url, name, 10.0)
        scraper.sample()  # the sidecar learns the base model and the adapters from /metrics
        assert scraper.current_model() == BASE
        assert scraper.current_adapters() == frozenset(SHARES)
        with running_sidecar(
            open_writer(engine),
            sidecar_config(name, tmp_path / "spool", window_s=600),
            scraped_model=scraper.current_model,
            scraped_adapters=scraper.current_adapters,
        ) as app:
            sink = OtlpSink(f"http://127.0.0.1:{app.http.port}/v1/traces")
            for c in users:
                sink.emit(c)
            assert sink.flush()
            sink.close()
            assert sink.failed == 0
            result = app.shipper.ship_once(ignore_window=True)
            assert result.ok, result.error
    finally:
        server.close()
    with engine.connect() as connection:
        stored = [dict(r._mapping) for r in connection.execute(select(requests))]
    engine.dispose()
    assert len(stored) == len(users)  # one row per user request, not one per sequence
    assert Counter((r["model"], r["adapter"]) for r in stored) == Counter(
        (c.record.model, c.record.adapter) for c in users
    )
    assert sum(r["input_tokens"] for r in stored) == sum(c.record.input_tokens for c in users)
    assert sum(r["output_tokens"] for r in stored) == sum(c.record.output_tokens for c in users)
    truth = [c.record.ttft_s for c in users if c.record.ttft_s is not None]
    seen = [r["ttft_s"] for r in stored if r["ttft_s"] is not None]
    assert float(np.quantile(seen, 0.5)) == pytest.approx(float(np.quantile(truth, 0.5)), rel=0.01)
