"""The scheduled jobs' last results (``job_results``): one row per job, replaced whole.

The leader writes each cycle's results (``service.snapshots`` encodes them as JSON); every
worker's pages read them back while they are fresh. The body is data, never code: a row is
decoded field by field and refused when it does not fit.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from sqlalchemy import Connection, Engine, select

from infersight.core.errors import InvalidInput
from infersight.storage.sql import begin, insert_for
from infersight.storage.tables import job_results

#: The longest body stored (a cycle of thousands of SLOs fits many times over).
MAX_BODY: Final = 16 * 1024 * 1024


def put(bind: Engine | Connection, job: str, computed_at: datetime, body: str) -> None:
    """Keep ``body`` as job ``job``'s last result (on a connection, in its transaction)."""
    if len(body) > MAX_BODY:
        raise InvalidInput(
            f"job {job!r}'s result is too large to keep",
            details={"characters": len(body), "limit": MAX_BODY},
        )
    statement = insert_for(bind, job_results).values(job=job, computed_at=computed_at, body=body)
    statement = statement.on_conflict_do_update(
        index_elements=[job_results.c.job],
        set_={"computed_at": statement.excluded.computed_at, "body": statement.excluded.body},
    )
    with begin(bind) as connection:
        connection.execute(statement)


def get(bind: Engine | Connection, job: str) -> tuple[datetime, str] | None:
    """Job ``job``'s last result and when it was computed (``None``: none kept)."""
    query = select(job_results.c.computed_at, job_results.c.body).where(job_results.c.job == job)
    if isinstance(bind, Connection):
        row = bind.execute(query).first()
    else:
        with bind.connect() as connection:
            row = connection.execute(query).first()
    return None if row is None else (row[0], row[1])
