"""What the load-tester importers share: typed reads of a parsed JSON document, unit
conversion, and latency summaries from reported percentiles plus (optionally) samples.

Every reader raises ``InvalidInput`` naming the key and the format, so a wrong or truncated
file is a clear error rather than a ``KeyError``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np

from infersight.core.baseline import LatencySummary
from infersight.core.errors import InvalidInput

#: Seconds per unit, for the units load testers write.
UNIT_SECONDS: Final = {"s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
#: At most this many per-request samples are read from one file.
MAX_SAMPLES: Final = 1_000_000


def mapping(value: Any, what: str, fmt: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidInput(f"{fmt}: {what} must be a JSON object")
    return value


def number(doc: Mapping[str, Any], key: str, fmt: str, *, default: float | None = None) -> float:
    """A finite, non-negative number at ``doc[key]`` (numeric strings too: LLMPerf writes some)."""
    value = doc.get(key)
    if value is None:
        if default is None:
            raise InvalidInput(f"{fmt}: the result has no {key!r}", details={"key": key})
        return default
    try:
        result = float(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"{fmt}: {key!r} is not a number", details={"key": key}) from None
    if not math.isfinite(result) or result < 0:
        raise InvalidInput(f"{fmt}: {key!r} must be finite and non-negative", details={"key": key})
    return result


def optional_number(doc: Mapping[str, Any], key: str, fmt: str) -> float | None:
    return None if doc.get(key) is None else number(doc, key, fmt)


def seconds_per(unit: Any, fmt: str, what: str) -> float:
    if unit not in UNIT_SECONDS:
        raise InvalidInput(
            f"{fmt}: unknown time unit {unit!r} for {what}",
            details={"allowed": sorted(UNIT_SECONDS)},
        )
    return UNIT_SECONDS[unit]


def summary(
    quantiles: Mapping[float, float],
    mean: float | None,
    count: int,
    samples: Sequence[float] | None = None,
) -> LatencySummary | None:
    """A summary from the file's own percentiles (authoritative) and, when the file also has
    per-request values, their exact quantiles for the rest and their sketch."""
    if samples is not None and len(samples):
        measured = LatencySummary.of(np.asarray(samples, dtype=np.float64))
        return LatencySummary(
            count=measured.count,
            quantiles={**measured.quantiles, **quantiles},
            mean=measured.mean if mean is None else mean,
            sketch=measured.sketch,
        )
    if not quantiles:
        return None
    return LatencySummary(count=count, quantiles=quantiles, mean=mean)


def check_samples(values: Any, fmt: str, what: str) -> list[Any]:
    if not isinstance(values, list):
        raise InvalidInput(f"{fmt}: {what} must be a JSON array")
    if len(values) > MAX_SAMPLES:
        raise InvalidInput(f"{fmt}: more than {MAX_SAMPLES} requests in {what}")
    return values


def label(value: Any) -> str:
    """A label value from any JSON scalar (``None`` → empty), at most 256 characters."""
    return "" if value is None else str(value)[:256]
