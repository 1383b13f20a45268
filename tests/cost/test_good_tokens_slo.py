"""Good tokens are the tokens of requests within the SLOs that cover their series; where none
does, the cost model's ``goodRequest`` limits, and every answer says which (SQLite and
PostgreSQL). Kept hours and days stay exact past raw retention; changing an SLO re-measures
the past (``core.goodput``)."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import delete, select

from infersight.core.cost import CostModel, GoodRequest
from infersight.core.goodput import GoodBasis, GoodLimits, GoodPolicy
from infersight.core.query import Selector
from infersight.core.records import RequestRecord
from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.core.window import Window
from infersight.service.cost_view import cost_dict
from infersight.service.report_render import render_csv, render_html
from infersight.service.reports import build_weekly
from infersight.storage import cost, slo_store
from infersight.storage.cost_models import put_model
from infersight.storage.maintenance import RetentionPolicy, maintain
from infersight.storage.tables import good_token_counts, requests
from infersight.storage.writer import open_writer

DAY0 = datetime(2026, 11, 2, tzinfo=UTC)
WINDOW = Window(DAY0 + timedelta(days=1), DAY0 + timedelta(days=3, hours=5))
MODEL = CostModel("slo-good", "USD", good=GoodRequest(ttft_s=2.0, tpot_s=0.1))
SMALL, LARGE = "llama-8b", "llama-70b"


def _slo(name: str, metric: str, threshold: float, **selector: str) -> SloSpec:
    return SloSpec(
        name,
        Sli(SliKind.LATENCY, metric, threshold),
        0.99,
        timedelta(days=28),
        Selector(**selector),
    )


TPOT_8B = _slo("chat-8b-tpot", "tpot", 0.035, model=SMALL)


def _request(n: int, start: datetime, model: str, tpot: float, **extra: object) -> RequestRecord:
    values = {
        "trace_id": f"{n + 1:032x}", "span_id": f"{n + 1:016x}", "start": start,
        "instance": "gpu-0", "model": model, "tenant": ("a", "b")[n // 2 % 2], "ttft_s": 0.3,
        "tpot_s": tpot, "e2e_s": 2.0, "input_tokens": 100 + n, "output_tokens": 10, **extra,
    }  # fmt: skip
    return RequestRecord(**values)  # type: ignore[arg-type]


def _traffic() -> list[RequestRecord]:
    """Every hour for four days and for both models; one 8B request in five decodes at 50 ms a
    token: within the cost model's 100 ms, over the 35 ms SLO."""
    out = []
    for n in range(96):
        at = DAY0 + timedelta(hours=n, minutes=7)
        out.append(_request(2 * n, at, SMALL, 0.05 if n % 5 == 0 else 0.02))
        out.append(_request(2 * n + 1, at, LARGE, 0.05))
    return out


def _tokens(records: list[RequestRecord], window: Window, good=lambda r: True) -> int:
    return sum(
        (r.input_tokens or 0) + (r.output_tokens or 0)
        for r in records
        if r.start in window and good(r)
    )


def _by_model(result) -> dict[str, object]:
    return {g.labels["model"]: g for g in result.groups}


def test_the_slo_covering_a_series_decides_its_good_tokens_and_the_answer_says_so(store):
    records = _traffic()
    open_writer(store.engine).write_requests(records)
    slo_store.put_slo(store.engine, TPOT_8B, DAY0)
    result = cost.cost(store.engine, WINDOW, MODEL, group_by=("model",))
    small, large = _by_model(result)[SMALL], _by_model(result)[LARGE]
    in_small = [r for r in records if r.model == SMALL]
    # One request in five broke the TPOT SLO: its tokens are not good (before: all of them).
    assert small.good_tokens == _tokens(in_small, WINDOW, lambda r: r.tpot_s <= 0.035)
    assert small.good_tokens < small.tokens
    assert small.good_basis == "slo"
    # No SLO covers the 70B: the cost model's 2 s / 100 ms, which its requests all meet.
    assert large.good_tokens == large.tokens
    assert large.good_basis == "cost_model"
    assert result.total.good_basis == "mixed"
    assert result.good_tokens_exact
    body = cost_dict(result)
    assert body["good_tokens"]["basis"] == "mixed"
    assert body["good_tokens"]["rules"] == [
        {
            "basis": "slo",
            "slos": ["chat-8b-tpot"],
            "limits": {"ttft_s": None, "tpot_s": 0.035, "e2e_s": None},
            "series": 2,
            "models": [SMALL],
        },
        {
            "basis": "cost_model",
            "slos": [],
            "limits": {"ttft_s": 2.0, "tpot_s": 0.1, "e2e_s": None},
            "series": 2,
            "models": [LARGE],
        },
    ]
    assert "chat-8b-tpot (TPOT ≤ 35 ms) for llama-8b" in body["good_tokens"]["text"]
    assert "no latency SLO covers llama-70b" in body["good_tokens"]["text"]
    assert [g["good_basis"] for g in body["groups"]] == ["cost_model", "slo"]


def test_without_slos_every_series_falls_back_to_the_cost_model_and_is_labelled_so(store):
    records = _traffic()
    open_writer(store.engine).write_requests(records)
    result = cost.cost(store.engine, WINDOW, MODEL)
    assert result.total.good_tokens == _tokens(records, WINDOW)
    assert result.total.good_basis == "cost_model"
    assert (
        "goodRequest limits (TTFT ≤ 2 s, TPOT ≤ 100 ms)" in cost_dict(result)["good_tokens"]["text"]
    )


def test_kept_hours_and_days_under_slo_limits_stay_exact_past_raw_retention(store):
    records = _traffic()
    open_writer(store.engine).write_requests(records)
    slo_store.put_slo(store.engine, TPOT_8B, DAY0)
    slo_store.put_slo(store.engine, _slo("chat-8b-e2e", "e2e", 1.5, model=SMALL, tenant="b"), DAY0)
    put_model(store.engine, MODEL, DAY0)
    now = DAY0 + timedelta(days=4, hours=1)
    policy = RetentionPolicy(raw_days=2, minute_days=2)
    maintain(store.engine, now, policy)  # counts and keeps the closed days, then drops two
    with store.engine.connect() as connection:
        assert connection.execute(select(requests.c.start).order_by(requests.c.start)).first()[
            0
        ] >= DAY0 + timedelta(days=2)
        kept = {tuple(row) for row in connection.execute(
            select(good_token_counts.c.ttft_s, good_token_counts.c.tpot_s,
                   good_token_counts.c.e2e_s).distinct()
        )}  # fmt: skip
    # Tenant b of the 8B is held to both SLOs (TPOT and end-to-end), tenant a to TPOT only.
    assert kept == {(0.0, 0.035, 0.0), (0.0, 0.035, 1.5), (2.0, 0.1, 0.0)}
    window = Window(DAY0 + timedelta(hours=13, minutes=20), DAY0 + timedelta(days=3, hours=5))
    result = cost.cost(
        store.engine, window, MODEL, group_by=("model", "tenant"),
        finest=policy.finest_for(window, now),
    )  # fmt: skip
    assert result.good_tokens_exact
    lines = {(g.labels["model"], g.labels["tenant"]): g for g in result.groups}

    def mine(model: str, tenant: str):
        return [r for r in records if (r.model, r.tenant) == (model, tenant)]

    assert lines[(SMALL, "a")].good_tokens == _tokens(
        mine(SMALL, "a"), window, lambda r: r.tpot_s <= 0.035
    )
    # Every 8B request of tenant b takes 2 s end to end: none is within the e2e SLO.
    assert lines[(SMALL, "b")].good_tokens == 0
    assert lines[(LARGE, "a")].good_tokens == _tokens(mine(LARGE, "a"), window)


def test_a_changed_slo_re_measures_hours_in_raw_retention_and_says_partial_beyond(store):
    records = _traffic()
    open_writer(store.engine).write_requests(records)
    slo_store.put_slo(store.engine, TPOT_8B, DAY0)
    first = cost.cost(store.engine, WINDOW, MODEL, group_by=("model",))
    assert first.good_tokens_exact
    # Loosened to 60 ms: every 8B request is within it, over the whole window, at once.
    slo_store.put_slo(store.engine, _slo("chat-8b-tpot", "tpot", 0.06, model=SMALL), DAY0)
    looser = cost.cost(store.engine, WINDOW, MODEL, group_by=("model",))
    assert looser.good_tokens_exact
    assert _by_model(looser)[SMALL].good_tokens == _by_model(looser)[SMALL].tokens
    # Raw rows of the first window day dropped: hours counted under 60 ms are kept and reused;
    # under a third limit, never counted, the answer is partial, not silently wrong.
    with store.engine.begin() as connection:
        connection.execute(delete(requests).where(requests.c.start < DAY0 + timedelta(days=2)))
    again = cost.cost(store.engine, WINDOW, MODEL, group_by=("model",))
    assert again.good_tokens_exact
    assert _by_model(again)[SMALL].good_tokens == _by_model(looser)[SMALL].good_tokens
    slo_store.put_slo(store.engine, _slo("chat-8b-tpot", "tpot", 0.04, model=SMALL), DAY0)
    assert not cost.cost(store.engine, WINDOW, MODEL, group_by=("model",)).good_tokens_exact


@pytest.mark.parametrize(
    ("slos", "labels", "expected"),
    [
        ((), {"model": "m"}, (GoodLimits(2.0, 0.1), GoodBasis.COST_MODEL, ())),
        (
            (_slo("t1", "ttft", 0.5, model="m"), _slo("t2", "ttft", 0.3), _slo("p", "tpot", 0.04)),
            {"model": "m"},
            (GoodLimits(ttft_s=0.3, tpot_s=0.04), GoodBasis.SLO, ("p", "t1", "t2")),
        ),
        (
            (_slo("t1", "ttft", 0.5, model="other"),),
            {"model": "m"},
            (GoodLimits(2.0, 0.1), GoodBasis.COST_MODEL, ()),
        ),
        (
            (
                _slo("q", "queue", 0.1),
                SloSpec("avail", Sli(SliKind.AVAILABILITY), 0.999, timedelta(days=28)),
            ),
            {"model": "m"},
            (GoodLimits(2.0, 0.1), GoodBasis.COST_MODEL, ()),
        ),
    ],
    ids=[
        "no SLO: the cost model's limits",
        "several SLOs on one metric: the tightest, and each metric's own",
        "an SLO of another model does not cover the series",
        "queue and availability SLOs do not define good tokens",
    ],
)
def test_which_limits_hold_for_a_series(slos, labels, expected) -> None:
    series = {"model": "", "instance": "i", "tenant": "t", "priority": "p", **labels}
    rule = GoodPolicy.of(slos, GoodLimits(2.0, 0.1)).rule_for(series)
    assert (rule.limits, rule.basis, rule.slos) == expected


def test_the_weekly_report_says_what_its_good_tokens_were_measured_against(store):
    open_writer(store.engine).write_requests(_traffic())
    slo_store.put_slo(store.engine, TPOT_8B, DAY0)
    now = DAY0 + timedelta(days=8)
    body = build_weekly(store.sql, MODEL, "2026-W45", "UTC", RetentionPolicy().finest_for, now)
    assert body["summary"]["good_basis"] == "mixed"
    assert "chat-8b-tpot (TPOT ≤ 35 ms) for llama-8b" in body["summary"]["good_tokens_note"]
    assert body["by_model"]["good_tokens"]["basis"] == "mixed"
    html = render_html(body)
    assert 'id="good-basis" data-basis="mixed"' in html
    rows = list(csv.DictReader(io.StringIO(render_csv(body))))
    by_model = {r["model"]: r["good_basis"] for r in rows if r["section"] == "by_model"}
    assert by_model == {SMALL: "slo", LARGE: "cost_model"}
