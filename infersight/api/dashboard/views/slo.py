"""One SLO's page (``/ui/slos/{name}``): its definition, its status over its own window, the
burn rate of every policy window with the rules that watch them, and its open incident.

A goodput SLO's page also says why its bad events were bad over the page's range — failed, or
which target they missed (one alone, or several: the joint condition the single-metric SLOs
cannot see) — and what its scope's good tokens cost there, held to its own targets
(``service.slos.good_token_cost``).
"""

from __future__ import annotations

from typing import Any, Final

from infersight.api.context import AppContext
from infersight.api.dashboard import charts as svg
from infersight.api.dashboard.context import Context
from infersight.core.errors import InvalidInput
from infersight.core.slo import NAME_PATTERN, GoodputUnit, SliKind, SloSpec, targets_text
from infersight.core.window import format_duration
from infersight.service.cost_view import unit_cost_text
from infersight.service.slos import get_slo, good_token_cost, goodput_misses, with_status

NAME: Final = "overview"
"""The page the navigation marks (SLOs are listed on the overview)."""
TEMPLATE: Final = "slo.html"
DEFAULT_RANGE: Final = "1h"


def page(app: AppContext, ctx: Context, query: dict[str, str]) -> dict[str, Any]:
    name = query.get("slo_name", "")
    if not NAME_PATTERN.fullmatch(name):
        raise InvalidInput("an SLO name is 1–128 lowercase letters, digits, '.', '_' or '-'")
    spec = get_slo(app.store, name)
    [view] = with_status(app.store, [spec], app.policy, ctx.now, app.retention.finest_for)
    status = view.status
    rates = status.evaluation.burn_rates
    rules = [
        {
            "severity": rule.severity.value,
            "rate": rule.burn_rate,
            "long": format_duration(rule.long_window),
            "short": format_duration(rule.short_window),
            "long_rate": rates.get(rule.long_window, 0.0),
            "short_rate": rates.get(rule.short_window, 0.0),
            "fired": rule in status.evaluation.fired_rules,
        }
        for rule in app.policy.rules
    ]
    return {
        "slo": spec,
        "sli_text": sli_text(spec),
        "unit": unit_of(spec),
        "status": status,
        "firing": view.firing,
        "burns": [(format_duration(w), rates.get(w, 0.0)) for w in sorted(app.policy.windows)],
        "rules": rules,
        **goodput_part(app, ctx, spec),
    }


def unit_of(spec: SloSpec) -> str:
    return "output tokens" if spec.sli.per is GoodputUnit.TOKEN else "requests"


def sli_text(spec: SloSpec) -> str:
    if spec.sli.kind is SliKind.AVAILABILITY:
        return "requests succeed"
    if spec.sli.kind is SliKind.GOODPUT:
        return f"goodput: succeeded with {targets_text(spec.sli)} together"
    return f"{(spec.sli.metric or '').upper()} ≤ {svg.seconds(spec.sli.threshold_s or 0.0)}"


def goodput_part(app: AppContext, ctx: Context, spec: SloSpec) -> dict[str, Any]:
    """A goodput SLO's misses and good-token cost over the page's range (nothing for others)."""
    if spec.sli.kind is not SliKind.GOODPUT:
        return {"misses": None, "good_cost": None}
    found = goodput_misses(app.store, spec.sli, ctx.window, spec.selector)
    rows: list[dict[str, Any]] = [{"what": "failed", "events": found["failed"]}]
    for metric, seconds in spec.sli.targets:
        rows.append(
            {
                "what": f"{metric.upper()} over {svg.seconds(seconds)} only",
                "events": found[f"only_{metric}"],
            }
        )
    if len(spec.sli.targets) > 1:
        rows.append({"what": "more than one target missed", "events": found["several"]})
    for row in rows:
        row["share"] = row["events"] / found["bad"] if found["bad"] else None
    finest = app.retention.finest_for(ctx.window, ctx.now)
    cost = good_token_cost(app.store, spec, app.cost_model(), ctx.window, finest)
    if cost is not None:  # no tokens in the range: no per-million figures (and no 500)
        good, every = cost["cost_per_million_good_tokens"], cost["cost_per_million_tokens"]
        cost["per_million_good_text"] = (
            unit_cost_text(good, cost["currency"]) if good is not None else None
        )
        cost["per_million_text"] = (
            unit_cost_text(every, cost["currency"]) if every is not None else None
        )
    return {
        "misses": {"events": found["events"], "bad": found["bad"], "rows": rows},
        "good_cost": cost,
    }
