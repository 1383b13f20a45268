"""``vllm bench serve --save-result`` JSON → ``Baseline``.

The result file holds run totals (``duration``, ``completed``, ``failed``, token totals,
``request_throughput``, ``output_throughput``) and, per metric selected with
``--percentile-metrics`` (``ttft``, ``tpot``, ``itl``, ``e2el``), ``mean_<m>_ms``,
``median_<m>_ms``, ``std_<m>_ms`` and ``p<P>_<m>_ms`` for each ``--metric-percentiles`` value.
With ``--save-detailed`` it also keeps per-request ``ttfts`` and ``itls`` (seconds),
``output_lens`` and ``errors`` (empty for a success): those become the baseline's sketches —
TPOT as the gaps over ``output_len − 1``, as vLLM itself computes TPOT. Every file, with
default flags too, keeps the per-request ``latencies`` (seconds; a failed request's stays
0): ``e2el`` is not among the default ``--percentile-metrics``, so without them an E2E
regression would reach the gate unmeasured. They are the E2E distribution; an older detailed
file without them gives E2E as TTFT plus the inter-token gaps. ``--append-result`` files hold
one JSON object per line; the caller passes the one to import.
"""

from __future__ import annotations

import math
import re
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

FORMAT: Final = "vllm"
#: infersight metric → vLLM's name for it.
_METRICS: Final = {"ttft": "ttft", "tpot": "tpot", "e2e": "e2el"}
_PERCENTILE: Final = re.compile(r"^p(\d+(?:\.\d+)?)_([a-z0-9]+)_ms$")
_LABELS: Final = (
    "model_id",
    "backend",
    "label",
    "max_concurrency",
    "request_rate",
    "num_prompts",
    "date",
)


def looks_like(doc: Mapping[str, Any]) -> bool:
    return "request_throughput" in doc and "completed" in doc and "duration" in doc


def parse(doc: Any, *, name: str, created_at: datetime, description: str = "") -> Baseline:
    doc = mapping(doc, "the result", FORMAT)
    duration = number(doc, "duration", FORMAT)
    completed = int(number(doc, "completed", FORMAT))
    request_rate = number(doc, "request_throughput", FORMAT)
    output_rate = number(doc, "output_throughput", FORMAT)
    samples = _samples(doc)
    failed = _failed(doc, completed)
    latency: dict[str, LatencySummary] = {}
    for metric, theirs in _METRICS.items():
        found = summary(
            _quantiles(doc, theirs),
            _ms(optional_number(doc, f"mean_{theirs}_ms", FORMAT)),
            completed,
            samples.get(metric),
        )
        if found is not None:
            latency[metric] = found
    if not latency:
        raise InvalidInput(f"{FORMAT}: the result has no TTFT, TPOT or E2E statistics")
    labels = {key: label(doc.get(key)) for key in _LABELS if doc.get(key) is not None}
    if "model_id" in labels:
        labels["model"] = labels.pop("model_id")
    input_tokens = optional_number(doc, "total_input_tokens", FORMAT)
    output_tokens = optional_number(doc, "total_output_tokens", FORMAT)
    return Baseline(
        name=name,
        created_at=created_at,
        source=FORMAT,
        duration_s=duration,
        requests=completed + failed,
        errors=failed,
        request_throughput=request_rate,
        output_token_throughput=output_rate,
        latency=latency,
        input_tokens=None if input_tokens is None else int(input_tokens),
        output_tokens=None if output_tokens is None else int(output_tokens),
        description=description,
        labels=labels,
    )


def _ms(value: float | None) -> float | None:
    return None if value is None else value / 1000.0


def _quantiles(doc: Mapping[str, Any], metric: str) -> dict[float, float]:
    out: dict[float, float] = {}
    median = optional_number(doc, f"median_{metric}_ms", FORMAT)
    if median is not None:
        out[0.5] = median / 1000.0
    for key in doc:
        match = _PERCENTILE.match(key)
        if match and match.group(2) == metric:
            percent = float(match.group(1))
            if 0.0 <= percent <= 100.0:
                out[percent / 100.0] = number(doc, key, FORMAT) / 1000.0
    return out


def _failed(doc: Mapping[str, Any], completed: int) -> int:
    """``failed`` where the file has it; older versions only keep the detailed ``errors``."""
    if doc.get("failed") is not None:
        return int(number(doc, "failed", FORMAT))
    errors = doc.get("errors")
    if isinstance(errors, list):
        return sum(1 for e in errors if e)
    prompts = doc.get("num_prompts")
    return max(0, int(prompts) - completed) if isinstance(prompts, int) else 0


def _samples(doc: Mapping[str, Any]) -> dict[str, list[float]]:
    """Per-request TTFT, TPOT and E2E of the successful requests."""
    out = _detailed(doc)
    latencies = _latencies(doc)
    if latencies is not None:
        out["e2e"] = latencies
    return out


def _latencies(doc: Mapping[str, Any]) -> list[float] | None:
    """The E2E latency of each successful request, from ``latencies`` (``None`` without).

    A detailed file's ``errors`` tells the failures; a default one has no ``errors``, and a
    failed request's latency is never set (0), so only positive values count.
    """
    if doc.get("latencies") is None:
        return None
    values = check_samples(doc["latencies"], FORMAT, "latencies")
    errors = doc.get("errors")
    if isinstance(errors, list) and len(errors) != len(values):
        raise InvalidInput(f"{FORMAT}: latencies and errors have different lengths")
    flags = errors if isinstance(errors, list) else [""] * len(values)
    try:
        seconds = [float(v) for v, e in zip(values, flags, strict=True) if not e and v is not None]
    except (TypeError, ValueError):
        raise InvalidInput(f"{FORMAT}: a value in latencies is not a number") from None
    if any(not math.isfinite(v) or v < 0 for v in seconds):
        raise InvalidInput(f"{FORMAT}: latencies must be finite and non-negative")
    return [v for v in seconds if v > 0]


def _detailed(doc: Mapping[str, Any]) -> dict[str, list[float]]:
    """Per-request TTFT, TPOT and E2E of the successful requests of a ``--save-detailed`` file."""
    if doc.get("ttfts") is None or doc.get("itls") is None:
        return {}
    ttfts = check_samples(doc["ttfts"], FORMAT, "ttfts")
    itls = check_samples(doc["itls"], FORMAT, "itls")
    lens = check_samples(doc.get("output_lens") or [0] * len(ttfts), FORMAT, "output_lens")
    errors = check_samples(doc.get("errors") or [""] * len(ttfts), FORMAT, "errors")
    if not len(ttfts) == len(itls) == len(lens) == len(errors):
        raise InvalidInput(f"{FORMAT}: the per-request arrays have different lengths")
    out: dict[str, list[float]] = {"ttft": [], "tpot": [], "e2e": []}
    try:
        for ttft, gaps, length, error in zip(ttfts, itls, lens, errors, strict=True):
            if error or ttft is None:
                continue
            decode = float(sum(float(g) for g in gaps))
            out["ttft"].append(float(ttft))
            out["e2e"].append(float(ttft) + decode)
            if int(length) > 1:
                out["tpot"].append(decode / (int(length) - 1))
    except (TypeError, ValueError):
        raise InvalidInput(f"{FORMAT}: a per-request value is not a number") from None
    return out
