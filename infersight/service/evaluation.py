"""SLO status and the evaluation job: counts → burn rates → alert state → incidents → listeners.

``status`` computes one SLO's SLI, budget and burn rates at ``now`` (read-only; used by the
routes and ``/metrics``). ``Evaluator.run`` does that for every stored SLO, steps each alert
state (``core.burn.step``: an open incident whose symptom has cleared is recovering, and
resolves once it stays cleared for the policy's ``resolve_after``), persists the outcome
(the store's ``incidents``) and then tells the ``IncidentListener``s (diagnosis and
notifications live behind that seam).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib import resources
from typing import Any

import yaml

from infersight.core.budget import is_money_alert
from infersight.core.burn import (
    Evaluation,
    Incident,
    IncidentListener,
    Policy,
    Transition,
    evaluate,
    policy_from_mapping,
    step,
)
from infersight.core.slo import EventCounts, SloSpec, budget_remaining, sli_value
from infersight.core.window import Resolution, Window, format_duration
from infersight.storage.seam import EventCounter, Store, alert_state

log = logging.getLogger(__name__)
FinestFor = Callable[[Window, datetime], Resolution]


def default_policy() -> Policy:
    """The SRE workbook's policy shipped in ``core/data/burn_rate_policy.yaml``."""
    text = resources.files("infersight.core").joinpath("data/burn_rate_policy.yaml").read_text()
    return policy_from_mapping(yaml.safe_load(text))


@dataclass(frozen=True, slots=True)
class SloStatus:
    spec: SloSpec
    at: datetime
    counts: EventCounts
    """Events over the SLO's own window."""
    evaluation: Evaluation

    @property
    def sli(self) -> float | None:
        return sli_value(self.counts)

    @property
    def budget_remaining(self) -> float:
        return budget_remaining(self.counts, self.spec.objective)

    def burn_rates(self) -> dict[str, float]:
        return {format_duration(w): r for w, r in self.evaluation.burn_rates.items()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "evaluated_at": self.at.isoformat().replace("+00:00", "Z"),
            "sli": self.sli,
            "objective": self.spec.objective,
            "events": self.counts.total,
            "bad_events": self.counts.bad,
            "error_budget_remaining": self.budget_remaining,
            "burn_rates": self.burn_rates(),
            "firing": self.evaluation.firing.value if self.evaluation.firing else None,
        }


def status(counter: EventCounter, spec: SloSpec, policy: Policy, now: datetime) -> SloStatus:
    """One SLO's status at ``now``, counted by ``counter`` (``store.events.cycle(now, …)``),
    which the SLOs of one cycle share."""
    lengths = sorted({*policy.windows, spec.window})
    counts = counter.count(spec, lengths)
    evaluation = evaluate(policy, spec.objective, counts)
    return SloStatus(spec, now, counts[spec.window], evaluation)


def windows_of(policy: Policy, specs: Iterable[SloSpec]) -> set[timedelta]:
    """Every window a cycle over ``specs`` counts (``CycleCounter.prepare``)."""
    return {*policy.windows, *(spec.window for spec in specs)}


@dataclass(frozen=True, slots=True)
class RunReport:
    slos: int
    changes: tuple[tuple[Incident, Transition], ...]
    seconds: float


class Evaluator:
    """Evaluates every stored SLO; one ``run`` per scheduler interval (on the leader only).

    A cycle is incremental: its counts go through a cache of rollup rows kept across cycles
    (by default the process's cache for the store, shared with ``/metrics`` and the pages:
    ``store.events.cycle``), so it decodes only the rollup rows that changed since the
    previous cycle. It
    counts first, on a read-only connection, yielding the GIL between SLOs (the API's pages
    run in the same process), and only then writes the alert states in one short
    transaction: on SQLite a write transaction blocks the sidecars' writers, so none is held
    while counting.

    ``latest`` keeps the last cycle's statuses (replaced whole, so a reader in another thread
    sees one cycle's): the dashboard's overview shows them while they are fresh instead of
    counting every SLO again per page view (``service.slos.with_status``).
    """

    def __init__(
        self,
        store: Store,
        policy: Policy,
        listeners: Sequence[IncidentListener] = (),
        finest_for: FinestFor | None = None,
        cache: object | None = None,
    ) -> None:
        self.store = store
        self.policy = policy
        self.listeners = tuple(listeners)
        self.finest_for = finest_for
        self.cache = cache  # None: the process's cache for the store
        self.latest: tuple[SloStatus, ...] = ()

    def run(self, now: datetime) -> RunReport:
        started = time.perf_counter()
        specs = self.store.slos.all()
        statuses = []
        with self.store.events.cycle(now, self.finest_for, self.cache) as counter:
            counter.prepare(windows_of(self.policy, specs), [spec.sli for spec in specs])
            for spec in specs:
                statuses.append(status(counter, spec, self.policy, now))
                time.sleep(0)  # let the request threads in between SLOs
        self.latest = tuple(statuses)
        changes: list[tuple[Incident, Transition]] = []
        # One transaction for the writes: the leader is the only writer of incidents.
        with self.store.transaction() as tx:
            open_incidents = tx.incidents.all_firing()
            for current in statuses:
                spec = current.spec
                found = open_incidents.pop((spec.name, spec.scope), None)
                change = self._one(tx, current, now, found)
                if change is not None:
                    changes.append(change)
            # Open incidents of SLOs that were deleted or re-scoped since the last cycle (money
            # alerts are the budget job's: ``service.budgets``).
            orphaned = (i.id for i in open_incidents.values() if not is_money_alert(i.slo))
            orphans = tx.incidents.resolve(orphaned, now)
            changes += [(incident, Transition.RESOLVED) for incident in orphans]
        for incident, transition in changes:
            self._notify(incident, transition)
        return RunReport(len(specs), tuple(changes), time.perf_counter() - started)

    def _one(
        self,
        tx: Store,
        current: SloStatus,
        now: datetime,
        open_incident: Incident | None,
    ) -> tuple[Incident, Transition] | None:
        spec = current.spec
        previous = alert_state(open_incident)
        state, transition = step(previous, current.evaluation, now)
        if not previous.active and not state.active:
            return None
        incident = tx.incidents.apply_step(
            spec.name,
            spec.scope,
            state,
            transition,
            current.burn_rates(),
            now,
            current=open_incident,
            recovering=state.recovering_since is not None,
        )
        if incident is None or transition is Transition.NONE:
            return None
        return incident, transition

    def retire(self, slo: str, now: datetime) -> list[Incident]:
        """Resolve (and announce) the open incidents of an SLO that was just deleted."""
        with self.store.transaction() as tx:
            resolved = tx.incidents.resolve_all(slo, now)
        for incident in resolved:
            self._notify(incident, Transition.RESOLVED)
        return resolved

    def _notify(self, incident: Incident, transition: Transition) -> None:
        for listener in self.listeners:
            try:
                listener.on_incident(incident, transition)
            except Exception:
                log.exception("incident listener %r failed", listener)
