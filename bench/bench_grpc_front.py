"""What the gRPC receiver's own accept loop costs an export (issue 32).

The OTLP/gRPC receiver's public port is ``collector.grpc_front``: an asyncio relay in front of
gRPC's loopback port, so that silent sockets cannot take its connections. This measures one
export's round trip (a real gRPC client on a kept channel, vLLM spans, spooled and fsynced as
in production) through the front and straight to gRPC's own port, in interleaved rounds
(ABBA), and prints each round's mean per export and the ratio front / direct within the round,
with the median and spread over rounds.

    .venv/bin/python bench/bench_grpc_front.py --exports 200 --spans 50 --rounds 6
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import grpc
from bench_collector import payloads
from harness.interleave import add_round_arguments, interleave, ratio_spread

from infersight.collector.assembly import Reassembly
from infersight.collector.grpc_receiver import GrpcServer
from infersight.collector.ingest import Ingestor
from infersight.collector.mapping import MappingContext
from infersight.collector.metrics import CollectorMetrics
from infersight.collector.otlp import Limits
from infersight.collector.spool import Spool, SpoolConfig

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exports", type=int, default=200, help="exports per case per round")
    parser.add_argument("--spans", type=int, default=50, help="spans per export")
    add_round_arguments(parser, rounds=6)
    args = parser.parse_args()
    bodies = payloads(args.exports, args.spans)
    with tempfile.TemporaryDirectory() as tmp:
        spool = Spool(SpoolConfig(Path(tmp) / "spool"))
        ingestor = Ingestor(
            spool, MappingContext("bench", model=""), CollectorMetrics(), Limits(), Reassembly(0)
        )
        server = GrpcServer(ingestor, "127.0.0.1", 0).start()
        channels = {
            "direct": grpc.insecure_channel(f"127.0.0.1:{server.upstream_port}"),
            "front": grpc.insecure_channel(f"127.0.0.1:{server.port}"),
        }
        calls = {name: channel.unary_unary(EXPORT) for name, channel in channels.items()}
        for call in calls.values():  # connect and warm up
            call(bodies[0], timeout=60)

        def case(name: str) -> float:
            started = time.perf_counter()
            for body in bodies:
                calls[name](body, timeout=60)
            return (time.perf_counter() - started) / len(bodies) * 1000

        def show(number: int, order: list[str], results: dict[str, float]) -> None:
            ratio = results["front"] / results["direct"]
            print(
                f"round {number}: direct {results['direct']:.3f} ms/export, "
                f"front {results['front']:.3f} ms/export, front/direct {ratio:.3f}"
                f"  ({' '.join(order)})"
            )

        try:
            runs = interleave(
                {"direct": lambda: case("direct"), "front": lambda: case("front")},
                args.rounds,
                order=args.order,
                on_round=lambda n, order, results: show(n + 1, order, results),
            )
        finally:
            for channel in channels.values():
                channel.close()
            server.stop()
            spool.close()
    spread = ratio_spread(runs["front"], runs["direct"])
    extra = [f - d for f, d in zip(runs["front"], runs["direct"], strict=True)]
    print(
        f"{args.exports} exports of {args.spans} spans per case per round: "
        f"front/direct {spread.text('×', '.3f')}; "
        f"added per export median {statistics.median(extra):+.3f} ms "
        f"({min(extra):+.3f} to {max(extra):+.3f})"
    )


if __name__ == "__main__":
    main()
