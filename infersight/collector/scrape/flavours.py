"""Engine flavours of ``/metrics`` and their translation into infersight's vocabulary.

Names are as the engines document them: vLLM (V0 names and V1's renames, e.g.
``gpu_cache_usage_perc`` → ``kv_cache_usage_perc``), SGLang (``sglang:*``), TGI (``tgi_*``,
counters without ``_total``), Triton / TensorRT-LLM (``nv_inference_*``, ``nv_trt_llm_*``;
durations are cumulative µs counters, not needed by a ``ServerSample``) and dcgm-exporter
(``DCGM_FI_*``: percent, MiB, W, mJ), which yields ``GpuSample``s.

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

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from infersight.collector.scrape.exposition import Exposition
from infersight.core.errors import InvalidRecord
from infersight.core.samples import (
    MAX_ENGINES,
    THROTTLE_REASONS,
    EngineSample,
    GpuSample,
    ServerSample,
    combine_engines,
)

#: NVML clock-event reason bits, in THROTTLE_REASONS order.
THROTTLE_BITS: Final = (0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40, 0x80, 0x100)


def detect(exposition: Exposition) -> str:
    names = list(exposition.names())

    def has(prefix: str) -> bool:
        return any(name.startswith(prefix) for name in names)

    for prefix, flavour in (
        ("vllm:", "vllm"),
        ("sglang:", "sglang"),
        ("tgi_", "tgi"),
        ("nv_trt_llm_", "trtllm"),
        ("nv_inference_", "trtllm"),
        ("DCGM_FI_", "dcgm"),
    ):
        if has(prefix):
            return flavour
    return "generic"


def single_model(exposition: Exposition) -> str:
    """The served model's name, when the server serves exactly one."""
    for label in ("model_name", "model"):
        values = exposition.label_values(label)
        if len(values) == 1:
            return values.pop()
    return ""


def _ratio(value: float | None) -> float | None:
    if value is None:
        return None
    return min(1.0, max(0.0, value))


def _vllm(e: Exposition) -> dict[str, float | None]:
    hits, queries = e.total("vllm:prefix_cache_hits"), e.total("vllm:prefix_cache_queries")
    hit_ratio = hits / queries if hits is not None and queries else None
    return {
        "requests_running": e.total("vllm:num_requests_running"),
        "requests_waiting": e.total("vllm:num_requests_waiting"),
        "requests_swapped": e.total("vllm:num_requests_swapped"),
        "kv_cache_usage": _ratio(e.first("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")),
        "prefix_cache_hit_ratio": _ratio(
            hit_ratio if hit_ratio is not None else e.total("vllm:gpu_prefix_cache_hit_rate")
        ),
        "preemptions_total": e.total("vllm:num_preemptions_total"),
        "prompt_tokens_total": e.total("vllm:prompt_tokens_total"),
        "generation_tokens_total": e.total("vllm:generation_tokens_total"),
        "requests_total": e.total("vllm:request_success_total"),
        "request_errors_total": e.total("vllm:request_success_total", finished_reason="abort"),
    }


def _sglang(e: Exposition) -> dict[str, float | None]:
    return {
        "requests_running": e.total("sglang:num_running_reqs"),
        "requests_waiting": e.total("sglang:num_queue_reqs"),
        "kv_cache_usage": _ratio(e.total("sglang:token_usage")),
        "prefix_cache_hit_ratio": _ratio(e.total("sglang:cache_hit_rate")),
        "prompt_tokens_total": e.total("sglang:prompt_tokens_total"),
        "generation_tokens_total": e.total("sglang:generation_tokens_total"),
        "requests_total": e.total("sglang:num_requests_total"),
        "request_errors_total": e.first("sglang:num_aborted_requests_total"),
    }


def _tgi(e: Exposition) -> dict[str, float | None]:
    return {
        "requests_running": e.total("tgi_batch_current_size"),
        "requests_waiting": e.total("tgi_queue_size"),
        "prompt_tokens_total": e.total("tgi_request_input_length_sum"),
        "generation_tokens_total": e.total("tgi_request_generated_tokens_sum"),
        "requests_total": e.total("tgi_request_count"),
        "request_errors_total": e.total("tgi_request_failure"),
    }


def _trtllm(e: Exposition) -> dict[str, float | None]:
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


_SERVER: Final[dict[str, Callable[[Exposition], dict[str, float | None]]]] = {
    "vllm": _vllm,
    "sglang": _sglang,
    "tgi": _tgi,
    "trtllm": _trtllm,
}


@dataclass(frozen=True, slots=True)
class EngineLabels:
    """How a flavour labels its data-parallel engines."""

    prefix: str
    rank: str
    replicas: tuple[str, ...] = ()


ENGINE_LABELS: Final = {
    "vllm": EngineLabels("vllm:", "engine"),
    "sglang": EngineLabels("sglang:", "dp_rank", ("tp_rank", "pp_rank", "moe_ep_rank")),
}


def _rank_order(rank: str) -> tuple[int, str]:
    return (int(rank), "") if rank.isdigit() else (1 << 62, rank)


def engine_samples(e: Exposition, flavour: str) -> tuple[EngineSample, ...]:
    """One sample per data-parallel engine, when the server runs two or more."""
    labels = ENGINE_LABELS.get(flavour)
    if labels is None:
        return ()
    parts = e.split(labels.rank, labels.prefix)
    if len(parts) < 2:
        return ()
    extract = _SERVER[flavour]
    return tuple(
        EngineSample(rank=rank, **extract(parts[rank])) for rank in sorted(parts, key=_rank_order)
    )


def server_sample(e: Exposition, flavour: str, ts: datetime, instance: str) -> ServerSample | None:
    extract = _SERVER.get(flavour)
    if extract is None:
        return None
    labels = ENGINE_LABELS.get(flavour)
    if labels is not None:
        e = e.without_replicas(*labels.replicas)
    engines = engine_samples(e, flavour)
    figures = combine_engines(engines, extract(e))
    return ServerSample(
        ts=ts,
        instance=instance,
        engine=flavour,
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
    """One sample per ``gpu`` label value of a dcgm-exporter body."""
    gpus = sorted(
        {s.labels["gpu"] for name in e.names() for s in e.samples(name) if "gpu" in s.labels}
    )
    out: list[GpuSample] = []
    for gpu in gpus:

        def value(name: str, gpu: str = gpu) -> float | None:
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
            (s.labels for s in e.samples("DCGM_FI_DEV_GPU_UTIL") if s.labels.get("gpu") == gpu), {}
        )
        try:
            out.append(
                GpuSample(
                    ts=ts,
                    instance=instance,
                    gpu_index=int(gpu),
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
                )
            )
        except (InvalidRecord, ValueError):
            continue
    return out
