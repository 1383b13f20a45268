"""vLLM-style and dcgm-exporter-style ``/metrics`` for simulated servers (prometheus_client).

Each instance gets two ``CollectorRegistry``s of its own: the server's (vLLM V1 names, labels
``model_name`` and ``engine`` — one series per data-parallel engine —, vLLM's default
buckets; or SGLang's, with ``dp_rank``) and its GPUs' (dcgm-exporter field names with labels
``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname``; power in W, frame buffer in MiB,
energy in mJ). Histograms are kept as bucket counts so that a request's
``n − 1`` inter-token latencies are added in one go; custom collectors expose them.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from infersight.core.errors import InvalidInput
from infersight.core.samples import THROTTLE_REASONS, GpuSample, ServerSample
from infersight.simulator.events import Batch, Completion, LoraState
from infersight.simulator.profiles import MIB

# What other modules use (and the types its answers carry); the tuning constants and
# helpers left out are this module's own.
__all__ = [
    "ITL_BUCKETS_V1",
    "TTFT_BUCKETS_V1",
    "DcgmCollector",
    "Hist",
    "MetricsServer",
    "MetricsSink",
    "SglangCollector",
    "VllmCollector",
    "throttle_bitmask",
]

#: vLLM V1's default buckets (vllm/v1/metrics/loggers.py).
TTFT_BUCKETS: Final = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75)
TTFT_BUCKETS_ALL: Final = (*TTFT_BUCKETS, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0)
TTFT_BUCKETS_V1: Final = (*TTFT_BUCKETS_ALL, 640.0, 2560.0)
ITL_BUCKETS: Final = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0)
ITL_BUCKETS_V1: Final = (*ITL_BUCKETS, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS: Final = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0)
REQUEST_LATENCY_BUCKETS_V1: Final = (
    *REQUEST_LATENCY_BUCKETS,
    *(30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0),
)


class Hist:
    """Cumulative-bucket histogram state that accepts weighted observations."""

    __slots__ = ("bounds", "counts", "total", "weight")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0
        self.weight = 0

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += times
        self.total += value * times
        self.weight += times

    def buckets(self) -> list[tuple[str, float]]:
        out, running = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), float(running)))
        return out


_HISTOGRAMS: Final = {
    "vllm:time_to_first_token_seconds": (
        "Histogram of time to first token in seconds.",
        TTFT_BUCKETS_V1,
    ),
    "vllm:inter_token_latency_seconds": (
        "Histogram of inter-token latency in seconds.",
        ITL_BUCKETS_V1,
    ),
    "vllm:request_time_per_output_token_seconds": (
        "Histogram of time_per_output_token_seconds per request.",
        ITL_BUCKETS_V1,
    ),
    "vllm:e2e_request_latency_seconds": (
        "Histogram of e2e request latency in seconds.",
        REQUEST_LATENCY_BUCKETS_V1,
    ),
    "vllm:request_queue_time_seconds": (
        "Histogram of time spent in WAITING phase for request.",
        REQUEST_LATENCY_BUCKETS_V1,
    ),
    "vllm:request_prefill_time_seconds": (
        "Histogram of time spent in PREFILL phase for request.",
        REQUEST_LATENCY_BUCKETS_V1,
    ),
    "vllm:request_decode_time_seconds": (
        "Histogram of time spent in DECODE phase for request.",
        REQUEST_LATENCY_BUCKETS_V1,
    ),
    "vllm:request_inference_time_seconds": (
        "Histogram of time spent in RUNNING phase for request.",
        REQUEST_LATENCY_BUCKETS_V1,
    ),
}


class _EngineState:
    """One engine's series: histograms, finish reasons, gauges and counters."""

    __slots__ = ("counters", "gauges", "hists", "pd", "spec", "success")

    def __init__(self) -> None:
        self.hists = {name: Hist(bounds) for name, (_, bounds) in _HISTOGRAMS.items()}
        # vLLM creates a series for every finish reason up front
        self.success: dict[str, float] = dict.fromkeys(
            ("stop", "length", "abort", "error", "repetition"), 0.0
        )
        self.gauges = {"running": 0.0, "waiting": 0.0, "kv": 0.0}
        self.counters = {"preemptions": 0.0, "prompt": 0.0, "generation": 0.0}
        #: Speculative-decoding counters, only on an engine that speculates.
        self.spec: dict[str, float] = {}
        #: A disaggregated decode engine's deferred requests and transferred prompt tokens.
        self.pd: dict[str, float] = {}


_GAUGES: Final = (
    ("vllm:num_requests_running", "running", "Number of requests in model execution batches."),
    ("vllm:num_requests_waiting", "waiting", "Number of requests waiting to be processed."),
    ("vllm:kv_cache_usage_perc", "kv", "KV-cache usage. 1 means 100 percent usage."),
)
_COUNTERS: Final = (
    ("vllm:num_preemptions", "preemptions", "Cumulative number of preemption from the engine."),
    ("vllm:prompt_tokens", "prompt", "Number of prefill tokens processed."),
    ("vllm:generation_tokens", "generation", "Number of generation tokens processed."),
)
#: vLLM V1's speculative-decoding counters (vllm/v1/spec_decode/metrics.py) ← sample fields.
_SPEC_COUNTERS: Final = (
    ("vllm:spec_decode_num_drafts", "spec_drafts_total", "Number of spec decoding drafts."),
    ("vllm:spec_decode_num_draft_tokens", "spec_draft_tokens_total", "Number of draft tokens."),
    (
        "vllm:spec_decode_num_accepted_tokens",
        "spec_accepted_tokens_total",
        "Number of accepted tokens.",
    ),
)


class VllmCollector(Collector):
    """The server's own metrics, as vLLM V1 exposes them: every series labelled with
    ``model_name`` and ``engine`` (``"0"`` … ``"N-1"`` for N data-parallel engines, each with
    its own KV usage, queues, counters and histograms)."""

    def __init__(self, model_name: str, histograms: bool = True) -> None:
        self._model = model_name
        self._histograms = histograms
        self._lock = threading.Lock()
        self._engines: dict[int, _EngineState] = {0: _EngineState()}
        #: ``vllm:lora_requests_info``: every label set reported so far and when (vLLM sets
        #: the gauge of the current set to the current time; the older sets stay).
        self._lora: dict[tuple[str, str, str], float] = {}

    def _engine(self, index: int) -> _EngineState:
        if index not in self._engines:
            self._engines[index] = _EngineState()
        return self._engines[index]

    def observe(self, c: Completion) -> None:
        r = c.served
        with self._lock:
            state = self._engine(c.engine)
            reason = r.finish_reason or "stop"
            state.success[reason] = state.success.get(reason, 0.0) + 1
            if r.ttft_s is None:
                return
            h = state.hists
            h["vllm:time_to_first_token_seconds"].observe(r.ttft_s)
            if r.tpot_s is not None and r.output_tokens:
                h["vllm:inter_token_latency_seconds"].observe(r.tpot_s, r.output_tokens - 1)
                h["vllm:request_time_per_output_token_seconds"].observe(r.tpot_s)
            for name, value in (
                ("vllm:e2e_request_latency_seconds", r.e2e_s),
                ("vllm:request_queue_time_seconds", r.queue_s),
                ("vllm:request_prefill_time_seconds", r.prefill_s),
                ("vllm:request_decode_time_seconds", r.decode_s),
                ("vllm:request_inference_time_seconds", (r.prefill_s or 0) + (r.decode_s or 0)),
            ):
                if value is not None:
                    h[name].observe(value)

    def update(self, s: ServerSample, engine: int = 0, lora: LoraState | None = None) -> None:
        """``s`` is engine ``engine``'s own reading; ``lora``: its adapters then."""
        with self._lock:
            if lora is not None:
                key = (str(lora.max_lora), ",".join(lora.waiting), ",".join(lora.running))
                self._lora[key] = s.ts.timestamp()
            state = self._engine(engine)
            state.gauges = {
                "running": s.requests_running or 0.0,
                "waiting": s.requests_waiting or 0.0,
                "kv": s.kv_cache_usage or 0.0,
            }
            state.counters = {
                "preemptions": s.preemptions_total or 0.0,
                "prompt": s.prompt_tokens_total or 0.0,
                "generation": s.generation_tokens_total or 0.0,
            }
            state.spec = {
                field: value
                for _, field, _ in _SPEC_COUNTERS
                if (value := getattr(s, field)) is not None
            }
            if s.requests_deferred is not None:
                state.pd = {
                    "deferred": s.requests_deferred,
                    "transferred": s.kv_transfer_tokens_total or 0.0,
                }

    def collect(self) -> Iterator[Metric]:
        names = ["model_name", "engine"]
        with self._lock:
            engines = [([self._model, str(i)], self._engines[i]) for i in sorted(self._engines)]
            for name, key, doc in _GAUGES:
                g = GaugeMetricFamily(name, doc, labels=names)
                for values, state in engines:
                    g.add_metric(values, state.gauges[key])
                yield g
            for name, key, doc in _COUNTERS:
                c = CounterMetricFamily(name, doc, labels=names)
                for values, state in engines:
                    c.add_metric(values, state.counters[key])
                yield c
            for name, key, doc in _SPEC_COUNTERS:
                speculating = [(values, state) for values, state in engines if state.spec]
                if speculating:
                    c = CounterMetricFamily(name, doc, labels=names)
                    for values, state in speculating:
                        c.add_metric(values, state.spec[key])
                    yield c
            yield from _pd_families(engines, names)
            yield from _lora_family(self._lora)
            success = CounterMetricFamily(
                "vllm:request_success",
                "Count of successfully processed requests.",
                labels=[*names, "finished_reason"],
            )
            for values, state in engines:
                for reason, count in sorted(state.success.items()):
                    success.add_metric([*values, reason], count)
            yield success
            for name, (doc, _) in _HISTOGRAMS.items() if self._histograms else ():
                family = HistogramMetricFamily(name, doc, labels=names)
                for values, state in engines:
                    hist = state.hists[name]
                    family.add_metric(values, hist.buckets(), hist.total)
                yield family


def _lora_family(reported: dict[tuple[str, str, str], float]) -> Iterator[Metric]:
    """vLLM's ``vllm:lora_requests_info``: one series per label set reported (``max_lora``,
    the waiting and the running adapters, comma-separated), its value when it was last the
    current one (a Unix time); no ``model_name`` label. Only on a server with LoRA on."""
    if not reported:
        return
    info = GaugeMetricFamily(
        "vllm:lora_requests_info",
        "Running stats on lora requests.",
        labels=["max_lora", "waiting_lora_adapters", "running_lora_adapters"],
    )
    for key, at in reported.items():
        info.add_metric(list(key), at)
    yield info


def _pd_families(
    engines: list[tuple[list[str], _EngineState]], names: list[str]
) -> Iterator[Metric]:
    """vLLM's waiting requests by reason (``deferred``: held for their KV cache from a
    prefill instance; ``capacity``: the rest) and prompt tokens by source
    (``external_kv_transfer``: the transferred prompt; ``local_compute``: the rest), on a
    disaggregated decode engine."""
    pd = [(values, state) for values, state in engines if state.pd]
    if not pd:
        return
    waiting = GaugeMetricFamily(
        "vllm:num_requests_waiting_by_reason",
        "Number of requests waiting, by the reason they wait.",
        labels=[*names, "reason"],
    )
    source = CounterMetricFamily(
        "vllm:prompt_tokens_by_source",
        "Number of prompt tokens, by where their KV cache came from.",
        labels=[*names, "source"],
    )
    for values, state in pd:
        deferred, transferred = state.pd["deferred"], state.pd["transferred"]
        waiting.add_metric([*values, "capacity"], max(0.0, state.gauges["waiting"] - deferred))
        waiting.add_metric([*values, "deferred"], deferred)
        local = max(0.0, state.counters["prompt"] - transferred)
        source.add_metric([*values, "local_compute"], local)
        source.add_metric([*values, "local_cache_hit"], 0.0)
        source.add_metric([*values, "external_kv_transfer"], transferred)
    yield waiting
    yield source


_SGLANG_GAUGES: Final = (
    ("sglang:num_running_reqs", "running", "The number of running requests."),
    ("sglang:num_queue_reqs", "waiting", "The number of requests in the waiting queue."),
    ("sglang:token_usage", "kv", "The token usage."),
    ("sglang:cache_hit_rate", "hit", "The prefix cache hit rate."),
)
_SGLANG_COUNTERS: Final = (
    ("sglang:prompt_tokens", "prompt", "Number of prefill tokens processed."),
    ("sglang:generation_tokens", "generation", "Number of generation tokens processed."),
    ("sglang:num_requests", "requests", "The number of processed requests."),
)
_SGLANG_HISTOGRAMS: Final = {
    "sglang:time_to_first_token_seconds": ("Histogram of time to first token in seconds.", "ttft"),
    "sglang:e2e_request_latency_seconds": ("Histogram of End-to-end request latency.", "e2e"),
}


class SglangCollector(Collector):
    """The server's metrics as SGLang exposes them: labels ``model_name``, ``tp_rank`` and,
    per data-parallel rank, ``dp_rank`` (each rank its own scheduler, queue and KV pool)."""

    def __init__(self, model_name: str, histograms: bool = True) -> None:
        self._model = model_name
        self._histograms = histograms
        self._lock = threading.Lock()
        self._ranks: dict[int, dict[str, float]] = {}
        self._hists: dict[int, dict[str, Hist]] = {}

    def _rank(self, index: int) -> tuple[dict[str, float], dict[str, Hist]]:
        if index not in self._ranks:
            self._ranks[index] = dict.fromkeys(
                ("running", "waiting", "kv", "hit", "prompt", "generation", "requests"), 0.0
            )
            self._hists[index] = {
                "ttft": Hist(TTFT_BUCKETS_ALL),
                "e2e": Hist(REQUEST_LATENCY_BUCKETS_V1),
            }
        return self._ranks[index], self._hists[index]

    def observe(self, c: Completion) -> None:
        r = c.served
        with self._lock:
            values, hists = self._rank(c.engine)
            values["requests"] += 1
            if r.ttft_s is not None:
                hists["ttft"].observe(r.ttft_s)
            if r.e2e_s is not None:
                hists["e2e"].observe(r.e2e_s)

    def update(self, s: ServerSample, engine: int = 0, lora: LoraState | None = None) -> None:
        with self._lock:
            values, _ = self._rank(engine)
            values["running"] = s.requests_running or 0.0
            values["waiting"] = s.requests_waiting or 0.0
            values["kv"] = s.kv_cache_usage or 0.0
            values["hit"] = s.prefix_cache_hit_ratio or 0.0
            values["prompt"] = s.prompt_tokens_total or 0.0
            values["generation"] = s.generation_tokens_total or 0.0

    def collect(self) -> Iterator[Metric]:
        names = ["model_name", "tp_rank", "dp_rank"]
        with self._lock:
            ranks = [([self._model, "0", str(i)], i) for i in sorted(self._ranks)]
            for name, key, doc in _SGLANG_GAUGES:
                g = GaugeMetricFamily(name, doc, labels=names)
                for labels, i in ranks:
                    g.add_metric(labels, self._ranks[i][key])
                yield g
            for name, key, doc in _SGLANG_COUNTERS:
                c = CounterMetricFamily(name, doc, labels=names)
                for labels, i in ranks:
                    c.add_metric(labels, self._ranks[i][key])
                yield c
            for name, (doc, key) in _SGLANG_HISTOGRAMS.items() if self._histograms else ():
                family = HistogramMetricFamily(name, doc, labels=names)
                for labels, i in ranks:
                    hist = self._hists[i][key]
                    family.add_metric(labels, hist.buckets(), hist.total)
                yield family


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    doc: str


DCGM_FIELDS: Final = (
    _Field("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    _Field("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %)."),
    _Field("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    _Field("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    _Field("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
    _Field("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ)."),
    _Field("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz)."),
    _Field("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz)."),
    _Field("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."),
    _Field("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Current clock throttle reasons (bitmask)."),
    _Field("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors."),
    _Field("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors."),
    _Field("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered."),
    _Field("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active."),
    _Field("DCGM_FI_PROF_SM_OCCUPANCY", "The ratio of number of warps resident on an SM."),
    _Field("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active."),
    _Field("DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active."),
)


def throttle_bitmask(reasons: Sequence[str]) -> int:
    """NVML's clocks-event reason flags (``THROTTLE_REASONS`` is in bit order)."""
    return sum(1 << THROTTLE_REASONS.index(r) for r in reasons)


def dcgm_values(s: GpuSample) -> dict[str, float]:
    used = (s.memory_used_bytes or 0.0) / MIB
    total = (s.memory_total_bytes or 0.0) / MIB
    return {
        "DCGM_FI_DEV_GPU_UTIL": round((s.util_gpu or 0.0) * 100),
        "DCGM_FI_DEV_MEM_COPY_UTIL": round((s.util_memory or 0.0) * 100),
        "DCGM_FI_DEV_FB_USED": round(used),
        "DCGM_FI_DEV_FB_FREE": round(max(0.0, total - used)),
        "DCGM_FI_DEV_POWER_USAGE": s.power_w or 0.0,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": round((s.energy_j or 0.0) * 1000),
        "DCGM_FI_DEV_SM_CLOCK": round(s.sm_clock_mhz or 0.0),
        "DCGM_FI_DEV_MEM_CLOCK": round(s.memory_clock_mhz or 0.0),
        "DCGM_FI_DEV_GPU_TEMP": round(s.temperature_c or 0.0),
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": throttle_bitmask(s.throttle_reasons),
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": s.ecc_sbe_total or 0.0,
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": s.ecc_dbe_total or 0.0,
        "DCGM_FI_DEV_XID_ERRORS": float(s.xid_last or 0),
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": s.util_gpu or 0.0,
        "DCGM_FI_PROF_SM_OCCUPANCY": s.sm_occupancy or 0.0,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": s.tensor_util or 0.0,
        "DCGM_FI_PROF_DRAM_ACTIVE": s.dram_bw_util or 0.0,
    }


class DcgmCollector(Collector):
    """The latest reading of each GPU, as dcgm-exporter exposes it (all fields as gauges)."""

    def __init__(self, hostname: str) -> None:
        self._hostname = hostname
        self._lock = threading.Lock()
        self._latest: dict[int, GpuSample] = {}

    def update(self, s: GpuSample) -> None:
        with self._lock:
            self._latest[s.gpu_index] = s

    def collect(self) -> Iterator[Metric]:
        labels = ["gpu", "UUID", "device", "modelName", "Hostname"]
        with self._lock:
            samples = [self._latest[i] for i in sorted(self._latest)]
        values = [dcgm_values(s) for s in samples]
        for f in DCGM_FIELDS:
            family = GaugeMetricFamily(f.name, f.doc, labels=labels)
            for s, v in zip(samples, values, strict=True):
                label_values = [str(s.gpu_index), s.uuid, f"nvidia{s.gpu_index}", s.name]
                family.add_metric([*label_values, self._hostname], v[f.name])
            yield family


class MetricsSink:
    """Keeps every instance's server (vLLM, or SGLang with ``flavour="sglang"``) and
    dcgm-exporter registries current."""

    def __init__(self, flavour: str = "vllm", *, histograms: bool = True) -> None:
        """``histograms=False`` leaves the latency histograms out of the server's exposition
        (what a sidecar reads from a scrape is its gauges and counters)."""
        if flavour not in ("vllm", "sglang"):
            raise InvalidInput("the simulated /metrics flavour is vllm or sglang")
        self._histograms = histograms
        self._server_kind = VllmCollector if flavour == "vllm" else SglangCollector
        self._vllm: dict[str, tuple[CollectorRegistry, VllmCollector | SglangCollector]] = {}
        self._dcgm: dict[str, tuple[CollectorRegistry, DcgmCollector]] = {}

    def vllm(self, instance: str, model_name: str = "") -> VllmCollector | SglangCollector:
        """The instance's server collector (named for the default flavour)."""
        if instance not in self._vllm:
            registry = CollectorRegistry(auto_describe=False)
            collector = self._server_kind(model_name, self._histograms)
            registry.register(collector)
            self._vllm[instance] = (registry, collector)
        return self._vllm[instance][1]

    def dcgm(self, instance: str) -> DcgmCollector:
        if instance not in self._dcgm:
            registry = CollectorRegistry(auto_describe=False)
            collector = DcgmCollector(hostname=instance)
            registry.register(collector)
            self._dcgm[instance] = (registry, collector)
        return self._dcgm[instance][1]

    def vllm_registry(self, instance: str, model_name: str = "") -> CollectorRegistry:
        self.vllm(instance, model_name)
        return self._vllm[instance][0]

    def dcgm_registry(self, instance: str) -> CollectorRegistry:
        self.dcgm(instance)
        return self._dcgm[instance][0]

    def write(self, batch: Batch) -> None:
        for c in batch.completions:
            self.vllm(c.record.instance, c.record.model).observe(c)
        if batch.engine_samples:
            for e in batch.engine_samples:
                self.vllm(e.sample.instance, e.sample.model).update(e.sample, e.index, e.lora)
        else:
            for s in batch.server_samples:
                self.vllm(s.instance, s.model).update(s)
        for g in batch.gpu_samples:
            self.dcgm(g.instance).update(g)

    def close(self) -> None:
        return None


class MetricsServer:
    """A registry served on ``GET /metrics`` by prometheus_client's own HTTP server."""

    def __init__(self, registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 0) -> None:
        self._httpd, self._thread = start_http_server(port, addr=host, registry=registry)
        self.host = host
        self.port = int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
