"""Simulated requests per second of wall time in virtual-time mode, with and without OTLP export.

Runs the same stretch of a shipped scenario twice: once into a counting sink (the engine
alone), once also exporting every request as spans through the real opentelemetry-sdk OTLP
exporter to an in-process receiver on a free loopback port (which decodes every request, so
the receiver's CPU is in the figure too), over the same stretch of the scenario, the two
interleaved in ``--rounds`` ABBA rounds. Prints each round's rates and ratio, their medians and
the ratio's spread (min–max), and first the time a whole day of the scenario takes without
export.

    .venv/bin/python bench/bench_simulator.py [--scenario quiet-day] [--hours 24]
        [--stretch-at 12] [--stretch-hours 0.5] [--protocol http|grpc] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
import yaml
from harness.interleave import add_round_arguments, interleave, ratio_spread
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from infersight.simulator.fleet import run_scenario
from infersight.simulator.scenario import Scenario
from infersight.simulator.sinks import CountingSink, Sink
from infersight.simulator.sinks.otlp import OtlpSink
from infersight.simulator.specs import SCENARIOS_DIR, load_scenario, scenario_from_data


class _Count:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans = 0

    def add(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        n = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
        with self.lock:
            self.spans += n


@contextmanager
def http_receiver() -> Iterator[tuple[str, _Count]]:
    count = _Count()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            request = trace_service_pb2.ExportTraceServiceRequest()
            request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
            count.add(request)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", count
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def grpc_receiver() -> Iterator[tuple[str, _Count]]:
    count = _Count()

    class Servicer(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            count.add(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"grpc://127.0.0.1:{port}", count
    finally:
        server.stop(grace=None).wait()


def _stretch(name: str, offset_h: float, hours: float) -> Scenario:
    """The scenario's fleet and traffic over ``hours`` starting ``offset_h`` into it, no faults.

    Diurnal cycles are anchored to the time of day, so the stretch sees the load the full
    scenario sees at that hour.
    """
    data = yaml.safe_load((SCENARIOS_DIR / f"{name}.yaml").read_text())
    start = load_scenario(name).start + timedelta(hours=offset_h)
    data["spec"]["start"] = start.isoformat()
    data["spec"]["duration"] = hours * 3600
    data["spec"]["faults"] = []
    return scenario_from_data(data)


def _rate(scenario: Scenario, sinks: list[Sink]) -> tuple[int, float]:
    started = time.perf_counter()
    result = run_scenario(scenario, sinks)
    for sink in sinks:
        sink.close()
    return result.requests, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="quiet-day")
    parser.add_argument("--hours", type=float, default=24.0, help="virtual hours, no export")
    parser.add_argument("--stretch-at", type=float, default=12.0, help="hour of the A/B stretch")
    parser.add_argument("--stretch-hours", type=float, default=0.5, help="A/B stretch length")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    add_round_arguments(parser, rounds=3)
    args = parser.parse_args()

    whole = _stretch(args.scenario, 0.0, args.hours)
    n, wall = _rate(whole, [CountingSink()])
    print(
        f"{args.scenario}: {len(whole.instances)} instances, {args.hours:g} h of virtual time, "
        f"no export: {n:,} requests in {wall:.1f} s wall = {n / wall:,.0f} simulated requests/s"
    )
    stretch = _stretch(args.scenario, args.stretch_at, args.stretch_hours)
    label = f"{args.stretch_hours:g} h from {args.stretch_at:g} h"
    receiver = http_receiver if args.protocol == "http" else grpc_receiver

    def plain() -> float:
        n, wall = _rate(stretch, [CountingSink()])
        return n / wall

    def exported() -> float:
        with receiver() as (endpoint, count):
            otlp = OtlpSink(endpoint, tokenizer_spans=False)
            n, wall = _rate(stretch, [CountingSink(), otlp])
        assert count.spans == n, "the receiver must see every span"
        assert not otlp.failed, f"{otlp.failed} exports failed"
        return n / wall

    def show(r: int, names: list[str], got: dict[str, float]) -> None:
        print(
            f"  round {r + 1}/{args.rounds} [{' '.join(names)}]: no export {got['plain']:,.0f}, "
            f"OTLP/{args.protocol} {got['export']:,.0f} simulated requests/s "
            f"({got['export'] / got['plain']:.3f})"
        )

    print(f"{label}, {args.rounds} rounds, {args.order} order:")
    runs = interleave(
        {"plain": plain, "export": exported}, args.rounds, order=args.order, on_round=show
    )
    ratio = ratio_spread(runs["export"], runs["plain"])
    print(
        f"{label}: no export {statistics.median(runs['plain']):,.0f}, OTLP/{args.protocol} "
        f"{statistics.median(runs['export']):,.0f} simulated requests/s (medians)"
    )
    print(f"ratio with export / without, each round's: {ratio.text('', '.3f')}")


if __name__ == "__main__":
    main()
