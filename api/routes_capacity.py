"""``GET /api/v1/capacity``: instances, GPU memory budget and physical floors for a workload.

The per-instance capacity is given (``capacity_rps``) or measured by a stored load-test run
(``run``: its best level within the latency targets, no further than its knee, rescaled to the
planned output length). The GPU and model tables are package data read once.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Annotated, Any

import yaml
from fastapi import APIRouter, Depends, Query, Request

from api.auth import Scope, requires
from core.capacity import (
    DEFAULT_HEADROOM,
    Catalog,
    PlanInput,
    catalog_from_mappings,
    plan,
    plan_to_dict,
    scale_capacity,
)
from core.errors import InvalidInput
from core.loadtest import measured_capacity, summarise
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


def capacity_from_run(
    engine: Any,
    run_id: int,
    output_tokens: int,
    ttft_target_s: float | None,
    tpot_target_s: float | None,
) -> tuple[float, int, str]:
    """(requests per second at ``output_tokens``, concurrency, description) from a run."""
    run = get_run(engine, run_id)
    best = measured_capacity(
        summarise(run), ttft_p99_max_s=ttft_target_s, tpot_p99_max_s=tpot_target_s
    )
    rps = scale_capacity(best.throughput_rps, best.mean_output_tokens, output_tokens)
    return rps, best.concurrency, f"run {run_id}, level {best.phase}"


def _optional_positive(name: str, value: float | None) -> None:
    if value is not None and not value > 0:
        raise InvalidInput(f"{name} must be positive", details={name: value})


@router.get("/capacity", summary="Instances, GPU memory budget and latency floors")
def capacity(
    request: Request,
    model: Annotated[str, Query(max_length=128, description="e.g. llama-3-8b")],
    gpu: Annotated[str, Query(max_length=64, description="a100, h100, h200, l4 or l40s")],
    peak_qps: Annotated[float, Query(ge=0, le=1e7)],
    input_tokens: Annotated[int, Query(ge=1, le=10_000_000)] = 512,
    output_tokens: Annotated[int, Query(ge=1, le=10_000_000)] = 256,
    tensor_parallel: Annotated[int, Query(ge=1, le=64)] = 1,
    capacity_rps: Annotated[float | None, Query(description="measured per instance")] = None,
    run: Annotated[int | None, Query(description="a stored step run measuring it")] = None,
    concurrency: Annotated[int | None, Query(ge=1, le=100_000)] = None,
    ttft_target: Annotated[float | None, Query(description="seconds")] = None,
    tpot_target: Annotated[float | None, Query(description="seconds")] = None,
    headroom: Annotated[float, Query(ge=0, le=4)] = DEFAULT_HEADROOM,
    kv_dtype: Annotated[str | None, Query(max_length=16)] = None,
) -> dict[str, Any]:
    for name, value in (("ttft_target", ttft_target), ("tpot_target", tpot_target)):
        _optional_positive(name, value)
    if (capacity_rps is None) == (run is None):
        raise InvalidInput("give exactly one of capacity_rps and run")
    source = "given"
    if run is not None:
        capacity_rps, measured, source = capacity_from_run(
            request.app.state.engine, run, output_tokens, ttft_target, tpot_target
        )
        concurrency = concurrency or measured
    assert capacity_rps is not None  # one of the two, checked above
    _optional_positive("capacity_rps", capacity_rps)
    result = plan(
        load_catalog(),
        PlanInput(
            model=model,
            gpu=gpu,
            peak_qps=peak_qps,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            capacity_rps=capacity_rps,
            tensor_parallel=tensor_parallel,
            concurrency=concurrency,
            ttft_target_s=ttft_target,
            tpot_target_s=tpot_target,
            headroom=headroom,
            kv_dtype=kv_dtype,
            capacity_source=source,
        ),
    )
    return plan_to_dict(result)
