"""Client observations through the real path: a real ``openai`` client instrumented with
``opentelemetry-instrumentation-openai`` calls the simulator's OpenAI-compatible server; the
client's spans and the server's go by OTLP to a running sidecar and land in SQLite and
PostgreSQL; ``GET /api/v1/latency/gap`` joins them by trace id.

With context propagation each call is joined to the server's record of it, and its gap is
exactly the client's value minus the server's; without it the calls are stored, unjoined.
The client asks for ``Llama-3.1-8B-Instruct`` where the server reports
``meta-llama/Llama-3.1-8B-Instruct``: one model to the gap, by the default alias rule.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from sqlalchemy import func, select

from infersight.api import create_app
from infersight.api.settings import ApiSettings
from infersight.collector.sidecar import Sidecar
from infersight.storage.tables import client_requests, requests
from infersight.storage.writer import open_writer
from tests.collector.harness import base_url, running_sidecar, sidecar_config

pytestmark = pytest.mark.e2e

SERVED_AS = "Llama-3.1-8B-Instruct"
PROMPT = [{"role": "user", "content": "Why is the sky blue? " * 20}]


@contextmanager
def quiet_third_party() -> Iterator[None]:
    """The OpenAI instrumentation defines pydantic models the pre-2.0 way: a deprecation
    warning that is no concern of this suite (where warnings are errors)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        yield


@pytest.fixture
def sidecar(store, tmp_path: Path) -> Iterator[Sidecar]:
    # Records are shipped when the test says so, after every export has been acknowledged.
    config = sidecar_config("sim-0", tmp_path / "spool", window_s=600.0)
    with running_sidecar(open_writer(store.engine), config) as app:
        yield app


def ship(sidecar: Sidecar) -> None:
    result = sidecar.shipper.ship_once(ignore_window=True)
    assert result.ok, result.error


def call_the_simulator(sidecar: Sidecar, *, propagate: bool, tenant: str = "") -> list[Any]:
    """Four calls (two plain, two streamed) through an instrumented ``openai`` client; the
    simulator's completions, once its spans and the client's are exported."""
    import openai

    with quiet_third_party():
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    from infersight.simulator.realtime import RealtimeServer
    from infersight.simulator.sinks import MemorySink
    from infersight.simulator.sinks.otlp import OtlpSink
    from infersight.simulator.specs import load_profile
    from tests.peers import serving_app

    endpoint = f"{base_url(sidecar)}/v1/traces"
    provider = TracerProvider(resource=Resource.create({"service.name": "chat-app"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    instrumentor = OpenAIInstrumentor(enable_trace_context_propagation=propagate)
    with quiet_third_party():
        instrumentor.instrument(tracer_provider=provider)
    memory = MemorySink()
    simulator = RealtimeServer.standalone(
        "sim-0",
        load_profile("llama-3.1-8b-h200x1"),
        epoch=datetime.now(UTC),
        sinks=[memory, OtlpSink(endpoint, flush_on_write=False)],
        served_model_name=SERVED_AS,
    )
    tracer = provider.get_tracer("chat-app")
    try:
        with serving_app(simulator.app()) as url:  # on the way out the sink flushes its spans
            api = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
            for stream in (False, True, False, True):
                with tracer.start_as_current_span("handle_chat") as root:
                    if tenant:
                        root.set_attribute("infersight.tenant", tenant)
                    reply = api.chat.completions.create(
                        model=SERVED_AS,
                        messages=PROMPT,  # type: ignore[arg-type]
                        max_tokens=16,
                        stream=stream,
                        stream_options={"include_usage": True} if stream else None,
                    )
                    if stream:
                        assert sum(1 for _ in reply) > 0
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
    assert len(memory.completions) == 4
    return list(memory.completions)


def gap(store, path: str = "/api/v1/latency/gap", **params: str) -> dict[str, Any]:
    app = create_app(ApiSettings(run_jobs=False), store.engine)

    async def get() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
            return await c.get(path, params={"range": "1h", **params})

    response = asyncio.run(get())
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def client_rows(store) -> list[Any]:
    with store.engine.connect() as c:
        return list(c.execute(select(client_requests).order_by(client_requests.c.start)))


def test_propagated_calls_are_joined_and_their_gap_is_client_minus_server(
    store, sidecar: Sidecar
) -> None:
    served = call_the_simulator(sidecar, propagate=True)
    ship(sidecar)
    calls = client_rows(store)
    assert len(calls) == 4
    assert {row.model for row in calls} == {SERVED_AS}
    assert all(row.source == "openllmetry" and row.service == "chat-app" for row in calls)
    assert all(row.status == "ok" and row.input_tokens and row.output_tokens for row in calls)
    streamed = [row for row in calls if row.ttft_s is not None]
    assert len(streamed) == 2  # a plain call has no first chunk
    assert all(row.ttft_source == "event" for row in streamed)
    with store.engine.connect() as c:
        servers = {row.trace_id: row for row in c.execute(select(requests))}
    assert len(servers) == 4
    assert {row.model for row in servers.values()} == {"meta-llama/Llama-3.1-8B-Instruct"}
    # Each call's server record sits in its trace, below it: the client propagated it. (Its
    # parent is the call's span, or, once the instrumentation has been instrumented before
    # in this process, the span of a wrapper that uninstrumenting left behind: same trace.)
    for call in calls:
        server = servers[call.trace_id]
        own = next(s for s in served if s.record.span_id == server.span_id)
        assert own.record.trace_id == call.trace_id
        assert own.parent_span_id
        assert call.e2e_s >= server.e2e_s
        if call.ttft_s is not None:
            assert call.ttft_s >= server.ttft_s

    body = gap(store, model="llama-3.1-8b-instruct", quantiles="0,0.5,1")
    assert (body["calls"], body["joined"], body["unjoined"]) == (4, 4, 0)
    (group,) = body["groups"]
    assert group["labels"] == {"model": "llama-3.1-8b-instruct", "tenant": ""}
    e2e_gaps = sorted(call.e2e_s - servers[call.trace_id].e2e_s for call in calls)
    ttft_gaps = sorted(call.ttft_s - servers[call.trace_id].ttft_s for call in streamed)
    assert group["e2e_gap"]["count"] == 4
    assert group["e2e_gap"]["quantiles"]["0"] == pytest.approx(e2e_gaps[0])
    assert group["e2e_gap"]["quantiles"]["1"] == pytest.approx(e2e_gaps[-1])
    assert group["e2e_gap"]["mean"] == pytest.approx(sum(e2e_gaps) / 4)
    assert group["ttft_gap"]["count"] == 2
    assert group["ttft_gap"]["quantiles"]["0"] == pytest.approx(ttft_gaps[0])
    assert ttft_gaps[0] >= 0
    assert group["ttft_gap"]["quantiles"]["1"] == pytest.approx(ttft_gaps[-1])
    # The server's model name selects the same calls.
    assert gap(store, model="meta-llama/Llama-3.1-8B-Instruct")["joined"] == 4
    assert gap(store, model="another-model")["calls"] == 0
    # The breakdown's client ↔ engine stage: the same gaps, beyond the server's stages.
    (stages,) = gap(store, "/api/v1/breakdown", group_by="model")["groups"]
    assert stages["labels"] == {"model": "meta-llama/Llama-3.1-8B-Instruct"}
    client = stages["client"]
    assert client["calls"] == 4
    assert client["gap_seconds_total"] == pytest.approx(sum(e2e_gaps))
    assert client["client_seconds_total"] == pytest.approx(sum(call.e2e_s for call in calls))
    assert 0 <= client["share_of_client_e2e"] < 1


def test_calls_that_propagate_nothing_are_stored_unjoined(store, sidecar: Sidecar) -> None:
    call_the_simulator(sidecar, propagate=False, tenant="acme")
    ship(sidecar)
    calls = client_rows(store)
    assert len(calls) == 4
    with store.engine.connect() as c:
        server_traces = set(c.execute(select(requests.c.trace_id)).scalars())
    assert len(server_traces) == 4
    assert not server_traces & {row.trace_id for row in calls}
    body = gap(store)
    assert (body["calls"], body["joined"], body["unjoined"]) == (4, 0, 4)
    (group,) = body["groups"]
    assert group["e2e_gap"]["count"] == 0
    assert group["client"]["e2e"]["count"] == 4
    assert gap(store, tenant="other")["calls"] == 0
    (stages,) = gap(store, "/api/v1/breakdown")["groups"]
    assert stages["client"] is None  # nothing joined: no client stage to show


def test_a_replayed_client_span_is_stored_once(store, sidecar: Sidecar) -> None:
    call_the_simulator(sidecar, propagate=True)
    ship(sidecar)
    calls = client_rows(store)
    from infersight.core.client import ClientRecord

    writer = open_writer(store.engine)
    again = [
        ClientRecord(
            **{
                name: getattr(row, name)
                for name in ("trace_id", "span_id", "start", "model", "e2e_s")
            }
        )
        for row in calls
    ]
    result = writer.write_client_requests(again)  # type: ignore[attr-defined]
    assert (result.inserted, result.duplicates) == (0, 4)
    with store.engine.connect() as c:
        assert c.execute(select(func.count()).select_from(client_requests)).scalar() == 4


def test_unknown_gap_parameters_are_refused(store) -> None:
    app = create_app(ApiSettings(run_jobs=False), store.engine)

    async def get() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
            return await c.get("/api/v1/latency/gap", params={"instance": "x"})

    response = asyncio.run(get())
    assert response.status_code == 400
    assert "instance" in response.json()["error"]["message"]


def test_a_load_tests_requests_are_client_calls_joined_by_their_traceparent(
    store, sidecar: Sidecar
) -> None:
    import numpy as np

    from infersight.core.loadtest import ScenarioKind
    from infersight.loadgen.client import Endpoint
    from infersight.loadgen.runner import Runner
    from infersight.loadgen.scenarios import steady
    from infersight.loadgen.workload import DistKind, Lengths, Sampled
    from infersight.simulator.realtime import RealtimeServer
    from infersight.simulator.sinks.otlp import OtlpSink
    from infersight.simulator.specs import load_profile
    from infersight.storage.runs import save_run
    from tests.peers import serving_app

    endpoint = f"{base_url(sidecar)}/v1/traces"
    simulator = RealtimeServer.standalone(
        "sim-0",
        load_profile("llama-3.1-8b-h200x1"),
        epoch=datetime.now(UTC),
        sinks=[OtlpSink(endpoint, flush_on_write=False)],
    )
    with serving_app(simulator.app()) as url:
        runner = Runner(
            Endpoint(url, simulator.model),
            steady(2, 2.0),
            Sampled(
                Lengths(DistKind.FIXED, 200), Lengths(DistKind.FIXED, 8), np.random.default_rng(1)
            ),
            rng=np.random.default_rng(2),
        )
        run = asyncio.run(runner.run(name="gap", scenario=ScenarioKind.STEADY))
    save_run(store.engine, run)
    ship(sidecar)
    sent = [r for r in run.results if r.ok and r.trace_id]
    assert sent
    body = gap(store, model=SERVED_AS)
    assert (body["calls"], body["joined"]) == (len(sent), len(sent))
    with store.engine.connect() as c:
        servers = {row.trace_id: row for row in c.execute(select(requests))}
    (group,) = body["groups"]
    e2e_gaps = [r.e2e_s - servers[r.trace_id].e2e_s for r in sent]
    assert group["e2e_gap"]["mean"] == pytest.approx(sum(e2e_gaps) / len(e2e_gaps))
    assert gap(store, tenant="acme")["calls"] == 0  # a load test's calls have no tenant
