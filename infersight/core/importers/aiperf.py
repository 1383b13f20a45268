"""AIPerf ``profile_export_aiperf.json`` → ``Baseline``.

Each metric is a block keyed by its tag with a ``unit`` and statistics: record metrics
(``time_to_first_token``, ``inter_token_latency``, ``request_latency``, sequence lengths)
carry ``avg``, ``min``, ``max``, ``std``, ``p1`` … ``p99`` and (schema 1.1+) ``count``;
derived and aggregate metrics (``request_throughput``, ``output_token_throughput``,
``request_count`` — the successful requests —, ``error_request_count``,
``benchmark_duration``, ``total_output_tokens``/``total_osl``, ``total_isl``) carry ``avg``
only. ``unit`` is authoritative. Token totals are the file's own (``total_output_tokens``,
else ``total_osl``), not throughput × duration, which the rounding of both skews; the model
is ``input_config.models.items[].name`` (AIPerf 0.13). AIPerf's inter-token
latency is the per-request mean gap after the first token, infersight's TPOT.

The per-request ``profile_export.jsonl`` records (optional, parsed by the caller into a list)
hold ``metrics.<tag>.value``/``unit`` and an ``error`` object; they supply the sketches.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from infersight.core.baseline import Baseline, LatencySummary
from infersight.core.errors import InvalidInput
from infersight.core.importers.common import (
    check_samples,
    label,
    mapping,
    number,
    seconds_per,
    summary,
)

FORMAT: Final = "aiperf"
#: infersight metric → AIPerf's tag for it.
_METRICS: Final = {
    "ttft": "time_to_first_token",
    "tpot": "inter_token_latency",
    "e2e": "request_latency",
}
_PERCENTILES: Final = (1, 5, 10, 25, 50, 75, 90, 95, 99)


def looks_like(doc: Mapping[str, Any]) -> bool:
    block = doc.get("request_latency") or doc.get("time_to_first_token")
    return isinstance(block, Mapping) and "unit" in block


def _avg(doc: Mapping[str, Any], tag: str) -> float | None:
    block = doc.get(tag)
    if block is None:
        return None
    return number(mapping(block, tag, FORMAT), "avg", FORMAT)


def parse(
    doc: Any,
    *,
    name: str,
    created_at: datetime,
    description: str = "",
    records: Any = None,
) -> Baseline:
    doc = mapping(doc, "the export", FORMAT)
    completed = _avg(doc, "request_count")
    throughput = _avg(doc, "request_throughput")
    if completed is None or throughput is None:
        raise InvalidInput(f"{FORMAT}: the export has no request_count or request_throughput")
    errors = int(_avg(doc, "error_request_count") or 0)
    duration = _duration(doc, completed, throughput)
    samples = _samples(records) if records is not None else {}
    latency: dict[str, LatencySummary] = {}
    for metric, tag in _METRICS.items():
        found = _latency(doc, tag, int(completed), samples.get(metric))
        if found is not None:
            latency[metric] = found
    if not latency:
        raise InvalidInput(f"{FORMAT}: the export has no latency metrics")
    output_rate = _avg(doc, "output_token_throughput") or 0.0
    mean_in = _avg(doc, "input_sequence_length")
    total_in = _avg(doc, "total_isl")
    total_out = _avg(doc, "total_output_tokens")
    total_out = _avg(doc, "total_osl") if total_out is None else total_out
    return Baseline(
        name=name,
        created_at=created_at,
        source=FORMAT,
        duration_s=duration,
        requests=int(completed) + errors,
        errors=errors,
        request_throughput=throughput,
        output_token_throughput=output_rate,
        latency=latency,
        input_tokens=_tokens(total_in, mean_in, completed),
        output_tokens=round(output_rate * duration) if total_out is None else round(total_out),
        description=description,
        labels=_labels(doc),
    )


def _duration(doc: Mapping[str, Any], completed: float, throughput: float) -> float:
    block = doc.get("benchmark_duration")
    if isinstance(block, Mapping) and block.get("avg") is not None:
        return number(block, "avg", FORMAT) * seconds_per(
            block.get("unit", "sec"), FORMAT, "benchmark_duration"
        )
    if throughput <= 0:
        raise InvalidInput(
            f"{FORMAT}: cannot tell the run's length (no benchmark_duration, zero throughput)"
        )
    return completed / throughput


def _latency(
    doc: Mapping[str, Any], tag: str, count: int, samples: list[float] | None
) -> LatencySummary | None:
    block = doc.get(tag)
    if block is None:
        return summary({}, None, count, samples)
    block = mapping(block, tag, FORMAT)
    scale = seconds_per(block.get("unit"), FORMAT, tag)
    quantiles = {
        p / 100: number(block, f"p{p}", FORMAT) * scale
        for p in _PERCENTILES
        if block.get(f"p{p}") is not None
    }
    mean = block.get("avg")
    return summary(
        quantiles,
        None if mean is None else number(block, "avg", FORMAT) * scale,
        int(block.get("count") or count),
        samples,
    )


def _tokens(total: float | None, mean: float | None, completed: float) -> int | None:
    """The file's own total (0.13: ``total_isl``), else mean × requests."""
    if total is not None:
        return round(total)
    return None if mean is None else round(mean * completed)


def _labels(doc: Mapping[str, Any]) -> dict[str, str]:
    labels = {
        key: label(doc[key])
        for key in ("aiperf_version", "benchmark_id")
        if doc.get(key) is not None
    }
    model = _model(doc.get("input_config"))
    if model:
        labels["model"] = model
    return labels


def _model(config: Any) -> str:
    """The benchmarked model: ``input_config.models.items[].name`` (0.13) or, before,
    ``input_config.endpoint.model_names[]``; the first when several were benchmarked."""
    if not isinstance(config, Mapping):
        return ""
    models = config.get("models")
    items = models.get("items") if isinstance(models, Mapping) else None
    if isinstance(items, list):
        for item in items:
            if isinstance(item, Mapping) and item.get("name"):
                return label(item["name"])
    endpoint = config.get("endpoint")
    names = endpoint.get("model_names") if isinstance(endpoint, Mapping) else None
    if isinstance(names, list) and names:
        return label(names[0])
    return ""


def _samples(records: Any) -> dict[str, list[float]]:
    rows = check_samples(records, FORMAT, "the per-request records")
    out: dict[str, list[float]] = {"ttft": [], "tpot": [], "e2e": []}
    for item in rows:
        row = mapping(item, "a per-request record", FORMAT)
        if row.get("error") is not None:
            continue
        metrics = row.get("metrics")
        if not isinstance(metrics, Mapping):
            continue
        for metric, tag in _METRICS.items():
            value = metrics.get(tag)
            if isinstance(value, Mapping) and value.get("value") is not None:
                scale = seconds_per(value.get("unit"), FORMAT, tag)
                out[metric].append(number(value, "value", FORMAT) * scale)
    return out
