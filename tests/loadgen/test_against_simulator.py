"""The load generator against the simulator's streaming endpoint over real HTTP.

Client-side TTFT and TPOT are matched to the server's own records by trace id (the generator
sends a W3C ``traceparent``); a step run's knee is compared with the saturation point the
simulator is configured with (its batch capacity, ``max_num_seqs``), in virtual time.
"""

from __future__ import annotations

import asyncio
import statistics

import numpy as np
import pytest

from infersight.core.loadtest import LoadTestRun, ScenarioKind, knee_of, summarise
from infersight.loadgen.client import Endpoint
from infersight.loadgen.monitor import SelfMonitor
from infersight.loadgen.runner import Runner
from infersight.loadgen.scenarios import burst, steady, step
from infersight.loadgen.workload import DistKind, Lengths, Sampled
from infersight.simulator.realtime import RealtimeServer
from tests.loadgen.support import EPOCH, scaled_profile, serving
from tests.virtual_time import run_in_virtual_time, serving_here

pytestmark = pytest.mark.e2e


def fixed(n: int) -> Lengths:
    return Lengths(DistKind.FIXED, n)


def test_client_ttft_and_tpot_agree_with_the_servers_records_within_ten_percent() -> None:
    # 60 ms decode steps; four 1000-token prompts prefill together in ~1.4 s. Long against the
    # few milliseconds HTTP adds, and against a busy CI machine's scheduling delays.
    profile = scaled_profile(10.0)
    with serving(profile) as (url, server, sink):
        endpoint = Endpoint(url, server.model)
        runner = Runner(
            endpoint,
            steady(4, 6.0),
            Sampled(fixed(1000), fixed(20), np.random.default_rng(1)),
            rng=np.random.default_rng(2),
        )
        run = asyncio.run(runner.run(name="agreement", scenario=ScenarioKind.STEADY))
    records = {r.trace_id: r for r in sink.records}
    assert len(run.results) >= 8
    assert all(r.ok for r in run.results)
    ttft_errors, tpot_errors = [], []
    # The generator measures its own event loop's lag (its bottleneck monitor); a request the
    # loop was late to read by that much may be off by that much, and by no more.
    lag_max = run.config["generator"]["loop_lag_max_s"]
    for result in run.results:
        record = records[result.trace_id]  # every request is found by its trace id
        assert result.output_tokens == record.output_tokens == 20
        assert result.input_tokens == record.input_tokens == 1000
        ttft_errors.append(abs(result.ttft_s - record.ttft_s) / record.ttft_s)
        tpot_errors.append(abs(result.tpot_s - record.tpot_s) / record.tpot_s)
        # TPOT is a mean over 19 gaps: within 10 % of the server's, plus the loop's lag.
        decode_error_s = abs(result.tpot_s - record.tpot_s) * (record.output_tokens - 1)
        assert decode_error_s <= 0.10 * record.tpot_s * (record.output_tokens - 1) + lag_max
    ttft, tpot = statistics.median(ttft_errors), statistics.median(tpot_errors)
    print(  # the figures the issue asks for, shown with -s
        f"\nagreement over {len(ttft_errors)} requests: TTFT median {ttft:.2%} "
        f"max {max(ttft_errors):.2%}; TPOT median {tpot:.2%} max {max(tpot_errors):.2%}; "
        f"generator {run.config['generator']}"
    )
    # The median request: on a shared CI machine a few requests can be held up by the OS
    # scheduler for tens of milliseconds (the generator's monitor reports that as a warning).
    assert ttft < 0.10
    assert tpot < 0.10
    client = statistics.median(r.ttft_s for r in run.results)
    assert client == pytest.approx(
        statistics.median(records[r.trace_id].ttft_s for r in run.results), rel=0.10
    )


def test_the_knee_of_a_step_run_is_the_servers_batch_capacity() -> None:
    slots = 8  # the configured saturation point: the batch holds 8 sequences
    # In virtual time (real HTTP, the simulator's clock and the generator's on one loop): the
    # knee is the model's and the generator's arithmetic, not the host's. On the wall clock a
    # loaded host moved it: users idled between requests (a seat of the full batch stood empty
    # at 8 users) and token reads came a few hundred ms late at a level's window edges, so the
    # knee came out at 10 now and then. The wall-clock agreement is the test above.
    profile = scaled_profile(10.0, max_num_seqs=slots)

    async def step_run() -> LoadTestRun:
        clock = asyncio.get_running_loop().time
        server = RealtimeServer.standalone("lt-0", profile, epoch=EPOCH, clock=clock)
        async with serving_here(server.app()) as url:
            runner = Runner(
                Endpoint(url, server.model),
                step([2, 4, 6, 8, 10, 12, 14, 16], 2.5),
                Sampled(fixed(40), fixed(30), np.random.default_rng(3)),
                rng=np.random.default_rng(4),
                clock=clock,
                monitor=SelfMonitor(clock=clock),
            )
            return await runner.run(name="knee", scenario=ScenarioKind.STEP)

    run = run_in_virtual_time(step_run())
    assert all(r.ok for r in run.results)
    summaries = summarise(run)
    knee = knee_of(summaries)
    assert knee is not None
    error = abs(knee.concurrency - slots) / slots
    print(
        f"\nknee at {knee.concurrency:g} users (configured {slots}; error {error:.0%}); "
        + ", ".join(f"{s.concurrency}: {s.throughput_rps:.1f} rps" for s in summaries)
    )
    assert error <= 0.2
    # Past the knee throughput is flat and latency climbs with the queue.
    assert knee.latency_growth > 1.5
    last = summaries[-1]
    assert last.throughput_rps == pytest.approx(knee.throughput_rps, rel=0.2)


def most_in_flight(results, phase: int) -> int:
    """The most requests sent in ``phase`` that were in flight at one moment."""
    spans = [(r.sent_s, r.done_s) for r in results if r.phase == phase]
    return max(sum(s <= t < d for s, d in spans) for t, _ in spans)


def test_a_burst_raises_the_users_and_lets_them_go_again() -> None:
    with serving(scaled_profile(1.0)) as (url, server, _sink):
        runner = Runner(
            Endpoint(url, server.model),
            burst(1, 3.0, 0.8, 0.8, 0.8),
            Sampled(fixed(20), fixed(8), np.random.default_rng(5)),
        )
        run = asyncio.run(runner.run(name="burst", scenario=ScenarioKind.BURST))
    assert all(r.ok for r in run.results)
    assert [most_in_flight(run.results, p) for p in (0, 1, 2)] == [1, 3, 1]
    assert max(r.sent_s for r in run.results) < 2.4  # nobody starts after the last phase


class _Started(SelfMonitor):
    """A sampler that says when the run has begun (the test cancels it then)."""

    def __init__(self) -> None:
        super().__init__()
        self.started = asyncio.Event()

    def start(self) -> None:
        super().start()
        self.started.set()


def test_a_cancelled_run_stops_its_sampler_and_leaves_no_task_behind() -> None:
    """The live demo's Ctrl-C cancels its step load test mid-run; the event-loop sampler
    used to stay pending ("Task was destroyed but it is pending!" at exit)."""
    with serving(scaled_profile(10.0)) as (url, server, _sink):

        async def cancel_mid_run() -> list[asyncio.Task[object]]:
            monitor = _Started()
            runner = Runner(
                Endpoint(url, server.model),
                steady(2, 60.0),
                Sampled(fixed(100), fixed(20), np.random.default_rng(1)),
                rng=np.random.default_rng(2),
                monitor=monitor,
            )
            task = asyncio.create_task(runner.run(name="cancelled", scenario=ScenarioKind.STEADY))
            await monitor.started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

        assert asyncio.run(cancel_mid_run()) == []
