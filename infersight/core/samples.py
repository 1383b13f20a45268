"""Periodic samples: one GPU read (NVML or dcgm-exporter), one scrape of a server's /metrics.

Units are converted at the source: watts (NVML reports mW), joules (mJ), bytes (dcgm reports
MiB), ratios in [0, 1] (NVML reports percent). A field the source cannot provide is ``None``.

A server that runs several data-parallel engines behind one endpoint (vLLM's ``engine`` label,
SGLang's ``dp_rank``) is one ``ServerSample`` for the instance, holding one ``EngineSample``
per engine. The instance's figures follow one rule (``combine_engines``): counts and counters
(running, waiting, tokens, requests) are the *sum* over the engines; ratios read from gauges
(KV-cache usage) are the *mean* over the engines that report them, since every engine of a
server has a cache of the same size, so the mean is the share of all the server's cache;
and ``kv_cache_usage_max`` keeps the hottest engine's KV usage, so one full engine behind an
instance mean of 0.5 is still visible.

Ratios of counters are never read from an engine's own gauge where the counters exist (#30):
vLLM's prefix-cache hit rate is cumulative since the server started, SGLang's is the last
prefill batch's and is reset by decode logging. ``with_interval_ratios`` derives them from two
consecutive scrapes instead: hits gained ÷ queries gained over the interval, pooled over the
engines (the instance's counters are their sums), and absent when nothing was queried. The
speculative-decoding figures are derived the same way: acceptance rate = accepted tokens
gained ÷ draft tokens gained, mean acceptance length = 1 + accepted tokens gained ÷ drafts
gained (the tokens one verification step yields: the accepted drafts and the target model's
own token).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

from infersight.core.errors import InvalidInput, InvalidRecord
from infersight.core.gpu_slice import parse_slice
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

SERVER_RATIO_FIELDS: Final = ("kv_cache_usage", "prefix_cache_hit_ratio", "spec_acceptance_rate")
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
    # revision 0013 (#30): the counters behind the interval ratios, and serving topologies
    "prefix_cache_queries_total",
    "prefix_cache_hits_total",
    "spec_drafts_total",
    "spec_draft_tokens_total",
    "spec_accepted_tokens_total",
    "spec_acceptance_rate",
    "spec_accept_length",
    "requests_deferred",
    "kv_transfer_tokens_total",
    "admission_rejections_total",
)
#: Ratios derived from two scrapes' counters (``with_interval_ratios``): (field, numerator
#: counter, denominator counter).
INTERVAL_RATIOS: Final = (
    ("prefix_cache_hit_ratio", "prefix_cache_hits_total", "prefix_cache_queries_total"),
    ("spec_acceptance_rate", "spec_accepted_tokens_total", "spec_draft_tokens_total"),
)
#: The longest mean acceptance length taken as plausible (drafts of up to 64 tokens).
MAX_ACCEPT_LENGTH: Final = 65.0
#: The most engines one server sample keeps (a data-parallel size far above any deployment's).
MAX_ENGINES: Final = 512
#: The longest engine identifier (``engine="0"``, ``dp_rank="3"``).
MAX_RANK_LEN: Final = 64
SERVER_GAUGE_FIELDS: Final = (
    "requests_running",
    "requests_waiting",
    "requests_swapped",
    "requests_deferred",
)
SERVER_COUNTER_FIELDS: Final = (
    "preemptions_total",
    "prompt_tokens_total",
    "generation_tokens_total",
    "requests_total",
    "request_errors_total",
    "prefix_cache_queries_total",
    "prefix_cache_hits_total",
    "spec_drafts_total",
    "spec_draft_tokens_total",
    "spec_accepted_tokens_total",
    "kv_transfer_tokens_total",
    "admission_rejections_total",
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
    gpu_slice: str = ""
    """The fraction of a physical GPU this device is (``core.gpu_slice``: ``mig:3g.40gb:3/7``,
    ``share:1/4``); empty for a whole GPU."""
    parent_uuid: str = ""
    """A MIG slice's parent GPU (its UUID); empty for a whole GPU."""
    gpu_instance_id: int | None = None
    """A MIG slice's GPU instance id (NVML ``nvmlDeviceGetGpuInstanceId``, dcgm ``GPU_I_ID``)."""

    def __post_init__(self) -> None:
        check_timestamp("ts", self.ts)
        if not self.instance:
            raise InvalidRecord("instance must not be empty")
        check_label("instance", self.instance)
        check_label("uuid", self.uuid)
        check_label("name", self.name)
        check_label("parent_uuid", self.parent_uuid)
        if self.gpu_slice:
            try:
                parse_slice(self.gpu_slice)
            except InvalidInput as exc:
                raise InvalidRecord(exc.message, details=exc.details) from None
        if self.gpu_instance_id is not None and not 0 <= self.gpu_instance_id < 1024:
            raise InvalidRecord("gpu_instance_id must be in [0, 1024)")
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
    prefix_cache_queries_total: float | None = None
    prefix_cache_hits_total: float | None = None
    spec_drafts_total: float | None = None
    spec_draft_tokens_total: float | None = None
    spec_accepted_tokens_total: float | None = None
    spec_acceptance_rate: float | None = None
    spec_accept_length: float | None = None
    requests_deferred: float | None = None
    kv_transfer_tokens_total: float | None = None
    admission_rejections_total: float | None = None

    def _check_metrics(self) -> None:
        for name in SERVER_RATIO_FIELDS:
            _check_number(name, getattr(self, name), 0.0, 1.0)
        for name in (*SERVER_GAUGE_FIELDS, *SERVER_COUNTER_FIELDS):
            _check_number(name, getattr(self, name), 0.0, math.inf)
        _check_number("spec_accept_length", self.spec_accept_length, 1.0, MAX_ACCEPT_LENGTH)


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


def _gained(now: float | None, before: float | None) -> float | None:
    """How much a counter grew between two scrapes; a counter that went down was reset (the
    server restarted) and has counted ``now`` since."""
    if now is None or before is None:
        return None
    return now if now < before else now - before


def _interval_figures(now: ServerMetrics, before: ServerMetrics | None) -> dict[str, Any]:
    """The counter-derived figures of ``now`` over the interval since ``before``; ``None``
    where a counter is missing on either side or nothing was counted."""
    out: dict[str, Any] = {}
    for field_name, numerator, denominator in INTERVAL_RATIOS:
        value = None
        if before is not None and getattr(now, denominator) is not None:
            top = _gained(getattr(now, numerator), getattr(before, numerator))
            bottom = _gained(getattr(now, denominator), getattr(before, denominator))
            if top is not None and bottom:
                value = min(1.0, max(0.0, top / bottom))
        # No counters at all: the engine's own figure (a gauge of a dialect without them).
        out[field_name] = (
            value if getattr(now, denominator) is not None else getattr(now, field_name)
        )
    length = None
    if before is not None and now.spec_drafts_total is not None:
        accepted = _gained(now.spec_accepted_tokens_total, before.spec_accepted_tokens_total)
        drafts = _gained(now.spec_drafts_total, before.spec_drafts_total)
        if accepted is not None and drafts:
            length = min(MAX_ACCEPT_LENGTH, 1.0 + accepted / drafts)
    out["spec_accept_length"] = (
        length if now.spec_drafts_total is not None else now.spec_accept_length
    )
    return out


def with_interval_ratios(now: ServerSample, before: ServerSample | None) -> ServerSample:
    """``now`` with its counter-derived ratios taken over the interval since ``before`` (the
    same instance's previous scrape), for the instance (its counters pooled over the engines)
    and for each engine against the same engine's previous figures."""
    previous = {e.rank: e for e in before.per_engine} if before is not None else {}
    engines = tuple(
        replace(e, **_interval_figures(e, previous.get(e.rank))) for e in now.per_engine
    )
    return replace(now, per_engine=engines, **_interval_figures(now, before))
