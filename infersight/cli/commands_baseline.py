"""``infersight baseline capture|import|list|compare|delete``: baselines and the CI gate.

``capture NAME`` stores a baseline of a time window of the store (``--start/--end`` or
``--last``, with a selector) or of a stored load-test run (``--run ID``). ``import FILE``
reads a ``vllm bench serve --save-result`` JSON, an LLMPerf summary, an AIPerf export or a
GuideLLM ``benchmarks.json`` (one benchmark of a sweep with ``--benchmark N``; the whole sweep
as a stored step run, for ``capacity --run``, with ``--as-run``).
``compare NAME`` measures a candidate — a window, another baseline (``--against``), a result
file (``--file``) or a run (``--run``) — against the stored baseline, prints per-metric
verdicts, optionally writes a Markdown summary for a pull-request comment (``--markdown``),
and exits 1 when anything regressed: that exit code is the CI gate.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from infersight.cli.group import current_settings, open_store
from infersight.cli.lazy import lazy_attr
from infersight.core.baseline import Baseline, summary_dict
from infersight.core.baseline_compare import Policy, Verdict
from infersight.core.baseline_report import comparison_dict, markdown, table
from infersight.core.errors import InvalidInput
from infersight.core.importers import FORMATS
from infersight.core.importers import detect as detect_format
from infersight.core.importers import parse as parse_result
from infersight.core.importers.guidellm import to_run as guidellm_run
from infersight.core.query import Selector
from infersight.core.timestamps import parse_time
from infersight.core.window import Window
from infersight.service import baselines as service
from infersight.service.admin import migrate
from infersight.service.baselines import parse_thresholds
from infersight.service.loadtests import save_run

if TYPE_CHECKING:
    from infersight.cli.settings import Settings
    from infersight.service.cost_spec import active_model
    from infersight.service.store import Store
else:  # imported when used: ``baseline list`` needs neither pydantic nor the cost model
    active_model = lazy_attr("infersight.service.cost_spec", "active_model")

MAX_FILE_BYTES = 512 * 1024 * 1024
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _last(text: str) -> timedelta:
    match = _DURATION.match(text.strip())
    if not match:
        raise InvalidInput("--last is a duration such as 30m, 2h or 7d", details={"last": text})
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


def _window(start: str | None, end: str | None, last: str | None, now: datetime) -> Window:
    if last and (start or end):
        raise InvalidInput("give --last or --start/--end, not both")
    if last:
        return Window.last(_last(last), now)
    end_ts = parse_time("end", end) if end else now
    start_ts = parse_time("start", start) if start else end_ts - timedelta(hours=1)
    return Window(start_ts, end_ts)


def _read_json(path: Path) -> Any:
    """A JSON document, or — for JSON Lines (vLLM's ``--append-result``, AIPerf's records) —
    the list of its objects."""
    if path.stat().st_size > MAX_FILE_BYTES:
        raise InvalidInput(f"{path} is larger than {MAX_FILE_BYTES // 2**20} MiB")
    text = path.read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        whole = exc
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None or not _parses(lines[first]):  # one document: its own error
        raise InvalidInput(f"{path}, {_where(whole)}: not valid JSON: {whole.msg}") from None
    out = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InvalidInput(
                    f"{path}, line {number}, column {exc.colno}: not valid JSON Lines: {exc.msg}"
                ) from None
    return out


def _parses(line: str) -> bool:
    try:
        json.loads(line)
    except json.JSONDecodeError:
        return False
    return True


def _where(exc: json.JSONDecodeError) -> str:
    return f"line {exc.lineno}, column {exc.colno}"


def _import(
    path: Path,
    samples: Path | None,
    fmt: str | None,
    name: str,
    description: str,
    benchmark: int | None = None,
) -> Baseline:
    doc = _read_json(path)
    if isinstance(doc, list) and doc and all(isinstance(d, dict) for d in doc):
        doc = doc[-1]  # an --append-result file: the latest run
    return parse_result(
        doc,
        name=name,
        created_at=datetime.now(UTC),
        fmt=fmt,
        description=description,
        samples=_read_json(samples) if samples else None,
        benchmark=benchmark,
    )


def _from_window(
    store: Store, settings: Settings, name: str, window: Window, selector: Selector, note: str
) -> Baseline:
    now = datetime.now(UTC)
    return service.capture_window(
        store,
        name,
        window,
        selector,
        now,
        description=note,
        finest=settings.retention().finest_for(window, now),
        exact_max_rows=settings.exact_max_rows,
        cost_model=active_model(store, settings.cost_model),
    )


def _from_run(store: Store, run_id: int, name: str, description: str) -> Baseline:
    return service.capture_run(store, run_id, name, datetime.now(UTC), description)


def _selector_options(function: Any) -> Any:
    for label in ("priority", "tenant", "instance", "model"):
        function = click.option(f"--{label}", default=None, help=f"Only requests of this {label}.")(
            function
        )
    for option, text in (
        ("--last", "The window that ends now, e.g. 30m, 2h, 7d."),
        ("--end", "Window end: RFC 3339 or Unix seconds (default now)."),
        ("--start", "Window start: RFC 3339 or Unix seconds (default end − 1 h)."),
    ):
        function = click.option(option, default=None, help=text)(function)
    return function


@click.group("baseline")
def baseline() -> None:
    """Performance baselines: capture, import, list, and compare (the CI gate)."""


@baseline.command("capture")
@click.argument("name")
@_selector_options
@click.option("--run", "run_id", type=int, default=None, help="A stored load-test run instead.")
@click.option("--description", default="", help="What this baseline is.")
@click.option("--replace", is_flag=True, help="Replace a baseline of the same name.")
@click.pass_context
def capture(
    ctx: click.Context,
    name: str,
    start: str | None,
    end: str | None,
    last: str | None,
    model: str | None,
    instance: str | None,
    tenant: str | None,
    priority: str | None,
    run_id: int | None,
    description: str,
    replace: bool,
) -> None:
    """Store baseline NAME from a window of the store or from a load-test run."""
    settings = current_settings(ctx)
    store = open_store(ctx)
    try:
        migrate(store)
        if run_id is not None:
            if any((start, end, last, model, instance, tenant, priority)):
                raise InvalidInput("--run takes no window or selector")
            captured = _from_run(store, run_id, name, description)
        else:
            window = _window(start, end, last, datetime.now(UTC))
            selector = Selector(model, instance, tenant, priority)
            captured = _from_window(store, settings, name, window, selector, description)
        created = service.save_baseline(store, captured, replace=replace)
    finally:
        store.dispose()
    _echo_saved(captured, created)


def _echo_saved(saved: Baseline, created: bool) -> None:
    p50 = saved.latency.get("ttft")
    ttft = (
        ""
        if p50 is None or 0.5 not in p50.quantiles
        else f", TTFT p50 {p50.quantiles[0.5] * 1000:.1f} ms"
    )
    click.echo(
        f"{'created' if created else 'replaced'} baseline {saved.name} ({saved.source}: "
        f"{saved.requests} requests, {saved.request_throughput:.2f} req/s{ttft})"
    )


@baseline.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", required=True, help="Name of the baseline.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None, help="Default: guessed.")
@click.option(
    "--samples",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Per-request file: LLMPerf individual responses or AIPerf profile_export.jsonl.",
)
@click.option(
    "--benchmark",
    type=click.IntRange(0),
    default=None,
    help="Which benchmark of a GuideLLM report holding several (0 = the first).",
)
@click.option(
    "--as-run",
    is_flag=True,
    help="Also store a GuideLLM report's benchmarks as one step load-test run (capacity --run).",
)
@click.option("--description", default="", help="What this baseline is.")
@click.option("--replace", is_flag=True, help="Replace a baseline of the same name.")
@click.pass_context
def import_(
    ctx: click.Context,
    file: Path,
    name: str,
    fmt: str | None,
    samples: Path | None,
    benchmark: int | None,
    as_run: bool,
    description: str,
    replace: bool,
) -> None:
    """Store baseline NAME from a vllm bench serve, LLMPerf, AIPerf or GuideLLM result FILE."""
    run = None
    if as_run:
        doc = _read_json(file)
        if (fmt or detect_format(doc)) != "guidellm":
            raise InvalidInput("--as-run takes a GuideLLM report")
        run = guidellm_run(doc, name=name)
        if benchmark is None:  # the run is the sweep; the baseline is its last level
            benchmark = len(run.phases) - 1
    imported = _import(file, samples, fmt, name, description, benchmark)
    store = open_store(ctx)
    try:
        migrate(store)
        created = service.save_baseline(store, imported, replace=replace)
        run_id = None if run is None else save_run(store, run)
    finally:
        store.dispose()
    _echo_saved(imported, created)
    if run is not None:
        click.echo(f"stored run {run_id} ({len(run.phases)} levels, {len(run.results)} requests)")


@baseline.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def list_(ctx: click.Context, as_json: bool) -> None:
    """Every baseline, newest first."""
    store = open_store(ctx, light=True)
    try:
        found = service.list_baselines(store)
    finally:
        store.dispose()
    if as_json:
        click.echo(json.dumps([summary_dict(b) for b in found], indent=2))
        return
    click.echo(
        f"{'NAME':<28} {'SOURCE':<8} {'CREATED':<20} {'REQUESTS':>9} {'REQ/S':>8} "
        f"{'TTFT P50':>9} {'TTFT P99':>9} {'TPOT P50':>9}  DIST"
    )
    for b in found:
        cells = []
        for metric, q in (("ttft", 0.5), ("ttft", 0.99), ("tpot", 0.5)):
            value = b.latency[metric].quantiles.get(q) if metric in b.latency else None
            cells.append("-" if value is None else f"{value * 1000:.1f}ms")
        dist = "yes" if all(s.sketch is not None for s in b.latency.values()) else "no"
        click.echo(
            f"{b.name:<28} {b.source:<8} {b.created_at:%Y-%m-%d %H:%M:%S}  {b.requests:>9} "
            f"{b.request_throughput:>8.2f} {cells[0]:>9} {cells[1]:>9} {cells[2]:>9}  {dist}"
        )


@baseline.command("delete")
@click.argument("name")
@click.pass_context
def delete(ctx: click.Context, name: str) -> None:
    """Delete baseline NAME."""
    store = open_store(ctx)
    try:
        service.delete_baseline(store, name)
    finally:
        store.dispose()
    click.echo(f"deleted {name}")


@baseline.command("compare")
@click.argument("name")
@_selector_options
@click.option("--against", default=None, help="Compare this stored baseline instead of a window.")
@click.option(
    "--file",
    "result_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Compare a load tester's result file instead of a window.",
)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None, help="Of --file.")
@click.option(
    "--samples",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Per-request file belonging to --file.",
)
@click.option("--run", "run_id", type=int, default=None, help="Compare a stored load-test run.")
@click.option(
    "--threshold",
    type=click.FloatRange(0, 10),
    default=0.1,
    show_default=True,
    help="Relative change a metric may make (0.1 = 10 %).",
)
@click.option(
    "--metric-threshold",
    "metric_thresholds",
    multiple=True,
    metavar="METRIC=X",
    help="Per metric or latency family, e.g. ttft.p99=0.2 or tpot=0.15 (repeatable).",
)
@click.option("--confidence", type=click.FloatRange(0.5, 0.999), default=0.95, show_default=True)
@click.option(
    "--seed", type=click.IntRange(0), default=0, show_default=True, help="Bootstrap seed."
)
@click.option(
    "--markdown",
    "markdown_file",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="Also write a Markdown summary (for a pull-request comment) to this file.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def compare(
    ctx: click.Context,
    name: str,
    start: str | None,
    end: str | None,
    last: str | None,
    model: str | None,
    instance: str | None,
    tenant: str | None,
    priority: str | None,
    against: str | None,
    result_file: Path | None,
    fmt: str | None,
    samples: Path | None,
    run_id: int | None,
    threshold: float,
    metric_thresholds: tuple[str, ...],
    confidence: float,
    seed: int,
    markdown_file: Path | None,
    as_json: bool,
) -> None:
    """Compare a candidate with baseline NAME; exit 1 if any metric regressed."""
    policy = Policy(
        thresholds=parse_thresholds(",".join(t.replace("=", ":", 1) for t in metric_thresholds)),
        default_threshold=threshold,
        confidence=confidence,
    )
    sources = sum(x is not None for x in (against, result_file, run_id))
    if sources > 1:
        raise InvalidInput("give at most one of --against, --file, --run")
    if sources and any((start, end, last, model, instance, tenant, priority)):
        raise InvalidInput("a window and selector only apply when comparing the store's traffic")
    settings = current_settings(ctx)
    store = open_store(ctx)
    label: str | None = None  # how the candidate is named to people (a range, a file)
    try:
        reference = service.get_baseline(store, name)
        if against is not None:
            candidate = service.get_baseline(store, against)
        elif result_file is not None:
            candidate = _import(result_file, samples, fmt, "candidate", "")
            label = result_file.name
        elif run_id is not None:
            candidate = _from_run(store, run_id, f"run-{run_id}", "")
        else:
            now = datetime.now(UTC)
            window = _window(start, end, last, now)
            measured = service.window_candidate(
                store,
                window,
                Selector(model, instance, tenant, priority),
                now,
                finest=settings.retention().finest_for(window, now),
                exact_max_rows=settings.exact_max_rows,
                cost_model=active_model(store, settings.cost_model),
            )
            candidate, label = measured.baseline, measured.label
    finally:
        store.dispose()
    result = service.compare(reference, candidate, policy, seed=seed, label=label)
    click.echo(json.dumps(comparison_dict(result), indent=2) if as_json else table(result))
    if markdown_file is not None:
        markdown_file.write_text(markdown(result), encoding="utf-8")
    if result.verdict is Verdict.REGRESSED:
        sys.exit(1)
