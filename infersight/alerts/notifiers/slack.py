"""Slack incoming webhooks: a Block Kit message with symptom, top cause, evidence and a link.

Block Kit limits respected: header text ≤ 150 characters, section text ≤ 3000, at most 10
fields of ≤ 2000 characters each; ``text`` is the fallback for notifications and old clients.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from infersight.alerts.notify import Event, Notification, SendResult, post_json


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class SlackNotifier:
    #: Slack posts every message it is sent: at most once.
    deduplicates = False

    def __init__(self, webhook_url: str, client: httpx.Client, name: str = "slack") -> None:
        self.name = name
        self._url = webhook_url
        self._client = client

    def __repr__(self) -> str:  # never show the webhook URL
        return f"SlackNotifier(name={self.name!r})"

    def render(self, n: Notification) -> dict[str, Any]:
        resolved = n.event is Event.RESOLVE
        icon = (
            ":white_check_mark:"
            if resolved
            else (":rotating_light:" if n.severity == "page" else ":warning:")
        )
        title = f"{'Resolved' if resolved else n.severity.capitalize()}: {n.subject} burning"
        burn = ", ".join(
            f"{w} ×{r:.1f}" for w, r in dict(n.symptom.get("burn_rates") or {}).items()
        )
        symptom = f"*Scope* `{n.scope}`\n*Burn rate* {burn or 'n/a'}"
        cause = f"*Likely cause:* `{n.cause}`"
        confidence = n.diagnosis.get("confidence")
        if isinstance(confidence, int | float):
            cause += f" (confidence {confidence:.0%})"
        if n.diagnosis.get("instance"):
            cause += f" on `{n.diagnosis['instance']}`"
        blocks: list[dict[str, Any]] = [
            {
                "type": "header",
                "text": {"type": "plain_text", "text": _cut(f"{title}", 150), "emoji": True},
            },
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": _cut(f"{icon} {symptom}", 3000)},
            },
            {"type": "section", "text": {"type": "mrkdwn", "text": _cut(cause, 3000)}},
        ]
        evidence = n.evidence_lines(10)
        if evidence:
            blocks.append(
                {
                    "type": "section",
                    "fields": [{"type": "mrkdwn", "text": _cut(line, 2000)} for line in evidence],
                }
            )
        missing = n.missing_lines()
        if missing:
            text = "*Not checked (missing telemetry):*\n" + "\n".join(f"• {m}" for m in missing)
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _cut(text, 3000)}})
        if n.dashboard_url:
            blocks.append(
                {
                    "type": "actions",
                    "elements": [
                        {
                            "type": "button",
                            "text": {"type": "plain_text", "text": "Open incident"},
                            "url": n.dashboard_url,
                        }
                    ],
                }
            )
        return {"text": _cut(n.summary(), 3000), "blocks": blocks}

    def send(self, payload: Mapping[str, Any]) -> SendResult:
        return post_json(self._client, self._url, dict(payload))
