"""``infersight slo export-rules``: Prometheus rules that Prometheus accepts and that decide
as infersight does.

The rule file passes a real ``promtool check rules``; then ``promtool test rules`` evaluates
the rules with Prometheus's own engine on window counts, and the alerts it fires must be the
ones ``core.burn`` fires for the same counts — minimum-events guard and hysteresis included.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from infersight.alerts.prometheus_rules import ALERT, rule_groups, to_yaml
from infersight.cli.commands_slo import slo
from infersight.cli.settings import Settings
from infersight.core.burn import AlertState, Policy, Severity, evaluate, step
from infersight.core.errors import SchemaMissing
from infersight.core.query import Selector
from infersight.core.slo import EventCounts, Sli, SliKind, SloSpec
from infersight.core.window import format_duration
from infersight.service.evaluation import default_policy
from infersight.storage import migrate
from infersight.storage.engine import create_store_engine

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None and not os.environ.get("CI"),
    reason="promtool is not installed (Debian's prometheus package; CI installs it)",
)
POLICY = default_policy()
SPEC = SloSpec(
    "chat-ttft",
    Sli(SliKind.LATENCY, "ttft", 2.0),
    0.999,
    timedelta(days=28),
    Selector(model="llama"),
)


def _promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *map(str, args)], capture_output=True, text=True, timeout=60, check=False
    )


def _counts(bad_share: dict[str, float], events: int) -> dict[timedelta, EventCounts]:
    """Counts per policy window: ``events`` each, ``bad_share`` of them bad (default 0)."""
    out = {}
    for window in POLICY.windows:
        share = bad_share.get(format_duration(window), 0.0)
        out[window] = EventCounts(events, round(events * share))
    return out


def _series(counts_over_time: list[dict[timedelta, EventCounts]]) -> list[dict[str, str]]:
    """promtool input series: one value per minute per window, as the API would export."""
    series = []
    for window in POLICY.windows:
        label = format_duration(window)
        for name, pick in (("events", "total"), ("bad_events", "bad")):
            values = " ".join(str(getattr(c[window], pick)) for c in counts_over_time)
            series.append(
                {
                    "series": f'infersight_slo_window_{name}{{slo="{SPEC.name}",window="{label}"}}',
                    "values": values,
                }
            )
    return series


def _expected(
    policy: Policy, counts_over_time: list[dict[timedelta, EventCounts]]
) -> list[set[str]]:
    """Severities alerting after each minute, by ``core.burn``'s verdicts applied to each
    severity apart (the exported rules keep one alert per severity): one
    whose burn fires (and is present now), or one that was alerting and still holds (its rules
    burn at ``resolve_ratio`` × rate) while its symptom has not stayed cleared for
    ``resolve_after`` (one evaluation a minute)."""
    out: list[set[str]] = []
    cleared_for: dict[str, int] = {}
    settle = int(policy.resolve_after.total_seconds() // 60)
    for counts in counts_over_time:
        evaluation = evaluate(policy, SPEC.objective, counts)
        shortest = evaluation.burn_rates[policy.windows[0]]
        fired = {
            r.severity.value
            for r in evaluation.fired_rules
            if not policy.resolve_after or shortest >= r.burn_rate
        }
        for severity in Severity:
            cleared = severity in evaluation.cleared
            cleared_for[severity.value] = cleared_for.get(severity.value, -1) + 1 if cleared else -1
        held = {
            s.value
            for s in evaluation.holding
            if not policy.resolve_after or cleared_for[s.value] < settle
        } & (out[-1] if out else set())
        out.append(fired | held)
    return out


def _run_promtool_test(
    tmp_path: Path,
    counts_over_time: list[dict[timedelta, EventCounts]],
    expected: list[set[str]],
    policy: Policy = POLICY,
) -> None:
    rules = to_yaml(rule_groups([SPEC], policy))
    (tmp_path / "rules.yml").write_text(rules, encoding="utf-8")
    checks = [
        {
            "expr": f'ALERTS{{alertname="{ALERT}",alertstate="firing"}}',
            "eval_time": f"{minute}m",
            "exp_samples": [
                {
                    "labels": (
                        f'ALERTS{{alertname="{ALERT}",alertstate="firing",'
                        f'severity="{severity}",slo="{SPEC.name}"}}'
                    ),
                    "value": 1,
                }
                for severity in sorted(severities)
            ],
        }
        for minute, severities in enumerate(expected)
    ]
    test = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": _series(counts_over_time),
                "promql_expr_test": checks,
            }
        ],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test), encoding="utf-8")
    done = _promtool("test", "rules", tmp_path / "test.yml")
    assert done.returncode == 0, done.stdout + done.stderr


ALL = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")
CASES = {
    "a total outage at 99.9 % pages (and opens a ticket)": (dict.fromkeys(ALL, 1.0), 1000),
    "no events, no alert": ({}, 0),
    "a trickle of failures under the minimum events alerts nobody": (dict.fromkeys(ALL, 1.0), 40),
    "a 10× burn pages through the 6h / 30m rule only": (dict.fromkeys(ALL, 0.01), 5000),
    "a 2× burn over days opens a ticket, no page": (dict.fromkeys(ALL, 0.002), 5000),
    "a spike in the last five minutes alone fires nothing": ({"5m": 0.5}, 5000),
    "a healthy service alerts nobody": (dict.fromkeys(ALL, 0.0005), 5000),
}


@needs_promtool
def test_the_exported_rules_pass_promtool_check_rules(tmp_path: Path) -> None:
    path = tmp_path / "rules.yml"
    specs = str(resources.files("infersight.cli").joinpath("demo_slos.yaml"))
    done = subprocess.run(
        [sys.executable, "-c", "from infersight.cli import main; main()", "slo", "export-rules",
         specs, "-o", str(path), "--interval", "30s"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    checked = _promtool("check", "rules", path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # 4 demo SLOs × (3 recordings per policy window + one alert per severity)
    assert f"SUCCESS: {4 * (3 * len(POLICY.windows) + 2)} rules found" in checked.stdout


@needs_promtool
@pytest.mark.parametrize("case", list(CASES))
def test_prometheus_fires_what_infersight_fires(tmp_path: Path, case: str) -> None:
    shares, events = CASES[case]
    timeline = [_counts(shares, events)] * 3
    _run_promtool_test(tmp_path, timeline, _expected(POLICY, timeline))


@needs_promtool
def test_an_open_page_holds_while_it_burns_at_the_resolve_ratio_then_resolves(
    tmp_path: Path,
) -> None:
    fast = ("5m", "1h")
    burning = _counts(dict.fromkeys(fast, 0.02), 5000)  # 20× over 1h and 5m: pages
    hovering = _counts(dict.fromkeys(fast, 0.0135), 5000)  # 13.5×: under 14.4, over 0.9 × 14.4
    cooled = _counts(dict.fromkeys(fast, 0.012), 5000)  # 12×: under the hold
    timeline = [hovering, burning, burning, hovering, hovering, cooled, hovering]
    expected = _expected(POLICY, timeline)
    # The story the table tells, as infersight decides it: hovering alone never opens an
    # alert, but holds one that is open; cooling resolves it and hovering does not reopen it.
    assert expected == [set(), {"page"}, {"page"}, {"page"}, {"page"}, set(), set()]
    _run_promtool_test(tmp_path, timeline, expected)


@needs_promtool
def test_a_page_whose_burn_stopped_resolves_after_resolve_after_as_infersight_resolves_it(
    tmp_path: Path,
) -> None:
    memory = ("30m", "1h", "2h", "6h", "1d", "3d")
    burning = _counts(dict.fromkeys(ALL, 0.05), 5000)  # 50× everywhere: pages
    stopped = _counts(dict.fromkeys(memory, 0.05), 5000)  # the 5 m window has forgotten it
    settle = int(POLICY.resolve_after.total_seconds() // 60)
    timeline = [burning] * 3 + [stopped] * (settle + 4)
    expected = _expected(POLICY, timeline)
    # Open for the burn and for resolve_after (5 minutes) of memory, then resolved although
    # every long window still burns over every rate; the memory never reopens it.
    assert expected[:3] == [{"page", "ticket"}] * 3
    assert expected[3 : 3 + settle] == [{"page", "ticket"}] * settle
    assert expected[3 + settle :] == [set()] * 4
    _run_promtool_test(tmp_path, timeline, expected)
    # infersight's one incident (its highest severity) opens and resolves at the same minutes.
    assert _stepped(POLICY, timeline) == [max(e, key=_RANK.get, default=None) for e in expected]


_RANK = {"ticket": 1, "page": 2}


def _stepped(policy: Policy, timeline: list[dict[timedelta, EventCounts]]) -> list[str | None]:
    """infersight's alert severity after each minute (``core.burn.step``)."""
    state, out = AlertState(), []
    for minute, counts in enumerate(timeline):
        at = datetime(2026, 1, 5, tzinfo=UTC) + timedelta(minutes=minute)
        state, _ = step(state, evaluate(policy, SPEC.objective, counts), at)
        out.append(state.severity.value if state.severity else None)
    return out


@needs_promtool
def test_without_hysteresis_resolve_after_still_holds_the_exported_alert(tmp_path: Path) -> None:
    policy = dataclasses.replace(POLICY, resolve_ratio=1.0)
    memory = ("30m", "1h", "2h", "6h", "1d", "3d")
    timeline = [_counts(dict.fromkeys(ALL, 0.05), 5000)] * 3
    timeline += [_counts(dict.fromkeys(memory, 0.05), 5000)] * 8
    expected = _expected(policy, timeline)
    settle = int(policy.resolve_after.total_seconds() // 60)
    assert expected[3 : 3 + settle] == [{"page", "ticket"}] * settle
    assert expected[3 + settle :] == [set()] * (8 - settle)
    _run_promtool_test(tmp_path, timeline, expected, policy)
    assert _stepped(policy, timeline) == [max(e, key=_RANK.get, default=None) for e in expected]


@needs_promtool
def test_a_shortest_window_without_events_is_no_sign_of_recovery(tmp_path: Path) -> None:
    burning = _counts(dict.fromkeys(ALL, 0.05), 5000)
    silent = _counts(dict.fromkeys(ALL, 0.05), 5000)
    silent[POLICY.windows[0]] = EventCounts(0, 0)  # no request in the last 5 minutes
    timeline = [burning] * 3 + [silent] * 8
    expected = _expected(POLICY, timeline)
    assert expected == [{"page", "ticket"}] * 11  # held by the long windows, never cleared
    _run_promtool_test(tmp_path, timeline, expected)
    assert _stepped(POLICY, timeline) == ["page"] * 11


def test_rules_cover_every_slo_and_policy_window_with_the_slo_s_own_budget() -> None:
    other = SloSpec("api-availability", Sli(SliKind.AVAILABILITY), 0.99, timedelta(days=7))
    document = rule_groups([SPEC, other], POLICY, interval="30s")
    groups = {g["name"]: g for g in document["groups"]}
    assert set(groups) == {"infersight-slo-chat-ttft", "infersight-slo-api-availability"}
    for spec in (SPEC, other):
        group = groups[f"infersight-slo-{spec.name}"]
        assert group["interval"] == "30s"
        burns = [r for r in group["rules"] if r.get("record") == "slo:infersight_burn_rate"]
        assert [r["labels"]["window"] for r in burns] == [
            format_duration(w) for w in POLICY.windows
        ]
        assert all(r["expr"].endswith(f"/ {spec.error_budget:g}") for r in burns)
        alerts = [r for r in group["rules"] if "alert" in r]
        assert sorted(a["labels"]["severity"] for a in alerts) == ["page", "ticket"]


@dataclass
class _Obj:
    settings: Settings


def test_export_rules_reads_the_stored_slos_and_refuses_when_there_are_none(
    tmp_path: Path,
) -> None:
    obj = _Obj(Settings(database_url=f"sqlite:///{tmp_path / 'cli.db'}"))
    runner = CliRunner()
    unmigrated = runner.invoke(slo, ["export-rules"], obj=obj)
    assert isinstance(unmigrated.exception, SchemaMissing)  # exit 4 under `infersight` (#16)
    assert "infersight db upgrade" in unmigrated.exception.message
    engine = create_store_engine(obj.settings.database_url)
    migrate.upgrade(engine)
    engine.dispose()
    empty = runner.invoke(slo, ["export-rules"], obj=obj)
    assert empty.exit_code == 1
    assert "no SLOs to export" in empty.output
    specs = str(resources.files("infersight.cli").joinpath("demo_slos.yaml"))
    assert runner.invoke(slo, ["apply", specs], obj=obj).exit_code == 0
    exported = runner.invoke(slo, ["export-rules"], obj=obj)
    assert exported.exit_code == 0, exported.output
    document = yaml.safe_load(exported.output)
    assert [g["name"] for g in document["groups"]] == [
        "infersight-slo-chat-70b-tpot",
        "infersight-slo-chat-8b-tpot",
        "infersight-slo-chat-8b-ttft",
        "infersight-slo-fleet-availability",
    ]
    bad = runner.invoke(slo, ["export-rules", "--interval", "soon"], obj=obj)
    assert bad.exit_code == 2
    assert "expected a duration" in bad.output
