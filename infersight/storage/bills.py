"""Imported cloud bills (FOCUS): the files in ``bill_imports``, their charges in ``bill_lines``.

An import writes its file row and all its lines in the caller's one transaction
(``service.reconcile`` streams a file through ``add_lines`` in batches and rolls the whole
import back on the first file it cannot read fully), so a file is either stored entirely or
not at all. Amounts are kept as decimal text; reads give ``core.focus.BillLine`` back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Final

from sqlalchemy import Connection, Engine, delete, func, insert, select

from infersight.core.errors import NotFound
from infersight.core.focus import BillLine
from infersight.storage.tables import bill_imports, bill_lines

#: Most imports a listing answers.
MAX_LIST: Final = 500


@dataclass(frozen=True, slots=True)
class BillImport:
    """An imported file."""

    id: int
    name: str
    sha256: str
    format: str
    rows: int
    currency: str
    period_start: datetime
    period_end: datetime
    billed: Decimal
    mapping: dict[str, Any]
    imported_at: datetime


@dataclass(frozen=True, slots=True)
class StoredLine:
    """A stored charge: the line, the instance its import's mapping named, where it came from."""

    import_id: int
    line: int
    instance: str
    charge: BillLine


def find_import(connection: Connection, sha256: str) -> int | None:
    """The id of the import of the file with this SHA-256, if it was imported."""
    row = connection.execute(
        select(bill_imports.c.id).where(bill_imports.c.sha256 == sha256)
    ).first()
    return None if row is None else int(row[0])


def add_import(
    connection: Connection, name: str, sha256: str, fmt: str, mapping: dict[str, Any], now: datetime
) -> int:
    """A new import row (its totals are filled by ``finish_import``); its id."""
    result = connection.execute(
        insert(bill_imports)
        .values(
            name=name[:256],
            sha256=sha256,
            format=fmt,
            rows=0,
            currency="XXX",
            period_start=now,
            period_end=now,
            billed="0",
            mapping=json.dumps(mapping, sort_keys=True),
            imported_at=now,
        )
        .returning(bill_imports.c.id)
    )
    return int(result.scalar_one())


def _n(value: Decimal | None) -> str | None:
    return None if value is None else str(value)


def add_lines(
    connection: Connection, import_id: int, lines: Sequence[tuple[int, str, BillLine]]
) -> None:
    """Store ``(row number, instance, line)`` of an import."""
    if not lines:
        return
    connection.execute(
        insert(bill_lines),
        [
            {
                "import_id": import_id,
                "line": number,
                "start": line.start,
                "end": line.end,
                "category": line.category,
                "charge_class": line.charge_class,
                "currency": line.currency,
                "billed": str(line.billed),
                "effective": str(line.effective),
                "list_cost": _n(line.list_cost),
                "provider": line.provider,
                "service": line.service,
                "resource_id": line.resource_id,
                "resource_name": line.resource_name,
                "resource_type": line.resource_type,
                "sku_id": line.sku_id,
                "sku_price_id": line.sku_price_id,
                "pricing_unit": line.pricing_unit,
                "pricing_quantity": _n(line.pricing_quantity),
                "consumed_quantity": _n(line.consumed_quantity),
                "consumed_unit": line.consumed_unit,
                "tags": json.dumps(dict(line.tags), sort_keys=True),
                "instance": instance,
            }
            for number, instance, line in lines
        ],
    )


def finish_import(
    connection: Connection,
    import_id: int,
    rows: int,
    currency: str,
    start: datetime,
    end: datetime,
    billed: Decimal,
) -> None:
    connection.execute(
        bill_imports.update()
        .where(bill_imports.c.id == import_id)
        .values(
            rows=rows, currency=currency, period_start=start, period_end=end, billed=str(billed)
        )
    )


def _import(row: Any) -> BillImport:
    return BillImport(
        id=row.id,
        name=row.name,
        sha256=row.sha256,
        format=row.format,
        rows=row.rows,
        currency=row.currency,
        period_start=row.period_start,
        period_end=row.period_end,
        billed=Decimal(row.billed),
        mapping=json.loads(row.mapping),
        imported_at=row.imported_at,
    )


def list_imports(engine: Engine, limit: int = MAX_LIST) -> list[BillImport]:
    """Imports, newest first."""
    query = select(bill_imports).order_by(bill_imports.c.id.desc()).limit(limit)
    with engine.connect() as connection:
        return [_import(row) for row in connection.execute(query)]


def imports_over(engine: Engine, start: datetime, end: datetime) -> list[BillImport]:
    """Imports whose charge period meets ``[start, end)``, oldest first."""
    i = bill_imports.c
    query = select(bill_imports).where(i.period_start < end, i.period_end > start).order_by(i.id)
    with engine.connect() as connection:
        return [_import(row) for row in connection.execute(query)]


def delete_import(engine: Engine, import_id: int) -> int:
    """Forget an import and its lines; how many lines went. ``NotFound`` when there is none."""
    with engine.begin() as connection:
        gone = connection.execute(
            delete(bill_lines).where(bill_lines.c.import_id == import_id)
        ).rowcount
        if not connection.execute(
            delete(bill_imports).where(bill_imports.c.id == import_id)
        ).rowcount:
            raise NotFound(f"no bill import {import_id}", details={"id": import_id})
    return int(gone or 0)


def _dec(value: str | None) -> Decimal | None:
    return None if value is None else Decimal(value)


def lines_over(engine: Engine, start: datetime, end: datetime) -> Iterator[StoredLine]:
    """The stored charges whose period meets ``[start, end)``, by import and row; streamed."""
    b = bill_lines.c
    query = (
        select(bill_lines)
        .where(b.start < end, b.end > start)
        .order_by(b.import_id, b.line)
        .execution_options(yield_per=5000)
    )
    with engine.connect() as connection:
        for row in connection.execute(query):
            yield StoredLine(
                import_id=row.import_id,
                line=row.line,
                instance=row.instance,
                charge=BillLine(
                    start=row.start,
                    end=row.end,
                    category=row.category,
                    currency=row.currency,
                    billed=Decimal(row.billed),
                    effective=Decimal(row.effective),
                    list_cost=_dec(row.list_cost),
                    charge_class=row.charge_class,
                    provider=row.provider,
                    service=row.service,
                    resource_id=row.resource_id,
                    resource_name=row.resource_name,
                    resource_type=row.resource_type,
                    sku_id=row.sku_id,
                    sku_price_id=row.sku_price_id,
                    pricing_unit=row.pricing_unit,
                    pricing_quantity=_dec(row.pricing_quantity),
                    consumed_quantity=_dec(row.consumed_quantity),
                    consumed_unit=row.consumed_unit,
                    tags=json.loads(row.tags),
                ),
            )


def line_count(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(select(func.count()).select_from(bill_lines)).scalar_one())


__all__ = [
    "BillImport",
    "StoredLine",
    "add_import",
    "add_lines",
    "delete_import",
    "find_import",
    "finish_import",
    "imports_over",
    "line_count",
    "lines_over",
    "list_imports",
]
