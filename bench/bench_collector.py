"""Collector benchmark (issues 3, 35): what the sidecar sustains and what it costs.

Every figure counts the sidecar's whole process tree: its main process and the decoder child
processes it starts (``collector.decoding``: an export over 64 KiB, every 512-span export the
OpenTelemetry SDK sends by default, is decoded and mapped in a child, which does most of the
work). CPU is the tree's user + system time (a child that exited and was reaped counts in its
parent's), memory the sum of the tree's RSS and of its PSS (shared pages split between the
processes that map them: what the tree adds to the machine).

Prints, in one run on this machine, in ``--rounds`` interleaved rounds:

1. reference: bare protobuf decode (``ExportTraceServiceRequest.FromString``) of the payloads,
   for ``--reference-seconds`` in the benchmark's process;
2. spans/s through the ingest pipeline in-process (a body as received → decode → map →
   durable group-commit append, what a decoder process does, ``Ingestor.ingest_body`` with no
   decoder set), one thread, and per CPU second of this process;
3. spans/s accepted end to end over OTLP/HTTP and over OTLP/gRPC (``--transports``) by a
   sidecar subprocess pinned to one core (its children inherit the core) into its spool,
   acknowledged after group-commit fsync, and per CPU second of the sidecar's tree;

   Each round runs the cases once, the reference among them, in ABBA order (``--order
   abba``: round 1 reference first, round 2 reference last, …) or shuffled (``--order
   random``); every ratio is taken within its round against that round's reference. Each
   round is printed, then per case the median and the spread (min–max) of the rounds'
   ratios. A round has its own sidecar (both transports in it), so no round inherits the
   previous one's spool. To compare two versions of the ingest path, read "per CPU second of
   the sidecar's tree" and its ratio to bare decode per CPU second: it moves least with how
   the host's load falls on the two cores (the wall-clock ratio also moves with that);

4. at a steady ``--rate`` requests/s (one span each, in exports of ``--export-spans``) with
   scraping (vLLM /metrics) and GPU sampling (dcgm-exporter /metrics, every 2 s) on,
   shipping to PostgreSQL with the default 2 s reassembly window, for each transport: the
   tree's CPU share of one core, its peak RSS and PSS, and ack-to-visible-in-PostgreSQL
   latency P50/P99; next to the reference: the same sidecar idle for as long (scrape and GPU
   sampling only). ``--steady-rounds`` rounds, each a fresh database and sidecar running the
   idle reference and every shape × transport once, in ABBA (or shuffled) order; each round
   is printed, then the median and spread of each figure.

   The 512-span shape is what an OpenTelemetry SDK gives a server at that rate with its
   defaults: the ``BatchSpanProcessor`` exports as soon as 512 spans are queued
   (``max_export_batch_size``) and at the latest every 5 s (``schedule_delay``), so at
   200 requests/s it sends 512 spans every 2.56 s. The 100-span shape is a server configured
   for smaller, more frequent exports.

Payloads are real OTLP protobuf in vLLM's ``llm_request`` shape with random ids. A fresh
PostgreSQL database is created (and dropped) per steady round; ``--no-postgres`` skips step 4.

Options (stable: other benchmarks' before → after figures are run with them):

  --spans N             spans per export in the throughput runs (500)
  --payloads N          distinct payloads sent round-robin (20)
  --repeats N           passes over the payloads in the in-process pipeline case, and the
                        least the reference decodes them (3)
  --reference-seconds S how long the bare-decode reference runs per round (2)
  --seconds S           length of each end-to-end throughput case per round (10)
  --senders N           concurrent clients per end-to-end case (4)
  --transports LIST     end-to-end transports, comma-separated: http,grpc (both)
  --rounds N            interleaved throughput rounds (3)
  --order abba|random   the cases' order from round to round (abba)
  --rate N              requests (spans) per second in the steady runs (200)
  --export-spans LIST   spans per export in the steady runs, comma-separated (512,100)
  --steady-seconds S    length of each steady case, after 3 s of warm-up (30)
  --steady-rounds N     steady rounds (2)
  --postgres URL        an admin URL of the PostgreSQL server the steady runs ship to
  --no-postgres         skip the steady runs
  --json FILE           also write every figure (medians, rounds, spreads) to FILE

``--payloads 2 --spans 50 --repeats 1 --seconds 1 --senders 1 --no-postgres`` is a smoke run.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
from harness.interleave import add_round_arguments, ratio_spread, round_orders, spread
from harness.proctree import tree_cpu_seconds, tree_memory_mb
from harness.results import write_json
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from sqlalchemy import create_engine, select, text
from sqlalchemy.engine import make_url

from infersight.collector.assembly import Reassembly
from infersight.collector.http_receiver import HTTP_IMPL
from infersight.collector.ingest import Ingestor
from infersight.collector.mapping import MappingContext
from infersight.collector.metrics import CollectorMetrics
from infersight.collector.otlp import PROTOBUF as PROTOBUF_MEDIA
from infersight.collector.otlp import Limits
from infersight.collector.spool import Spool, SpoolConfig
from infersight.storage import migrate
from infersight.storage.engine import create_store_engine
from infersight.storage.tables import requests

ROOT = Path(__file__).resolve().parents[1]
PROTOBUF = {"content-type": "application/x-protobuf"}
#: ``BatchSpanProcessor``'s default ``max_export_batch_size``.
SDK_BATCH = 512
#: The OTLP/gRPC method the sidecar serves.
GRPC_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
TRANSPORTS = ("http", "grpc")


def kv(key: str, value: float | int | str) -> KeyValue:
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def export(spans: int, start_ns: int) -> tuple[bytes, list[str]]:
    """One OTLP export of ``spans`` vLLM ``llm_request`` spans; returns its trace ids too."""
    out, ids = [], []
    for i in range(spans):
        trace_id = os.urandom(16)
        ids.append(trace_id.hex())
        attrs = [
            kv("gen_ai.request.id", f"cmpl-{trace_id.hex()[:12]}"),
            kv("gen_ai.request.max_tokens", 256),
            kv("gen_ai.request.temperature", 0.7),
            kv("gen_ai.request.top_p", 1.0),
            kv("gen_ai.request.n", 1),
            kv("gen_ai.usage.prompt_tokens", 100 + i),
            kv("gen_ai.usage.completion_tokens", 64),
            kv("gen_ai.latency.time_in_queue", 0.01),
            kv("gen_ai.latency.time_to_first_token", 0.12),
            kv("gen_ai.latency.e2e", 1.4),
            kv("gen_ai.latency.time_in_model_prefill", 0.1),
            kv("gen_ai.latency.time_in_model_decode", 1.25),
            kv("gen_ai.latency.time_in_model_inference", 1.35),
        ]
        out.append(
            Span(
                trace_id=trace_id, span_id=os.urandom(8), name="llm_request", kind=2,
                start_time_unix_nano=start_ns, end_time_unix_nano=start_ns + 1_400_000_000,
                attributes=attrs,
            )
        )  # fmt: skip
    message = ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource={"attributes": [kv("service.name", "vllm")]},
                scope_spans=[ScopeSpans(scope={"name": "vllm.tracing"}, spans=out)],
            )
        ]
    )
    return message.SerializeToString(), ids


def payloads(count: int, spans: int) -> list[bytes]:
    now = time.time_ns()
    return [export(spans, now)[0] for _ in range(count)]


def bench_decode(
    bodies: list[bytes], spans: int, repeats: int, seconds: float = 0.0
) -> tuple[float, float]:
    """Spans/s of bare protobuf decode, and per CPU second: at least ``repeats`` passes over
    the payloads, and at least ``seconds``."""
    started, cpu_started = time.perf_counter(), time.process_time()
    done = 0
    while done < repeats or time.perf_counter() - started < seconds:
        for body in bodies:
            ExportTraceServiceRequest.FromString(body)
        done += 1
    decoded = len(bodies) * spans * done
    cpu = time.process_time() - cpu_started
    return decoded / (time.perf_counter() - started), decoded / cpu if cpu > 0 else float("inf")


def bench_pipeline(bodies: list[bytes], spans: int, repeats: int) -> tuple[float, float]:
    """Spans per second, and per CPU second of this process: one thread waits for each
    export's fsync, so the first is bound by the disk's latency and the second says what
    the pipeline itself costs."""
    with tempfile.TemporaryDirectory() as tmp:
        spool = Spool(SpoolConfig(Path(tmp), max_bytes=8 << 30))
        ingestor = Ingestor(
            spool, MappingContext("bench"), CollectorMetrics(), Limits(), Reassembly(3600.0)
        )
        started, cpu_started = time.perf_counter(), time.process_time()
        for _ in range(repeats):
            for body in bodies:
                # What a decoder process does with a body, in this thread (no decoder set).
                ingestor.ingest_body(body, "identity", PROTOBUF_MEDIA).durable.result()
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        spool.close()
    spans_in_all = len(bodies) * spans * repeats
    return spans_in_all / elapsed, spans_in_all / cpu


def pin(cpu: int) -> None:
    if hasattr(os, "sched_setaffinity") and cpu < (os.cpu_count() or 1):
        os.sched_setaffinity(0, {cpu})


# --- the sidecar's process tree -----------------------------------------------------------


@dataclass
class Sidecar:
    proc: subprocess.Popen[str]
    http: str
    grpc: str


@contextmanager
def sidecar(*args: str) -> Iterator[Sidecar]:
    proc = subprocess.Popen(
        [sys.executable, "-c", "from infersight.cli.commands_sidecar import sidecar; sidecar()",
         "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "127.0.0.1:0", "--instance", "bench", *args],
        stdout=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    if hasattr(os, "sched_setaffinity"):
        # The sidecar gets one core, and its decoder children (started after it binds)
        # inherit it; the senders get another.
        os.sched_setaffinity(proc.pid, {0})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    http = re.search(r"http=127\.0\.0\.1:(\d+)", line)
    grpc_port = re.search(r"grpc=127\.0\.0\.1:(\d+)", line)
    if not http or not grpc_port:
        proc.kill()
        raise SystemExit(f"the sidecar did not start: {line!r}")
    base = f"http://127.0.0.1:{http.group(1)}"
    # The sidecar loads its store writer after it binds (at the first export, or after 5 s),
    # and starts its decoders in the background: measure the steady state, not that import.
    deadline = time.monotonic() + 120
    while httpx.get(f"{base}/healthz").json().get("shipping") == "starting":
        if time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("the sidecar's store writer did not open")
        time.sleep(0.1)
    try:
        yield Sidecar(proc, f"{base}/v1/traces", f"127.0.0.1:{grpc_port.group(1)}")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


class Sender:
    """One client of one transport: ``send(body)`` is True when the export was accepted."""

    def __init__(self, side: Sidecar, transport: str) -> None:
        self.transport = transport
        #: Refused exports by answer (status code or gRPC code): a refusal costs the sidecar
        #: little, so a run with many of them measures something else.
        self.refused: dict[str, int] = {}
        if transport == "http":
            self._http = httpx.Client(timeout=30)
            self._url = side.http
        else:
            self._channel = grpc.insecure_channel(side.grpc)
            self._export = self._channel.unary_unary(GRPC_EXPORT)  # bytes in, bytes out

    def send(self, body: bytes) -> bool:
        if self.transport == "http":
            status = self._http.post(self._url, content=body, headers=PROTOBUF).status_code
            if status == 200:
                return True
            answer = str(status)
        else:
            try:
                self._export(body, timeout=30)
                return True
            except grpc.RpcError as exc:
                answer = exc.code().name if isinstance(exc, grpc.Call) else type(exc).__name__
        self.refused[answer] = self.refused.get(answer, 0) + 1
        return False

    def close(self) -> None:
        if self.transport == "http":
            self._http.close()
        else:
            self._channel.close()


@contextmanager
def throughput_sidecar() -> Iterator[Sidecar]:
    """A sidecar for the throughput runs: SQLite store, a one-hour reassembly window (nothing
    ships during the run), a spool large enough for it."""
    with tempfile.TemporaryDirectory() as tmp:
        store = f"sqlite:///{tmp}/store.db"
        migrate.upgrade(create_store_engine(store))
        args = ("--store", store, "--spool-dir", f"{tmp}/spool", "--gpu-source", "none",
                "--window", "3600", "--spool-max-bytes", str(8 << 30))  # fmt: skip
        with sidecar(*args) as side:
            yield side


def bench_end_to_end(
    side: Sidecar, transport: str, bodies: list[bytes], spans: int, seconds: float, senders: int
) -> tuple[float, float]:
    """Spans/s accepted over ``transport`` by ``senders`` clients for ``seconds``, and per
    CPU second of the sidecar's tree."""
    accepted = [0] * senders
    clients = [Sender(side, transport) for _ in range(senders)]
    warm_until = time.monotonic() + 60
    # Connected, the decoders up and the first export's one-off costs paid.
    while not clients[0].send(bodies[0]) and time.monotonic() < warm_until:
        time.sleep(0.2)
    clients[0].refused.clear()
    deadline = time.perf_counter() + seconds

    def send(k: int) -> None:
        i = k
        while time.perf_counter() < deadline:
            if clients[k].send(bodies[i % len(bodies)]):
                accepted[k] += spans
            i += senders

    cpu_started = tree_cpu_seconds(side.proc.pid)
    started = time.perf_counter()
    threads = [threading.Thread(target=send, args=(k,)) for k in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    cpu = tree_cpu_seconds(side.proc.pid) - cpu_started
    refused: dict[str, int] = {}
    for client in clients:
        client.close()
        for answer, n in client.refused.items():
            refused[answer] = refused.get(answer, 0) + n
    if refused:
        print(f"    ({transport}: exports refused during the run: {refused})")
    return sum(accepted) / elapsed, sum(accepted) / cpu if cpu > 0 else float("inf")


def serve_metrics() -> tuple[object, str, str]:
    vllm, dcgm = CollectorRegistry(), CollectorRegistry()
    Gauge("vllm:num_requests_running", "", ["model_name"], registry=vllm).labels("llama").set(8)
    Gauge("vllm:kv_cache_usage_perc", "", ["model_name"], registry=vllm).labels("llama").set(0.4)
    Counter("vllm:prompt_tokens", "", ["model_name"], registry=vllm).labels("llama").inc(1e6)
    gpu = ["gpu", "UUID", "modelName"]
    Gauge("DCGM_FI_DEV_GPU_UTIL", "", gpu, registry=dcgm).labels("0", "GPU-0", "H100").set(80)
    Gauge("DCGM_FI_DEV_POWER_USAGE", "", gpu, registry=dcgm).labels("0", "GPU-0", "H100").set(600)
    servers = [start_http_server(0, addr="127.0.0.1", registry=r)[0] for r in (vllm, dcgm)]
    return servers, *(f"http://127.0.0.1:{s.server_port}/metrics" for s in servers)


class TreeSampler:
    """Reads the tree's CPU seconds at start and its memory every ``every`` seconds in a
    thread until stopped: CPU share of one core and peak RSS / PSS over the window."""

    def __init__(self, pid: int, every: float = 0.25) -> None:
        self.pid, self.every = pid, every
        self.rss: list[float] = []
        self.pss: list[float] = []
        self.processes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeSampler:
        self._cpu, self._wall = tree_cpu_seconds(self.pid), time.perf_counter()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            rss, pss, count = tree_memory_mb(self.pid)
            self.rss.append(rss)
            self.pss.append(pss)
            self.processes = max(self.processes, count)
            self._stop.wait(self.every)

    def __exit__(self, *exc: object) -> None:
        self.cpu_share = (tree_cpu_seconds(self.pid) - self._cpu) / (
            time.perf_counter() - self._wall
        )
        self._stop.set()
        self._thread.join()


def bench_steady(
    args: argparse.Namespace, shapes: list[int], transports: list[str]
) -> dict[str, list[dict[str, float]]]:
    """``--steady-rounds`` rounds, each with a fresh database and sidecar running the idle
    reference and every shape × transport once, interleaved; each case's figures per round."""
    cases = ["idle"] + [f"{t} {n}" for n in shapes for t in transports]
    out: dict[str, list[dict[str, float]]] = {c: [] for c in cases}
    for r, order in enumerate(round_orders(cases, args.steady_rounds, args.order)):
        figures = _steady_round(args, order)
        print(f"  steady round {r + 1}/{args.steady_rounds} ({', '.join(order)}):")
        for case in cases:
            out[case].append(figures[case])
            print_steady(case, figures[case])
    return out


def _steady_round(args: argparse.Namespace, order: list[str]) -> dict[str, dict[str, float]]:
    admin = create_engine(args.postgres, isolation_level="AUTOCOMMIT")
    name = f"infersight_bench_{uuid.uuid4().hex[:10]}"
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(args.postgres).set(database=name).render_as_string(hide_password=False)
    engine = create_store_engine(url)
    migrate.upgrade(engine)
    servers, scrape_url, dcgm_url = serve_metrics()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sidecar_args = ("--store", url, "--spool-dir", f"{tmp}/spool", "--scrape", scrape_url,
                            "--gpu-source", f"dcgm:{dcgm_url}", "--gpu-interval", "2")  # fmt: skip
            with sidecar(*sidecar_args) as side:
                figures = {}
                for case in order:
                    if case == "idle":
                        figures[case] = _idle(side, args.steady_seconds)
                    else:
                        transport, shape = case.split()
                        figures[case] = _steady(
                            side, transport, engine, args.rate, int(shape), args.steady_seconds
                        )
                return figures
    finally:
        for server in servers:
            server.shutdown()  # type: ignore[attr-defined]
        engine.dispose()
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _idle(side: Sidecar, seconds: float) -> dict[str, float]:
    time.sleep(3)  # as the loaded cases' warm-up
    with TreeSampler(side.proc.pid) as sampled:
        time.sleep(seconds)
    return {
        "cpu_share": sampled.cpu_share,
        "rss_mb": max(sampled.rss),
        "pss_mb": max(sampled.pss),
        "processes": sampled.processes,
    }


def _steady(
    side: Sidecar, transport: str, engine: Any, rate: int, export_spans: int, seconds: float
) -> dict[str, float]:
    acked: dict[str, float] = {}
    visible: dict[str, float] = {}
    lock = threading.Lock()
    stop = threading.Event()
    stop_at = float("inf")

    def poll() -> None:
        while not stop.is_set() or len(visible) < len(acked):
            with lock:
                waiting = [t for t in acked if t not in visible]
            for start in range(0, len(waiting), 1000):
                chunk = waiting[start : start + 1000]
                with engine.connect() as c:
                    found = c.execute(
                        select(requests.c.trace_id).where(requests.c.trace_id.in_(chunk))
                    )
                    now = time.perf_counter()
                    for (trace_id,) in found:
                        visible[trace_id] = now
            if stop.is_set() and time.perf_counter() > stop_at + 30:
                return
            time.sleep(0.05)

    poller = threading.Thread(target=poll)
    poller.start()
    interval = export_spans / rate
    client = Sender(side, transport)
    sampler: TreeSampler | None = None
    try:
        warmup_end = time.perf_counter() + 3
        next_at = time.perf_counter()
        end = warmup_end + seconds
        while time.perf_counter() < end:
            body, ids = export(export_spans, time.time_ns())
            ok = client.send(body)
            now = time.perf_counter()
            if ok:
                with lock:
                    acked.update(dict.fromkeys(ids, now))
            if sampler is None and now >= warmup_end:
                sampler = TreeSampler(side.proc.pid).__enter__()
            next_at += interval
            time.sleep(max(0.0, next_at - time.perf_counter()))
    finally:
        client.close()
        if sampler is not None:
            sampler.__exit__()
    assert sampler is not None, "the steady run ended within its warm-up"
    stop_at = time.perf_counter()
    stop.set()
    poller.join()
    latencies = sorted(visible[t] - acked[t] for t in visible)
    return {
        "cpu_share": sampler.cpu_share,
        "rss_mb": max(sampler.rss),
        "pss_mb": max(sampler.pss),
        "processes": sampler.processes,
        "acked": len(acked),
        "missing": len(acked) - len(visible),
        "p50": statistics.median(latencies) if latencies else float("nan"),
        "p99": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
        if latencies
        else float("nan"),
    }


def print_steady(case: str, f: dict[str, float]) -> None:
    text_ = (
        f"    {case:<10} CPU {f['cpu_share']:6.2%} of a core, peak RSS {f['rss_mb']:6.1f} MB, "
        f"PSS {f['pss_mb']:6.1f} MB ({f['processes']:.0f} processes)"
    )
    if case != "idle":
        text_ += (
            f"; ack → visible P50 {f['p50']:.2f} s, P99 {f['p99']:.2f} s; "
            f"{f['acked']:.0f} acked, {f['missing']:.0f} not seen"
        )
    print(text_)


def line(label: str, value: str, ratio: str = "") -> None:
    suffix = f"  ({ratio} of the reference)" if ratio else ""
    print(f"  {label:<48} {value:>18}{suffix}")


def throughput(
    args: argparse.Namespace, bodies: list[bytes], transports: list[str]
) -> dict[str, Any]:
    """The interleaved throughput rounds: each case's figure per round."""
    cases = ["decode", "pipeline", *transports]
    runs: dict[str, list[float]] = {c: [] for c in cases}
    per_cpu: dict[str, list[float]] = {c: [] for c in cases}
    orders = round_orders(cases, args.rounds, args.order)
    for r, order in enumerate(orders):
        with throughput_sidecar() if transports else _nothing() as side:
            for case in order:
                if case == "decode":
                    rate, rate_cpu = bench_decode(
                        bodies, args.spans, args.repeats, args.reference_seconds
                    )
                    runs[case].append(rate)
                    per_cpu[case].append(rate_cpu)
                elif case == "pipeline":
                    rate, rate_cpu = bench_pipeline(bodies, args.spans, args.repeats)
                    runs[case].append(rate)
                    per_cpu[case].append(rate_cpu)
                else:
                    assert side is not None
                    rate, rate_cpu = bench_end_to_end(
                        side, case, bodies, args.spans, args.seconds, args.senders
                    )
                    runs[case].append(rate)
                    per_cpu[case].append(rate_cpu)
        ref = runs["decode"][-1]
        figures = ", ".join(
            f"{c} {runs[c][-1]:,.0f}/s ({runs[c][-1] / ref:.2%})" for c in cases if c != "decode"
        )
        print(f"  round {r + 1}/{args.rounds} [{' '.join(order)}]: decode {ref:,.0f}/s; {figures}")
    return {"runs": runs, "per_cpu": per_cpu}


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


LABELS = {
    "pipeline": "in-process decode+map+spool, 1 thread",
    "http": "end to end OTLP/HTTP → spool, 1 core",
    "grpc": "end to end OTLP/gRPC → spool, 1 core",
}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spans", type=int, default=500, help="spans per export (throughput)")
    parser.add_argument("--payloads", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--reference-seconds", type=float, default=2.0, help="bare decode per round, seconds"
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="end-to-end throughput run")
    parser.add_argument("--senders", type=int, default=4)
    parser.add_argument(
        "--transports", default="http,grpc", help="end-to-end transports: http, grpc or both"
    )
    add_round_arguments(parser, rounds=3)
    parser.add_argument(
        "--rate", type=int, default=200, help="requests (spans) per second, steady run"
    )
    parser.add_argument(
        "--export-spans",
        default="512,100",
        help="spans per export in the steady runs, comma-separated (512: the OTel SDK's "
        "BatchSpanProcessor defaults at 200 req/s; SGLang exports up to 64 every 0.5 s)",
    )
    parser.add_argument("--steady-seconds", type=float, default=30.0)
    parser.add_argument("--steady-rounds", type=int, default=2)
    parser.add_argument(
        "--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    )
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    transports = [t for t in args.transports.split(",") if t]
    if unknown := set(transports) - set(TRANSPORTS):
        parser.error(f"--transports: unknown {sorted(unknown)}; known: {', '.join(TRANSPORTS)}")
    if args.rounds < 1 or args.steady_rounds < 1:
        parser.error("--rounds and --steady-rounds must be at least 1")
    shapes = [int(n) for n in args.export_spans.split(",") if n]
    pin(1)
    bodies = payloads(args.payloads, args.spans)
    print(
        f"collector benchmark: {os.cpu_count()} CPUs, {args.spans} spans per export, "
        f"HTTP parser {HTTP_IMPL}; {args.rounds} rounds, {args.order} order; CPU and memory "
        "of the sidecar's whole process tree (main + decoders)"
    )
    ran = throughput(args, bodies, transports)
    runs, per_cpu = ran["runs"], ran["per_cpu"]
    results: dict[str, Any] = {name: statistics.median(v) for name, v in runs.items()}
    results["rounds"] = runs
    results["per_cpu_rounds"] = per_cpu
    results["ratios"] = {}
    print(f"  medians of {args.rounds} rounds; ratios: each round's against its own reference,")
    print("  median (min–max):")
    results["decode_cpu"] = statistics.median(per_cpu["decode"])
    line("reference: bare protobuf decode", f"{results['decode']:,.0f} spans/s")
    line("  the same, per CPU second", f"{results['decode_cpu']:,.0f} spans/s")
    for case in ["pipeline", *transports]:
        ratio = ratio_spread(runs[case], runs["decode"])
        cpu_ratio = ratio_spread(per_cpu[case], per_cpu["decode"])
        results["ratios"][case] = ratio.as_dict()
        results["ratios"][f"{case}_cpu"] = cpu_ratio.as_dict()
        line(LABELS[case], f"{results[case]:,.0f} spans/s", ratio.text("", ".2%"))
        who = "this process" if case == "pipeline" else "the sidecar's tree"
        median_cpu = statistics.median(per_cpu[case])
        results[f"{case}_cpu"] = median_cpu
        line(f"  the same, per CPU second of {who}", f"{median_cpu:,.0f} spans/s",
             cpu_ratio.text("", ".2%"))  # fmt: skip
    print("    (target ≥ 20,000 spans/s end to end)")
    if not args.no_postgres:
        print(
            f"  at {args.rate} req/s, scrape + GPU on, shipping to PostgreSQL "
            f"({args.steady_rounds} rounds of {args.steady_seconds:.0f} s per case, "
            f"{args.order} order; reference: the same sidecar idle):"
        )
        steady = bench_steady(args, shapes, transports)
        results["steady"] = steady
        print("  medians (min–max) over the rounds:")
        for case, rounds in steady.items():
            shape = ""
            if case != "idle" and int(case.split()[1]) == SDK_BATCH:
                shape = " (the OTel SDK's default batching)"
            print(f"    {case}{shape}:")
            for key, label, unit, fmt in (
                ("cpu_share", "CPU share of one core", "", ".2%"),
                ("rss_mb", "peak RSS, sum over the tree", " MB", ".1f"),
                ("pss_mb", "peak PSS, sum over the tree", " MB", ".1f"),
                ("p50", "ack → visible in PostgreSQL, P50", " s", ".2f"),
                ("p99", "ack → visible in PostgreSQL, P99 (target < 5 s)", " s", ".2f"),
            ):
                if key in rounds[0]:
                    s = spread([r[key] for r in rounds])
                    print(f"      {label:<48} {s.text(unit, fmt)}")
            for key in ("cpu_share", "rss_mb", "pss_mb", "p50", "p99"):
                if key in rounds[0]:
                    results[f"steady_{case.replace(' ', '')}_{key}"] = statistics.median(
                        r[key] for r in rounds
                    )
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
