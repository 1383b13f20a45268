"""``storage.signals`` on a real store: per-instance aggregates of requests, server and GPU
samples over a window, and the stored diagnoses of incidents."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from core.burn import AlertState, Incident, IncidentState, Severity, Transition
from core.errors import NotFound
from core.query import Selector
from core.samples import GpuSample, ServerSample
from core.signals import GPU, REQUESTS, SERVER, STAGES
from core.slo import Sli, SliKind, SloSpec
from core.window import Window
from service.diagnosis import DiagnosisListener, burn_onset, windows_for
from storage import incidents, signals, slo_store
from storage.writer import open_writer
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


def _incident(opened: datetime) -> Incident:
    return Incident(1, "ttft", "*", Severity.PAGE, IncidentState.FIRING, opened, opened)


def test_a_burn_onset_found_to_the_minute_places_the_windows(store: Store) -> None:
    rng = np.random.default_rng(8)
    healthy = make_records(rng, T0, 1200, span=timedelta(minutes=10), error_rate=0.0)
    burning = make_records(rng, T0 + timedelta(minutes=10), 300, span=timedelta(minutes=3),
                           error_rate=0.0)  # fmt: skip
    slow = [dataclasses.replace(r, ttft_s=2.0) if i % 2 else r for i, r in enumerate(burning)]
    open_writer(store.engine).write_requests(healthy + slow)
    spec = SloSpec("ttft", Sli(SliKind.LATENCY, "ttft", 1.0), 0.999, timedelta(days=30))
    opened = T0 + timedelta(minutes=12, seconds=30)
    onset = burn_onset(store.engine, spec, opened)
    assert onset == T0 + timedelta(minutes=10)
    current, reference = windows_for(_incident(opened), opened, timedelta(minutes=5), onset=onset)
    assert current == Window(onset, opened)
    # Five minutes ending five minutes before the opening (earlier than a minute before the
    # onset here).
    assert reference == Window(opened - timedelta(minutes=10), opened - timedelta(minutes=5))
    long_ago = T0 + timedelta(minutes=2)
    _, slow_burn = windows_for(_incident(opened), opened, timedelta(minutes=5), onset=long_ago)
    assert slow_burn == Window(long_ago - timedelta(minutes=6), long_ago - timedelta(minutes=1))
    later = opened + timedelta(minutes=10)
    current, again = windows_for(_incident(opened), later, timedelta(minutes=5), onset=onset)
    assert current == Window(later - timedelta(minutes=5), later)
    assert again == reference  # re-diagnoses keep one reference
    # Without an onset: from a minute before the opening, against the five minutes that end
    # five minutes before it.
    current, reference = windows_for(_incident(opened), opened, timedelta(minutes=5))
    assert current == Window(opened - timedelta(minutes=1), opened)
    assert reference == Window(opened - timedelta(minutes=10), opened - timedelta(minutes=5))


def test_no_step_up_in_the_burn_means_no_onset(store: Store) -> None:
    rng = np.random.default_rng(9)
    open_writer(store.engine).write_requests(
        make_records(rng, T0, 600, span=timedelta(minutes=10), error_rate=0.0)
    )
    spec = SloSpec("ttft", Sli(SliKind.LATENCY, "ttft", 60.0), 0.999, timedelta(days=30))
    assert burn_onset(store.engine, spec, T0 + timedelta(minutes=10)) is None


def test_a_burn_that_begins_late_in_a_minute_is_found_within_it(store: Store) -> None:
    # The demo's surge began 35 s into a minute; an onset floored to the minute put 35 s of
    # healthy traffic into the page's window.
    rng = np.random.default_rng(10)
    onset = T0 + timedelta(minutes=10, seconds=35)
    healthy = make_records(rng, T0, 1270, span=onset - T0, error_rate=0.0)
    burning = make_records(rng, onset, 200, span=timedelta(seconds=60), error_rate=0.0)
    slow = [dataclasses.replace(r, ttft_s=2.0) if i % 2 else r for i, r in enumerate(burning)]
    open_writer(store.engine).write_requests(healthy + slow)
    spec = SloSpec("ttft", Sli(SliKind.LATENCY, "ttft", 1.0), 0.999, timedelta(days=30))
    found = burn_onset(store.engine, spec, onset + timedelta(seconds=40))
    assert found == T0 + timedelta(minutes=10, seconds=30)  # the 10 s slice that holds it


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


TTFT_SLO = SloSpec("ttft", Sli(SliKind.LATENCY, "ttft", 1.0), 0.999, timedelta(days=30))


def _at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def _traffic(
    rng: np.random.Generator,
    start: float,
    end: float,
    per_minute: int,
    slow: Callable[[int, Any], bool],
    ttft_s: float,
) -> list[Any]:
    """Requests from minute ``start`` to ``end``; those ``slow`` picks take ``ttft_s``."""
    rows = make_records(rng, _at(start), int((end - start) * per_minute),
                        span=_at(end) - _at(start), error_rate=0.0)  # fmt: skip
    return [dataclasses.replace(r, ttft_s=ttft_s) if slow(i, r) else r for i, r in enumerate(rows)]


def test_an_incident_opening_after_another_of_its_slo_resolved_is_paged_from_its_own_onset(
    store: Store,
) -> None:
    # The demo's fourth fault: the 70B SLO burned 25 minutes earlier (another incident, since
    # resolved); a two-level fit over the hour before the new opening found that older step,
    # so the page's window held five diluted minutes and named nothing (`unknown`).
    rng = np.random.default_rng(12)
    minutes = _at
    slo_store.put_slo(store.engine, TTFT_SLO, T0)

    def traffic(start: float, end: float, slow_share: float) -> list[Any]:
        every = round(1 / slow_share) if slow_share else 0
        return _traffic(rng, start, end, 120, lambda i, _: bool(every) and i % every == 0, 2.0)

    open_writer(store.engine).write_requests(
        traffic(0, 10, 0) + traffic(10, 14, 1.0) + traffic(14, 30, 0) + traffic(30, 30.75, 0.5)
    )
    with store.engine.begin() as connection:
        first = incidents.apply_step(connection, "ttft", "*",
                                     AlertState(Severity.PAGE, minutes(10.5)),
                                     Transition.OPENED, {"5m": 500.0}, minutes(10.5))  # fmt: skip
        assert first is not None
        incidents.apply_step(connection, "ttft", "*", AlertState(), Transition.RESOLVED,
                             {"5m": 0.0}, minutes(25), current=first)  # fmt: skip
        second = incidents.apply_step(connection, "ttft", "*",
                                      AlertState(Severity.PAGE, minutes(30.75)),
                                      Transition.OPENED, {"5m": 500.0}, minutes(30.75))  # fmt: skip
    assert second is not None
    DiagnosisListener(store.engine).on_incident(second, Transition.OPENED)
    note = signals.notes(store.engine, [second.id])[second.id]
    assert note.diagnosis is not None
    assert note.diagnosis["window"]["start"] == "2026-01-05T09:30:00Z"


def test_an_escalation_by_a_burn_that_came_back_is_told_with_that_burn_s_diagnosis(
    store: Store,
) -> None:
    # A ticket for slow TTFT on gpu-0 recovers; then gpu-1 burns and escalates it to a page.
    # The page must name what burns now (gpu-1), not the headline's instance.
    rng = np.random.default_rng(13)
    minutes = _at
    slo_store.put_slo(store.engine, TTFT_SLO, T0)

    def traffic(start: float, end: float, slow: str | None) -> list[Any]:
        return _traffic(rng, start, end, 240, lambda _, r: r.instance == slow, 3.0)

    open_writer(store.engine).write_requests(
        traffic(0, 10, None) + traffic(10, 13, "gpu-0") + traffic(13, 22, None)
        + traffic(22, 23.5, "gpu-1")
    )  # fmt: skip
    told: list[tuple[Transition, dict[str, Any]]] = []
    listener = DiagnosisListener(store.engine, announce=lambda i, t, s, d: told.append((t, d)))
    with store.engine.begin() as connection:
        incident = incidents.apply_step(connection, "ttft", "*",
                                        AlertState(Severity.TICKET, minutes(11)),
                                        Transition.OPENED, {"5m": 50.0}, minutes(11))  # fmt: skip
    assert incident is not None
    listener.on_incident(incident, Transition.OPENED)
    with store.engine.begin() as connection:
        incident = incidents.apply_step(connection, "ttft", "*",
                                        AlertState(Severity.TICKET, minutes(11), minutes(18)),
                                        Transition.NONE, {"5m": 0.5}, minutes(18),
                                        current=incident, recovering=True)  # fmt: skip
    assert incident is not None
    listener.refresh(minutes(18))  # the history says recovering
    with store.engine.begin() as connection:
        incident = incidents.apply_step(connection, "ttft", "*",
                                        AlertState(Severity.PAGE, minutes(11)),
                                        Transition.ESCALATED, {"5m": 80.0}, minutes(23.5),
                                        current=incident)  # fmt: skip
    assert incident is not None
    listener.on_incident(incident, Transition.ESCALATED)
    (first, paged), (escalated, now) = told
    assert first is Transition.OPENED
    assert paged["instance"] == "gpu-0"
    assert escalated is Transition.ESCALATED
    assert now["instance"] == "gpu-1"
    assert now["burning_again_at"].startswith("2026-01-05T09:22")
