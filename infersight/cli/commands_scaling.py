"""``infersight scaling``: the group of scaling policies and the closed-loop backtest.

``backtest`` replays one day of demand — the synthetic diurnal day with the essay's afternoon
rebound (``--seed``), or a model's recorded day from the store (``--from-store --day``) —
through a simulated fleet (``simulator.autoscale``) and compares static peak sizing, the
reactive-only GPU-utilisation and KEDA queue policies and infersight's recommender on the
same demand: the share of requests meeting the TTFT and TPOT targets, during the rebound too,
GPU-hours, cost, scale events and the worst minute. Progress goes to stderr, one line per
policy (no carriage returns, so logs stay readable). ``--scenario`` names a simulator scenario
with a disaggregated (prefill/decode) deployment: the backtest then runs that deployment in the
discrete-event simulator with one policy per pool (``simulator.autoscale_pd``) over
``--window`` (default 12:30–14:40: the quiet spell and the rebound) at ``--peak-rps`` (default:
twice the scenario's own rate), and reports each pool's GPU-hours and instance counts.
``apply``, ``list`` and ``show`` come from ``infersight.cli.commands_scaling_admin``, added at
import.

The simulator and the store are imported inside the command, so ``infersight --help`` stays fast.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from infersight.cli import commands_scaling_admin
from infersight.cli.group import current_settings, open_store, read_spec_file

#: Dollars per GPU-hour without a cost model (an H100/H200 on-demand list price, roughly).
DEFAULT_PRICE = 4.0

if TYPE_CHECKING:
    from infersight.core.scaling import ScalingPolicy
    from infersight.simulator.autoscale import Backtest, Demand


@click.group("scaling")
def scaling() -> None:
    """Replica recommendations: scaling policies, the newest recommendation per model, and the
    closed-loop backtest."""


def _duration(_ctx: click.Context, _param: click.Parameter, value: str) -> float:
    from infersight.core.errors import InvalidInput  # noqa: PLC0415
    from infersight.core.window import parse_duration  # noqa: PLC0415

    try:
        return float(value)
    except ValueError:
        pass
    try:
        return parse_duration(value).total_seconds()
    except InvalidInput as exc:
        raise click.BadParameter(exc.message) from None


def _day(_ctx: click.Context, _param: click.Parameter, value: str | None) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a date such as 2026-11-30") from None


def _window(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> tuple[float, float] | None:
    if value is None:
        return None
    try:
        ends = [part.strip().split(":") for part in value.split("-")]
        start, end = (int(h) * 3600.0 + int(m) * 60.0 for h, m in ends)
        if not 0 <= start < end <= 86_400.0:
            raise ValueError(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not a window within one day such as 12:30-14:40"
        ) from None
    return start, end


def _pd_backtest(o: dict[str, Any], policy: ScalingPolicy, step_s: float) -> None:
    """``--scenario`` with a disaggregated deployment: one policy per pool."""
    from infersight.simulator.autoscale import synthetic  # noqa: PLC0415
    from infersight.simulator.autoscale_pd import (  # noqa: PLC0415
        PD_POLICIES,
        pd_backtest,
        pd_header,
        pd_table,
        split_deployment,
    )
    from infersight.simulator.specs import load_scenario  # noqa: PLC0415

    if o["from_store"]:
        raise click.UsageError("--scenario replays the synthetic day, not --from-store")
    scenario = load_scenario(o["scenario"])
    deployment = split_deployment(scenario)
    pd = deployment.disaggregated
    assert pd is not None
    peak = o["peak_rps"] or 2 * deployment.arrival.max_rate * len(pd.decode)
    start, end = o["window"] or PD_WINDOW
    policies = o["policies"] or PD_POLICIES
    unknown = sorted(set(policies) - set(PD_POLICIES))
    if unknown:
        raise click.BadParameter(
            f"unknown policies {unknown}; choose from {', '.join(PD_POLICIES)}",
            param_hint="--policies",
        )
    demand = synthetic(
        o["seed"],
        peak_rps=peak,
        step_s=step_s,
        start_s=start,
        end_s=end,
        history_weeks=policy.history_weeks,
    )

    def progress(name: str, done: int, total: int) -> None:
        if not o["quiet"]:
            click.echo(f"backtest: [{done}/{total}] {name}", err=True)

    result = pd_backtest(
        scenario,
        demand,
        policy,
        cold_start_s=o["cold_start"],
        ttft_target_s=o["ttft_target"],
        tpot_target_s=o["tpot_target"],
        price_per_gpu_hour=o["price_per_gpu_hour"] or DEFAULT_PRICE,
        only=tuple(policies),
        progress=progress,
    )
    day = synthetic(o["seed"], peak_rps=peak, step_s=step_s, history_weeks=0)
    scope = _pd_scope(start, end, float(demand.arrivals.sum()), float(day.arrivals.sum()))
    if o["fmt"] == "json":
        click.echo(json.dumps({**result.to_dict(), "scope": scope}, indent=2))
        return
    click.echo(pd_header(result))
    click.echo(scope["note"])
    click.echo()
    click.echo(pd_table(result))


#: The part of the synthetic day a P/D backtest replays by default: the quiet spell and the
#: rebound (``--window`` picks another, up to the whole day).
PD_WINDOW = (12.5 * 3600.0, 14 * 3600.0 + 40 * 60.0)


def _pd_scope(start: float, end: float, requests: float, day: float) -> dict[str, Any]:
    """What part of the day the P/D backtest replayed, said in its output: the discrete-event
    simulator serves every request of every policy, so the default is the window where
    scaling matters (the quiet spell and the rebound), not the whole day."""

    def clock(seconds: float) -> str:
        return f"{int(seconds // 3600):02d}:{int(seconds % 3600 // 60):02d}"

    whole = start == 0.0 and end == 86_400.0
    note = (
        "scope: the whole synthetic day"
        if whole
        else f"scope: {clock(start)}–{clock(end)} of the synthetic day, not all of it: "
        f"{requests:,.0f} of the day's {day:,.0f} requests per policy, each run through the "
        "discrete-event simulator (--window 00:00-24:00 replays the whole day, about "
        f"{day / max(requests, 1.0):.0f}× longer)"
    )
    return {"start_s": start, "end_s": end, "whole_day": whole, "requests": requests,
            "day_requests": day, "note": note}  # fmt: skip


def _policy(path: Path | None, model: str) -> ScalingPolicy:
    from infersight.core.errors import InvalidInput, NotFound  # noqa: PLC0415
    from infersight.core.scaling import policy_for  # noqa: PLC0415
    from infersight.service.scaling import default_policy  # noqa: PLC0415
    from infersight.service.scaling_spec import parse_policies  # noqa: PLC0415

    if path is None:
        return default_policy()
    policies = read_spec_file(path, parse_policies)
    try:
        return policy_for(policies, model)
    except NotFound:
        raise InvalidInput(
            f"{path}: no ScalingPolicy in it applies to model {model!r} "
            "(give one with spec.model or one without a model)",
            details={"file": str(path), "model": model},
        ) from None


def _store_demand(
    ctx: click.Context, model: str, day: date, weeks: int, step_s: float, gpu: str
) -> tuple[Demand, float, str]:
    """The recorded day and its history weeks, and the active cost model's price of ``gpu``."""
    from infersight.core.errors import NotFound  # noqa: PLC0415
    from infersight.service.cost_spec import active_model  # noqa: PLC0415
    from infersight.service.scaling import busiest_models, recorded_demand  # noqa: PLC0415
    from infersight.simulator.autoscale import from_minutes  # noqa: PLC0415

    settings = current_settings(ctx)
    store = open_store(ctx)
    try:
        try:
            recorded = recorded_demand(store, model, day, weeks)
        except NotFound as exc:
            others = busiest_models(store, day)
            hint = f"; models with requests that day: {', '.join(others)}" if others else ""
            raise NotFound(
                exc.message + hint + " (--served-model picks one)", details=exc.details
            ) from None
        cost_model = active_model(store, settings.cost_model)
    finally:
        store.dispose()
    price = cost_model.price_for("", gpu)
    if price is None:
        price_value, price_source = DEFAULT_PRICE, f"no price for {gpu} in cost model"
    else:
        price_value = float(price.blended_per_hour)
        price_source = f"{gpu} in cost model {cost_model.name!r}"
    missing = recorded.weeks_without_data
    source = (
        f"recorded demand of {model} on {day.isoformat()} from the store, "
        f"{len(recorded.history)} history weeks, rebound column = 14:00–14:20 UTC"
        + (f" (weeks {', '.join(map(str, missing))} earlier had no requests)" if missing else "")
    )
    demand = from_minutes(recorded.minutes, recorded.history, step_s=step_s, source=source)
    return demand, price_value, price_source


def _figures(
    result: Backtest, cold_start_s: float, profile: str, price_source: str
) -> dict[str, Any]:
    svc = result.fleet.service
    return {
        "demand": result.demand.source,
        "peak_minute_rps": result.demand.peak_minute_rps(),
        "requests": float(result.demand.arrivals.sum()),
        "step_s": result.demand.step_s,
        "profile": profile,
        "tensor_parallel": svc.profile.tensor_parallel,
        "input_tokens": svc.input_tokens,
        "output_tokens": svc.output_tokens,
        "ttft_target_s": svc.ttft_target_s,
        "tpot_target_s": svc.tpot_target_s,
        "capacity_rps_per_instance": svc.capacity_rps,
        "cold_start_s": cold_start_s,
        "price_per_gpu_hour": result.fleet.price_per_gpu_hour,
        "price_source": price_source,
        "static_instances": result.static_instances,
        "policy": result.policy.name,
        "results": [r.to_dict() for r in result.results],
    }


def header(result: Backtest, cold_start_s: float, profile: str, price_source: str = "") -> str:
    """The run's setting in a few lines: demand, fleet, targets, cold start, price."""
    svc = result.fleet.service
    d = result.demand
    return "\n".join(
        [
            f"demand: {d.source}",
            f"  {d.arrivals.sum():,.0f} requests, busiest minute {d.peak_minute_rps():.1f} req/s, "
            f"{d.step_s:g} s steps",
            f"fleet: {profile} ({svc.profile.tensor_parallel} GPU per instance), "
            f"{svc.input_tokens} in / {svc.output_tokens} out tokens, "
            f"{svc.capacity_rps:.1f} req/s per instance within TTFT {svc.ttft_target_s:g} s / "
            f"TPOT {svc.tpot_target_s * 1000:g} ms",
            f"cold start {cold_start_s:g} s (paid for, not serving); removal immediate; "
            f"${result.fleet.price_per_gpu_hour:g} per GPU-hour"
            + (f" ({price_source})" if price_source else "")
            + f"; static = "
            f"{result.static_instances} instances (peak × (1 + 0.4 headroom))",
            f"recommender policy: {result.policy.name} (lead time = cold start)",
        ]
    )


@scaling.command("backtest")
@click.option("--seed", type=click.IntRange(0, 2**31), default=1, show_default=True)
@click.option(
    "--model",
    "profile",
    default="llama-3.1-8b-h200x1",
    show_default=True,
    help="A simulator model profile (shipped name or YAML path).",
)
@click.option(
    "--served-model",
    default=None,
    help="The model's name in the store (--from-store; default: the profile's model name).",
)
@click.option(
    "--cold-start",
    default="600",
    show_default=True,
    callback=_duration,
    help="Seconds (or 10m) before a new instance serves; also the forecast lead time.",
)
@click.option(
    "--policy",
    "policy_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A ScalingPolicy YAML for the recommender (default: the essay's defaults).",
)
@click.option("--from-store", is_flag=True, help="Replay the store's recorded day (see --day).")
@click.option("--day", callback=_day, default=None, help="The day to replay (default: yesterday).")
@click.option(
    "--peak-rps",
    type=click.FloatRange(0, 1e6, min_open=True),
    default=None,
    help="The synthetic day's peak (default 200; with a P/D --scenario, 2 × its rate).",
)
@click.option(
    "--scenario",
    default=None,
    help="A scenario with a disaggregated deployment: backtest its prefill and decode pools.",
)
@click.option(
    "--window",
    callback=_window,
    default=None,
    help="HH:MM-HH:MM of the synthetic day to replay (default: all of it; P/D: 12:30-14:40).",
)
@click.option("--input-tokens", type=click.IntRange(1, 1_000_000), default=512, show_default=True)
@click.option("--output-tokens", type=click.IntRange(1, 1_000_000), default=256, show_default=True)
@click.option("--ttft-target", type=click.FloatRange(0, min_open=True), default=2.0)
@click.option("--tpot-target", type=click.FloatRange(0, min_open=True), default=0.1)
@click.option(
    "--price-per-gpu-hour",
    type=click.FloatRange(min=0),
    default=None,
    help="Default: the active cost model's price for the GPU with --from-store, else $4.",
)
@click.option(
    "--step",
    "step_s",
    type=click.Choice(["5", "10", "15", "20", "30", "60"]),
    default="10",
    show_default=True,
    help="Virtual seconds per step.",
)
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@click.option(
    "--policies",
    callback=lambda _c, _p, v: tuple(x.strip() for x in v.split(",") if x.strip()) if v else None,
    default=None,
    help="With a P/D --scenario: the policies to run, comma-separated (default: all of static, "
    "reactive-gpu, reactive-queue, infersight).",
)
@click.option("--quiet", is_flag=True, help="No progress lines on stderr.")
@click.pass_context
def backtest(ctx: click.Context, /, **o: Any) -> None:
    """Compare static, reactive-only and infersight's scaling on one day in closed loop."""
    from infersight.service.scaling import MAX_HISTORY_WEEKS  # noqa: PLC0415
    from infersight.simulator.autoscale import ServiceModel, synthetic  # noqa: PLC0415
    from infersight.simulator.autoscale import backtest as run  # noqa: PLC0415
    from infersight.simulator.autoscale import table as render  # noqa: PLC0415
    from infersight.simulator.specs import load_profile  # noqa: PLC0415

    profile = load_profile(o["profile"])
    served = o["served_model"] or profile.model_name
    policy = _policy(o["policy_file"], served)
    step_s = float(o["step_s"])
    if o["scenario"] is not None:
        _pd_backtest(o, policy, step_s)
        return
    if o["policies"] is not None:
        raise click.UsageError("--policies goes with a P/D --scenario")
    service = ServiceModel(
        profile,
        input_tokens=o["input_tokens"],
        output_tokens=o["output_tokens"],
        ttft_target_s=o["ttft_target"],
        tpot_target_s=o["tpot_target"],
    )
    price, price_source = DEFAULT_PRICE, "the default price"
    if o["from_store"]:
        day = o["day"] or (datetime.now(UTC) - timedelta(days=1)).date()
        demand, price, price_source = _store_demand(
            ctx,
            served,
            day,
            min(policy.history_weeks, MAX_HISTORY_WEEKS),
            step_s,
            profile.gpu.product_name,
        )
    else:
        if o["day"] is not None:
            raise click.UsageError("--day needs --from-store")
        start, end = o["window"] or (0.0, 86_400.0)
        demand = synthetic(
            o["seed"],
            peak_rps=o["peak_rps"] or 200.0,
            step_s=step_s,
            start_s=start,
            end_s=end,
            history_weeks=policy.history_weeks,
        )

    if o["price_per_gpu_hour"] is not None:
        price, price_source = o["price_per_gpu_hour"], "--price-per-gpu-hour"

    def progress(name: str, done: int, total: int) -> None:
        if not o["quiet"]:
            click.echo(f"backtest: [{done}/{total}] {name}", err=True)

    result = run(
        demand,
        service,
        policy,
        cold_start_s=o["cold_start"],
        price_per_gpu_hour=price,
        progress=progress,
    )
    if o["fmt"] == "json":
        click.echo(
            json.dumps(_figures(result, o["cold_start"], profile.name, price_source), indent=2)
        )
        return
    click.echo(header(result, o["cold_start"], profile.name, price_source))
    click.echo()
    click.echo(render(result))


commands_scaling_admin.register(scaling)
