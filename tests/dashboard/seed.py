"""A store with something to look at: a simulated fleet with a fault, SLOs and incidents.

The shipped ``mixed-incident`` scenario, cut to ``minutes`` with its first fault (thermal
throttling of ``vllm-70b-0`` from minute 30), goes through the real store writer; three SLOs
are stored and evaluated every ``every`` from minute 20 with the diagnosis listener, so the
incident the fault causes is opened and diagnosed the way ``infersight serve`` would do it.
``vllm-8b-1`` runs two data-parallel engines, one with 30 points more KV cache in use than
the other (``two_engines``). The 8B model's callers trace their calls (``client_calls``): most
propagate their context (joined, a gap of tens of milliseconds), a tenth do not (unjoined).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import numpy as np
from sqlalchemy import Engine

from infersight.alerts.rules import load_rules
from infersight.core.client import ClientRecord, TtftSource
from infersight.core.query import Selector
from infersight.core.samples import (
    SERVER_METRIC_FIELDS,
    EngineSample,
    ServerSample,
    combine_engines,
)
from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.core.window import Window
from infersight.service.cost_spec import example_model
from infersight.service.diagnosis import DiagnosisListener
from infersight.service.evaluation import Evaluator, default_policy
from infersight.simulator.events import Batch
from infersight.simulator.fleet import run_scenario
from infersight.simulator.sinks import MemorySink
from infersight.simulator.sinks.store import StoreSink
from infersight.simulator.specs import load_scenario
from infersight.storage import slo_store
from infersight.storage.baselines import capture_window, save_baseline
from infersight.storage.runs import save_run
from infersight.storage.sql_store import SqlStore
from infersight.storage.writer import open_writer
from tests.capacity.support import saturating_run

MODEL_8B = "meta-llama/Llama-3.1-8B-Instruct"
MODEL_70B = "meta-llama/Llama-3.1-70B-Instruct"
INSTANCES = ("vllm-70b-0", "vllm-70b-1", "vllm-8b-0", "vllm-8b-1")
THROTTLED = "vllm-70b-0"
DATA_PARALLEL = "vllm-8b-1"
BASELINE = "70b-healthy"

SLOS = (
    SloSpec(
        "chat-70b-tpot",
        Sli(SliKind.LATENCY, "tpot", 0.035),
        0.999,
        timedelta(days=28),
        Selector(model=MODEL_70B),
        "Llama 3.1 70B streams a token every 35 ms or faster",
    ),
    SloSpec(
        "chat-8b-ttft",
        Sli(SliKind.LATENCY, "ttft", 0.5),
        0.999,
        timedelta(days=28),
        Selector(model=MODEL_8B),
        "Llama 3.1 8B answers within 500 ms",
    ),
    SloSpec("fleet-availability", Sli(SliKind.AVAILABILITY), 0.999, timedelta(days=28)),
)


def seed(engine: Engine, minutes: int = 45, every: timedelta = timedelta(minutes=2)) -> datetime:
    """Fill ``engine``'s (migrated, empty) store; returns the end of the data: the page's now."""
    scenario = load_scenario("mixed-incident")
    scenario = dataclasses.replace(scenario, duration_s=minutes * 60.0, faults=scenario.faults[:1])
    memory = MemorySink()
    run_scenario(scenario, [memory])
    sink = StoreSink(open_writer(engine))
    sink.write(_batch(memory))
    sink.close()
    open_writer(engine).write_client_requests(client_calls(memory))  # type: ignore[attr-defined]
    end = scenario.start + timedelta(minutes=minutes)
    for spec in SLOS:
        slo_store.put_slo(engine, spec, scenario.start)
    diagnosis = DiagnosisListener(SqlStore(engine), pack=load_rules())
    evaluator = Evaluator(SqlStore(engine), default_policy(), [diagnosis])
    at = scenario.start + timedelta(minutes=20)
    while at <= end:
        evaluator.run(at)
        diagnosis.refresh(at)  # the follow-up job: pages that wait for evidence, re-diagnoses
        at += every
    _baseline_and_run(engine, scenario.start)
    return end


def _baseline_and_run(engine: Engine, start: datetime) -> None:
    """A baseline of the 70B model before the fault, and a step load test of the 8B model."""
    healthy = Window(start + timedelta(minutes=5), start + timedelta(minutes=25))
    baseline = capture_window(
        engine,
        BASELINE,
        healthy,
        Selector(model=MODEL_70B),
        start + timedelta(minutes=26),
        description="70B before the throttling",
        cost_model=example_model(),
    )
    save_baseline(engine, baseline)
    run = dataclasses.replace(saturating_run(), model=MODEL_8B, started_at=start)
    save_run(engine, run)


def two_engines(sample: ServerSample) -> ServerSample:
    """``sample`` as a server of two engines: engine 1 as the simulator's instance, engine 0
    with 30 points more of its KV cache in use; the instance's figures are their combination
    (``core.samples.combine_engines``)."""
    kv = sample.kv_cache_usage
    if kv is None:
        return sample
    running, waiting = sample.requests_running or 0.0, sample.requests_waiting or 0.0
    engines = (
        EngineSample("0", requests_running=0.6 * running, requests_waiting=waiting,
                     kv_cache_usage=min(1.0, kv + 0.3)),
        EngineSample("1", requests_running=0.4 * running, requests_waiting=0.0,
                     kv_cache_usage=kv),
    )  # fmt: skip
    figures = combine_engines(engines, {f: getattr(sample, f) for f in SERVER_METRIC_FIELDS})
    return dataclasses.replace(sample, per_engine=engines, **figures)


def _batch(memory: MemorySink) -> Batch:
    server = tuple(
        two_engines(s) if s.instance == DATA_PARALLEL else s for s in memory.server_samples
    )
    return Batch(tuple(memory.completions), server, tuple(memory.gpu_samples))


def client_calls(memory: MemorySink, every: int = 7) -> list[ClientRecord]:
    """Client records of every ``every``-th 8B request, as an instrumented ``openai`` client
    asking for the short model name would send them: the network and a gateway add 20–80 ms to
    TTFT and end to end; one call in ten propagated no context (another trace id)."""
    rng = np.random.default_rng(18)
    out = []
    for i, completion in enumerate(memory.completions[::every]):
        r = completion.record
        if r.model != MODEL_8B or r.e2e_s is None or r.ttft_s is None:
            continue
        extra = float(rng.uniform(0.02, 0.08))
        trace = r.trace_id if i % 10 else f"{int(rng.integers(1, 2**62)):032x}"
        out.append(
            ClientRecord(
                trace_id=trace,
                span_id=f"{int(rng.integers(1, 2**62)):016x}",
                start=r.start - timedelta(seconds=extra / 2),
                service="chat-app",
                source="openllmetry",
                provider="openai",
                model="Llama-3.1-8B-Instruct",
                tenant=r.tenant,
                operation="chat",
                e2e_s=r.e2e_s + extra,
                ttft_s=r.ttft_s + extra,
                ttft_source=TtftSource.EVENT,
                input_tokens=r.input_tokens,
                output_tokens=r.output_tokens,
            )
        )
    return out
