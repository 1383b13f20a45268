"""Whether connecting may create a SQLite store's file that does not exist yet.

Apart from ``storage.engine`` so that the CLI can say "this command only reads" before it
imports SQLAlchemy. The default (creating allowed) is a library's; ``infersight`` turns it off
for a command's duration, and ``storage.migrate.upgrade`` turns it on while it migrates.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_MAY_CREATE: ContextVar[bool] = ContextVar("infersight_store_may_create", default=True)


def may_create() -> bool:
    """Whether a connection made now may create a SQLite file."""
    return _MAY_CREATE.get()


@contextmanager
def creating(allowed: bool = True) -> Iterator[None]:
    """Within: connecting may (or, ``allowed=False``, may not) create a SQLite store's file."""
    token = _MAY_CREATE.set(allowed)
    try:
        yield
    finally:
        _MAY_CREATE.reset(token)
