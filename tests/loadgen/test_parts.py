"""Workloads, scenarios, phase summaries, the self-monitor and the progress bar."""

from __future__ import annotations

import asyncio
import io
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from infersight.core.errors import InvalidInput
from infersight.core.loadtest import Phase, RequestResult, summarise_phase
from infersight.loadgen.monitor import SelfMonitor
from infersight.loadgen.progress import TextProgress
from infersight.loadgen.scenarios import burst, step
from infersight.loadgen.workload import (
    DistKind,
    Lengths,
    LongTail,
    Replay,
    Sampled,
    parse_lengths,
    prompt,
)
from infersight.simulator.realtime import CHARS_PER_TOKEN


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("fixed:512", Lengths(DistKind.FIXED, 512), id="fixed"),
        pytest.param("300", Lengths(DistKind.FIXED, 300), id="a bare number is fixed"),
        pytest.param("uniform:10:20", Lengths(DistKind.UNIFORM, 10, 20), id="uniform"),
        pytest.param("LogNormal:256:0.5", Lengths(DistKind.LOGNORMAL, 256, 0.5), id="lognormal"),
    ],
)
def test_length_distributions_parse(text: str, expected: Lengths) -> None:
    assert parse_lengths(text) == expected


@pytest.mark.parametrize(
    "text", ["zipf:3", "fixed", "uniform:5", "uniform:9:3", "normal:0:1", "fixed:a", ""]
)
def test_bad_length_distributions_are_refused(text: str) -> None:
    with pytest.raises(InvalidInput):
        parse_lengths(text)


@given(
    kind=st.sampled_from(list(DistKind)),
    a=st.floats(1, 5000),
    b=st.floats(0, 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_draws_are_whole_tokens_within_the_cap(kind, a, b, seed) -> None:
    lengths = Lengths(kind, a, a + b if kind is DistKind.UNIFORM else b, cap=4096)
    rng = np.random.default_rng(seed)
    assert all(1 <= lengths.draw(rng) <= 4096 for _ in range(20))


def test_sampled_lengths_have_the_distributions_mean() -> None:
    rng = np.random.default_rng(0)
    outputs = Lengths(DistKind.LOGNORMAL, 256, 0.5)
    work = Sampled(Lengths(DistKind.FIXED, 100), outputs, rng)
    draws = [work.next().output_tokens for _ in range(20_000)]
    assert np.mean(draws) == pytest.approx(outputs.mean, rel=0.02)
    assert work.mean_output == outputs.mean


def test_a_long_tail_has_its_fraction_of_long_outputs() -> None:
    rng = np.random.default_rng(1)
    base = Sampled(Lengths(DistKind.FIXED, 50), Lengths(DistKind.FIXED, 64), rng)
    work = LongTail(base, 4096, 0.02, rng)
    outputs = [work.next().output_tokens for _ in range(20_000)]
    assert outputs.count(4096) / len(outputs) == pytest.approx(0.02, abs=0.004)
    assert set(outputs) == {64, 4096}
    assert work.mean_output == pytest.approx(0.98 * 64 + 0.02 * 4096)


def test_a_replay_cycles_through_the_shapes_in_order() -> None:
    work = Replay([(10, 2), (20, 0), (30, 4)])
    shapes = [(s.input_tokens, s.output_tokens) for s in (work.next() for _ in range(5))]
    assert shapes == [(10, 2), (20, 1), (30, 4), (10, 2), (20, 1)]
    with pytest.raises(InvalidInput):
        Replay([])


def test_a_prompt_has_as_many_tokens_as_asked_for_the_simulators_estimate() -> None:
    text = prompt(321, np.random.default_rng(2))
    assert len(text) == 321 * CHARS_PER_TOKEN
    assert text != prompt(321, np.random.default_rng(3))  # no shared prefix to cache


def test_step_levels_follow_each_other_and_a_burst_multiplies_the_users() -> None:
    phases = step([1, 2, 4], 5.0)
    assert [(p.concurrency, p.start_s, p.end_s) for p in phases] == [
        (1, 0, 5),
        (2, 5, 10),
        (4, 10, 15),
    ]
    before, peak, after = burst(8, 2.5, 60, 90, 60)
    assert (before.concurrency, peak.concurrency, after.concurrency) == (8, 20, 8)
    assert (peak.start_s, after.start_s, after.end_s) == (60, 150, 210)
    with pytest.raises(InvalidInput):
        step([4, 2], 5.0)
    with pytest.raises(InvalidInput):
        burst(8, 1.0, 60, 90, 60)


def test_a_phase_summary_leaves_out_the_ramp_and_counts_completions() -> None:
    phase = Phase(1, "4 users", 4, 10.0, 8.0)  # steady part: 12 s to 18 s
    results = [
        RequestResult(1, 0, sent_s=9.0, e2e_s=4.0, ttft_s=0.3),  # done at 13: counted
        RequestResult(2, 1, sent_s=11.0, e2e_s=0.5, ttft_s=9.0),  # all in the ramp: left out
        RequestResult(3, 1, sent_s=12.0, e2e_s=1.0, ttft_s=0.1, output_tokens=10),
        RequestResult(4, 1, sent_s=14.0, e2e_s=2.0, ttft_s=0.2, output_tokens=30),
        RequestResult(5, 1, sent_s=17.0, e2e_s=5.0, ttft_s=0.4),  # done after the phase
        RequestResult(6, 1, sent_s=15.0, e2e_s=0.5, ok=False, error="HTTP 500"),
    ]
    summary = summarise_phase(phase, results)
    assert summary.seconds == 6.0
    assert summary.throughput_rps == pytest.approx(3 / 6)  # results 1, 3 and 4
    assert summary.output_tokens_per_s == pytest.approx(40 / 6)
    assert (summary.requests, summary.errors) == (4, 1)
    assert summary.quantile("ttft") == pytest.approx(0.2)
    assert summary.quantile("ttft", "0.99") == pytest.approx(0.2 + 0.98 * 0.2)


def test_the_monitor_warns_when_the_generators_loop_is_held_up() -> None:
    async def blocked() -> list[str]:
        monitor = SelfMonitor(0.01)
        monitor.start()
        await asyncio.sleep(0.05)
        time.sleep(0.2)  # a generator too busy to read its streams
        await asyncio.sleep(0.05)
        report = await monitor.stop()
        assert report.lag_max_s >= 0.15
        return report.warnings

    warnings = asyncio.run(blocked())
    assert any("event loop woke up" in w for w in warnings)


def test_the_monitor_warns_when_the_generator_uses_a_whole_core() -> None:
    async def busy() -> list[str]:
        clock = iter([0.0, 10.0])
        cpu = iter([0.0, 9.8])
        monitor = SelfMonitor(clock=lambda: next(clock, 10.0), cpu_clock=lambda: next(cpu, 9.8))
        monitor.start()
        return (await monitor.stop()).warnings

    (warning,) = asyncio.run(busy())
    assert "98% of a CPU core" in warning


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_bar_redraws_on_a_terminal_and_logs_lines_elsewhere() -> None:
    now = [0.0]
    log = io.StringIO()
    bar = TextProgress(log, 100.0, width=10, log_every_s=10.0, clock=lambda: now[0])
    for t in (0.0, 5.0, 10.0, 15.0):
        now[0] = t
        bar.update(t, "steady", int(t), 0)
    assert log.getvalue().splitlines() == [
        "[..........]   0%    0.0/100 s  steady  done 0  errors 0",
        "[#.........]  10%   10.0/100 s  steady  done 10  errors 0",
    ]
    tty = Tty()
    bar = TextProgress(tty, 10.0, width=4, clock=lambda: now[0])
    bar.update(5.0, "burst", 3, 1)
    bar.close()
    assert tty.getvalue() == "\r[##..]  50%    5.0/10 s  burst  done 3  errors 1\n"
