"""Reconciliation with the cloud bill: FOCUS imports, billed vs modelled cost, the drift.

**Import** (``import_bill``): a FOCUS export (``core.focus``; CSV, gzip-compressed CSV or
Parquet, told apart by their first bytes) is read as a stream — CSV row by row, Parquet in
record batches of the columns used — checked row by row, mapped to instances by a
``BillMapping`` and stored in one transaction. Any row that cannot be read refuses the whole
file (nothing is stored) with the first ``MAX_ERRORS`` problems, each naming its row (1 is the
first row after the header) and column. A file is imported once (by SHA-256); it may hold at
most ``max_rows`` rows and ``max_bytes`` bytes (decompressed), and one currency.

**Reconciliation** (``reconcile``): for each UTC day of a range and each instance, the
``Usage`` charges the bill names the instance for (spread over days by time when a charge
period spans several) against infersight's own cost of that instance-day (``store.cost``,
the cost model in use: the same figure ``GET /api/v1/cost`` answers), the drift (billed −
modelled, and as a percentage of modelled) and the effective price per GPU-hour the bill
implies (billed ÷ the GPU-hours infersight measured). Unmatched both ways: charges for a
resource that is no instance infersight priced that day, and instance-days the bill covers
with no charge for them. Purchases, taxes, credits and adjustments are totalled per category,
not compared. ``use_billed_price`` writes the effective prices into the cost model as
per-instance prices, through the store path ``infersight cost apply`` uses.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import IO, Any, Final

import yaml

from infersight.core.cost import CostModel, GpuPrice, InstanceCost, quantize
from infersight.core.errors import Conflict, InvalidInput
from infersight.core.focus import (
    COLUMNS,
    FOCUS_VERSION,
    BadCell,
    BillLine,
    BillMapping,
    check_header,
    day_shares,
    mapping_from,
    read_line,
)
from infersight.core.timestamps import iso
from infersight.core.window import Resolution, Window
from infersight.storage.seam import BillImport, Store

#: Largest file (decompressed) an import reads by default.
MAX_BYTES: Final = 512 * 1024 * 1024
#: Most rows an import stores by default.
MAX_ROWS: Final = 2_000_000
#: Most problems a refused import lists.
MAX_ERRORS: Final = 20
#: Rows written per statement.
BATCH: Final = 2000
#: Longest range a reconciliation answers (one cost query per day).
MAX_DAYS: Final = 93
#: Most unmatched resources listed per answer (the totals count all).
MAX_UNMATCHED: Final = 500
BASES: Final = ("billed", "effective")
MAPPING_KIND: Final = "BillMapping"
API_VERSION: Final = "infersight/v1"
_GZIP = b"\x1f\x8b"
_PARQUET = b"PAR1"


# -- reading files --------------------------------------------------------------------------


class _Bounded(io.RawIOBase):
    """A binary stream that refuses to yield more than ``limit`` bytes."""

    def __init__(self, inner: IO[bytes], limit: int) -> None:
        self.inner, self.limit, self.read_bytes = inner, limit, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.inner.read(len(buffer))
        self.read_bytes += len(data)
        if self.read_bytes > self.limit:
            raise InvalidInput(
                f"the file is larger than {self.limit} bytes (decompressed)",
                details={"max_bytes": self.limit},
            )
        buffer[: len(data)] = data
        return len(data)


def file_format(head: bytes) -> str:
    """``parquet``, ``csv.gz`` or ``csv`` from a file's first bytes."""
    if head.startswith(_PARQUET):
        return "parquet"
    if head.startswith(_GZIP):
        return "csv.gz"
    return "csv"


def _csv_rows(stream: IO[bytes], limit: int) -> Iterator[tuple[int, Mapping[str, object]]]:
    text = io.TextIOWrapper(
        io.BufferedReader(_Bounded(stream, limit)), encoding="utf-8-sig", newline=""
    )
    reader = csv.reader(text)
    try:
        header = next(reader, None)
        if header is None:
            raise InvalidInput("the file is empty (no FOCUS header row)")
        header = [h.strip() for h in header]
        check_header(header)
        width = len(header)
        for number, cells in enumerate(reader, start=1):
            if len(cells) != width:
                raise _RowError(number, "", f"has {len(cells)} cells where the header has {width}")
            yield number, dict(zip(header, cells, strict=True))
    except UnicodeDecodeError:
        raise InvalidInput("the file is not UTF-8 text", details={"row": reader.line_num}) from None
    except csv.Error as exc:
        raise _RowError(reader.line_num, "", f"is not valid CSV ({exc})") from None


def _parquet_rows(stream: IO[bytes], limit: int) -> Iterator[tuple[int, Mapping[str, object]]]:
    try:
        import pyarrow as pa  # noqa: PLC0415 (only for Parquet files)
        import pyarrow.parquet as pq  # noqa: PLC0415
    except ImportError:
        raise InvalidInput("reading Parquet needs pyarrow: install infersight[server]") from None
    size = stream.seek(0, io.SEEK_END)  # the footer is at the end: the file is seekable
    stream.seek(0)
    if size > limit:
        raise InvalidInput(f"the file is larger than {limit} bytes", details={"max_bytes": limit})
    try:
        parquet = pq.ParquetFile(stream)  # read a row group at a time
    except (pa.ArrowException, OSError) as exc:
        raise InvalidInput(f"not a readable Parquet file ({exc})"[:300]) from None
    names = list(parquet.schema_arrow.names)
    check_header(names)
    columns = [c for c in COLUMNS if c in names]
    number = 0
    try:
        for batch in parquet.iter_batches(batch_size=BATCH, columns=columns):
            for row in batch.to_pylist():
                number += 1
                yield number, row
    except (pa.ArrowException, OSError) as exc:
        raise _RowError(number + 1, "", f"cannot be read ({exc})"[:300]) from None


class _RowError(InvalidInput):
    def __init__(self, row: int, column: str, problem: str) -> None:
        super().__init__(f"row {row}: {problem}", details={"row": row})
        self.row, self.column, self.problem = row, column, problem


def rows_of(stream: IO[bytes], fmt: str, limit: int) -> Iterator[tuple[int, Mapping[str, object]]]:
    """The data rows of a FOCUS file (numbered from 1, the first row after the header)."""
    if fmt == "parquet":
        return _parquet_rows(stream, limit)
    if fmt == "csv.gz":
        return _csv_rows(gzip.GzipFile(fileobj=stream), limit)  # type: ignore[arg-type]
    return _csv_rows(stream, limit)


# -- mapping documents ----------------------------------------------------------------------


def parse_mapping(text: str | bytes) -> BillMapping:
    """A ``BillMapping`` document (YAML or JSON)::

    apiVersion: infersight/v1
    kind: BillMapping
    spec:
      keys: [tag:infersight.instance, ResourceName, ResourceId]
      aliases: {i-0abc123: gpu-node-1}
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidInput(f"not valid YAML or JSON: {exc}"[:300]) from None
    if not isinstance(data, dict):
        raise InvalidInput("a BillMapping document is a mapping")
    if data.get("apiVersion") != API_VERSION or data.get("kind") != MAPPING_KIND:
        raise InvalidInput(f"expected apiVersion {API_VERSION} and kind {MAPPING_KIND}")
    spec = data.get("spec") or {}
    if not isinstance(spec, dict):
        raise InvalidInput("a BillMapping's spec is a mapping")
    return mapping_from(spec)


# -- import ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Imported:
    """What an import stored."""

    id: int
    name: str
    format: str
    rows: int
    currency: str
    start: datetime
    end: datetime
    billed: Decimal
    by_category: Mapping[str, Decimal]
    instances: tuple[str, ...]
    unmapped_usage_rows: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "format": self.format,
            "focus_version": FOCUS_VERSION,
            "rows": self.rows,
            "currency": self.currency,
            "start": iso(self.start),
            "end": iso(self.end),
            "billed": _amount(self.billed),
            "by_category": {k: _amount(v) for k, v in sorted(self.by_category.items())},
            "instances": list(self.instances),
            "unmapped_usage_rows": self.unmapped_usage_rows,
        }


def amount_text(value: Decimal) -> str:
    """An amount as the API writes it: a decimal string with six places."""
    return str(quantize(value))


_amount = amount_text


def _people(value: Decimal) -> str:
    """An amount for a sentence: two places, thousands separated."""
    return f"{value:,.2f}"


def _sha256(open_file: Callable[[], IO[bytes]], limit: int) -> str:
    digest = hashlib.sha256()
    with open_file() as stream:
        bounded = _Bounded(stream, limit)
        while chunk := bounded.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass
class _Tally:
    """What an import has read so far: the lines to store, totals, problems."""

    mapping: BillMapping
    errors: list[dict[str, Any]] = field(default_factory=list)
    categories: dict[str, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    instances: set[str] = field(default_factory=set)
    batch: list[tuple[int, str, BillLine]] = field(default_factory=list)
    currency: str = ""
    start: datetime | None = None
    end: datetime | None = None
    billed: Decimal = Decimal(0)
    rows: int = 0
    unmapped: int = 0

    def read(self, number: int, row: Mapping[str, object]) -> bool:
        """Check and keep one row; ``False`` once enough problems are listed."""
        try:
            line = read_line(row)
            if self.currency and line.currency != self.currency:
                raise BadCell(
                    "BillingCurrency",
                    f"one file holds one currency (earlier rows: {self.currency})",
                    line.currency,
                )
        except BadCell as bad:
            problem = {"row": number, "column": bad.column, "problem": bad.problem}
            if "value" in bad.details:
                problem["value"] = bad.details["value"]
            self.errors.append(problem)
            return len(self.errors) < MAX_ERRORS
        if self.errors:
            return True  # keep checking, store nothing
        self.currency = line.currency
        instance = self.mapping.instance_of(line)
        if line.category == "Usage":
            if instance:
                self.instances.add(instance)
            else:
                self.unmapped += 1
        self.rows += 1
        self.billed += line.billed
        self.categories[line.category] += line.billed
        self.start = line.start if self.start is None else min(self.start, line.start)
        self.end = line.end if self.end is None else max(self.end, line.end)
        self.batch.append((number, instance, line))
        return True

    def take(self) -> list[tuple[int, str, BillLine]]:
        batch, self.batch = self.batch, []
        return batch


def import_bill(
    store: Store,
    open_file: Callable[[], IO[bytes]],
    name: str,
    mapping: BillMapping,
    now: datetime,
    *,
    max_rows: int = MAX_ROWS,
    max_bytes: int = MAX_BYTES,
) -> Imported:
    """Import a FOCUS file (``open_file`` opens it, binary, each time it is read) all or
    nothing (module docstring); ``Conflict`` when the same file was imported before."""
    sha = _sha256(open_file, max_bytes)
    with open_file() as stream:
        fmt = file_format(stream.read(4))
    tally = _Tally(mapping)
    with store.transaction() as tx, open_file() as stream:
        known = tx.bills.find_import(sha)
        if known is not None:
            raise Conflict(
                f"this file was imported already (import {known})",
                details={"import_id": known, "sha256": sha},
            )
        import_id = tx.bills.add_import(name, sha, fmt, mapping.as_dict(), now)
        try:
            for number, row in rows_of(stream, fmt, max_bytes):
                if number > max_rows:
                    raise InvalidInput(
                        f"the file has more than {max_rows} rows", details={"max_rows": max_rows}
                    )
                if not tally.read(number, row):
                    break
                if len(tally.batch) >= BATCH:
                    tx.bills.add_lines(import_id, tally.take())
        except _RowError as bad:
            tally.errors.append({"row": bad.row, "column": bad.column, "problem": bad.problem})
        if tally.errors:
            more = "+" if len(tally.errors) >= MAX_ERRORS else ""
            raise InvalidInput(
                f"{name}: {len(tally.errors)}{more} row(s) could not be read; nothing was imported",
                details={"errors": tally.errors, "focus_version": FOCUS_VERSION},
            )
        if tally.start is None or tally.end is None:
            raise InvalidInput(f"{name}: the file has no charges; nothing was imported")
        tx.bills.add_lines(import_id, tally.take())
        tx.bills.finish_import(
            import_id, tally.rows, tally.currency, tally.start, tally.end, tally.billed
        )
    return Imported(
        id=import_id,
        name=name,
        format=fmt,
        rows=tally.rows,
        currency=tally.currency,
        start=tally.start,
        end=tally.end,
        billed=tally.billed,
        by_category=dict(tally.categories),
        instances=tuple(sorted(tally.instances)),
        unmapped_usage_rows=tally.unmapped,
    )


def import_path(
    store: Store, path: Path, mapping: BillMapping, now: datetime, **limits: int
) -> Imported:
    return import_bill(store, lambda: path.open("rb"), path.name, mapping, now, **limits)


def import_bytes(
    store: Store, data: bytes, name: str, mapping: BillMapping, now: datetime, **limits: int
) -> Imported:
    return import_bill(store, lambda: io.BytesIO(data), name, mapping, now, **limits)


def list_imports(store: Store) -> list[BillImport]:
    """The imported bills, newest first."""
    return store.bills.list_imports()


def import_dict(info: BillImport) -> dict[str, Any]:
    """An imported bill as ``GET /api/v1/cost/bills`` lists it."""
    return {
        "id": info.id,
        "name": info.name,
        "format": info.format,
        "rows": info.rows,
        "currency": info.currency,
        "start": iso(info.period_start),
        "end": iso(info.period_end),
        "billed": amount_text(info.billed),
        "mapping": info.mapping,
        "imported_at": iso(info.imported_at),
    }


def delete_import(store: Store, import_id: int) -> int:
    """Forget imported bill ``import_id`` and its lines (how many); ``NotFound`` when there is
    none."""
    return store.bills.delete_import(import_id)


# -- reconciliation -------------------------------------------------------------------------


@dataclass
class Figures:
    """Billed against modelled cost of one instance over one day, or a range."""

    billed: Decimal = Decimal(0)
    modelled: Decimal = Decimal(0)
    gpu_hours: Decimal = Decimal(0)
    lines: int = 0

    @property
    def drift(self) -> Decimal:
        return self.billed - self.modelled

    @property
    def drift_pct(self) -> Decimal | None:
        if not self.modelled:
            return None
        return (self.drift * 100 / self.modelled).quantize(Decimal("0.01"))

    @property
    def price(self) -> Decimal | None:
        """Billed per GPU-hour measured (``None``: no GPU time)."""
        return quantize(self.billed / self.gpu_hours) if self.gpu_hours > 0 else None

    def add(self, other: Figures) -> None:
        self.billed += other.billed
        self.modelled += other.modelled
        self.gpu_hours += other.gpu_hours
        self.lines += other.lines

    def as_dict(self) -> dict[str, Any]:
        pct = self.drift_pct
        price = self.price
        return {
            "billed": _amount(self.billed),
            "modelled": _amount(self.modelled),
            "drift": _amount(self.drift),
            "drift_pct": None if pct is None else str(pct),
            "gpu_hours": _amount(self.gpu_hours),
            "billed_per_gpu_hour": None if price is None else str(price),
            "bill_lines": self.lines,
        }


@dataclass
class Unmatched:
    """Charges for one resource the bill names that infersight did not price that day."""

    day: date
    resource: str
    resource_id: str
    resource_name: str
    resource_type: str
    service: str
    reason: str
    billed: Decimal = Decimal(0)
    lines: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "date": self.day.isoformat(),
            "resource": self.resource,
            "resource_id": self.resource_id,
            "resource_name": self.resource_name,
            "resource_type": self.resource_type,
            "service": self.service,
            "reason": self.reason,
            "billed": _amount(self.billed),
            "bill_lines": self.lines,
        }


@dataclass
class Reconciliation:
    """The answer of ``reconcile`` (see the module docstring)."""

    start: datetime
    end: datetime
    basis: str
    currency: str
    model_name: str
    example_prices: bool
    imports: list[BillImport]
    days: dict[tuple[date, str], Figures] = field(default_factory=dict)
    instances: dict[str, Figures] = field(default_factory=dict)
    typed_prices: dict[str, Decimal | None] = field(default_factory=dict)
    unbilled: dict[tuple[date, str], Decimal] = field(default_factory=dict)
    unmatched: dict[tuple[date, str, str], Unmatched] = field(default_factory=dict)
    other: dict[str, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    covered_days: list[date] = field(default_factory=list)

    @property
    def total(self) -> Figures:
        out = Figures()
        for figures in self.instances.values():
            out.add(figures)
        return out

    @property
    def unmatched_billed(self) -> Decimal:
        return sum((u.billed for u in self.unmatched.values()), Decimal(0))

    @property
    def unbilled_modelled(self) -> Decimal:
        return sum(self.unbilled.values(), Decimal(0))

    def summary(self) -> str:
        """Which figures were reconciled, in a sentence (Cost page, weekly report)."""
        if not self.imports:
            return "not reconciled: no cloud bill (FOCUS export) covers this range"
        total = self.total
        pct = total.drift_pct
        pairs = len(self.days)
        text = (
            f"{pairs} instance-day(s) on {len(self.covered_days)} day(s) reconciled with "
            f"{len(self.imports)} imported bill(s): billed {_people(total.billed)} vs modelled "
            f"{_people(total.modelled)} {self.currency}"
        )
        if pct is not None:
            text += f", drift {pct:+}%"
        if self.unmatched:
            text += (
                f"; {_people(self.unmatched_billed)} {self.currency} billed for resources "
                "infersight never saw"
            )
        if self.unbilled:
            text += f"; {len(self.unbilled)} instance-day(s) with no bill line"
        return text

    def as_dict(self) -> dict[str, Any]:
        unmatched = sorted(self.unmatched.values(), key=lambda u: (u.day, -u.billed, u.resource))
        return {
            "start": iso(self.start),
            "end": iso(self.end),
            "basis": self.basis,
            "currency": self.currency,
            "focus_version": FOCUS_VERSION,
            "cost_model": {"name": self.model_name, "example_prices": self.example_prices},
            "reconciled": bool(self.imports),
            "summary": self.summary(),
            "imports": [
                {
                    "id": i.id,
                    "name": i.name,
                    "format": i.format,
                    "rows": i.rows,
                    "currency": i.currency,
                    "start": iso(i.period_start),
                    "end": iso(i.period_end),
                    "billed": _amount(i.billed),
                    "imported_at": iso(i.imported_at),
                }
                for i in self.imports
            ],
            "covered_days": [d.isoformat() for d in self.covered_days],
            "total": self.total.as_dict(),
            "instances": [
                {
                    "instance": name,
                    **figures.as_dict(),
                    "typed_price_per_gpu_hour": _price_text(self.typed_prices.get(name)),
                }
                for name, figures in sorted(self.instances.items())
            ],
            "days": [
                {"date": day.isoformat(), "instance": name, **figures.as_dict()}
                for (day, name), figures in sorted(self.days.items())
            ],
            "unmatched": {
                "billed_not_seen": [u.as_dict() for u in unmatched[:MAX_UNMATCHED]],
                "billed_not_seen_count": len(unmatched),
                "billed_not_seen_total": _amount(self.unmatched_billed),
                "seen_not_billed": [
                    {"date": day.isoformat(), "instance": name, "modelled": _amount(cost)}
                    for (day, name), cost in sorted(self.unbilled.items())
                ][:MAX_UNMATCHED],
                "seen_not_billed_count": len(self.unbilled),
                "seen_not_billed_total": _amount(self.unbilled_modelled),
            },
            "other_charges": {k: _amount(v) for k, v in sorted(self.other.items())},
        }


def _price_text(value: Decimal | None) -> str | None:
    return None if value is None else str(value)


def _utc_days(start: datetime, end: datetime) -> list[tuple[date, Window]]:
    out = []
    day = start.astimezone(UTC).date()
    while True:
        day_start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        lo, hi = max(day_start, start), min(day_start + timedelta(days=1), end)
        if hi > lo:
            out.append((day, Window(lo, hi)))
        if day_start + timedelta(days=1) >= end:
            return out
        day = day + timedelta(days=1)


def _typed_price(model: CostModel, instance: InstanceCost) -> Decimal | None:
    prices = {model.price_for(instance.instance, name) for name in instance.gpu_names}
    prices.discard(None)
    if len(prices) != 1:
        return None
    price: GpuPrice = prices.pop()  # type: ignore[assignment]
    return price.blended_per_hour


@dataclass
class _Charged:
    """The bill's side of a reconciliation: Usage charges per (day, instance), the first line
    of each (to describe it when unmatched), and charges no mapping key named."""

    by_key: dict[tuple[date, str], Figures] = field(default_factory=lambda: defaultdict(Figures))
    first: dict[tuple[date, str], BillLine] = field(default_factory=dict)
    unnamed: dict[tuple[date, str], Unmatched] = field(default_factory=dict)


def _read_bill(store: Store, out: Reconciliation, currency: str) -> _Charged:
    charged = _Charged()
    for stored in store.bills.lines_over(out.start, out.end):
        line = stored.charge
        amount = line.cost(out.basis)
        shares = day_shares(line, out.start, out.end)
        if line.category != "Usage" or line.currency != currency:
            key = line.category
            if line.currency != currency:
                key += f" ({line.currency}, not {currency})"
            for _, share in shares:
                out.other[key] += amount * share
            continue
        for day, share in shares:
            if stored.instance:
                figures = charged.by_key[(day, stored.instance)]
                figures.billed += amount * share
                figures.lines += 1
                charged.first.setdefault((day, stored.instance), line)
            else:
                resource = line.resource_id or line.resource_name or line.sku_id or line.service
                item = charged.unnamed.get((day, resource))
                if item is None:
                    item = charged.unnamed[(day, resource)] = Unmatched(
                        day,
                        resource,
                        line.resource_id,
                        line.resource_name,
                        line.resource_type,
                        line.service,
                        "none of the mapping's keys is set on this line",
                    )
                item.billed += amount * share
                item.lines += 1
    return charged


def _unmatched(out: Reconciliation, charged: _Charged) -> None:
    for (day, name), figures in charged.by_key.items():
        seen = charged.first[(day, name)]
        item = out.unmatched.setdefault(
            (day, name, "not_seen"),
            Unmatched(
                day,
                name,
                seen.resource_id,
                seen.resource_name,
                seen.resource_type,
                seen.service,
                "no instance of this name sent infersight GPU samples or requests this day",
            ),
        )
        item.billed += figures.billed
        item.lines += figures.lines
    for (day, resource), item in charged.unnamed.items():
        out.unmatched[(day, resource, "unmapped")] = item


def reconcile(
    store: Store,
    model: CostModel,
    start: datetime,
    end: datetime,
    *,
    basis: str = "billed",
    finest_for: Callable[[Window], Resolution] | None = None,
) -> Reconciliation:
    """Billed vs modelled cost per UTC day and instance over ``[start, end)`` (module doc)."""
    if basis not in BASES:
        raise InvalidInput("basis is billed or effective", details={"basis": basis})
    if end <= start:
        raise InvalidInput("end must be after start")
    days = _utc_days(start, end)
    if len(days) > MAX_DAYS:
        raise InvalidInput(f"a reconciliation covers at most {MAX_DAYS} days")
    imports = store.bills.imports_over(start, end)
    out = Reconciliation(
        start=start,
        end=end,
        basis=basis,
        currency=model.currency,
        model_name=model.name,
        example_prices=model.example,
        imports=imports,
    )
    covered = {
        day for day, w in days for i in imports if i.period_start < w.end and i.period_end > w.start
    }
    out.covered_days = sorted(covered)
    if not imports:
        return out  # no bill meets the range: nothing to compare, nothing unmatched
    charged = _read_bill(store, out, model.currency)
    for day, window in days:
        if day not in covered:
            continue  # no bill covers it: no charge, nothing unbilled, no cost query
        result = store.cost.cost(
            window,
            model,
            group_by=("instance",),
            finest=finest_for(window) if finest_for else Resolution.MINUTE,
        )
        for instance in result.instances:
            key = (day, instance.instance)
            modelled = instance.total.amount
            if instance.gpu_hours <= 0 and modelled <= 0:
                continue
            out.typed_prices.setdefault(instance.instance, _typed_price(model, instance))
            if key in charged.by_key:
                figures = charged.by_key.pop(key)
                figures.modelled = modelled
                figures.gpu_hours = instance.gpu_hours
                out.days[key] = figures
                out.instances.setdefault(instance.instance, Figures()).add(figures)
            elif day in covered:
                out.unbilled[key] = modelled
    _unmatched(out, charged)
    return out


# -- the effective price into the cost model ------------------------------------------------


def billed_prices(
    recon: Reconciliation, instances: Iterable[str] | None = None
) -> dict[str, Decimal]:
    """The effective price per GPU-hour of each reconciled instance (``instances``: only
    these), over the whole range."""
    wanted = None if instances is None else set(instances)
    out = {}
    for name, figures in recon.instances.items():
        price = figures.price
        if price is not None and (wanted is None or name in wanted):
            out[name] = price
    if wanted:
        missing = sorted(wanted - set(out))
        if missing:
            raise InvalidInput(
                "no bill line and GPU time to price these instances from",
                details={"instances": missing},
            )
    return out


def with_billed_prices(model: CostModel, prices: Mapping[str, Decimal]) -> CostModel:
    """``model`` with ``prices`` as its per-instance on-demand prices (others kept)."""
    if not prices:
        raise InvalidInput("no reconciled instance has an effective price to use")
    instance_prices = dict(model.instance_prices)
    for name, price in prices.items():
        instance_prices[name] = GpuPrice(price)
    return replace(model, instance_prices=instance_prices, example=False)


def use_billed_price(
    store: Store,
    model: CostModel,
    start: datetime,
    end: datetime,
    now: datetime,
    *,
    instances: Sequence[str] | None = None,
    basis: str = "billed",
    dry_run: bool = False,
) -> tuple[CostModel, dict[str, Decimal]]:
    """Replace the typed-in prices of reconciled instances with what the bill implies, as a
    new version of ``model`` stored under its name (``dry_run``: computed, not stored)."""
    recon = reconcile(store, model, start, end, basis=basis)
    prices = billed_prices(recon, instances)
    updated = with_billed_prices(model, prices)
    if not dry_run:
        store.cost_models.put(updated, now)
    return updated, prices
