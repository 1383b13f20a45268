"""Stand-ins at the edges that every test layer uses: a clock the test sets, and a
notification endpoint (PagerDuty, Slack) behind ``httpx.MockTransport``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

NOW = datetime(2026, 11, 20, 12, 0, 17, tzinfo=UTC)


@dataclass
class FakeClock:
    now: datetime = NOW

    def __call__(self) -> datetime:
        return self.now


class Endpoint:
    """A notification receiver: accepts (202) and keeps every JSON body while ``up``, refuses
    the connection while not."""

    def __init__(self) -> None:
        self.up = True
        self.accepted: list[dict[str, Any]] = []
        self.refused = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if not self.up:
            raise httpx.ConnectError("connection refused")
        self.accepted.append(json.loads(request.content))
        return httpx.Response(202)

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self))
