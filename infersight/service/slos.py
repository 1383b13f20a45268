"""SLOs with their live status: what ``GET /api/v1/slos`` and the dashboard's overview show; the
SLOs a caller may see, one SLO, its deletion, and a goodput SLO's misses."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from infersight.core.burn import Incident, Policy
from infersight.core.cost import CostModel
from infersight.core.query import Selector, within_tenants
from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.core.timestamps import iso
from infersight.core.window import Resolution, Window
from infersight.service.cost_view import amount
from infersight.service.evaluation import FinestFor, SloStatus, status, windows_of
from infersight.storage.seam import Store


@dataclass(frozen=True, slots=True)
class SloView:
    spec: SloSpec
    status: SloStatus
    firing: Incident | None
    """The open incident of the SLO's scope, if any."""


def with_status(
    store: Store,
    specs: Sequence[SloSpec],
    policy: Policy,
    now: datetime,
    finest_for: FinestFor,
    recent: Sequence[SloStatus] = (),
    max_age: timedelta = timedelta(0),
) -> list[SloView]:
    """Each SLO's status at ``now``; the SLOs share one counter (one read per segment).

    ``recent`` (an evaluation cycle's statuses, ``Evaluator.latest``) is used instead when it
    holds exactly ``specs`` and was evaluated at most ``max_age`` before ``now``: counting 50
    SLOs over their 30-day windows again per page view costs about as much as the cycle itself,
    and those are the figures the open incidents were decided on. Firing incidents are read
    afresh either way."""
    fresh = (
        len(recent) == len(specs)
        and all(s.spec == spec for s, spec in zip(recent, specs, strict=True))
        and all(now - max_age <= s.at <= now for s in recent)
    )
    views = []
    with store.reading() as reader:
        firing = reader.incidents.all_firing()
        if fresh:
            return [SloView(s.spec, s, firing.get((s.spec.name, s.spec.scope))) for s in recent]
        with reader.events.cycle(now, finest_for) as counter:
            counter.prepare(windows_of(policy, specs), [spec.sli for spec in specs])
            for spec in specs:
                current = status(counter, spec, policy, now)
                views.append(SloView(spec, current, firing.get((spec.name, spec.scope))))
    return views


def good_token_cost(
    store: Store,
    spec: SloSpec,
    model: CostModel,
    window: Window,
    finest: Resolution = Resolution.MINUTE,
) -> dict[str, Any] | None:
    """What a goodput SLO's good tokens cost over ``window``: the cost of its scope (``spec``'s
    selector) per million good tokens, where a good token is a token (input or output) of a
    request that met *this* SLO's targets together (``store.cost`` with ``slos=[spec]``:
    the same judgement as its SLI). ``None`` for another kind of SLO."""
    if spec.sli.kind is not SliKind.GOODPUT:
        return None
    result = store.cost.cost(window, model, spec.selector, finest=finest, slos=[spec])
    total = result.total
    per_good = total.cost_per_million_good_tokens
    per_token = total.cost_per_million_tokens
    return {
        "window": {"start": iso(window.start), "end": iso(window.end)},
        "currency": result.currency,
        "cost": amount(total.cost),
        "tokens": total.tokens,
        "good_tokens": total.good_tokens,
        "cost_per_million_tokens": amount(per_token.amount) if per_token else None,
        "cost_per_million_good_tokens": amount(per_good.amount) if per_good else None,
        "good_tokens_exact": result.good_tokens_exact,
        "example_prices": result.example_prices,
        "unmetered": list(result.unmetered),
    }


def list_slos(store: Store, tenants: frozenset[str] | None = None) -> list[SloSpec]:
    """Every SLO; for a caller limited to ``tenants`` (``None``: not limited), those whose
    selector lies within them (``core.query.within_tenants``)."""
    return [s for s in store.slos.all() if within_tenants(tenants, dict(s.selector.items()))]


def get_slo(store: Store, name: str) -> SloSpec:
    """SLO ``name`` (``NotFound`` when there is none)."""
    return store.slos.get(name)


def put_slos(store: Store, specs: Sequence[SloSpec], now: datetime) -> list[bool]:
    """Create or replace each of ``specs`` (already read, e.g. the demo's) as of ``now``;
    whether each was created."""
    return [store.slos.put(spec, now) for spec in specs]


def delete_slo(store: Store, name: str) -> None:
    """Delete SLO ``name`` (``NotFound`` when there is none)."""
    store.slos.delete(name)


def goodput_misses(store: Store, sli: Sli, window: Window, selector: Selector) -> dict[str, int]:
    """Why a goodput SLI's bad events over ``window`` were bad: ``events``, ``bad``,
    ``failed``, ``only_<metric>`` per target missed alone, and ``several``."""
    return store.events.goodput_misses(sli, window, selector)


def statuses(
    store: Store, policy: Policy, now: datetime, finest_for: FinestFor, *, cached: bool = True
) -> list[SloStatus]:
    """Every stored SLO's status at ``now``, counted in one cycle of the event store (what
    ``/metrics`` exports and ``infersight slo list`` prints: no incident is read);
    ``cached=False``: no rollup cache kept for a next cycle (a command that counts once)."""
    with store.events.cycle(now, finest_for, cached=cached) as counter:
        specs = store.slos.all()
        counter.prepare(windows_of(policy, specs), [spec.sli for spec in specs])
        return [status(counter, spec, policy, now) for spec in specs]
