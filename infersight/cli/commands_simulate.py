"""``infersight simulate``: run a scenario of the simulated fleet in virtual time.

Wires the simulator to its outputs: the store (``--store URL``, migrated first, written through
``service.ingest.open_writer``), OTLP spans to a collector (``--otlp-endpoint``), and prints
progress on stderr and a summary with the scenario's ground truth on stdout. ``--speed`` paces
virtual time against the wall clock (``max``: as fast as the machine allows; ``60``: an hour a
minute). ``--realtime`` instead serves every instance's OpenAI-compatible endpoint (and its
/metrics) on consecutive ports, with the scenario's traffic and faults running against the wall
clock.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from infersight.cli.group import read_scenario, store_option
from infersight.service.admin import migrate, redact
from infersight.service.ingest import open_writer
from infersight.service.store import open_store
from infersight.simulator.events import Batch
from infersight.simulator.fleet import Progress, RunResult, run_scenario
from infersight.simulator.hostlimits import HostLimit, HostLimits
from infersight.simulator.scenario import Scenario
from infersight.simulator.serve import FleetServer
from infersight.simulator.sinks import CountingSink, Sink
from infersight.simulator.sinks.otlp import OtlpSink
from infersight.simulator.sinks.store import StoreSink
from infersight.simulator.specs import parse_duration, shipped_scenarios

if TYPE_CHECKING:
    from infersight.service.store import Store


def _speed(value: str) -> float | None:
    if value == "max":
        return None
    try:
        speed = float(value)
    except ValueError:
        raise click.BadParameter("expected 'max' or a positive factor such as 60") from None
    if not speed > 0:
        raise click.BadParameter("the speed factor must be positive")
    return speed


class _Reporter:
    """Progress lines on stderr at most every ``every_s`` of wall time; paces when asked."""

    def __init__(
        self,
        speed: float | None,
        *,
        every_s: float = 2.0,
        quiet: bool = False,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._speed, self._every, self._quiet = speed, every_s, quiet
        self._clock, self._sleep = clock, sleep
        self._last = -1e9

    def __call__(self, p: Progress) -> None:
        if self._speed is not None:
            ahead = p.virtual_s / self._speed - p.wall_s
            if ahead > 0:
                self._sleep(ahead)
        now = self._clock()
        done = p.virtual_s >= p.duration_s
        if self._quiet or (now - self._last < self._every and not done):
            return
        self._last = now
        rate = p.requests / p.wall_s if p.wall_s > 0 else 0.0
        click.echo(
            f"[{100 * p.virtual_s / p.duration_s:5.1f}%] virtual {p.virtual_s:,.0f}/"
            f"{p.duration_s:,.0f} s, {p.requests:,} requests, {rate:,.0f} req/s of wall time",
            err=True,
        )


def _summary(result: RunResult) -> dict[str, Any]:
    return {
        "scenario": result.scenario,
        "virtual_s": result.virtual_s,
        "wall_s": round(result.wall_s, 3),
        "requests": result.requests,
        "errors": result.errors,
        "preemptions": result.preemptions,
        "server_samples": result.server_samples,
        "gpu_samples": result.gpu_samples,
        "requests_per_wall_s": round(result.requests_per_wall_s, 1),
        "ground_truth": [
            {
                "kind": t.kind.value,
                "instance": t.instance,
                "start": t.start.isoformat(),
                "end": t.end.isoformat(),
                "magnitude": t.magnitude,
                "expected_cause": t.expected_cause,
            }
            for t in result.ground_truth
        ],
    }


def _load(ref: str, seed: int | None, duration: str | None) -> Scenario:
    scenario = read_scenario(ref)  # a file's errors name it (and the line)
    if seed is not None:
        scenario = dataclasses.replace(scenario, seed=seed)
    if duration is not None:
        scenario = dataclasses.replace(scenario, duration_s=parse_duration(duration))
    return scenario


def _serve(
    scenario: Scenario,
    listen: str,
    otlp_endpoint: str | None,
    otlp_token: str | None,
    quiet: bool,
    host_limits: tuple[str, ...] = (),
    host_log: Path | None = None,
) -> None:
    host, _, port = listen.rpartition(":")
    if not port.isdigit():
        raise click.BadParameter(f"expected HOST:PORT, got {listen!r}", param_hint="--listen")
    sinks: list[Sink] = []
    otlp = None
    if otlp_endpoint:
        headers = {"authorization": f"Bearer {otlp_token}"} if otlp_token else None
        otlp = OtlpSink(otlp_endpoint, headers=headers, flush_on_write=False)
        sinks.append(otlp)
    fleet = FleetServer(
        scenario,
        epoch=datetime.now(UTC),
        host=host or "127.0.0.1",
        base_port=int(port),
        sinks=sinks,
        host_limits=(lambda: HostLimits(host_limits, log_path=host_log)) if host_limits else None,
    )
    urls = fleet.start()
    for name, url in urls.items():
        click.echo(f"{name}: {url}/v1/chat/completions  (metrics {url}/metrics)", err=True)
    started = time.monotonic()
    try:
        while (elapsed := time.monotonic() - started) < scenario.duration_s:
            time.sleep(min(2.0, scenario.duration_s - elapsed))
            if not quiet:
                click.echo(f"[{elapsed:,.0f} s] {fleet.requests:,} requests served", err=True)
    except KeyboardInterrupt:
        click.echo("stopping", err=True)
    finally:
        fleet.stop()
    summary: dict[str, Any] = {"scenario": scenario.name, "urls": urls, "requests": fleet.requests}
    if otlp is not None:
        summary["otlp"] = {"exported_spans": otlp.exported, "failed_spans": otlp.failed}
    click.echo(json.dumps(summary, indent=2))


class _Dispose:
    """A sink that only releases the store's connections when the run is over."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def write(self, batch: Batch) -> None:
        return None

    def close(self) -> None:
        self._store.dispose()


def _sinks(
    store: str | None, otlp_endpoint: str | None, otlp_token: str | None
) -> tuple[list[Sink], StoreSink | None, OtlpSink | None]:
    sinks: list[Sink] = [CountingSink()]
    store_sink: StoreSink | None = None
    if store:
        opened = open_store(store)
        migrate(opened)
        store_sink = StoreSink(open_writer(opened))
        sinks += [store_sink, _Dispose(opened)]
    otlp: OtlpSink | None = None
    if otlp_endpoint:
        headers = {"authorization": f"Bearer {otlp_token}"} if otlp_token else None
        otlp = OtlpSink(otlp_endpoint, headers=headers)
        sinks.append(otlp)
    return sinks, store_sink, otlp


def _not_in_argv(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """The sidecar's token from ``INFERSIGHT_OTLP_TOKEN`` only: on the command line any local
    user would read it (``/proc/PID/cmdline``)."""
    if value is not None and ctx.get_parameter_source(param.name or "") is (
        ParameterSource.COMMANDLINE
    ):
        raise click.UsageError(
            "--otlp-token is refused: a token on the command line is readable by every local "
            "user in the process list. Give it with the INFERSIGHT_OTLP_TOKEN environment "
            "variable"
        )
    return value


@click.command("simulate")
@click.option(
    "--scenario",
    "scenario_ref",
    metavar="FILE|NAME",
    help="A scenario file, or the name of a shipped one (see --list).",
)
@store_option(
    expose=True, help="Write records and samples here (default: the group's --store, if given)."
)
@click.option(
    "--otlp-endpoint",
    metavar="URL",
    default=None,
    help="Export spans: http://HOST:4318[/v1/traces] (OTLP/HTTP) or grpc://HOST:4317.",
)
@click.option(
    "--otlp-token",
    default=None,
    envvar="INFERSIGHT_OTLP_TOKEN",
    show_envvar=True,
    callback=_not_in_argv,
    help="The sidecar's bearer token, from INFERSIGHT_OTLP_TOKEN only (on the command line, "
    "where the process list shows it, it is refused).",
)
@click.option("--seed", type=int, default=None, help="Override the scenario's seed.")
@click.option(
    "--speed",
    default="max",
    show_default=True,
    help="Virtual seconds per wall second ('max' runs as fast as possible).",
)
@click.option("--duration", default=None, help="Override the scenario's duration (e.g. 10m).")
@click.option("--ground-truth", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.option("--quiet", is_flag=True, help="No progress lines.")
@click.option(
    "--realtime",
    is_flag=True,
    help="Serve each instance's OpenAI-compatible endpoint in real time instead.",
)
@click.option(
    "--listen",
    default="127.0.0.1:8000",
    show_default=True,
    help="With --realtime: HOST:PORT of the first instance; the others take the next ports.",
)
@click.option(
    "--host-limit",
    "host_limits",
    multiple=True,
    type=click.Choice([k.value for k in HostLimit]),
    help="With --realtime: give each server process a real host-side limit (repeatable): "
    "tokenizer (pure-Python encoding of every prompt on the serving thread), gil (CPU-bound "
    "Python threads competing for the GIL), logging (a line per request and token, flushed "
    "and fsynced synchronously). See docs/profiles.md.",
)
@click.option(
    "--host-log",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="With --host-limit logging: the file it writes (default: a temporary file).",
)
@click.option("--list", "list_only", is_flag=True, help="List the shipped scenarios and exit.")
def simulate(
    scenario_ref: str | None,
    store: str | None,
    otlp_endpoint: str | None,
    otlp_token: str | None,
    seed: int | None,
    speed: str,
    duration: str | None,
    ground_truth: Path | None,
    quiet: bool,
    realtime: bool,
    listen: str,
    host_limits: tuple[str, ...],
    host_log: Path | None,
    list_only: bool,
) -> None:
    """Run a simulated-fleet scenario and send its output to the store and/or a collector."""
    if list_only:
        for name in shipped_scenarios():
            click.echo(name)
        return
    if not scenario_ref:
        raise click.UsageError("--scenario is required (or --list)")
    pace = _speed(speed)
    scenario = _load(scenario_ref, seed, duration)
    if realtime:
        if store:
            raise click.UsageError("--realtime exports spans (--otlp-endpoint); it has no --store")
        _serve(scenario, listen, otlp_endpoint, otlp_token, quiet, host_limits, host_log)
        return
    if host_limits:
        raise click.UsageError("--host-limit needs --realtime (a real serving process)")
    sinks, store_sink, otlp = _sinks(store, otlp_endpoint, otlp_token)
    click.echo(
        f"simulating {scenario.name}: {len(scenario.instances)} instances, "
        f"{scenario.duration_s:,.0f} s of virtual time, seed {scenario.seed}",
        err=True,
    )
    chunk = 60.0 if pace is None else max(0.05, min(60.0, pace))
    try:
        result = run_scenario(scenario, sinks, chunk_s=chunk, progress=_Reporter(pace, quiet=quiet))
    finally:
        for sink in sinks:
            sink.close()
    summary = _summary(result)
    if store_sink is not None and store:
        summary["store"] = {"url": redact(store), "inserted": store_sink.inserted}
    if otlp is not None:
        summary["otlp"] = {"exported_spans": otlp.exported, "failed_spans": otlp.failed}
    if ground_truth is not None:
        ground_truth.write_text(json.dumps(summary["ground_truth"], indent=2) + "\n")
    click.echo(json.dumps(summary, indent=2))
    if otlp is not None and otlp.failed:
        raise click.ClickException(f"{otlp.failed} spans could not be exported")
