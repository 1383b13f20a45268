"""Prometheus Alertmanager: ``POST /api/v2/alerts`` with labels, annotations and times.

A trigger sends the alert with ``startsAt`` (Alertmanager keeps it firing until its resolve
timeout unless re-sent); a resolve sends the same labels with ``endsAt`` = the resolution time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import httpx

from infersight.alerts.notify import Event, Notification, SendResult, post_json


def _iso(ts: Any) -> str:
    return str(ts.isoformat().replace("+00:00", "Z"))


class AlertmanagerNotifier:
    #: An alert with the same labels is the same alert.
    deduplicates = True

    def __init__(
        self,
        base_url: str,
        client: httpx.Client,
        *,
        name: str = "alertmanager",
        hold: timedelta = timedelta(hours=1),
    ) -> None:
        self.name = name
        self._url = base_url.rstrip("/") + "/api/v2/alerts"
        self._client = client
        self._hold = hold

    def __repr__(self) -> str:
        return f"AlertmanagerNotifier(name={self.name!r})"

    def render(self, n: Notification) -> dict[str, Any]:
        labels = {
            "alertname": "InfersightSLOBurn",
            "slo": n.slo,
            "severity": n.severity,
            "scope": n.scope,
            **{
                k: v
                for k, v in n.labels.items()
                if k in ("model", "instance", "tenant", "priority")
            },
        }
        alert: dict[str, Any] = {
            "labels": labels,
            "annotations": {
                "summary": n.summary(),
                "cause": n.cause,
                "evidence": "\n".join(n.evidence_lines()),
                "diagnosis": json.dumps(dict(n.diagnosis), sort_keys=True)[:8000],
            },
            "startsAt": _iso(n.opened_at),
        }
        missing = n.missing_lines()
        if missing:
            alert["annotations"]["missing_evidence"] = "\n".join(missing)
        # A resolve ends the alert now; a trigger holds it for a while unless re-sent.
        alert["endsAt"] = _iso(n.at if n.event is Event.RESOLVE else n.at + self._hold)
        if n.dashboard_url:
            alert["generatorURL"] = n.dashboard_url
        return {"alerts": [alert]}

    def send(self, payload: Mapping[str, Any]) -> SendResult:
        return post_json(self._client, self._url, list(payload["alerts"]))
