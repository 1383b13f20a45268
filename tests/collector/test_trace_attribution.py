"""A trace-joined fleet (#34): every request's tenant is known although the engine's spans
carry none.

In front of the simulator (its spans: vLLM's, no tenant) stand a real ``openai`` client
instrumented with ``opentelemetry-instrumentation-openai``, whose resource names its tenant and
team, and a LiteLLM-shaped proxy (its tracer, span names and ``metadata.user_api_key_*``
attributes) that propagates its trace to the simulator. The engine's spans go to the engine's
own sidecar; the app's and the proxy's to another, the gateway sidecar, which reads them with
``INFERSIGHT_ATTRIBUTION=litellm,openai-sdk``. The two ship in either order (the app's
attributions before their requests, the proxy's after) into SQLite and PostgreSQL; every
request ends attributed once, and the cost per tenant adds up exactly to the fleet's.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.propagate import inject
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind
from sqlalchemy import select

from infersight.collector.sidecar import Sidecar
from infersight.core.attribution import parse_setting
from infersight.core.samples import GpuSample
from infersight.core.window import Window
from infersight.service.attribution import attributed_cost
from infersight.storage.tables import requests, trace_attributions
from infersight.storage.writer import open_writer
from tests.collector.harness import base_url, running_sidecar, sidecar_config
from tests.collector.test_collector_client_calls import SERVED_AS, quiet_third_party
from tests.cost.scenario import MODEL
from tests.waiting import until

pytestmark = pytest.mark.e2e

PROMPT = [{"role": "user", "content": "Summarise the quarterly report. " * 10}]
#: The OpenAI SDK apps: their resource names their tenant and team; service.name is the
#: workload (the ``openai-sdk`` preset).
APPS = {
    "support-bot": {"tenant.id": "acme", "team": "cx"},
    "search-ranker": {"tenant.id": "globex", "team": "search"},
}
#: The LiteLLM proxy's virtual keys: team alias (the tenant, no organisation) and key alias.
KEYS = [("ads", "ads-batch"), ("ads", "ads-live"), ("research", "notebooks")]


@pytest.fixture
def reachable() -> threading.Event:
    """Set: the gateway sidecar can reach the store (until then its spool holds its spans,
    as through an outage of its own)."""
    event = threading.Event()
    event.set()
    return event


@pytest.fixture
def sidecars(
    store, tmp_path: Path, reachable: threading.Event
) -> Iterator[tuple[Sidecar, Sidecar]]:
    """The engine's sidecar (its requests shipped when the test says so) and the gateway's,
    with the attribution mapping, whose spans ship as they come once the store is
    ``reachable``."""
    engine_config = sidecar_config("sim-0", tmp_path / "engine", window_s=600.0)
    gateway_config = sidecar_config(
        "gateway",
        tmp_path / "gateway",
        window_s=600.0,
        attribution=parse_setting("litellm,openai-sdk"),
    )

    def gateway_sink() -> Any:
        reachable.wait()
        return open_writer(store.engine)

    with (
        running_sidecar(open_writer(store.engine), engine_config) as engine,
        running_sidecar(gateway_sink, gateway_config) as gateway,
    ):
        yield engine, gateway


def ship(sidecar: Sidecar) -> None:
    result = sidecar.shipper.ship_once(ignore_window=True)
    assert result.ok, result.error


def _provider(sidecar: Sidecar, resource: dict[str, str]) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create(resource))
    exporter = OTLPSpanExporter(endpoint=f"{base_url(sidecar)}/v1/traces")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def _sdk_app_calls(url: str, gateway: Sidecar) -> int:
    """Each app calls the simulator through an instrumented ``openai`` client (the client's
    spans to the gateway sidecar, its trace propagated to the simulator)."""
    import openai

    with quiet_third_party():
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    calls = 0
    for service, resource in APPS.items():
        provider = _provider(gateway, {"service.name": service, **resource})
        instrumentor = OpenAIInstrumentor(enable_trace_context_propagation=True)
        with quiet_third_party():
            instrumentor.instrument(tracer_provider=provider)
        try:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
            for stream in (False, True, False):
                reply = client.chat.completions.create(
                    model=SERVED_AS,
                    messages=PROMPT,  # type: ignore[arg-type]
                    max_tokens=12,
                    stream=stream,
                    stream_options={"include_usage": True} if stream else None,
                )
                if stream:
                    assert sum(1 for _ in reply) > 0
                calls += 1
        finally:
            instrumentor.uninstrument()
            provider.shutdown()
    return calls


def _litellm_calls(url: str, gateway: Sidecar) -> int:
    """A LiteLLM-shaped proxy: per call its ``Received Proxy Server Request`` span with the
    virtual key's metadata, and a ``raw_gen_ai_request`` span around the call to the engine,
    whose ``traceparent`` it sends."""
    provider = _provider(gateway, {"service.name": "litellm-proxy"})
    tracer = provider.get_tracer("litellm")
    calls = 0
    try:
        for team, key in KEYS * 2:
            with tracer.start_as_current_span(
                "Received Proxy Server Request", kind=SpanKind.SERVER
            ) as proxy:
                proxy.set_attributes(
                    {
                        "metadata.user_api_key_team_alias": team,
                        "metadata.user_api_key_team_id": f"team-{team}",
                        "metadata.user_api_key_alias": key,
                        "metadata.user_api_key_hash": "88dc" * 16,
                        "gen_ai.request.model": SERVED_AS,
                        "gen_ai.system": "hosted_vllm",
                        "llm.request.type": "acompletion",
                    }
                )
                with tracer.start_as_current_span("raw_gen_ai_request", kind=SpanKind.CLIENT):
                    headers: dict[str, str] = {}
                    inject(headers)
                    body = {"model": SERVED_AS, "messages": PROMPT, "max_tokens": 12}
                    answer = httpx.post(
                        f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60
                    )
                    assert answer.status_code == 200, answer.text
                    usage = answer.json()["usage"]
                proxy.set_attributes(
                    {
                        "gen_ai.usage.prompt_tokens": usage["prompt_tokens"],
                        "gen_ai.usage.completion_tokens": usage["completion_tokens"],
                    }
                )
                calls += 1
    finally:
        provider.shutdown()
    return calls


def _serve(engine: Sidecar, gateway: Sidecar) -> tuple[int, int]:
    from infersight.simulator.realtime import RealtimeServer
    from infersight.simulator.sinks.otlp import OtlpSink
    from infersight.simulator.specs import load_profile
    from tests.peers import serving_app

    simulator = RealtimeServer.standalone(
        "sim-0",
        load_profile("llama-3.1-8b-h200x1"),
        epoch=datetime.now(UTC),
        sinks=[OtlpSink(f"{base_url(engine)}/v1/traces", flush_on_write=False)],
        served_model_name=SERVED_AS,
    )
    with serving_app(simulator.app()) as url:  # on the way out the sink flushes its spans
        sdk = _sdk_app_calls(url, gateway)
        litellm = _litellm_calls(url, gateway)
    return sdk, litellm


def _rows(store) -> list[Any]:
    with store.engine.connect() as connection:
        return list(connection.execute(select(requests)))


def test_every_request_of_the_trace_joined_fleet_is_attributed(
    store, sidecars: tuple[Sidecar, Sidecar]
) -> None:
    engine, gateway = sidecars
    sdk, litellm = _serve(engine, gateway)
    # The gateway's spans reach the store first for some traces, after for others: all of
    # them first here, then the engine's requests; then a second look after both.
    ship(gateway)
    with store.engine.connect() as connection:
        spans = list(connection.execute(select(trace_attributions)))
    assert {s.source for s in spans} == {"litellm+openai-sdk"}
    ship(engine)
    rows = _rows(store)
    assert len(rows) == sdk + litellm  # the proxy's spans are no requests of their own
    assert all(row.engine == "vllm" for row in rows)
    by_workload = Counter((r.tenant, r.team, r.workload) for r in rows)
    assert by_workload == Counter(
        {
            ("acme", "cx", "support-bot"): 3,
            ("globex", "search", "search-ranker"): 3,
            ("ads", "ads", "ads-batch"): 2,
            ("ads", "ads", "ads-live"): 2,
            ("research", "research", "notebooks"): 2,
        }
    )
    # Replayed from the gateway (a sidecar restarted before its answer came): nothing moves.
    writer = open_writer(store.engine)
    from infersight.core.attribution import Attribution

    again = [
        Attribution(
            s.trace_id,
            s.span_id,
            s.start,
            s.duration_s,
            s.tenant,
            s.team,
            s.workload,
            s.adapter,
            s.source,
        )
        for s in spans
    ]
    assert writer.write_attributions(again).inserted == 0
    assert Counter((r.tenant, r.team, r.workload) for r in _rows(store)) == by_workload

    # What it cost, per tenant: GPU samples of the engine's H200 over the calls.
    starts = [r.start for r in rows]
    window = Window(min(starts) - timedelta(minutes=1), max(starts) + timedelta(minutes=2))
    samples = []
    ts = window.start
    while ts < window.end:
        samples.append(
            GpuSample(ts=ts, instance="sim-0", gpu_index=0, name="NVIDIA H200", util_gpu=0.4)
        )
        ts += timedelta(seconds=15)
    writer.write_gpu_samples(samples)
    answer = attributed_cost(store.sql.cost, window, MODEL, "tenant")
    assert {s.value for s in answer.shares} == {"acme", "globex", "ads", "research"}
    total = sum((s.allocation for s in answer.shares), Decimal(0))
    assert total == answer.fleet_total > 0
    assert answer.usage + answer.idle == total
    assert answer.attributed_requests == len(rows)


def test_attributions_shipped_after_their_requests_fill_them(
    store, reachable: threading.Event, sidecars: tuple[Sidecar, Sidecar]
) -> None:
    reachable.clear()
    engine, gateway = sidecars
    sdk, litellm = _serve(engine, gateway)
    ship(engine)
    assert {(r.tenant, r.team, r.workload) for r in _rows(store)} == {("", "", "")}
    reachable.set()  # the gateway's sidecar ships what it held
    until(
        lambda: all(r.tenant and r.team and r.workload for r in _rows(store)),
        "every request attributed",
    )
    rows = _rows(store)
    assert len(rows) == sdk + litellm
    assert len({(r.tenant, r.team, r.workload) for r in rows}) == 5
