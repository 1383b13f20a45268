"""PagerDuty Events API v2: trigger and resolve with a stable ``dedup_key``.

page → ``critical``, ticket → ``warning``; the diagnosis goes in ``payload.custom_details``.
The routing key is added when sending, so the stored payload holds no secret.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import httpx

from infersight.alerts.notify import Event, Notification, SendResult, post_json

EVENTS_URL: Final = "https://events.pagerduty.com/v2/enqueue"
SEVERITY: Final = {"page": "critical", "ticket": "warning"}


class PagerDutyNotifier:
    #: The stable ``dedup_key`` folds a repeat into the open alert.
    deduplicates = True

    def __init__(
        self,
        routing_key: str,
        client: httpx.Client,
        *,
        url: str = EVENTS_URL,
        source: str = "infersight",
        name: str = "pagerduty",
    ) -> None:
        self.name = name
        self._key = routing_key
        self._client = client
        self._url = url
        self._source = source

    def __repr__(self) -> str:  # never show the routing key
        return f"PagerDutyNotifier(name={self.name!r})"

    def render(self, n: Notification) -> dict[str, Any]:
        if n.event is Event.RESOLVE:
            return {"event_action": "resolve", "dedup_key": n.dedup_key}
        body: dict[str, Any] = {
            "event_action": "trigger",
            "dedup_key": n.dedup_key,
            "payload": {
                "summary": n.summary()[:1024],
                "source": self._source,
                "severity": SEVERITY[n.severity],
                "timestamp": n.at.isoformat().replace("+00:00", "Z"),
                "component": n.labels.get("model") or n.scope,
                "group": n.slo,
                "class": n.cause,
                "custom_details": {
                    "slo": n.slo,
                    "scope": n.scope,
                    "symptom": dict(n.symptom),
                    "diagnosis": dict(n.diagnosis),
                    "missing_evidence": n.missing_lines(),
                },
            },
            "client": "infersight",
        }
        if n.dashboard_url:
            body["client_url"] = n.dashboard_url
            body["links"] = [{"href": n.dashboard_url, "text": "infersight incident"}]
        return body

    def send(self, payload: Mapping[str, Any]) -> SendResult:
        return post_json(self._client, self._url, {"routing_key": self._key, **payload})
