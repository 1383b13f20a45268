"""Baselines: capture, store, list and delete them, and the threshold parsing of comparisons —
shared by ``/api/v1/baselines``, the dashboard's Baselines page, ``infersight baseline`` and
the demo's seeding."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from infersight.core.baseline import Baseline
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
