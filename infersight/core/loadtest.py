"""Load-test runs: phases, per-request results measured by the client, and level summaries.

A run is a sequence of ``Phase``s, each holding a fixed number of concurrent users (closed
loop) for a duration: one phase for a steady run, one per level for a step run, three for a
burst. Every request becomes a ``RequestResult`` with client-side timings: TTFT (send → first
content token), TPOT (first → last token ÷ tokens − 1, the engine's definition), the gaps
between tokens (ITL) and E2E. ``summarise`` turns the results of each phase into a
``PhaseSummary`` over its steady part (the first ``warmup`` fraction is the ramp between
levels), which is what knee detection and capacity planning read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from infersight.core.baseline import Baseline, from_samples
from infersight.core.errors import InvalidInput
from infersight.core.knee import MIN_LEVELS, Knee, LevelPoint, find_knee

DEFAULT_WARMUP: Final = 0.25
MAX_PHASES: Final = 1000


class ScenarioKind(StrEnum):
    STEADY = "steady"
    STEP = "step"
    BURST = "burst"
    LONG_TAIL = "long-tail"


@dataclass(frozen=True, slots=True)
class Phase:
    """``concurrency`` users for ``duration_s`` seconds, from ``start_s`` after the run began."""

    index: int
    label: str
    concurrency: int
    start_s: float
    duration_s: float

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise InvalidInput("a phase needs at least one concurrent user")
        if not math.isfinite(self.duration_s) or self.duration_s <= 0:
            raise InvalidInput("a phase lasts a positive number of seconds")

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


@dataclass(frozen=True, slots=True)
class RequestResult:
    """One request as the load generator saw it (seconds; ``sent_s`` from the run's start)."""

    seq: int
    phase: int
    sent_s: float
    e2e_s: float
    ttft_s: float | None = None
    tpot_s: float | None = None
    itl_s: tuple[float, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0
    ok: bool = True
    error: str = ""
    trace_id: str = ""

    @property
    def done_s(self) -> float:
        return self.sent_s + self.e2e_s


@dataclass(frozen=True, slots=True)
class PhaseSummary:
    """Throughput and latency quantiles of one phase's steady part."""

    phase: int
    label: str
    concurrency: int
    requests: int
    errors: int
    seconds: float
    throughput_rps: float
    output_tokens_per_s: float
    latency: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    mean_output_tokens: float = 0.0

    def quantile(self, metric: str, q: str = "0.5") -> float | None:
        return self.latency.get(metric, {}).get(q)

    def to_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "label": self.label,
            "concurrency": self.concurrency,
            "requests": self.requests,
            "errors": self.errors,
            "seconds": self.seconds,
            "throughput_rps": self.throughput_rps,
            "output_tokens_per_s": self.output_tokens_per_s,
            "mean_output_tokens": self.mean_output_tokens,
            "latency": {k: dict(v) for k, v in self.latency.items()},
        }


@dataclass(frozen=True, slots=True)
class LoadTestRun:
    """A finished run: what was driven, where, and every request's result."""

    name: str
    scenario: ScenarioKind
    target: str
    model: str
    started_at: datetime
    phases: tuple[Phase, ...]
    results: tuple[RequestResult, ...]
    warnings: tuple[str, ...] = ()
    config: Mapping[str, Any] = field(default_factory=dict)
    id: int | None = None

    def __post_init__(self) -> None:
        if not self.phases or len(self.phases) > MAX_PHASES:
            raise InvalidInput(f"a run has between 1 and {MAX_PHASES} phases")

    @property
    def duration_s(self) -> float:
        return max(p.end_s for p in self.phases)


QUANTILES: Final = (("0.5", 0.5), ("0.9", 0.9), ("0.99", 0.99))


def _quantiles(values: Sequence[float]) -> dict[str, float]:
    """Linear-interpolated quantiles of ``values`` (exact; a run is small)."""
    ordered = sorted(values)
    if not ordered:
        return {}
    out = {}
    for key, q in QUANTILES:
        pos = q * (len(ordered) - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        out[key] = ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
    out["mean"] = sum(ordered) / len(ordered)
    return out


def _tokens_between(results: Sequence[RequestResult], start: float, end: float) -> float:
    """Output tokens that reached the client in [start, end).

    Each content chunk carries ``output_tokens ÷ chunks`` tokens at its arrival time; a result
    without token times counts its tokens when it completed.
    """
    total = 0.0
    for r in results:
        if not r.ok or r.output_tokens <= 0:
            continue
        if r.ttft_s is None:
            total += r.output_tokens if start <= r.done_s < end else 0
            continue
        t = r.sent_s + r.ttft_s
        per_chunk = r.output_tokens / (len(r.itl_s) + 1)
        total += per_chunk * (start <= t < end)
        for gap in r.itl_s:
            t += gap
            total += per_chunk * (start <= t < end)
    return total


def summarise_phase(
    phase: Phase, results: Sequence[RequestResult], warmup: float = DEFAULT_WARMUP
) -> PhaseSummary:
    """Throughput over the phase's steady part, and the latency of the requests sent in it.

    Output tokens per second count every token that arrived in the steady part. Request
    throughput is that token rate over the mean output length: closed-loop users that start
    together finish together, so counting completions in a short window jumps by whole batches,
    while the token stream flows at every engine step.
    """
    if not 0 <= warmup < 1:
        raise InvalidInput("warmup is a fraction of a phase in [0, 1)")
    start = phase.start_s + warmup * phase.duration_s
    seconds = phase.end_s - start
    done = [r for r in results if r.ok and start <= r.done_s < phase.end_s]
    sent = [r for r in results if r.phase == phase.index and r.sent_s >= start]
    ok = [r for r in sent if r.ok]
    lengths = [r.output_tokens for r in (ok or done)]
    mean_output = sum(lengths) / len(lengths) if lengths else 0.0
    tokens_per_s = _tokens_between(results, start, phase.end_s) / seconds
    rps = tokens_per_s / mean_output if mean_output > 0 else len(done) / seconds
    latency = {
        "ttft": _quantiles([r.ttft_s for r in ok if r.ttft_s is not None]),
        "tpot": _quantiles([r.tpot_s for r in ok if r.tpot_s is not None]),
        "e2e": _quantiles([r.e2e_s for r in ok]),
        "itl": _quantiles([gap for r in ok for gap in r.itl_s]),
    }
    return PhaseSummary(
        phase=phase.index,
        label=phase.label,
        concurrency=phase.concurrency,
        requests=len(sent),
        errors=len(sent) - len(ok),
        seconds=seconds,
        throughput_rps=rps,
        output_tokens_per_s=tokens_per_s,
        latency={k: v for k, v in latency.items() if v},
        mean_output_tokens=mean_output,
    )


def summarise(run: LoadTestRun, warmup: float = DEFAULT_WARMUP) -> tuple[PhaseSummary, ...]:
    return tuple(summarise_phase(p, run.results, warmup) for p in run.phases)


def knee_of(summaries: Sequence[PhaseSummary], metric: str = "e2e") -> Knee | None:
    """The knee of a step run's levels (median ``metric`` latency as the latency axis)."""
    points = [
        LevelPoint(s.concurrency, s.throughput_rps, s.quantile(metric) or 0.0)
        for s in summaries
        if s.requests
    ]
    if len(points) < MIN_LEVELS:
        return None
    return find_knee(points)


@dataclass(frozen=True, slots=True)
class RunThroughput:
    """A whole run's throughput: completions over the time the run measurably took."""

    duration_s: float
    completed: int
    requests_per_s: float
    output_tokens_per_s: float


def run_throughput(run: LoadTestRun) -> RunThroughput:
    """The one throughput of a run, which every report of it (``loadtest --json``, a baseline
    of it, ``baseline compare --run``) shows.

    The duration is measured: from the run's start to its last request's completion (the
    nominal length, when the run has no request). The nominal length — the phases' sum —
    leaves out the drain after the last phase, and counts idle time when the generator ran
    out of requests early (a replay), so it was one figure in ``loadtest --json`` and another
    in ``baseline compare --run`` for the same run.
    """
    ok = [r for r in run.results if r.ok]
    last = max((r.done_s for r in run.results), default=0.0)
    duration = last if last > 0 else run.duration_s
    return RunThroughput(
        duration_s=duration,
        completed=len(ok),
        requests_per_s=len(ok) / duration,
        output_tokens_per_s=sum(r.output_tokens for r in ok) / duration,
    )


@dataclass(frozen=True, slots=True)
class RunListing:
    """What a list of runs shows without loading every request."""

    id: int
    name: str
    scenario: ScenarioKind
    target: str
    model: str
    started_at: datetime
    duration_s: float
    requests: int
    errors: int


def to_baseline(
    run: LoadTestRun, name: str, created_at: datetime, description: str = ""
) -> Baseline:
    """A baseline of the whole run, from every request's client-side measurements."""
    ok = [r for r in run.results if r.ok]
    labels = {"model": run.model, "scenario": run.scenario.value}
    if run.id is not None:
        labels["run"] = str(run.id)
    measured = run_throughput(run)
    return from_samples(
        name,
        created_at,
        duration_s=measured.duration_s,
        ttft_s=[r.ttft_s for r in ok if r.ttft_s is not None],
        tpot_s=[r.tpot_s for r in ok if r.tpot_s is not None],
        e2e_s=[r.e2e_s for r in ok],
        errors=len(run.results) - len(ok),
        input_tokens=sum(r.input_tokens for r in ok),
        output_tokens=sum(r.output_tokens for r in ok),
        source="run",
        description=description,
        labels=labels,
        window_start=run.started_at,
        window_end=run.started_at + timedelta(seconds=measured.duration_s),
    )


@dataclass(frozen=True, slots=True)
class MeasuredCapacity:
    """The best sustainable level of a run: its throughput, concurrency and output length."""

    throughput_rps: float
    concurrency: int
    mean_output_tokens: float
    phase: str


def measured_capacity(
    summaries: Sequence[PhaseSummary],
    *,
    ttft_p99_max_s: float | None = None,
    tpot_p99_max_s: float | None = None,
) -> MeasuredCapacity:
    """The highest-throughput level that meets the targets (at p99), no further than the knee.

    Past the knee added users only queue, so a level beyond it is not an operating point even
    when its latency still meets a generous target.
    """
    usable = [s for s in summaries if s.requests and s.throughput_rps > 0]
    knee = knee_of(usable) if len(usable) >= MIN_LEVELS else None
    if knee is not None:
        usable = [s for s in usable if s.concurrency <= knee.concurrency]
    fits = [
        s
        for s in usable
        if _within(s.quantile("ttft", "0.99"), ttft_p99_max_s)
        and _within(s.quantile("tpot", "0.99"), tpot_p99_max_s)
    ]
    if not fits:
        raise InvalidInput("no level of the run met the latency targets at p99")
    best = max(fits, key=lambda s: s.throughput_rps)
    return MeasuredCapacity(
        best.throughput_rps,
        best.concurrency,
        best.mean_output_tokens or best.output_tokens_per_s / best.throughput_rps,
        best.label,
    )


def _within(value: float | None, limit: float | None) -> bool:
    return limit is None or (value is not None and value <= limit)
