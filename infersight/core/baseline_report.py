"""How a comparison is shown: a JSON-ready dict (API, ``--json``), a terminal table, and the
Markdown summary a CI job posts on a pull request.

Latency is shown in milliseconds, ratios as percentages; a change carries its confidence
interval when the metric had one, so a reader sees why a move was or was not called.
"""

from __future__ import annotations

from typing import Any, Final

from infersight.core.baseline_compare import Comparison, MetricComparison, Verdict

_ICON: Final = {
    Verdict.PASS: "✅",
    Verdict.REGRESSED: "❌",
    Verdict.IMPROVED: "🚀",
    Verdict.INCONCLUSIVE: "❔",
}


def comparison_dict(comparison: Comparison) -> dict[str, Any]:
    return {
        "baseline": comparison.baseline,
        "candidate": comparison.candidate,
        "verdict": comparison.verdict.value,
        "confidence": comparison.confidence,
        "metrics": [_metric_dict(m) for m in comparison.metrics],
    }


def _metric_dict(m: MetricComparison) -> dict[str, Any]:
    return {
        "metric": m.name,
        "unit": m.unit,
        "direction": m.direction.value,
        "baseline": m.baseline,
        "candidate": m.candidate,
        "change": m.change,
        "change_kind": "absolute" if m.absolute else "relative",
        "ci": None if m.ci_low is None else [m.ci_low, m.ci_high],
        "threshold": m.threshold,
        "test": m.test.value,
        "verdict": m.verdict.value,
        "note": m.note,
    }


def _value(m: MetricComparison, value: float | None) -> str:
    if value is None:
        return "–"
    if m.unit == "s":
        return f"{value * 1000:.1f} ms"
    if m.unit == "ratio":
        return f"{value:.2%}"
    if m.unit == "currency":
        return f"{value:.4f}"
    return f"{value:.2f} {m.unit}"


def _change(m: MetricComparison) -> str:
    if m.change is None:
        return "–"
    if m.absolute:
        text = f"{m.change * 100:+.2f} pp"
        if m.ci_low is not None and m.ci_high is not None:
            text += f" [{m.ci_low * 100:+.2f}, {m.ci_high * 100:+.2f}]"
        return text
    text = f"{m.change:+.1%}"
    if m.ci_low is not None and m.ci_high is not None:
        text += f" [{m.ci_low:+.1%}, {m.ci_high:+.1%}]"
    return text


def _threshold(m: MetricComparison) -> str:
    return f"±{m.threshold * 100:.2f} pp" if m.absolute else f"±{m.threshold:.0%}"


def table(comparison: Comparison) -> str:
    """A fixed-width table for the terminal."""
    lines = [
        f"baseline {comparison.baseline} vs {comparison.candidate}: {comparison.verdict.value}",
        f"{'METRIC':<26} {'BASELINE':>14} {'CANDIDATE':>14}  {'CHANGE [CI]':<30} "
        f"{'LIMIT':>10}  VERDICT",
    ]
    for m in comparison.metrics:
        lines.append(
            f"{m.name:<26} {_value(m, m.baseline):>14} {_value(m, m.candidate):>14}  "
            f"{_change(m):<30} {_threshold(m):>10}  {m.verdict.value}"
            + (f" ({m.note})" if m.note else "")
        )
    return "\n".join(lines)


def markdown(comparison: Comparison) -> str:
    """A pull-request comment: the verdict first, then every metric in one table."""
    verdict = comparison.verdict
    regressed = ", ".join(f"`{m.name}`" for m in comparison.regressed)
    headline = {
        Verdict.REGRESSED: f"Performance **regressed** ({regressed}).",
        Verdict.INCONCLUSIVE: "No regression shown, but some changes could not be told from "
        "noise (measure longer to decide).",
        Verdict.IMPROVED: "Performance **improved**; nothing regressed.",
        Verdict.PASS: "No change beyond the thresholds.",
    }[verdict]
    lines = [
        f"### {_ICON[verdict]} infersight baseline check: {verdict.value}",
        "",
        f"Candidate `{comparison.candidate}` against baseline `{comparison.baseline}`. " + headline,
        "",
        f"| Metric | Baseline | Candidate | Change [{comparison.confidence:.0%} CI] | Threshold "
        "| Verdict |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for m in comparison.metrics:
        if m.change is None:
            continue
        lines.append(
            f"| `{m.name}` | {_value(m, m.baseline)} | {_value(m, m.candidate)} | {_change(m)} "
            f"| {_threshold(m)} | {_ICON[m.verdict]} {m.verdict.value} |"
        )
    skipped = [m.name for m in comparison.metrics if m.change is None]
    if skipped:
        lines += ["", "Not measured on both sides: " + ", ".join(f"`{n}`" for n in skipped) + "."]
    lines += [
        "",
        "A metric regresses only when its whole confidence interval lies beyond the threshold "
        "on the worse side.",
    ]
    return "\n".join(lines) + "\n"
