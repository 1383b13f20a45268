"""Named documents: one row per name, the document as text in one column of it.

SLO definitions (``slos.spec``), cost models (``cost_models.spec``) and baselines
(``baselines.document``) are each kept this way; ``NamedDocuments`` is the one store for all
three, and the modules of each (``storage.slo_store``, ``storage.cost_models``,
``storage.baselines``) turn their own type into the row's values and back.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, Engine, Table, delete, select

from infersight.core.errors import Conflict, NotFound
from infersight.storage.sql import begin, insert_for


@dataclass(frozen=True, slots=True)
class NamedDocuments:
    """Documents in ``table`` keyed by its ``name`` column, the text in ``column``; ``noun``
    names one in errors (``no SLO named 'x'``)."""

    table: Table
    column: str
    noun: str

    def not_found(self, name: str) -> NotFound:
        return NotFound(f"no {self.noun} named {name!r}", details={"name": name})

    def put(
        self,
        engine: Engine | Connection,
        name: str,
        values: Mapping[str, Any],
        *,
        replace: bool = True,
        keep: Collection[str] = (),
    ) -> bool:
        """Store the row ``name`` with ``values``; ``True`` when it is new. An existing one is
        replaced but for the ``keep`` columns, or, unless ``replace``, a ``Conflict``. On a
        connection, in the caller's transaction."""
        key = self.table.c.name
        statement = insert_for(engine, self.table).values(name=name, **values)
        if replace:
            statement = statement.on_conflict_do_update(
                index_elements=[key],
                set_={c: statement.excluded[c] for c in values if c not in keep},
            )
        with begin(engine) as connection:
            existed = connection.execute(select(key).where(key == name)).first() is not None
            if existed and not replace:
                raise Conflict(
                    f"a {self.noun} named {name!r} exists (replace it explicitly)",
                    details={"name": name},
                )
            connection.execute(statement)
        return not existed

    def put_stamped(
        self, engine: Engine | Connection, name: str, document: str, now: datetime
    ) -> bool:
        """Create or replace ``name`` in a table with ``created_at`` and ``updated_at``: a
        replacement keeps the creation time; ``True`` when it was created."""
        values = {self.column: document, "created_at": now, "updated_at": now}
        return self.put(engine, name, values, keep=("created_at",))

    def find(self, engine: Engine, name: str) -> str | None:
        """The document ``name``, or ``None`` when there is none."""
        with engine.connect() as connection:
            row = connection.execute(
                select(self.table.c[self.column]).where(self.table.c.name == name)
            ).first()
        return None if row is None else str(row[0])

    def get(self, engine: Engine, name: str) -> str:
        """The document ``name``; ``NotFound`` when there is none."""
        document = self.find(engine, name)
        if document is None:
            raise self.not_found(name)
        return document

    def all(
        self,
        engine: Engine | Connection,
        order_by: Sequence[ColumnElement[Any]] = (),
        limit: int | None = None,
    ) -> list[tuple[str, str]]:
        """Every ``(name, document)``, by name unless ``order_by``, at most ``limit``."""
        query = select(self.table.c.name, self.table.c[self.column]).order_by(
            *(order_by or (self.table.c.name,))
        )
        if limit is not None:
            query = query.limit(limit)
        if isinstance(engine, Connection):
            return [(str(name), str(text)) for name, text in engine.execute(query)]
        with engine.connect() as connection:
            return [(str(name), str(text)) for name, text in connection.execute(query)]

    def delete(self, engine: Engine, name: str) -> None:
        """Delete the document ``name``; ``NotFound`` when there is none."""
        with engine.begin() as connection:
            deleted = connection.execute(delete(self.table).where(self.table.c.name == name))
            if not deleted.rowcount:
                raise self.not_found(name)
