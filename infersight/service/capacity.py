"""Capacity resolution: the per-instance capacity a plan is made with, and the tables it uses.

``resolve_capacity`` takes the capacity as given, measured by a stored load-test run, or by
production traffic, rescaled to the planned output length; ``load_catalog`` reads the GPU and
model tables (package data of ``core``) once. ``GET /api/v1/capacity`` and
``infersight capacity plan`` both plan with them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any

import yaml
from sqlalchemy import Engine

from infersight.core.capacity import instances_needed, scale_capacity
from infersight.core.errors import InvalidInput, NotFound
from infersight.core.hardware import Catalog, catalog_from_mappings
from infersight.core.loadtest import measured_capacity, summarise
from infersight.core.query import Selector
from infersight.core.window import Window, parse_duration
from infersight.service import scaling
from infersight.storage import scaling_reads
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


@dataclass(frozen=True, slots=True)
class PoolPlan:
    """One pool of a disaggregated model in a capacity plan: how many instances it has now,
    what one sustains (``None``: production never showed it within the targets) and how many
    the peak needs."""

    pool: str
    observed: int
    capacity_rps: float | None
    instances: int | None
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "observed_instances": self.observed,
            "capacity_rps": self.capacity_rps,
            "instances": self.instances,
            "source": self.source,
        }


def pool_plans(
    engine: Engine,
    now: datetime,
    *,
    production: str,
    model: str,
    peak_qps: float,
    headroom: float,
    output_tokens: int,
    ttft_target_s: float | None,
    tpot_target_s: float | None,
) -> list[PoolPlan]:
    """Each pool of ``model`` when its production traffic over the last ``production`` was
    split into prefill and decode (none: served whole). Every split request uses both pools,
    so each is sized for the whole peak with its own per-instance capacity. The prefill
    pool's is its busiest prefill-instance-minute whose legs did not queue (the replica
    recommender's bound, ``service.scaling.PREFILL_QUEUE_SHARE`` of the TTFT target); the
    decode pool's its busiest instance-minute within the TPOT target (the users' TTFT
    includes the prefill pool's work, so it does not judge a decode instance), rescaled to
    the planned output length."""
    window = Window(now - parse_duration(production), now)
    members = scaling_reads.pool_members(engine, window, model).get(model)
    if not members:
        return []
    prefill, decode = members[scaling_reads.PREFILL], members[scaling_reads.DECODE]
    share, default = scaling.PREFILL_QUEUE_SHARE, scaling.PREFILL_QUEUE_DEFAULT_S
    bound = default if ttft_target_s is None else share * ttft_target_s
    out: list[PoolPlan] = []
    best = scaling_reads.busiest_prefill_minute(engine, model, window, bound, prefill)
    if best is None:
        out.append(PoolPlan("prefill", len(prefill), None, None, "no minute within the bound"))
    else:
        out.append(
            PoolPlan(
                "prefill",
                len(prefill),
                best.legs_per_s,
                instances_needed(peak_qps, best.legs_per_s, headroom),
                f"production, busiest prefill minute with legs queued ≤ {bound * 1000:.0f} ms: "
                f"{best.instance} at {best.minute:%Y-%m-%d %H:%M}",
            )
        )
    try:
        measured = production_capacity(
            engine, window, Selector(model=model), tpot_p99_max_s=tpot_target_s, instances=decode
        )
    except (InvalidInput, NotFound):
        out.append(PoolPlan("decode", len(decode), None, None, "no minute within the target"))
    else:
        rps = scale_capacity(measured.throughput_rps, measured.mean_output_tokens, output_tokens)
        out.append(
            PoolPlan(
                "decode",
                len(decode),
                rps,
                instances_needed(peak_qps, rps, headroom),
                f"production, busiest decode minute within the targets: {measured.phase}",
            )
        )
    return out
