"""Fixtures of the collector tests: a running receiver (HTTP + gRPC) over a real spool, and a
server's ``/metrics`` served by ``prometheus_client``'s own HTTP server (``serve``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, start_http_server

from infersight.collector.admission import Admission
from infersight.collector.assembly import Reassembly
from infersight.collector.decoding import DecoderPool
from infersight.collector.grpc_receiver import GrpcLimits, GrpcServer
from infersight.collector.http_receiver import HttpServer, create_app
from infersight.collector.ingest import Ingestor
from infersight.collector.mapping import MappingContext
from infersight.collector.metrics import CollectorMetrics
from infersight.collector.otlp import Limits
from infersight.collector.spool import Spool, SpoolConfig
from tests.collector.harness import Receiver


@pytest.fixture
def make_receiver(tmp_path: Path) -> Iterator[Callable[..., Receiver]]:
    started: list[Receiver] = []
    pools: list[DecoderPool] = []

    def make(
        token: str | None = None,
        limits: Limits | None = None,
        spool_config: dict[str, Any] | None = None,
        model: str = "",
        admission: Admission | None = None,
        decoders: bool = False,
        grpc_limits: GrpcLimits | None = None,
    ) -> Receiver:
        directory = tmp_path / f"spool{len(started)}"
        spool = Spool(SpoolConfig(directory, **(spool_config or {})))
        metrics = CollectorMetrics()
        context, limits, reassembly = (
            MappingContext("test-node", model=model),
            limits or Limits(),
            Reassembly(0.0),
        )
        pool = DecoderPool(limits, context, None, reassembly) if decoders else None
        if pool is not None:
            pools.append(pool)
        ingestor = Ingestor(spool, context, metrics, limits, reassembly, decoder=pool)
        admission = admission or Admission()
        app = create_app(ingestor, token=token, admission=admission)
        http = HttpServer(app, "127.0.0.1", 0).start()
        grpc_server = GrpcServer(
            ingestor, "127.0.0.1", 0, token=token, admission=admission, limits=grpc_limits
        ).start()
        receiver = Receiver(spool, metrics, http, grpc_server, pools[-1] if decoders else None)
        started.append(receiver)
        return receiver

    yield make
    for receiver in started:
        receiver.http.stop()
        receiver.grpc.stop(0)
        receiver.spool.close()
    for pool in pools:
        pool.close()


@pytest.fixture
def receiver(make_receiver: Callable[..., Receiver]) -> Receiver:
    return make_receiver()


@pytest.fixture
def serve() -> Iterator[Callable[[CollectorRegistry], str]]:
    """Serve a registry as an engine's ``/metrics``; answers its URL."""
    servers = []

    def start(registry: CollectorRegistry) -> str:
        server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
        servers.append((server, thread))
        return f"http://127.0.0.1:{server.server_port}/metrics"

    yield start
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
