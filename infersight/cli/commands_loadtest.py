"""``infersight loadtest URL``: drive an OpenAI-compatible endpoint and measure it.

Wires ``loadgen`` to the store: the run (every request's client-side timings) is saved unless
``--no-store``, ``--replay`` reads production request shapes from the store, and
``--capture-baseline NAME`` saves the run as a baseline that ``infersight baseline compare``
gates on. Prints a table per phase (and the knee of a step run), or JSON with ``--json``;
the progress bar and the generator's own warnings go to stderr. Exits 1 when no request
succeeded, 2 when the target fails the preflight request (or, with ``--engine locust``, when
Locust is not installed or its workers do not connect). ``--engine locust`` runs the same
phases and workload on a Locust master and workers (``loadgen.locust_engine``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click
import numpy as np

from infersight.cli.group import current_settings, open_store
from infersight.core.baseline import check_name
from infersight.core.loadtest import (
    DEFAULT_WARMUP,
    LoadTestRun,
    Phase,
    PhaseSummary,
    ScenarioKind,
    knee_of,
    run_throughput,
    summarise,
)
from infersight.core.query import Selector
from infersight.core.window import Window, parse_duration
from infersight.loadgen.client import Endpoint
from infersight.loadgen.distributed import API_KEY_ENV, RunSpec
from infersight.loadgen.locust_engine import LocustEngine, require_locust
from infersight.loadgen.monitor import SelfMonitor
from infersight.loadgen.progress import NoProgress, Progress, TextProgress
from infersight.loadgen.runner import Runner
from infersight.loadgen.scenarios import phases_for
from infersight.loadgen.workload import LongTail, Replay, Sampled, Workload, parse_lengths
from infersight.service.admin import migrate, redact
from infersight.service.loadtests import production_shapes, save_run_as

if TYPE_CHECKING:
    from infersight.service.store import Store


def _levels(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter("levels are comma-separated integers, e.g. 1,2,4,8") from None


@click.command("loadtest")
@click.argument("url")
@click.option("--model", required=True, help="The served model name requests ask for.")
@click.option(
    "--scenario",
    type=click.Choice([k.value for k in ScenarioKind]),
    default=ScenarioKind.STEADY.value,
    show_default=True,
)
@click.option("--concurrency", type=click.IntRange(1, 10_000), default=8, show_default=True)
@click.option(
    "--duration",
    type=click.FloatRange(min=0.1),
    default=60.0,
    show_default=True,
    help="Seconds of a steady or long-tail run (a burst: before + after).",
)
@click.option("--levels", default="1,2,4,8,16,32", show_default=True, help="Step run levels.")
@click.option(
    "--hold",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="Seconds each step level is held.",
)
@click.option("--burst-multiplier", type=click.FloatRange(1.01, 10), default=2.5, show_default=True)
@click.option("--burst-duration", type=click.FloatRange(min=0.1), default=90.0, show_default=True)
@click.option(
    "--input-tokens",
    default="lognormal:512:0.5",
    show_default=True,
    help="fixed:N, uniform:LO:HI, normal:MEAN:SD or lognormal:MEDIAN:SIGMA.",
)
@click.option("--output-tokens", default="lognormal:256:0.5", show_default=True)
@click.option(
    "--long-output",
    type=click.IntRange(1, 1_000_000),
    default=4096,
    show_default=True,
    help="Output tokens of a long-tail run's long requests.",
)
@click.option(
    "--long-fraction",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=0.02,
    show_default=True,
)
@click.option(
    "--replay",
    metavar="DURATION",
    default=None,
    help="Replay the shapes of production requests of the last DURATION (e.g. 1h).",
)
@click.option("--replay-model", default=None, help="Only replay requests of this model.")
@click.option("--replay-instance", default=None, help="Only replay requests of this instance.")
@click.option("--completions", is_flag=True, help="Use /v1/completions instead of chat.")
@click.option("--no-ignore-eos", is_flag=True, help="Do not send vLLM's ignore_eos.")
@click.option(
    "--api-key",
    envvar=API_KEY_ENV,
    default="",
    show_envvar=True,
    help="Bearer token for the target.",
)
@click.option("--timeout", type=click.FloatRange(min=1), default=600.0, show_default=True)
@click.option(
    "--warmup",
    type=click.FloatRange(0, 1, max_open=True),
    default=DEFAULT_WARMUP,
    show_default=True,
    help="Fraction of each phase left out of its summary.",
)
@click.option("--name", default="", help="Name of the run (default: scenario and time).")
@click.option("--seed", type=int, default=None, help="Seed of lengths and prompts.")
@click.option("--no-store", is_flag=True, help="Do not save the run in the store.")
@click.option(
    "--capture-baseline", metavar="NAME", default=None, help="Also save the run as baseline NAME."
)
@click.option("--replace-baseline", is_flag=True, help="Replace baseline NAME if it exists.")
@click.option(
    "--engine",
    type=click.Choice(["asyncio", "locust"]),
    default="asyncio",
    show_default=True,
    help="asyncio: one process; locust: a Locust master and --workers worker processes.",
)
@click.option(
    "--workers",
    type=click.IntRange(0, 256),
    default=2,
    show_default=True,
    help="Local Locust worker processes (--engine locust).",
)
@click.option(
    "--remote-workers",
    type=click.IntRange(0, 4096),
    default=0,
    show_default=True,
    help="Locust workers expected to join from other hosts (--engine locust).",
)
@click.option(
    "--master-bind",
    default="127.0.0.1",
    show_default=True,
    help="Where the Locust master listens (0.0.0.0 for remote workers).",
)
@click.option(
    "--master-port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="The Locust master's port (0: any free port).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.pass_context
def loadtest(ctx: click.Context, /, url: str, **options: Any) -> None:
    """Drive the OpenAI-compatible endpoint at URL and measure TTFT, TPOT, ITL and E2E."""
    o = options
    if o["capture_baseline"] is not None:
        check_name(o["capture_baseline"])
        if o["no_store"]:
            raise click.UsageError("--capture-baseline needs the store (drop --no-store)")
    if o["engine"] == "locust":
        require_locust()  # before the store is touched: name the extra at once
    kind = ScenarioKind(o["scenario"])
    phases = phases_for(
        kind,
        concurrency=o["concurrency"],
        duration_s=o["duration"],
        levels=_levels(o["levels"]),
        hold_s=o["hold"],
        multiplier=o["burst_multiplier"],
        burst_s=o["burst_duration"],
    )
    endpoint = Endpoint(
        url,
        o["model"],
        chat=not o["completions"],
        api_key=o["api_key"],
        ignore_eos=not o["no_ignore_eos"],
    )
    rng = np.random.default_rng(o["seed"])
    settings = current_settings(ctx)
    needs_store = not o["no_store"] or o["replay"]
    store = open_store(ctx) if needs_store else None
    try:
        if store is not None:
            migrate(store)
        workload = _workload(store, kind, rng, o)
        total = max(p.end_s for p in phases)
        progress: Progress = NoProgress() if o["quiet"] else TextProgress(sys.stderr, total)
        started = datetime.now(UTC)
        name = o["name"] or f"{kind.value} {started:%Y-%m-%d %H:%M:%S}"
        config = {**_config(o, workload), "engine": o["engine"]}
        if o["engine"] == "locust":
            run = _locust(endpoint, phases, kind, workload, progress, name, config, o)
        else:
            runner = Runner(
                endpoint,
                phases,
                workload,
                rng=rng,
                progress=progress,
                monitor=SelfMonitor(),
                request_timeout_s=o["timeout"],
            )
            run = asyncio.run(runner.run(name=name, scenario=kind, config=config))
        for warning in run.warnings:
            click.echo(f"warning: {warning}", err=True)
        if store is not None and not o["no_store"]:
            run = _store(store, run, o)
            click.echo(f"saved run {run.id} in {redact(settings.database_url)}", err=True)
    finally:
        if store is not None:
            store.dispose()
    _report(run, o["warmup"], as_json=o["as_json"])
    if not any(r.ok for r in run.results):
        click.echo("error: no request succeeded", err=True)
        sys.exit(1)


def _workload(
    store: Store | None, kind: ScenarioKind, rng: np.random.Generator, o: Any
) -> Workload:
    workload: Workload
    if o["replay"]:
        end = datetime.now(UTC)
        window = Window(end - parse_duration(o["replay"]), end)
        selector = Selector(model=o["replay_model"], instance=o["replay_instance"])
        assert store is not None  # a replay needs the store (``needs_store``)
        workload = Replay(production_shapes(store, window, selector))
    else:
        workload = Sampled(parse_lengths(o["input_tokens"]), parse_lengths(o["output_tokens"]), rng)
    if kind is ScenarioKind.LONG_TAIL:
        workload = LongTail(workload, o["long_output"], o["long_fraction"], rng)
    return workload


def _locust(
    endpoint: Endpoint,
    phases: tuple[Phase, ...],
    kind: ScenarioKind,
    workload: Workload,
    progress: Progress,
    name: str,
    config: dict[str, Any],
    o: Any,
) -> LoadTestRun:
    """The run on a Locust master and its workers, each drawing from the same workload."""
    spec = RunSpec(
        base_url=endpoint.base_url,
        model=endpoint.model,
        chat=endpoint.chat,
        api_key=endpoint.api_key,
        ignore_eos=endpoint.ignore_eos,
        input_tokens=o["input_tokens"],
        output_tokens=o["output_tokens"],
        long_output=o["long_output"] if kind is ScenarioKind.LONG_TAIL else None,
        long_fraction=o["long_fraction"],
        replay=tuple((s.input_tokens, s.output_tokens) for s in _replayed(workload)),
        seed=o["seed"],
        timeout_s=o["timeout"],
    )
    engine = LocustEngine(
        phases,
        spec,
        workers=o["workers"],
        remote_workers=o["remote_workers"],
        bind=o["master_bind"],
        port=o["master_port"],
        progress=progress,
        notice=lambda line: click.echo(line, err=True),
    )
    return engine.run(name=name, scenario=kind, config=config)


def _replayed(workload: Workload) -> list[Any]:
    """The shapes a replay workload holds (none for sampled lengths)."""
    inner = getattr(workload, "base", workload)
    return list(inner.shapes) if isinstance(inner, Replay) else []


def _config(o: Any, workload: Workload) -> dict[str, Any]:
    """What reproduces the run (never the API key)."""
    keys = (
        "scenario",
        "concurrency",
        "duration",
        "levels",
        "hold",
        "burst_multiplier",
        "burst_duration",
        "input_tokens",
        "output_tokens",
        "long_output",
        "long_fraction",
        "replay",
        "replay_model",
        "replay_instance",
        "completions",
        "seed",
        "timeout",
    )
    return {**{k: o[k] for k in keys}, "mean_output_tokens": workload.mean_output}


def _store(store: Store, run: LoadTestRun, o: Any) -> LoadTestRun:
    name = o["capture_baseline"]
    run = save_run_as(store, run, datetime.now(UTC), name, replace=o["replace_baseline"])
    if name is not None:
        click.echo(f"saved baseline {name}", err=True)
    return run


def _report(run: LoadTestRun, warmup: float, *, as_json: bool) -> None:
    summaries = summarise(run, warmup)
    knee = knee_of(summaries) if run.scenario is ScenarioKind.STEP else None
    whole = run_throughput(run)
    if as_json:
        body = {
            "run": run.id,
            "name": run.name,
            "scenario": run.scenario.value,
            "target": run.target,
            "model": run.model,
            "requests": len(run.results),
            "errors": sum(not r.ok for r in run.results),
            # The run's one throughput (what its baseline and ``baseline compare --run`` show);
            # each phase's below is over its steady part only.
            "duration_s": whole.duration_s,
            "throughput_rps": whole.requests_per_s,
            "output_tokens_per_s": whole.output_tokens_per_s,
            "phases": [s.to_dict() for s in summaries],
            "knee": None
            if knee is None
            else {
                "concurrency": knee.concurrency,
                "throughput_rps": knee.throughput_rps,
                "latency_s": knee.latency_s,
            },
            "warnings": list(run.warnings),
            "generator": run.config.get("generator", {}),
        }
        click.echo(json.dumps(body, indent=2))
        return
    click.echo(
        f"{'PHASE':<12} {'USERS':>5} {'REQS':>6} {'ERR':>4} {'REQ/S':>7} {'TOK/S':>8} "
        f"{'TTFT p50':>9} {'p99':>7} {'TPOT p50':>9} {'p99':>7} {'E2E p50':>8} {'p99':>7}"
    )
    for s in summaries:
        click.echo(_row(s))
    click.echo(
        f"run: {whole.completed} completed in {whole.duration_s:.1f} s, "
        f"{whole.requests_per_s:.2f} req/s, {whole.output_tokens_per_s:.1f} tok/s"
    )
    if run.scenario is ScenarioKind.STEP:
        if knee is None:
            click.echo("knee: none within the levels tested (throughput still rising)")
        else:
            click.echo(
                f"knee: {knee.concurrency:g} users, {knee.throughput_rps:.2f} req/s "
                f"(median E2E {knee.latency_s:.3f} s, ×{knee.latency_growth:.1f} by the last level)"
            )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.0f}ms"


def _row(s: PhaseSummary) -> str:
    q = s.quantile
    return (
        f"{s.label[:12]:<12} {s.concurrency:>5} {s.requests:>6} {s.errors:>4} "
        f"{s.throughput_rps:>7.2f} {s.output_tokens_per_s:>8.1f} "
        f"{_ms(q('ttft')):>9} {_ms(q('ttft', '0.99')):>7} {_ms(q('tpot')):>9} "
        f"{_ms(q('tpot', '0.99')):>7} {_ms(q('e2e')):>8} {_ms(q('e2e', '0.99')):>7}"
    )
