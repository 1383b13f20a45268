"""Periodic samples: one GPU read (NVML or dcgm-exporter), one scrape of a server's /metrics.

Units are converted at the source: watts (NVML reports mW), joules (mJ), bytes (dcgm reports
MiB), ratios in [0, 1] (NVML reports percent). A field the source cannot provide is ``None``.

A server that runs several data-parallel engines behind one endpoint (vLLM's ``engine`` label,
SGLang's ``dp_rank``) is one ``ServerSample`` for the instance, holding one ``EngineSample``
per engine. The instance's figures follow one rule (``combine_engines``): counts and counters
(running, waiting, tokens, requests) are the *sum* over the engines; ratios (KV-cache usage,
prefix-cache hit ratio) are the *mean* over the engines that report them, since every engine
of a server has a cache of the same size, so the mean is the share of all the server's cache;
and ``kv_cache_usage_max`` keeps the hottest engine's KV usage, so one full engine behind an
instance mean of 0.5 is still visible.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from infersight.core.errors import InvalidRecord
from infersight.core.records import check_label, check_timestamp

#: Named clock-event (throttle) reasons, as NVML's nvmlClocksEventReasons bit flags name them.
THROTTLE_REASONS: Final = (
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
)
#: Clock-event reasons that do not slow a busy GPU down: idleness and clock settings.
BENIGN_REASONS: Final = frozenset(
    {"gpu_idle", "applications_clocks_setting", "display_clock_setting"}
)

GPU_RATIO_FIELDS: Final = (
    "util_gpu",
    "util_memory",
    "sm_occupancy",
    "dram_bw_util",
    "tensor_util",
)
GPU_NONNEGATIVE_FIELDS: Final = (
    "memory_used_bytes",
    "memory_total_bytes",
    "power_w",
    "power_limit_w",
    "energy_j",
    "sm_clock_mhz",
    "memory_clock_mhz",
    "ecc_sbe_total",
    "ecc_dbe_total",
)

SERVER_RATIO_FIELDS: Final = ("kv_cache_usage", "prefix_cache_hit_ratio")
#: The metric fields of a server (and of each of its engines), in storage order.
SERVER_METRIC_FIELDS: Final = (
    "requests_running",
    "requests_waiting",
    "requests_swapped",
    "kv_cache_usage",
    "prefix_cache_hit_ratio",
    "preemptions_total",
    "prompt_tokens_total",
    "generation_tokens_total",
    "requests_total",
    "request_errors_total",
)
#: The most engines one server sample keeps (a data-parallel size far above any deployment's).
MAX_ENGINES: Final = 512
#: The longest engine identifier (``engine="0"``, ``dp_rank="3"``).
MAX_RANK_LEN: Final = 64
SERVER_GAUGE_FIELDS: Final = ("requests_running", "requests_waiting", "requests_swapped")
SERVER_COUNTER_FIELDS: Final = (
    "preemptions_total",
    "prompt_tokens_total",
    "generation_tokens_total",
    "requests_total",
    "request_errors_total",
)


def _check_number(name: str, value: float | None, lo: float, hi: float) -> None:
    if value is None:
        return
    if not math.isfinite(value) or not lo <= value <= hi:
        raise InvalidRecord(f"{name} must be in [{lo:g}, {hi:g}]", details={name: repr(value)})


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One reading of one GPU."""

    ts: datetime
    instance: str
    gpu_index: int
    uuid: str = ""
    name: str = ""
    util_gpu: float | None = None
    util_memory: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    energy_j: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    throttle_reasons: tuple[str, ...] = ()
    ecc_sbe_total: float | None = None
    ecc_dbe_total: float | None = None
    xid_last: int | None = None
    sm_occupancy: float | None = None
    dram_bw_util: float | None = None
    tensor_util: float | None = None

    def __post_init__(self) -> None:
        check_timestamp("ts", self.ts)
        if not self.instance:
            raise InvalidRecord("instance must not be empty")
        check_label("instance", self.instance)
        check_label("uuid", self.uuid)
        check_label("name", self.name)
        if not 0 <= self.gpu_index < 1024:
            raise InvalidRecord(
                "gpu_index must be in [0, 1024)", details={"gpu_index": self.gpu_index}
            )
        for name in GPU_RATIO_FIELDS:
            _check_number(name, getattr(self, name), 0.0, 1.0)
        for name in GPU_NONNEGATIVE_FIELDS:
            _check_number(name, getattr(self, name), 0.0, math.inf)
        _check_number("temperature_c", self.temperature_c, -50.0, 200.0)
        unknown = set(self.throttle_reasons) - set(THROTTLE_REASONS)
        if unknown:
            raise InvalidRecord(
                "unknown throttle reasons", details={"throttle_reasons": sorted(unknown)}
            )

    @property
    def throttled(self) -> bool:
        """True when clocks are held down for a reason other than idleness or a setting."""
        return any(reason not in BENIGN_REASONS for reason in self.throttle_reasons)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerMetrics:
    """The metric fields of a server, and of each of its data-parallel engines
    (``SERVER_METRIC_FIELDS``, keyword-only): gauges and counters as scraped, ratios in [0, 1]."""

    requests_running: float | None = None
    requests_waiting: float | None = None
    requests_swapped: float | None = None
    kv_cache_usage: float | None = None
    prefix_cache_hit_ratio: float | None = None
    preemptions_total: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    requests_total: float | None = None
    request_errors_total: float | None = None

    def _check_metrics(self) -> None:
        for name in SERVER_RATIO_FIELDS:
            _check_number(name, getattr(self, name), 0.0, 1.0)
        for name in (*SERVER_GAUGE_FIELDS, *SERVER_COUNTER_FIELDS):
            _check_number(name, getattr(self, name), 0.0, math.inf)


@dataclass(frozen=True, slots=True)
class EngineSample(ServerMetrics):
    """One data-parallel engine of a server at one scrape, identified by ``rank``: the value
    of vLLM's ``engine`` label or SGLang's ``dp_rank``."""

    rank: str

    def __post_init__(self) -> None:
        if not self.rank or len(self.rank) > MAX_RANK_LEN or not self.rank.isprintable():
            raise InvalidRecord(
                f"an engine rank is 1 to {MAX_RANK_LEN} printable characters",
                details={"rank": self.rank[:MAX_RANK_LEN]},
            )
        self._check_metrics()


def _mean(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def combine_engines(
    engines: Sequence[EngineSample], whole: Mapping[str, float | None]
) -> dict[str, float | None]:
    """The instance's figures from its engines' (see the module docstring).

    ``whole`` holds the figures read from the whole exposition: counts summed over every
    series, including those an engine label does not split (SGLang's request and token
    counters are the tokenizer's, with no ``dp_rank``). They are kept; only the ratios, which
    a sum would push past 1, are replaced by the engines' mean. ``kv_cache_usage_max`` is the
    hottest engine's usage (the instance's own with no engines).
    """
    out = {name: whole.get(name) for name in SERVER_METRIC_FIELDS}
    for name in SERVER_RATIO_FIELDS:
        mean = _mean([v for e in engines if (v := getattr(e, name)) is not None])
        if mean is not None:
            out[name] = min(1.0, max(0.0, mean))
    usages = [e.kv_cache_usage for e in engines if e.kv_cache_usage is not None]
    out["kv_cache_usage_max"] = max(usages) if usages else out["kv_cache_usage"]
    return out


@dataclass(frozen=True, slots=True)
class ServerSample(ServerMetrics):
    """One scrape of an inference server's /metrics, in infersight's vocabulary.

    Counters are cumulative as scraped; rates are computed by queries over consecutive samples.
    ``per_engine`` holds the data-parallel engines when the server runs more than one (empty
    otherwise); the other fields are then the instance's figures (``combine_engines``).
    """

    ts: datetime
    instance: str
    engine: str = "generic"
    model: str = ""
    kv_cache_usage_max: float | None = None
    per_engine: tuple[EngineSample, ...] = ()

    def __post_init__(self) -> None:
        check_timestamp("ts", self.ts)
        if not self.instance:
            raise InvalidRecord("instance must not be empty")
        for name in ("instance", "engine", "model"):
            check_label(name, getattr(self, name))
        self._check_metrics()
        _check_number("kv_cache_usage_max", self.kv_cache_usage_max, 0.0, 1.0)
        object.__setattr__(self, "per_engine", tuple(self.per_engine))
        if len(self.per_engine) > MAX_ENGINES:
            raise InvalidRecord(
                f"a server sample keeps at most {MAX_ENGINES} engines",
                details={"engines": len(self.per_engine)},
            )
        if not all(isinstance(e, EngineSample) for e in self.per_engine):
            raise InvalidRecord("per_engine holds EngineSample values")
        ranks = [e.rank for e in self.per_engine]
        if len(set(ranks)) != len(ranks):
            raise InvalidRecord("engine ranks repeat", details={"ranks": ranks[:16]})
