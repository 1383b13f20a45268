"""Who spent it, as the Cost page shows it (template ``_attribution.html``):
``service.attribution.attributed_cost`` over the page's range, by tenant, team or workload
(the page's ``by`` parameter), each value's usage, idle and allocation with its goodput, the
fleet's usage and idle / unallocated cost adding up to its total, and how many values past the
top N were folded into ``(other)``."""

from __future__ import annotations

from typing import Any, Final

from infersight.api.context import AppContext
from infersight.api.dashboard import charts as svg
from infersight.api.dashboard.context import Context
from infersight.api.dashboard.formatting import money
from infersight.core.attribution import GROUPING_DIMENSIONS, OTHER
from infersight.core.cost import CostResult
from infersight.service.attribution import AttributedCost, attributed_cost, attributed_from
from infersight.service.cost_view import unit_cost_text

#: The page parameter naming the dimension.
PARAM: Final = "by"
#: Amounts are shown as computed, to the millionth, so that the columns visibly add up.
PLACES: Final = 6


def dimension_of(query: dict[str, str]) -> str:
    """The page's ``by``: tenant (the default), team or workload; anything else is tenant."""
    value = query.get(PARAM, "tenant")
    return value if value in GROUPING_DIMENSIONS else "tenant"


def _rows(answer: AttributedCost) -> list[dict[str, Any]]:
    currency = answer.currency
    total = answer.fleet_total
    out = []
    for share in answer.shares:
        line = share.line
        per_good = line.cost_per_million_good_tokens
        per_million = line.cost_per_million_tokens
        out.append(
            {
                "value": share.value,
                "label": share.label,
                "folded": share.folded,
                "other": share.value == OTHER,
                "unattributed": not share.value,
                "requests": line.requests,
                "tokens": line.tokens,
                "usage": money(share.usage, currency, PLACES),
                "idle": money(share.idle, currency, PLACES),
                "allocation": money(share.allocation, currency, PLACES),
                "share": float(share.allocation / total) if total else 0.0,
                "good_share": share.good_share,
                "per_million": "–"
                if per_million is None
                else unit_cost_text(per_million.amount, currency),
                "per_million_good": "–"
                if per_good is None
                else unit_cost_text(per_good.amount, currency),
            }
        )
    return out


def section(
    app: AppContext, ctx: Context, query: dict[str, str], priced: CostResult | None = None
) -> dict[str, Any]:
    """What ``_attribution.html`` renders. ``priced``: the page's own cost answer over the
    same range and filters (the Cost page's), grouped again instead of reading the range a
    second time."""
    dimension = dimension_of(query)
    base = {"dimension": dimension, "dimensions": GROUPING_DIMENSIONS, "param": PARAM}
    if ctx.filters:
        return {
            **base,
            "shown": False,
            "note": "Cost per tenant, team or workload adds up to the whole fleet's cost: "
            "clear the filters to see it.",
        }
    if priced is not None and priced.window == ctx.window:
        answer = attributed_from(priced.regrouped((dimension,)), app.settings.attribution_top_n)
    else:
        answer = attributed_cost(
            app.store.cost,
            ctx.window,
            app.cost_model(),
            dimension,
            app.settings.attribution_top_n,
            finest=app.retention.finest_for(ctx.window, ctx.now),
        )
    currency = answer.currency
    total = answer.fleet_total
    rows = _rows(answer)
    bars = []
    if total > 0:
        bars = [
            (
                f"by {dimension}",
                [(row["label"], row["share"]) for row in rows if row["share"] > 0],
            )
        ]
    requests = answer.total.requests
    top = answer.top
    return {
        **base,
        "shown": True,
        "rows": rows,
        "usage": money(answer.usage, currency, PLACES),
        "idle": money(answer.idle, currency, PLACES),
        "total": money(total, currency, PLACES),
        "requests": requests,
        "attributed": answer.attributed_requests,
        "attributed_share": answer.attributed_requests / requests if requests else None,
        "top_n": top.top_n,
        "value_count": top.values,
        "folded": top.folded,
        "chart": svg.stacked_bars(bars, label=f"shares of the range's cost by {dimension}"),
    }
