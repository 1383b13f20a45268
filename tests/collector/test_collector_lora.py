"""LoRA adapters (#30): a base model serving adapters. vLLM's ``llm_request`` span names the
model the request asked for (``gen_ai.response.model``: the adapter's name when it targeted
one); the server's /metrics name the base (``model_name``) and the adapters running and
waiting (``vllm:lora_requests_info``). A request to an adapter is a request of the base model
with that adapter: ``model`` = the base, ``adapter`` = the adapter's name.

The real path: spans made by the OpenTelemetry SDK, sent by its OTLP/HTTP exporter to a
running sidecar (decoding in its child processes), read back from SQLite and PostgreSQL."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from sqlalchemy import select

from infersight.collector.mapping import MappingContext, map_span
from infersight.collector.scrape import flavours, scraper
from infersight.collector.scrape.exposition import parse
from infersight.collector.scrape.scraper import Scraper
from infersight.core.records import RequestRecord
from infersight.storage.tables import requests
from infersight.storage.writer import open_writer
from tests.collector import collector_shapes as shapes
from tests.collector.collector_shapes import span
from tests.collector.harness import export_spans, running_sidecar, sidecar_config

BASE = "meta-llama/Llama-3.1-8B-Instruct"
MS = 1_000_000
SQL = frozenset({"sql-lora"})


def _vllm(model: str) -> dict[str, object]:
    return {**shapes.VLLM_V1, "gen_ai.response.model": model}


def _attributed(
    ctx: MappingContext, model: str, attrs: dict | None = None, name: str = "llm_request"
) -> tuple[str, str]:
    record = map_span(span(name, attrs if attrs is not None else _vllm(model)), ctx)
    assert isinstance(record, RequestRecord), record
    return record.model, record.adapter


def _scraped(name: str):
    return lambda: name


@pytest.mark.parametrize(
    ("ctx", "span_model", "expected"),
    [
        # the base model itself: no adapter
        (MappingContext("n", scraped_model=_scraped(BASE)), BASE, (BASE, "")),
        # an adapter the scraper listed: the base is the scraped model
        (
            MappingContext(
                "n",
                scraped_model=_scraped(BASE),
                scraped_adapters=lambda: frozenset({"sql-lora"}),
            ),
            "sql-lora",
            (BASE, "sql-lora"),
        ),
        # declared with --adapter, the base given with --model (no scrape at all)
        (MappingContext("n", model=BASE, adapters=SQL), "sql-lora", (BASE, "sql-lora")),
        # the fallback: one scraped base, a vLLM span naming another model is an adapter
        (MappingContext("n", scraped_model=_scraped(BASE)), "chat-lora", (BASE, "chat-lora")),
        # no scraped base and nothing declared: the span's model, as before
        (MappingContext("n"), "chat-lora", ("chat-lora", "")),
        (MappingContext("n", model=BASE), "other-model", ("other-model", "")),
        # a declared adapter whose base nobody knows keeps its name as the model too
        (MappingContext("n", adapters=SQL), "sql-lora", ("sql-lora", "sql-lora")),
    ],
)  # fmt: skip
def test_a_span_naming_an_adapter_is_the_base_models_request_with_that_adapter(
    ctx: MappingContext, span_model: str, expected: tuple[str, str]
) -> None:
    assert _attributed(ctx, span_model) == expected


def test_the_different_name_fallback_holds_for_vllm_spans_only() -> None:
    ctx = MappingContext("n", scraped_model=_scraped(BASE))
    genai = {**shapes.GENAI_NEW, "gen_ai.provider.name": "sglang"}
    assert _attributed(ctx, "", genai, "chat qwen2.5-7b") == ("qwen2.5-7b", "")
    # a span naming no model keeps the scraped base, with no adapter
    assert _attributed(ctx, "", dict(shapes.VLLM_V1)) == (BASE, "")


_INFO = (
    'vllm:lora_requests_info{{max_lora="4",running_lora_adapters="{}",waiting_lora_adapters="{}"}}'
)
LORA_EXPOSITION = f"""\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="{BASE}"}} 3
# TYPE vllm:lora_requests_info gauge
{_INFO.format("sql-lora,chat-lora", "")} 1.7e9
{_INFO.format("", " summarise-lora ")} 1.6e9
"""


def test_the_vllm_dialect_reads_running_and_waiting_adapters() -> None:
    exposition = parse(LORA_EXPOSITION)
    assert flavours.lora_adapters(exposition) == {"sql-lora", "chat-lora", "summarise-lora"}
    assert flavours.single_model(exposition) == BASE


def test_the_scraper_accumulates_adapters_in_a_bounded_set(monkeypatch) -> None:
    scrape = Scraper("http://127.0.0.1:9/metrics", "n")
    bodies = [
        LORA_EXPOSITION,
        LORA_EXPOSITION.replace("sql-lora,chat-lora", "").replace(" summarise-lora ", ""),
    ]
    monkeypatch.setattr(scrape, "_fetch", lambda: (bodies.pop(0), "text/plain"))
    scrape.sample()
    first = scrape.current_adapters()
    assert first == {"sql-lora", "chat-lora", "summarise-lora"}
    assert scrape.current_model() == BASE
    scrape.sample()  # no adapter listed now: the ones seen stay known
    assert scrape.current_adapters() is first  # unchanged: the same set, nothing rebuilt
    monkeypatch.setattr(scraper, "MAX_ADAPTERS", 4)
    scrape._learn_adapters({f"a{i}" for i in range(10)})
    assert len(scrape.current_adapters()) == 4


class LoraServer:
    """vLLM's tracer on a server with LoRA adapters: one ``llm_request`` span per request."""

    def __init__(self) -> None:
        self.memory = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource.create({"service.name": "vllm"}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        self.tracer = self.provider.get_tracer("vllm.tracing.otel")

    def request(self, model: str, t0: int) -> None:
        attributes = {**shapes.VLLM_V1, "gen_ai.response.model": model}
        span = self.tracer.start_span(
            "llm_request", kind=SpanKind.SERVER, start_time=t0, attributes=attributes
        )
        span.end(end_time=t0 + 2_250 * MS)

    def spans(self) -> list[ReadableSpan]:
        return list(self.memory.get_finished_spans())


def test_adapter_requests_reach_the_store_as_the_base_model_with_their_adapter(
    store, tmp_path: Path
) -> None:
    server = LoraServer()
    t0 = time.time_ns()
    mix = {BASE: 6, "sql-lora": 4, "chat-lora": 3, "other": 2}
    i = 0
    for model, count in mix.items():
        for _ in range(count):
            server.request(model, t0 + i * MS)
            i += 1
    config = sidecar_config("vllm-lora", tmp_path / "spool", adapters=("other",))
    with running_sidecar(
        open_writer(store.engine),
        config,
        scraped_model=lambda: BASE,
        scraped_adapters=lambda: frozenset({"sql-lora"}),
    ) as app:
        assert app.decoders is not None  # decoded in child processes: data crossed over
        export_spans(app, server.spans())
        result = app.shipper.ship_once(ignore_window=True)
        assert result.ok, result.error
    r = requests.c
    with store.engine.connect() as c:
        stored = c.execute(select(r.model, r.adapter, r.start)).all()
    assert len(stored) == 15
    assert {m for m, _, _ in stored} == {BASE}
    counts = {a: sum(1 for _, x, _ in stored if x == a) for a in ("", "sql-lora", "chat-lora")}
    assert counts == {"": 6, "sql-lora": 4, "chat-lora": 3}
    assert sum(1 for _, a, _ in stored if a == "other") == 2
    assert all(s.tzinfo is None or s.tzinfo == UTC for _, _, s in stored)
    assert min(s for _, _, s in stored).replace(tzinfo=UTC) <= datetime.now(UTC)


def test_a_callers_span_names_the_adapter_the_engine_did_not(store, tmp_path: Path) -> None:
    """An engine whose span names the base model only (TGI serving a LoRA by ``adapter_id``,
    a generic server): the caller's span in the same trace — an OpenAI SDK's CLIENT span, a
    gateway's — asked for the adapter by name. Only a name the instance serves as an adapter
    counts: a caller's alias for the base model is not one."""
    caller = TracerProvider(resource=Resource.create({"service.name": "chat-app"}))
    memory = InMemorySpanExporter()
    caller.add_span_processor(SimpleSpanProcessor(memory))
    server = TracerProvider(resource=Resource.create({"service.name": "text-generation"}))
    server.add_span_processor(SimpleSpanProcessor(memory))
    t0 = time.time_ns()
    for i, asked in enumerate(("sql-lora", "gpt-4o", "sql-lora")):
        call = caller.get_tracer("openai").start_span(
            "chat", kind=SpanKind.CLIENT, start_time=t0 + i * MS,
            attributes={"gen_ai.request.model": asked, "gen_ai.system": "openai"},
        )  # fmt: skip
        context = trace.set_span_in_context(call)
        answer = server.get_tracer("tgi").start_span(
            "generate", context=context, kind=SpanKind.SERVER, start_time=t0 + i * MS,
            attributes={
                "total_time": "1.2s", "inference_time": "1.1s", "queue_time": "10ms",
                "time_per_token": "20ms", "prompt_tokens": "100", "generated_tokens": "50",
            },
        )  # fmt: skip
        answer.end(end_time=t0 + i * MS + 1_200 * MS)
        call.end(end_time=t0 + i * MS + 1_250 * MS)
    config = sidecar_config("tgi-lora", tmp_path / "spool", model=BASE, adapters=("sql-lora",))
    with running_sidecar(open_writer(store.engine), config) as app:
        export_spans(app, list(memory.get_finished_spans()))
        assert app.shipper.ship_once(ignore_window=True).ok
    r = requests.c
    with store.engine.connect() as c:
        stored = sorted(c.execute(select(r.model, r.adapter)).all())
    assert stored == [(BASE, ""), (BASE, "sql-lora"), (BASE, "sql-lora")]
