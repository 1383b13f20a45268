"""Shared pieces of the collector tests."""

from __future__ import annotations

from dataclasses import dataclass

from collector.codec import Kind, decode_record
from collector.grpc_receiver import GrpcServer
from collector.http_receiver import HttpServer
from collector.metrics import CollectorMetrics
from collector.spool import Spool
from core.records import RequestRecord


@dataclass
class Receiver:
    spool: Spool
    metrics: CollectorMetrics
    http: HttpServer
    grpc: GrpcServer

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.port}"

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.grpc.port}"

    def records(self) -> list[RequestRecord]:
        stored = self.spool.ready(now=1e12, kinds=[Kind.RECORD], limit=10**6)
        return [decode_record(s.payload) for s in stored]
