"""LLMPerf (``token_benchmark_ray.py``) results → ``Baseline``.

The ``*_summary.json`` file flattens each statistic to one key: ``results_<metric>_quantiles_p<P>``
(P in 25, 50, 75, 90, 95, 99), ``results_<metric>_mean``/``_min``/``_max``/``_stddev`` for
``ttft_s``, ``end_to_end_latency_s`` and ``inter_token_latency_s`` (all seconds), plus
``results_num_requests_started``, ``results_number_errors``, ``results_num_completed_requests``,
``results_num_completed_requests_per_min`` and ``results_mean_output_throughput_token_per_s``.
LLMPerf's inter-token latency is each request's generation time divided by its output
tokens, which is what infersight calls TPOT. The run's length is not written; it follows
from the completed requests and their rate per minute.

The ``*_individual_responses.json`` file (optional) lists every request (``ttft_s``,
``end_to_end_latency_s``, ``inter_token_latency_s``, ``error_code``); it supplies the sketches.
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
    optional_number,
    summary,
)

FORMAT: Final = "llmperf"
#: infersight metric → LLMPerf's name for it.
_METRICS: Final = {"ttft": "ttft_s", "tpot": "inter_token_latency_s", "e2e": "end_to_end_latency_s"}
_PERCENTILES: Final = (25, 50, 75, 90, 95, 99)
_LABELS: Final = (
    "model",
    "num_concurrent_requests",
    "mean_input_tokens",
    "mean_output_tokens",
    "timestamp",
)


def looks_like(doc: Mapping[str, Any]) -> bool:
    return "results_num_completed_requests" in doc or "results_ttft_s_mean" in doc


def parse(
    doc: Any,
    *,
    name: str,
    created_at: datetime,
    description: str = "",
    individual: Any = None,
) -> Baseline:
    doc = mapping(doc, "the summary", FORMAT)
    completed = int(number(doc, "results_num_completed_requests", FORMAT))
    per_minute = number(doc, "results_num_completed_requests_per_min", FORMAT)
    if completed == 0 or per_minute == 0:
        raise InvalidInput(f"{FORMAT}: the run completed no request")
    duration = completed / per_minute * 60.0
    errors = int(number(doc, "results_number_errors", FORMAT, default=0.0))
    started = int(
        number(doc, "results_num_requests_started", FORMAT, default=float(completed + errors))
    )
    samples = _samples(individual) if individual is not None else {}
    latency: dict[str, LatencySummary] = {}
    for metric, theirs in _METRICS.items():
        quantiles = {
            p / 100: number(doc, f"results_{theirs}_quantiles_p{p}", FORMAT)
            for p in _PERCENTILES
            if doc.get(f"results_{theirs}_quantiles_p{p}") is not None
        }
        found = summary(
            quantiles,
            optional_number(doc, f"results_{theirs}_mean", FORMAT),
            completed,
            samples.get(metric),
        )
        if found is not None:
            latency[metric] = found
    if not latency:
        raise InvalidInput(f"{FORMAT}: the summary has no latency statistics")
    mean_in = optional_number(doc, "results_number_input_tokens_mean", FORMAT)
    mean_out = optional_number(doc, "results_number_output_tokens_mean", FORMAT)
    return Baseline(
        name=name,
        created_at=created_at,
        source=FORMAT,
        duration_s=duration,
        requests=max(started, completed + errors),
        errors=errors,
        request_throughput=per_minute / 60.0,
        output_token_throughput=number(doc, "results_mean_output_throughput_token_per_s", FORMAT),
        latency=latency,
        input_tokens=None if mean_in is None else round(mean_in * completed),
        output_tokens=None if mean_out is None else round(mean_out * completed),
        description=description,
        labels={key: label(doc.get(key)) for key in _LABELS if doc.get(key) is not None},
    )


def _samples(individual: Any) -> dict[str, list[float]]:
    rows = check_samples(individual, FORMAT, "the individual responses")
    out: dict[str, list[float]] = {"ttft": [], "tpot": [], "e2e": []}
    for item in rows:
        row = mapping(item, "an individual response", FORMAT)
        if row.get("error_code") is not None:
            continue
        for metric, theirs in _METRICS.items():
            value = optional_number(row, theirs, FORMAT)
            if value is not None:
                out[metric].append(value)
    return out
