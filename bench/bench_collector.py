"""Collector benchmark (issue 3): what the sidecar sustains and what it costs.

Prints, in one run on this machine:

1. reference: bare protobuf decode (``ExportTraceServiceRequest.FromString``) of the payloads;
2. spans/s through the ingest pipeline in-process (decode → map → durable group-commit
   append), one thread;
3. spans/s accepted end to end (OTLP/HTTP → sidecar subprocess pinned to one core → spool,
   acknowledged after group-commit fsync), with the ratio to the reference;
4. at a steady ``--rate`` requests/s (one span each, in exports of ``--export-spans``) with
   scraping (vLLM /metrics) and GPU sampling (dcgm-exporter /metrics, every 2 s) on,
   shipping to PostgreSQL with the default 2 s reassembly window: the sidecar's CPU share
   of one core, its peak RSS, and ack-to-visible-in-PostgreSQL latency P50/P99.

   The first steady run has the shape an OpenTelemetry SDK gives a server at that rate with
   its defaults: the ``BatchSpanProcessor`` exports as soon as 512 spans are queued
   (``max_export_batch_size``) and at the latest every 5 s (``schedule_delay``), so at
   200 requests/s it sends 512 spans every 2.56 s. The second (100 spans per export) is a
   server configured for smaller, more frequent exports.

Payloads are real OTLP protobuf in vLLM's ``llm_request`` shape with random ids. A fresh
PostgreSQL database is created (and dropped) for step 4; ``--no-postgres`` skips it.
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
from pathlib import Path

import httpx
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
from infersight.collector.otlp import Limits, parse_protobuf
from infersight.collector.spool import Spool, SpoolConfig
from infersight.storage import migrate
from infersight.storage.engine import create_store_engine
from infersight.storage.tables import requests

ROOT = Path(__file__).resolve().parents[1]
PROTOBUF = {"content-type": "application/x-protobuf"}
#: ``BatchSpanProcessor``'s default ``max_export_batch_size``.
SDK_BATCH = 512


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


def bench_decode(bodies: list[bytes], spans: int, repeats: int) -> float:
    started = time.perf_counter()
    for _ in range(repeats):
        for body in bodies:
            ExportTraceServiceRequest.FromString(body)
    return len(bodies) * spans * repeats / (time.perf_counter() - started)


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
                ingestor.ingest(parse_protobuf(body)).durable.result()
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        spool.close()
    spans_in_all = len(bodies) * spans * repeats
    return spans_in_all / elapsed, spans_in_all / cpu


def pin(cpu: int) -> None:
    if hasattr(os, "sched_setaffinity") and cpu < (os.cpu_count() or 1):
        os.sched_setaffinity(0, {cpu})


@contextmanager
def sidecar(*args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", "from infersight.cli.commands_sidecar import sidecar; sidecar()",
         "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "127.0.0.1:0", "--instance", "bench", *args],
        stdout=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(proc.pid, {0})  # the sidecar gets one core; the senders another
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"http=127\.0\.0\.1:(\d+)", line)
    if not match:
        proc.kill()
        raise SystemExit(f"the sidecar did not start: {line!r}")
    base = f"http://127.0.0.1:{match.group(1)}"
    # The sidecar loads its store writer after it binds (at the first export, or after 5 s):
    # measure the steady state, not that one-off import.
    deadline = time.monotonic() + 120
    while httpx.get(f"{base}/healthz").json().get("shipping") == "starting":
        if time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("the sidecar's store writer did not open")
        time.sleep(0.1)
    try:
        yield proc, f"{base}/v1/traces"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


def bench_http(bodies: list[bytes], spans: int, seconds: float, senders: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        store = f"sqlite:///{tmp}/store.db"
        migrate.upgrade(create_store_engine(store))
        args = ("--store", store, "--spool-dir", f"{tmp}/spool", "--gpu-source", "none",
                "--window", "3600", "--spool-max-bytes", str(8 << 30))  # fmt: skip
        with sidecar(*args) as (_, url):
            accepted = [0] * senders
            deadline = time.perf_counter() + seconds

            def send(k: int) -> None:
                with httpx.Client(timeout=30) as client:
                    i = k
                    while time.perf_counter() < deadline:
                        response = client.post(
                            url, content=bodies[i % len(bodies)], headers=PROTOBUF
                        )
                        if response.status_code == 200:
                            accepted[k] += spans
                        i += senders

            started = time.perf_counter()
            threads = [threading.Thread(target=send, args=(k,)) for k in range(senders)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return sum(accepted) / (time.perf_counter() - started)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    match = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(match.group(1)) / 1024 if match else float("nan")


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


def bench_steady(admin_url: str, rate: int, export_spans: int, seconds: float) -> dict[str, float]:
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    name = f"infersight_bench_{uuid.uuid4().hex[:10]}"
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    engine = create_store_engine(url)
    migrate.upgrade(engine)
    servers, scrape_url, dcgm_url = serve_metrics()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            args = ("--store", url, "--spool-dir", f"{tmp}/spool", "--scrape", scrape_url,
                    "--gpu-source", f"dcgm:{dcgm_url}", "--gpu-interval", "2")  # fmt: skip
            with sidecar(*args) as (proc, endpoint):
                return _steady(proc.pid, endpoint, engine, rate, export_spans, seconds)
    finally:
        for server in servers:
            server.shutdown()  # type: ignore[attr-defined]
        engine.dispose()
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _steady(
    pid: int, url: str, engine, rate: int, export_spans: int, seconds: float
) -> dict[str, float]:
    acked: dict[str, float] = {}
    visible: dict[str, float] = {}
    lock = threading.Lock()
    stop = threading.Event()

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

    stop_at = float("inf")
    poller = threading.Thread(target=poll)
    poller.start()
    interval = export_spans / rate
    rss: list[float] = []
    with httpx.Client(timeout=30) as client:
        warmup_end = time.perf_counter() + 3
        next_at = time.perf_counter()
        cpu_start = wall_start = None
        end = warmup_end + seconds
        while time.perf_counter() < end:
            body, ids = export(export_spans, time.time_ns())
            response = client.post(url, content=body, headers=PROTOBUF)
            now = time.perf_counter()
            if response.status_code == 200:
                with lock:
                    acked.update(dict.fromkeys(ids, now))
            if cpu_start is None and now >= warmup_end:
                cpu_start, wall_start = cpu_seconds(pid), now
            if cpu_start is not None:
                rss.append(rss_mb(pid))
            next_at += interval
            time.sleep(max(0.0, next_at - time.perf_counter()))
        cpu_share = (cpu_seconds(pid) - cpu_start) / (time.perf_counter() - wall_start)
    stop_at = time.perf_counter()
    stop.set()
    poller.join()
    latencies = sorted(visible[t] - acked[t] for t in visible)
    missing = len(acked) - len(visible)
    return {
        "cpu_share": cpu_share,
        "rss_mb": max(rss),
        "acked": len(acked),
        "missing": missing,
        "p50": statistics.median(latencies),
        "p99": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
    }


def line(label: str, value: str, ratio: float | None = None) -> None:
    suffix = "" if ratio is None else f"  ({ratio:.1%} of the reference)"
    print(f"  {label:<50} {value:>16}{suffix}")


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=500, help="spans per export (throughput)")
    parser.add_argument("--payloads", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0, help="end-to-end throughput run")
    parser.add_argument("--senders", type=int, default=4)
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
    parser.add_argument(
        "--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    )
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    pin(1)
    bodies = payloads(args.payloads, args.spans)
    results: dict[str, float] = {}
    print(
        f"collector benchmark: {os.cpu_count()} CPUs, {args.spans} spans per export, "
        f"HTTP parser {HTTP_IMPL}"
    )
    results["decode"] = bench_decode(bodies, args.spans, args.repeats)
    line("reference: bare protobuf decode", f"{results['decode']:,.0f} spans/s")
    results["pipeline"], results["pipeline_cpu"] = bench_pipeline(bodies, args.spans, args.repeats)
    ratio = results["pipeline"] / results["decode"]
    line("in-process decode+map+spool, 1 thread", f"{results['pipeline']:,.0f} spans/s", ratio)
    ratio = results["pipeline_cpu"] / results["decode"]
    line("  the same, per CPU second", f"{results['pipeline_cpu']:,.0f} spans/s", ratio)
    results["http"] = bench_http(bodies, args.spans, args.seconds, args.senders)
    ratio = results["http"] / results["decode"]
    line("end to end OTLP/HTTP → spool, 1 core", f"{results['http']:,.0f} spans/s", ratio)
    print("    (target ≥ 20,000 spans/s)")
    if not args.no_postgres:
        for export_spans in (int(n) for n in args.export_spans.split(",")):
            steady = bench_steady(args.postgres, args.rate, export_spans, args.steady_seconds)
            results.update({f"steady{export_spans}_{k}": v for k, v in steady.items()})
            shape = " (the OTel SDK's default batching)" if export_spans == SDK_BATCH else ""
            print(
                f"  at {args.rate} req/s, {export_spans} spans per export{shape}, scrape + GPU on:"
            )
            line("  CPU share of one core (target < 2 %)", f"{steady['cpu_share']:.2%}")
            line("  RSS, peak (target < 100 MB)", f"{steady['rss_mb']:.1f} MB")
            line("  ack → visible in PostgreSQL, P50", f"{steady['p50']:.3f} s")
            line("  ack → visible in PostgreSQL, P99 (target < 5 s)", f"{steady['p99']:.3f} s")
            acked = f"{steady['acked']:.0f} / {steady['missing']:.0f}"
            line("  spans acknowledged / not seen in the store", acked)
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
