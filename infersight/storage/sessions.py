"""Revoked dashboard sessions: the one piece of server state a signed session needs.

A session cookie is checked by its signature alone; signing out stores its digest (never the
cookie itself) until the cookie's own expiry, and a revoked digest is refused on every
replica sharing the store. Expired rows are pruned whenever one is added, so the table holds
at most the sessions signed out within one session lifetime.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from sqlalchemy import Engine, delete, insert, select
from sqlalchemy.exc import IntegrityError

from infersight.storage.tables import revoked_sessions


def digest(cookie: str) -> str:
    return hashlib.sha256(cookie.encode()).hexdigest()


def revoke(engine: Engine, cookie: str, expires_at: datetime, now: datetime) -> None:
    """Refuse ``cookie`` from now on (idempotent); prune revocations that have expired."""
    with engine.begin() as connection:
        connection.execute(delete(revoked_sessions).where(revoked_sessions.c.expires_at <= now))
    try:
        with engine.begin() as connection:
            connection.execute(
                insert(revoked_sessions).values(digest=digest(cookie), expires_at=expires_at)
            )
    except IntegrityError:
        pass  # already signed out


def is_revoked(engine: Engine, cookie: str) -> bool:
    query = select(revoked_sessions.c.digest).where(revoked_sessions.c.digest == digest(cookie))
    with engine.connect() as connection:
        return connection.execute(query).first() is not None
