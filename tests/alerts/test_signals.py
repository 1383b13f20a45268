"""``storage.signals`` on a real store: per-instance aggregates of requests, server and GPU
samples over a window, and the stored diagnoses of incidents."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from infersight.core.errors import NotFound
from infersight.core.query import Selector
from infersight.core.samples import GpuSample, ServerSample
from infersight.core.signals import GPU, REQUESTS, SERVER, STAGES
from infersight.core.window import Window
from infersight.storage import signals
from infersight.storage.writer import open_writer
from tests.conftest import Store
from tests.factories import make_records

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
WINDOW = Window(T0, T0 + timedelta(minutes=10))


def _samples(store: Store) -> None:
    writer = open_writer(store.engine)
    server = []
    gpus = []
    for i in range(10):
        ts = T0 + timedelta(minutes=i)
        # The preemption counter restarts (server restart) after the fifth scrape.
        preempted = float(i * 3) if i < 5 else float((i - 5) * 2)
        server.append(
            ServerSample(ts, "gpu-0", requests_running=4.0, requests_waiting=float(i),
                         kv_cache_usage=0.5, preemptions_total=preempted)
        )  # fmt: skip
        for index in (0, 1):
            reasons = ("sw_thermal_slowdown",) if i >= 5 and index == 0 else ()
            busy = 0.0 if i == 0 else 0.8
            gpus.append(
                GpuSample(ts, "gpu-0", index, util_gpu=busy, sm_clock_mhz=1000.0 if busy else 300.0,
                          throttle_reasons=reasons if busy else ("gpu_idle",),
                          ecc_sbe_total=float(i * index), temperature_c=60.0, power_w=300.0)
            )  # fmt: skip
    writer.write_server_samples(server)
    writer.write_gpu_samples(gpus)


def test_window_signals_aggregate_each_instance(store: Store) -> None:
    rng = np.random.default_rng(5)
    records = make_records(rng, T0, 400, span=timedelta(minutes=10), instances=("gpu-0", "gpu-1"),
                           error_rate=0.0)  # fmt: skip
    open_writer(store.engine).write_requests(records)
    _samples(store)
    got = signals.window_signals(store.engine, WINDOW).by_instance()
    assert sorted(got) == ["gpu-0", "gpu-1"]
    mine = [r for r in records if r.instance == "gpu-0"]
    zero = got["gpu-0"]
    assert zero.get("requests") == len(mine)
    assert zero.get("request_rate") == pytest.approx(len(mine) / 600)
    ttft = [r.ttft_s for r in mine if r.ttft_s is not None]
    assert zero.get("ttft_p90") == pytest.approx(float(np.quantile(ttft, 0.9)))
    assert zero.get("requests_waiting") == pytest.approx(4.5)
    # 0→12 before the restart, then 0→8 after it: 20 preemptions between the readings at
    # 0 and 9 minutes (a rate is over the time its readings span, not the window's length).
    assert zero.get("preemptions_per_s") == pytest.approx(20 / 540)
    assert zero.get("sm_clock_mhz") == pytest.approx(1000.0)  # idle samples left out
    # The readings at the window's start describe the minute before it; of the other nine
    # per board, GPU 0's last five are throttled.
    assert zero.get("throttled_share") == pytest.approx(5 / 18)
    assert zero.get("util_gpu") == pytest.approx(0.8)  # the idle reading at T0 is before
    assert zero.get("ecc_sbe_per_s") == pytest.approx(9 / 540)  # GPU 1's counter only
    assert got["gpu-1"].get("util_gpu") is None  # no GPU samples for it


def test_each_instance_says_which_signal_families_the_store_had(store: Store) -> None:
    # gpu-0: stage timings, scrapes and GPU samples; gpu-1: requests only, no stage spans
    # (an engine that emits just the request span, a sidecar with --gpu-source none and no
    # /metrics to scrape).
    rng = np.random.default_rng(10)
    records = make_records(rng, T0, 400, span=timedelta(minutes=10), instances=("gpu-0", "gpu-1"),
                           error_rate=0.0)  # fmt: skip
    bare = [
        dataclasses.replace(r, queue_s=None, prefill_s=None, decode_s=None, preprocess_s=None)
        if r.instance == "gpu-1"
        else r
        for r in records
    ]
    open_writer(store.engine).write_requests(bare)
    _samples(store)
    got = signals.window_signals(store.engine, WINDOW).by_instance()
    full, partial = got["gpu-0"], got["gpu-1"]
    assert full.available == {REQUESTS, STAGES, SERVER, GPU}
    assert partial.available == {REQUESTS}
    # Absent, not zero: a missing family has no value at all.
    for name in ("queue_p90", "preprocess_mean", "decode_per_token_mean", "requests_waiting",
                 "kv_cache_usage", "util_gpu", "throttled_share", "xid_samples"):  # fmt: skip
        assert partial.get(name) is None, name
    assert full.get("throttled_share") is not None
    # The engine's decode time per output token after the first, averaged over requests.
    mine = [r for r in records if r.instance == "gpu-0" and r.output_tokens > 1]
    per_token = [r.decode_s / (r.output_tokens - 1) for r in mine]
    assert full.get("decode_per_token_mean") == pytest.approx(float(np.mean(per_token)))


def test_a_selector_narrows_the_instances(store: Store) -> None:
    rng = np.random.default_rng(6)
    records = make_records(rng, T0, 100, span=timedelta(minutes=10), instances=("gpu-0", "gpu-1"))
    open_writer(store.engine).write_requests(records)
    only = signals.window_signals(store.engine, WINDOW, Selector(instance="gpu-1"))
    assert [s.instance for s in only.instances] == ["gpu-1"]
    assert signals.window_signals(store.engine, WINDOW, Selector(model="none")).instances == ()


def test_diagnoses_of_unknown_incidents_are_refused(store: Store) -> None:
    with pytest.raises(NotFound):
        signals.save_diagnosis(store.engine, 999, {}, {"cause": "unknown"}, T0)
    with pytest.raises(NotFound):
        signals.acknowledge(store.engine, 999, "sre", T0)
    assert signals.notes(store.engine, [999]) == {}


def test_error_types_count_failures_per_instance_and_fold_the_rare_ones(store: Store) -> None:
    rng = np.random.default_rng(7)
    records = make_records(rng, T0, 200, span=timedelta(minutes=10), instances=("gpu-0", "gpu-1"),
                           error_rate=0.0)  # fmt: skip
    kinds = ["a", "a", "a", "b", "b", "c", "d", "e", "f", "g", ""]
    failed = [
        dataclasses.replace(r, status="error", error_type=kinds[i], finish_reason="")
        for i, r in enumerate(x for x in records if x.instance == "gpu-0")
        if i < len(kinds)
    ]
    keep = {r.span_id for r in failed}
    open_writer(store.engine).write_requests([r for r in records if r.span_id not in keep])
    open_writer(store.engine).write_requests(failed)
    got = signals.error_types(store.engine, WINDOW)
    assert list(got) == ["gpu-0"]
    # The five most frequent (ties by name, "" first), then the rest as "other".
    assert got["gpu-0"] == {"a": 3, "b": 2, "": 1, "c": 1, "d": 1, "other": 3}
    assert signals.error_types(store.engine, WINDOW, Selector(instance="gpu-1")) == {}


def _board(store: Store, readings: list[tuple[int, float, float]]) -> None:
    """Readings of gpu-0's one board at ``T0 + s`` seconds: (s, utilisation, ECC count), with
    requests over five minutes so that the instance is in every window."""
    rng = np.random.default_rng(11)
    open_writer(store.engine).write_requests(
        make_records(rng, T0, 300, span=timedelta(minutes=5), instances=("gpu-0",))
    )
    open_writer(store.engine).write_gpu_samples(
        [
            GpuSample(
                T0 + timedelta(seconds=s),
                "gpu-0",
                0,
                util_gpu=util,
                sm_clock_mhz=1500.0,
                ecc_sbe_total=ecc,
            )
            for s, util, ecc in readings
        ]
    )


def test_a_counter_rate_is_anchored_by_the_reading_before_the_window(store: Store) -> None:
    # A failing board at 30 s sampling, correctable errors from 60 s on (2/s). The page's window
    # of 50 s holds one reading: its rate is the increase since the reading before the window.
    _board(store, [(0, 0.9, 0.0), (30, 0.9, 0.0), (60, 0.9, 0.0), (90, 0.9, 60.0)])
    window = Window(T0 + timedelta(seconds=70), T0 + timedelta(seconds=120))
    [got] = signals.window_signals(store.engine, window).instances
    assert got.get("ecc_sbe_per_s") == pytest.approx(60 / 30)


def test_one_counter_reading_has_no_rate(store: Store) -> None:
    # Without a reading before the window, one reading of a counter says nothing about its
    # rate: absent (the diagnosis reports it missing), never 0 ("no errors").
    _board(store, [(90, 0.9, 60.0)])
    scrape = ServerSample(T0 + timedelta(seconds=90), "gpu-0", requests_waiting=2.0,
                          preemptions_total=40.0)  # fmt: skip
    open_writer(store.engine).write_server_samples([scrape])
    window = Window(T0 + timedelta(seconds=70), T0 + timedelta(seconds=120))
    [got] = signals.window_signals(store.engine, window).instances
    assert got.has(GPU)
    assert got.get("util_gpu") == pytest.approx(0.9)
    assert got.get("ecc_sbe_per_s") is None
    assert got.has(SERVER)
    assert got.get("requests_waiting") == pytest.approx(2.0)
    assert got.get("preemptions_per_s") is None


def test_a_gpu_reading_describes_the_time_before_it(store: Store) -> None:
    # 0.6 busy until 60 s, 0.3 after: the reading at 60 s (the window's start) describes
    # (30 s, 60 s], the one at 90 s (60 s, 90 s].
    _board(store, [(0, 0.6, 0.0), (30, 0.6, 0.0), (60, 0.6, 0.0), (90, 0.3, 0.0), (120, 0.3, 0.0)])
    aligned = Window(T0 + timedelta(seconds=60), T0 + timedelta(seconds=120))
    [got] = signals.window_signals(store.engine, aligned).instances
    assert got.get("util_gpu") == pytest.approx(0.3)
    # A window from 40 s: the reading at 60 s weighs 20 s of it, those at 90 s and 120 s 30 s.
    late = Window(T0 + timedelta(seconds=40), T0 + timedelta(seconds=120))
    [got] = signals.window_signals(store.engine, late).instances
    assert got.get("util_gpu") == pytest.approx((20 * 0.6 + 30 * 0.3 + 30 * 0.3) / 80)
    # Readings before a window and at its start describe none of it: no GPU samples there.
    after = Window(T0 + timedelta(seconds=120), T0 + timedelta(seconds=180))
    [got] = signals.window_signals(store.engine, after).instances
    assert not got.has(GPU)
    assert got.get("util_gpu") is None
