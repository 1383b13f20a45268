"""The regression gate's statistics: same configuration passes, 15 % slower regresses, and a
3 % change on noisy data never regresses."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.harness.baselines import CREATED, synthetic_run
from infersight.core.baseline import from_dict, from_samples, to_dict
from infersight.core.baseline_compare import (
    METRIC_NAMES,
    Direction,
    Policy,
    StatTest,
    Verdict,
    compare,
    decide,
)
from infersight.core.baseline_report import comparison_dict, markdown, table
from infersight.core.errors import InvalidInput
from infersight.core.importers import parse
from tests.baselines.test_importers import load


def verdicts(comparison) -> dict[str, Verdict]:
    return {m.name: m.verdict for m in comparison.metrics}


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_two_runs_of_the_same_configuration_pass(seed):
    rng = np.random.default_rng(seed)
    before, after = synthetic_run(rng, "before"), synthetic_run(rng, "after")
    result = compare(before, after, np.random.default_rng(0))
    assert result.verdict is Verdict.PASS, table(result)
    assert not result.regressed


def test_a_configuration_made_15_percent_slower_regresses():
    rng = np.random.default_rng(21)
    before, after = synthetic_run(rng, "before"), synthetic_run(rng, "after", slowdown=1.15)
    result = compare(before, after, np.random.default_rng(0))
    assert result.verdict is Verdict.REGRESSED
    got = verdicts(result)
    for name in ("ttft.p50", "tpot.p50"):
        assert got[name] is Verdict.REGRESSED, table(result)
    slow = next(m for m in result.metrics if m.name == "ttft.p50")
    assert slow.change == pytest.approx(0.15, abs=0.04)
    assert slow.ci_low > 0.10
    assert slow.test is StatTest.BOOTSTRAP


def test_a_configuration_made_15_percent_faster_improves_and_never_regresses():
    rng = np.random.default_rng(22)
    before, after = synthetic_run(rng, "before"), synthetic_run(rng, "after", slowdown=1 / 1.15)
    result = compare(before, after, np.random.default_rng(0))
    assert result.verdict is Verdict.IMPROVED, table(result)
    assert not result.regressed
    assert verdicts(result)["tpot.p50"] is Verdict.IMPROVED


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 2**32 - 1),
    change=st.floats(-0.03, 0.03),
    requests=st.integers(200, 3000),
    sigma=st.floats(0.2, 1.2),
)
def test_a_change_of_3_percent_on_noisy_data_never_regresses(seed, change, requests, sigma):
    rng = np.random.default_rng(seed)
    before = synthetic_run(rng, "before", requests=requests, sigma=sigma)
    after = synthetic_run(rng, "after", requests=requests, sigma=sigma, slowdown=1 + change)
    result = compare(before, after, np.random.default_rng(seed), Policy(resamples=300))
    assert result.verdict is not Verdict.REGRESSED, table(result)


def test_throughput_down_is_worse_and_latency_up_is_worse():
    assert decide(Direction.HIGHER_IS_BETTER, -0.2, (-0.25, -0.15), 0.1) is Verdict.REGRESSED
    assert decide(Direction.HIGHER_IS_BETTER, 0.2, (0.15, 0.25), 0.1) is Verdict.IMPROVED
    assert decide(Direction.LOWER_IS_BETTER, 0.2, (0.15, 0.25), 0.1) is Verdict.REGRESSED
    assert decide(Direction.LOWER_IS_BETTER, -0.2, (-0.25, -0.15), 0.1) is Verdict.IMPROVED


@pytest.mark.parametrize(
    ("sentence", "change", "ci", "expected"),
    [
        ("a change inside the threshold passes", 0.05, (0.01, 0.09), Verdict.PASS),
        (
            "a large change whose interval reaches back inside is inconclusive",
            0.14,
            (0.06, 0.22),
            Verdict.INCONCLUSIVE,
        ),
        ("a large change with a tight interval regresses", 0.14, (0.11, 0.17), Verdict.REGRESSED),
        ("without an interval the threshold alone decides", 0.11, None, Verdict.REGRESSED),
        ("a noisy estimate inside the threshold still passes", 0.02, (-0.3, 0.35), Verdict.PASS),
    ],
)
def test_verdict_rules(sentence, change, ci, expected):
    assert decide(Direction.LOWER_IS_BETTER, change, ci, 0.10) is expected, sentence


def test_neutral_metrics_never_regress():
    assert decide(Direction.NEUTRAL, 0.5, None, 0.1) is Verdict.INCONCLUSIVE
    assert decide(Direction.NEUTRAL, 0.05, None, 0.1) is Verdict.PASS


def test_thresholds_are_configurable_per_metric_and_per_latency_family():
    rng = np.random.default_rng(31)
    before, after = synthetic_run(rng, "before"), synthetic_run(rng, "after", slowdown=1.15)
    strict = verdicts(compare(before, after, np.random.default_rng(0)))
    lenient = Policy(thresholds={"ttft": 0.5, "tpot.p50": 0.5})
    got = verdicts(compare(before, after, np.random.default_rng(0), lenient))
    assert strict["tpot.p50"] is Verdict.REGRESSED
    assert got["ttft.p50"] is got["ttft.p99"] is got["tpot.p50"] is Verdict.PASS
    for name in ("e2e.p50", "e2e.p99", "request_throughput"):
        assert got[name] is strict[name]
    with pytest.raises(InvalidInput, match="no metric named"):
        Policy(thresholds={"ttft.p42": 0.1})
    with pytest.raises(InvalidInput):
        Policy(thresholds={"ttft": -1})
    with pytest.raises(InvalidInput):
        Policy(confidence=1.0)


def test_the_same_seed_gives_the_same_comparison():
    rng = np.random.default_rng(41)
    before, after = synthetic_run(rng, "a", requests=500), synthetic_run(rng, "b", requests=500)
    first = compare(before, after, np.random.default_rng(5))
    assert first == compare(before, after, np.random.default_rng(5))


def test_summary_only_baselines_are_judged_on_thresholds_alone():
    summary = parse(load("vllm_result.json"), name="base", created_at=CREATED)
    doc = load("vllm_result.json")
    for key in ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms"):
        doc[key] *= 1.15
    slower = parse(doc, name="cand", created_at=CREATED)
    result = compare(summary, slower, np.random.default_rng(0))
    ttft = next(m for m in result.metrics if m.name == "ttft.p50")
    assert ttft.test is StatTest.NONE
    assert ttft.verdict is Verdict.REGRESSED
    assert "threshold only" in ttft.note
    assert verdicts(result)["tpot.p50"] is Verdict.PASS


def test_error_ratio_is_compared_in_ratio_points():
    rng = np.random.default_rng(51)
    clean = synthetic_run(rng, "clean", error_rate=0.0)
    failing = synthetic_run(rng, "failing", error_rate=0.05)
    row = next(m for m in compare(clean, failing, rng).metrics if m.name == "error_ratio")
    assert row.absolute
    assert row.change == pytest.approx(0.05, abs=0.015)
    assert row.verdict is Verdict.REGRESSED
    assert row.test is StatTest.TWO_PROPORTIONS


def test_cost_in_different_currencies_is_not_compared():
    rng = np.random.default_rng(61)

    def priced(name: str, amount: str, currency: str):
        run = synthetic_run(rng, name, requests=300)
        return from_samples(
            name,
            CREATED,
            duration_s=run.duration_s,
            ttft_s=[0.1] * 10,
            tpot_s=[0.02] * 10,
            e2e_s=[1.0] * 10,
            cost_per_million_tokens=Decimal(amount),
            labels={"cost_currency": currency},
        )

    same = compare(priced("a", "2.00", "USD"), priced("b", "2.50", "USD"), rng)
    row = next(m for m in same.metrics if m.name == "cost_per_million_tokens")
    assert row.change == pytest.approx(0.25)
    assert row.verdict is Verdict.REGRESSED
    other = compare(priced("a", "2.00", "USD"), priced("b", "2.50", "EUR"), rng)
    row = next(m for m in other.metrics if m.name == "cost_per_million_tokens")
    assert row.change is None
    assert row.note == "different currencies"
    # A side without a unit cost has no currency either: not measured, not "different".
    unpriced = dataclasses.replace(
        priced("a", "2.00", "USD"), cost_per_million_tokens=None, labels={}
    )
    one_side = compare(unpriced, priced("b", "2.50", "USD"), rng)
    row = next(m for m in one_side.metrics if m.name == "cost_per_million_tokens")
    assert row.change is None
    assert row.note == "not measured on both sides"


def test_a_baseline_survives_its_json_form():
    baseline = synthetic_run(np.random.default_rng(71), "json")
    assert from_dict(to_dict(baseline)) == baseline
    broken = to_dict(baseline)
    broken["latency"]["ttft"]["sketch"] = "bm90IGEgc2tldGNo"
    with pytest.raises(InvalidInput):
        from_dict(broken)
    with pytest.raises(InvalidInput, match="version"):
        from_dict({**to_dict(baseline), "version": 99})
    with pytest.raises(InvalidInput, match="malformed"):
        from_dict({"version": 1, "name": "x"})


@pytest.mark.parametrize("name", ["", "-x", "a b", "x" * 129, "a/b"])
def test_bad_names_are_refused(name):
    with pytest.raises(InvalidInput, match="baseline name"):
        from_samples(name, CREATED, duration_s=1.0, ttft_s=[], tpot_s=[], e2e_s=[])


def test_the_markdown_summary_leads_with_the_verdict_and_lists_every_measured_metric():
    rng = np.random.default_rng(81)
    before, after = synthetic_run(rng, "main"), synthetic_run(rng, "pr-42", slowdown=1.15)
    result = compare(before, after, np.random.default_rng(0))
    text = markdown(result)
    assert text.startswith("### ❌ infersight baseline check: regressed")
    assert "`ttft.p50`" in text
    assert "| `request_throughput` |" in text
    assert "`gpu_utilization`" in text.split("Not measured on both sides:")[1]
    data = comparison_dict(result)
    assert data["verdict"] == "regressed"
    assert [m["metric"] for m in data["metrics"]] == list(METRIC_NAMES)


@pytest.mark.parametrize(
    ("sentence", "change", "message"),
    [
        ("errors cannot exceed requests", {"requests": 5, "errors": 6}, "errors"),
        ("a duration is positive", {"duration_s": 0.0}, "duration"),
        ("throughput is finite", {"request_throughput": float("nan")}, "request_throughput"),
        ("utilisation is a ratio", {"gpu_utilization": 1.5}, "ratio"),
        ("cost is not negative", {"cost_per_million_tokens": Decimal("-1")}, "cost"),
        ("sources are known", {"source": "jmeter"}, "source"),
        ("labels are bounded", {"labels": {f"k{i}": "v" for i in range(40)}}, "labels"),
        ("created_at has a time zone", {"created_at": CREATED.replace(tzinfo=None)}, "timezone"),
    ],
)
def test_invalid_baselines_are_refused(sentence, change, message):
    valid = synthetic_run(np.random.default_rng(91), "valid", requests=100)
    values = {f: getattr(valid, f) for f in valid.__dataclass_fields__}
    with pytest.raises(InvalidInput, match=message):
        type(valid)(**{**values, **change})


class _CountingRng:
    """A generator that counts its multinomial draws (one per resampled sketch)."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)
        self.multinomials = 0

    def multinomial(self, *args, **kwargs):
        self.multinomials += 1
        return self._rng.multinomial(*args, **kwargs)


def test_each_sides_sketch_is_resampled_once_for_all_its_quantiles():
    """TTFT, TPOT and E2E on both sides: six draws, not one per quantile row (18)."""
    runs = np.random.default_rng(21)
    before, after = synthetic_run(runs, "before"), synthetic_run(runs, "after", slowdown=1.15)
    rng = _CountingRng(0)
    result = compare(before, after, rng)  # type: ignore[arg-type]
    assert rng.multinomials == 2 * 3
    assert verdicts(result)["ttft.p50"] is Verdict.REGRESSED
    assert next(m for m in result.metrics if m.name == "ttft.p50").test is StatTest.BOOTSTRAP
