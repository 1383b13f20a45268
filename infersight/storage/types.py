"""Column types that behave the same on PostgreSQL and SQLite."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, Dialect
from sqlalchemy.types import TypeDecorator


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes in and out.

    PostgreSQL stores ``timestamptz``. SQLite has no such type: values are stored as naive UTC
    ISO strings (which sort correctly) and come back with ``tzinfo=UTC`` attached.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        return _as_utc(value)

    def result_processor(self, dialect: Dialect, coltype: Any) -> Callable[[Any], Any]:
        """``process_result_value`` as one function per column (not through the generic
        wrapper): a read of thousands of buckets converts each once."""
        impl = self.impl_instance.result_processor(dialect, coltype)
        if impl is None:
            return _as_utc
        return lambda value: _as_utc(impl(value))


def _as_utc(value: Any) -> datetime | None:
    """A stored timestamp as an aware UTC datetime: SQLite's naive ISO text or datetime gets
    ``tzinfo=UTC``; one the driver hands back in ``datetime.UTC`` already (PostgreSQL sessions
    in UTC, ``storage.engine``) is passed on as it is; any other zone is converted."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    zone = value.tzinfo
    if zone is UTC:
        return value  # type: ignore[no-any-return]
    if zone is None:
        return value.replace(tzinfo=UTC)  # type: ignore[no-any-return]
    return value.astimezone(UTC)  # type: ignore[no-any-return]
