"""``infersight capacity plan|gpus|models``: how many instances, and does the model fit.

``plan`` takes the peak QPS, input and output lengths and latency targets, and the measured
per-instance capacity (``--capacity-rps``, ``--run ID`` of a stored step run, or
``--production 7d``: the busiest minute of an instance within the targets), and prints
the instance count with 30–50 % headroom, the GPU memory budget of one instance and the
physical floors the targets are checked against. Exit code 1 when a check fails (a target
below its floor, or a budget over 85 % of GPU memory), so a pipeline can gate on it.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any

import click

from infersight.cli.group import open_store
from infersight.core.capacity import DEFAULT_HEADROOM, CapacityPlan, plan, plan_to_dict
from infersight.core.hardware import GIB
from infersight.core.query import Selector
from infersight.service.capacity import load_catalog, plan_input, resolve_capacity


@click.group("capacity")
def capacity() -> None:
    """Capacity planning: instances, GPU memory and physical latency floors."""


@capacity.command("plan")
@click.option("--model", required=True, help="A model of `infersight capacity models`.")
@click.option("--gpu", required=True, help="A GPU of `infersight capacity gpus`.")
@click.option(
    "--tp",
    "tensor_parallel",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="GPUs per instance (tensor parallel).",
)
@click.option("--peak-qps", type=click.FloatRange(min=0), required=True)
@click.option(
    "--input-tokens",
    type=click.IntRange(1),
    default=None,
    help="Prompt tokens a request (default: the measured run's mean, else 512).",
)
@click.option(
    "--output-tokens",
    type=click.IntRange(1),
    default=None,
    help="Answer tokens a request (default: the measured mean, else 256); a measurement at "
    "another length is rescaled by output tokens per second.",
)
@click.option(
    "--ttft-target",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds (p99).",
)
@click.option(
    "--tpot-target",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds (p99).",
)
@click.option(
    "--capacity-rps",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Measured requests per second one instance sustains.",
)
@click.option(
    "--run",
    "run_id",
    type=int,
    default=None,
    help="A stored load-test run that measured the capacity.",
)
@click.option(
    "--production",
    metavar="DURATION",
    default=None,
    help="Measure the capacity from the last DURATION of production traffic (e.g. 7d).",
)
@click.option("--production-model", default=None, help="Served model name to measure.")
@click.option("--instance", default=None, help="Only this instance's production traffic.")
@click.option(
    "--concurrency",
    type=click.IntRange(1),
    default=None,
    help="Sequences in flight per instance (default: the run's, or Little's law).",
)
@click.option(
    "--headroom", type=click.FloatRange(0, 4), default=DEFAULT_HEADROOM, show_default=True
)
@click.option("--kv-dtype", default=None, help="KV-cache dtype when not the model's (fp8).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def plan_command(ctx: click.Context, /, **o: Any) -> None:
    """Instances for a peak, one instance's GPU memory budget, and the latency floors."""
    sources = (o["capacity_rps"], o["run_id"], o["production"])
    if sum(x is not None for x in sources) != 1:
        raise click.UsageError("give exactly one of --capacity-rps, --run and --production")
    store = open_store(ctx)
    try:
        resolved = resolve_capacity(
            store,
            datetime.now(UTC),
            capacity_rps=o["capacity_rps"],
            run=o["run_id"],
            production=o["production"],
            selector=Selector(model=o["production_model"], instance=o["instance"]),
            input_tokens=o["input_tokens"],
            output_tokens=o["output_tokens"],
            ttft_target_s=o["ttft_target"],
            tpot_target_s=o["tpot_target"],
            model=o["model"],
            gpu=o["gpu"],
            tensor_parallel=o["tensor_parallel"],
        )
    finally:
        store.dispose()
    asked = plan_input(
        resolved,
        model=o["model"],
        gpu=o["gpu"],
        peak_qps=o["peak_qps"],
        tensor_parallel=o["tensor_parallel"],
        concurrency=o["concurrency"],
        ttft_target_s=o["ttft_target"],
        tpot_target_s=o["tpot_target"],
        headroom=o["headroom"],
        kv_dtype=o["kv_dtype"],
    )
    result = plan(load_catalog(), asked)
    if o["as_json"]:
        click.echo(json.dumps(plan_to_dict(result), indent=2))
    else:
        _print(result)
    if not result.feasible:
        sys.exit(1)


def _print(result: CapacityPlan) -> None:
    p, n, m, fl = result.request, result.instances, result.memory, result.floors
    spec = result.spec
    shape = ""
    if spec is not None:
        weights = spec.weight_dtype or spec.dtype
        experts = f", {spec.expert_dtype} experts" if spec.expert_dtype else ""
        shape = f" [catalogue {spec.name}, {weights} weights{experts}]"
    click.echo(
        f"{p.model}{shape} on {p.tensor_parallel}× {p.gpu}: {n.instances} instances "
        f"({n.instances * p.tensor_parallel} GPUs) for {p.peak_qps:g} QPS at peak "
        f"with {n.headroom:.0%} headroom ({n.instances_low}–{n.instances_high} for 30–50 %)"
    )
    click.echo(
        f"  per instance: {n.capacity_rps:.2f} req/s ({p.capacity_source}), "
        f"{n.utilisation_at_peak:.0%} busy at peak, {result.concurrency} sequences in flight "
        f"({result.concurrency_source})"
    )
    click.echo(
        f"  memory: weights {m.weights_bytes / GIB:.1f} GiB + KV {m.kv_cache_bytes / GIB:.1f} GiB "
        f"({m.kv_bytes_per_token / 1024:.0f} KiB/token × {m.concurrency} × {m.context_tokens}) "
        f"+ activations {m.activation_bytes / GIB:.1f} GiB + CUDA {m.cuda_context_bytes / GIB:.1f}"
        f" GiB = {m.total_bytes / GIB:.1f} GiB of {m.limit_bytes / GIB:.1f} GiB allowed"
    )
    click.echo(
        f"  floors: TPOT ≥ {fl.tpot_s * 1e3:.1f} ms ({fl.tpot_at_concurrency_s * 1e3:.1f} ms at "
        f"{result.concurrency} sequences), TTFT ≥ {fl.ttft_s * 1e3:.1f} ms for "
        f"{p.input_tokens} input tokens"
    )
    for f in result.findings:
        click.echo(f"  {'ok' if f.ok else 'FAIL'}  {f.check}: {f.message}")
    if p.capacity_steps:
        click.echo("  how the capacity and lengths were reached:")
        for step in p.capacity_steps:
            click.echo(f"    - {step}")


@capacity.command("gpus")
def gpus() -> None:
    """The GPU spec table."""
    table = load_catalog().gpus.values()
    width = max(len("NAME"), *(len(g.name) for g in table))
    click.echo(f"{'NAME':<{width}} {'MEMORY':>9} {'BANDWIDTH':>11} {'16-BIT DENSE':>13}  PRODUCT")
    for g in table:
        click.echo(
            f"{g.name:<{width}} {g.memory_bytes / GIB:>6.1f}GiB "
            f"{g.bandwidth_bytes_per_s / 1e9:>7.0f}GB/s {g.dense_flops / 1e12:>8.0f}TFLOPS  "
            f"{g.product}"
        )


@capacity.command("models")
def models() -> None:
    """The model architecture table."""
    table = load_catalog().models.values()
    width = max(len("NAME"), *(len(m.name) for m in table))
    click.echo(
        f"{'NAME':<{width}} {'PARAMS':>8} {'ACTIVE':>7} {'LAYERS':>6} {'KV HEADS':>8} "
        f"{'KV/TOKEN':>9} {'CONTEXT':>7}  {'WEIGHTS':<14} HUGGING FACE ID"
    )
    for m in table:
        active = f"{m.active_params / 1e9:.1f}B" if m.is_moe else "dense"
        weights = (m.weight_dtype or m.dtype) + (f"+{m.expert_dtype}" if m.expert_dtype else "")
        click.echo(
            f"{m.name:<{width}} {m.params / 1e9:>7.2f}B {active:>7} {m.layers:>6} {m.kv_heads:>8} "
            f"{m.kv_bytes_per_token() / 1024:>6.1f}KiB {m.context_length or '':>7}  "
            f"{weights:<14} {m.hf_id}"
        )
    click.echo(
        "Served ids match with or without the organisation, in any case, with chat/instruct "
        "and quantisation suffixes (-AWQ, -FP8, -GPTQ-Int4: weights in that dtype)."
    )
