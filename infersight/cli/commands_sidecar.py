"""``infersight sidecar``: the collector next to one inference server.

Builds the sidecar's configuration from flags once, wires the store writer, the scraper and
the GPU source into ``collector.sidecar.Sidecar``, and runs until SIGTERM / SIGINT, on which
it shuts down cleanly (pending appends committed, eligible entries shipped).

Start-up binds and accepts first: the store writer (SQLAlchemy, the driver, numpy) is imported
and built in the shipper's thread after the receivers listen (``service.ingest.open_writer``),
and nothing here imports the store's modules at module level.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import click

from infersight.cli.group import current_settings, store_option
from infersight.cli.settings import SidecarSettings
from infersight.cli.sidecar_profiling import profile_options, profile_poller
from infersight.collector.otlp import Limits
from infersight.collector.periodic import Sampler
from infersight.collector.sidecar import Sidecar, SidecarConfig
from infersight.collector.spool import FsyncMode
from infersight.config.parts import DEFAULT_DATABASE_URL, StorePart
from infersight.core.accept import AcceptWindow
from infersight.core.attribution import AttributionMap
from infersight.core.attribution import parse_setting as parse_attribution
from infersight.core.errors import ConfigurationError, InvalidInput
from infersight.core.gpu_slice import fraction_of
from infersight.core.records import MAX_LABEL_LEN, Role

log = logging.getLogger(__name__)
# glibc's mallopt parameter numbers
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_MMAP_THRESHOLD = 128 * 1024
#: How often the idle main thread hands freed heap back to the OS (``malloc_trim``).
TRIM_EVERY_S = 10.0
#: Seconds a request record waits for the rest of its trace, and on a P/D decode instance.
DEFAULT_WINDOW_S = 2.0
DECODE_WINDOW_S = 6.0
#: Seconds exports wait for the first scrape to name the role (``collector.roles``).
ROLE_WAIT_S = 10.0
#: The store writer imports numpy for its rollup sketches, which are far too small to gain
#: from BLAS threads; OpenBLAS would otherwise start (and size buffers for) one per core.
_SINGLE_THREADED_MATH = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _address(value: str, option: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise click.BadParameter(f"expected HOST:PORT, got {value!r}", param_hint=option)
    return host.strip("[]") or "127.0.0.1", int(port)


def _service_models(pairs: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        service, sep, model = pair.partition("=")
        if not sep or not service or not model:
            raise click.BadParameter(
                f"expected SERVICE=MODEL, got {pair!r}", param_hint="--service-model"
            )
        out[service] = model
    return out


def _settings(ctx: click.Context) -> SidecarSettings:
    """The group's store settings (its ``--store`` applied) and the sidecar's own, read from
    the environment."""
    values = current_settings(ctx).model_dump(include=set(StorePart.model_fields))
    return SidecarSettings(**values)


#: Why a token is never taken from the command line, and where it is taken from instead.
ARGV_REFUSAL: Final = (
    "--token is refused: a token on the command line is readable by every local user in the "
    "process list (/proc/PID/cmdline). Give it with --token-file FILE (a file only the "
    "sidecar's user can read) or the INFERSIGHT_OTLP_TOKEN environment variable"
)


def _token(token: str | None, token_file: Path | None, settings: SidecarSettings) -> str | None:
    if token is not None:
        raise click.UsageError(ARGV_REFUSAL)
    if token_file is not None:
        return token_file.read_text().strip() or None
    return settings.otlp_token.get_secret_value() or None


def _store_url(store: str | None, settings: SidecarSettings) -> str:
    """``--store``, else the settings' URL (an empty ``INFERSIGHT_DATABASE_URL``: the default)."""
    return store or settings.database_url or DEFAULT_DATABASE_URL


@click.command("sidecar")
@click.option(
    "--otlp-http",
    default="127.0.0.1:4318",
    show_default=True,
    metavar="HOST:PORT",
    help="OTLP/HTTP receiver, also serving /metrics and /healthz.",
)
@click.option(
    "--otlp-grpc",
    default="127.0.0.1:4317",
    show_default=True,
    metavar="HOST:PORT",
    help="OTLP/gRPC receiver.",
)
@click.option("--instance", default=None, help="This server's name (default: the host name).")
@click.option("--model", default="", help="Model name for spans that carry none.")
@click.option(
    "--service-model",
    "service_models",
    multiple=True,
    metavar="SERVICE=MODEL",
    help="Model for spans of a service.name (repeatable).",
)
@click.option(
    "--adapter",
    "adapters",
    multiple=True,
    metavar="NAME",
    help="A LoRA adapter this server serves (repeatable): spans naming it count as the base "
    "model's requests with that adapter. vLLM's /metrics (lora_requests_info) name them too.",
)
@click.option(
    "--attribution",
    default=None,
    metavar="SPEC",
    help="Which attributes of gateway and client spans name who a trace's requests are for: "
    "presets (litellm, llm-d, envoy-ai-gateway, openai-sdk) and dimension=attr1|attr2 rules "
    "(tenant, team, workload, adapter; resource.NAME for a resource attribute), "
    "comma-separated. [default: INFERSIGHT_ATTRIBUTION]",
)
@click.option(
    "--attribution-file",
    default=None,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="An Attribution document (YAML or JSON: presets and rules) instead of --attribution.",
)
@click.option(
    "--scrape",
    "scrape_url",
    default=None,
    metavar="URL",
    help="The inference server's /metrics URL.",
)
@click.option("--scrape-interval", default=15.0, show_default=True, type=click.FloatRange(min=0.1))
@click.option("--scrape-timeout", default=5.0, show_default=True, type=click.FloatRange(min=0.1))
@click.option("--gpu-source", default="nvml", show_default=True, metavar="nvml|dcgm:URL|none")
@click.option("--gpu-interval", default=2.0, show_default=True, type=click.FloatRange(1.0, 5.0))
@click.option(
    "--gpu-share",
    default=None,
    metavar="FRACTION",
    help="The fraction of each GPU this instance holds when GPUs are time-sliced (0.25 or "
    "1/4); its cost is that share of the GPU's price. MIG slices are found by NVML itself.",
)
@store_option(
    expose=True, help="Store URL (default: the group's --store / INFERSIGHT_DATABASE_URL)."
)
@click.option(
    "--spool-dir",
    default="infersight-spool",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
)
@click.option(
    "--spool-max-bytes", default=1 << 30, show_default=True, type=click.IntRange(min=1 << 20)
)
@click.option(
    "--fsync",
    "fsync",
    default="group",
    show_default=True,
    type=click.Choice([m.value for m in FsyncMode]),
    help="group: one fsync per commit window; always: one per export.",
)
@click.option(
    "--fsync-window",
    default=0.02,
    show_default=True,
    type=click.FloatRange(0.0, 0.2),
    help="Group-commit window in seconds.",
)
@click.option(
    "--window",
    "window_s",
    default=None,
    type=click.FloatRange(min=0.0),
    help="Seconds a request waits for the stage spans of its trace "
    f"[default: {DEFAULT_WINDOW_S:g}; {DECODE_WINDOW_S:g} with --role decode].",
)
@click.option(
    "--role",
    default=None,
    type=click.Choice(["unified", "prefill", "decode"]),
    help="The server's part in disaggregated prefill/decode serving: on a prefill instance "
    "every request is a prefill leg, stored apart; on a decode instance, requests below a "
    "P/D proxy's spans become the user's requests. [default: what the scraped /metrics say "
    "(SGLang engine_type, Dynamo worker_type), else unified]",
)
@click.option(
    "--max-body-bytes", default=20 * 1024 * 1024, show_default=True, type=click.IntRange(min=1024)
)
@click.option(
    "--token",
    default=None,
    hidden=True,
    help="Refused (the process list would show it): use --token-file or INFERSIGHT_OTLP_TOKEN.",
)
@click.option(
    "--token-file",
    default=None,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="A file holding the bearer token the receivers require (16+ characters); else "
    "INFERSIGHT_OTLP_TOKEN. A token is never taken on the command line (--token is refused: "
    "any local user could read it in the process list).",
)
@click.option(
    "--insecure-no-auth", is_flag=True, help="Allow non-loopback listening without a token."
)
@click.option(
    "--ship-to",
    default=None,
    metavar="URL",
    help="Ship to central ingest (an `infersight serve` API, e.g. https://api:8080) instead of "
    "to the database; needs --ship-token-file. Not with --store.",
)
@click.option(
    "--ship-token-file",
    default=None,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="A file holding this sidecar's ingest-scoped API token (for --ship-to).",
)
@profile_options
@click.pass_context
def sidecar(ctx: click.Context, /, **options: Any) -> None:
    """Receive OTLP traces, scrape /metrics, sample GPUs; spool durably and ship to the store."""
    _tune_malloc()
    http_host, http_port = _address(options["otlp_http"], "--otlp-http")
    grpc_host, grpc_port = _address(options["otlp_grpc"], "--otlp-grpc")
    instance = options["instance"] or socket.gethostname()
    given = options["role"]
    role = None if given is None else Role("" if given == "unified" else given)
    read_role = role is None and bool(options["scrape_url"])
    settings = _settings(ctx)
    window = settings.accept_window()
    config = SidecarConfig(
        instance=instance,
        spool_dir=options["spool_dir"],
        http_host=http_host,
        http_port=http_port,
        grpc_host=grpc_host,
        grpc_port=grpc_port,
        model=options["model"],
        service_models=_service_models(options["service_models"]),
        token=_token(options["token"], options["token_file"], settings),
        insecure_no_auth=options["insecure_no_auth"],
        fsync=FsyncMode(options["fsync"]),
        group_window_s=options["fsync_window"],
        spool_max_bytes=options["spool_max_bytes"],
        window_s=_window_s(options["window_s"], role or Role.UNIFIED),
        role=role,
        role_wait_s=ROLE_WAIT_S if read_role else 0.0,
        decode_window_s=DECODE_WINDOW_S if read_role and options["window_s"] is None else None,
        adapters=tuple(a[:MAX_LABEL_LEN] for a in options["adapters"] if a),
        attribution=_attribution(options, settings),
        limits=Limits(max_body_bytes=options["max_body_bytes"]),
        accept=window,
    )
    gpu_source = options["gpu_source"]
    if gpu_source not in ("nvml", "none") and not gpu_source.startswith("dcgm:"):
        raise ConfigurationError(
            "--gpu-source must be nvml, dcgm:URL or none", details={"value": gpu_source}
        )
    try:
        share = None if options["gpu_share"] is None else fraction_of(options["gpu_share"])
    except InvalidInput as exc:
        raise ConfigurationError(f"--gpu-share: {exc.message}", details=exc.details) from None
    open_sink = _sink_opener(options, settings, window)
    profiler = profile_poller(options, instance, lambda: _store_url(options["store"], settings))
    scrapers: list[Any] = []  # the scraper, once built (after the receivers listen)
    app = Sidecar(
        config,
        open_sink,
        scraped_model=lambda: scrapers[0].current_model() if scrapers else "",
        scraped_adapters=lambda: scrapers[0].current_adapters() if scrapers else frozenset(),
    )

    def on_xid(gpu_index: int, xid: int) -> None:
        log.warning("GPU %d reported XID %d", gpu_index, xid)
        app.metrics.xid_events.labels(str(xid)).inc()

    def add_samplers() -> None:
        """Built after the receivers listen: the scrape client and NVML's initialisation are
        not needed to accept exports."""
        from infersight.collector.gpu.source import build_gpu_sampler  # noqa: PLC0415
        from infersight.collector.scrape.scraper import Scraper  # noqa: PLC0415

        samplers: list[Sampler] = []
        if options["scrape_url"]:
            scraper = Scraper(
                options["scrape_url"],
                instance,
                options["scrape_interval"],
                options["scrape_timeout"],
            )
            scrapers.append(scraper)
            samplers.append(scraper)
        gpu = build_gpu_sampler(gpu_source, instance, options["gpu_interval"], on_xid, share=share)
        if gpu is not None:
            samplers.append(gpu)
        app.add_samplers(samplers)
        if profiler is not None:  # py-spy on the serving process, when asked (issue 37)
            app.health_parts.append(profiler.health)
            profiler.start()

    _run(app, add_samplers)


def _attribution(options: dict[str, Any], settings: SidecarSettings) -> AttributionMap | None:
    """The attribution mapping: ``--attribution-file``'s document, else ``--attribution``,
    else ``INFERSIGHT_ATTRIBUTION``; ``None`` when none is given."""
    path: Path | None = options["attribution_file"]
    spec = options["attribution"]
    if path is not None and spec is not None:
        raise click.UsageError("--attribution and --attribution-file: give one of them")
    try:
        if path is not None:
            from infersight.service.attribution import read_attribution  # noqa: PLC0415

            try:
                text = path.read_bytes()
            except OSError as exc:
                raise ConfigurationError(f"--attribution-file {path}: {exc}") from None
            return read_attribution(text)
        text_spec = spec if spec is not None else settings.attribution
        return parse_attribution(text_spec) if text_spec.strip() else None
    except InvalidInput as exc:
        where = "--attribution-file" if path else "--attribution / INFERSIGHT_ATTRIBUTION"
        raise ConfigurationError(f"{where}: {exc.message}", details=exc.details) from None


def _sink_opener(
    options: dict[str, Any], settings: SidecarSettings, window: AcceptWindow
) -> Callable[[], Any]:
    """What builds the shipper's sink: central ingest's client with ``--ship-to``, else the
    store writer for the store URL."""
    ship_to, token_file = options["ship_to"], options["ship_token_file"]
    if ship_to is None:
        if token_file is not None:
            raise click.UsageError("--ship-token-file goes with --ship-to")
        url = _store_url(options["store"], settings)
        _check_store_url(url)
        at_url = settings.model_copy(update={"database_url": url})
        return lambda: _open_sink(at_url, window)
    if options["store"] is not None:
        raise click.UsageError("--ship-to and --store are exclusive: ship to one of them")
    if token_file is None:
        raise click.UsageError("--ship-to needs --ship-token-file (an ingest-scoped token)")
    token = token_file.read_text().strip()
    from infersight.collector.remote_sink import RemoteSink  # noqa: PLC0415 (light)

    sink = RemoteSink(ship_to, token)  # checks the URL and the token before listening
    return lambda: sink


def _check_store_url(url: str) -> None:
    """Refuse a store URL that can never work before listening (the full parse needs
    SQLAlchemy, which loads after the receivers are up)."""
    scheme = url.partition(":")[0].partition("+")[0].lower()
    if scheme not in ("postgresql", "postgres", "sqlite") or "://" not in url:
        raise ConfigurationError("the store must be a postgresql:// or sqlite:// URL")


def _window_s(given: float | None, role: Role) -> float:
    """The reassembly window: as given, else longer on a decode instance, whose P/D proxy
    (a Go service: its SDK batches spans for 5 s by default) exports after the engine."""
    if given is not None:
        return given
    return DECODE_WINDOW_S if role is Role.DECODE else DEFAULT_WINDOW_S


def _open_sink(settings: SidecarSettings, window: AcceptWindow) -> Any:
    """The store writer of the settings' store, imported here (in the shipper's thread, after
    the receivers bind), so that the math libraries it pulls in see the single-thread settings
    first."""
    for name in _SINGLE_THREADED_MATH:
        os.environ.setdefault(name, "1")
    from infersight.service.ingest import open_writer  # noqa: PLC0415 (after the settings)
    from infersight.service.store import open_store  # noqa: PLC0415

    return open_writer(open_store(settings), accept=window)


def _libc() -> Any:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def _tune_malloc(arenas: int = 1) -> None:
    """Keep glibc's heap small. It gives every thread its own malloc arena, and a sidecar
    with a dozen mostly idle threads pays tens of MB of RSS for them; its allocations are
    small and made under the GIL (pymalloc serves most), so one arena costs no contention.
    Fixed mmap / trim thresholds stop glibc from raising them after the first large export
    body is freed, which would keep every later body in the heap. Must run before the
    threads start."""
    libc = _libc()
    try:
        libc.mallopt(_M_ARENA_MAX, arenas)
        libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
        libc.mallopt(_M_TRIM_THRESHOLD, _MMAP_THRESHOLD)
    except AttributeError:
        log.debug("mallopt is not available; keeping glibc's defaults")


def _trim_heap() -> None:
    """Return the heap's free pages to the OS (glibc keeps them after bursts otherwise)."""
    with contextlib.suppress(AttributeError):
        _libc().malloc_trim(0)


def _freeze_startup_objects() -> None:
    """Move everything start-up created (modules, protobuf descriptors, SQLAlchemy, numpy:
    some 75,000 objects that live as long as the process) out of the garbage collector's
    reach. Ingest allocates and frees many short-lived objects, and the older-generation
    collections that churn triggers would otherwise walk all of them again and again;
    end-to-end throughput measured about 8 % higher with this (bench/bench_collector.py)."""
    gc.collect()
    gc.freeze()


def _run(app: Sidecar, after_start: Callable[[], None] = lambda: None) -> None:
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        app.start()
    except OSError as exc:
        raise ConfigurationError(f"cannot listen: {exc}") from None
    click.echo(
        f"infersight sidecar {app.config.instance}: http={app.http.host}:{app.http.port} "
        f"grpc={app.grpc.host}:{app.grpc.port} spool={app.spool.path}",
        nl=True,
    )
    try:
        after_start()
        waited, frozen = 0.0, False
        while not stop.wait(0.5):
            waited += 0.5
            if not frozen and app.shipper.opened.is_set():
                _freeze_startup_objects()  # once the store's libraries are loaded too
                frozen = True
            if waited >= TRIM_EVERY_S:
                waited = 0.0
                _trim_heap()
    finally:
        app.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        click.echo("infersight sidecar stopped")
