"""Capacity resolution: the per-instance capacity a plan is made with, and the tables it uses.

``resolve_capacity`` takes the capacity as given, measured by a stored load-test run, or by
production traffic, at the measured lengths unless others are planned (then rescaled to the
planned output length), and says every step in words; ``load_catalog`` reads the GPU and model
tables (package data of ``core``) once. ``GET /api/v1/capacity`` and
``infersight capacity plan`` both plan with them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any, Final

import yaml

from infersight.core.capacity import (
    DEFAULT_HEADROOM,
    PlanInput,
    instances_needed,
    scale_capacity,
)
from infersight.core.errors import InvalidInput, NotFound
from infersight.core.hardware import Catalog, catalog_from_mappings
from infersight.core.loadtest import (
    LoadTestRun,
    MeasuredCapacity,
    PhaseSummary,
    measured_capacity,
    summarise,
)
from infersight.core.query import Selector
from infersight.core.window import Window, parse_duration
from infersight.service import scaling
from infersight.storage.seam import DECODE, PREFILL, Store


@functools.cache
def load_catalog() -> Catalog:
    """The GPU spec and model tables shipped in ``core/data``."""
    data = resources.files("infersight.core").joinpath("data")
    return catalog_from_mappings(
        yaml.safe_load(data.joinpath("gpu_specs.yaml").read_text(encoding="utf-8")),
        yaml.safe_load(data.joinpath("models.yaml").read_text(encoding="utf-8")),
    )


#: The lengths a plan assumes when neither they nor a measurement give them.
DEFAULT_INPUT_TOKENS: Final = 512
DEFAULT_OUTPUT_TOKENS: Final = 256
#: A rescale by more than this factor (either way) is called an extrapolation.
FAR_RESCALE: Final = 4.0


@dataclass(frozen=True, slots=True)
class ResolvedCapacity:
    """The per-instance capacity a plan uses, the lengths it plans with, and how it got them.

    ``steps`` says in words every step from the measured (or given) figure to ``capacity_rps``
    and the lengths: which level of which run, lengths taken from the measurement or from the
    defaults, a rescale to another output length with its arithmetic, a GPU or model other than
    the one measured, a simulated measurement. The CLI prints them and the API answers them.
    """

    capacity_rps: float
    concurrency: int | None
    source: str
    input_tokens: int
    output_tokens: int
    measured_rps: float | None
    steps: tuple[str, ...]


def resolve_capacity(
    store: Store,
    now: datetime,
    *,
    capacity_rps: float | None,
    run: int | None,
    production: str | None,
    selector: Selector,
    input_tokens: int | None,
    output_tokens: int | None,
    ttft_target_s: float | None,
    tpot_target_s: float | None,
    model: str | None = None,
    gpu: str | None = None,
    tensor_parallel: int = 1,
) -> ResolvedCapacity:
    """The capacity from exactly one source: a given figure, a stored run (its best level
    within the targets, no further than the knee) or the last ``production`` duration of the
    store (its busiest instance-minute within the targets).

    Lengths not given are the measurement's (a run's mean prompt and answer; production's mean
    answer), else the defaults (512 in, 256 out): a run is planned at the workload it measured
    unless told otherwise, so the figure is the one the Capacity page shows. A measurement at
    another output length is rescaled to the planned one by output-token throughput. ``model``,
    ``gpu`` and ``tensor_parallel`` (the plan's) are compared with what the run recorded.
    """
    if sum(x is not None for x in (capacity_rps, run, production)) != 1:
        raise InvalidInput("give exactly one of capacity_rps, run and production")
    if capacity_rps is not None:
        return _given(capacity_rps, input_tokens, output_tokens)
    measured_input: float | None = None
    if run is not None:
        loaded = store.runs.get(run)
        summaries = summarise(loaded)
        best = measured_capacity(
            summaries, ttft_p99_max_s=ttft_target_s, tpot_p99_max_s=tpot_target_s
        )
        measured_input = _mean_input(loaded, summaries, best)
        source, what = f"run {run}, level {best.phase}", "run"
        prompts = f" from prompts of {measured_input:.0f} tokens" if measured_input else ""
        steps = [
            f"run {run} ({loaded.name}; served {loaded.model}) sustained "
            f"{best.throughput_rps:.3g} req/s per instance at level {best.phase} "
            f"({best.concurrency} in flight), its best level within the targets at or before "
            f"the knee, answering {best.mean_output_tokens:.0f} output tokens{prompts}",
            *_hardware_steps(loaded, gpu, tensor_parallel),
            *_model_steps(loaded.model, model),
        ]
    else:
        assert production is not None  # the one source left
        window = Window(now - parse_duration(production), now)
        best = store.requests.production_capacity(
            window, selector, ttft_p99_max_s=ttft_target_s, tpot_p99_max_s=tpot_target_s
        )
        source, what = f"production, busiest minute within the targets: {best.phase}", "minute"
        steps = [
            f"production over the last {production}: the busiest instance-minute within the "
            f"targets, {best.phase}, served {best.throughput_rps:.3g} req/s answering "
            f"{best.mean_output_tokens:.0f} output tokens a request"
        ]
        if gpu:
            steps.append(
                f"measured on that instance's own GPUs, taken as {tensor_parallel}× {gpu} as "
                "planned (a minute's figure is not tied to a GPU model)"
            )
    inp, out = _lengths(best, what, measured_input, input_tokens, output_tokens, steps)
    rps = _rescaled(best, out, rescale=output_tokens is not None, steps=steps)
    return ResolvedCapacity(
        rps, best.concurrency or None, source, inp, out, best.throughput_rps, tuple(steps)
    )


def _given(
    capacity_rps: float, input_tokens: int | None, output_tokens: int | None
) -> ResolvedCapacity:
    if not capacity_rps > 0:
        raise InvalidInput("capacity_rps must be positive")
    steps = [f"capacity {capacity_rps:g} req/s per instance, as given"]
    inp, out = input_tokens or DEFAULT_INPUT_TOKENS, output_tokens or DEFAULT_OUTPUT_TOKENS
    defaults = [
        f"{n} {what} tokens"
        for n, what, given in ((inp, "input", input_tokens), (out, "output", output_tokens))
        if given is None
    ]
    if defaults:
        steps.append(
            f"{' and '.join(defaults)} a request: the default (give the lengths of your "
            "workload: they size the memory budget and the floors)"
        )
    return ResolvedCapacity(capacity_rps, None, "given", inp, out, None, tuple(steps))


def _lengths(
    best: MeasuredCapacity,
    what: str,
    measured_input: float | None,
    input_tokens: int | None,
    output_tokens: int | None,
    steps: list[str],
) -> tuple[int, int]:
    """The planned (input, output) lengths: as given, else measured, else the defaults."""
    if output_tokens is None:
        out = max(1, round(best.mean_output_tokens))
        steps.append(
            f"planned with {out} output tokens a request, the {what}'s mean (give output "
            "tokens to plan another length)"
        )
    else:
        out = output_tokens
    if input_tokens is not None:
        inp = input_tokens
        if measured_input and max(inp / measured_input, measured_input / inp) > 2:
            steps.append(
                f"the run's prompts had {measured_input:.0f} tokens, the plan {inp}: the "
                "capacity is not rescaled for prompt length (longer prompts cost prefill time, "
                "checked against the TTFT floor below)"
            )
    elif measured_input:
        inp = max(1, round(measured_input))
        steps.append(f"planned with {inp} input tokens a request, the run's mean")
    else:
        inp = DEFAULT_INPUT_TOKENS
        steps.append(f"planned with {inp} input tokens a request: the default")
    return inp, out


def _rescaled(best: MeasuredCapacity, out: int, *, rescale: bool, steps: list[str]) -> float:
    """The measured capacity at ``out`` output tokens (``rescale``: asked for that length;
    otherwise the measured length, rounded, and the measured figure)."""
    if not rescale:
        return best.throughput_rps
    rps = scale_capacity(best.throughput_rps, best.mean_output_tokens, out)
    if abs(rps - best.throughput_rps) <= 1e-9 * best.throughput_rps:
        return best.throughput_rps
    steps.append(
        f"rescaled to {out} output tokens: {best.throughput_rps:.3g} × "
        f"{best.mean_output_tokens:.0f} ÷ {out} = {rps:.3g} req/s per instance (decode time "
        "grows with the answer, so what carries over to another length is output tokens "
        "per second)"
    )
    factor = max(out / best.mean_output_tokens, best.mean_output_tokens / out)
    if factor > FAR_RESCALE:
        steps.append(
            f"that is a {factor:.0f}× extrapolation: measure with answers near {out} tokens "
            "for a figure that holds"
        )
    return rps


def plan_input(
    resolved: ResolvedCapacity,
    *,
    model: str,
    gpu: str,
    peak_qps: float,
    tensor_parallel: int = 1,
    concurrency: int | None = None,
    ttft_target_s: float | None = None,
    tpot_target_s: float | None = None,
    headroom: float = DEFAULT_HEADROOM,
    kv_dtype: str | None = None,
) -> PlanInput:
    """What ``core.capacity.plan`` is asked, the same from the CLI and the API."""
    return PlanInput(
        model=model,
        gpu=gpu,
        peak_qps=peak_qps,
        input_tokens=resolved.input_tokens,
        output_tokens=resolved.output_tokens,
        capacity_rps=resolved.capacity_rps,
        tensor_parallel=tensor_parallel,
        concurrency=concurrency or resolved.concurrency,
        concurrency_source="given" if concurrency else "the measured level",
        ttft_target_s=ttft_target_s,
        tpot_target_s=tpot_target_s,
        headroom=headroom,
        kv_dtype=kv_dtype,
        capacity_source=resolved.source,
        measured_capacity_rps=resolved.measured_rps,
        capacity_steps=resolved.steps,
    )


def _mean_input(
    run: LoadTestRun, summaries: Sequence[PhaseSummary], best: MeasuredCapacity
) -> float | None:
    """The mean prompt length of the successful requests of the run's level ``best``."""
    level = next(
        (s for s in summaries if s.label == best.phase and s.concurrency == best.concurrency),
        None,
    )
    if level is None:
        return None
    lengths = [r.input_tokens for r in run.results if r.phase == level.phase and r.ok]
    lengths = [n for n in lengths if n > 0]
    return sum(lengths) / len(lengths) if lengths else None


def _gpu_name(name: str) -> str:
    try:
        return load_catalog().gpu(name).name
    except NotFound:
        return name.strip().lower()


def _hardware_steps(run: LoadTestRun, gpu: str | None, tensor_parallel: int) -> list[str]:
    """What the run recorded of the hardware it measured (``config["hardware"]``: ``gpu``,
    ``tensor_parallel``, ``simulated``, ``note``) against the plan's."""
    hardware = run.config.get("hardware") if isinstance(run.config, Mapping) else None
    if not isinstance(hardware, Mapping) or not hardware.get("gpu"):
        if gpu is None:
            return []
        return [
            f"the run does not record the GPU it measured: its capacity is taken as that of "
            f"{tensor_parallel}× {gpu}, as planned"
        ]
    measured = str(hardware["gpu"])
    measured_tp = int(hardware.get("tensor_parallel") or 1)
    simulated = bool(hardware.get("simulated"))
    note = f" ({hardware['note']})" if hardware.get("note") else ""
    described = f"{'a simulated ' if simulated else ''}{measured_tp}× {measured}{note}"
    steps = [
        f"the run measured {described}"
        + (": the figure is the simulator's, not a real GPU's" if simulated else "")
    ]
    if gpu is not None and (
        _gpu_name(measured) != _gpu_name(gpu) or measured_tp != tensor_parallel
    ):
        steps.append(
            f"the plan is for {tensor_parallel}× {gpu}: the capacity is used as measured on "
            f"{measured_tp}× {measured}, not converted between GPUs; measure on {gpu} for a "
            "figure that holds"
        )
    return steps


def _model_steps(served: str, model: str | None) -> list[str]:
    """The run's served model against the plan's, through the catalogue's matching."""
    if model is None:
        return []
    catalog = load_catalog()
    try:
        planned = catalog.model(model).name
    except NotFound:
        return []  # the plan itself refuses it
    try:
        measured = catalog.model(served).name
    except NotFound:
        return [
            f"the run served {served}, which the catalogue does not know: its capacity is "
            f"taken as {model}'s"
        ]
    if measured != planned:
        return [
            f"the run served {served} ({measured}), the plan is for {model} ({planned}): "
            "another model's capacity does not carry over"
        ]
    return []


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
    store: Store,
    now: datetime,
    *,
    production: str,
    model: str,
    peak_qps: float,
    headroom: float,
    output_tokens: int | None,
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
    members = store.demand.pool_members(window, model).get(model)
    if not members:
        return []
    prefill, decode = members[PREFILL], members[DECODE]
    share, default = scaling.PREFILL_QUEUE_SHARE, scaling.PREFILL_QUEUE_DEFAULT_S
    bound = default if ttft_target_s is None else share * ttft_target_s
    out: list[PoolPlan] = []
    best = store.demand.busiest_prefill_minute(model, window, bound, prefill)
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
        measured = store.requests.production_capacity(
            window, Selector(model=model), tpot_p99_max_s=tpot_target_s, instances=decode
        )
    except (InvalidInput, NotFound):
        out.append(PoolPlan("decode", len(decode), None, None, "no minute within the target"))
    else:
        rps = (
            scale_capacity(measured.throughput_rps, measured.mean_output_tokens, output_tokens)
            if output_tokens is not None
            else measured.throughput_rps
        )
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
