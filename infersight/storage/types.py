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
        if value is None:
            return None
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)  # type: ignore[no-any-return]
        return value.astimezone(UTC)  # type: ignore[no-any-return]

    def result_processor(self, dialect: Dialect, coltype: Any) -> Callable[[Any], Any]:
        """``process_result_value`` as one function per column, with a shortcut for what
        PostgreSQL sessions in UTC hand back (already in ``datetime.UTC``): a read of
        thousands of buckets converts each once, not through the generic wrapper."""
        impl = self.impl_instance.result_processor(dialect, coltype)

        def process(value: Any) -> datetime | None:
            if impl is not None:
                value = impl(value)
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

        return process
