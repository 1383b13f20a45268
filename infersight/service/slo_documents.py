"""An SLO as its infersight/v1 document (``core.slo.SloSpec`` → dict), apart from the parser.

``service.specs`` reads documents with pydantic and yaml; writing one needs neither, and
``infersight slo list`` writes one per SLO, so it lives here (``service.specs`` re-exports it).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Final

from infersight.core.slo import SliKind, SloSpec
from infersight.core.window import format_duration

API_VERSION: Final = "infersight/v1"


def window_text(window: timedelta) -> str:
    """SLO windows read in days (``28d``, not ``4w``) when they are whole days."""
    seconds = int(window.total_seconds())
    return f"{seconds // 86400}d" if seconds % 86400 == 0 else format_duration(window)


def to_document(spec: SloSpec) -> dict[str, Any]:
    """The infersight/v1 document of ``spec`` (what ``GET`` returns and ``apply`` accepts)."""
    if spec.sli.kind is SliKind.LATENCY:
        sli: dict[str, Any] = {
            "latency": {"metric": spec.sli.metric, "threshold": f"{spec.sli.threshold_s:g}s"}
        }
    elif spec.sli.kind is SliKind.GOODPUT:
        goodput: dict[str, Any] = {metric: f"{s:g}s" for metric, s in spec.sli.targets}
        goodput["per"] = spec.sli.per.value if spec.sli.per else "request"
        sli = {"goodput": goodput}
    else:
        sli = {"availability": {}}
    return {
        "apiVersion": API_VERSION,
        "kind": "SLO",
        "metadata": {"name": spec.name, "description": spec.description},
        "spec": {
            "sli": sli,
            "selector": dict(spec.selector.items()),
            "window": window_text(spec.window),
            "objective": spec.objective,
        },
    }
