"""The jobs' last results shared by every ``serve`` worker (``service.snapshots``): the
evaluation's statuses and the money job's judgements decode to what the leader computed, are
refused when the SLOs, budgets, cost model or policy changed since, and a second app on the
same store (a worker that never ran a job) shows the leader's instead of computing its own."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import httpx
import numpy as np

from infersight.api import create_app
from infersight.api.context import context_of
from infersight.api.settings import ApiSettings
from infersight.core.budget import StepPolicy
from infersight.core.burn import Policy, Rule, Severity
from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.core.window import Window
from infersight.service import snapshots
from infersight.service.budgets import MoneyAlerts, apply_budgets, parse_budgets
from infersight.service.evaluation import Evaluator, default_policy
from infersight.storage import cost_models, slo_store
from infersight.storage.writer import open_writer
from tests.cost.scenario import gpu_series
from tests.cost.test_budgets import DOC, flat_model, requests
from tests.factories import make_records

NOW = datetime(2026, 12, 10, 12, 0, 7, tzinfo=UTC)
SPECS = (
    SloSpec("avail", Sli(SliKind.AVAILABILITY), 0.999, timedelta(days=7)),
    SloSpec("ttft", Sli(SliKind.LATENCY, "ttft", 0.1), 0.99, timedelta(days=28)),
)


def _seed(store) -> None:
    writer = open_writer(store.engine)
    writer.write_requests(
        make_records(np.random.default_rng(4), NOW - timedelta(hours=3), 1500,
                     span=timedelta(hours=3), error_rate=0.05)
    )  # fmt: skip
    window = Window(NOW - timedelta(days=8), NOW)
    writer.write_gpu_samples(gpu_series("h200-a", window, util=0.6, power_w=500.0))
    writer.write_requests(requests("h200-a", window, "acme"))
    for spec in SPECS:
        slo_store.put_slo(store.engine, spec, NOW - timedelta(days=1))
    apply_budgets(store.sql, parse_budgets(DOC), NOW - timedelta(days=9), "USD")


def test_a_stored_cycle_decodes_to_the_leaders_statuses_and_only_for_the_same_slos(store):
    _seed(store)
    policy = default_policy()
    evaluator = Evaluator(store.sql, policy)
    evaluator.run(NOW)
    specs = store.sql.slos.all()
    body = snapshots.encode_statuses(evaluator.latest, policy)

    assert snapshots.decode_statuses(body, NOW, specs, policy) == evaluator.latest
    assert sum(s.counts.total for s in evaluator.latest) > 0  # real counts went through
    # Another SLO set, a changed SLO or another policy: nothing (the page counts).
    assert snapshots.decode_statuses(body, NOW, specs[:1], policy) == ()
    changed = [specs[0], SloSpec("ttft", Sli(SliKind.LATENCY, "ttft", 0.2), 0.99,
                                 timedelta(days=28))]  # fmt: skip
    assert snapshots.decode_statuses(body, NOW, changed, policy) == ()
    stricter = Policy(policy.windows, (Rule(Severity.PAGE, 2.0, policy.windows[-1],
                                            policy.windows[0]),))  # fmt: skip
    assert snapshots.decode_statuses(body, NOW, specs, stricter) == ()


def test_a_stored_money_cycle_decodes_to_the_leaders_judgements(store):
    _seed(store)
    model = flat_model("4.00")
    policy = StepPolicy(min_tokens=1000)
    job = MoneyAlerts(store.sql, lambda: model, None, policy, timezone="Europe/Berlin")
    job(NOW)
    latest = job.latest
    assert latest is not None
    assert latest.purchasing is not None  # the advice over the last 28 days, kept too
    assert not latest.purchasing.advice.empty
    assert latest.purchasing.advice.timezone == "Europe/Berlin"
    assert [status for _, status, _ in latest.budgets if status is not None]  # judged
    assert [name for name, _ in latest.steps] == ["", "llama-70b"]
    body = snapshots.encode_money(latest)
    budgets = store.sql.budgets.all()

    assert snapshots.decode_money(body, model, latest.version, budgets, policy) == latest
    # Another cost model version, another step policy: nothing.
    assert snapshots.decode_money(body, model, "v2:other", budgets, policy) is None
    assert snapshots.decode_money(body, model, latest.version, budgets, StepPolicy()) is None
    # A budget changed since: its stored status is left out (the view judges it afresh).
    raised = parse_budgets(DOC.replace('amount: "100"', 'amount: "200"'))
    apply_budgets(store.sql, raised, NOW, "USD")
    decoded = snapshots.decode_money(body, model, latest.version, store.sql.budgets.all(), policy)
    assert decoded is not None
    assert decoded.budgets == ()
    assert decoded.steps == latest.steps


def test_a_worker_that_runs_no_job_shows_the_leaders_stored_results(store):
    """Two apps on one store, as ``serve --workers 2``: the leader's jobs run and store their
    results; the other worker's Overview and Budgets pages show them (stamped with the
    leader's cycle) and its JSON budgets answer says the leader's time too."""
    _seed(store)
    model = flat_model("4.00")
    cost_models.put_model(store.engine, model, NOW - timedelta(days=10))
    settings = ApiSettings(run_jobs=False, dashboard_answer_ttl_s=0, cost_model=model.name)
    leader_at = NOW - timedelta(seconds=20)
    leader = context_of(create_app(settings, store.engine, lambda: leader_at))
    assert leader.jobs.tick_evaluation(), leader.jobs.last_error
    assert leader.jobs.tick_money(), leader.jobs.last_error
    assert store.sql.results.get(snapshots.EVALUATE) is not None
    assert store.sql.results.get(snapshots.MONEY) is not None

    other = create_app(settings, store.engine, lambda: NOW)
    assert context_of(other).evaluator.latest == ()  # it never evaluated

    async def get(path: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=other)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
            return await c.get(path)

    stamp = f"as of {leader_at.strftime('%H:%M:%S')} UTC"
    overview = asyncio.run(get("/ui/overview"))
    assert overview.status_code == 200
    assert stamp in overview.text  # the leader's statuses, not counted at NOW
    budgets = asyncio.run(get("/ui/budgets"))
    assert budgets.status_code == 200
    assert stamp in budgets.text
    # The purchasing advice over the last 28 days, for a range too short to buy for.
    for page in ("/ui/cost", "/ui/scaling"):
        shown = asyncio.run(get(page))
        assert shown.status_code == 200
        assert f"as judged at {leader_at.strftime('%H:%M:%S')} UTC" in shown.text, page
        assert "purchasing-advice" in shown.text
    listed = asyncio.run(get("/api/v1/budgets")).json()
    assert [b["status"]["evaluated_at"] for b in listed["budgets"]] == [
        leader_at.isoformat().replace("+00:00", "Z")
    ]

    # Once the stored cycle is older than an interval (plus twice its run): counted at its now.
    late = NOW + timedelta(seconds=settings.evaluation_interval_s + 60)
    other = create_app(settings, store.engine, lambda: late)
    assert f"as of {late.strftime('%H:%M:%S')} UTC" in asyncio.run(get("/ui/overview")).text
