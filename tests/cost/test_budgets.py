"""Budgets and money alerts on real stores (SQLite and PostgreSQL): a budget that burns opens an
incident whose Slack message goes through the outbox to a local HTTP endpoint, and resolves
when a new version of the budget raises the amount; the cost-step alert fires on a real price
change and on an idle surge, each with its cause."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from infersight.alerts.notifiers.slack import SlackNotifier
from infersight.api import create_app
from infersight.api.settings import ApiSettings
from infersight.core.budget import (
    Budget,
    BudgetFigures,
    CostSample,
    Period,
    StepPolicy,
    evaluate_budget,
    judge_step,
    period_bounds,
)
from infersight.core.burn import Severity, Transition
from infersight.core.cost import CostModel, GpuPrice
from infersight.core.errors import InvalidInput
from infersight.core.query import Selector
from infersight.core.records import RequestRecord
from infersight.core.window import Window
from infersight.service.budgets import (
    MoneyAlerts,
    apply_budgets,
    budget_status,
    budget_views,
    cost_step_views,
    parse_budget,
    parse_budgets,
    selector_of,
    to_document,
)
from infersight.service.notifications import Announcer, Delivery
from infersight.storage import budgets as budget_store
from infersight.storage import cost as cost_store
from infersight.storage import incidents, signals
from infersight.storage.writer import open_writer
from tests.conftest import Store
from tests.cost.scenario import gpu_series
from tests.doubles import FakeClock
from tests.waiting import until

NOW = datetime(2026, 12, 10, 12, tzinfo=UTC)
MONTH = Window(datetime(2026, 12, 1, tzinfo=UTC), NOW)
STEP = timedelta(minutes=15)


def flat_model(price: str, name: str = "prices") -> CostModel:
    return CostModel(
        name=name, currency="USD", gpu_prices={"H200": GpuPrice(Decimal(price))}, sample_gap_s=900.0
    )


def requests(
    instance: str, window: Window, tenant: str, model: str = "llama-70b", input_tokens: int = 1000
) -> list[Any]:
    out, ts, i = [], window.start, 0
    while ts < window.end:
        i += 1
        out.append(
            RequestRecord(
                trace_id=f"{hash((instance, i)) & (2**128 - 1):032x}",
                span_id=f"{i:016x}",
                start=ts,
                instance=instance,
                engine="vllm",
                model=model,
                tenant=tenant,
                priority="interactive",
                ttft_s=0.3,
                tpot_s=0.02,
                e2e_s=0.3 + 0.02 * 499,
                queue_s=0.05,
                prefill_s=0.2,
                decode_s=2.0,
                input_tokens=input_tokens,
                output_tokens=500,
                finish_reason="stop",
            )
        )
        ts += STEP
    return out


def seed(store: Store, window: Window = MONTH, input_tokens: int = 1000) -> None:
    """One H200 serving tenant acme every 15 minutes from the 1st of the month to now."""
    writer = open_writer(store.engine)
    writer.write_gpu_samples(gpu_series("h200-a", window, util=0.6, power_w=500.0))
    writer.write_requests(requests("h200-a", window, "acme", input_tokens=input_tokens))


class SlackEndpoint:
    """A local HTTP server standing in for a Slack incoming webhook."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        received = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                received.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def slack() -> Iterator[SlackEndpoint]:
    endpoint = SlackEndpoint()
    yield endpoint
    endpoint.close()


DOC = """
apiVersion: infersight/v1
kind: Budget
metadata: {name: acme-monthly, description: "acme's inference"}
spec:
  scope: {tenant: acme}
  period: monthly
  amount: "100"
  currency: USD
  thresholds: [0.8, 1.0]
"""


def test_a_budget_that_burns_pages_through_the_outbox_and_resolves_when_raised(store, slack):
    seed(store)
    model = flat_model("4.00")
    (budget,) = parse_budgets(DOC)
    [(_, version, new)] = apply_budgets(store.sql, [budget], NOW - timedelta(days=9), "USD")
    assert (version, new) == (1, True)
    # Applying the same document again adds no version.
    assert apply_budgets(store.sql, [budget], NOW, "USD")[0][1:] == (1, False)

    # The spend is the cost answer's for the tenant, to the cent.
    status = budget_status(store.sql, budget_store.get_budget(store.engine, "acme-monthly"),
                           model, NOW)  # fmt: skip
    expected = cost_store.cost(store.engine, MONTH, model, Selector(tenant="acme")).total.cost
    assert status.figures.spent == expected > Decimal("800")
    data = status.to_dict()
    assert data["firing"] == "page"
    assert data["threshold_crossed"] == "1.0"
    assert data["projected_fraction"] > 20
    assert data["burn_rates"]["6h"] > 6
    assert data["burn_rates"]["1h"] > 6
    assert data["top_spenders"][0] == {
        "model": "llama-70b",
        "instance": "h200-a",
        "cost": data["spent"],
    }

    client = httpx.Client(timeout=10)
    notifiers = {"slack": SlackNotifier(slack.url, client)}
    clock = {"now": NOW}
    announcer = Announcer(store.sql, notifiers, lambda: clock["now"])
    job = MoneyAlerts(store.sql, lambda: model, announcer)
    report = job(NOW)
    [(incident, transition)] = [c for c in report.changes if c[0].slo.startswith("budget:")]
    assert transition is Transition.OPENED
    assert (incident.slo, incident.scope, incident.severity) == (
        "budget:acme-monthly",
        "tenant=acme",
        Severity.PAGE,
    )
    note = signals.notes(store.engine, [incident.id])[incident.id]
    assert note.diagnosis is not None
    assert note.diagnosis["cause"] == "spend_burn"
    # A second cycle changes nothing and sends nothing new.
    assert not [c for c in job(NOW + timedelta(minutes=5)).changes if c[0].id == incident.id]

    Delivery(store.sql, notifiers)(NOW + timedelta(minutes=5))
    until(lambda: len(slack.bodies) >= 1, "the page reached the Slack endpoint")
    page = json.dumps(slack.bodies[0])
    assert "budget acme-monthly (tenant=acme) burning: likely spend_burn" in page
    assert "spend_burn" in page
    assert "top spender llama-70b@h200-a" in page
    assert slack.bodies[0]["blocks"][0]["text"]["text"] == "Page: budget acme-monthly burning"

    # Version 2 raises the amount: the alert resolves, and the resolve is delivered.
    raised = parse_budget({**to_document(budget), "spec": {
        **to_document(budget)["spec"], "amount": "100000"}})  # fmt: skip
    later = NOW + timedelta(minutes=10)
    assert apply_budgets(store.sql, [raised], later, "USD")[0][1:] == (2, True)
    clock["now"] = later
    resolved = [c for c in job(later).changes if c[0].id == incident.id]
    assert [t for _, t in resolved] == [Transition.RESOLVED]
    assert incidents.get_incident(store.engine, incident.id).resolved_at == later
    Delivery(store.sql, notifiers)(later + timedelta(minutes=6))
    until(lambda: len(slack.bodies) >= 2, "the resolve reached the Slack endpoint")
    assert "Resolved" in json.dumps(slack.bodies[1])
    assert [v for v, _ in budget_store.versions(store.engine, "acme-monthly")] == [1, 2]
    client.close()


def test_the_cost_step_names_a_price_change(store):
    window = Window(NOW - timedelta(days=8), NOW)
    seed(store, window)
    old, new = flat_model("4.00"), flat_model("8.00")
    policy = StepPolicy(min_tokens=1000)
    # The job saw the old prices in force eight days ago, the new ones from now on.
    budget_store.record_model(store.engine, old, window.start)
    job = MoneyAlerts(store.sql, lambda: new, None, policy)
    report = job(NOW)
    fleet = [i for i, t in report.changes if i.slo == "cost-step:fleet"]
    assert len(fleet) == 1
    diagnosis = signals.notes(store.engine, [fleet[0].id])[fleet[0].id].diagnosis
    assert diagnosis is not None
    assert diagnosis["cause"] == "price_change"
    assert diagnosis["factors"]["price"] == pytest.approx(2.0)
    assert diagnosis["factors"]["idle"] == pytest.approx(1.0)
    assert diagnosis["factors"]["throughput"] == pytest.approx(1.0)
    assert fleet[0].burn_rates["step"] == pytest.approx(2.0)
    # The model's own step opens too.
    assert any(i.slo == "cost-step:llama-70b" for i, _ in report.changes)


def test_the_cost_step_names_an_idle_surge(store):
    window = Window(NOW - timedelta(days=8), NOW)
    seed(store, window)
    # Three more H200s sit idle for the last six hours.
    writer = open_writer(store.engine)
    for name in ("h200-b", "h200-c", "h200-d"):
        writer.write_gpu_samples(
            gpu_series(name, Window(NOW - timedelta(hours=6), NOW), util=0.0, power_w=90.0)
        )
    model = flat_model("4.00")
    job = MoneyAlerts(store.sql, lambda: model, None, StepPolicy(min_tokens=1000))
    report = job(NOW)
    [fleet] = [i for i, _ in report.changes if i.slo == "cost-step:fleet"]
    diagnosis = signals.notes(store.engine, [fleet.id])[fleet.id].diagnosis
    assert diagnosis is not None
    assert diagnosis["cause"] == "idle_gpus"
    assert diagnosis["factors"]["price"] == pytest.approx(1.0)
    assert diagnosis["factors"]["idle"] > 2
    # The model itself served as before: its cost per token did not step.
    assert not any(i.slo == "cost-step:llama-70b" for i, _ in report.changes)


# -- documents and the pure math --------------------------------------------------------------


def test_a_budget_may_be_scoped_to_a_team():
    doc = parse_budgets(DOC)[0]
    data = to_document(doc)
    data["spec"]["scope"] = {"team": "search"}
    budget = parse_budget(data)
    assert budget.scope_text == "team=search"
    assert selector_of(budget).team == "search"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"amount": "-1"}, "positive"),
        ({"period": "daily"}, "monthly or weekly"),
        ({"scope": {"tenant": "a", "model": "b"}}, "not to two of them"),
        ({"scope": {"instance": "x"}}, "tenant, a team, a model or the fleet"),
        ({"scope": {"tenant": ""}}, "1 to 256 characters"),
        ({"amount": "lots"}, "decimal"),
        (
            {
                "burn": [
                    {"severity": "page", "burnRate": 2, "longWindow": "1h", "shortWindow": "6h"}
                ]
            },
            "shorter",
        ),
        ({"colour": "red"}, "invalid Budget document"),
    ],
)
def test_bad_budgets_are_refused_with_the_reason(change, message):
    data = to_document(parse_budgets(DOC)[0])
    data["spec"] = {**data["spec"], **change}
    with pytest.raises(InvalidInput, match=message):
        parse_budget(data)


def test_a_budget_in_another_currency_than_the_cost_model_is_refused(store):
    (budget,) = parse_budgets(DOC.replace("USD", "EUR"))
    with pytest.raises(InvalidInput, match="EUR"):
        apply_budgets(store.sql, [budget], NOW, "USD")
    assert budget_store.list_budgets(store.engine) == []


def test_periods_are_calendar_months_and_iso_weeks():
    assert period_bounds(Period.MONTHLY, NOW) == (
        datetime(2026, 12, 1, tzinfo=UTC),
        datetime(2027, 1, 1, tzinfo=UTC),
    )
    assert period_bounds(Period.WEEKLY, NOW) == (
        datetime(2026, 12, 7, tzinfo=UTC),
        datetime(2026, 12, 14, tzinfo=UTC),
    )


def test_on_the_curve_nothing_fires_and_a_threshold_holds_until_raised():
    budget = Budget("b", Decimal("744"), "USD")  # one per hour in December
    start, end = period_bounds(budget.period, NOW)
    on_curve = {w: Decimal(w.total_seconds() / 3600) for w in budget.windows}
    spent = Decimal((NOW - start).total_seconds() / 3600)
    figures = BudgetFigures(budget, NOW, start, end, spent, on_curve)
    assert figures.expected == spent
    assert figures.projected == Decimal("744")
    assert evaluate_budget(figures).firing is None
    over = BudgetFigures(budget, NOW, start, end, Decimal("700"), on_curve)
    assert evaluate_budget(over).firing is Severity.TICKET  # 0.8 crossed, the rate on track


def test_the_step_splits_exactly_into_its_factors():
    before = CostSample(Decimal(100), 10_000_000, 1000, Decimal(25), Decimal(5))
    fewer = CostSample(Decimal(100), 5_000_000, 1000, Decimal(25), Decimal(5))
    judged = judge_step(fewer, before, StepPolicy(min_tokens=1))
    assert judged.firing
    assert judged.cause is not None
    assert judged.cause.value == "fewer_tokens_per_request"
    product = 1.0
    for factor in judged.factors.values():
        product *= factor
    assert product == pytest.approx(judged.ratio)
    little = CostSample(Decimal(1), 10, 1, Decimal(1), Decimal(0))
    assert judge_step(little, before, StepPolicy()).ratio is None


def test_the_served_jobs_run_the_money_alerts_and_deliver_them(store, slack, request):
    """The composition: ``serve``'s jobs (built by ``create_app``) evaluate the budgets with the
    cost model the settings name and deliver the page through the outbox."""
    seed(store)
    model = flat_model("4.00")
    cost_store.put_model(store.engine, model, NOW - timedelta(days=10))
    apply_budgets(store.sql, parse_budgets(DOC), NOW - timedelta(days=9), "USD")
    client = httpx.Client(timeout=10)
    request.addfinalizer(client.close)
    app = create_app(
        ApiSettings(run_jobs=False, cost_model=model.name),
        store.engine,
        FakeClock(NOW),
        notifiers={"slack": SlackNotifier(slack.url, client)},
    )
    jobs = app.state.context.jobs
    request.addfinalizer(jobs.stop)
    assert jobs.tick_money(), jobs.last_error
    assert jobs.tick_delivery(), jobs.last_error
    until(lambda: len(slack.bodies) >= 1, "the served job's page reached Slack")
    assert "budget acme-monthly" in json.dumps(slack.bodies[0])
    # The SLO evaluation that runs beside it leaves the budget's incident open.
    app.state.context.evaluator.run(NOW)
    with store.engine.connect() as connection:
        assert incidents.firing(connection, "budget:acme-monthly", "tenant=acme") is not None


def test_a_burn_resolves_when_spending_falls_back(store):
    """A surge of ten more GPUs over the last six hours burns a budget at over 6× (a page by
    its burn rule, no threshold crossed); two hours after they stop, the short window is cold
    and the alert resolves although the period's spend stays."""
    seed(store)
    writer = open_writer(store.engine)
    surge = Window(NOW - timedelta(hours=6), NOW)
    for k in range(10):
        writer.write_gpu_samples(gpu_series(f"burst-{k}", surge, util=0.9, power_w=600.0))
        writer.write_requests(requests(f"burst-{k}", surge, "acme"))
    model = flat_model("4.00")
    budget = parse_budget({**to_document(parse_budgets(DOC)[0]), "spec": {
        **to_document(parse_budgets(DOC)[0])["spec"], "amount": "5000"}})  # fmt: skip
    apply_budgets(store.sql, [budget], NOW - timedelta(days=9), "USD")
    job = MoneyAlerts(store.sql, lambda: model)
    [(opened, transition)] = [c for c in job(NOW).changes if c[0].slo.startswith("budget:")]
    assert transition is Transition.OPENED
    assert opened.severity is Severity.PAGE
    note = signals.notes(store.engine, [opened.id])[opened.id]
    assert note.diagnosis is not None
    assert note.diagnosis["cause"] == "spend_burn"
    assert note.diagnosis["budget"]["threshold_crossed"] is None
    # Who burns now: the surge's instances, each an eleventh of the last six hours' spend.
    burning = note.diagnosis["budget"]["burning"]
    assert burning["window"] == "6h"
    assert {s["instance"] for s in burning["top_spenders"]} <= {f"burst-{k}" for k in range(10)}
    assert any(e["signal"].startswith("top spender over 6h") for e in note.diagnosis["evidence"])
    later = NOW + timedelta(hours=2)
    resolved = [c for c in job(later).changes if c[0].id == opened.id]
    assert [t for _, t in resolved] == [Transition.RESOLVED]
    status = budget_status(store.sql, budget_store.get_budget(store.engine, "acme-monthly"),
                           model, later)  # fmt: skip
    assert status.figures.spent > Decimal("1000")
    assert status.figures.burn_rates()[timedelta(hours=1)] == 0


def test_a_price_step_resolves_once_the_baseline_is_priced_the_same(store):
    window = Window(NOW - timedelta(days=8), NOW + timedelta(days=8))
    seed(store, window)
    old, new = flat_model("4.00"), flat_model("8.00")
    budget_store.record_model(store.engine, old, window.start)
    job = MoneyAlerts(store.sql, lambda: new, None, StepPolicy(min_tokens=1000))
    [opened] = [i for i, t in job(NOW).changes if i.slo == "cost-step:fleet"]
    # A week on, every baseline day was priced with the new prices: no step, the ticket resolves.
    later = NOW + timedelta(days=8)
    resolved = [(i, t) for i, t in job(later).changes if i.id == opened.id]
    assert [t for _, t in resolved] == [Transition.RESOLVED]
    assert resolved[0][0].burn_rates["step"] == pytest.approx(1.0)


def test_views_show_the_money_jobs_last_judgements_while_fresh(store):
    """``budget_views`` and ``cost_step_views`` show the money job's last cycle (the figures its
    alerts were decided on) while it is fresh, under the same cost model and budgets; else
    they judge afresh at the view's now."""
    seed(store, Window(NOW - timedelta(days=8), NOW))
    model = flat_model("4.00")
    apply_budgets(store.sql, parse_budgets(DOC), NOW - timedelta(days=9), "USD")
    policy = StepPolicy(min_tokens=1000)
    job = MoneyAlerts(store.sql, lambda: model, None, policy)
    assert job.latest is None
    job(NOW)
    recent, age = job.latest, timedelta(minutes=5)
    assert recent is not None
    assert recent.at == NOW
    later = NOW + timedelta(minutes=2)

    shown = budget_views(store.sql, model, later, recent=recent, max_age=age)
    judged = budget_views(store.sql, model, NOW)
    assert [v.status for v in shown] == [v.status for v in judged]  # the cycle's figures
    assert [v.status.figures.at for v in shown if v.status] == [NOW]
    assert [v.alert.id for v in shown if v.alert] == [v.alert.id for v in judged if v.alert]
    steps = cost_step_views(store.sql, model, later, recent, age, policy)
    assert [(s.name, s.judged) for s in steps] == [
        (s.name, s.judged) for s in cost_step_views(store.sql, model, NOW, policy=policy)
    ]
    assert [s.name for s in steps] == ["", "llama-70b"]  # the fleet and the model
    assert all(s.judged.ratio == pytest.approx(1.0) for s in steps)
    # Judged under another policy than the page's: judged afresh under the page's.
    assert [s.judged.ratio for s in cost_step_views(store.sql, model, later, recent, age)] == [
        None,
        None,
    ]  # too few tokens for the default policy's million

    # Older than max_age, another cost model, or a budget changed since: judged afresh.
    stale = NOW + age + timedelta(seconds=1)
    old = budget_views(store.sql, model, stale, recent=recent, max_age=age)
    assert {v.status.figures.at for v in old if v.status} == {stale}
    repriced = flat_model("5.00")
    afresh = budget_views(store.sql, repriced, later, recent=recent, max_age=age)
    assert {v.status.figures.at for v in afresh if v.status} == {later}
    raised = parse_budget({**to_document(parse_budgets(DOC)[0]), "spec": {
        **to_document(parse_budgets(DOC)[0])["spec"], "amount": "100000"}})  # fmt: skip
    apply_budgets(store.sql, [raised], later, "USD")
    [view] = budget_views(store.sql, model, later, recent=recent, max_age=age)
    assert view.budget.version == 2
    assert view.status is not None
    assert view.status.figures.at == later
