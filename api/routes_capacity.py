"""``GET /api/v1/capacity``: instances, GPU memory budget and physical floors for a workload.

The per-instance capacity is given (``capacity_rps``), measured by a stored load-test run
(``run``) or by production traffic (``production=7d``), rescaled to the planned output length.
The GPU and model tables are package data read once.
"""

from __future__ import annotations

import functools
from datetime import datetime
from importlib import resources
from typing import Annotated, Any

import yaml
from fastapi import APIRouter, Depends, Query, Request

from api.auth import Scope, requires
from api.errors import responses
from api.params import Id
from core.capacity import (
    DEFAULT_HEADROOM,
    PlanInput,
    plan,
    plan_to_dict,
    scale_capacity,
)
from core.errors import InvalidInput
from core.hardware import Catalog, catalog_from_mappings
from core.loadtest import measured_capacity, summarise
from core.query import Selector
from core.window import Window, parse_duration
from storage.capacity import production_capacity
from storage.runs import get_run

router = APIRouter(prefix="/api/v1", dependencies=[Depends(requires(Scope.READ))])


@functools.cache
def load_catalog() -> Catalog:
    """The GPU spec and model tables shipped in ``core/data``."""
    data = resources.files("core").joinpath("data")
    return catalog_from_mappings(
        yaml.safe_load(data.joinpath("gpu_specs.yaml").read_text(encoding="utf-8")),
        yaml.safe_load(data.joinpath("models.yaml").read_text(encoding="utf-8")),
    )


def resolve_capacity(
    engine: Any,
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


def _optional_positive(name: str, value: float | None) -> None:
    if value is not None and not value > 0:
        raise InvalidInput(f"{name} must be positive", details={name: value})


@router.get(
    "/capacity",
    summary="Instances, GPU memory budget and latency floors",
    description="Give exactly one of capacity_rps, run and production. An unknown model, GPU "
    "or run is answered 404; a workload that cannot be planned (no level of the run meets the "
    "targets, the model does not fit the GPU, no production traffic in the window) 400.",
    responses=responses(404),
)
def capacity(
    request: Request,
    model: Annotated[str, Query(max_length=128, description="e.g. llama-3-8b")],
    gpu: Annotated[str, Query(max_length=64, description="a100, h100, h200, l4 or l40s")],
    peak_qps: Annotated[float, Query(ge=0, le=1e7)],
    input_tokens: Annotated[int, Query(ge=1, le=10_000_000)] = 512,
    output_tokens: Annotated[int, Query(ge=1, le=10_000_000)] = 256,
    tensor_parallel: Annotated[int, Query(ge=1, le=64)] = 1,
    capacity_rps: Annotated[
        float | None, Query(gt=0, le=1e9, description="measured per instance")
    ] = None,
    run: Annotated[Id | None, Query(description="a stored step run measuring it")] = None,
    production: Annotated[
        str | None, Query(max_length=16, description="measure it over the last 7d, 24h, …")
    ] = None,
    production_model: Annotated[str | None, Query(max_length=256)] = None,
    instance: Annotated[str | None, Query(max_length=256)] = None,
    concurrency: Annotated[int | None, Query(ge=1, le=100_000)] = None,
    ttft_target: Annotated[float | None, Query(gt=0, le=86400, description="seconds")] = None,
    tpot_target: Annotated[float | None, Query(gt=0, le=86400, description="seconds")] = None,
    headroom: Annotated[float, Query(ge=0, le=4)] = DEFAULT_HEADROOM,
    kv_dtype: Annotated[str | None, Query(max_length=16)] = None,
) -> dict[str, Any]:
    for name, value in (("ttft_target", ttft_target), ("tpot_target", tpot_target)):
        _optional_positive(name, value)
    rps, measured, source = resolve_capacity(
        request.app.state.engine,
        request.app.state.clock(),
        capacity_rps=capacity_rps,
        run=run,
        production=production,
        selector=Selector(model=production_model, instance=instance),
        output_tokens=output_tokens,
        ttft_target_s=ttft_target,
        tpot_target_s=tpot_target,
    )
    result = plan(
        load_catalog(),
        PlanInput(
            model=model,
            gpu=gpu,
            peak_qps=peak_qps,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            capacity_rps=rps,
            tensor_parallel=tensor_parallel,
            concurrency=concurrency or measured,
            concurrency_source="given" if concurrency else "the measured level",
            ttft_target_s=ttft_target,
            tpot_target_s=tpot_target,
            headroom=headroom,
            kv_dtype=kv_dtype,
            capacity_source=source,
        ),
    )
    return plan_to_dict(result)
