"""``IncidentStore.evidence`` and ``IncidentStore.apply`` (``storage.incident_paths``): what the
lifecycle may ask about an incident in one read, a decision's writes in one transaction."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from infersight.core.burn import AlertState, Incident, Severity, Transition
from infersight.core.incident_writes import Announcement, HistoryWrite, IncidentWrites, Outgoing
from infersight.storage.outbox import MessageState
from infersight.storage.sql_store import SqlStore
from tests.conftest import Store

T0 = datetime(2026, 1, 5, 9, tzinfo=UTC)
RESOLVE = "slo:*:1:resolve:page"


def _opened(sql: SqlStore, at: datetime) -> Incident:
    with sql.transaction() as tx:
        incident = tx.incidents.apply_step(
            "slo", "*", AlertState(Severity.PAGE, at), Transition.OPENED, {"5m": 20.0}, at
        )
    assert incident is not None
    return incident


def _resolved_then_reopened(sql: SqlStore) -> tuple[Incident, Incident]:
    first = _opened(sql, T0)
    sql.incidents.save_diagnosis(first.id, {"slo": "slo"}, {"cause": "overload"}, T0)
    sql.incidents.resolve([first.id], T0 + timedelta(minutes=5))
    return first, _opened(sql, T0 + timedelta(minutes=6))


def test_evidence_is_all_the_lifecycle_may_ask_in_one_read(store: Store) -> None:
    sql = store.sql
    first, second = _resolved_then_reopened(sql)
    at = T0 + timedelta(minutes=7)
    sql.history.append(second.id, at, "onset", "overload", {"cause": "overload"})
    sql.history.append(second.id, at + timedelta(minutes=1), "recovering", "overload")
    found = sql.incidents.evidence(second.id)
    assert found.incident == sql.incidents.get(second.id)
    assert found.note is None  # not diagnosed yet
    assert found.last is not None
    assert found.last.verdict == "recovering"
    assert found.prior is not None
    assert found.prior.diagnosis == {"cause": "overload"}
    assert found.before is not None
    assert found.before.id == first.id
    assert found.spec is None  # its SLO was never stored (or is deleted): no spec, no error
    earlier = sql.incidents.evidence(first.id)
    assert earlier.note is not None
    assert earlier.note.diagnosis == {"cause": "overload"}
    assert earlier.last is None
    assert earlier.prior is None
    assert earlier.before is None


def _writes(incident: Incident, reopen: Any) -> IncidentWrites:
    at = T0 + timedelta(minutes=6)
    message = Outgoing("slack", "slo:*:2:trigger:page", "{}", withdraw="slo:*:%:resolve:%")
    announcement = Announcement(incident, at, (message,), ({"slo": "slo"}, at), reopen)
    return IncidentWrites(
        (HistoryWrite(at, "onset", "overload", {"cause": "overload"}),),
        ({"slo": "slo"}, {"cause": "overload"}, at),
        announcement,
    )


def test_a_decision_s_writes_commit_together_or_not_at_all(store: Store) -> None:
    sql = store.sql
    first, second = _resolved_then_reopened(sql)
    sql.outbox.enqueue("slack", RESOLVE, "{}", T0, T0 + timedelta(minutes=10))

    def failing(name: str, before: Incident | None, headline: Mapping[str, Any] | None) -> None:
        raise RuntimeError("the renderer failed")

    with pytest.raises(RuntimeError):
        sql.incidents.apply(second.id, _writes(second, failing))
    assert sql.history.entries(second.id) == []
    assert sql.incidents.notes([second.id]) == {}
    [held] = sql.outbox.messages("slack")
    assert (held.key, held.state) == (RESOLVE, MessageState.PENDING)  # not withdrawn

    told: list[tuple[str, int | None, Mapping[str, Any] | None]] = []

    def news(
        name: str, before: Incident | None, headline: Mapping[str, Any] | None
    ) -> tuple[str, str]:
        told.append((name, before.id if before else None, headline))
        return "slo:*:2:trigger:page:reopened", '{"news": true}'

    assert sql.incidents.apply(second.id, _writes(second, news)) == 1
    assert told == [("slack", first.id, {"cause": "overload"})]
    assert [e.verdict for e in sql.history.entries(second.id)] == ["onset"]
    assert sql.incidents.notes([second.id])[second.id].diagnosis == {"cause": "overload"}
    states = {m.key: m.state for m in sql.outbox.messages("slack")}
    assert states == {
        RESOLVE: MessageState.CANCELLED,
        "slo:*:2:trigger:page:reopened": MessageState.PENDING,
    }
