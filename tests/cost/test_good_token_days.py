"""Good tokens of whole days are counted once, kept, and stay exact past raw retention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, func, select

from infersight.core.cost import CostModel, GoodRequest
from infersight.core.records import RequestRecord
from infersight.core.window import Window
from infersight.storage import cost
from infersight.storage.cost_models import put_model
from infersight.storage.maintenance import RetentionPolicy, maintain
from infersight.storage.tables import good_token_counts, requests
from infersight.storage.writer import open_writer

DAY0 = datetime(2026, 11, 2, tzinfo=UTC)
WINDOW = Window(DAY0 + timedelta(days=1), DAY0 + timedelta(days=3, hours=5))
MODEL = CostModel("good-days", "USD", good=GoodRequest(ttft_s=1.0, tpot_s=0.05))


def _request(n: int, start: datetime, ttft: float, tpot: float = 0.02) -> RequestRecord:
    return RequestRecord(
        trace_id=f"{n + 1:032x}", span_id=f"{n + 1:016x}", start=start, instance="gpu-0",
        model="m", tenant=("a", "b")[n % 2], ttft_s=ttft, tpot_s=tpot,
        input_tokens=100 + n, output_tokens=10,
    )  # fmt: skip


def _traffic() -> list[RequestRecord]:
    """Every two hours over four days: good, slow first token, slow decoding, in turn."""
    out = []
    for n in range(48):
        shape = n % 3
        out.append(_request(n, DAY0 + timedelta(hours=2 * n, minutes=7),
                            0.4 if shape != 1 else 1.5, 0.02 if shape != 2 else 0.08))  # fmt: skip
    return out


def _expected(records: list[RequestRecord], window: Window) -> int:
    return sum(
        (r.input_tokens or 0) + (r.output_tokens or 0)
        for r in records
        if r.start in window and r.ttft_s <= 1.0 and r.tpot_s <= 0.05  # type: ignore[operator]
    )


def _kept_days(engine) -> int:
    with engine.connect() as connection:
        kept = good_token_counts.c
        query = select(func.count(func.distinct(kept.bucket))).where(kept.resolution == "1d")
        return connection.execute(query).scalar()


def test_whole_days_are_kept_and_answer_once_their_raw_rows_are_gone(store):
    records = _traffic()
    open_writer(store.engine).write_requests(records)
    first = cost.cost(store.engine, WINDOW, MODEL)
    assert first.good_tokens_exact
    assert first.total.good_tokens == _expected(records, WINDOW)
    assert _kept_days(store.engine) == 2  # the window's two whole days
    with store.engine.begin() as connection:  # retention drops the days before the third
        connection.execute(delete(requests).where(requests.c.start < DAY0 + timedelta(days=2)))
    again = cost.cost(store.engine, WINDOW, MODEL)
    assert again.good_tokens_exact
    assert again.total.good_tokens == first.total.good_tokens
    assert again.groups == first.groups


def test_a_late_request_in_a_kept_day_makes_the_day_count_again(store):
    records = _traffic()
    writer = open_writer(store.engine)
    writer.write_requests(records)
    cost.cost(store.engine, WINDOW, MODEL)
    late = _request(1000, DAY0 + timedelta(days=1, hours=13, minutes=1), 0.2)
    writer.write_requests([late])
    answer = cost.cost(store.engine, WINDOW, MODEL)
    assert answer.good_tokens_exact
    assert answer.total.good_tokens == _expected([*records, late], WINDOW)


def test_maintenance_keeps_the_days_it_drops_for_every_stored_cost_models_limits(store):
    records = _traffic()
    open_writer(store.engine).write_requests(records)
    put_model(store.engine, MODEL, DAY0)
    now = DAY0 + timedelta(days=4, hours=1)
    maintain(store.engine, now, RetentionPolicy(raw_days=2, minute_days=30))
    with store.engine.connect() as connection:
        oldest = connection.execute(select(func.min(requests.c.start))).scalar()
    assert oldest >= DAY0 + timedelta(days=2)  # raw rows of the first two days are gone
    answer = cost.cost(store.engine, WINDOW, MODEL)
    assert answer.good_tokens_exact
    assert answer.total.good_tokens == _expected(records, WINDOW)


def test_a_window_starting_mid_day_beyond_raw_retention_reads_kept_hours(store):
    records = _traffic()
    open_writer(store.engine).write_requests(records)
    put_model(store.engine, MODEL, DAY0)
    now = DAY0 + timedelta(days=4, hours=1)
    policy = RetentionPolicy(raw_days=2, minute_days=2)
    maintain(store.engine, now, policy)
    window = Window(DAY0 + timedelta(hours=13, minutes=20), DAY0 + timedelta(days=3, hours=5))
    answer = cost.cost(store.engine, window, MODEL, finest=policy.finest_for(window, now))
    assert answer.good_tokens_exact
    assert answer.total.requests == sum(r.start in window for r in records)
    assert answer.total.good_tokens == _expected(records, window)
