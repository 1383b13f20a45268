"""Comparing a candidate measurement with a baseline: per-metric verdicts and the CI gate.

Each metric has a direction (latency up is worse, throughput down is worse), a threshold
(10 % relative change by default; the error ratio's is absolute, in ratio points) and, where
the baseline holds enough of the distribution, a confidence interval for the change:

* latency quantiles — a bootstrap: both sketches are resampled (a multinomial draw over their
  buckets, which is resampling the requests at the sketch's 1 % resolution), the quantile
  ratio is taken per resample, and the interval's spread is laid around the exact estimate;
* throughput — the log ratio of two Poisson counts (``SE² = 1/n₁ + 1/n₂`` on requests);
* error ratio — the difference of two proportions (Agresti–Caffo interval).

The verdict asks "is the candidate *confidently* worse by more than the threshold?":

* ``regressed`` — the whole interval lies beyond the threshold on the worse side;
* ``improved`` — the whole interval lies beyond the threshold on the better side;
* ``pass`` — the estimate is within the threshold (and neither of the above);
* ``inconclusive`` — the estimate is beyond the threshold but the interval reaches back
  inside it: the data cannot tell a change from noise (measure longer).

So a change smaller than the threshold fails a build only with the interval's tail
probability (2.5 % at 95 % confidence, far less for changes well inside the threshold), and
never because one noisy percentile jumped. Metrics without a distribution (summary-only
imports, cost) are judged on the threshold alone; metrics without a direction (GPU
utilisation) are reported, and are ``inconclusive`` rather than ``regressed`` when they move.
The random generator is a parameter: the same inputs and seed give the same verdicts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC
from enum import StrEnum
from statistics import NormalDist
from typing import Final

import numpy as np

from infersight.core.baseline import LATENCY_METRICS, Baseline, LatencySummary
from infersight.core.errors import InvalidInput
from infersight.core.sketch import QuantileSketch
from infersight.core.window import Window

# What other modules use (and the types its answers carry); the tuning constants and
# helpers left out are this module's own.
__all__ = [
    "COMPARED_QUANTILES",
    "METRIC_NAMES",
    "Comparison",
    "Direction",
    "MetricComparison",
    "MetricSpec",
    "Policy",
    "Resampled",
    "StatTest",
    "Verdict",
    "compare",
    "decide",
    "resample",
    "window_label",
]


class Verdict(StrEnum):
    PASS = "pass"  # noqa: S105 (a verdict, not a password)
    REGRESSED = "regressed"
    IMPROVED = "improved"
    INCONCLUSIVE = "inconclusive"


class Direction(StrEnum):
    LOWER_IS_BETTER = "lower_is_better"
    HIGHER_IS_BETTER = "higher_is_better"
    NEUTRAL = "neutral"


class StatTest(StrEnum):
    BOOTSTRAP = "bootstrap"
    POISSON = "poisson"
    TWO_PROPORTIONS = "two_proportions"
    NONE = "none"


#: The quantiles of each latency metric that are compared.
COMPARED_QUANTILES: Final = (0.5, 0.9, 0.99)
DEFAULT_THRESHOLD: Final = 0.10
#: The error ratio is compared in absolute ratio points: 0.005 = half a percentage point.
DEFAULT_ERROR_RATIO_THRESHOLD: Final = 0.005


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    unit: str
    direction: Direction
    absolute: bool = False
    """The change is a difference (ratio points), not a relative change."""


def _latency_specs() -> list[MetricSpec]:
    return [
        MetricSpec(f"{metric}.p{round(q * 100)}", "s", Direction.LOWER_IS_BETTER)
        for metric in LATENCY_METRICS
        for q in COMPARED_QUANTILES
    ]


#: Every compared metric, in report order.
METRICS: Final = (
    *_latency_specs(),
    MetricSpec("request_throughput", "req/s", Direction.HIGHER_IS_BETTER),
    MetricSpec("output_token_throughput", "tok/s", Direction.HIGHER_IS_BETTER),
    MetricSpec("error_ratio", "ratio", Direction.LOWER_IS_BETTER, absolute=True),
    MetricSpec("gpu_utilization", "ratio", Direction.NEUTRAL),
    MetricSpec("cost_per_million_tokens", "currency", Direction.LOWER_IS_BETTER),
)
METRIC_NAMES: Final = tuple(spec.name for spec in METRICS)


@dataclass(frozen=True, slots=True)
class Policy:
    """How strict the gate is: thresholds per metric, confidence and bootstrap size.

    ``thresholds`` is keyed by a metric name (``ttft.p99``) or a latency metric
    (``ttft``: all its quantiles); the most specific key wins.
    """

    thresholds: Mapping[str, float] = field(default_factory=dict)
    default_threshold: float = DEFAULT_THRESHOLD
    error_ratio_threshold: float = DEFAULT_ERROR_RATIO_THRESHOLD
    confidence: float = 0.95
    resamples: int = 1000

    def __post_init__(self) -> None:
        allowed = {*METRIC_NAMES, *LATENCY_METRICS}
        for key, value in {**self.thresholds, "default": self.default_threshold}.items():
            if key not in allowed and key != "default":
                raise InvalidInput(f"no metric named {key!r}", details={"allowed": sorted(allowed)})
            if not (math.isfinite(value) and 0.0 <= value <= 10.0):
                raise InvalidInput("a threshold is a number in [0, 10]", details={key: value})
        if not 0.0 < self.error_ratio_threshold <= 1.0:
            raise InvalidInput("the error-ratio threshold is in (0, 1]")
        if not 0.5 <= self.confidence < 1.0:
            raise InvalidInput(
                "confidence must be in [0.5, 1)", details={"confidence": self.confidence}
            )
        if not 100 <= self.resamples <= 5000:
            raise InvalidInput(
                "resamples must be in [100, 5000]", details={"resamples": self.resamples}
            )
        object.__setattr__(self, "thresholds", dict(self.thresholds))

    def threshold(self, spec: MetricSpec) -> float:
        if spec.name in self.thresholds:
            return self.thresholds[spec.name]
        family = spec.name.partition(".")[0]
        if family in self.thresholds and family in LATENCY_METRICS:
            return self.thresholds[family]
        return self.error_ratio_threshold if spec.absolute else self.default_threshold


@dataclass(frozen=True, slots=True)
class MetricComparison:
    name: str
    unit: str
    direction: Direction
    baseline: float | None
    candidate: float | None
    change: float | None
    """Relative change (candidate / baseline − 1), or the difference for absolute metrics."""
    ci_low: float | None
    ci_high: float | None
    threshold: float
    absolute: bool
    test: StatTest
    verdict: Verdict
    note: str = ""

    @property
    def worse(self) -> bool:
        """The estimate moved the worse way (never for a metric without a direction)."""
        if self.change is None or self.direction is Direction.NEUTRAL:
            return False
        return (self.change > 0) == (self.direction is Direction.LOWER_IS_BETTER) and bool(
            self.change
        )


@dataclass(frozen=True, slots=True)
class Comparison:
    baseline: str
    candidate: str
    confidence: float
    metrics: tuple[MetricComparison, ...]

    @property
    def verdict(self) -> Verdict:
        """``regressed`` if any metric regressed; else ``inconclusive`` if a metric moved the
        worse way beyond its threshold without the interval to confirm it; else ``improved``
        if any metric improved; else ``pass``. A neutral metric's move never decides."""
        verdicts = {m.verdict for m in self.metrics}
        if Verdict.REGRESSED in verdicts:
            return Verdict.REGRESSED
        if any(m.verdict is Verdict.INCONCLUSIVE and m.worse for m in self.metrics):
            return Verdict.INCONCLUSIVE
        return Verdict.IMPROVED if Verdict.IMPROVED in verdicts else Verdict.PASS

    @property
    def regressed(self) -> tuple[MetricComparison, ...]:
        return tuple(m for m in self.metrics if m.verdict is Verdict.REGRESSED)


# -- the verdict ----------------------------------------------------------------------------


def decide(
    direction: Direction,
    change: float,
    ci: tuple[float, float] | None,
    threshold: float,
) -> Verdict:
    """The verdict for one metric's change and interval (see the module docstring)."""
    if direction is Direction.NEUTRAL:
        return Verdict.PASS if abs(change) <= threshold else Verdict.INCONCLUSIVE
    sign = 1.0 if direction is Direction.LOWER_IS_BETTER else -1.0
    worse = sign * change
    if ci is None:
        low = high = worse
    else:
        low, high = sorted((sign * ci[0], sign * ci[1]))
    if low > threshold:
        return Verdict.REGRESSED
    if high < -threshold:
        return Verdict.IMPROVED
    if abs(worse) <= threshold:
        return Verdict.PASS
    return Verdict.INCONCLUSIVE


# -- intervals ------------------------------------------------------------------------------


def _z(confidence: float) -> float:
    """The two-sided normal quantile for ``confidence`` (1.96 at 95 %)."""
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


@dataclass(frozen=True, slots=True)
class Resampled:
    """``resamples`` bootstrap replicates of one sketch's buckets, drawn once and shared by
    every quantile compared on it: a replicate is one resampled data set, so its P50, P90 and
    P99 come from the same draw (drawing again per quantile cost 40 % of a Baselines view)."""

    sketch: QuantileSketch
    keys: np.ndarray
    draws: np.ndarray
    cumulative: np.ndarray
    zero: bool


def resample(sketch: QuantileSketch, resamples: int, rng: np.random.Generator) -> Resampled:
    """Multinomial resamples of ``sketch``'s bucket counts (its ``count`` values each)."""
    keys, counts, zero = _buckets(sketch)
    draws = rng.multinomial(sketch.count, counts / counts.sum(), size=resamples)
    return Resampled(sketch, keys, draws, np.cumsum(draws, axis=1), zero)


def _bootstrap_quantiles(r: Resampled, q: float) -> np.ndarray:
    """The ``q`` quantile of each of ``r``'s replicates.

    Within its bucket a replicate's quantile is placed by its rank among the bucket's values
    (log-linear across the bucket ``(γ^(k−1), γ^k]``), so replicates move smoothly with the
    resampled counts instead of jumping a whole bucket (which would quantise the interval).
    """
    sketch, keys, draws, cumulative = r.sketch, r.keys, r.draws, r.cumulative
    rank = math.floor(q * (sketch.count - 1))
    index = np.minimum((cumulative <= rank).sum(axis=1), keys.size - 1)
    rows = np.arange(draws.shape[0])
    before = np.where(index > 0, cumulative[rows, np.maximum(index - 1, 0)], 0)
    inside = np.maximum(draws[rows, index], 1)
    fraction = np.clip((rank - before + 0.5) / inside, 0.0, 1.0)
    ln_gamma = math.log((1.0 + sketch.alpha) / (1.0 - sketch.alpha))
    values = np.exp((keys[index] - 1.0 + fraction) * ln_gamma)
    if r.zero:
        values = np.where(index == 0, 0.0, values)
    return np.asarray(np.clip(values, max(sketch.min, 0.0), sketch.max), dtype=np.float64)


def _buckets(sketch: QuantileSketch) -> tuple[np.ndarray, np.ndarray, bool]:
    """Keys and counts of a sketch's buckets (the zero bucket first, if any) and whether
    there is a zero bucket."""
    # The bucket arrays are the sketch's own; reading them is the point of a bootstrap.
    keys = sketch._keys.astype(np.float64)
    counts = sketch._counts.astype(np.float64)
    if sketch.zero_count:
        keys = np.concatenate(([0.0], keys))
        counts = np.concatenate(([float(sketch.zero_count)], counts))
    return keys, counts, bool(sketch.zero_count)


def bootstrap_ratio_interval(
    base: Resampled, cand: Resampled, q: float, confidence: float
) -> tuple[float, float] | None:
    """Percentile interval of ``log(q_cand / q_base)`` around its bootstrap median.

    The caller lays it around the exact log ratio (the sketch's bucket values would bias the
    centre by up to ±α); ``None`` when a resampled quantile is zero.
    """
    b = _bootstrap_quantiles(base, q)
    c = _bootstrap_quantiles(cand, q)
    if np.any(b <= 0) or np.any(c <= 0):
        return None
    log_ratios = np.log(c / b)
    deviations = log_ratios - np.median(log_ratios)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(deviations, [tail, 1.0 - tail])
    return float(low), float(high)


def poisson_ratio_interval(
    n_base: int, n_cand: int, confidence: float
) -> tuple[float, float] | None:
    """Half-widths of ``log(rate ratio)``'s interval when the rates are counts over time."""
    if n_base <= 0 or n_cand <= 0:
        return None
    half = _z(confidence) * math.sqrt(1.0 / n_base + 1.0 / n_cand)
    return -half, half


def proportion_difference_interval(
    errors_base: int, n_base: int, errors_cand: int, n_cand: int, confidence: float
) -> tuple[float, float] | None:
    """Agresti–Caffo interval for ``p_cand − p_base`` (one pseudo-success and failure each)."""
    if n_base <= 0 or n_cand <= 0:
        return None
    pb = (errors_base + 1) / (n_base + 2)
    pc = (errors_cand + 1) / (n_cand + 2)
    se = math.sqrt(pb * (1 - pb) / (n_base + 2) + pc * (1 - pc) / (n_cand + 2))
    diff = pc - pb
    half = _z(confidence) * se
    return diff - half, diff + half


# -- comparing ------------------------------------------------------------------------------


def window_label(window: Window) -> str:
    """A window as people read it, in UTC: ``2026-12-02 13:20–13:24 UTC`` within one day,
    ``2026-12-01 23:00 – 2026-12-02 01:00 UTC`` across days (seconds only when not whole)."""
    start, end = window.start.astimezone(UTC), window.end.astimezone(UTC)
    clock = "%H:%M:%S" if start.second or end.second else "%H:%M"
    if start.date() == end.date():
        return f"{start:%Y-%m-%d} {start.strftime(clock)}–{end.strftime(clock)} UTC"
    return f"{start:%Y-%m-%d} {start.strftime(clock)} – {end:%Y-%m-%d} {end.strftime(clock)} UTC"


def compare(
    baseline: Baseline,
    candidate: Baseline,
    rng: np.random.Generator,
    policy: Policy | None = None,
    *,
    candidate_label: str | None = None,
) -> Comparison:
    """Every metric of ``candidate`` against ``baseline`` with its verdict.

    ``candidate_label`` names the candidate in the comparison when its baseline name is not
    what people should read (a window's time range, a result file's name).
    """
    policy = policy or Policy()
    rows = []
    resampled: dict[tuple[str, str], Resampled | None] = {}
    for spec in METRICS:
        family, _, quantile = spec.name.partition(".")
        if quantile:
            q = int(quantile[1:]) / 100
            rows.append(_latency(spec, family, q, baseline, candidate, policy, rng, resampled))
        elif spec.name.endswith("_throughput"):
            rows.append(_throughput(spec, baseline, candidate, policy))
        elif spec.name == "error_ratio":
            rows.append(_errors(spec, baseline, candidate, policy))
        else:
            rows.append(_plain(spec, baseline, candidate, policy))
    label = candidate_label or candidate.name
    return Comparison(baseline.name, label, policy.confidence, tuple(rows))


def _row(
    spec: MetricSpec,
    base: float | None,
    cand: float | None,
    change: float | None,
    ci: tuple[float, float] | None,
    test: StatTest,
    policy: Policy,
    note: str = "",
) -> MetricComparison:
    threshold = policy.threshold(spec)
    if change is None:
        verdict, note = Verdict.PASS, note or "not measured on both sides"
    else:
        verdict = decide(spec.direction, change, ci, threshold)
    return MetricComparison(
        spec.name,
        spec.unit,
        spec.direction,
        base,
        cand,
        change,
        None if ci is None else ci[0],
        None if ci is None else ci[1],
        threshold,
        spec.absolute,
        test if ci is not None else StatTest.NONE,
        verdict,
        note,
    )


def _relative(base: float | None, cand: float | None) -> float | None:
    if base is None or cand is None or base <= 0:
        return None
    return cand / base - 1.0


def _latency(
    spec: MetricSpec,
    metric: str,
    q: float,
    baseline: Baseline,
    candidate: Baseline,
    policy: Policy,
    rng: np.random.Generator,
    resampled: dict[tuple[str, str], Resampled | None],
) -> MetricComparison:
    b_summary, c_summary = baseline.latency.get(metric), candidate.latency.get(metric)
    base = b_summary.quantiles.get(q) if b_summary else None
    cand = c_summary.quantiles.get(q) if c_summary else None
    change = _relative(base, cand)
    ci = None
    if change is not None and b_summary and c_summary and base and cand:
        b_draws = _replicates(resampled, ("baseline", metric), b_summary, policy, rng)
        c_draws = _replicates(resampled, ("candidate", metric), c_summary, policy, rng)
        if b_draws is not None and c_draws is not None:
            deviation = bootstrap_ratio_interval(b_draws, c_draws, q, policy.confidence)
            if deviation is not None:
                log_ratio = math.log(cand / base)
                ci = (math.expm1(log_ratio + deviation[0]), math.expm1(log_ratio + deviation[1]))
    note = "" if ci is not None or change is None else "no distribution: threshold only"
    return _row(spec, base, cand, change, ci, StatTest.BOOTSTRAP, policy, note)


def _replicates(
    resampled: dict[tuple[str, str], Resampled | None],
    key: tuple[str, str],
    summary: LatencySummary,
    policy: Policy,
    rng: np.random.Generator,
) -> Resampled | None:
    """One side's replicates of one metric, drawn on first use and kept for its quantiles."""
    if key not in resampled:
        sketch = summary.distribution()
        ok = sketch is not None and sketch.count > 0
        resampled[key] = resample(sketch, policy.resamples, rng) if ok and sketch else None
    return resampled[key]


def _throughput(
    spec: MetricSpec, baseline: Baseline, candidate: Baseline, policy: Policy
) -> MetricComparison:
    base, cand = getattr(baseline, spec.name), getattr(candidate, spec.name)
    change = _relative(base, cand)
    ci = None
    if change is not None and cand > 0:
        half = poisson_ratio_interval(
            baseline.requests - baseline.errors,
            candidate.requests - candidate.errors,
            policy.confidence,
        )
        if half is not None:
            log_ratio = math.log(cand / base)
            ci = (math.expm1(log_ratio + half[0]), math.expm1(log_ratio + half[1]))
    return _row(spec, base, cand, change, ci, StatTest.POISSON, policy)


def _errors(
    spec: MetricSpec, baseline: Baseline, candidate: Baseline, policy: Policy
) -> MetricComparison:
    base, cand = baseline.error_ratio, candidate.error_ratio
    change = None if base is None or cand is None else cand - base
    ci = None
    if change is not None:
        interval = proportion_difference_interval(
            baseline.errors,
            baseline.requests,
            candidate.errors,
            candidate.requests,
            policy.confidence,
        )
        if interval is not None:
            # Centre the smoothed interval's width on the observed difference.
            middle = (interval[0] + interval[1]) / 2
            ci = (change + interval[0] - middle, change + interval[1] - middle)
    return _row(spec, base, cand, change, ci, StatTest.TWO_PROPORTIONS, policy)


def _plain(
    spec: MetricSpec, baseline: Baseline, candidate: Baseline, policy: Policy
) -> MetricComparison:
    raw_base, raw_cand = getattr(baseline, spec.name), getattr(candidate, spec.name)
    base = None if raw_base is None else float(raw_base)
    cand = None if raw_cand is None else float(raw_cand)
    # Unit costs in two currencies are not compared; one missing on a side is "not measured".
    if (
        spec.name == "cost_per_million_tokens"
        and base is not None
        and cand is not None
        and baseline.labels.get("cost_currency") != candidate.labels.get("cost_currency")
    ):
        return _row(spec, base, cand, None, None, StatTest.NONE, policy, "different currencies")
    note = "threshold only" if base is not None and cand is not None else ""
    return _row(spec, base, cand, _relative(base, cand), None, StatTest.NONE, policy, note)
