"""How statements reach ClickHouse: its HTTP interface (clickhouse-connect) in production,
chdb (ClickHouse's engine in process) for tests and single-machine trials.

URLs: ``clickhouse://user:password@host:8123/database`` (``clickhouses://`` for TLS, port 8443
by default) and ``chdb://PATH`` or ``clickhouse+chdb://PATH`` (a directory chdb keeps its data
in). Answers are read as ``JSONCompact`` through both, so both hand back the same values.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol
from urllib.parse import unquote, urlsplit

from infersight.core.errors import InvalidInput, Unavailable

#: JSON answers with 64-bit integers as numbers (not strings).
_READ_SETTINGS: Final = {"output_format_json_quote_64bit_integers": 0}
#: The format rows are inserted in.
INSERT_FORMAT: Final = "JSONCompactEachRow"


class Transport(Protocol):
    """One ClickHouse server (or an in-process engine)."""

    #: The database the tables live in.
    database: str

    def rows(self, sql: str) -> list[list[Any]]:
        """The rows of a ``SELECT``."""
        ...

    def command(self, sql: str) -> None:
        """A statement without an answer (DDL, ``ALTER``)."""
        ...

    def insert(
        self, table: str, columns: Sequence[str], payload: bytes, settings: Mapping[str, Any]
    ) -> None:
        """Insert ``payload`` (rows as ``JSONCompactEachRow``) into ``columns`` of ``table``."""
        ...

    def describe(self) -> str: ...

    def close(self) -> None: ...


def quote(value: str) -> str:
    """``value`` as a ClickHouse string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _settings_clause(settings: Mapping[str, Any]) -> str:
    if not settings:
        return ""
    parts = []
    for name, value in settings.items():
        if not name.replace("_", "").isalnum():
            raise InvalidInput(f"not a ClickHouse setting name: {name!r}")
        parts.append(f"{name}={quote(value) if isinstance(value, str) else int(value)}")
    return " SETTINGS " + ", ".join(parts)


class ChdbTransport:
    """chdb's engine in this process, its data under ``path``. chdb holds one session per
    process: statements are serialised here, and a second path in the same process is refused
    by chdb itself."""

    def __init__(self, path: str, database: str = "infersight") -> None:
        try:
            from chdb import session  # noqa: PLC0415 (an optional extra)
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise InvalidInput(
                "a chdb:// telemetry URL needs the chdb package (pip install 'infersight[chdb]')"
            ) from exc
        self.path = path
        self.database = database
        self._lock = threading.Lock()
        self._session = session.Session(path)  # type: ignore[no-untyped-call]
        self.command(f"CREATE DATABASE IF NOT EXISTS {database}")

    def _run(self, sql: str, fmt: str = "JSONCompact") -> Any:
        with self._lock:
            try:
                return self._session.query(sql, fmt)  # type: ignore[no-untyped-call]
            except Exception as exc:  # chdb raises RuntimeError with the server's message
                raise Unavailable(f"ClickHouse (chdb) refused a statement: {exc}") from exc

    def rows(self, sql: str) -> list[list[Any]]:
        answer = self._run(sql + _settings_clause(_READ_SETTINGS))
        data = answer.bytes()
        return list(json.loads(data)["data"]) if data else []

    def command(self, sql: str) -> None:
        self._run(sql, "CSV")

    def insert(
        self, table: str, columns: Sequence[str], payload: bytes, settings: Mapping[str, Any]
    ) -> None:
        statement = (
            f"INSERT INTO {table} ({', '.join(columns)}){_settings_clause(settings)}"
            f" FORMAT {INSERT_FORMAT}\n"
        )
        self._run(statement + payload.decode(), "CSV")

    def describe(self) -> str:
        return f"chdb://{self.path}"

    def close(self) -> None:
        with self._lock:
            self._session.close()  # type: ignore[no-untyped-call]


class HttpTransport:
    """A ClickHouse server's HTTP interface through clickhouse-connect."""

    def __init__(
        self,
        host: str,
        port: int,
        username: str,
        password: str,
        database: str,
        secure: bool,
    ) -> None:
        try:
            import clickhouse_connect  # noqa: PLC0415 (an optional extra)
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise InvalidInput(
                "a clickhouse:// telemetry URL needs clickhouse-connect"
                " (pip install 'infersight[clickhouse]')"
            ) from exc

        self.database = database
        self._where = f"{'clickhouses' if secure else 'clickhouse'}://{username}@{host}:{port}"
        try:
            self._client = clickhouse_connect.get_client(
                host=host,
                port=port,
                username=username,
                password=password,
                database="default",
                secure=secure,
            )
            self._client.command(f"CREATE DATABASE IF NOT EXISTS {database}")
        except Exception as exc:
            raise Unavailable(f"ClickHouse at {self._where} is unavailable: {exc}") from exc

    def rows(self, sql: str) -> list[list[Any]]:
        try:
            data = self._client.raw_query(sql, settings=_READ_SETTINGS, fmt="JSONCompact")
        except Exception as exc:
            raise Unavailable(f"ClickHouse at {self._where} refused a read: {exc}") from exc
        return list(json.loads(data)["data"]) if data else []

    def command(self, sql: str) -> None:
        try:
            self._client.command(sql)
        except Exception as exc:
            raise Unavailable(f"ClickHouse at {self._where} refused a statement: {exc}") from exc

    def insert(
        self, table: str, columns: Sequence[str], payload: bytes, settings: Mapping[str, Any]
    ) -> None:
        try:
            self._client.raw_insert(
                table, list(columns), payload, settings=dict(settings), fmt=INSERT_FORMAT
            )
        except Exception as exc:
            raise Unavailable(f"ClickHouse at {self._where} refused a batch: {exc}") from exc

    def describe(self) -> str:
        return f"{self._where}/{self.database}"

    def close(self) -> None:
        self._client.close()


SCHEMES: Final = ("clickhouse", "clickhouses", "chdb", "clickhouse+chdb")


def connect(url: str) -> Transport:
    """The transport ``url`` names (see the module's docstring)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise InvalidInput(
            "a telemetry URL starts with " + ", ".join(f"{s}://" for s in SCHEMES),
            details={"scheme": scheme},
        )
    if scheme in ("chdb", "clickhouse+chdb"):
        path = unquote(parts.netloc + parts.path)
        if not path:
            raise InvalidInput("a chdb:// telemetry URL names a directory: chdb:///var/lib/x")
        return ChdbTransport(path)
    secure = scheme == "clickhouses"
    database = parts.path.strip("/") or "infersight"
    if not database.replace("_", "").isalnum():
        raise InvalidInput(f"not a ClickHouse database name: {database!r}")
    return HttpTransport(
        host=parts.hostname or "localhost",
        port=parts.port or (8443 if secure else 8123),
        username=unquote(parts.username or "default"),
        password=unquote(parts.password or ""),
        database=database,
        secure=secure,
    )


def redact(url: str) -> str:
    """``url`` without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(":" + parts.password + "@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()
