"""Capacity resolution: the per-instance capacity a plan is made with, and the tables it uses.

``resolve_capacity`` takes the capacity as given, measured by a stored load-test run, or by
production traffic, rescaled to the planned output length; ``load_catalog`` reads the GPU and
model tables (package data of ``core``) once. ``GET /api/v1/capacity`` and
``infersight capacity plan`` both plan with them.
"""

from __future__ import annotations

import functools
from datetime import datetime
from importlib import resources

import yaml
from sqlalchemy import Engine

from infersight.core.capacity import scale_capacity
from infersight.core.errors import InvalidInput
from infersight.core.hardware import Catalog, catalog_from_mappings
from infersight.core.loadtest import measured_capacity, summarise
from infersight.core.query import Selector
from infersight.core.window import Window, parse_duration
from infersight.storage.capacity import production_capacity
from infersight.storage.runs import get_run


@functools.cache
def load_catalog() -> Catalog:
    """The GPU spec and model tables shipped in ``core/data``."""
    data = resources.files("infersight.core").joinpath("data")
    return catalog_from_mappings(
        yaml.safe_load(data.joinpath("gpu_specs.yaml").read_text(encoding="utf-8")),
        yaml.safe_load(data.joinpath("models.yaml").read_text(encoding="utf-8")),
    )


def resolve_capacity(
    engine: Engine,
    now: datetime,
    *,
    capacity_rps: float | None,
    run: int | None,
    production: str | None,
    selector: Selector,
    output_tokens: int,
    ttft_target_s: float | None,
    tpot_target_s: float | None,
) -> tuple[float, int | None, str]:
    """(requests per second at ``output_tokens``, concurrency if measured, where it came from).

    Exactly one source: a given figure, a stored run (its best level within the targets, no
    further than the knee) or the last ``production`` duration of the store (its busiest
    instance-minute within the targets). Measurements are rescaled to the planned output length.
    """
    if sum(x is not None for x in (capacity_rps, run, production)) != 1:
        raise InvalidInput("give exactly one of capacity_rps, run and production")
    if capacity_rps is not None:
        if not capacity_rps > 0:
            raise InvalidInput("capacity_rps must be positive")
        return capacity_rps, None, "given"
    if run is not None:
        best = measured_capacity(
            summarise(get_run(engine, run)),
            ttft_p99_max_s=ttft_target_s,
            tpot_p99_max_s=tpot_target_s,
        )
        source = f"run {run}, level {best.phase}"
    else:
        assert production is not None  # the one source left
        window = Window(now - parse_duration(production), now)
        best = production_capacity(
            engine, window, selector, ttft_p99_max_s=ttft_target_s, tpot_p99_max_s=tpot_target_s
        )
        source = f"production, busiest minute within the targets: {best.phase}"
    rps = scale_capacity(best.throughput_rps, best.mean_output_tokens, output_tokens)
    return rps, best.concurrency or None, source
