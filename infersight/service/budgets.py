"""Budgets (``kind: Budget`` documents) and the money alerts: budget burn and cost steps.

::

    apiVersion: infersight/v1
    kind: Budget
    metadata: {name: acme-monthly, description: "…"}
    spec:
      scope: {tenant: acme}        # or {model: llama-70b}; omitted: the whole fleet
      period: monthly              # calendar month (UTC), or weekly (ISO week, from Monday)
      amount: "12000"              # in the cost model's currency
      currency: USD                # must be the cost model's
      thresholds: [0.8, 1.0]       # fractions of the amount spent: below 1 a ticket, else a page
      burn:                        # optional; these are the defaults
        - {severity: page, burnRate: 6, longWindow: 6h, shortWindow: 1h}
        - {severity: ticket, burnRate: 1.5, longWindow: 3d, shortWindow: 6h}

Applying a document whose budget differs from the stored one adds a version (``storage.
budgets``). A ``team`` scope covers the requests their traces' gateway or client spans name
the team of (``core.attribution``).

``budget_status`` prices the period so far and the rules' windows with the cost model in use
(``storage.cost.cost``), projects the period's end, and judges the alert
(``core.budget.evaluate_budget``). ``MoneyAlerts`` is the scheduled job: every budget's alert
goes through ``core.burn.step`` into the incidents table (named ``budget:<name>``), with its
evidence stored as the incident's diagnosis and announced through the same ``Announcer`` (the
outbox, routes, silences, flap hold-down) as SLO incidents; then the cost-step alert
(``cost-step:fleet`` and ``cost-step:<model>``) compares the last hours' cost per million
tokens with the same hours of the previous days, the baseline priced with the cost model
version in force then (``storage.budgets.model_at``), and names its likely cause.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Final, Protocol

from pydantic import BaseModel, ConfigDict, Field

from infersight.core.budget import (
    BUDGET_PREFIX,
    COST_STEP_PREFIX,
    DEFAULT_RULES,
    DEFAULT_THRESHOLDS,
    Budget,
    BudgetFigures,
    CostSample,
    Period,
    StepJudgement,
    StepPolicy,
    burn_text,
    evaluate_budget,
    judge_step,
    merge_samples,
    period_bounds,
)
from infersight.core.burn import AlertState, Evaluation, Incident, Rule, Severity, Transition, step
from infersight.core.cost import CostLine, CostModel
from infersight.core.errors import InvalidInput
from infersight.core.query import Selector, within_tenants
from infersight.core.window import Window, format_duration, parse_duration
from infersight.service.cost_spec import decimal_of
from infersight.service.cost_view import amount
from infersight.service.documents import (
    Document,
    DocumentKind,
    Header,
    Reading,
    at,
    read_value,
    read_values,
)
from infersight.service.purchasing import ADVICE_DAYS, Purchasing, purchasing
from infersight.storage.seam import FinestFor, Store, alert_state

log = logging.getLogger(__name__)
API_VERSION: Final = "infersight/v1"
KIND: Final = "Budget"
#: Spenders named in a budget alert's evidence.
TOP_SPENDERS: Final = 5
#: The cost-step alert's recent window and how many previous days its baseline takes.
STEP_WINDOW: Final = timedelta(hours=6)
STEP_DAYS: Final = 7
#: Models the cost-step alert looks at besides the fleet (the biggest spenders).
STEP_MODELS: Final = 20
DEFAULT_STEP: Final = StepPolicy()
#: What a spender line names as its model when its instance served nothing (idle GPUs).
IDLE_LABEL: Final = "(idle, no model)"
Amount = str | float | int


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Rule(_Strict):
    severity: str
    burnRate: float
    longWindow: str
    shortWindow: str


class _Spec(_Strict):
    scope: dict[str, str] = Field(default_factory=dict)
    period: str = "monthly"
    amount: Amount
    currency: str
    thresholds: list[Amount] | None = None
    burn: list[_Rule] | None = None


def parse_budget(data: dict[str, Any]) -> Budget:
    """One Budget document (a mapping) → ``Budget``; ``InvalidInput`` says what is wrong."""
    return read_value(data, BUDGET)


def _budget(header: Header, s: _Spec) -> Budget:
    if s.period not in {p.value for p in Period}:
        raise InvalidInput(
            f"period must be monthly or weekly, got {s.period!r}",
            details={"allowed": [p.value for p in Period]},
        )
    rules = DEFAULT_RULES if s.burn is None else tuple(_rule(i, r) for i, r in enumerate(s.burn))
    if len(rules) > 8:
        raise InvalidInput("a budget has at most 8 burn rules")
    if any(r.long_window > timedelta(days=31) for r in rules):
        raise InvalidInput("a burn rule's window is at most 31d")
    thresholds = (
        DEFAULT_THRESHOLDS
        if s.thresholds is None
        else tuple(sorted({decimal_of("spec.thresholds", t) for t in s.thresholds}))
    )
    if len(thresholds) > 10:
        raise InvalidInput("a budget has at most 10 thresholds")
    return Budget(
        name=header.name,
        amount=decimal_of("spec.amount", s.amount),
        currency=s.currency.strip().upper(),
        period=Period(s.period),
        scope=dict(s.scope),
        thresholds=thresholds,
        rules=rules,
        description=header.description,
    )


def _rule(index: int, r: _Rule) -> Rule:
    where = f"spec.burn.{index}"
    with at(f"{where}.severity"):
        severity = Severity(r.severity)
    with at(f"{where}.longWindow"):
        long_window = parse_duration(r.longWindow)
    with at(f"{where}.shortWindow"):
        short_window = parse_duration(r.shortWindow)
    with at(where):
        return Rule(severity, r.burnRate, long_window, short_window)


def parse_budgets(text: str | bytes) -> list[Budget]:
    """Every Budget document of a (multi-document) YAML or JSON file."""
    return read_values(text, BUDGET)


#: The Budget kind (versioned when stored: ``storage.budgets``).
BUDGET: Final[DocumentKind[Budget]] = DocumentKind(KIND, {API_VERSION: Reading(_Spec, _budget)})


def to_document(budget: Budget) -> dict[str, Any]:
    """The Budget document of ``budget`` (what ``parse_budget`` reads back to an equal one)."""
    metadata: dict[str, Any] = {"name": budget.name}
    if budget.description:
        metadata["description"] = budget.description
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": {
            "scope": dict(budget.scope),
            "period": budget.period.value,
            "amount": str(budget.amount),
            "currency": budget.currency,
            "thresholds": [str(t) for t in budget.thresholds],
            "burn": [
                {
                    "severity": r.severity.value,
                    "burnRate": r.burn_rate,
                    "longWindow": format_duration(r.long_window),
                    "shortWindow": format_duration(r.short_window),
                }
                for r in budget.rules
            ],
        },
    }


def apply_budgets(
    store: Store,
    budgets: Sequence[Budget],
    now: datetime,
    currency: str | None = None,
) -> list[tuple[Budget, int, bool]]:
    """Store each budget (a new version where it changed): ``(budget, version, new)`` each,
    all or nothing (``service.apply``). With ``currency`` (the cost model's), a budget in
    another currency is refused first."""
    from infersight.service.apply import apply  # noqa: PLC0415 (it reads this module's kind)

    if currency is not None:
        for budget in budgets:
            same_currency(budget, currency)
    documents = [Document(KIND, API_VERSION, b.name, b, i) for i, b in enumerate(budgets, 1)]
    return [
        (a.document.value, a.version or 0, a.changed)
        for a in apply(store, documents, now=now).applied
    ]


def same_currency(budget: Budget, currency: str) -> None:
    """Refuse ``budget`` unless it is in ``currency`` (the cost model's)."""
    if budget.currency != currency:
        raise InvalidInput(
            f"budget {budget.name!r} is in {budget.currency} but the cost model prices in "
            f"{currency}: budgets are compared with spend in the cost model's currency",
            details={"budget": budget.currency, "cost_model": currency},
        )


# -- status ----------------------------------------------------------------------------------


def selector_of(budget: Budget) -> Selector:
    return Selector(**dict(budget.scope))


#: The labels one cost answer per window is grouped by, shared by every budget of a cycle.
_SPEND_GROUPS: Final = ("model", "tenant", "team", "instance")


class SpendReader:
    """The cost answers of one instant, shared by the budgets evaluated at it: one
    ``store.cost.cost`` per window (grouped by model, tenant, team and instance), whatever the
    number of budgets; a budget's spend is the sum of the groups its scope covers (the same
    lines ``cost`` would total for its selector, so the same Decimal)."""

    def __init__(self, store: Store, model: CostModel) -> None:
        self.store = store
        self.model = model
        self._groups: dict[tuple[datetime, datetime], tuple[CostLine, ...]] = {}

    def lines(self, window: Window, selector: Selector) -> list[CostLine]:
        key = (window.start, window.end)
        if key not in self._groups:
            result = self.store.cost.cost(window, self.model, Selector(), _SPEND_GROUPS)
            self._groups[key] = result.groups
        return [line for line in self._groups[key] if selector.matches(line.labels)]

    def spend(self, window: Window, selector: Selector) -> Decimal:
        return sum((line.cost for line in self.lines(window, selector)), Decimal(0))

    def top(self, window: Window, selector: Selector, n: int) -> tuple[CostLine, ...]:
        """The ``n`` biggest spenders by model × instance."""
        by: dict[tuple[str, str], CostLine] = {}
        for line in self.lines(window, selector):
            key = (line.labels.get("model", ""), line.labels.get("instance", ""))
            labels = {"model": key[0], "instance": key[1]}
            found = by.get(key)
            by[key] = line if found is None else found.plus(line, labels)
        ranked = sorted(
            (line for line in by.values() if line.cost > 0),
            key=lambda g: (-g.cost, g.labels.get("model", ""), g.labels.get("instance", "")),
        )
        return tuple(ranked[:n])


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    figures: BudgetFigures
    firing: Severity | None
    top: tuple[CostLine, ...]
    """The biggest spenders (model × instance) of the period so far."""
    model_name: str
    burning: tuple[timedelta, Decimal, tuple[CostLine, ...]] | None = None
    """For a fired burn rule: its long window, the spend in it and that window's biggest
    spenders (who is burning now, which the period's top may not show)."""

    def to_dict(self) -> dict[str, Any]:
        f, b = self.figures, self.figures.budget
        projected = f.projected
        rates = f.burn_rates()
        return {
            "name": b.name,
            "version": b.version,
            "description": b.description,
            "scope": dict(b.scope) or {"fleet": True},
            "period": b.period.value,
            "period_start": _iso(f.start),
            "period_end": _iso(f.end),
            "evaluated_at": _iso(f.at),
            "currency": b.currency,
            "cost_model": self.model_name,
            "amount": amount(b.amount),
            "spent": amount(f.spent),
            "spent_fraction": round(f.spent_fraction, 6),
            "expected_by_now": amount(f.expected),
            "ahead_of_curve": amount(f.spent - f.expected),
            "elapsed_fraction": round(f.elapsed, 6),
            "projected": None if projected is None else amount(projected),
            "projected_fraction": None
            if projected is None
            else round(float(projected / b.amount), 6),
            "thresholds": [str(t) for t in b.thresholds],
            "threshold_crossed": None if f.crossed() is None else str(f.crossed()),
            "burn_rates": burn_text(rates),
            "window_spend": {format_duration(w): amount(s) for w, s in f.window_spend.items()},
            "rules": [
                {
                    "severity": r.severity.value,
                    "burn_rate": r.burn_rate,
                    "long_window": format_duration(r.long_window),
                    "short_window": format_duration(r.short_window),
                    "long_rate": round(rates[r.long_window], 6),
                    "short_rate": round(rates[r.short_window], 6),
                }
                for r in b.rules
            ],
            "firing": None if self.firing is None else self.firing.value,
            "top_spenders": [
                {
                    "model": line.labels.get("model") or IDLE_LABEL,
                    "instance": line.labels.get("instance", ""),
                    "cost": amount(line.cost),
                }
                for line in self.top
            ],
            "burning": None
            if self.burning is None
            else {
                "window": format_duration(self.burning[0]),
                "spent": amount(self.burning[1]),
                "top_spenders": [
                    {
                        "model": line.labels.get("model") or IDLE_LABEL,
                        "instance": line.labels.get("instance", ""),
                        "cost": amount(line.cost),
                    }
                    for line in self.burning[2]
                ],
            },
        }


def _iso(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")


def budget_status(
    store: Store,
    budget: Budget,
    model: CostModel,
    now: datetime,
    reader: SpendReader | None = None,
) -> BudgetStatus:
    """The budget's spend, projection, burn rates and alert judgement at ``now``; the budgets
    of one instant share a ``reader`` (one cost answer per window)."""
    same_currency(budget, model.currency)
    reader = reader or SpendReader(store, model)
    start, end = period_bounds(budget.period, now)
    selector = selector_of(budget)
    spent, top = Decimal(0), tuple[CostLine, ...]()
    if now > start:
        period = Window(start, now)
        spent = reader.spend(period, selector)
        top = reader.top(period, selector, TOP_SPENDERS)
    window_spend = {w: reader.spend(Window.last(w, now), selector) for w in budget.windows}
    figures = BudgetFigures(budget, now, start, end, spent, window_spend)
    evaluation = evaluate_budget(figures)
    burning = None
    if evaluation.fired_rules:
        rule = max(evaluation.fired_rules, key=lambda r: (r.severity.rank, -r.long_window))
        recent = Window.last(rule.long_window, now)
        burning = (
            rule.long_window,
            window_spend[rule.long_window],
            reader.top(recent, selector, TOP_SPENDERS),
        )
    return BudgetStatus(figures, evaluation.firing, top, model.name, burning)


def budget_cause(status: BudgetStatus) -> str:
    f = status.figures
    crossed = f.crossed()
    fired = [
        r
        for r in f.budget.rules
        if f.burn_rates()[r.long_window] >= r.burn_rate
        and f.burn_rates()[r.short_window] >= r.burn_rate
    ]
    if fired:
        return "spend_burn"
    return "budget_threshold" if crossed is not None else "within_budget"


def budget_evidence(status: BudgetStatus) -> tuple[dict[str, Any], dict[str, Any]]:
    """The symptom and the diagnosis an incident of this budget is told with."""
    f, b = status.figures, status.figures.budget
    data = status.to_dict()
    symptom = {
        "slo": b.alert_name,
        "scope": b.scope_text,
        "severity": data["firing"],
        "burn_rates": data["burn_rates"],
        "peak_burn_rate": max(f.burn_rates().values(), default=0.0),
        "budget": {k: data[k] for k in ("amount", "currency", "period", "period_start")},
        "sli": None,
        "signals": [],
    }
    projected = f.projected
    evidence: list[dict[str, Any]] = [
        {
            "signal": f"spent ({b.currency})",
            "current": float(f.spent),
            "baseline": float(f.expected),
            "ratio": float(f.spent / f.expected) if f.expected else None,
        },
        {
            "signal": f"projected at period end ({b.currency})",
            "current": None if projected is None else float(projected),
            "baseline": float(b.amount),
            "ratio": None if projected is None else float(projected / b.amount),
        },
    ]
    evidence += [
        {
            "signal": "top spender "
            f"{line.labels.get('model') or IDLE_LABEL}@{line.labels.get('instance', '')}",
            "current": float(line.cost),
            "baseline": float(f.spent),
            "ratio": float(line.cost / f.spent) if f.spent else None,
        }
        for line in status.top
    ]
    instance = status.top[0].labels.get("instance") if status.top else None
    if status.burning is not None:
        window, spend, lines = status.burning
        evidence += [
            {
                "signal": f"top spender over {format_duration(window)} "
                f"{line.labels.get('model') or IDLE_LABEL}@{line.labels.get('instance', '')}",
                "current": float(line.cost),
                "baseline": float(spend),
                "ratio": float(line.cost / spend) if spend else None,
            }
            for line in lines
        ]
        instance = lines[0].labels.get("instance") if lines else instance
    return symptom, _diagnosis(budget_cause(status), evidence, instance, budget=data)


def _diagnosis(
    cause: str, evidence: list[dict[str, Any]], instance: str | None, **extra: Any
) -> dict[str, Any]:
    """A money alert's evidence in the shape of a diagnosis (``alerts.diagnose.Diagnosis.
    to_dict``), which the incident page, the notifiers and the outbox read."""
    return {
        "cause": cause,
        "confidence": 1.0,
        "instance": instance,
        "evidence": [{"instance": "", **e} for e in evidence],
        "alternatives": [],
        "symptoms": [],
        "missing_evidence": [],
        "kv_source": None,
        **extra,
    }


# -- the cost step ---------------------------------------------------------------------------


def _sample(line: CostLine | None, version: str) -> CostSample:
    if line is None:
        return CostSample(Decimal(0), 0, 0, Decimal(0), Decimal(0), version)
    return CostSample(
        line.cost, line.tokens, line.requests, line.gpu_hours, line.idle_gpu_hours, version
    )


def _by_model(
    store: Store, window: Window, model: CostModel, version: str
) -> dict[str, CostSample]:
    """The window's samples: ``""`` for the fleet, then one per model."""
    result = store.cost.cost(window, model, Selector(), ("model",))
    out = {"": _sample(result.total, version)}
    for line in result.groups:
        name = line.labels.get("model", "")
        if name:
            out[name] = _sample(line, version)
    return out


def cost_steps(
    store: Store,
    model: CostModel,
    version: str,
    now: datetime,
    policy: StepPolicy = DEFAULT_STEP,
) -> dict[str, StepJudgement]:
    """The cost-step judgement of the fleet (``""``) and of each model with volume: the last
    ``STEP_WINDOW`` against the same hours of the previous ``STEP_DAYS`` days, each day
    priced with the cost model version in force at its end (else the current one)."""
    current = _by_model(store, Window.last(STEP_WINDOW, now), model, version)
    days: dict[str, list[CostSample]] = {}
    for k in range(1, STEP_DAYS + 1):
        end = now - timedelta(days=k)
        then = store.budgets.model_at(model.name, end)
        priced, label = then if then is not None else (model, version)
        for name, sample in _by_model(store, Window.last(STEP_WINDOW, end), priced, label).items():
            days.setdefault(name, []).append(sample)
    names = ["", *sorted((n for n in current if n), key=lambda n: -current[n].cost)[:STEP_MODELS]]
    out = {}
    for name in names:
        if name in days:
            out[name] = judge_step(current[name], merge_samples(days[name]), policy)
    return out


def step_name(model_name: str) -> tuple[str, str]:
    """The incident's (slo, scope) of the fleet's (``""``) or a model's cost step."""
    if not model_name:
        return f"{COST_STEP_PREFIX}fleet", "*"
    return f"{COST_STEP_PREFIX}{model_name}"[:128], f"model={model_name}"


# -- the job ---------------------------------------------------------------------------------


class Announce(Protocol):
    def __call__(
        self,
        incident: Incident,
        told: Transition,
        symptom: dict[str, Any],
        diagnosis: dict[str, Any],
        tx: Store | None = None,
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class MoneyReport:
    budgets: int
    changes: tuple[tuple[Incident, Transition], ...]
    problems: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MoneySnapshot:
    """One money cycle's judgements, as the alerts were decided on them: each budget's status
    (or why it could not be evaluated) and each cost step. The Budgets page and
    ``GET /api/v1/budgets`` show them while they are fresh instead of pricing every budget's
    windows and the eight step windows again per view (``budget_views``, ``cost_step_views``);
    open alerts are read afresh either way."""

    at: datetime
    model: CostModel
    version: str
    budgets: tuple[tuple[Budget, BudgetStatus | None, str | None], ...]
    steps: tuple[tuple[str, StepJudgement], ...]
    step_policy: StepPolicy = DEFAULT_STEP
    purchasing: Purchasing | None = None
    """The purchasing advice over the last ``ADVICE_DAYS`` days (``None``: not judged), which
    the Cost and Scaling pages show for ranges too short to buy for."""

    def fresh(self, model: CostModel, now: datetime, max_age: timedelta) -> bool:
        """Judged under ``model`` at most ``max_age`` before ``now``."""
        return self.model == model and now - max_age <= self.at <= now


class MoneyAlerts:
    """The money alerts' job: budgets, then cost steps; one ``__call__`` per interval."""

    def __init__(
        self,
        store: Store,
        cost_model: Callable[[], CostModel],
        announce: Announce | None = None,
        step_policy: StepPolicy = DEFAULT_STEP,
        *,
        timezone: str | None = None,
        finest_for: FinestFor | None = None,
    ) -> None:
        self.store = store
        self.cost_model = cost_model
        self.announce = announce
        self.step_policy = step_policy
        #: With a time zone, each cycle also advises on purchasing over the last
        #: ``ADVICE_DAYS`` days, hours of week in that zone (``None``: it does not).
        self.timezone = timezone
        self.finest_for = finest_for
        #: The last cycle's judgements (replaced whole, so a reader in another thread sees
        #: one cycle's); ``None`` before the first.
        self.latest: MoneySnapshot | None = None

    def __call__(self, now: datetime) -> MoneyReport:
        model = self.cost_model()
        version = self.store.budgets.record_model(model, now)
        changes: list[tuple[Incident, Transition]] = []
        problems: list[str] = []
        budgets = self.store.budgets.all()
        reader = SpendReader(self.store, model)
        judged: list[tuple[Budget, BudgetStatus | None, str | None]] = []
        for budget in budgets:
            try:
                status = budget_status(self.store, budget, model, now, reader)
            except InvalidInput as exc:
                problems.append(f"{budget.name}: {exc}")
                judged.append((budget, None, str(exc)))
                log.warning("budget %s not evaluated: %s", budget.name, exc)
                continue
            judged.append((budget, status, None))
            symptom, diagnosis = budget_evidence(status)
            evaluation = evaluate_budget(status.figures)
            change = self._step(
                budget.alert_name, budget.scope_text, evaluation.firing,
                evaluation.holding, symptom, diagnosis, now,
            )  # fmt: skip
            changes += change
        # Budgets deleted or re-scoped since: their open incidents resolve.
        live = {(b.alert_name, b.scope_text) for b in budgets}
        for incident in self.store.incidents.all("firing"):
            name = incident.slo
            if name.startswith(BUDGET_PREFIX) and (name, incident.scope) not in live:
                gone: dict[str, Any] = {
                    "slo": name, "scope": incident.scope, "burn_rates": {}, "sli": None,
                    "signals": [],
                }  # fmt: skip
                why = _diagnosis("budget_removed", [], None)
                changes += self._step(name, incident.scope, None, frozenset(), gone, why, now)
        steps = cost_steps(self.store, model, version, now, self.step_policy)
        self.latest = MoneySnapshot(
            now,
            model,
            version,
            tuple(judged),
            tuple(steps.items()),
            self.step_policy,
            self._advice(model, now),
        )
        for name, judgement in steps.items():
            slo, scope = step_name(name)
            firing = Severity.TICKET if judgement.firing else None
            holding = frozenset({Severity.TICKET}) if judgement.holding else frozenset()
            symptom = {
                "slo": slo,
                "scope": scope,
                "severity": "ticket",
                "burn_rates": {"step": round(judgement.ratio or 0.0, 6)},
                "peak_burn_rate": judgement.ratio or 0.0,
                "sli": None,
                "signals": [],
            }
            diagnosis = _diagnosis(
                judgement.cause.value if judgement.cause else "unknown",
                [dict(e) for e in judgement.evidence],
                None,
                factors=dict(judgement.factors),
                cost_model_versions={
                    "window": judgement.versions[0],
                    "baseline": judgement.versions[1],
                },
            )
            changes += self._step(slo, scope, firing, holding, symptom, diagnosis, now)
        return MoneyReport(len(budgets), tuple(changes), tuple(problems))

    def _advice(self, model: CostModel, now: datetime) -> Purchasing | None:
        """The purchasing advice of the last ``ADVICE_DAYS`` days (``None`` without a time
        zone, or when it cannot be given: a page then advises itself)."""
        if self.timezone is None:
            return None
        window = Window(now - timedelta(days=ADVICE_DAYS), now)
        try:
            return purchasing(
                self.store,
                model,
                window,
                finest_for=self.finest_for,
                now=now,
                timezone=self.timezone,
            )
        except InvalidInput as exc:
            log.warning("purchasing advice not judged: %s", exc)
            return None

    def _step(
        self,
        slo: str,
        scope: str,
        firing: Severity | None,
        holding: frozenset[Severity],
        symptom: dict[str, Any],
        diagnosis: dict[str, Any],
        now: datetime,
    ) -> list[tuple[Incident, Transition]]:
        with self.store.transaction() as tx:
            current = tx.incidents.firing(slo, scope)
            previous = alert_state(current)
            evaluation = Evaluation({}, {}, firing, (), holding, firing, frozenset())
            state, transition = step(previous, evaluation, now)
            if not previous.active and not state.active:
                return []
            rates = {k: float(v) for k, v in dict(symptom.get("burn_rates") or {}).items()}
            incident = tx.incidents.apply_step(
                slo, scope, state, transition, rates, now, current=current
            )
            if incident is None or transition is Transition.NONE:
                return []
            tx.incidents.save_diagnosis(incident.id, symptom, diagnosis, now)
            verdict = {
                Transition.OPENED: "onset",
                Transition.RESOLVED: "resolved",
            }.get(transition, "raised")
            tx.history.append(incident.id, now, verdict, str(diagnosis.get("cause")), diagnosis)
            if self.announce is not None:
                self.announce(incident, transition, symptom, diagnosis, tx=tx)
        return [(incident, transition)]


__all__ = [
    "API_VERSION",
    "BUDGET",
    "KIND",
    "AlertState",
    "BudgetStatus",
    "BudgetView",
    "MoneyAlerts",
    "MoneyReport",
    "MoneySnapshot",
    "StepView",
    "apply_budgets",
    "budget_evidence",
    "budget_status",
    "budget_versions",
    "budget_view",
    "budget_views",
    "cost_step_views",
    "cost_steps",
    "get_budget",
    "list_budgets",
    "parse_budget",
    "parse_budgets",
    "same_currency",
    "selector_of",
    "step_name",
    "to_document",
]


# -- what the API and the Budgets page show ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class BudgetView:
    """A budget in force with its status at one instant and its open alert."""

    budget: Budget
    status: BudgetStatus | None
    """``None`` when the budget could not be evaluated (``problem`` says why)."""
    problem: str | None
    """Why the budget could not be evaluated (a currency other than the cost model's)."""
    alert: Incident | None
    """Its open incident (``budget:<name>``), if any."""


def list_budgets(store: Store, tenants: frozenset[str] | None = None) -> list[Budget]:
    """Every budget in force (its newest version); for a caller limited to ``tenants``
    (``None``: not limited), those whose scope lies within them."""
    return [b for b in store.budgets.all() if within_tenants(tenants, dict(b.scope))]


def get_budget(store: Store, name: str) -> Budget:
    """Budget ``name``'s newest version (``NotFound`` when there is none)."""
    return store.budgets.get(name)


def budget_versions(store: Store, name: str) -> list[tuple[int, datetime]]:
    """Every version of budget ``name`` applied, oldest first, with when."""
    return store.budgets.versions(name)


def budget_view(store: Store, budget: Budget, reader: SpendReader, now: datetime) -> BudgetView:
    """``budget``'s status at ``now`` (priced through ``reader``, which the budgets of one
    answer share) and its open alert."""
    try:
        status: BudgetStatus | None = budget_status(store, budget, reader.model, now, reader)
        problem = None
    except InvalidInput as exc:
        status, problem = None, str(exc)
    alert = store.incidents.firing(budget.alert_name, budget.scope_text)
    return BudgetView(budget, status, problem, alert)


def budget_views(
    store: Store,
    model: CostModel,
    now: datetime,
    tenants: frozenset[str] | None = None,
    recent: MoneySnapshot | None = None,
    max_age: timedelta = timedelta(0),
) -> list[BudgetView]:
    """Every budget in force (within ``tenants``, for a caller limited to them) with its status
    at ``now`` under ``model`` — one cost answer per window for all of them — and its alert.

    ``recent`` (the money job's last cycle, ``MoneyAlerts.latest``) is shown instead when it
    judged every one of these budgets, as stored now, under ``model`` at most ``max_age``
    before ``now``: those are the figures their alerts were decided on."""
    budgets = list_budgets(store, tenants)
    if recent is not None and recent.fresh(model, now, max_age):
        judged = {b.name: (b, status, problem) for b, status, problem in recent.budgets}
        if all(judged.get(b.name, (None,))[0] == b for b in budgets):
            return [
                BudgetView(b, judged[b.name][1], judged[b.name][2], _alert(store, b))
                for b in budgets
            ]
    reader = SpendReader(store, model)
    return [budget_view(store, b, reader, now) for b in budgets]


def _alert(store: Store, budget: Budget) -> Incident | None:
    return store.incidents.firing(budget.alert_name, budget.scope_text)


@dataclass(frozen=True, slots=True)
class StepView:
    """The cost-per-million-tokens step of the fleet (``name`` ``""``) or a model, judged now,
    with its open alert."""

    name: str
    judged: StepJudgement
    alert: Incident | None


def cost_step_views(
    store: Store,
    model: CostModel,
    now: datetime,
    recent: MoneySnapshot | None = None,
    max_age: timedelta = timedelta(0),
    policy: StepPolicy = DEFAULT_STEP,
) -> list[StepView]:
    """The cost steps ``MoneyAlerts`` judges, judged at ``now`` under ``model``'s version as
    stored (a reader records nothing) and ``policy``, each with its open alert
    (``cost-step:…``); or, while it is fresh (as in ``budget_views``) and judged under the same
    policy, as the money job's last cycle judged them."""
    if recent is not None and recent.fresh(model, now, max_age) and recent.step_policy == policy:
        steps = dict(recent.steps)
    else:
        steps = cost_steps(store, model, store.budgets.version_label(model), now, policy)
    out = []
    for name, judged in steps.items():
        slo, scope = step_name(name)
        out.append(StepView(name, judged, store.incidents.firing(slo, scope)))
    return out
