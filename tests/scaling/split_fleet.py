"""A disaggregated (prefill/decode) model in a store, as the recommender reads it: users'
requests on the decode instances, their prefill legs on the prefill instances (same trace),
fresh scrapes and GPU samples of each instance, and one busy minute of each pool two days ago
(what one instance of the pool sustains). Shared by the pool tests and the page screenshot."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine

from infersight.core.records import Engine as ServerEngine
from infersight.core.records import RequestRecord, Role
from infersight.core.samples import GpuSample, ServerSample
from infersight.core.window import Resolution
from infersight.storage.writer import open_writer

MODEL = "llama-70b-pd"
#: Requests a minute over the last five minutes (1 req/s).
PER_MINUTE = 60
#: The busy minute two days ago: this many requests on one instance of each pool.
BUSY = 120


@dataclass(frozen=True)
class Fleet:
    prefill: tuple[str, ...]
    decode: tuple[str, ...]


def _pair(
    k: int, start: datetime, prefill: str, decode: str, leg_queue_s: float
) -> list[RequestRecord]:
    trace = f"{k + 1:032x}"
    leg = RequestRecord(
        trace,
        "a" * 16,
        start + timedelta(milliseconds=3),
        prefill,
        engine=ServerEngine.VLLM,
        model=MODEL,
        ttft_s=0.15,
        e2e_s=0.15,
        queue_s=leg_queue_s,
        prefill_s=0.14,
        input_tokens=2000,
        output_tokens=1,
        role=Role.PREFILL,
    )
    user = RequestRecord(
        trace,
        "b" * 16,
        start,
        decode,
        engine=ServerEngine.VLLM,
        model=MODEL,
        ttft_s=0.3,
        tpot_s=0.01,
        e2e_s=3.0,
        prefill_s=0.15,
        kv_transfer_s=0.03,
        input_tokens=2000,
        output_tokens=300,
        role=Role.DECODE,
        peer=prefill,
    )
    return [leg, user]


def seed_split(
    engine: Engine,
    now: datetime,
    *,
    prefill: int = 2,
    decode: int = 3,
    prefill_waiting: float = 0.0,
    decode_waiting: float = 0.0,
    decode_deferred: float | None = None,
    scrapes: bool = True,
    minutes: int = 5,
) -> Fleet:
    """Seed ``MODEL`` served by ``prefill`` prefill and ``decode`` decode instances at ``now``,
    with ``PER_MINUTE`` requests in each of the last ``minutes`` minutes."""
    fleet = Fleet(
        tuple(f"pd-prefill-{i}" for i in range(prefill)),
        tuple(f"pd-decode-{i}" for i in range(decode)),
    )
    minute = Resolution.MINUTE.floor(now)
    records: list[RequestRecord] = []
    k = 0
    for m in range(minutes):
        begin = minute - timedelta(minutes=minutes - m)
        for j in range(PER_MINUTE):
            start = begin + timedelta(seconds=j)
            p, d = fleet.prefill[k % prefill], fleet.decode[k % decode]
            records += _pair(k, start, p, d, 0.01)
            k += 1
    busy = minute - timedelta(days=2)
    for j in range(BUSY):  # within the queue bound: counts toward the prefill capacity
        records += _pair(
            k, busy + timedelta(seconds=j * 0.5), fleet.prefill[0], fleet.decode[0], 0.01
        )
        k += 1
    slow = minute - timedelta(days=3)
    for j in range(2 * BUSY):  # legs queued far past any bound: not a capacity
        records += _pair(
            k, slow + timedelta(seconds=j * 0.25), fleet.prefill[0], fleet.decode[0], 0.5
        )
        k += 1
    writer = open_writer(engine)
    writer.write_requests(records)
    if scrapes:
        writer.write_server_samples(
            [
                ServerSample(
                    now - timedelta(seconds=10),
                    name,
                    "vllm",
                    MODEL,
                    requests_waiting=waiting,
                    requests_running=4.0,
                    kv_cache_usage=kv,
                    requests_deferred=deferred,
                )
                for names, waiting, kv, deferred in (
                    (fleet.prefill, prefill_waiting, 0.1, None),
                    (fleet.decode, decode_waiting, 0.6, decode_deferred),
                )
                for name in names
            ]
        )
    writer.write_gpu_samples(
        [
            GpuSample(now - timedelta(seconds=s), name, 0, util_gpu=util)
            for s in (60, 30)
            for names, util in ((fleet.prefill, 0.9), (fleet.decode, 0.4))
            for name in names
        ]
    )
    return fleet
