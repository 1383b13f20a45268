"""Server ``/metrics`` dialects and their translation into infersight's vocabulary.

A ``Dialect`` names the prefixes that recognise it, the function here that reads its series
into a ``ServerSample``'s fields, and the path it is usually served at; each is declared once,
with the engine it belongs to, in ``collector.engines`` (which also detects them). Names are
as the engines' current source defines them, old and new side by side: vLLM (V0 names and
V1's renames, e.g. ``gpu_cache_usage_perc`` → ``kv_cache_usage_perc``;
``prompt_tokens_by_source``, ``num_requests_waiting_by_reason``, ``admission_rejections`` and
the speculative-decoding counters), SGLang (``sglang:*``), TGI (``tgi_*``, counters without
``_total``), Triton / TensorRT-LLM (``nv_inference_*``, ``nv_trt_llm_*``) and ``trtllm-serve``
(``trtllm_*`` at ``/prometheus/metrics``), NVIDIA Dynamo's frontend (``dynamo_frontend_*``),
llm-d's endpoint picker (``llm_d_epp_*``, and the deprecated ``inference_*`` names it still
emits beside them) and dcgm-exporter (``DCGM_FI_*``: percent, MiB, W, mJ), which yields
``GpuSample``s. The sidecar's own ``/metrics`` says which dialect it recognised
(``infersight_collector_scrape_dialect``).

Ratios of counters come from counters wherever the dialect has them (the scraper takes them
over the interval between two scrapes: ``core.samples.with_interval_ratios``); an engine's
own ratio gauge is read only where no counter exists.

Data-parallel engines behind one endpoint are told apart by a label: vLLM V1 labels every
series with ``engine`` (the engine index, ``"0"`` with one engine); SGLang labels its
schedulers' series with ``dp_rank`` when data parallelism is on, and with ``tp_rank`` /
``pp_rank`` / ``moe_ep_rank`` per worker, where workers of one rank may repeat the same
scheduler figures (kept once). SGLang's request and token counters come from its tokenizer
process and carry no ``dp_rank``: they count for the instance only. TGI shards one model with
tensor parallelism behind one router, and Triton labels TensorRT-LLM series by ``model`` and
``version`` only: neither exposes data-parallel engines. With two or more engines the sample
keeps one ``EngineSample`` each, and the instance's figures follow
``core.samples.combine_engines`` (counts summed, ratios averaged, the hottest KV kept).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from infersight.collector.scrape.exposition import Exposition
from infersight.core.errors import InvalidInput
from infersight.core.gpu_slice import mig_slice
from infersight.core.samples import (
    MAX_ACCEPT_LENGTH,
    MAX_ENGINES,
    THROTTLE_REASONS,
    EngineSample,
    GpuSample,
    ServerSample,
    combine_engines,
)

#: NVML clock-event reason bits, in THROTTLE_REASONS order.
THROTTLE_BITS: Final = (0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40, 0x80, 0x100)


def single_model(exposition: Exposition) -> str:
    """The served model's name, when the server serves exactly one."""
    for label in ("model_name", "model"):
        values = exposition.label_values(label)
        if len(values) == 1:
            return values.pop()
    return ""


#: Labels by which a server's own series name its part in disaggregated prefill/decode
#: serving, and what each value means (``Role`` values; a value not listed says nothing).
#: SGLang labels its schedulers' series ``engine_type`` = ``prefill`` | ``decode`` |
#: ``unified`` (from ``--disaggregation-mode``); NVIDIA Dynamo names a worker's type
#: ``worker_type`` = ``prefill`` | ``decode`` | ``aggregated`` (also ``encoder`` and others,
#: which are no part infersight models).
ROLE_LABELS: Final = (
    ("engine_type", {"prefill": "prefill", "decode": "decode", "unified": ""}),
    ("worker_type", {"prefill": "prefill", "decode": "decode", "aggregated": ""}),
)
#: Series whose ``worker_type`` describes the workers a Dynamo frontend or router sends work
#: to (its queue per worker type), not the scraped process itself: never read for its role.
ROLE_FOREIGN_PREFIXES: Final = ("dynamo_frontend_", "dynamo_router_")


@dataclass(frozen=True, slots=True)
class ServerRole:
    """The part a scraped server says it plays: ``role`` a ``Role`` value ("" unified,
    ``prefill``, ``decode``) or ``None`` (it says none, or says two); ``evidence`` the label
    and value(s) read, for logs and ``/healthz``."""

    role: str | None
    evidence: str


def server_role(e: Exposition) -> ServerRole:
    """What the server's own series say its role is (``ROLE_LABELS``); labels on series
    about other workers (``ROLE_FOREIGN_PREFIXES``) are not read. Two different roles on
    one exposition (a misconfigured or shared endpoint) say none."""
    for label, meaning in ROLE_LABELS:
        seen = {
            s.labels[label]
            for name in e.names()
            if not name.startswith(ROLE_FOREIGN_PREFIXES)
            for s in e.samples(name)
            if label in s.labels
        }
        roles = {meaning[v] for v in seen if v in meaning}
        if not roles:
            continue
        evidence = f"{label}=" + "|".join(sorted(v for v in seen if v in meaning))
        return ServerRole(roles.pop() if len(roles) == 1 else None, evidence)
    return ServerRole(None, "")


#: vLLM's LoRA gauge: its labels list the adapters running and waiting, comma-separated.
LORA_INFO: Final = "vllm:lora_requests_info"
_LORA_LISTS: Final = ("running_lora_adapters", "waiting_lora_adapters")


def lora_adapters(exposition: Exposition) -> set[str]:
    """The LoRA adapters a vLLM exposition names as running or waiting (any sample of
    ``vllm:lora_requests_info``: vLLM keeps one per label set it has reported)."""
    out: set[str] = set()
    for sample in exposition.samples(LORA_INFO):
        for label in _LORA_LISTS:
            out.update(n for part in sample.labels.get(label, "").split(",") if (n := part.strip()))
    return out


def _ratio(value: float | None) -> float | None:
    if value is None:
        return None
    return min(1.0, max(0.0, value))


def _sum(*values: float | None) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def vllm_fields(e: Exposition) -> dict[str, float | None]:
    # Counters only for the ratios: hits and queries (``with_interval_ratios``), never the
    # cumulative ``gpu_prefix_cache_hit_rate`` of V0 (its counters do not exist there).
    queries = e.total("vllm:prefix_cache_queries")
    success = "vllm:request_success_total"
    return {
        "requests_running": e.total("vllm:num_requests_running"),
        "requests_waiting": e.total("vllm:num_requests_waiting"),
        "requests_swapped": e.total("vllm:num_requests_swapped"),
        "requests_deferred": e.total("vllm:num_requests_waiting_by_reason", reason="deferred"),
        "kv_cache_usage": _ratio(e.first("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")),
        "prefix_cache_queries_total": queries,
        "prefix_cache_hits_total": e.total("vllm:prefix_cache_hits"),
        "prefix_cache_hit_ratio": None
        if queries is not None
        else _ratio(e.total("vllm:gpu_prefix_cache_hit_rate")),
        "preemptions_total": e.total("vllm:num_preemptions"),
        "prompt_tokens_total": e.total("vllm:prompt_tokens"),
        "generation_tokens_total": e.total("vllm:generation_tokens"),
        "requests_total": e.total(success),
        # ``abort`` (client gone, cancelled) and ``error`` (the engine failed it) both fail
        "request_errors_total": _sum(
            e.total(success, finished_reason="abort"), e.total(success, finished_reason="error")
        ),
        "spec_drafts_total": e.total("vllm:spec_decode_num_drafts"),
        "spec_draft_tokens_total": e.total("vllm:spec_decode_num_draft_tokens"),
        "spec_accepted_tokens_total": e.total("vllm:spec_decode_num_accepted_tokens"),
        "kv_transfer_tokens_total": e.total(
            "vllm:prompt_tokens_by_source", source="external_kv_transfer"
        ),
        "admission_rejections_total": e.total("vllm:admission_rejections"),
    }


def sglang_fields(e: Exposition) -> dict[str, float | None]:
    prompt = e.total("sglang:prompt_tokens_total")
    cached = e.total("sglang:cached_tokens_total")  # every ``cache_source``, summed
    return {
        "requests_running": e.total("sglang:num_running_reqs"),
        "requests_waiting": e.total("sglang:num_queue_reqs"),
        # decode side of a disaggregated pair: requests held while their KV cache arrives
        "requests_deferred": _sum(
            e.total("sglang:num_decode_prealloc_queue_reqs"),
            e.total("sglang:num_decode_transfer_queue_reqs"),
        ),
        "kv_cache_usage": _ratio(e.total("sglang:token_usage")),
        "prefix_cache_queries_total": prompt if cached is not None else None,
        "prefix_cache_hits_total": cached,
        # ``cache_hit_rate`` is the last prefill batch's (decode logging resets it to 0): read
        # only when the counters are missing (older releases).
        "prefix_cache_hit_ratio": None
        if cached is not None
        else _ratio(e.total("sglang:cache_hit_rate")),
        "prompt_tokens_total": prompt,
        "generation_tokens_total": e.total("sglang:generation_tokens_total"),
        "requests_total": e.total("sglang:num_requests_total"),
        "request_errors_total": e.first("sglang:num_aborted_requests_total"),
        # SGLang exposes its speculative decoding as gauges only (the recent batches')
        "spec_acceptance_rate": _ratio(e.total("sglang:spec_accept_rate")),
        "spec_accept_length": _at_least_one(e.total("sglang:spec_accept_length")),
    }


def _at_least_one(value: float | None) -> float | None:
    """A mean acceptance length; 0 means no speculative step ran (absent)."""
    if value is None or value < 1.0:
        return None
    return min(value, MAX_ACCEPT_LENGTH)


def tgi_fields(e: Exposition) -> dict[str, float | None]:
    return {
        "requests_running": e.total("tgi_batch_current_size"),
        "requests_waiting": e.total("tgi_queue_size"),
        "prompt_tokens_total": e.total("tgi_request_input_length_sum"),
        "generation_tokens_total": e.total("tgi_request_generated_tokens_sum"),
        "requests_total": e.total("tgi_request_count"),
        "request_errors_total": e.total("tgi_request_failure"),
    }


def trtllm_fields(e: Exposition) -> dict[str, float | None]:
    """Triton's TensorRT-LLM backend (``nv_*``) and ``trtllm-serve``'s own exposition
    (``trtllm_*``, served at ``/prometheus/metrics`` when perf metrics are on)."""
    if any(name.startswith("trtllm_") for name in e.names()):
        return trtllm_serve_fields(e)
    success, failure = (
        e.total("nv_inference_request_success"),
        e.total("nv_inference_request_failure"),
    )
    used = e.total("nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="used")
    maximum = e.total("nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="max")
    return {
        "requests_running": e.total("nv_trt_llm_request_metrics", request_type="active"),
        "requests_waiting": e.total("nv_inference_pending_request_count"),
        "kv_cache_usage": _ratio(used / maximum) if used is not None and maximum else None,
        "requests_total": None if success is None else success + (failure or 0.0),
        "request_errors_total": failure,
    }


def trtllm_serve_fields(e: Exposition) -> dict[str, float | None]:
    prompt = e.total("trtllm_prompt_tokens")
    cached = e.total("trtllm_prompt_cached_tokens")
    success = e.total("trtllm_request_success")
    errors = e.total("trtllm_request_error")
    return {
        "requests_running": e.total("trtllm_num_requests_running"),
        "requests_waiting": e.total("trtllm_num_requests_waiting"),
        "kv_cache_usage": _ratio(e.total("trtllm_kv_cache_utilization")),
        "prefix_cache_queries_total": prompt if cached is not None else None,
        "prefix_cache_hits_total": cached,
        "prefix_cache_hit_ratio": None
        if cached is not None
        else _ratio(e.total("trtllm_kv_cache_hit_rate")),
        "prompt_tokens_total": prompt,
        "generation_tokens_total": e.total("trtllm_generation_tokens"),
        "requests_total": _sum(success, errors),
        "request_errors_total": errors,
        "spec_draft_tokens_total": e.total("trtllm_spec_decode_num_draft_tokens"),
        "spec_accepted_tokens_total": e.total("trtllm_spec_decode_num_accepted_tokens"),
        "spec_accept_length": _at_least_one(e.total("trtllm_spec_decode_acceptance_length")),
    }


def dynamo_fields(e: Exposition) -> dict[str, float | None]:
    """NVIDIA Dynamo's frontend: the requests as its users sent them, before any worker."""
    total = e.total("dynamo_frontend_requests")
    return {
        "requests_running": e.total("dynamo_frontend_inflight_requests"),
        "requests_waiting": e.total("dynamo_frontend_queued_requests"),
        "generation_tokens_total": e.total("dynamo_frontend_output_tokens"),
        "requests_total": total,
        "request_errors_total": None
        if total is None
        else (e.total("dynamo_frontend_requests", status="error") or 0.0),
    }


def llm_d_epp_fields(e: Exposition) -> dict[str, float | None]:
    """llm-d's endpoint picker (the scheduler in front of a pool): its ``llm_d_epp_*`` names,
    else the ``inference_*`` names it still emits beside them (deprecated in 2026)."""
    total = e.first("llm_d_epp_request_total", "inference_objective_request_total")
    return {
        "requests_running": e.first(
            "llm_d_epp_request_running", "inference_objective_running_requests"
        ),
        "requests_waiting": e.first(
            "llm_d_epp_flow_control_queue_size",
            "llm_d_epp_average_queue_size",
            "inference_pool_average_queue_size",
        ),
        "kv_cache_usage": _ratio(
            e.first(
                "llm_d_epp_average_kv_cache_utilization",
                "inference_pool_average_kv_cache_utilization",
            )
        ),
        "requests_total": total,
        "request_errors_total": e.first(
            "llm_d_epp_request_error_total", "inference_objective_request_error_total"
        ),
    }


@dataclass(frozen=True, slots=True)
class EngineLabels:
    """How a dialect labels its data-parallel engines."""

    prefix: str
    rank: str
    replicas: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Dialect:
    """One server's ``/metrics`` dialect: the series prefixes that recognise it, what it
    yields (``server``: a ``ServerSample`` through ``extract``; ``gpu``: ``GpuSample``s), how
    it labels data-parallel engines (``engines``; ``None``: it exposes none), how it names
    the LoRA adapters it serves (``adapters``; ``None``: it does not), and the path it is
    served at. Dialects are declared in ``collector.engines``, each with its engine."""

    name: str
    prefixes: tuple[str, ...]
    extract: Callable[[Exposition], dict[str, float | None]] | None = None
    path: str = "/metrics"
    yields: str = "server"
    engines: EngineLabels | None = None
    adapters: Callable[[Exposition], set[str]] | None = None

    @property
    def yields_gpus(self) -> bool:
        """Whether its exposition describes GPUs (dcgm-exporter), not a server."""
        return self.yields == "gpu"

    def recognises(self, names: Sequence[str]) -> bool:
        return any(name.startswith(self.prefixes) for name in names)


def _rank_order(rank: str) -> tuple[int, str]:
    return (int(rank), "") if rank.isdigit() else (1 << 62, rank)


def engine_samples(e: Exposition, dialect: Dialect) -> tuple[EngineSample, ...]:
    """One sample per data-parallel engine, when the server runs two or more."""
    if dialect.engines is None or dialect.extract is None:
        return ()
    labels, extract = dialect.engines, dialect.extract
    parts = e.split(labels.rank, labels.prefix)
    if len(parts) < 2:
        return ()
    return tuple(
        EngineSample(rank=rank, **extract(parts[rank])) for rank in sorted(parts, key=_rank_order)
    )


def server_sample(
    e: Exposition, dialect: Dialect, ts: datetime, instance: str
) -> ServerSample | None:
    if dialect.extract is None:
        return None
    extract = dialect.extract
    if dialect.engines is not None:
        e = e.without_replicas(*dialect.engines.replicas)
    engines = engine_samples(e, dialect)
    figures = combine_engines(engines, extract(e))
    return ServerSample(
        ts=ts,
        instance=instance,
        engine=dialect.name,
        model=single_model(e),
        # Beyond MAX_ENGINES only the instance's figures are kept (bounded rows per scrape).
        per_engine=engines if len(engines) <= MAX_ENGINES else (),
        **figures,
    )


def throttle_flags(mask: int) -> tuple[str, ...]:
    return tuple(
        name for name, bit in zip(THROTTLE_REASONS, THROTTLE_BITS, strict=True) if mask & bit
    )


def gpu_samples(e: Exposition, ts: datetime, instance: str) -> list[GpuSample]:
    """One sample per ``gpu`` label value of a dcgm-exporter body, and per MIG slice of it
    (``GPU_I_ID``): a slice is sampled as GPU index ``100 + 16 × gpu + GPU_I_ID``."""
    gpus = sorted(
        {
            (s.labels["gpu"], s.labels.get("GPU_I_ID", ""))
            for name in e.names()
            for s in e.samples(name)
            if "gpu" in s.labels
        }
    )
    out: list[GpuSample] = []
    for gpu, gi in gpus:

        def value(name: str, gpu: str = gpu, gi: str = gi) -> float | None:
            if gi:
                return e.total(name, gpu=gpu, GPU_I_ID=gi)
            return e.total(name, gpu=gpu)

        def percent(name: str) -> float | None:
            v = value(name)
            return None if v is None else _ratio(v / 100.0)

        used, free = value("DCGM_FI_DEV_FB_USED"), value("DCGM_FI_DEV_FB_FREE")
        energy = value("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
        mask = value("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS") or value(
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
        )
        xid = value("DCGM_FI_DEV_XID_ERRORS")
        labels = next(
            (
                s.labels
                for s in e.samples("DCGM_FI_DEV_GPU_UTIL")
                if s.labels.get("gpu") == gpu and s.labels.get("GPU_I_ID", "") == gi
            ),
            {},
        )
        # A MIG slice (dcgm-exporter's GPU_I_ID / GPU_I_PROFILE labels; issue 34).
        profile = labels.get("GPU_I_PROFILE", "") if gi else ""
        try:
            out.append(
                GpuSample(
                    ts=ts,
                    instance=instance,
                    gpu_index=100 + 16 * int(gpu) + int(gi) if profile else int(gpu),
                    uuid=labels.get("UUID", ""),
                    name=labels.get("modelName", ""),
                    util_gpu=percent("DCGM_FI_DEV_GPU_UTIL"),
                    util_memory=percent("DCGM_FI_DEV_MEM_COPY_UTIL"),
                    memory_used_bytes=None if used is None else used * 2**20,
                    memory_total_bytes=None
                    if used is None or free is None
                    else (used + free) * 2**20,
                    power_w=value("DCGM_FI_DEV_POWER_USAGE"),
                    energy_j=None if energy is None else energy / 1000.0,
                    temperature_c=value("DCGM_FI_DEV_GPU_TEMP"),
                    sm_clock_mhz=value("DCGM_FI_DEV_SM_CLOCK"),
                    memory_clock_mhz=value("DCGM_FI_DEV_MEM_CLOCK"),
                    throttle_reasons=throttle_flags(int(mask)) if mask is not None else (),
                    xid_last=int(xid) if xid else None,
                    sm_occupancy=_ratio(value("DCGM_FI_PROF_SM_OCCUPANCY")),
                    dram_bw_util=_ratio(value("DCGM_FI_PROF_DRAM_ACTIVE")),
                    tensor_util=_ratio(value("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")),
                    gpu_slice=mig_slice(profile, labels.get("modelName", "")).text
                    if profile
                    else "",
                    parent_uuid=labels.get("UUID", "") if profile else "",
                    gpu_instance_id=int(gi) if profile else None,
                )
            )
        except (InvalidInput, ValueError):
            continue
    return out
