"""Goodput as an SLO (issue 37, part 2): a request is good when it succeeded and its TTFT, TPOT
and end-to-end targets held *together*; per request or per output token.

The documents (infersight/v1 and OpenSLO), the store's counts against the reference
(``core.slo.count_events``) on SQLite and PostgreSQL, and the whole path on both stores: a
day of healthy traffic, then 25 minutes in which a quarter of the requests are slow to their
first token (but stream fast) and another quarter stream slowly (but start fast). A TTFT SLO
and a TPOT SLO on that traffic each stay under every burn-rate rule; the goodput SLOs (both
targets together) page, through the outbox to a Slack endpoint on a local HTTP socket, show on
the incident page and the overview, and resolve once the traffic is healthy again.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from infersight.alerts.notifiers.slack import SlackNotifier
from infersight.alerts.prometheus_rules import rule_groups
from infersight.api import create_app
from infersight.api.settings import ApiSettings
from infersight.core.errors import InvalidInput
from infersight.core.goodput import GoodLimits, GoodPolicy, limits_of
from infersight.core.query import Selector
from infersight.core.records import RequestRecord
from infersight.core.sequences import LateSequence, fold_late_sequence
from infersight.core.slo import (
    GoodputUnit,
    Sli,
    SliKind,
    SloSpec,
    count_events,
    goodput_sli,
    is_good,
    targets_text,
)
from infersight.core.window import Window
from infersight.service.evaluation import default_policy
from infersight.service.specs import parse_spec, parse_specs, to_document
from infersight.storage import cost as cost_store
from infersight.storage import slo_store
from infersight.storage.tables import requests
from infersight.storage.writer import open_writer
from tests.api.conftest import Api
from tests.conftest import Store
from tests.cost.scenario import MODEL as COST_MODEL
from tests.cost.scenario import gpu_series
from tests.doubles import FakeClock

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
MODEL = "llama-8b"
POLICY = default_policy()
BURN = timedelta(minutes=25)
STEP = timedelta(seconds=4)  # one request every 4 s
INTERVAL = timedelta(seconds=30)


def _slo(name: str, sli: Sli) -> SloSpec:
    return SloSpec(name, sli, 0.99, timedelta(days=28), Selector(model=MODEL))


TTFT = _slo("chat-ttft", Sli(SliKind.LATENCY, "ttft", 2.0))
TPOT = _slo("chat-tpot", Sli(SliKind.LATENCY, "tpot", 0.1))
GOODPUT = _slo("chat-goodput", goodput_sli(ttft_s=2.0, tpot_s=0.1))
GOODPUT_TOKENS = _slo("chat-goodput-tokens", goodput_sli(ttft_s=2.0, tpot_s=0.1, per="token"))
GOODPUT_E2E = _slo("chat-goodput-e2e", goodput_sli(ttft_s=2.0, e2e_s=10.0))
SLOS = (TTFT, TPOT, GOODPUT, GOODPUT_TOKENS)


def _record(n: int, start: datetime, ttft: float, tpot: float, output: int, **extra: Any) -> Any:
    values = {
        "trace_id": f"{n + 1:032x}", "span_id": f"{n + 1:016x}", "start": start,
        "instance": "gpu-0", "engine": "vllm", "model": MODEL, "tenant": "acme",
        "ttft_s": ttft, "tpot_s": tpot, "e2e_s": ttft + tpot * (output - 1),
        "input_tokens": 500, "output_tokens": output, **extra,
    }  # fmt: skip
    return RequestRecord(**values)


def traffic(since: datetime, until: datetime) -> list[RequestRecord]:
    """One request every 4 s (on one grid, however the span is cut) from ``since``; within
    ``[T0, T0 + BURN)`` one in four is slow to its first token (3 s, fast to stream) and one
    in four slow to stream (150 ms a token, fast to start, and three times as long); the rest
    are fast at both."""
    out = []
    epoch = T0 - timedelta(days=2)
    n = -((epoch - since) // STEP)  # the first step of the 4 s grid at or after ``since``
    while (at := epoch + n * STEP) < until:
        burning = T0 <= at < T0 + BURN
        if burning and n % 4 == 0:
            out.append(_record(n, at, 3.0, 0.03, 100))  # slow to first token only
        elif burning and n % 4 == 1:
            out.append(_record(n, at, 0.4, 0.15, 300))  # slow to stream only
        else:
            out.append(_record(n, at, 0.4, 0.03, 100))
        n += 1
    return out


# -- the SLI and its documents ------------------------------------------------------------


def test_a_request_is_good_only_when_every_target_holds_and_it_succeeded() -> None:
    sli = goodput_sli(ttft_s=2.0, tpot_s=0.1)
    fast = _record(0, T0, 0.4, 0.03, 100)
    assert is_good(fast, sli)
    assert not is_good(_record(1, T0, 3.0, 0.03, 100), sli)
    assert not is_good(_record(2, T0, 0.4, 0.15, 100), sli)
    assert not is_good(_record(3, T0, 0.4, 0.03, 100, status="error"), sli)
    # A measurement the engine did not report fails nothing (as for good tokens).
    assert is_good(_record(4, T0, 0.4, 0.03, 100, tpot_s=None), sli)
    records = [fast, _record(1, T0, 3.0, 0.03, 100), _record(2, T0, 0.4, 0.15, 300)]
    assert count_events(records, sli).total == 3
    assert count_events(records, sli).bad == 2
    tokens = count_events(records, goodput_sli(ttft_s=2.0, tpot_s=0.1, per="token"))
    assert (tokens.total, tokens.bad) == (500, 400)
    # Each single-metric SLI sees one bad request of three.
    assert count_events(records, TTFT.sli).bad == count_events(records, TPOT.sli).bad == 1


@pytest.mark.parametrize(
    ("sli", "message"),
    [
        ({"goodput": {}}, "at least one target"),
        ({"goodput": {"queue": "1s"}}, "queue"),
        ({"goodput": {"ttft": "-1s"}}, "threshold"),
        ({"goodput": {"ttft": "2s", "per": "second"}}, "per must be"),
        ({"goodput": {"ttft": "2s"}, "availability": {}}, "exactly one"),
    ],
)
def test_a_bad_goodput_document_is_refused_with_its_reason(
    sli: dict[str, Any], message: str
) -> None:
    document = {
        "apiVersion": "infersight/v1",
        "kind": "SLO",
        "metadata": {"name": "g"},
        "spec": {"sli": sli, "window": "28d", "objective": 0.99},
    }
    with pytest.raises(InvalidInput) as caught:
        parse_spec(document)
    assert message in str(caught.value) + json.dumps(caught.value.details)


def test_goodput_documents_round_trip_and_openslo_ratio_metrics_map_onto_them() -> None:
    [native] = parse_specs(
        """
apiVersion: infersight/v1
kind: SLO
metadata: {name: chat-goodput}
spec:
  sli: {goodput: {tpot: 100ms, ttft: 2s}}
  selector: {model: llama-8b}
  window: 28d
  objective: 99%
"""
    )
    assert native == GOODPUT
    assert to_document(native)["spec"]["sli"] == {
        "goodput": {"ttft": "2s", "tpot": "0.1s", "per": "request"}
    }
    assert parse_spec(to_document(GOODPUT_TOKENS)) == GOODPUT_TOKENS

    def openslo(good: dict[str, Any], total: dict[str, Any]) -> dict[str, Any]:
        source = {"metricSource": {"type": "infersight"}}
        return {
            "apiVersion": "openslo/v1",
            "kind": "SLO",
            "metadata": {"name": "chat-goodput"},
            "spec": {
                "budgetingMethod": "Occurrences",
                "timeWindow": [{"duration": "28d", "isRolling": True}],
                "objectives": [{"target": 0.99}],
                "indicator": {
                    "spec": {
                        "ratioMetric": {
                            "good": {**source, "metricSource": {**source["metricSource"],
                                                                "spec": good}},
                            "total": {**source, "metricSource": {**source["metricSource"],
                                                                 "spec": total}},
                        }
                    }
                },
            },
        }  # fmt: skip

    selector = {"selector": {"model": MODEL}}
    by_request = openslo(
        {"query": "good_requests", "ttft": "2s", "tpot": "100ms"},
        {"query": "requests", **selector},
    )
    assert parse_spec(by_request) == GOODPUT
    by_token = openslo(
        {"query": "good_output_tokens", "ttft": "2s", "tpot": 0.1},
        {"query": "output_tokens", **selector},
    )
    assert parse_spec(by_token) == _slo("chat-goodput", GOODPUT_TOKENS.sli)
    with pytest.raises(InvalidInput, match="goodput targets"):
        parse_spec(openslo({"query": "good_requests", "kv": "1"}, {"query": "requests"}))
    with pytest.raises(InvalidInput, match="ratioMetric"):
        parse_spec(openslo({"query": "good_requests"}, {"query": "output_tokens"}))


def test_goodput_slos_hold_good_tokens_to_their_targets_and_get_the_same_rules() -> None:
    policy = GoodPolicy.of([GOODPUT, TTFT], GoodLimits(ttft_s=9.0))
    rule = policy.rule_for({"model": MODEL, "instance": "gpu-0", "tenant": "acme"})
    assert rule.limits == GoodLimits(ttft_s=2.0, tpot_s=0.1)
    assert set(rule.slos) == {GOODPUT.name, TTFT.name}
    assert limits_of(GOODPUT.sli) == GoodLimits(ttft_s=2.0, tpot_s=0.1)
    [group] = rule_groups([GOODPUT_TOKENS], POLICY)["groups"]
    alerts = [r for r in group["rules"] if "alert" in r]
    assert {a["labels"]["severity"] for a in alerts} == {"page", "ticket"}
    described = alerts[0]["annotations"]["description"]
    assert "output tokens of requests" in described
    assert "succeeded and TTFT ≤ 2 s and TPOT ≤ 100 ms" in described


def test_the_targets_read_the_same_wherever_they_are_shown() -> None:
    """One wording (``core.slo.targets_text``) for the dashboard, the alert rules and the CLI."""
    sli = goodput_sli(ttft_s=2.0, tpot_s=0.1, e2e_s=0.00025)
    assert targets_text(sli) == "TTFT ≤ 2 s and TPOT ≤ 100 ms and E2E ≤ 250 µs"
    assert targets_text(sli, compact=True) == "ttft≤2s,tpot≤100ms,e2e≤250µs"
    assert targets_text(goodput_sli(e2e_s=12.5)) == "E2E ≤ 12.5 s"
    [group] = rule_groups([GOODPUT], POLICY)["groups"]
    described = next(r for r in group["rules"] if "alert" in r)["annotations"]["description"]
    assert targets_text(GOODPUT.sli) in described


# -- the store ------------------------------------------------------------------------------


def test_the_store_counts_goodput_as_the_reference_does(store: Store) -> None:
    records = traffic(T0 - timedelta(hours=3), T0 + timedelta(minutes=40))
    records.append(_record(10**6, T0 + timedelta(minutes=1), 0.4, 0.03, 100, status="error"))
    records.append(_record(10**6 + 1, T0 + timedelta(minutes=2), 0.4, 0.03, 7, tpot_s=None))
    other = _record(10**6 + 2, T0 + timedelta(minutes=3), 9.0, 0.5, 100, model="other")
    writer = open_writer(store.engine)
    writer.write_requests([*records, other])
    for spec in (GOODPUT, GOODPUT_TOKENS):
        slo_store.put_slo(store.engine, spec, T0)
        assert slo_store.get_slo(store.engine, spec.name) == spec
    now = T0 + timedelta(minutes=30, seconds=17)
    windows = sorted({*POLICY.windows, GOODPUT.window})
    with store.engine.connect() as connection:
        for spec in (GOODPUT, GOODPUT_TOKENS):
            counter = slo_store.CycleCounter(connection, now, cache=slo_store.RollupCache())
            counter.prepare(windows, [spec.sli])
            counted = counter.count(spec, windows)
            for length in windows:
                window = Window.last(length, now)
                mine = [r for r in records if r.start in window]
                assert counted[length] == count_events(mine, spec.sli), (spec.name, length)
                # The diagnosis's and the scaling's reads (any window, not only the cycle's).
                assert (
                    slo_store.count_events(connection, spec.sli, window, spec.selector)
                    == counted[length]
                )
            assert counted[timedelta(minutes=30)].bad > 0
            # Why they were bad: failed, one target alone, or several (the SLO page's table).
            window = Window.last(timedelta(hours=1), now)
            mine = [r for r in records if r.start in window]
            misses = slo_store.goodput_misses(connection, spec.sli, window, spec.selector)

            def weight(r: RequestRecord, sli: Sli = spec.sli) -> int:
                return 1 if sli.per is GoodputUnit.REQUEST else (r.output_tokens or 0)

            ok = [r for r in mine if not r.is_error]
            ttft = [r for r in ok if r.ttft_s is not None and r.ttft_s > 2.0]
            tpot = [r for r in ok if r.tpot_s is not None and r.tpot_s > 0.1]
            assert misses == {
                "events": sum(map(weight, mine)),
                "bad": count_events(mine, spec.sli).bad,
                "failed": sum(weight(r) for r in mine if r.is_error),
                "ttft": sum(map(weight, ttft)),
                "only_ttft": sum(weight(r) for r in ttft if r not in tpot),
                "tpot": sum(map(weight, tpot)),
                "only_tpot": sum(weight(r) for r in tpot if r not in ttft),
                "several": sum(weight(r) for r in ttft if r in tpot),
            }
            assert misses["only_ttft"] > 0
            assert misses["only_tpot"] > 0
            assert misses["failed"] > 0


def test_kept_hours_give_the_raw_answer_through_fresh_late_and_expired_data(store: Store) -> None:
    """Cycles with a ``RollupCache`` (each closed hour counted once, kept while its rollups'
    fingerprint holds) answer what raw rows answer, through fresh data, late data into an hour
    already counted, a late parallel-sampling sequence folded into a counted request (same
    request count, a good request turned bad), one with no tokens and status ok that changes
    only the E2E (against an SLI with an E2E target), and raw rows removed by retention while
    their rollups stay."""
    cache = slo_store.RollupCache()
    writer = open_writer(store.engine)
    present = traffic(T0 - timedelta(hours=8), T0)
    writer.write_requests(present)
    windows = sorted({*POLICY.windows, timedelta(days=1)})
    now = T0 + timedelta(seconds=17)
    counted_before = 0
    for cycle in range(9):
        fresh = traffic(now - timedelta(minutes=20), now)
        writer.write_requests([r for r in fresh if r.start >= T0])
        present += [r for r in fresh if r.start >= T0]
        if cycle == 3:  # late data into an hour counted three cycles ago
            late = [
                _record(10**7 + k, T0 - timedelta(hours=3, minutes=k), 5.0, 0.5, 50)
                for k in range(20)
            ]
            writer.write_requests(late)
            present += late
        if cycle == 4:  # a late parallel-sampling sequence folded into a counted hour
            stored = next(r for r in present if r.start >= T0 - timedelta(hours=2))
            sibling = dataclasses.replace(
                stored, span_id=f"{int(stored.span_id, 16) + 10**9:016x}", tpot_s=0.5,
                e2e_s=stored.ttft_s + 0.5 * 99,
            )  # fmt: skip
            merged = fold_late_sequence(stored, sibling)
            assert merged is not None
            assert count_events([merged], GOODPUT.sli).bad == 1
            key = (stored.start, stored.trace_id, stored.span_id)
            folded = writer.fold_sequences([LateSequence(key, sibling, (sibling.span_id,))])
            assert folded.inserted == 1
            present = [merged if r is stored else r for r in present]
        if cycle == 5:  # a late sequence with no tokens and status ok: only the E2E changes
            stored = next(
                r
                for r in present
                if r.start >= T0 - timedelta(hours=3)
                and count_events([r], GOODPUT_E2E.sli).bad == 0
            )
            sibling = dataclasses.replace(
                stored, span_id=f"{int(stored.span_id, 16) + 2 * 10**9:016x}", ttft_s=None,
                tpot_s=None, output_tokens=0, e2e_s=60.0, decode_s=None,
            )  # fmt: skip
            merged = fold_late_sequence(stored, sibling)
            assert merged is not None
            assert (merged.output_tokens, merged.status) == (stored.output_tokens, stored.status)
            assert count_events([merged], GOODPUT_E2E.sli).bad == 1
            key = (stored.start, stored.trace_id, stored.span_id)
            folded = writer.fold_sequences([LateSequence(key, sibling, (sibling.span_id,))])
            assert folded.inserted == 1
            present = [merged if r is stored else r for r in present]
        if cycle == 6:  # retention removes the oldest raw rows; their rollups stay
            cut = T0 - timedelta(hours=6, minutes=30)
            with store.engine.begin() as connection:
                connection.execute(requests.delete().where(requests.c.start < cut))
            present = [r for r in present if r.start >= cut]
        with store.engine.connect() as connection:
            for spec in (GOODPUT, GOODPUT_TOKENS, GOODPUT_E2E):
                kept = slo_store.CycleCounter(connection, now, cache=cache).count(spec, windows)
                raw = slo_store.CycleCounter(connection, now).count(spec, windows)
                assert kept == raw, (cycle, spec.name)
                for length in windows:
                    mine = [r for r in present if r.start in Window.last(length, now)]
                    assert kept[length] == count_events(mine, spec.sli), (cycle, length)
        hours = cache.stats.goodput_hours_counted - counted_before
        counted_before = cache.stats.goodput_hours_counted
        # The first cycle counts every closed hour of the day window (three SLIs); later ones
        # only the hour that closed, the two hours late data changed and the hour that holds
        # the oldest raw row (always counted afresh).
        if cycle == 0:
            assert hours >= 3 * 8
        else:
            assert hours <= 3 * 4, (cycle, hours)
        now += timedelta(minutes=20)


# -- the whole path -------------------------------------------------------------------------


class SlackHook:
    """A Slack incoming webhook on a local socket: keeps each JSON body it is posted."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                hook.bodies.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/services/T0/B0/x"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook() -> Iterator[SlackHook]:
    made = SlackHook()
    yield made
    made.close()


def _run(store: Store, hook: SlackHook, request: pytest.FixtureRequest) -> Iterator[Api]:
    """A day of healthy history at once, then 30 s intervals from ``T0`` with the app's own
    evaluation and delivery jobs after each; yields the API after every interval."""
    clock = FakeClock(T0)
    slack = SlackNotifier(hook.url, httpx.Client(timeout=30))
    settings = ApiSettings(run_jobs=False, cost_model=COST_MODEL.name)
    app = create_app(settings, store.engine, clock, notifiers={"slack": slack}, policy=POLICY)
    request.addfinalizer(app.state.context.jobs.stop)
    cost_store.put_model(store.engine, COST_MODEL, T0 - timedelta(days=2))
    for spec in SLOS:
        slo_store.put_slo(store.engine, spec, T0 - timedelta(days=2))
    writer = open_writer(store.engine)
    history = Window(T0 - timedelta(days=1), T0)
    writer.write_requests(traffic(history.start, history.end))
    writer.write_gpu_samples(gpu_series("gpu-0", Window(history.start, T0 + timedelta(hours=2)),
                                        0.6, 500.0))  # fmt: skip
    now = T0
    while now < T0 + timedelta(hours=1):
        writer.write_requests(traffic(now, now + INTERVAL))
        now += INTERVAL
        clock.now = now
        app.state.context.jobs.tick_evaluation()
        app.state.context.jobs.tick_delivery()
        yield Api(app, clock)


@pytest.mark.e2e
def test_goodput_pages_while_each_single_metric_slo_holds_and_then_resolves(
    store: Store, hook: SlackHook, request: pytest.FixtureRequest
) -> None:
    opened: dict[str, datetime] = {}
    resolved: dict[str, datetime] = {}
    worst: dict[str, float] = {}
    fired: set[str] = set()
    seen_page = None
    for api in _run(store, hook, request):
        now = api.clock.now
        for row in api.get("/api/v1/slos").json()["slos"]:
            name = row["metadata"]["name"]
            worst[name] = max(worst.get(name, 0.0), row["status"]["burn_rates"]["1h"])
            if row["status"]["firing"] is not None:
                fired.add(name)
        for incident in api.get("/api/v1/incidents?state=all").json()["incidents"]:
            opened.setdefault(incident["slo"], now)
            if incident["state"] == "resolved":
                resolved.setdefault(incident["slo"], now)
        if seen_page is None and GOODPUT.name in opened:
            # While it fires: its page, the overview's rows and its answer.
            [incident] = [
                i for i in api.get("/api/v1/incidents").json()["incidents"]
                if i["slo"] == GOODPUT.name
            ]  # fmt: skip
            seen_page = api.get(f"/ui/incidents/{incident['id']}").text
            overview = api.get("/ui/overview").text
            slo_page = api.get(f"/ui/slos/{GOODPUT.name}").text
            answer = api.get(f"/api/v1/slos/{GOODPUT.name}").json()
        done = {GOODPUT.name, GOODPUT_TOKENS.name} <= set(resolved)
        if done and any(b["text"].startswith("[RESOLVED]") for b in hook.bodies):
            break
    # Each single-metric SLO held: no rule fired at any evaluation, no incident, and its
    # 1 h burn stayed under the page rate, while the goodput SLOs burned past it.
    assert fired == {GOODPUT.name, GOODPUT_TOKENS.name}
    assert TTFT.name not in opened
    assert TPOT.name not in opened
    assert worst[TTFT.name] < 14.4
    assert worst[TPOT.name] < 14.4
    # Both goodput SLOs opened within the burn and resolved after it.
    for name in (GOODPUT.name, GOODPUT_TOKENS.name):
        assert T0 < opened[name] <= T0 + BURN, name
        assert resolved[name] > T0 + BURN, name
    assert worst[GOODPUT.name] >= 14.4
    # The page reached the local Slack endpoint through the outbox, and so did the resolve.
    pages = [b["text"] for b in hook.bodies if GOODPUT.name in b["text"]]
    assert pages, hook.bodies
    assert not pages[0].startswith("[RESOLVED]")
    assert any(t.startswith("[RESOLVED]") for t in pages)
    assert not any(TTFT.name in b["text"] or TPOT.name in b["text"] for b in hook.bodies)
    # The incident page says what the SLI holds together.
    assert seen_page is not None
    assert "goodput" in seen_page
    assert "TTFT ≤ 2" in seen_page
    assert "TPOT ≤ 100" in seen_page
    assert "together, per request" in seen_page
    # The overview row, with the cost per million good tokens of the scope.
    row = overview[overview.index(f'data-slo="{GOODPUT_TOKENS.name}"') :].split("</tr>")[0]
    assert "goodput: TTFT ≤ 2" in row
    assert "of output tokens" in row
    assert "per 1M good tokens" in row
    assert f'href="/ui/slos/{GOODPUT_TOKENS.name}' in row
    # The SLO's page: its targets together, why requests were bad (each target alone, not
    # both: the traffic never misses two at once), and its good tokens' cost.
    assert "goodput: succeeded with TTFT ≤ 2 s and TPOT ≤ 100 ms together" in slo_page
    misses = slo_page[slo_page.index('id="misses"') :].split("</section>")[0]
    assert "TTFT over 2 s only" in misses
    assert "TPOT over 100 ms only" in misses
    several = misses[misses.index("more than one target missed") :].split("</tr>")[0]
    assert '<td class="num">0</td>' in several
    assert "per million good tokens" in slo_page
    assert "incident #" in slo_page
    assert api.get("/ui/slos/no-such-slo").status_code == 404
    # The answer: the status, and its good tokens' cost under its own targets.
    assert answer["spec"]["sli"] == {"goodput": {"ttft": "2s", "tpot": "0.1s", "per": "request"}}
    cost = answer["good_token_cost"]
    window = Window(
        datetime.fromisoformat(cost["window"]["start"].replace("Z", "+00:00")),
        datetime.fromisoformat(cost["window"]["end"].replace("Z", "+00:00")),
    )
    written = traffic(T0 - timedelta(days=1), window.end)
    good = [r for r in written if r.start in window and is_good(r, GOODPUT.sli)]
    assert cost["good_tokens"] == sum(r.input_tokens + r.output_tokens for r in good)
    assert cost["good_tokens"] < cost["tokens"]
    per_million = Decimal(cost["cost"]) * 1_000_000 / cost["good_tokens"]
    assert abs(Decimal(cost["cost_per_million_good_tokens"]) - per_million) < Decimal("0.00001")
    assert Decimal(cost["cost"]) > 0
    assert answer["status"]["events"] == len([r for r in written if r.start in window])


def test_the_cli_applies_and_lists_a_goodput_slo(tmp_path: Path) -> None:
    spec = tmp_path / "goodput.yaml"
    spec.write_text(
        "apiVersion: infersight/v1\nkind: SLO\nmetadata: {name: chat-goodput}\n"
        "spec:\n  sli: {goodput: {ttft: 2s, tpot: 100ms, per: token}}\n"
        "  window: 7d\n  objective: 0.9\n",
        encoding="utf-8",
    )
    env = {**os.environ, "INFERSIGHT_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}"}
    command = [sys.executable, "-c", "from infersight.cli import main; main()", "slo"]
    applied = subprocess.run(
        [*command, "apply", str(spec)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert applied.returncode == 0, applied.stderr
    assert "created chat-goodput" in applied.stdout
    # per token: a one-line note that instant failures weigh nothing (not an error)
    [note] = [line for line in applied.stderr.splitlines() if line.startswith("note:")]
    assert "chat-goodput counts output tokens" in note
    assert "pair it with an availability or per-request SLO" in note
    per_request = tmp_path / "per-request.yaml"
    per_request.write_text(
        spec.read_text(encoding="utf-8").replace("per: token", "per: request"), encoding="utf-8"
    )
    again = subprocess.run(
        [*command, "apply", str(per_request)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    assert "updated chat-goodput" in again.stdout
    assert "note:" not in again.stderr
    # per token again, for the listing
    assert (
        subprocess.run(
            [*command, "apply", str(spec)], env=env, capture_output=True, timeout=300, check=False
        ).returncode
        == 0
    )
    listed = subprocess.run(
        [*command, "list"], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert listed.returncode == 0, listed.stderr
    assert "goodput ttft≤2s,tpot≤100ms/token" in listed.stdout
