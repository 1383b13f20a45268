"""Stored cost reports: one row per kind and period, replaced when regenerated.

A report is kept in all its renderings (JSON body, HTML, CSV) as generated, so that what
was posted to Slack links to exactly what was computed then, even after prices change.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from sqlalchemy import Engine, and_, insert, select, update

from infersight.core.errors import InvalidInput, NotFound
from infersight.storage.tables import cost_reports

MAX_LIST: Final = 500


@dataclass(frozen=True, slots=True)
class ReportInfo:
    """A stored report without its renderings (what a listing shows)."""

    id: int
    kind: str
    period: str
    start: datetime
    end: datetime
    currency: str
    created_at: datetime
    summary: str


@dataclass(frozen=True, slots=True)
class StoredReport:
    info: ReportInfo
    body: str
    html: str
    csv: str


def save_report(
    engine: Engine,
    kind: str,
    period: str,
    start: datetime,
    end: datetime,
    currency: str,
    created_at: datetime,
    summary: str,
    body: str,
    html: str,
    csv: str,
) -> int:
    """Store a report, replacing an earlier one of the same kind and period in place (its id,
    and so every link to it, stays); the report's id."""
    if not kind or len(kind) > 16 or not period or len(period) > 32:
        raise InvalidInput("a report needs a kind (≤ 16) and a period (≤ 32 characters)")
    values = {
        "start": start,
        "end": end,
        "currency": currency,
        "created_at": created_at,
        "summary": summary,
        "body": body,
        "html": html,
        "csv": csv,
    }
    same = and_(cost_reports.c.kind == kind, cost_reports.c.period == period)
    with engine.begin() as connection:
        found = connection.execute(select(cost_reports.c.id).where(same)).first()
        if found is not None:
            connection.execute(update(cost_reports).where(same).values(**values))
            return int(found[0])
        result = connection.execute(
            insert(cost_reports)
            .values(kind=kind, period=period, **values)
            .returning(cost_reports.c.id)
        )
        return int(result.scalar_one())


_INFO = (
    cost_reports.c.id,
    cost_reports.c.kind,
    cost_reports.c.period,
    cost_reports.c.start,
    cost_reports.c.end,
    cost_reports.c.currency,
    cost_reports.c.created_at,
    cost_reports.c.summary,
)


def list_reports(engine: Engine, kind: str | None = None, limit: int = 52) -> list[ReportInfo]:
    """The newest reports first (by period start)."""
    if not 1 <= limit <= MAX_LIST:
        raise InvalidInput(f"limit must be in [1, {MAX_LIST}]")
    query = select(*_INFO).order_by(cost_reports.c.start.desc(), cost_reports.c.id.desc())
    if kind is not None:
        query = query.where(cost_reports.c.kind == kind)
    with engine.connect() as connection:
        return [ReportInfo(*row) for row in connection.execute(query.limit(limit))]


def get_report(engine: Engine, report_id: int) -> StoredReport:
    query = select(*_INFO, cost_reports.c.body, cost_reports.c.html, cost_reports.c.csv).where(
        cost_reports.c.id == report_id
    )
    with engine.connect() as connection:
        row = connection.execute(query).first()
    if row is None:
        raise NotFound(f"no report {report_id}", details={"id": report_id})
    return StoredReport(ReportInfo(*row[:8]), row[8], row[9], row[10])
