"""Integration with a real Prometheus Alertmanager (Debian's ``prometheus-alertmanager``).

Our notifier posts an incident; Alertmanager lists it as active; our resolve ends it and it
leaves the active list. Alertmanager runs on a free loopback port with clustering off and its
state in a temporary directory, and is stopped at the end. Skipped only where the binary is
not installed (CI installs it).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from infersight.alerts.notifiers.alertmanager import AlertmanagerNotifier
from infersight.alerts.notify import Event, Notification
from tests.peers import free_port, ready_server

BINARY = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
pytestmark = [
    pytest.mark.e2e,
    # .ci/run installs Debian's prometheus-alertmanager, so under CI a missing binary fails.
    pytest.mark.skipif(
        BINARY is None and not os.environ.get("CI"),
        reason="prometheus-alertmanager is not installed (CI installs it)",
    ),
]
CONFIG = "route:\n  receiver: default\nreceivers:\n  - name: default\n"


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    assert BINARY is not None
    (tmp_path / "am.yml").write_text(CONFIG, encoding="utf-8")
    port = free_port()
    command = [
        BINARY,
        f"--config.file={tmp_path / 'am.yml'}",
        f"--storage.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    with ready_server(command, f"http://127.0.0.1:{port}") as url:
        yield url


def _ours(url: str) -> list[dict[str, Any]]:
    alerts = httpx.get(f"{url}/api/v2/alerts", params={"active": "true"}, timeout=5).json()
    return [a for a in alerts if a["labels"].get("alertname") == "InfersightSLOBurn"]


def _notification(event: Event, at: datetime, opened_at: datetime) -> Notification:
    return Notification(
        incident_id=3,
        slo="chat-avail",
        scope="model=llama-70b",
        severity="page",
        event=event,
        at=at,
        opened_at=opened_at,
        labels={"model": "llama-70b"},
        diagnosis={
            "cause": "decode_bound",
            "confidence": 0.45,
            "evidence": [],
            "missing_evidence": ["no GPU samples for vllm-70b-0: cannot tell compute from …"],
        },
    )


def test_alertmanager_receives_lists_and_resolves_our_alert(alertmanager: str) -> None:
    opened = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    with httpx.Client(timeout=5) as client:
        notifier = AlertmanagerNotifier(alertmanager, client)
        trigger = _notification(Event.TRIGGER, datetime.now(UTC), opened)
        assert notifier.send(notifier.render(trigger)).ok
        [listed] = _ours(alertmanager)
        assert listed["labels"]["slo"] == "chat-avail"
        assert listed["annotations"]["cause"] == "decode_bound"
        assert listed["annotations"]["missing_evidence"].startswith("no GPU samples for")
        assert listed["status"]["state"] == "active"
        resolve = _notification(Event.RESOLVE, datetime.now(UTC), opened)
        assert notifier.send(notifier.render(resolve)).ok
        deadline = time.monotonic() + 10
        while _ours(alertmanager) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _ours(alertmanager) == []
