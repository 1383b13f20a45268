"""Data-parallel servers: one instance figure per scrape (counts summed, ratios averaged,
the hottest engine's KV usage kept) and one row per engine, from real ``/metrics`` bodies
served over HTTP, scraped by a running sidecar into SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from sqlalchemy import select

from infersight.collector.codec import decode_server, encode_sample
from infersight.collector.scrape.scraper import Scraper
from infersight.core.errors import InvalidRecord
from infersight.core.samples import MAX_ENGINES, EngineSample, ServerSample
from infersight.storage.tables import server_engine_samples, server_samples
from infersight.storage.writer import open_writer
from tests.collector.engine_expositions import (
    SGLANG_FOUR_RANKS,
    SGLANG_TWO_RANKS,
    VLLM_ENGINES,
    VLLM_MODEL,
    VLLM_TWO_ENGINES,
    Rank,
    sglang_body,
    vllm_body,
)
from tests.collector.harness import running_sidecar, sidecar_config, wait_until

TS = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


class Body:
    """What the served ``/metrics`` answers (changeable while serving)."""

    def __init__(self, text: str) -> None:
        self.text = text


@pytest.fixture
def serve() -> Iterator[Callable[[str], tuple[str, Body]]]:
    servers: list[tuple[ThreadingHTTPServer, threading.Thread]] = []

    def start(text: str) -> tuple[str, Body]:
        body = Body(text)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                data = body.text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        servers.append((server, thread))
        return f"http://127.0.0.1:{server.server_port}/metrics", body

    yield start
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def scrape_one(url: str) -> ServerSample:
    (sample,) = Scraper(url, "node-1", timeout_s=5, now=lambda: TS).sample()
    assert isinstance(sample, ServerSample)
    return sample


# -- the scraper -----------------------------------------------------------------------------


def test_two_vllm_engines_average_their_kv_usage_and_sum_their_counts(serve) -> None:
    # The scrape before: each engine had answered half its prefix-cache queries and hits.
    halved = [
        dataclasses.replace(e, prefix_queries=e.prefix_queries / 2, prefix_hits=e.prefix_hits / 2)
        for e in VLLM_ENGINES
    ]
    url, body = serve(vllm_body(halved))
    scraper = Scraper(url, "node-1", timeout_s=5, now=lambda: TS)
    (before,) = scraper.sample()
    assert isinstance(before, ServerSample)
    assert before.prefix_cache_hit_ratio is None  # one scrape is no interval
    body.text = VLLM_TWO_ENGINES
    (s,) = scraper.sample()
    assert isinstance(s, ServerSample)
    assert (s.engine, s.model) == ("vllm", VLLM_MODEL)
    assert s.kv_cache_usage == pytest.approx((0.41 + 0.55) / 2)  # not 0.96, their sum
    assert s.kv_cache_usage_max == pytest.approx(0.55)
    assert (s.requests_running, s.requests_waiting) == (12, 3)
    assert (s.prompt_tokens_total, s.generation_tokens_total) == (25000, 7000)
    assert (s.requests_total, s.request_errors_total, s.preemptions_total) == (200, 3, 7)
    # Over the interval engine 0 hit 100 of 500 queries and engine 1 600 of 1,500: pooled,
    # 700 / 2,000 — not the engines' mean (0.3), nor either cumulative ratio.
    assert s.prefix_cache_hit_ratio == pytest.approx(700 / 2000)
    e0, e1 = s.per_engine
    assert (e0.rank, e1.rank) == ("0", "1")
    assert (e0.kv_cache_usage, e1.kv_cache_usage) == (pytest.approx(0.41), pytest.approx(0.55))
    assert (e0.requests_running, e1.requests_running) == (5, 7)
    assert (e0.requests_total, e0.request_errors_total) == (100, 2)
    assert e1.prefix_cache_hit_ratio == pytest.approx(0.4)


def test_one_vllm_engine_keeps_no_engine_rows(serve) -> None:
    one = "\n".join(line for line in VLLM_TWO_ENGINES.splitlines() if 'engine="1"' not in line)
    url, _ = serve(one + "\n")
    s = scrape_one(url)
    assert s.per_engine == ()
    assert s.kv_cache_usage == s.kv_cache_usage_max == pytest.approx(0.41)
    assert s.requests_running == 5


def test_two_sglang_dp_ranks_average_token_usage(serve) -> None:
    url, _ = serve(sglang_body(SGLANG_TWO_RANKS))
    s = scrape_one(url)
    assert s.engine == "sglang"
    assert s.kv_cache_usage == pytest.approx(0.33)  # not 0.66, their sum
    assert s.kv_cache_usage_max == pytest.approx(0.35)
    assert s.prefix_cache_hit_ratio == pytest.approx(0.25)
    assert (s.requests_running, s.requests_waiting) == (14, 4)
    # The tokenizer's counters carry no dp_rank: the instance's, not any engine's.
    assert (s.prompt_tokens_total, s.requests_total, s.request_errors_total) == (50000, 400, 3)
    assert [e.rank for e in s.per_engine] == ["0", "1"]
    assert [e.kv_cache_usage for e in s.per_engine] == [
        pytest.approx(0.31),
        pytest.approx(0.35),
    ]
    assert all(e.prompt_tokens_total is None for e in s.per_engine)


def test_four_sglang_dp_ranks_with_tp_replicas_show_one_hot_engine_without_clamping(
    serve,
) -> None:
    url, _ = serve(sglang_body(SGLANG_FOUR_RANKS, tp_per_rank=2))
    s = scrape_one(url)
    usages = [r.token_usage for r in SGLANG_FOUR_RANKS]
    assert s.kv_cache_usage == pytest.approx(sum(usages) / 4)  # 0.47, not clamped to 1.0
    assert s.kv_cache_usage_max == pytest.approx(0.97)
    # Each rank's figures are written by two tensor-parallel workers: counted once.
    assert s.requests_running == sum(r.running for r in SGLANG_FOUR_RANKS)
    assert s.requests_waiting == sum(r.queued for r in SGLANG_FOUR_RANKS)
    assert [e.rank for e in s.per_engine] == ["0", "1", "2", "3"]
    assert [e.requests_waiting for e in s.per_engine] == [12, 0, 1, 0]


def test_ranks_sort_as_numbers(serve) -> None:
    ranks = [Rank(i, 0, 0.1 + i / 100, 0.0) for i in range(12)]
    url, _ = serve(sglang_body(ranks))
    assert [e.rank for e in scrape_one(url).per_engine] == [str(i) for i in range(12)]


def test_more_engines_than_kept_keep_the_instance_figures_only(serve) -> None:
    ranks = [Rank(1, 0, 0.5, 0.0)] * (MAX_ENGINES + 1)
    url, _ = serve(sglang_body(ranks))
    s = scrape_one(url)
    assert s.per_engine == ()
    assert s.kv_cache_usage == pytest.approx(0.5)
    assert s.requests_running == MAX_ENGINES + 1


# -- the values ------------------------------------------------------------------------------


def test_engine_samples_refuse_bad_ranks_and_repeated_ranks() -> None:
    with pytest.raises(InvalidRecord):
        EngineSample(rank="")
    with pytest.raises(InvalidRecord):
        EngineSample(rank="x" * 65)
    with pytest.raises(InvalidRecord):
        EngineSample(rank="0", kv_cache_usage=1.5)
    with pytest.raises(InvalidRecord):
        ServerSample(ts=TS, instance="i", per_engine=(EngineSample("0"), EngineSample("0")))


def test_per_engine_samples_survive_the_spool_and_old_payloads_decode() -> None:
    sample = ServerSample(
        ts=TS,
        instance="i",
        engine="vllm",
        kv_cache_usage=0.48,
        kv_cache_usage_max=0.55,
        per_engine=(EngineSample("0", kv_cache_usage=0.41), EngineSample("1", kv_cache_usage=0.55)),
    )
    assert decode_server(encode_sample(sample)) == sample
    old = b'{"ts":1764579600.0,"instance":"i","engine":"vllm","model":"","kv_cache_usage":0.4}'
    decoded = decode_server(old)
    assert (decoded.per_engine, decoded.kv_cache_usage_max) == ((), None)


# -- through a sidecar into the store --------------------------------------------------------


def rows(store, table) -> list:
    with store.engine.connect() as c:
        return list(c.execute(select(table).order_by(*table.primary_key.columns)))


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("body", "engines", "mean", "hottest"),
    [
        (VLLM_TWO_ENGINES, [("0", 0.41), ("1", 0.55)], 0.48, 0.55),
        (sglang_body(SGLANG_TWO_RANKS), [("0", 0.31), ("1", 0.35)], 0.33, 0.35),
        (
            sglang_body(SGLANG_FOUR_RANKS, tp_per_rank=2),
            [(str(i), r.token_usage) for i, r in enumerate(SGLANG_FOUR_RANKS)],
            0.47,
            0.97,
        ),
    ],
    ids=["vllm 2 engines", "sglang 2 dp ranks", "sglang 4 dp ranks"],
)
def test_a_sidecar_stores_the_instance_figures_and_each_engine(
    store, tmp_path: Path, serve, body: str, engines: list, mean: float, hottest: float
) -> None:
    url, _ = serve(body)
    scraper = Scraper(url, "dp-0", interval_s=0.2)
    config = sidecar_config("dp-0", tmp_path / "spool", sample_ship_interval_s=0.2)
    with running_sidecar(open_writer(store.engine), config, [scraper], scraper.current_model):
        assert wait_until(lambda: len(rows(store, server_samples)) >= 2)
    instance_rows = rows(store, server_samples)
    engine_rows = rows(store, server_engine_samples)
    assert {r.instance for r in instance_rows} == {"dp-0"}
    for r in instance_rows:
        assert r.kv_cache_usage == pytest.approx(mean)
        assert r.kv_cache_usage_max == pytest.approx(hottest)
    # Every stored scrape has exactly its engines' rows, at its time.
    assert len(engine_rows) == len(instance_rows) * len(engines)
    by_ts: dict[datetime, list] = {}
    for r in engine_rows:
        by_ts.setdefault(r.ts, []).append(r)
    assert set(by_ts) == {r.ts for r in instance_rows}
    for found in by_ts.values():
        assert [(r.rank, r.kv_cache_usage) for r in found] == [
            (rank, pytest.approx(kv)) for rank, kv in engines
        ]


def test_a_replayed_server_sample_stores_its_engines_once(store) -> None:
    sample = ServerSample(
        ts=TS,
        instance="dp-1",
        engine="sglang",
        kv_cache_usage=0.33,
        kv_cache_usage_max=0.35,
        per_engine=(EngineSample("0", kv_cache_usage=0.31), EngineSample("1", kv_cache_usage=0.35)),
    )
    writer = open_writer(store.engine)
    assert writer.write_server_samples([sample]) == 1
    assert writer.write_server_samples([sample, sample]) == 0
    assert len(rows(store, server_samples)) == 1
    assert [(r.rank, r.kv_cache_usage) for r in rows(store, server_engine_samples)] == [
        ("0", pytest.approx(0.31)),
        ("1", pytest.approx(0.35)),
    ]
