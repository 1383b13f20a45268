"""The engine registry: what infersight knows of each server it reads, declared once.

One ``Declaration`` per server names everything the collector reads of it: the ``Engine``
label its records carry, the span shapes it emits (each a ``claims`` / ``map_span`` pair from
``collector.mapping``, in precedence order) and its ``/metrics`` dialects (a
``scrape.flavours.Dialect``: prefixes, field reader, path, data-parallel labels). The span
dispatch (``mapping.dispatch``), the scraper's dialect detection and the names of the
sidecar's ``infersight_collector_scrape_dialect`` gauge are all derived from ``REGISTRY``;
adding an engine is one declaration here plus its mapper and field reader.

Declarations are of three kinds:

* ``engine``: a server that runs the model (vLLM, SGLang, TGI, TensorRT-LLM, and the generic
  OpenTelemetry GenAI conventions as the last resort). Its spans become request records
  labelled with its ``engine``.
* ``peer``: a server in front of engines that makes no request record of its own (llm-d's
  endpoint picker and P/D routing sidecar, NVIDIA Dynamo's frontend). A peer's spans are
  matched before any engine's (a proxy's spans wrap the engine's and must not be taken for
  them); its dialects are detected after every engine's (a pod's exposition may carry a
  router's series beside its engine's, and then it is the engine being scraped).
* ``device``: a GPU exporter (dcgm-exporter); its dialect yields ``GpuSample``s, detected last.

Two span mappers stay outside the registry, as explicit steps of the dispatch: client
instrumentations (``mapping.client``: the caller's view of a call to any server, dispatched
first, never a server record) and stage slices (``mapping.base.classify_stage``: children of
any engine's request, dispatched last). Neither belongs to a server.

What each server emits, from its current source:

* TensorRT-LLM: spans (``llm_request``, tracer scope ``trt.llm``, vLLM's ``gen_ai.latency.*``
  names; ``mapping.trtllm``) and metrics (Triton's ``nv_*``, ``trtllm-serve``'s ``trtllm_*``).
* NVIDIA Dynamo's frontend: metrics only (``dynamo_frontend_*``). Its OTLP spans
  (``http-request`` in the frontend, ``handle_payload`` in the workers) carry the trace
  context and ``x_request_id`` but no timing or token count; the engine under each worker
  (vLLM, SGLang, TensorRT-LLM) reports the request in its own spans, mapped as that engine.
* llm-d: the endpoint picker's metrics (``llm_d_epp_*``, the deprecated ``inference_*``) and
  the P/D routing sidecar's spans (``mapping.pd_proxy``: stage fragments of the user's
  request, folded with the decode instance's record by ``collector.assembly``).
* LiteLLM's proxy: spans only (``mapping.gateways``): who a request is for, read by the
  ingestor's attribution mapping (``core.attribution``), never a request of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from infersight.collector.mapping import gateways, genai, pd_proxy, sglang, tgi, trtllm, vllm
from infersight.collector.mapping.base import Mapped, MappingContext, Skipped, StageFragment
from infersight.collector.mapping.spans import SpanView
from infersight.collector.scrape import flavours
from infersight.collector.scrape.exposition import Exposition
from infersight.collector.scrape.flavours import Dialect, EngineLabels
from infersight.core.records import Engine

#: The dialect name a scrape reports when no declared dialect names a series.
UNRECOGNISED: Final = "generic"


class Kind(StrEnum):
    ENGINE = "engine"
    PEER = "peer"
    DEVICE = "device"


@dataclass(frozen=True, slots=True)
class SpanShape:
    """One span shape a server emits: whether a span is of it, and what it becomes."""

    claims: Callable[[SpanView], bool]
    map_span: Callable[[SpanView, MappingContext], Mapped]


@dataclass(frozen=True, slots=True)
class Declaration:
    """Everything the collector reads of one server (see the module docstring)."""

    name: str
    kind: Kind
    engine: Engine | None = None
    spans: tuple[SpanShape, ...] = ()
    dialects: tuple[Dialect, ...] = ()

    def __post_init__(self) -> None:
        # Only an engine's spans become records, so only an engine names a record label.
        if (self.kind is Kind.ENGINE) != (self.engine is not None):
            raise ValueError(f"{self.name}: an engine, and only an engine, names its Engine")


def _without_context(
    map_span: Callable[[SpanView], StageFragment | Skipped],
) -> Callable[[SpanView, MappingContext], Mapped]:
    """A mapper that needs no context (it makes no record), in the shape dispatch calls."""

    def mapped(span: SpanView, _ctx: MappingContext) -> Mapped:
        return map_span(span)

    return mapped


#: Every server, in span precedence order within each kind (peers' spans before engines';
#: ``generic`` last of all, since it claims any span with a GenAI attribute).
REGISTRY: Final = (
    Declaration(
        "dynamo",
        Kind.PEER,
        dialects=(Dialect("dynamo", ("dynamo_frontend_",), flavours.dynamo_fields),),
    ),
    Declaration(
        "llm-d",
        Kind.PEER,
        spans=(SpanShape(pd_proxy.claims, _without_context(pd_proxy.map_span)),),
        dialects=(
            Dialect(
                "llm-d-epp",
                ("llm_d_epp_", "inference_objective_", "inference_pool_"),
                flavours.llm_d_epp_fields,
            ),
        ),
    ),
    Declaration(
        "litellm",
        Kind.PEER,
        # A gateway: who a request is for (``core.attribution``), never a request itself.
        spans=(SpanShape(gateways.litellm_claims, _without_context(gateways.litellm_span)),),
    ),
    Declaration(
        "tgi",
        Kind.ENGINE,
        Engine.TGI,
        spans=(SpanShape(tgi.claims, tgi.map_span),),  # Rust duration strings: unmistakable
        dialects=(Dialect("tgi", ("tgi_",), flavours.tgi_fields),),
    ),
    Declaration(
        "sglang",
        Kind.ENGINE,
        Engine.SGLANG,
        spans=(SpanShape(sglang.claims, sglang.map_span),),  # ``Req …`` roots
        dialects=(
            Dialect(
                "sglang",
                ("sglang:",),
                flavours.sglang_fields,
                engines=EngineLabels("sglang:", "dp_rank", ("tp_rank", "pp_rank", "moe_ep_rank")),
            ),
        ),
    ),
    Declaration(
        "trtllm",
        Kind.ENGINE,
        Engine.TRTLLM,
        spans=(SpanShape(trtllm.claims, trtllm.map_span),),  # before vLLM: the same attributes
        dialects=(
            Dialect(
                "trtllm",
                ("trtllm_", "nv_trt_llm_", "nv_inference_"),
                flavours.trtllm_fields,
                path="/prometheus/metrics",
            ),
        ),
    ),
    Declaration(
        "vllm",
        Kind.ENGINE,
        Engine.VLLM,
        spans=(SpanShape(vllm.claims, vllm.map_span),),
        dialects=(
            Dialect(
                "vllm",
                ("vllm:",),
                flavours.vllm_fields,
                engines=EngineLabels("vllm:", "engine"),
                adapters=flavours.lora_adapters,
            ),
        ),
    ),
    Declaration(
        "generic",
        Kind.ENGINE,
        Engine.GENERIC,
        spans=(SpanShape(genai.claims, genai.map_span),),  # its engine from the provider name
    ),
    Declaration("dcgm", Kind.DEVICE, dialects=(Dialect("dcgm", ("DCGM_FI_",), yields="gpu"),)),
)


def _of(kind: Kind) -> tuple[Declaration, ...]:
    return tuple(d for d in REGISTRY if d.kind is kind)


#: Span shapes in dispatch order: peers', then engines' (``generic`` last).
SPAN_SHAPES: Final = tuple(
    shape for kind in (Kind.PEER, Kind.ENGINE) for d in _of(kind) for shape in d.spans
)
#: ``/metrics`` dialects in detection order: engines', then peers', then devices'.
DIALECTS: Final = tuple(
    dialect
    for kind in (Kind.ENGINE, Kind.PEER, Kind.DEVICE)
    for d in _of(kind)
    for dialect in d.dialects
)
#: Every name the scrape-dialect gauge can carry.
DIALECT_NAMES: Final = (*(d.name for d in DIALECTS), UNRECOGNISED)


def detect(exposition: Exposition) -> Dialect | None:
    """The first dialect (``DIALECTS`` order) one of whose prefixes names a series."""
    names = list(exposition.names())
    return next((d for d in DIALECTS if d.recognises(names)), None)


def declaration_of(engine: Engine) -> Declaration:
    """The declaration whose records carry ``engine``."""
    return next(d for d in REGISTRY if d.engine is engine)
