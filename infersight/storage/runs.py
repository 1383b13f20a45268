"""Load-test runs in the store: save a run with its per-request results, read them back.

Results are written in chunks of ``CHUNK`` rows (one multi-row insert each); inter-token gaps
are packed as float32, which keeps microsecond resolution for gaps under a few seconds.
``production_shapes`` reads the (input, output) token counts of recorded requests, which
``infersight loadtest --replay`` sends again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final

import numpy as np
from sqlalchemy import Engine, Row, delete, insert, select

from infersight.core.errors import InvalidInput, NotFound
from infersight.core.loadtest import (
    LoadTestRun,
    Phase,
    RequestResult,
    RunListing,
    ScenarioKind,
)
from infersight.core.query import Selector
from infersight.core.records import Status
from infersight.core.window import Window
from infersight.storage.tables import loadtest_results, loadtest_runs, requests

CHUNK: Final = 2000
MAX_REPLAY: Final = 1_000_000
_ITL: Final = np.dtype("<f4")


def _phase_dict(p: Phase) -> dict[str, Any]:
    return {
        "index": p.index,
        "label": p.label,
        "concurrency": p.concurrency,
        "start_s": p.start_s,
        "duration_s": p.duration_s,
    }


def _result_row(run_id: int, r: RequestResult) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "seq": r.seq,
        "phase": r.phase,
        "sent_s": r.sent_s,
        "e2e_s": r.e2e_s,
        "ttft_s": r.ttft_s,
        "tpot_s": r.tpot_s,
        "itl": np.asarray(r.itl_s, dtype=_ITL).tobytes(),
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "status": Status.OK.value if r.ok else Status.ERROR.value,
        "error": r.error[:256],
        "trace_id": r.trace_id[:32],
    }


def save_run(engine: Engine, run: LoadTestRun) -> int:
    """Store ``run`` and its results in one transaction; returns the new run id."""
    errors = sum(not r.ok for r in run.results)
    with engine.begin() as connection:
        run_id: int = connection.execute(
            insert(loadtest_runs)
            .values(
                name=run.name[:128],
                scenario=run.scenario.value,
                target=run.target[:1024],
                model=run.model[:256],
                started_at=run.started_at,
                duration_s=run.duration_s,
                requests=len(run.results),
                errors=errors,
                phases=json.dumps([_phase_dict(p) for p in run.phases]),
                config=json.dumps(run.config, default=str),
                warnings=json.dumps(list(run.warnings)),
            )
            .returning(loadtest_runs.c.id)
        ).scalar_one()
        rows = [_result_row(run_id, r) for r in run.results]
        for start in range(0, len(rows), CHUNK):
            connection.execute(insert(loadtest_results), rows[start : start + CHUNK])
    return run_id


def _listing(row: Row[Any]) -> RunListing:
    return RunListing(
        id=row.id,
        name=row.name,
        scenario=ScenarioKind(row.scenario),
        target=row.target,
        model=row.model,
        started_at=row.started_at,
        duration_s=row.duration_s,
        requests=row.requests,
        errors=row.errors,
    )


def list_runs(engine: Engine, limit: int = 100) -> list[RunListing]:
    """The newest runs first."""
    query = select(loadtest_runs).order_by(loadtest_runs.c.id.desc()).limit(max(1, limit))
    with engine.connect() as connection:
        return [_listing(row) for row in connection.execute(query)]


def _result(row: Row[Any]) -> RequestResult:
    return RequestResult(
        seq=row.seq,
        phase=row.phase,
        sent_s=row.sent_s,
        e2e_s=row.e2e_s,
        ttft_s=row.ttft_s,
        tpot_s=row.tpot_s,
        itl_s=tuple(float(x) for x in np.frombuffer(row.itl, dtype=_ITL)),
        input_tokens=row.input_tokens,
        output_tokens=row.output_tokens,
        ok=row.status == Status.OK.value,
        error=row.error,
        trace_id=row.trace_id,
    )


def get_run(engine: Engine, run_id: int) -> LoadTestRun:
    """A stored run with every result; ``NotFound`` when there is none with that id."""
    with engine.connect() as connection:
        head = connection.execute(select(loadtest_runs).where(loadtest_runs.c.id == run_id)).first()
        if head is None:
            raise NotFound(f"no load-test run {run_id}", details={"run": run_id})
        rows = connection.execute(
            select(loadtest_results)
            .where(loadtest_results.c.run_id == run_id)
            .order_by(loadtest_results.c.seq)
        ).all()
    return LoadTestRun(
        id=head.id,
        name=head.name,
        scenario=ScenarioKind(head.scenario),
        target=head.target,
        model=head.model,
        started_at=head.started_at,
        phases=tuple(Phase(**p) for p in json.loads(head.phases)),
        results=tuple(map(_result, rows)),
        warnings=tuple(json.loads(head.warnings)),
        config=json.loads(head.config),
    )


def delete_run(engine: Engine, run_id: int) -> None:
    with engine.begin() as connection:
        connection.execute(delete(loadtest_results).where(loadtest_results.c.run_id == run_id))
        gone = connection.execute(delete(loadtest_runs).where(loadtest_runs.c.id == run_id))
    if not gone.rowcount:
        raise NotFound(f"no load-test run {run_id}", details={"run": run_id})


def _selected(selector: Selector) -> Iterable[Any]:
    for label in ("model", "instance", "tenant", "priority"):
        value = getattr(selector, label)
        if value is not None:
            yield requests.c[label] == value
    if selector.tenants is not None:  # a token limited to tenants (core.query.Selector)
        yield requests.c.tenant.in_(sorted(selector.tenants))


def production_shapes(
    engine: Engine, window: Window, selector: Selector, limit: int = 10_000
) -> list[tuple[int, int]]:
    """(input, output) tokens of successful requests in ``window``, oldest first."""
    if not 1 <= limit <= MAX_REPLAY:
        raise InvalidInput(f"a replay takes between 1 and {MAX_REPLAY} requests")
    query = (
        select(requests.c.input_tokens, requests.c.output_tokens)
        .where(
            requests.c.start >= window.start,
            requests.c.start < window.end,
            requests.c.status == Status.OK.value,
            requests.c.input_tokens.is_not(None),
            requests.c.output_tokens > 0,
            *_selected(selector),
        )
        .order_by(requests.c.start)
        .limit(limit)
    )
    with engine.connect() as connection:
        return [(int(i), int(o)) for i, o in connection.execute(query)]
