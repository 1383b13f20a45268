"""GuideLLM ``benchmarks.json`` → ``Baseline`` (one benchmark) or a step ``LoadTestRun`` (all).

The report holds ``metadata.guidellm_version`` and ``benchmarks[]``, one per strategy run
(a sweep or ``--override profile.rate 2,4,8`` writes several). Each benchmark has a
``config.strategy`` (``type_`` with its ``rate`` or ``streams``), ``duration`` (seconds),
``start_time``/``end_time`` (epoch seconds), and ``metrics.<m>.successful`` statistics —
``mean``, ``median``, ``count`` and ``percentiles`` (``p001`` … ``p50`` … ``p999``) — plus
``metrics.request_totals`` (successful / errored / incomplete counts). Per-request records
are ``requests.successful[]`` and ``requests.errored[]`` with ``request_start_time``,
``request_latency`` (s), ``time_to_first_token_ms``, ``inter_token_latency_ms``,
``prompt_tokens`` and ``output_tokens``.

Which metric is which: GuideLLM's ``inter_token_latency_ms`` is the mean gap after the
first token, infersight's TPOT; its ``time_per_output_token_ms`` divides the whole latency
(TTFT included) by the output tokens, so it is never read as TPOT. ``request_latency`` is in
seconds, the others in milliseconds. ``inter_token_latency_ms``'s own ``count`` counts
token gaps, not requests; a summary's count is the successful requests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from infersight.core.baseline import Baseline, LatencySummary
from infersight.core.errors import InvalidInput
from infersight.core.importers.common import check_samples, label, mapping, number, summary
from infersight.core.loadtest import LoadTestRun, Phase, RequestResult, ScenarioKind

FORMAT: Final = "guidellm"
#: infersight metric → (GuideLLM's metric, seconds per its unit).
_METRICS: Final = {
    "ttft": ("time_to_first_token_ms", 1e-3),
    "tpot": ("inter_token_latency_ms", 1e-3),
    "e2e": ("request_latency", 1.0),
}
#: At most this many benchmarks in one report (a sweep writes about ten).
MAX_BENCHMARKS: Final = 1000


def looks_like(doc: Mapping[str, Any]) -> bool:
    metadata = doc.get("metadata")
    return (
        isinstance(metadata, Mapping)
        and "guidellm_version" in metadata
        and isinstance(doc.get("benchmarks"), list)
    )


def benchmarks(doc: Any) -> list[Mapping[str, Any]]:
    """The report's benchmarks, each checked to be an object."""
    doc = mapping(doc, "the report", FORMAT)
    items = doc.get("benchmarks")
    if not isinstance(items, list) or not items:
        raise InvalidInput(f"{FORMAT}: the report has no benchmarks")
    if len(items) > MAX_BENCHMARKS:
        raise InvalidInput(f"{FORMAT}: more than {MAX_BENCHMARKS} benchmarks in one report")
    return [mapping(b, "a benchmark", FORMAT) for b in items]


def strategy_label(bench: Mapping[str, Any]) -> str:
    """``poisson@4.00``, ``concurrent@8``, ``synchronous`` — as GuideLLM's console names it."""
    config = bench.get("config")
    strategy = config.get("strategy") if isinstance(config, Mapping) else None
    if not isinstance(strategy, Mapping):
        return "benchmark"
    kind = label(strategy.get("type_")) or "benchmark"
    if isinstance(strategy.get("rate"), int | float):
        return f"{kind}@{float(strategy['rate']):.2f}"
    if isinstance(strategy.get("streams"), int):
        return f"{kind}@{strategy['streams']}"
    return kind


def parse(
    doc: Any,
    *,
    name: str,
    created_at: datetime,
    description: str = "",
    benchmark: int | None = None,
) -> Baseline:
    """A baseline from one benchmark of the report (``benchmark``: its index; required when
    the report holds several, since each level of a sweep is a different load)."""
    items = benchmarks(doc)
    if benchmark is None:
        if len(items) > 1:
            raise InvalidInput(
                f"{FORMAT}: the report holds {len(items)} benchmarks (a sweep); choose one",
                details={"benchmarks": [strategy_label(b) for b in items]},
            )
        benchmark = 0
    if not 0 <= benchmark < len(items):
        raise InvalidInput(
            f"{FORMAT}: no benchmark {benchmark} (the report holds {len(items)})",
            details={"benchmarks": [strategy_label(b) for b in items]},
        )
    bench = items[benchmark]
    metrics = mapping(bench.get("metrics"), "a benchmark's metrics", FORMAT)
    completed, errors = _totals(metrics)
    duration = number(bench, "duration", FORMAT)
    if duration <= 0:
        raise InvalidInput(f"{FORMAT}: a benchmark's duration must be positive")
    records = _records(bench, "successful")
    latency: dict[str, LatencySummary] = {}
    for metric, (theirs, scale) in _METRICS.items():
        values = [v for r in records if (v := _value(r, theirs, scale)) is not None]
        found = _summary(metrics, theirs, scale, completed, values)
        if found is not None:
            latency[metric] = found
    if not latency:
        raise InvalidInput(f"{FORMAT}: the benchmark has no TTFT, ITL or latency statistics")
    rate = _mean(metrics, "requests_per_second")
    output_rate = _mean(metrics, "output_tokens_per_second")
    output_tokens = _total(metrics, "output_token_count")
    input_tokens = _total(metrics, "prompt_token_count")
    return Baseline(
        name=name,
        created_at=created_at,
        source=FORMAT,
        duration_s=duration,
        requests=completed + errors,
        errors=errors,
        request_throughput=completed / duration if rate is None else rate,
        output_token_throughput=(
            output_rate if output_rate is not None else (output_tokens or 0) / duration
        ),
        latency=latency,
        input_tokens=None if input_tokens is None else round(input_tokens),
        output_tokens=None if output_tokens is None else round(output_tokens),
        description=description,
        labels=_labels(doc, bench),
    )


def to_run(doc: Any, *, name: str, target: str = "") -> LoadTestRun:
    """The whole report as a step run: one phase per benchmark, in the order they ran, and
    every request GuideLLM recorded, so the run's levels give the knee and the capacity.

    A phase's concurrency is the benchmark's ``streams`` for a concurrent strategy, else the
    mean number of requests in flight GuideLLM measured (``request_concurrency``), rounded.
    """
    items = sorted(benchmarks(doc), key=lambda b: number(b, "start_time", FORMAT))
    origin = number(items[0], "start_time", FORMAT)
    phases: list[Phase] = []
    results: list[RequestResult] = []
    for index, bench in enumerate(items):
        start = number(bench, "start_time", FORMAT) - origin
        duration = number(bench, "duration", FORMAT)
        if duration <= 0:
            raise InvalidInput(f"{FORMAT}: a benchmark's duration must be positive")
        phases.append(Phase(index, strategy_label(bench), _concurrency(bench), start, duration))
        for kind in ("successful", "errored"):
            for record in _records(bench, kind):
                results.append(_result(record, len(results), index, origin, kind == "errored"))
    first = items[0]
    model = _labels(doc, first).get("model", "")
    started = datetime.fromtimestamp(origin, UTC)
    return LoadTestRun(
        name=name,
        scenario=ScenarioKind.STEP if len(phases) > 1 else ScenarioKind.STEADY,
        target=target or _labels(doc, first).get("target", ""),
        model=model,
        started_at=started,
        phases=tuple(phases),
        results=tuple(sorted(results, key=lambda r: r.sent_s)),
        config={"source": FORMAT, "guidellm_version": _version(doc)},
    )


def _totals(metrics: Mapping[str, Any]) -> tuple[int, int]:
    totals = mapping(metrics.get("request_totals"), "request_totals", FORMAT)
    return int(number(totals, "successful", FORMAT)), int(
        number(totals, "errored", FORMAT, default=0.0)
    )


def _successful(metrics: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    block = metrics.get(key)
    if block is None:
        return None
    stats = mapping(block, key, FORMAT).get("successful")
    return None if stats is None else mapping(stats, f"{key}.successful", FORMAT)


def _mean(metrics: Mapping[str, Any], key: str) -> float | None:
    stats = _successful(metrics, key)
    return None if stats is None or stats.get("mean") is None else number(stats, "mean", FORMAT)


def _total(metrics: Mapping[str, Any], key: str) -> float | None:
    stats = _successful(metrics, key)
    if stats is None or stats.get("total_sum") is None:
        return None
    return number(stats, "total_sum", FORMAT)


def _summary(
    metrics: Mapping[str, Any], key: str, scale: float, count: int, samples: list[float]
) -> LatencySummary | None:
    stats = _successful(metrics, key)
    if stats is None:
        return summary({}, None, count, samples or None)
    quantiles: dict[float, float] = {}
    percentiles = stats.get("percentiles")
    if isinstance(percentiles, Mapping):
        for tag in percentiles:
            if isinstance(tag, str) and tag.startswith("p") and tag[1:].isdigit():
                # GuideLLM writes p001 (0.1 %), p01 (1 %), p50 … p999 (99.9 %).
                q = int(tag[1:]) / 10 ** len(tag[1:])
                if 0 < q < 1 and percentiles[tag] is not None:
                    quantiles[q] = number(percentiles, tag, FORMAT) * scale
    if stats.get("median") is not None:
        quantiles[0.5] = number(stats, "median", FORMAT) * scale
    mean = None if stats.get("mean") is None else number(stats, "mean", FORMAT) * scale
    return summary(quantiles, mean, count, samples or None)


def _records(bench: Mapping[str, Any], kind: str) -> list[Mapping[str, Any]]:
    requests = bench.get("requests")
    if not isinstance(requests, Mapping) or requests.get(kind) is None:
        return []
    rows = check_samples(requests[kind], FORMAT, f"requests.{kind}")
    return [mapping(r, "a request record", FORMAT) for r in rows]


def _value(record: Mapping[str, Any], key: str, scale: float) -> float | None:
    return None if record.get(key) is None else number(record, key, FORMAT) * scale


def _result(
    record: Mapping[str, Any], seq: int, phase: int, origin: float, failed: bool
) -> RequestResult:
    start = number(record, "request_start_time", FORMAT)
    e2e = _value(record, "request_latency", 1.0)
    if e2e is None:
        end = record.get("request_end_time")
        e2e = max(0.0, number(record, "request_end_time", FORMAT) - start) if end else 0.0
    return RequestResult(
        seq=seq,
        phase=phase,
        sent_s=max(0.0, start - origin),
        e2e_s=e2e,
        ttft_s=_value(record, "time_to_first_token_ms", 1e-3),
        tpot_s=_value(record, "inter_token_latency_ms", 1e-3),
        input_tokens=int(_value(record, "prompt_tokens", 1.0) or 0),
        output_tokens=int(_value(record, "output_tokens", 1.0) or 0),
        ok=not failed,
        error="errored" if failed else "",
    )


def _concurrency(bench: Mapping[str, Any]) -> int:
    config = bench.get("config")
    strategy = config.get("strategy") if isinstance(config, Mapping) else None
    if isinstance(strategy, Mapping) and isinstance(strategy.get("streams"), int):
        return max(1, int(strategy["streams"]))
    metrics = mapping(bench.get("metrics"), "a benchmark's metrics", FORMAT)
    mean = _mean(metrics, "request_concurrency")
    return max(1, round(mean)) if mean is not None and math.isfinite(mean) else 1


def _version(doc: Any) -> str:
    metadata = doc.get("metadata") if isinstance(doc, Mapping) else None
    return label(metadata.get("guidellm_version")) if isinstance(metadata, Mapping) else ""


def _labels(doc: Any, bench: Mapping[str, Any]) -> dict[str, str]:
    labels = {"guidellm_version": _version(doc), "strategy": strategy_label(bench)}
    config = doc.get("config") if isinstance(doc, Mapping) else None
    spec = config.get("spec") if isinstance(config, Mapping) else None
    backend = spec.get("backend") if isinstance(spec, Mapping) else None
    if isinstance(backend, Mapping):
        if backend.get("model"):
            labels["model"] = label(backend["model"])
        if backend.get("target"):
            labels["target"] = label(backend["target"])
    return {k: v for k, v in labels.items() if v}
