"""Prometheus recording and alerting rules for infersight's SLOs and burn-rate policy.

For teams that alert from Prometheus: the rules reproduce what infersight's own evaluation
does (``core.burn``), from the API's ``/metrics``, with the same windows, thresholds,
minimum-events guard and hysteresis.

What the rules read. The API exports, per SLO and per policy window, the events counted and
the bad events among them (``infersight_slo_window_events`` and
``infersight_slo_window_bad_events``, gauges computed from the store at scrape time). Those are
deliberately not counters for Prometheus to ``rate()``: requests reach the store late and out
of order (sidecars spool and retry), their counts come exactly from raw rows for recent time
and from sketches of rollups for older time, and API replicas are stateless — a monotonic
"events since forever" counter could not be kept honest. Window counts make Prometheus's
verdict the same as infersight's, and ``max by (slo)`` makes any number of API replicas read
as one.

Goodput SLOs (``core.slo.SliKind.GOODPUT``: TTFT, TPOT and end-to-end targets that must hold
together for one request) get the same rules: their window gauges count the requests (or
output tokens) that met every target, which infersight judges per request from its records.
Rules written against an inference engine's own histograms could not say that — a
``vllm:time_to_first_token_seconds`` histogram and a ``vllm:time_per_output_token_seconds``
histogram each count requests apart, and no PromQL over two histograms says which requests met
both — so goodput is expressible only from infersight's gauges.

Per SLO, one rule group:

* recording rules ``slo:infersight_events``, ``slo:infersight_error_ratio`` and
  ``slo:infersight_burn_rate``, each with ``slo`` and ``window`` labels (burn rate = error
  ratio ÷ (1 − objective));
* one alert per severity (``InfersightSLOBurnRate``, labels ``severity`` and ``slo``) that
  fires when any of that severity's rules burns over both its long and its short window, with
  at least ``min_events`` in the long window, and that holds — as infersight does — while it
  already fires and one of its rules still burns at ``resolve_ratio`` × the rate. A page and
  a ticket may fire together; an Alertmanager inhibit rule (``severity="page"`` inhibits
  ``severity="ticket"`` with equal ``slo``) keeps the ticket quiet.

With the policy's ``resolve_after`` (``core.burn``), a rule fires only while its burn is
present (the shortest window burns at its rate too), and holding ends once the shortest window
has stayed cleared — events, and a burn below every rate of the severity — for
``resolve_after`` (``max_over_time`` of its recorded burn rate and ``min_over_time`` of its
events, ranges closed at both ends as Prometheus 2 reads them, which is infersight's "cleared
at every evaluation since"; Prometheus 3 opens ranges on the left, so there the hold ends one
evaluation earlier). Each severity is its own alert with its own hold, while infersight keeps
one incident at its highest severity: after a page, a ticket may go on firing here for up to
``resolve_after`` (inhibited while the page fires).

Pure: SLO specs and the policy in, the rule file's mapping (and its YAML text) out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any, Final

import yaml

from infersight.core.burn import Policy, Rule, Severity
from infersight.core.slo import GoodputUnit, SliKind, SloSpec, targets_text
from infersight.core.window import format_duration

EVENTS: Final = "infersight_slo_window_events"
BAD_EVENTS: Final = "infersight_slo_window_bad_events"
RECORDED_EVENTS: Final = "slo:infersight_events"
RECORDED_ERROR_RATIO: Final = "slo:infersight_error_ratio"
RECORDED_BURN_RATE: Final = "slo:infersight_burn_rate"
ALERT: Final = "InfersightSLOBurnRate"


def _number(value: float) -> str:
    """A PromQL literal: ``14.4``, ``6``, ``0.9``."""
    return f"{value:g}"


def _series(name: str, slo: str, window: str) -> str:
    return f'{name}{{slo="{slo}",window="{window}"}}'


def _recording_rules(spec: SloSpec, policy: Policy) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    budget = _number(spec.error_budget)
    for window in (format_duration(w) for w in policy.windows):
        labels = {"slo": spec.name, "window": window}
        rules += [
            {
                "record": RECORDED_EVENTS,
                "expr": f"max by (slo) ({_series(EVENTS, spec.name, window)})",
                "labels": labels,
            },
            {
                # No events: no ratio (a division by zero would record NaN).
                "record": RECORDED_ERROR_RATIO,
                "expr": (
                    f"max by (slo) ({_series(BAD_EVENTS, spec.name, window)})\n"
                    f"/ (max by (slo) ({_series(EVENTS, spec.name, window)}) > 0)"
                ),
                "labels": labels,
            },
            {
                "record": RECORDED_BURN_RATE,
                "expr": f"{_series(RECORDED_ERROR_RATIO, spec.name, window)} / {budget}",
                "labels": labels,
            },
        ]
    return rules


def _burns(spec: SloSpec, rule: Rule, factor: float = 1.0) -> str:
    """Both of ``rule``'s windows burn at ``factor`` × its rate."""
    rate = _number(rule.burn_rate * factor)
    long, short = format_duration(rule.long_window), format_duration(rule.short_window)
    return (
        f"{_series(RECORDED_BURN_RATE, spec.name, long)} >= {rate}\n"
        f"  and on (slo) {_series(RECORDED_BURN_RATE, spec.name, short)} >= {rate}"
    )


def _fires(spec: SloSpec, rule: Rule, policy: Policy) -> str:
    """The rule burns (with ``resolve_after``: and its burn is present now) and its long window
    holds at least ``min_events`` events."""
    condition = _burns(spec, rule)
    shortest = policy.windows[0]
    if policy.resolve_after and rule.short_window != shortest:
        now = _series(RECORDED_BURN_RATE, spec.name, format_duration(shortest))
        condition += f"\n  and on (slo) {now} >= {_number(rule.burn_rate)}"
    if policy.min_events:
        long = format_duration(rule.long_window)
        condition += (
            f"\n  and on (slo) {_series(RECORDED_EVENTS, spec.name, long)} >= {policy.min_events}"
        )
    return f"({condition})"


def _either(parts: Iterable[str]) -> str:
    return "\nor\n".join(parts)


def _alert(spec: SloSpec, policy: Policy, severity: Severity) -> dict[str, Any] | None:
    rules = [r for r in policy.rules if r.severity is severity]
    if not rules:
        return None
    fires = _either(_fires(spec, r, policy) for r in rules)
    expr = f"max by (slo) (\n{fires}\n)"
    if policy.resolve_ratio < 1.0 or policy.resolve_after:
        # Hysteresis, as core.burn.step: once firing, hold while a rule still burns at
        # resolve_ratio × its rate (ALERTS is this alert's own state at the last evaluation).
        holds = _either(f"({_burns(spec, r, policy.resolve_ratio)})" for r in rules)
        firing = (
            f'ALERTS{{alertname="{ALERT}",alertstate="firing",'
            f'severity="{severity.value}",slo="{spec.name}"}}'
        )
        hold = f"(\n{holds}\n)\n  and on (slo) {firing}"
        if policy.resolve_after:
            # ... and while the shortest window has not stayed cleared (events, and a burn
            # below every rate) at every evaluation of the last resolve_after.
            shortest = format_duration(policy.windows[0])
            now = _series(RECORDED_BURN_RATE, spec.name, shortest)
            heard = _series(RECORDED_EVENTS, spec.name, shortest)
            span = format_duration(policy.resolve_after)
            lowest = _number(min(r.burn_rate for r in rules))
            hold += (
                f"\n  and on (slo) (max_over_time({now}[{span}]) >= {lowest}"
                f"\n    or min_over_time({heard}[{span}]) == 0)"
            )
        expr += f"\nor\nmax by (slo) (\n{hold}\n)"
    windows = ", ".join(
        f"{_number(r.burn_rate)}× over {format_duration(r.long_window)} and "
        f"{format_duration(r.short_window)}"
        for r in rules
    )
    return {
        "alert": ALERT,
        "expr": expr,
        "labels": {"severity": severity.value, "slo": spec.name},
        "annotations": {
            "summary": f"SLO {spec.name} is burning its error budget ({severity.value})",
            "description": (
                f"{_describe(spec)} Burn rate {{{{ $value | humanize }}}} of at least one "
                f"rule: {windows}."
            ),
        },
    }


def _describe(spec: SloSpec) -> str:
    events = "requests"
    if spec.sli.kind is SliKind.LATENCY:
        what = f"{spec.sli.metric} ≤ {spec.sli.threshold_s:g} s"
    elif spec.sli.kind is SliKind.GOODPUT:
        what = f"succeeded and {targets_text(spec.sli)}"
        if spec.sli.per is GoodputUnit.TOKEN:
            events = "output tokens of requests"
    else:
        what = "requests succeed"
    return (
        f"Objective: {spec.objective * 100:g} % of {events} ({spec.scope}) with {what} over "
        f"{_days(spec.window)}."
    )


def _days(window: timedelta) -> str:
    """SLO windows read in days (``28d``, not ``4w``) when they are whole days."""
    seconds = int(window.total_seconds())
    return f"{seconds // 86400}d" if seconds % 86400 == 0 else format_duration(window)


def rule_groups(
    specs: Sequence[SloSpec], policy: Policy, interval: str | None = None
) -> dict[str, Any]:
    """The Prometheus rule file (``groups:``) for ``specs`` under ``policy``."""
    groups = []
    for spec in sorted(specs, key=lambda s: s.name):
        rules = _recording_rules(spec, policy)
        for severity in sorted(Severity, key=lambda s: s.rank, reverse=True):
            alert = _alert(spec, policy, severity)
            if alert is not None:
                rules.append(alert)
        group: dict[str, Any] = {"name": f"infersight-slo-{spec.name}"}
        if interval is not None:
            group["interval"] = interval
        group["rules"] = rules
        groups.append(group)
    return {"groups": groups}


class _Dumper(yaml.SafeDumper):
    """Block literals for multi-line PromQL, and no anchors for repeated label mappings."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def to_yaml(document: dict[str, Any]) -> str:
    """The rule file as Prometheus reads it (and people review it)."""
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
