"""Load-test runs in the store: save one (with a baseline of it), read one, and the production
request shapes a load test replays — for ``infersight loadtest``, ``baseline import --as-run``,
the demo's step run, ``capacity plan --run`` and the Capacity page."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import TYPE_CHECKING

from infersight.core.loadtest import LoadTestRun, RunListing, to_baseline
from infersight.core.query import Selector
from infersight.core.window import Window

if TYPE_CHECKING:
    from infersight.storage.seam import Store


def save_run(store: Store, run: LoadTestRun) -> int:
    """Store ``run`` (every request's client-side timings); its id."""
    return store.runs.save(run)


def list_runs(store: Store, limit: int = 100) -> list[RunListing]:
    """The stored runs, newest first (at most ``limit``): what the Capacity page lists."""
    return store.runs.all(limit)


def get_run(store: Store, run_id: int) -> LoadTestRun:
    """Stored run ``run_id`` (``NotFound`` when there is none)."""
    return store.runs.get(run_id)


def save_run_as(
    store: Store, run: LoadTestRun, now: datetime, baseline: str | None, *, replace: bool = False
) -> LoadTestRun:
    """Store ``run`` and, when ``baseline`` names one, a baseline of it created ``now``
    (``replace``: over one of that name); the run with its id."""
    run_id = save_run(store, run)
    run = dataclasses.replace(run, id=run_id)
    if baseline is not None:
        measured = to_baseline(run, baseline, now, f"load-test run {run_id}")
        store.baselines.save(measured, replace=replace)
    return run


def production_shapes(store: Store, window: Window, selector: Selector) -> list[tuple[int, int]]:
    """(input tokens, output tokens) of the production requests ``selector`` picks in
    ``window``, for a load test to replay."""
    return store.requests.production_shapes(window, selector)
