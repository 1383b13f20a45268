"""``alerts.lifecycle.judge``: when a later diagnosis may replace an incident's headline."""

from __future__ import annotations

from typing import Any

import pytest

from infersight.alerts.lifecycle import Verdict, judge


def d(cause: str, confidence: float, instance: str | None = "vllm-8b-0") -> dict[str, Any]:
    return {"cause": cause, "confidence": confidence, "instance": instance, "evidence": []}


HEADLINE = d("instance_degraded", 0.6)


@pytest.mark.parametrize(
    ("name", "headline", "latest", "previous", "verdict"),
    [
        ("the same cause keeps the headline", HEADLINE, d("instance_degraded", 0.9),
         d("instance_degraded", 0.9), Verdict.KEPT),
        ("healthy minutes (unknown) never replace it", HEADLINE, d("unknown", 0.2, None),
         d("unknown", 0.2, None), Verdict.KEPT),
        ("a fault on another instance never replaces it", d("overload", 0.81),
         d("kv_cache_pressure", 1.0, "vllm-8b-1"), d("kv_cache_pressure", 1.0, "vllm-8b-1"),
         Verdict.KEPT),
        ("a cause only a little stronger keeps it", HEADLINE, d("overload", 0.7),
         d("overload", 0.7), Verdict.KEPT),
        ("a clearly stronger cause, seen once, waits for confirmation", HEADLINE,
         d("overload", 0.81), HEADLINE, Verdict.KEPT),
        ("a clearly stronger cause, seen twice on the same instance, is raised", HEADLINE,
         d("overload", 0.81), d("overload", 0.81), Verdict.RAISED),
        ("a weak headline is not replaced by a weak cause", d("unknown", 0.2, None),
         d("queue_backlog", 0.4), d("queue_backlog", 0.4), Verdict.KEPT),
        ("a scope-wide headline may be replaced on any instance", d("unknown", 0.2, None),
         d("overload", 0.81, "vllm-8b-1"), d("overload", 0.81, "vllm-8b-1"), Verdict.RAISED),
        ("confirmation must be on the same instance", d("unknown", 0.2, None),
         d("overload", 0.81, "vllm-8b-1"), d("overload", 0.81, "vllm-8b-0"), Verdict.KEPT),
    ],
)  # fmt: skip
def test_judge(
    name: str,
    headline: dict[str, Any],
    latest: dict[str, Any],
    previous: dict[str, Any],
    verdict: Verdict,
) -> None:
    assert judge(headline, latest, previous) is verdict, name
