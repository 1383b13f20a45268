"""Load-test runs stored and read back on SQLite and PostgreSQL; production shapes to replay."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from infersight.core.errors import InvalidInput, NotFound
from infersight.core.loadtest import LoadTestRun, RequestResult, ScenarioKind
from infersight.core.query import Selector
from infersight.core.window import Window
from infersight.loadgen.scenarios import step
from infersight.storage.runs import delete_run, get_run, list_runs, production_shapes, save_run
from infersight.storage.writer import open_writer
from tests.conftest import Store
from tests.factories import make_records

START = datetime(2026, 11, 30, 12, tzinfo=UTC)


def a_run(n: int = 2500) -> LoadTestRun:
    """A two-level run with ``n`` results (more than one insert chunk), some failed."""
    rng = np.random.default_rng(5)
    results = []
    for seq in range(1, n + 1):
        gaps = tuple(float(g) for g in rng.uniform(0.005, 0.05, int(rng.integers(0, 40))))
        ok = seq % 50 != 0
        results.append(
            RequestResult(
                seq=seq,
                phase=seq % 2,
                sent_s=seq * 0.01,
                e2e_s=0.5 + seq * 1e-4,
                ttft_s=0.1 if ok else None,
                tpot_s=0.02 if ok and gaps else None,
                itl_s=gaps if ok else (),
                input_tokens=100,
                output_tokens=len(gaps) + 1 if ok else 0,
                ok=ok,
                error="" if ok else "HTTP 503: overloaded",
                trace_id=f"{seq:032x}",
            )
        )
    return LoadTestRun(
        name="nightly",
        scenario=ScenarioKind.STEP,
        target="http://127.0.0.1:8000",
        model="meta-llama/Llama-3.1-8B-Instruct",
        started_at=START,
        phases=step([4, 8], 10.0),
        results=tuple(results),
        warnings=("the load generator may be the bottleneck",),
        config={"levels": [4, 8], "hold_s": 10.0},
    )


def test_a_run_reads_back_as_it_was_saved(store: Store) -> None:
    run = a_run()
    run_id = save_run(store.engine, run)
    back = get_run(store.engine, run_id)
    assert back.id == run_id
    assert (back.name, back.scenario, back.target, back.model) == (
        run.name, run.scenario, run.target, run.model,
    )  # fmt: skip
    assert back.started_at == START
    assert back.phases == run.phases
    assert back.warnings == run.warnings
    assert back.config == run.config
    assert len(back.results) == len(run.results)
    for got, want in zip(back.results, run.results, strict=True):
        assert got.itl_s == pytest.approx(want.itl_s, rel=1e-6)  # float32 on disk
        assert (got.seq, got.phase, got.ok, got.error, got.trace_id) == (
            want.seq, want.phase, want.ok, want.error, want.trace_id,
        )  # fmt: skip
        assert (got.ttft_s, got.tpot_s, got.e2e_s) == (want.ttft_s, want.tpot_s, want.e2e_s)
    listing = list_runs(store.engine)
    assert [(r.id, r.requests, r.errors) for r in listing] == [(run_id, 2500, 50)]


def test_runs_are_listed_newest_first_and_deleted_with_their_results(store: Store) -> None:
    first = save_run(store.engine, a_run(3))
    second = save_run(store.engine, a_run(4))
    assert [r.id for r in list_runs(store.engine)] == [second, first]
    delete_run(store.engine, first)
    with pytest.raises(NotFound):
        get_run(store.engine, first)
    with pytest.raises(NotFound):
        delete_run(store.engine, first)
    assert len(get_run(store.engine, second).results) == 4


def test_production_shapes_are_the_successful_requests_in_order(store: Store) -> None:
    records = make_records(np.random.default_rng(9), START, 300, span=timedelta(minutes=10))
    open_writer(store.engine).write_requests(records)
    window = Window(START, START + timedelta(minutes=5))
    selector = Selector(model="llama-8b")
    shapes = production_shapes(store.engine, window, selector)
    expected = [
        (r.input_tokens, r.output_tokens)
        for r in sorted(records, key=lambda r: r.start)
        if r.start < window.end and r.model == "llama-8b" and r.status.value == "ok"
    ]
    assert shapes == expected
    assert production_shapes(store.engine, window, selector, limit=5) == expected[:5]
    with pytest.raises(InvalidInput):
        production_shapes(store.engine, window, selector, limit=0)
