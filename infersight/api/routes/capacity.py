"""``GET /api/v1/capacity``: instances, GPU memory budget and physical floors for a workload.

The per-instance capacity is given (``capacity_rps``), measured by a stored load-test run
(``run``) or by production traffic (``production=7d``), at the measured lengths unless others are
asked (then rescaled to the planned output length); ``instances.capacity_steps`` says every step
(``service.capacity``), as ``infersight capacity plan`` prints them.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from infersight.api.auth import Scope
from infersight.api.deps import App, requires
from infersight.api.errors import responses
from infersight.api.params import Id, KnownQueryRoute
from infersight.core.capacity import DEFAULT_HEADROOM, plan, plan_to_dict
from infersight.core.errors import InvalidInput
from infersight.core.query import Selector
from infersight.service.capacity import load_catalog, plan_input, pool_plans, resolve_capacity

router = APIRouter(
    prefix="/api/v1",
    dependencies=[Depends(requires(Scope.READ))],
    route_class=KnownQueryRoute,
    tags=["capacity"],
)


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
    app: App,
    model: Annotated[
        str,
        Query(
            max_length=128,
            description="a catalogue name (llama-3.1-8b) or a served id: "
            "meta-llama/Llama-3.1-8B-Instruct, with or without the organisation, any case; "
            "a quantisation suffix (-AWQ, -FP8, -GPTQ-Int4) sets the weight dtype. An unknown "
            "id is answered 404 with close_matches",
        ),
    ],
    gpu: Annotated[
        str,
        Query(
            max_length=64,
            description="a GPU of the catalogue (infersight capacity gpus: b200, h200, h100, "
            "a100, a100-40gb, l40s, l40, a10g, a10, l4, t4) or its name as NVML reports it "
            "(NVIDIA H100 80GB HBM3); an unknown one is answered 404 with the known ones",
        ),
    ],
    peak_qps: Annotated[float, Query(ge=0, le=1e7)],
    input_tokens: Annotated[
        int | None,
        Query(ge=1, le=10_000_000, description="default: the measured run's mean, else 512"),
    ] = None,
    output_tokens: Annotated[
        int | None,
        Query(
            ge=1,
            le=10_000_000,
            description="default: the measured mean, else 256; a measurement at another "
            "length is rescaled by output tokens per second (said in capacity_steps)",
        ),
    ] = None,
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
    resolved = resolve_capacity(
        app.store,
        app.clock(),
        capacity_rps=capacity_rps,
        run=run,
        production=production,
        selector=Selector(model=production_model, instance=instance),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        ttft_target_s=ttft_target,
        tpot_target_s=tpot_target,
        model=model,
        gpu=gpu,
        tensor_parallel=tensor_parallel,
    )
    asked = plan_input(
        resolved,
        model=model,
        gpu=gpu,
        peak_qps=peak_qps,
        tensor_parallel=tensor_parallel,
        concurrency=concurrency,
        ttft_target_s=ttft_target,
        tpot_target_s=tpot_target,
        headroom=headroom,
        kv_dtype=kv_dtype,
    )
    result = plan(load_catalog(), asked)
    answer = plan_to_dict(result)
    if production is not None and production_model is not None and instance is None:
        answer["pools"] = [
            p.to_dict()
            for p in pool_plans(
                app.store,
                app.clock(),
                production=production,
                model=production_model,
                peak_qps=peak_qps,
                headroom=headroom,
                output_tokens=resolved.output_tokens,
                ttft_target_s=ttft_target,
                tpot_target_s=tpot_target,
            )
        ]
    return answer
