"""SLOs with their live status: what ``GET /api/v1/slos`` and the dashboard's overview show."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine

from core.burn import Incident, Policy
from core.slo import SloSpec
from service.evaluation import FinestFor, SloStatus, status, windows_of
from storage import incidents, slo_store


@dataclass(frozen=True, slots=True)
class SloView:
    spec: SloSpec
    status: SloStatus
    firing: Incident | None
    """The open incident of the SLO's scope, if any."""


def with_status(
    engine: Engine,
    specs: Sequence[SloSpec],
    policy: Policy,
    now: datetime,
    finest_for: FinestFor,
) -> list[SloView]:
    """Each SLO's status at ``now``; the SLOs share one counter (one read per segment)."""
    views = []
    with engine.connect() as connection:
        counter = slo_store.CycleCounter(
            connection, now, finest_for, slo_store.rollup_cache(engine)
        )
        counter.prepare(windows_of(policy, specs), [spec.sli for spec in specs])
        firing = incidents.all_firing(connection)
        for spec in specs:
            current = status(connection, spec, policy, now, finest_for, counter)
            views.append(SloView(spec, current, firing.get((spec.name, spec.scope))))
    return views
