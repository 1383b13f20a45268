"""Notifier payloads against the documented Slack Block Kit, PagerDuty Events v2 and
Alertmanager v2 shapes, sent through ``httpx.MockTransport``; HTTP outcome classification."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from infersight.alerts.notifiers.alertmanager import AlertmanagerNotifier
from infersight.alerts.notifiers.pagerduty import PagerDutyNotifier
from infersight.alerts.notifiers.slack import SlackNotifier
from infersight.alerts.notify import Event, Notification, post_json, retry_after_s
from infersight.alerts.routing import Route, Router, router_from_data
from infersight.config.parts import NotifierPart
from infersight.core.errors import ConfigurationError, InvalidInput
from infersight.service.notifications import notifiers_from_settings

AT = datetime(2026, 1, 5, 9, 26, tzinfo=UTC)
SLACK_URL = "https://hooks.slack.test/services/T000/B000/secret-path-42"
ROUTING_KEY = "R0UT1NGKEY-very-secret-0123456789ab"
DIAGNOSIS = {
    "cause": "gpu_throttled",
    "confidence": 0.93,
    "instance": "vllm-70b-0",
    "evidence": [
        {"signal": "throttled_share", "current": 0.98, "baseline": 0.0, "ratio": None},
        {"signal": "sm_clock_mhz", "current": 1104.0, "baseline": 1980.0, "ratio": 0.557},
    ],
    "alternatives": [{"cause": "instance_degraded", "confidence": 0.3}],
}


def notification(event: Event = Event.TRIGGER, severity: str = "page") -> Notification:
    return Notification(
        incident_id=7,
        slo="70b-tpot",
        scope="model=llama-70b",
        severity=severity,
        event=event,
        at=AT if event is Event.TRIGGER else AT + timedelta(minutes=30),
        opened_at=AT,
        labels={"slo": "70b-tpot", "severity": severity, "model": "llama-70b"},
        symptom={"slo": "70b-tpot", "burn_rates": {"5m": 48.0, "1h": 16.2}},
        diagnosis=DIAGNOSIS,
        dashboard_url="http://127.0.0.1:8080/incidents/7",
    )


class Recorder:
    """A transport-level fake endpoint: records requests, answers from a script."""

    def __init__(self, *answers: httpx.Response) -> None:
        self.requests: list[httpx.Request] = []
        self.answers = list(answers)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answers.pop(0) if self.answers else httpx.Response(202)

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self))

    def bodies(self) -> list[Any]:
        return [json.loads(r.content) for r in self.requests]


def _check_text(obj: dict[str, Any], kinds: tuple[str, ...], limit: int) -> None:
    assert obj["type"] in kinds
    assert 0 < len(obj["text"]) <= limit


def test_slack_message_follows_block_kit_and_carries_symptom_cause_evidence_link() -> None:
    fake = Recorder(httpx.Response(200, text="ok"))
    slack = SlackNotifier(SLACK_URL, fake.client())
    payload = slack.render(notification())
    assert slack.send(payload).ok
    [request] = fake.requests
    assert str(request.url) == SLACK_URL
    assert request.headers["content-type"] == "application/json"
    body = fake.bodies()[0]
    assert "gpu_throttled" in body["text"]  # the fallback for notifications
    blocks = body["blocks"]
    assert 0 < len(blocks) <= 50
    kinds = [b["type"] for b in blocks]
    assert kinds[0] == "header"
    _check_text(blocks[0]["text"], ("plain_text",), 150)
    for block in blocks:
        assert block["type"] in ("header", "section", "actions", "context", "divider")
        if block["type"] == "section":
            if "text" in block:
                _check_text(block["text"], ("mrkdwn", "plain_text"), 3000)
            for field in block.get("fields", []):
                _check_text(field, ("mrkdwn", "plain_text"), 2000)
            assert len(block.get("fields", [])) <= 10
    text = json.dumps(blocks, ensure_ascii=False)
    assert "gpu_throttled" in text
    assert "sm_clock_mhz" in text
    assert "5m ×48.0" in text
    [actions] = [b for b in blocks if b["type"] == "actions"]
    assert actions["elements"][0]["url"] == "http://127.0.0.1:8080/incidents/7"
    assert actions["elements"][0]["type"] == "button"


def test_pagerduty_trigger_and_resolve_share_a_dedup_key_and_map_severities() -> None:
    fake = Recorder()
    pd = PagerDutyNotifier(ROUTING_KEY, fake.client(), url="https://events.pd.test/v2/enqueue")
    trigger = pd.render(notification())
    ticket = pd.render(notification(severity="ticket"))
    resolve = pd.render(notification(Event.RESOLVE))
    assert ROUTING_KEY not in json.dumps([trigger, ticket, resolve])  # stored payloads hold no key
    for payload in (trigger, resolve):
        assert pd.send(payload).ok
    sent_trigger, sent_resolve = fake.bodies()
    assert sent_trigger["routing_key"] == sent_resolve["routing_key"] == ROUTING_KEY
    assert sent_trigger["event_action"] == "trigger"
    assert sent_resolve["event_action"] == "resolve"
    assert sent_trigger["dedup_key"] == sent_resolve["dedup_key"]
    assert len(sent_trigger["dedup_key"]) <= 255
    body = sent_trigger["payload"]
    assert {"summary", "source", "severity"} <= set(body)
    assert 0 < len(body["summary"]) <= 1024
    assert body["severity"] == "critical"
    assert ticket["payload"]["severity"] == "warning"
    assert body["severity"] in ("critical", "error", "warning", "info")
    datetime.fromisoformat(body["timestamp"].replace("Z", "+00:00"))
    assert body["custom_details"]["diagnosis"]["cause"] == "gpu_throttled"
    assert body["custom_details"]["diagnosis"]["evidence"][1]["signal"] == "sm_clock_mhz"
    assert sent_trigger["links"][0]["href"] == "http://127.0.0.1:8080/incidents/7"


FALLBACK = {
    "cause": "decode_bound",
    "confidence": 0.45,
    "instance": "vllm-70b-0",
    "evidence": [{"signal": "tpot_p90", "current": 0.04, "baseline": 0.017, "ratio": 2.4}],
    "alternatives": [{"cause": "instance_degraded", "confidence": 0.2}],
    "missing_evidence": [
        "no GPU samples for vllm-70b-0: cannot tell compute from memory bandwidth, "
        "nor see clock throttling"
    ],
}


def test_every_notifier_names_a_fallback_cause_and_what_evidence_was_missing() -> None:
    n = dataclasses.replace(notification(), diagnosis=FALLBACK)
    assert "likely decode_bound (45%) on vllm-70b-0" in n.summary()
    slack = SlackNotifier(SLACK_URL, Recorder().client()).render(n)
    text = json.dumps(slack["blocks"], ensure_ascii=False)
    assert "`decode_bound`" in text
    assert "Not checked (missing telemetry)" in text
    assert "no GPU samples for vllm-70b-0: cannot tell compute from memory bandwidth" in text
    pd = PagerDutyNotifier(ROUTING_KEY, Recorder().client()).render(n)
    assert pd["payload"]["class"] == "decode_bound"
    details = pd["payload"]["custom_details"]
    assert details["missing_evidence"] == FALLBACK["missing_evidence"]
    assert details["diagnosis"]["missing_evidence"] == FALLBACK["missing_evidence"]
    [alert] = AlertmanagerNotifier("http://127.0.0.1:9093", Recorder().client()).render(n)["alerts"]
    assert alert["annotations"]["cause"] == "decode_bound"
    assert alert["annotations"]["missing_evidence"] == FALLBACK["missing_evidence"][0]
    # With every signal family there, nothing is said about missing evidence.
    full = SlackNotifier(SLACK_URL, Recorder().client()).render(notification())
    assert "Not checked" not in json.dumps(full["blocks"])
    [am] = AlertmanagerNotifier("http://127.0.0.1:9093", Recorder().client()).render(
        notification()
    )["alerts"]
    assert "missing_evidence" not in am["annotations"]
    assert (
        PagerDutyNotifier(ROUTING_KEY, Recorder().client()).render(notification())["payload"][
            "custom_details"
        ]["missing_evidence"]
        == []
    )


def test_alertmanager_gets_v2_alerts_that_end_at_resolution() -> None:
    fake = Recorder(httpx.Response(200), httpx.Response(200))
    am = AlertmanagerNotifier("http://127.0.0.1:9093/", fake.client())
    assert am.send(am.render(notification())).ok
    assert am.send(am.render(notification(Event.RESOLVE))).ok
    assert [str(r.url) for r in fake.requests] == ["http://127.0.0.1:9093/api/v2/alerts"] * 2
    [firing], [resolved] = fake.bodies()
    assert firing["labels"]["alertname"] == "InfersightSLOBurn"
    assert firing["labels"] == resolved["labels"]  # the same alert, so Alertmanager resolves it
    assert firing["labels"]["model"] == "llama-70b"
    assert firing["annotations"]["cause"] == "gpu_throttled"
    starts = datetime.fromisoformat(firing["startsAt"].replace("Z", "+00:00"))
    ends = datetime.fromisoformat(resolved["endsAt"].replace("Z", "+00:00"))
    assert starts == AT
    assert ends == AT + timedelta(minutes=30)
    assert all(isinstance(v, str) for v in firing["annotations"].values())


@pytest.mark.parametrize(
    ("answer", "ok", "retryable"),
    [
        (httpx.Response(200), True, False),
        (httpx.Response(202), True, False),
        (httpx.Response(429, headers={"Retry-After": "30"}), False, True),
        (httpx.Response(500), False, True),
        (httpx.Response(503), False, True),
        (httpx.Response(400), False, False),
        (httpx.Response(403), False, False),
        (httpx.Response(404), False, False),
    ],
    ids=["200", "202", "429", "500", "503", "400", "403", "404"],
)
def test_http_outcomes_retry_on_429_and_5xx_only(
    answer: httpx.Response, ok: bool, retryable: bool
) -> None:
    result = post_json(Recorder(answer).client(), SLACK_URL, {"text": "x"})
    assert (result.ok, result.retryable) == (ok, retryable)
    assert SLACK_URL not in result.error
    if answer.status_code == 429:
        assert result.retry_after == "30"


def test_a_transport_error_is_retryable_and_does_not_leak_the_url() -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot connect to {request.url}")

    client = httpx.Client(transport=httpx.MockTransport(down))
    result = post_json(client, SLACK_URL, {"text": "x"})
    assert (result.ok, result.retryable) == (False, True)
    assert "secret-path" not in result.error


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after_s("30", AT) == 30.0
    assert retry_after_s("Mon, 05 Jan 2026 09:27:00 GMT", AT) == 60.0
    assert retry_after_s("soon", AT) is None
    assert retry_after_s(None, AT) is None


def test_routes_pick_notifiers_by_severity_and_model() -> None:
    router = router_from_data(
        [{"notifiers": ["pagerduty"], "severity": "page"}, {"notifiers": ["slack"], "model": "m"}]
    )
    available = ["alertmanager", "pagerduty", "slack"]
    assert router.targets({"severity": "page", "model": "m"}, available) == ("pagerduty", "slack")
    assert router.targets({"severity": "ticket", "model": "x"}, available) == tuple(available)
    assert Router(fallback=("slack",)).targets({}, available) == ("slack",)
    with pytest.raises(InvalidInput):
        Route(("slack",), {"colour": "red"})


def _settings_of(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> NotifierPart:
    """The notifier settings read from an environment that holds only ``env`` of them."""
    for name in NotifierPart.model_fields:
        monkeypatch.delenv(f"INFERSIGHT_{name.upper()}", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return NotifierPart()


def test_secrets_come_from_env_or_files_and_never_show(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_file = tmp_path / "pd-key"
    key_file.write_text(ROUTING_KEY + "\n", encoding="utf-8")
    env = {
        "INFERSIGHT_SLACK_WEBHOOK_URL": SLACK_URL,
        "INFERSIGHT_PAGERDUTY_ROUTING_KEY_FILE": str(key_file),
    }
    with httpx.Client() as client:
        settings = _settings_of(monkeypatch, env)
        notifiers = notifiers_from_settings(client, settings)
        assert sorted(notifiers) == ["pagerduty", "slack"]
        assert ROUTING_KEY not in repr(notifiers)
        assert SLACK_URL not in repr(notifiers)
        assert SLACK_URL not in repr(settings)
        missing = {"INFERSIGHT_PAGERDUTY_ROUTING_KEY_FILE": str(tmp_path / "absent")}
        with pytest.raises(ConfigurationError):
            notifiers_from_settings(client, _settings_of(monkeypatch, missing))


def test_a_slow_kv_transfer_page_names_the_prefill_to_decode_pair() -> None:
    pair = {"cause": "kv_transfer_slow", "confidence": 0.9, "instance": "vllm-70b-decode-1"}
    one = dataclasses.replace(notification(), diagnosis={**pair, "kv_source": "10.0.0.4:8200"})
    assert "kv_transfer_slow (90%) on vllm-70b-decode-1 (KV cache from 10.0.0.4:8200)" in (
        one.summary()
    )
    every = dataclasses.replace(notification(), diagnosis={**pair, "kv_source": "*"})
    assert "(KV cache from every prefill instance)" in every.summary()
    unknown = dataclasses.replace(notification(), diagnosis={**pair, "kv_source": None})
    assert unknown.summary().endswith("on vllm-70b-decode-1")
