"""The store's administration, for the CLI: migrate it, read its revision, keep it up, and say
its URL and its errors in one line.

Importing this module loads nothing but the standard library: ``infersight --help`` imports it
(``creating``), and each function imports the store's modules it needs (Alembic only to
migrate, SQLAlchemy only for a store) when it is called.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from infersight.core.errors import Unavailable
    from infersight.core.retention import RetentionPolicy
    from infersight.storage.maintenance import MaintenanceReport
    from infersight.storage.seam import Store, StoreContents


def migrate(store: Store) -> None:
    """Create the store's schema, or migrate it up to the newest revision (a command that
    stores what it is given)."""
    store.maintenance.upgrade()


def upgrade(store: Store, revision: str = "head") -> str | None:
    """Migrate the store up to ``revision``; the revision it is at then."""
    store.maintenance.upgrade(revision)
    return store.maintenance.current()


def downgrade(store: Store, revision: str) -> str | None:
    """Migrate the store down to ``revision`` (``base``: no tables); the revision it is at."""
    store.maintenance.downgrade(revision)
    return store.maintenance.current()


def current_revision(store: Store) -> str | None:
    """The store's revision (``None``: not migrated), read without Alembic."""
    return store.maintenance.current()


def ping(store: Store) -> None:
    """One look at the store (``serve --no-migrate``: it answers, migrated or not); it creates
    nothing, whichever thread asks (a command's "only reads" does not reach other threads)."""
    with creating(False):
        store.maintenance.current()


def check_read_routing(store_url: str, read_url: str) -> None:
    """Refuse a read URL that cannot name a hot standby of the store at ``store_url``
    (``ConfigurationError``: SQLite has no standby, on either side)."""
    from infersight.storage.replica import check_read_routing as check  # noqa: PLC0415

    check(store_url, read_url)


def head_revision() -> str | None:
    """The newest revision this version ships (``None``: it ships no migrations)."""
    from infersight.storage import revisions  # noqa: PLC0415 (SQLAlchemy: when asked)

    return revisions.head()


def maintain(store: Store, now: datetime, policy: RetentionPolicy) -> MaintenanceReport:
    """Partitions ahead, retention and rollup compaction, as the maintenance job runs them."""
    return store.maintenance.maintain(now, policy)


def contents(store: Store) -> StoreContents:
    """How many requests, incidents and load-test runs the store holds (nothing without a
    schema); a store that cannot be read raises, never passes for empty."""
    return store.maintenance.contents()


def stored_requests(store: Store) -> int:
    """How many request records the store holds."""
    return store.maintenance.stored_requests()


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite store URL names (``None``: not SQLite, in memory, or a ``file:`` URI):
    the store's own reading of it."""
    from infersight.storage.engine import sqlite_file as file_of  # noqa: PLC0415

    return file_of(url)


def redact(url: str) -> str:
    """``url`` with any password hidden, for messages and logs."""
    from infersight.storage.engine import redact as redacted  # noqa: PLC0415

    return redacted(url)


@contextmanager
def reaching(url: str) -> Iterator[None]:
    """Within: "the store at ``url`` cannot be reached" becomes one ``Unavailable``, "it has
    no schema" one ``SchemaMissing``, each with a one-line message."""
    from infersight.storage.engine import reaching as reaching_store  # noqa: PLC0415

    with reaching_store(url):
        yield


def store_error(exc: BaseException, url: str) -> Unavailable | None:
    """The one-line error a database error about the store at ``url`` stands for (``None``:
    it is about something else)."""
    from infersight.storage.engine import store_error as error_of  # noqa: PLC0415

    return error_of(exc, url)


@contextmanager
def creating(allowed: bool = True) -> Iterator[None]:
    """Within: connecting may (``allowed=False``: may not) create a SQLite store's file.
    Loads no SQLAlchemy (a command says "I only read" before it imports the store)."""
    from infersight.storage.creation import creating as may_create  # noqa: PLC0415

    with may_create(allowed):
        yield
