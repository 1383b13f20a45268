"""The one way to open the store: ``open_store(settings or url)`` (the CLI's ``Context``, the
API's ``serve``, the jobs' direct connection, the demo).

The settings choose the backend (today ``storage.sql_store``: PostgreSQL or SQLite, the store
URL's scheme) and carry its timeouts; a bare URL opens it with the default timeouts. The
standby's store for read-only answers is ``open_read_store``. Nothing else in the code base
builds a store engine itself; what it is handed is a ``storage.seam.Store``.

Importing this module loads no settings (pydantic) and no SQLAlchemy: the store's modules are
imported when a store is opened (SQLAlchemy and ``storage.engine``) and each storage module on
its first use, so a light CLI command can import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infersight.config.parts import StorePart
    from infersight.storage.seam import Store
    from infersight.storage.sql_store import SqlStore
    from infersight.storage_clickhouse.hybrid import HybridStore

#: ``Store``: the store's type, for the edges' annotations (they name it here, never in
#: ``storage``); imported on first use (``__getattr__``), so importing this module stays light.
__all__ = ["Store", "open_read_store", "open_store"]


def __getattr__(name: str) -> Any:
    if name == "Store":
        from infersight.storage.seam import Store  # noqa: PLC0415 (SQLAlchemy: when used)

        return Store
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _url_and_timeouts(settings: StorePart | str) -> tuple[str, dict[str, float]]:
    if isinstance(settings, str):
        return settings, {}
    return settings.database_url, settings.store_timeouts()


def open_store(settings: StorePart | str, **engine: Any) -> SqlStore | HybridStore:
    """The store the settings (or a URL) name; ``engine``: the SQL engine's options (a pool's
    size, ``poolclass``). With a telemetry URL (``INFERSIGHT_TELEMETRY_URL``), the store with
    ClickHouse's telemetry beside it (``storage_clickhouse.hybrid``). It connects on first
    use; a SQLite file is created only where creating is allowed (``storage.creation``)."""
    from infersight.storage.engine import StoreTimeouts  # noqa: PLC0415 (SQLAlchemy: when used)
    from infersight.storage.sql_store import open_store as open_sql  # noqa: PLC0415

    url, timeouts = _url_and_timeouts(settings)
    if isinstance(settings, str) or not settings.telemetry_url:
        return open_sql(url, timeouts=StoreTimeouts(**timeouts), **engine)
    # Telemetry in ClickHouse beside the store (issue #36): its package is imported only here.
    from infersight.storage_clickhouse import hybrid, schema  # noqa: PLC0415

    layout = schema.Layout(  # checked before the store is opened: a bad name opens nothing
        cluster=settings.telemetry_cluster or None,
        raw_days=settings.raw_retention_days,
        minute_days=settings.minute_rollup_retention_days,
        hour_days=settings.hour_rollup_retention_days,
        day_days=settings.day_rollup_retention_days,
    )
    store = open_sql(url, timeouts=StoreTimeouts(**timeouts), **engine)
    return hybrid.open_hybrid(
        store, settings.telemetry_url, layout, sql_copy=settings.telemetry_sql_copy
    )


def open_read_store(settings: StorePart, **engine: Any) -> SqlStore | None:
    """The hot standby's store (``INFERSIGHT_DATABASE_READ_URL``), or ``None`` when none is
    configured; never migrated."""
    if not settings.database_read_url:
        return None
    from infersight.storage.engine import StoreTimeouts  # noqa: PLC0415
    from infersight.storage.sql_store import open_read_store as open_read  # noqa: PLC0415

    timeouts = StoreTimeouts(**settings.store_timeouts())
    return open_read(settings.database_read_url, timeouts=timeouts, **engine)
