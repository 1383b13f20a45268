"""Good tokens: which requests count, and what happens once retention dropped raw rows."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import delete

from infersight.core.cost import GoodRequest
from infersight.core.records import RequestRecord
from infersight.storage import cost
from infersight.storage.tables import requests
from infersight.storage.writer import open_writer
from tests.cost.scenario import WEEK

GOOD = GoodRequest(ttft_s=1.0, tpot_s=0.05)
CASES = [
    # (what the request was, ttft, tpot, status, counts as good)
    ("met both objectives", 0.5, 0.02, "ok", True),
    ("exactly at the TTFT objective", 1.0, 0.02, "ok", True),
    ("a slow first token", 1.5, 0.02, "ok", False),
    ("slow decoding", 0.5, 0.08, "ok", False),
    ("an error, however fast", 0.1, 0.01, "error", False),
    ("an engine that reports no TTFT (TGI) is judged by what it reports", None, 0.02, "ok", True),
]


def _records(day: int) -> list[RequestRecord]:
    return [
        RequestRecord(
            trace_id=f"{day + 1:08x}{i + 1:024x}",
            span_id=f"{i + 1:016x}",
            start=WEEK.start + timedelta(days=day, hours=i),
            instance="gpu-0",
            model="m",
            ttft_s=ttft,
            tpot_s=tpot,
            status=status,
            input_tokens=100 * (i + 1),
            output_tokens=10 * (i + 1),
        )
        for i, (_, ttft, tpot, status, _) in enumerate(CASES)
    ]


def test_good_tokens_are_the_tokens_of_successful_requests_that_met_both_objectives(store):
    open_writer(store.engine).write_requests(_records(0))
    with store.engine.connect() as connection:
        (series,), exact = cost.series_usage(connection, WEEK, GOOD)
    expected = sum(110 * (i + 1) for i, case in enumerate(CASES) if case[4])
    assert series.good_tokens == expected
    assert series.tokens == sum(110 * (i + 1) for i in range(len(CASES)))
    assert exact


def test_once_raw_rows_are_gone_good_tokens_are_marked_partial(store):
    writer = open_writer(store.engine)
    writer.write_requests(_records(0))
    writer.write_requests(_records(3))
    with store.engine.begin() as connection:  # what retention does to the older day
        connection.execute(
            delete(requests).where(requests.c.start < WEEK.start + timedelta(days=1))
        )
    with store.engine.connect() as connection:
        (series,), exact = cost.series_usage(connection, WEEK, GOOD)
    assert not exact
    assert series.requests == 2 * len(CASES)  # the rollups still count every request
    assert series.good_tokens == sum(110 * (i + 1) for i, case in enumerate(CASES) if case[4])
