"""Baselines: capture, store, list and delete them; compare a window of production (or another
baseline) with one, and the threshold parsing of comparisons — shared by ``/api/v1/baselines``,
the dashboard's Baselines page, ``infersight baseline`` and the demo's seeding."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from infersight.core.baseline import Baseline
from infersight.core.baseline_compare import Comparison, Policy, window_label
from infersight.core.baseline_compare import compare as compare_baselines
from infersight.core.errors import InvalidInput
from infersight.core.loadtest import to_baseline
from infersight.core.query import Selector
from infersight.core.window import Resolution, Window

if TYPE_CHECKING:
    from infersight.core.cost import CostModel
    from infersight.storage.seam import Store


def parse_thresholds(text: str) -> dict[str, float]:
    """``"ttft.p99:0.2,tpot:0.15"`` → ``{"ttft.p99": 0.2, "tpot": 0.15}``."""
    out: dict[str, float] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        metric, sep, value = item.partition(":")
        try:
            out[metric.strip()] = float(value)
        except ValueError:
            raise InvalidInput(
                "thresholds are METRIC:NUMBER pairs", details={"thresholds": text[:200]}
            ) from None
        if not sep:
            raise InvalidInput("thresholds are METRIC:NUMBER pairs")
    return out


def capture_window(
    store: Store,
    name: str,
    window: Window,
    selector: Selector,
    now: datetime,
    *,
    finest: Resolution = Resolution.MINUTE,
    description: str = "",
    exact_max_rows: int | None = None,
    cost_model: CostModel | None = None,
) -> Baseline:
    """A baseline of the requests ``selector`` picks in ``window``, created ``now`` (not stored)."""
    options: dict[str, Any] = {} if exact_max_rows is None else {"exact_max_rows": exact_max_rows}
    return store.requests.capture_baseline(
        name,
        window,
        selector,
        now,
        description=description,
        finest=finest,
        cost_model=cost_model,
        **options,
    )


def capture_run(
    store: Store, run_id: int, name: str, now: datetime, description: str = ""
) -> Baseline:
    """A baseline of stored load-test run ``run_id``, created ``now`` (not stored)."""
    return to_baseline(store.runs.get(run_id), name, now, description)


def save_baseline(store: Store, baseline: Baseline, *, replace: bool = False) -> bool:
    """Store ``baseline``; whether it was created (not replaced: ``replace`` allows that)."""
    return store.baselines.save(baseline, replace=replace)


def get_baseline(store: Store, name: str) -> Baseline:
    """Baseline ``name`` (``NotFound`` when there is none)."""
    return store.baselines.get(name)


def list_baselines(store: Store, limit: int | None = None) -> list[Baseline]:
    """The stored baselines, newest first (at most ``limit``; default: the store's cap)."""
    return store.baselines.all() if limit is None else store.baselines.all(limit)


def delete_baseline(store: Store, name: str) -> None:
    """Delete baseline ``name`` (``NotFound`` when there is none)."""
    store.baselines.delete(name)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A window of production measured for a comparison, and how people read its name."""

    baseline: Baseline
    label: str


def window_candidate(
    store: Store,
    window: Window,
    selector: Selector,
    now: datetime,
    *,
    finest: Resolution,
    exact_max_rows: int,
    cost_model: CostModel,
) -> Candidate:
    """``window`` of the requests ``selector`` picks, measured as a comparison's candidate
    (named ``window@START-END`` in Unix seconds; its label the UTC range,
    ``core.baseline_compare.window_label``); ``exact_max_rows=0``: sketches only."""
    stamp = f"window@{int(window.start.timestamp())}-{int(window.end.timestamp())}"
    measured = capture_window(
        store,
        stamp,
        window,
        selector,
        now,
        finest=finest,
        exact_max_rows=exact_max_rows,
        cost_model=cost_model,
    )
    return Candidate(measured, window_label(window))


def compare(
    baseline: Baseline,
    candidate: Baseline,
    policy: Policy,
    *,
    seed: int = 0,
    label: str | None = None,
) -> Comparison:
    """Every metric of ``candidate`` against ``baseline`` with its verdict; the bootstrap is
    seeded with ``seed``, so the same question gets the same answer. ``label`` names the
    candidate to people (default: its name)."""
    rng = np.random.default_rng(seed)
    return compare_baselines(baseline, candidate, rng, policy, candidate_label=label)
