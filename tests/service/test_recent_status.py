"""The overview's SLO statuses come from the evaluation's last cycle while it is fresh
(``service.slos.with_status`` with ``recent``): the same figures the cycle counted, and
counted afresh once the cycle is older than ``max_age`` or the SLOs changed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.service.evaluation import Evaluator, default_policy
from infersight.service.slos import with_status
from infersight.storage import slo_store
from infersight.storage.writer import open_writer
from tests.factories import make_records

NOW = datetime(2026, 11, 30, 9, 17, 23, tzinfo=UTC)
AGE = timedelta(seconds=30)


def test_a_fresh_cycle_is_shown_and_a_stale_or_outdated_one_is_counted_again(store):
    open_writer(store.engine).write_requests(
        make_records(np.random.default_rng(2), NOW - timedelta(hours=3), 2000,
                     span=timedelta(hours=3), error_rate=0.05)
    )  # fmt: skip
    policy = default_policy()
    for spec in (
        SloSpec("avail", Sli(SliKind.AVAILABILITY), 0.999, timedelta(days=7)),
        SloSpec("ttft", Sli(SliKind.LATENCY, "ttft", 0.1), 0.99, timedelta(days=7)),
    ):
        slo_store.put_slo(store.engine, spec, NOW - timedelta(days=1))
    evaluator = Evaluator(store.sql, policy)
    evaluator.run(NOW)
    specs = slo_store.list_slos(store.engine)
    assert [s.spec for s in evaluator.latest] == specs

    later = NOW + timedelta(seconds=20)
    shown = with_status(store.sql, specs, policy, later, None, evaluator.latest, AGE)
    counted = with_status(store.sql, specs, policy, NOW, None)
    assert [v.status for v in shown] == [v.status for v in counted]  # the cycle's figures
    # Older than max_age: counted at the new now.
    stale = with_status(
        store.sql, specs, policy, NOW + AGE + timedelta(seconds=1), None, evaluator.latest, AGE
    )
    assert {v.status.at for v in stale} == {NOW + AGE + timedelta(seconds=1)}
    # A changed SLO set: counted afresh too.
    slo_store.put_slo(
        store.engine,
        SloSpec("tpot", Sli(SliKind.LATENCY, "tpot", 0.02), 0.99, timedelta(days=7)),
        NOW,
    )
    specs = slo_store.list_slos(store.engine)
    changed = with_status(store.sql, specs, policy, later, None, evaluator.latest, AGE)
    assert len(changed) == 3
    assert {v.status.at for v in changed} == {later}
