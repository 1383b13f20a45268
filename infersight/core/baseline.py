"""Performance baselines: what a release is compared against.

A ``Baseline`` is an immutable summary of one measurement — a time window of production
traffic, a load-test run, or a file imported from another load tester. It holds the latency
percentiles of TTFT, TPOT and end-to-end time, request and token throughput, the error ratio,
GPU utilisation and cost per million tokens where known, and, per latency metric, a serialised
``QuantileSketch`` of the whole distribution. The sketch is what lets a comparison tell a real
change from run-to-run noise (``core.baseline_compare`` bootstraps it); a baseline imported
from a summary-only file has quantiles but no sketch, and is compared on thresholds alone.

Everything here is pure: callers pass ``created_at`` and the samples; the store and the
importers build baselines through the constructors below. ``to_dict``/``from_dict`` are the
one JSON form, used by the store and the API alike.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from infersight.core.errors import InvalidInput
from infersight.core.money import Money
from infersight.core.quantiles import exact_quantiles
from infersight.core.query import Selector, Throughput
from infersight.core.sketch import QuantileSketch
from infersight.core.window import Window

# What other modules use (and the types its answers carry); the tuning constants and
# helpers left out are this module's own.
__all__ = [
    "BASELINE_QUANTILES",
    "LATENCY_METRICS",
    "Baseline",
    "LatencySummary",
    "check_name",
    "from_dict",
    "from_samples",
    "of_window",
    "renamed",
    "summary_dict",
    "to_dict",
]

#: The latency metrics a baseline keeps, as the API spells them.
LATENCY_METRICS: Final = ("ttft", "tpot", "e2e")
#: The quantiles a baseline keeps for each latency metric.
BASELINE_QUANTILES: Final = (0.5, 0.9, 0.95, 0.99)
#: Where a baseline came from.
SOURCES: Final = ("window", "run", "samples", "vllm", "llmperf", "aiperf", "guidellm")
FORMAT_VERSION: Final = 1

MAX_NAME_LEN: Final = 128
MAX_DESCRIPTION_LEN: Final = 1024
MAX_LABELS: Final = 32
MAX_LABEL_LEN: Final = 256
MAX_SKETCH_BYTES: Final = 1 << 20
#: Per-request values: a list or a numpy array.
Values = Sequence[float] | npt.NDArray[np.float64]
_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]*$")


def check_name(name: str) -> str:
    """A baseline name: letters, digits and ``._:@+-``, at most 128 characters."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_LEN or not _NAME.match(name):
        raise InvalidInput(
            "a baseline name is 1-128 letters, digits or ._:@+- and starts with a letter or digit",
            details={"name": str(name)[:MAX_NAME_LEN]},
        )
    return name


def _finite_non_negative(name: str, value: float | None) -> None:
    if value is not None and (not math.isfinite(value) or value < 0):
        raise InvalidInput(f"{name} must be a finite, non-negative number", details={name: value})


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """One latency metric of a baseline: quantiles (seconds) and, if known, the distribution."""

    count: int
    quantiles: Mapping[float, float]
    mean: float | None = None
    sketch: bytes | None = None
    """A serialised ``QuantileSketch`` of every value; ``None`` for summary-only imports."""

    def __post_init__(self) -> None:
        if self.count < 0:
            raise InvalidInput("a latency count cannot be negative")
        for q, value in self.quantiles.items():
            if not 0.0 <= q <= 1.0:
                raise InvalidInput("quantiles must be in [0, 1]", details={"quantile": q})
            _finite_non_negative(f"quantile {q}", value)
        _finite_non_negative("mean", self.mean)
        if self.sketch is not None:
            if len(self.sketch) > MAX_SKETCH_BYTES:
                raise InvalidInput("a baseline sketch is larger than 1 MiB")
            QuantileSketch.from_bytes(self.sketch)  # refuses corrupt bytes now, not at compare
        object.__setattr__(self, "quantiles", dict(sorted(self.quantiles.items())))

    @classmethod
    def of(cls, values: Values) -> LatencySummary:
        """Exact quantiles and a sketch of ``values`` (seconds)."""
        array = np.asarray(values, dtype=np.float64)
        if array.size == 0:
            return cls(0, {})
        sketch = QuantileSketch.of(array)  # validates: finite, non-negative
        return cls(
            count=int(array.size),
            quantiles=exact_quantiles(array, BASELINE_QUANTILES),
            mean=float(array.mean()),
            sketch=sketch.to_bytes(),
        )

    @classmethod
    def of_sketch(cls, sketch: QuantileSketch, quantiles: Mapping[float, float]) -> LatencySummary:
        """A summary whose quantiles were computed elsewhere (exactly, by the store)."""
        return cls(
            sketch.count, quantiles, sketch.mean, sketch.to_bytes() if sketch.count else None
        )

    def distribution(self) -> QuantileSketch | None:
        return QuantileSketch.from_bytes(self.sketch) if self.sketch is not None else None


@dataclass(frozen=True, slots=True)
class Baseline:
    """A named performance summary (see the module docstring)."""

    name: str
    created_at: datetime
    source: str
    duration_s: float
    requests: int
    """Every request measured, failed ones included."""
    errors: int
    request_throughput: float
    """Successful requests per second."""
    output_token_throughput: float
    """Output tokens per second."""
    latency: Mapping[str, LatencySummary]
    input_tokens: int | None = None
    output_tokens: int | None = None
    gpu_utilization: float | None = None
    """Mean GPU utilisation, a ratio in [0, 1]."""
    cost_per_million_tokens: Decimal | None = None
    description: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    """What was measured: model, instance, … selectors, or the load tester's settings."""
    window_start: datetime | None = None
    window_end: datetime | None = None

    def __post_init__(self) -> None:
        check_name(self.name)
        if self.created_at.tzinfo is None:
            raise InvalidInput("created_at must be timezone-aware")
        if self.source not in SOURCES:
            raise InvalidInput(
                f"unknown baseline source {self.source!r}", details={"allowed": SOURCES}
            )
        if not math.isfinite(self.duration_s) or self.duration_s <= 0:
            raise InvalidInput(
                "a baseline's duration must be positive", details={"duration_s": self.duration_s}
            )
        if self.requests < 0 or not 0 <= self.errors <= self.requests:
            raise InvalidInput(
                "requests and errors must satisfy 0 ≤ errors ≤ requests",
                details={"requests": self.requests, "errors": self.errors},
            )
        for name in ("request_throughput", "output_token_throughput", "gpu_utilization"):
            _finite_non_negative(name, getattr(self, name))
        if self.gpu_utilization is not None and self.gpu_utilization > 1.0:
            raise InvalidInput("gpu_utilization is a ratio in [0, 1]")
        for name in ("input_tokens", "output_tokens"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise InvalidInput(f"{name} cannot be negative")
        if self.cost_per_million_tokens is not None and not (
            self.cost_per_million_tokens.is_finite() and self.cost_per_million_tokens >= 0
        ):
            raise InvalidInput("cost_per_million_tokens must be a finite, non-negative amount")
        unknown = set(self.latency) - set(LATENCY_METRICS)
        if unknown:
            raise InvalidInput(
                f"unknown latency metrics {sorted(unknown)}", details={"allowed": LATENCY_METRICS}
            )
        if len(self.description) > MAX_DESCRIPTION_LEN:
            raise InvalidInput(f"a description is at most {MAX_DESCRIPTION_LEN} characters")
        _check_labels(self.labels)
        object.__setattr__(self, "labels", dict(sorted(self.labels.items())))
        object.__setattr__(
            self, "latency", {m: self.latency[m] for m in LATENCY_METRICS if m in self.latency}
        )

    @property
    def error_ratio(self) -> float | None:
        return self.errors / self.requests if self.requests else None


def _check_labels(labels: Mapping[str, str]) -> None:
    if len(labels) > MAX_LABELS:
        raise InvalidInput(f"a baseline has at most {MAX_LABELS} labels")
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidInput("baseline labels are strings")
        if not key or len(key) > 64 or len(value) > MAX_LABEL_LEN:
            raise InvalidInput(
                "a label name is 1-64 characters and its value at most 256",
                details={"label": key[:64]},
            )


# -- constructors ---------------------------------------------------------------------------


def from_samples(
    name: str,
    created_at: datetime,
    *,
    duration_s: float,
    ttft_s: Values,
    tpot_s: Values,
    e2e_s: Values,
    errors: int = 0,
    requests: int | None = None,
    input_tokens: int = 0,
    output_tokens: int = 0,
    source: str = "samples",
    description: str = "",
    labels: Mapping[str, str] | None = None,
    gpu_utilization: float | None = None,
    cost_per_million_tokens: Decimal | None = None,
    window_start: datetime | None = None,
    window_end: datetime | None = None,
) -> Baseline:
    """A baseline from per-request measurements, as a load generator records them.

    ``ttft_s``/``tpot_s``/``e2e_s`` are the values of the successful requests (each list may
    be shorter than the others: a one-token answer has no TPOT). ``requests`` defaults to the
    successful requests (``len(e2e_s)``) plus ``errors``; ``input_tokens``/``output_tokens``
    are totals over the run; ``duration_s`` is the run's wall-clock length.
    """
    if not math.isfinite(duration_s) or duration_s <= 0:
        raise InvalidInput("a run's duration must be positive", details={"duration_s": duration_s})
    total = len(e2e_s) + errors if requests is None else requests
    if errors < 0 or total < errors:
        raise InvalidInput("errors must be between 0 and the number of requests")
    return Baseline(
        name=name,
        created_at=created_at,
        source=source,
        duration_s=duration_s,
        requests=total,
        errors=errors,
        request_throughput=(total - errors) / duration_s,
        output_token_throughput=output_tokens / duration_s,
        latency={
            "ttft": LatencySummary.of(ttft_s),
            "tpot": LatencySummary.of(tpot_s),
            "e2e": LatencySummary.of(e2e_s),
        },
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        gpu_utilization=gpu_utilization,
        cost_per_million_tokens=cost_per_million_tokens,
        description=description,
        labels=dict(labels or {}),
        window_start=window_start,
        window_end=window_end,
    )


def renamed(baseline: Baseline, name: str, description: str | None = None) -> Baseline:
    """The same measurement under another name (and optionally another description)."""
    if description is None:
        return replace(baseline, name=name)
    return replace(baseline, name=name, description=description)


# -- the JSON form --------------------------------------------------------------------------


def to_dict(baseline: Baseline) -> dict[str, Any]:
    """The JSON form of a baseline (sketches base64-encoded; money as a decimal string)."""
    return {
        "version": FORMAT_VERSION,
        "name": baseline.name,
        "created_at": _iso(baseline.created_at),
        "source": baseline.source,
        "description": baseline.description,
        "labels": dict(baseline.labels),
        "window": (
            {"start": _iso(baseline.window_start), "end": _iso(baseline.window_end)}
            if baseline.window_start and baseline.window_end
            else None
        ),
        "duration_s": baseline.duration_s,
        "requests": baseline.requests,
        "errors": baseline.errors,
        "error_ratio": baseline.error_ratio,
        "request_throughput": baseline.request_throughput,
        "output_token_throughput": baseline.output_token_throughput,
        "input_tokens": baseline.input_tokens,
        "output_tokens": baseline.output_tokens,
        "gpu_utilization": baseline.gpu_utilization,
        "cost_per_million_tokens": (
            None
            if baseline.cost_per_million_tokens is None
            else str(baseline.cost_per_million_tokens)
        ),
        "latency": {metric: _summary_dict(s) for metric, s in baseline.latency.items()},
    }


def summary_dict(baseline: Baseline) -> dict[str, Any]:
    """``to_dict`` without the sketches: what a listing or an API answer shows."""
    data = to_dict(baseline)
    for summary in data["latency"].values():
        summary["distribution"] = summary.pop("sketch") is not None
    return data


def _summary_dict(summary: LatencySummary) -> dict[str, Any]:
    return {
        "unit": "s",
        "count": summary.count,
        "mean": summary.mean,
        "quantiles": {format(q, "g"): v for q, v in summary.quantiles.items()},
        "sketch": None if summary.sketch is None else base64.b64encode(summary.sketch).decode(),
    }


def from_dict(data: Mapping[str, Any]) -> Baseline:
    """Parse the JSON form; anything malformed is an ``InvalidInput`` naming the problem."""
    try:
        if data.get("version") != FORMAT_VERSION:
            raise InvalidInput(
                "unsupported baseline document version", details={"version": data.get("version")}
            )
        window = data.get("window")
        cost = data.get("cost_per_million_tokens")
        return Baseline(
            name=data["name"],
            created_at=_parse_time(data["created_at"]),
            source=data["source"],
            description=data.get("description", ""),
            labels=dict(data.get("labels") or {}),
            window_start=_parse_time(window["start"]) if window else None,
            window_end=_parse_time(window["end"]) if window else None,
            duration_s=float(data["duration_s"]),
            requests=int(data["requests"]),
            errors=int(data["errors"]),
            request_throughput=float(data["request_throughput"]),
            output_token_throughput=float(data["output_token_throughput"]),
            input_tokens=_optional_int(data.get("input_tokens")),
            output_tokens=_optional_int(data.get("output_tokens")),
            gpu_utilization=_optional_float(data.get("gpu_utilization")),
            cost_per_million_tokens=None if cost is None else Decimal(str(cost)),
            latency={m: _parse_summary(s) for m, s in dict(data.get("latency") or {}).items()},
        )
    except (KeyError, TypeError, ValueError, AttributeError, InvalidOperation) as exc:
        raise InvalidInput(f"malformed baseline document: {exc!r}"[:300]) from None


def _parse_summary(data: Mapping[str, Any]) -> LatencySummary:
    sketch = data.get("sketch")
    return LatencySummary(
        count=int(data["count"]),
        quantiles={float(q): float(v) for q, v in dict(data.get("quantiles") or {}).items()},
        mean=_optional_float(data.get("mean")),
        sketch=None if sketch is None else base64.b64decode(sketch, validate=True),
    )


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _iso(ts: datetime | None) -> str | None:
    return None if ts is None else ts.isoformat().replace("+00:00", "Z")


def _parse_time(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError("time without a time zone")
    return value


def of_window(
    name: str,
    created_at: datetime,
    window: Window,
    selector: Selector,
    total: Throughput,
    span: Window,
    latency: Mapping[str, LatencySummary | None],
    *,
    gpu_utilization: float | None,
    per_million: Money | None,
    description: str = "",
) -> Baseline:
    """A baseline of a window of production from what a store read: ``total`` (the
    selector's requests), ``span`` (the part of the window that holds data: the rates are
    over it), each metric's summary, the GPU utilisation and the cost per million tokens (its
    currency becomes the ``cost_currency`` label). ``window_start`` and ``window_end`` are the
    window asked for; a selector's tenant set is the ``tenants`` label (their union)."""
    labels = dict(selector.items())
    if selector.tenants is not None:
        labels["tenants"] = "|".join(sorted(selector.tenants))
    if per_million is not None:
        labels["cost_currency"] = per_million.currency
    return Baseline(
        name=name,
        created_at=created_at,
        source="window",
        duration_s=span.seconds,
        requests=total.requests,
        errors=total.errors,
        request_throughput=(total.requests - total.errors) / span.seconds,
        output_token_throughput=total.output_tokens / span.seconds,
        latency={m: s for m, s in latency.items() if s is not None},
        input_tokens=total.input_tokens,
        output_tokens=total.output_tokens,
        gpu_utilization=gpu_utilization,
        cost_per_million_tokens=None if per_million is None else per_million.amount,
        description=description,
        labels=labels,
        window_start=window.start,
        window_end=window.end,
    )
