"""Threshold parsing of baseline comparisons, shared by ``GET /api/v1/baselines/{name}/compare``
and ``infersight baseline compare``."""

from __future__ import annotations

from infersight.core.errors import InvalidInput


def parse_thresholds(text: str) -> dict[str, float]:
    """``"ttft.p99:0.2,tpot:0.15"`` → ``{"ttft.p99": 0.2, "tpot": 0.15}``."""
    out: dict[str, float] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        metric, sep, value = item.partition(":")
        try:
            out[metric.strip()] = float(value)
        except ValueError:
            raise InvalidInput(
                "thresholds are METRIC:NUMBER pairs", details={"thresholds": text[:200]}
            ) from None
        if not sep:
            raise InvalidInput("thresholds are METRIC:NUMBER pairs")
    return out
