"""Dashboard sessions signed out on the server: what ``api.dashboard.session`` keeps of a cookie
after its sign-out (a digest of it, never the cookie) until it would have expired."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infersight.storage.seam import Store


def revoke(store: Store, cookie: str, expires_at: datetime, now: datetime) -> None:
    """Sign the session of ``cookie`` out: every replica refuses it from now to ``expires_at``."""
    store.sessions.revoke(cookie, expires_at, now)


def is_revoked(store: Store, cookie: str) -> bool:
    """Whether the session of ``cookie`` was signed out."""
    return store.sessions.is_revoked(cookie)
