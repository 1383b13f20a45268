"""The app's context: what the routes and pages need of the composition, built once.

``build_context`` checks the tokens against the listen address, and builds the burn-rate policy,
the diagnosis rules, the incident listeners (diagnosis first, then notifications), the
evaluator, the scheduled jobs and, given ``prepare``, the gate that waits for the store.
``create_app`` keeps the frozen ``AppContext`` as the app's one attribute (``app.state.context``,
read by ``context_of``); routes receive it through the ``api.deps.App`` dependency.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict, Unpack

from sqlalchemy import Engine
from starlette.applications import Starlette

from infersight.alerts.notify import Notifier
from infersight.alerts.routing import Router
from infersight.alerts.rules import RulePack, load_rules
from infersight.api.answers import AnswerCache
from infersight.api.auth import FailureLimiter, Tokens, check_exposure, parse_tokens
from infersight.api.hourly import HourlyMemo
from infersight.api.settings import ApiSettings
from infersight.api.startup import StoreGate
from infersight.core.burn import IncidentListener, Policy
from infersight.core.cost import CostModel
from infersight.core.errors import ConfigurationError, InvalidInput
from infersight.core.model_names import ModelAliases
from infersight.core.retention import RetentionPolicy
from infersight.core.slo import SloSpec
from infersight.service.budgets import DEFAULT_STEP, MoneyAlerts, MoneySnapshot
from infersight.service.cost_spec import active_model
from infersight.service.diagnosis import DiagnosisListener
from infersight.service.evaluation import Evaluator, SloStatus, default_policy
from infersight.service.jobs import Jobs, LeaderLock, leader_lock
from infersight.service.notifications import Announcer, Delivery, FollowUp
from infersight.service.profiles import ProfileFollowUp, ProfileTrigger
from infersight.service.reports import WeeklyReports, parse_schedule
from infersight.service.scaling import Recommender
from infersight.service.slos import list_slos
from infersight.service.snapshots import latest_money, latest_statuses
from infersight.storage.engine import timeouts_of
from infersight.storage.queries import DEFAULT_EXACT_MAX_ROWS
from infersight.storage.seam import Store
from infersight.storage.sql_store import SqlStore

Clock = Callable[[], datetime]


class Refusals:
    """How often the KEDA endpoint refused an answer, by reason (``/metrics`` exports it as
    ``infersight_scaling_keda_refusals_total``); shared by the app's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def add(self, reason: str) -> None:
        with self._lock:
            self._counts[reason] = self._counts.get(reason, 0) + 1

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


def system_clock() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class AppContext:
    settings: ApiSettings
    store: Store
    """The store the use cases are handed (``storage.seam``)."""
    engine: Engine
    """The store's engine, for what still reads SQL itself (``store.engine``)."""
    clock: Clock
    tokens: Tokens
    retention: RetentionPolicy
    exact_max_rows: int
    """``method=auto`` reads exact quantiles up to this many requests, sketches above."""
    policy: Policy
    evaluator: Evaluator
    rules: RulePack
    delivery: Delivery | None
    """Notification delivery (``None``: no notifiers configured)."""
    jobs: Jobs
    reports: WeeklyReports
    """The weekly cost reports (the jobs' report job; ``POST /api/v1/reports/weekly``)."""
    store_gate: StoreGate | None
    """Waits for the store at start-up (``None``: built without ``prepare``)."""
    keda_refusals: Refusals
    """Answers the KEDA endpoint refused (stale, missing, unknown), by reason."""
    answers: AnswerCache
    """The dashboard pages' and the rollup-served JSON answers of the last
    ``dashboard_answer_ttl_s`` seconds (``api.reads``)."""
    aliases: ModelAliases = field(default_factory=ModelAliases)
    """The model alias table client and server model names are matched by."""
    read_store: Store | None = None
    """A hot standby's store that read-only answers go to (``api.reads``); ``None``: the
    primary serves them."""
    read_engine: Engine | None = None
    """``read_store``'s engine."""
    worker: int | None = None
    """This process's number among ``infersight serve --workers N``'s (1..N; ``/healthz``
    says it); ``None``: the only process."""
    hourly: HourlyMemo = field(default_factory=HourlyMemo)
    """The dashboard's answers over whole past hours (the purchasing advice of a week or
    more), reused while as fresh as the money job's judgements (``api.hourly``)."""
    answer_memo: dict[str, Any] | None = None
    """Within one answer (``api.reads.stamped`` gives each its own): what its parts share,
    read once — the cost model in use, which a Cost page read four times. ``None`` outside an
    answer: every call reads afresh."""

    def slo_specs(self) -> list[SloSpec]:
        """Every stored SLO (read once per answer: the Overview's rows and the cost's good
        tokens read them three times per view)."""
        memo = self.answer_memo
        if memo is not None and "slos" in memo:
            found: list[SloSpec] = memo["slos"]
            return found
        specs = list_slos(self.store)
        if memo is not None:
            memo["slos"] = specs
        return specs

    def cost_model(self) -> CostModel:
        """The cost model in use: the stored one named by the settings, or the example (read
        once per answer)."""
        memo = self.answer_memo
        if memo is not None and "cost_model" in memo:
            found: CostModel = memo["cost_model"]
            return found
        model: CostModel = active_model(self.store, self.settings.cost_model)
        if memo is not None:
            memo["cost_model"] = model
        return model


def money_results(app: AppContext) -> tuple[MoneySnapshot | None, timedelta]:
    """The money job's last judgements — this process's while fresh, else the ones the
    leader stored (``service.snapshots``; ``None`` when neither is fresh) — and how old they
    may be and still be shown."""
    money = app.jobs.money
    recent = money.latest if isinstance(money, MoneyAlerts) else None
    policy = money.step_policy if isinstance(money, MoneyAlerts) else DEFAULT_STEP
    age = app.jobs.reuse_age("money")
    return latest_money(app.store, recent, app.cost_model(), app.clock(), age, policy), age


def slo_results(app: AppContext, specs: Sequence[SloSpec], now: datetime) -> Sequence[SloStatus]:
    """The evaluation's last statuses of ``specs`` — this process's while fresh, else the
    ones the leader stored (``service.snapshots``) — or ``()`` when neither is fresh."""
    age = app.jobs.reuse_age("evaluate")
    return latest_statuses(app.store, app.evaluator.latest, specs, app.policy, now, age)


def listen_host(settings: ApiSettings) -> str:
    """The host part of the listen address."""
    return settings.listen.rpartition(":")[0] or settings.listen


class Wiring(TypedDict, total=False):
    """What ``create_app`` and ``build_context`` take besides the settings, the store and the
    clock; every key is optional, and its default is in ``build_context``."""

    retention: RetentionPolicy | None
    exact_max_rows: int
    policy: Policy | None
    listeners: Sequence[IncidentListener]
    lock: LeaderLock | None
    notifiers: Mapping[str, Notifier] | None
    router: Router | None
    dashboard_url: str
    prepare: Callable[[], object] | None
    read_store: Store | Engine | None
    worker: int | None


def as_store(store: Store | Engine) -> Store:
    """A store given as an engine (tests, benchmarks): the SQL store over it."""
    return SqlStore(store) if isinstance(store, Engine) else store


def build_context(
    settings: ApiSettings,
    store: Store | Engine,
    clock: Clock = system_clock,
    **wiring: Unpack[Wiring],
) -> AppContext:
    """The context of ``create_app`` (its arguments, its defaults): the store opened by
    ``service.store.open_store`` (or an engine, wrapped). Raises ``ConfigurationError`` for
    unsafe settings."""
    store = as_store(store)
    engine = store.engine
    given_read = wiring.get("read_store")
    read_store = as_store(given_read) if given_read is not None else None
    limiter = FailureLimiter(per_client=settings.auth_failures_per_client)
    tokens = parse_tokens(settings.api_tokens, settings.api_tokens_file, limiter)
    check_exposure(listen_host(settings), tokens, settings.insecure_no_auth)
    retention = wiring.get("retention") or RetentionPolicy()
    policy = wiring.get("policy") or default_policy()
    notifiers = wiring.get("notifiers")
    dashboard_url = wiring.get("dashboard_url", "")
    lock = wiring.get("lock")
    prepare = wiring.get("prepare")
    router = wiring.get("router")
    listeners = wiring.get("listeners", ())
    rules = load_rules()
    # Diagnosis first: the listeners after it (notifications) find the incident diagnosed.
    announcer = Announcer(store, notifiers, clock, router, dashboard_url) if notifiers else None
    delivery = Delivery(store, notifiers) if notifiers else None
    aliases = _aliases(settings.model_aliases)
    diagnosis = DiagnosisListener(store, pack=rules, announce=announcer, aliases=aliases)
    evaluator = Evaluator(store, policy, (diagnosis, *listeners), retention.finest_for)
    reports = WeeklyReports(
        store,
        lambda: active_model(store, settings.cost_model),
        settings.report_timezone,
        retention.finest_for,
        notifiers=list(notifiers or {}),
        base_url=dashboard_url,
        attribution_top_n=settings.attribution_top_n,
    )
    jobs = Jobs(
        store,
        evaluator,
        retention,
        clock,
        lock or leader_lock(store, settings.leader_lock_url, runs_jobs=settings.run_jobs),
        settings.evaluation_interval_s,
        settings.maintenance_interval_s,
        # Profiles of host-side incidents run after the re-diagnoses (service.profiles).
        deliver=ProfileFollowUp(
            FollowUp(diagnosis, delivery),
            ProfileTrigger(store, announce=announcer, max_open=settings.profile_max_automatic),
        ),
        delivery_interval_s=settings.delivery_interval_s,
        report=reports,
        report_cron={
            **parse_schedule(settings.report_schedule),
            "timezone": settings.report_timezone,
        },
        scale=Recommender(store, policy),
        scaling_interval_s=settings.scaling_interval_s,
        money=MoneyAlerts(
            store,
            lambda: active_model(store, settings.cost_model),
            announcer,
            timezone=settings.report_timezone,
            finest_for=retention.finest_for,
        ),
        money_interval_s=settings.budget_interval_s,
    )
    gate = None
    if prepare is not None:
        gate = StoreGate(prepare, on_ready=jobs.start if settings.run_jobs else lambda: None)
    return AppContext(
        settings=settings,
        store=store,
        engine=engine,
        clock=clock,
        tokens=tokens,
        retention=retention,
        exact_max_rows=wiring.get("exact_max_rows", DEFAULT_EXACT_MAX_ROWS),
        policy=policy,
        evaluator=evaluator,
        rules=rules,
        delivery=delivery,
        jobs=jobs,
        reports=reports,
        store_gate=gate,
        keda_refusals=Refusals(),
        answers=AnswerCache(
            settings.dashboard_answer_ttl_s,
            concurrency=settings.answer_concurrency,
            turn_timeout_s=timeouts_of(engine).pool_s,
        ),
        aliases=aliases,
        read_store=read_store,
        read_engine=read_store.engine if read_store is not None else None,
        worker=wiring.get("worker"),
    )


def _aliases(text: str) -> ModelAliases:
    try:
        return ModelAliases.parse(text)
    except InvalidInput as exc:
        raise ConfigurationError(f"INFERSIGHT_MODEL_ALIASES: {exc.message}") from None


def context_of(app: Starlette) -> AppContext:
    """The context ``create_app`` built ``app`` with."""
    context: AppContext = app.state.context
    return context
