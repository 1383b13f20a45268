"""Goodput SLOs' Prometheus rules (issue 37): promtool checks them, and on the window counts the
API's ``/metrics`` exports for real traffic, Prometheus fires what infersight fires.

The traffic is ``tests.service.test_goodput_slo``'s: a healthy day, then 25 minutes in which a
quarter of the requests are slow to their first token only and another quarter slow to stream
only. Each minute of the hour after, ``/metrics`` (the app over SQLite or PostgreSQL) is read
as Prometheus would scrape it; its ``infersight_slo_window_*`` samples become ``promtool test
rules`` input for the rules ``slo export-rules`` writes for all four SLOs. The goodput SLOs
page in Prometheus at the minutes ``core.burn`` says they do; the TTFT-only and TPOT-only SLOs
fire nothing there either.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import yaml

from infersight.alerts.prometheus_rules import ALERT, rule_groups, to_yaml
from infersight.api import create_app
from infersight.api.settings import ApiSettings
from infersight.core.burn import Policy, Severity, evaluate
from infersight.core.slo import EventCounts, SloSpec
from infersight.core.window import format_duration
from infersight.storage import slo_store
from infersight.storage.writer import open_writer
from tests.api.conftest import Api
from tests.conftest import Store
from tests.doubles import FakeClock
from tests.interop.test_prometheus_rules import _promtool, needs_promtool
from tests.service.test_goodput_slo import (
    GOODPUT,
    GOODPUT_TOKENS,
    POLICY,
    SLOS,
    T0,
    TPOT,
    TTFT,
    traffic,
)

MINUTES = 45
_SAMPLE = re.compile(
    r'^infersight_slo_window_(events|bad_events)\{slo="([^"]+)",window="([^"]+)"\} (\S+)$'
)


def _scraped(store: Store) -> list[dict[str, dict[timedelta, EventCounts]]]:
    """Per minute from ``T0``: each SLO's window counts as ``/metrics`` exported them."""
    clock = FakeClock(T0)
    app = create_app(ApiSettings(run_jobs=False, metrics_cache_s=0), store.engine, clock)
    api = Api(app, clock)
    for spec in SLOS:
        slo_store.put_slo(store.engine, spec, T0 - timedelta(days=2))
    writer = open_writer(store.engine)
    writer.write_requests(traffic(T0 - timedelta(days=1), T0))
    windows = {format_duration(w): w for w in POLICY.windows}
    out = []
    for minute in range(MINUTES):
        now = T0 + timedelta(minutes=minute)
        writer.write_requests(traffic(now - timedelta(minutes=1), now) if minute else [])
        clock.now = now
        text = api.get("/metrics").text
        found: dict[str, dict[timedelta, list[int]]] = {}
        for line in text.splitlines():
            match = _SAMPLE.match(line)
            if match and match[3] in windows:
                name, slo, window, value = match.groups()
                pair = found.setdefault(slo, {}).setdefault(windows[window], [0, 0])
                pair[name == "bad_events"] = int(float(value))
        out.append({slo: {w: EventCounts(*p) for w, p in c.items()} for slo, c in found.items()})
    return out


def _expected(
    spec: SloSpec, policy: Policy, timeline: list[dict[timedelta, EventCounts]]
) -> list[set[str]]:
    """Severities alerting after each minute by ``core.burn`` (each severity apart, as the
    exported rules keep them), as ``tests.interop.test_prometheus_rules`` derives them."""
    out: list[set[str]] = []
    cleared_for: dict[str, int] = {}
    settle = int(policy.resolve_after.total_seconds() // 60)
    for counts in timeline:
        evaluation = evaluate(policy, spec.objective, counts)
        shortest = evaluation.burn_rates[policy.windows[0]]
        fired = {r.severity.value for r in evaluation.fired_rules if shortest >= r.burn_rate}
        for severity in Severity:
            cleared = severity in evaluation.cleared
            cleared_for[severity.value] = cleared_for.get(severity.value, -1) + 1 if cleared else -1
        held = {s.value for s in evaluation.holding if cleared_for[s.value] < settle} & (
            out[-1] if out else set()
        )
        out.append(fired | held)
    return out


def _series(name: str, slo: str, window: str) -> str:
    return f'infersight_slo_window_{name}{{slo="{slo}",window="{window}"}}'


@needs_promtool
def test_goodput_rules_fire_in_prometheus_as_in_infersight_on_exported_counts(
    store: Store, tmp_path: Path
) -> None:
    scraped = _scraped(store)
    rules = tmp_path / "rules.yml"
    rules.write_text(to_yaml(rule_groups(SLOS, POLICY, interval="1m")), encoding="utf-8")
    checked = _promtool("check", "rules", rules)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(SLOS) * (3 * len(POLICY.windows) + 2)} rules found" in checked.stdout
    series, checks = [], []
    expected = {}
    for spec in SLOS:
        timeline = [minute[spec.name] for minute in scraped]
        expected[spec.name] = _expected(spec, POLICY, timeline)
        for window in POLICY.windows:
            label = format_duration(window)
            for name, pick in (("events", "total"), ("bad_events", "bad")):
                values = " ".join(str(getattr(c[window], pick)) for c in timeline)
                series.append(
                    {
                        "series": _series(name, spec.name, label),
                        "values": values,
                    }
                )
    # The story the scraped counts tell: the goodput SLOs page within the burn; the
    # single-metric SLOs on the same traffic never alert.
    assert not any(expected[TTFT.name])
    assert not any(expected[TPOT.name])
    for name in (GOODPUT.name, GOODPUT_TOKENS.name):
        assert any("page" in e for e in expected[name][:25]), name
        assert expected[name][-1] == set(), name
    for minute in range(MINUTES):
        samples = [
            {
                "labels": (
                    f'ALERTS{{alertname="{ALERT}",alertstate="firing",'
                    f'severity="{severity}",slo="{name}"}}'
                ),
                "value": 1,
            }
            for name in sorted(expected)
            for severity in sorted(expected[name][minute])
        ]
        checks.append(
            {
                "expr": f'ALERTS{{alertname="{ALERT}",alertstate="firing"}}',
                "eval_time": f"{minute}m",
                "exp_samples": samples,
            }
        )
    test = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": checks}],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test), encoding="utf-8")
    done = _promtool("test", "rules", tmp_path / "test.yml")
    assert done.returncode == 0, done.stdout + done.stderr
