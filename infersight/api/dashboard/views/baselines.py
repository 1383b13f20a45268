"""The Baselines page: the stored baselines, and the selected one (``?baseline=``, else the
newest) compared with the page's range and filters exactly as
``GET /api/v1/baselines/{name}/compare`` does (a fixed bootstrap seed, so a reload gives the
same verdicts). With nothing stored, the page says how to capture one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from infersight.api.context import AppContext
from infersight.api.dashboard.context import Context
from infersight.core.baseline_compare import Policy
from infersight.core.errors import InfersightError, InvalidInput
from infersight.core.query import Selector
from infersight.core.records import GROUP_LABELS
from infersight.core.slo import scope_of
from infersight.service import baselines as service

NAME: Final = "baselines"
TITLE: Final = "Baselines"
DEFAULT_RANGE: Final = "1h"
#: The query parameters of this page (besides the range and filters every page reads).
PARAMS: Final = ("baseline",)
MAX_LISTED: Final = 50
#: Bootstrap resamples of a comparison: fewer than the release gate's 1000 (a page must stay
#: fast); the intervals are a little wider, the verdicts the same but at the margin.
BOOTSTRAP: Final = 200


def page(app: AppContext, ctx: Context, query: dict[str, str]) -> dict[str, Any]:
    name = query.get("baseline", "")
    ctx_b = ctx.with_extra(**({"baseline": name} if name else {}))
    return {**baselines(app, ctx_b, name), "ctx": ctx_b}


def baselines(app: AppContext, ctx: Context, name: str) -> dict[str, Any]:
    stored = service.list_baselines(app.store, MAX_LISTED)
    if not stored:
        return {
            "available": False,
            "reason": "No baselines are stored yet.",
            "hint": "Capture one with infersight baseline capture, or from a load test "
            "with infersight loadtest --capture-baseline.",
        }
    chosen = next((b for b in stored if b.name == name), None) if name else stored[0]
    if chosen is None:
        raise InvalidInput(f"no baseline named {name!r}")
    # Like for like: without filters on the page, the window is read with the baseline's own.
    selector = ctx.selector if ctx.filters else _selector_of(chosen.labels)
    cost_model = app.cost_model()
    out: dict[str, Any] = {
        "available": True,
        "baselines": stored,
        "chosen": chosen,
        "scope": scope_of(selector),
        "currency": cost_model.currency,
    }
    try:
        candidate = service.window_candidate(
            app.store,
            ctx.window,
            selector,
            ctx.now,
            finest=app.retention.finest_for(ctx.window, ctx.now),
            exact_max_rows=0,  # sketches (±1 %): a page must stay fast over any range
            cost_model=cost_model,
        )
    except InfersightError as exc:
        out["comparison"], out["comparison_error"] = None, exc.message
        return out
    result = service.compare(chosen, candidate.baseline, Policy(resamples=BOOTSTRAP))
    out["comparison"], out["comparison_error"] = result, ""
    return out


def _selector_of(labels: Mapping[str, str]) -> Selector:
    return Selector(**{k: v for k, v in labels.items() if k in GROUP_LABELS})
