"""What a simulated server emits: finished requests (with the span-only timings) and samples.

A ``Completion`` wraps the normalised ``RequestRecord`` together with what only the OTLP span
carries (request id, sampling parameters, scheduler / forward / execute time, the tokenizer's
own service time, the caller's span when it propagated its trace context). A ``Batch`` is
what the fleet hands to its sinks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from infersight.core.records import RequestRecord
from infersight.core.samples import GpuSample, ServerSample


@dataclass(frozen=True, slots=True)
class ProxyLegs:
    """A disaggregated request's proxy spans (llm-d's routing sidecar) and the decode
    instance's own record. Times are seconds from the proxy's arrival (the user's record's
    ``start``); span ids are hex."""

    engine: RequestRecord
    prefill_target: str
    connector: str
    route_s: float
    prefill_leg_s: float
    decode_from_s: float
    decode_leg_s: float
    total_s: float
    request_span: str
    prefill_span: str
    decode_span: str


@dataclass(frozen=True, slots=True)
class Completion:
    record: RequestRecord
    request_id: str
    max_tokens: int
    temperature: float
    top_p: float
    tokenize_s: float
    scheduler_s: float
    forward_s: float
    execute_s: float
    preemptions: int = 0
    #: The data-parallel engine of the instance that served it.
    engine: int = 0
    #: The caller's span (from its ``traceparent``) that the request span is a child of.
    parent_span_id: str = ""
    #: A disaggregated request's decode side: ``record`` is then the user's request (what
    #: the user felt, the P/D stages: what infersight should store), ``pd`` the proxy's legs
    #: and the decode instance's own record. A prefill leg's ``record`` has
    #: ``role=Role.PREFILL`` (a part, not a request).
    pd: ProxyLegs | None = None
    #: Parallel sampling (``n`` > 1): each sequence's own record (its own ``llm_request``
    #: span, all with ``request_id``); ``record`` is then the user's one request, folded from
    #: them as ``collector.assembly`` folds their spans.
    sequences: tuple[RequestRecord, ...] = ()

    @property
    def served(self) -> RequestRecord:
        """The record of the engine that served it (its own ``llm_request`` span)."""
        return self.pd.engine if self.pd is not None else self.record


@dataclass(frozen=True, slots=True)
class LoraState:
    """What vLLM's ``vllm:lora_requests_info`` says at a sample time: the adapters of the
    running and of the waiting requests, and ``--max-loras``."""

    running: tuple[str, ...]
    waiting: tuple[str, ...]
    max_lora: int


@dataclass(frozen=True, slots=True)
class EngineSample:
    """One data-parallel engine's own reading (``engine="0"`` in vLLM, ``dp_rank`` in SGLang).

    ``sample`` holds that engine's gauges and counters only; the instance's ``ServerSample``
    in ``Batch.server_samples`` aggregates its engines (see ``simulator.fleet``).
    """

    index: int
    sample: ServerSample
    #: An engine serving LoRA adapters: its adapters at the sample time.
    lora: LoraState | None = None


@dataclass(frozen=True, slots=True)
class Batch:
    """Output of a stretch of virtual time, in time order within each list."""

    completions: tuple[Completion, ...] = ()
    server_samples: tuple[ServerSample, ...] = ()
    gpu_samples: tuple[GpuSample, ...] = ()
    #: Per-engine readings behind ``server_samples`` (one per engine per sample time).
    engine_samples: tuple[EngineSample, ...] = ()
    meta: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.completions) + len(self.server_samples) + len(self.gpu_samples)
