"""Cloud bill lines in FOCUS, checked, and mapped to infersight's instances.

FOCUS (the FinOps Open Cost and Usage Specification, https://focus.finops.org, columns as
defined by version 1.2) is the cost and usage export format AWS, Google Cloud and Azure all
write. A row is one charge: ``BilledCost`` (what the invoice charges, in ``BillingCurrency``),
``EffectiveCost`` (amortised, commitments spread), ``ListCost``, over ``[ChargePeriodStart,
ChargePeriodEnd)`` (ISO 8601 UTC, ``2026-11-23T00:00:00Z``), of a ``ChargeCategory`` (Usage,
Purchase, Tax, Credit, Adjustment), for a resource (``ResourceId``, ``ResourceName``,
``ResourceType``) with ``Tags`` (a JSON object of strings, numbers, booleans or nulls).

``read_line`` turns one row (a mapping of column name → cell, text or the Parquet value)
into a ``BillLine`` or raises ``BadCell`` naming the column; ``BillMapping`` says which of a
line's fields names the infersight instance it was billed for. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from infersight.core.errors import InvalidInput
from infersight.core.money import ZERO, check_currency

#: The FOCUS version whose column definitions this module follows.
FOCUS_VERSION: Final = "1.2"
#: Columns a row must have (FOCUS 1.2 "Mandatory" columns this import uses).
REQUIRED: Final = (
    "BilledCost",
    "EffectiveCost",
    "BillingCurrency",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "ChargeCategory",
)
#: Columns read when present (the conditional and optional ones this import uses).
OPTIONAL: Final = (
    "ListCost",
    "ChargeClass",
    "ProviderName",
    "ServiceName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "SkuId",
    "SkuPriceId",
    "PricingUnit",
    "PricingQuantity",
    "ConsumedQuantity",
    "ConsumedUnit",
    "Tags",
)
COLUMNS: Final = REQUIRED + OPTIONAL
CATEGORIES: Final = frozenset({"Usage", "Purchase", "Tax", "Credit", "Adjustment"})
#: Longest text kept from a cell (FOCUS sets no limit; resource ids are ARNs and URIs).
MAX_TEXT: Final = 1024
#: Largest Tags object kept, in characters of its JSON.
MAX_TAGS: Final = 8192
#: The longest charge period a line may span.
MAX_PERIOD: Final = timedelta(days=366)
#: Largest absolute amount accepted in a cost column.
MAX_AMOUNT: Final = Decimal(10) ** 15
#: Longest decimal text of an amount or quantity (the store keeps them as text).
MAX_DIGITS: Final = 40
_NUMBER = re.compile(r"^-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE]-?\d+)?$")
_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]00:?00)$")


class BadCell(InvalidInput):
    """A cell of a FOCUS row that is missing or not what the specification says."""

    def __init__(self, column: str, problem: str, value: object = None) -> None:
        details: dict[str, Any] = {"column": column}
        if value is not None:
            details["value"] = str(value)[:64]
        super().__init__(f"{column}: {problem}", details=details)
        self.column = column
        self.problem = problem


@dataclass(frozen=True, slots=True)
class BillLine:
    """One charge of a FOCUS export (amounts in ``currency``)."""

    start: datetime
    end: datetime
    category: str
    currency: str
    billed: Decimal
    effective: Decimal
    list_cost: Decimal | None = None
    charge_class: str = ""
    provider: str = ""
    service: str = ""
    resource_id: str = ""
    resource_name: str = ""
    resource_type: str = ""
    sku_id: str = ""
    sku_price_id: str = ""
    pricing_unit: str = ""
    pricing_quantity: Decimal | None = None
    consumed_quantity: Decimal | None = None
    consumed_unit: str = ""
    tags: Mapping[str, str | int | float | bool | None] = field(default_factory=dict)

    @property
    def seconds(self) -> Decimal:
        return Decimal((self.end - self.start).total_seconds())

    def cost(self, basis: str) -> Decimal:
        return self.effective if basis == "effective" else self.billed


def _empty(value: object) -> bool:
    return value is None or (isinstance(value, str) and value.strip() == "")


def _text(row: Mapping[str, object], column: str) -> str:
    value = row.get(column)
    if _empty(value):
        return ""
    text = str(value).strip()
    if len(text) > MAX_TEXT:
        raise BadCell(column, f"longer than {MAX_TEXT} characters", text)
    if any(ord(c) < 32 for c in text):
        raise BadCell(column, "holds a control character")
    return text


def _decimal(row: Mapping[str, object], column: str, *, required: bool) -> Decimal | None:
    value = row.get(column)
    if _empty(value):
        if required:
            raise BadCell(column, "must not be empty (FOCUS: a decimal, never null)")
        return None
    if isinstance(value, bool):
        raise BadCell(column, "must be a decimal number", value)
    if isinstance(value, Decimal):
        amount = value
    elif isinstance(value, int | float):
        amount = Decimal(str(value))
    else:
        text = str(value).strip()
        if not _NUMBER.match(text):
            raise BadCell(column, "must be a decimal number (FOCUS numeric format)", text)
        try:
            amount = Decimal(text)
        except InvalidOperation:
            raise BadCell(column, "must be a decimal number", text) from None
    if not amount.is_finite() or abs(amount) > MAX_AMOUNT:
        raise BadCell(column, f"must be a finite number within ±{MAX_AMOUNT:.0E}", value)
    if len(str(amount)) > MAX_DIGITS:
        raise BadCell(column, f"has more digits than are kept (at most {MAX_DIGITS})", value)
    return amount


def _datetime(row: Mapping[str, object], column: str) -> datetime:
    value = row.get(column)
    if _empty(value):
        raise BadCell(column, "must not be empty")
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise BadCell(column, "must be in UTC (a Parquet timestamp with a time zone)", value)
        return value.astimezone(UTC)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    text = str(value).strip()
    if not _DATETIME.match(text):
        raise BadCell(column, "must be an ISO 8601 UTC time like 2026-11-23T00:00:00Z", text)
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        raise BadCell(column, "is not a valid date and time", text) from None


def _tags(row: Mapping[str, object]) -> dict[str, str | int | float | bool | None]:
    value = row.get("Tags")
    if _empty(value):
        return {}
    if isinstance(value, Mapping):
        data: object = dict(value)
    elif isinstance(value, list) and all(isinstance(p, tuple) and len(p) == 2 for p in value):
        data = dict(value)  # a Parquet MAP<string, string> column
    else:
        text = str(value)
        if len(text) > MAX_TAGS:
            raise BadCell("Tags", f"longer than {MAX_TAGS} characters")
        try:
            data = json.loads(text)
        except ValueError:
            raise BadCell("Tags", "must be a JSON object (FOCUS key-value format)", text) from None
    if not isinstance(data, dict):
        raise BadCell("Tags", "must be a JSON object (FOCUS key-value format)", value)
    out: dict[str, str | int | float | bool | None] = {}
    for key, item in data.items():
        if not isinstance(key, str) or len(key) > MAX_TEXT:
            raise BadCell("Tags", "keys must be strings", key)
        if item is not None and not isinstance(item, str | int | float | bool):
            raise BadCell("Tags", f"the value of {key!r} must be a string, number, boolean or null")
        out[key] = item
    return out


def read_line(row: Mapping[str, object]) -> BillLine:
    """One FOCUS row → ``BillLine``; ``BadCell`` names the first column that is wrong."""
    start = _datetime(row, "ChargePeriodStart")
    end = _datetime(row, "ChargePeriodEnd")
    if end <= start:
        raise BadCell(
            "ChargePeriodEnd", "must be after ChargePeriodStart", row.get("ChargePeriodEnd")
        )
    if end - start > MAX_PERIOD:
        raise BadCell("ChargePeriodEnd", "a charge period spans at most 366 days")
    category = _text(row, "ChargeCategory")
    if category not in CATEGORIES:
        raise BadCell("ChargeCategory", "must be one of " + ", ".join(sorted(CATEGORIES)), category)
    currency = _text(row, "BillingCurrency")
    try:
        check_currency(currency)
    except InvalidInput:
        raise BadCell("BillingCurrency", "must be an ISO 4217 code like USD", currency) from None
    billed = _decimal(row, "BilledCost", required=True)
    effective = _decimal(row, "EffectiveCost", required=True)
    assert billed is not None
    assert effective is not None
    return BillLine(
        start=start,
        end=end,
        category=category,
        currency=currency,
        billed=billed,
        effective=effective,
        list_cost=_decimal(row, "ListCost", required=False),
        charge_class=_text(row, "ChargeClass"),
        provider=_text(row, "ProviderName"),
        service=_text(row, "ServiceName"),
        resource_id=_text(row, "ResourceId"),
        resource_name=_text(row, "ResourceName"),
        resource_type=_text(row, "ResourceType"),
        sku_id=_text(row, "SkuId"),
        sku_price_id=_text(row, "SkuPriceId"),
        pricing_unit=_text(row, "PricingUnit"),
        pricing_quantity=_decimal(row, "PricingQuantity", required=False),
        consumed_quantity=_decimal(row, "ConsumedQuantity", required=False),
        consumed_unit=_text(row, "ConsumedUnit"),
        tags=_tags(row),
    )


def check_header(columns: Sequence[str]) -> None:
    """Refuses a file whose header lacks a column ``read_line`` needs."""
    missing = [c for c in REQUIRED if c not in columns]
    if missing:
        raise InvalidInput(
            "not a FOCUS export: missing column(s) " + ", ".join(missing),
            details={"missing": missing, "focus_version": FOCUS_VERSION},
        )


# -- mapping lines to instances -------------------------------------------------------------

#: Where a mapping key may look: a column, or a tag (``tag:KEY``).
KEY_COLUMNS: Final = {"ResourceId": "resource_id", "ResourceName": "resource_name"}
DEFAULT_KEYS: Final = ("tag:infersight.instance", "ResourceName", "ResourceId")
MAX_KEYS: Final = 16
MAX_ALIASES: Final = 100_000


@dataclass(frozen=True, slots=True)
class BillMapping:
    """How a bill line names the infersight instance it was billed for.

    ``keys`` are tried in order: ``ResourceId``, ``ResourceName``, or ``tag:KEY`` (a key of
    the line's ``Tags``, e.g. ``tag:infersight.instance`` or ``tag:kubernetes.io/hostname``);
    the first the line has (non-empty) is its resource key. ``aliases`` then renames a key
    (``i-0abc…`` → ``gpu-node-1``) where the cloud's name is not the instance's. A line none
    of whose keys is set is mapped to nothing (its resource is not an instance)."""

    keys: tuple[str, ...] = DEFAULT_KEYS
    aliases: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.keys or len(self.keys) > MAX_KEYS:
            raise InvalidInput(f"a bill mapping names 1 to {MAX_KEYS} keys")
        for key in self.keys:
            if key not in KEY_COLUMNS and not (key.startswith("tag:") and len(key) > 4):
                raise InvalidInput(
                    "a mapping key is ResourceId, ResourceName or tag:KEY", details={"key": key}
                )
        if len(self.aliases) > MAX_ALIASES:
            raise InvalidInput(f"a bill mapping holds at most {MAX_ALIASES} aliases")

    def instance_of(self, line: BillLine) -> str:
        """The instance ``line`` was billed for (``""``: none of the keys is set)."""
        for key in self.keys:
            if key in KEY_COLUMNS:
                value: object = getattr(line, KEY_COLUMNS[key])
            else:
                value = line.tags.get(key[4:])
            if value is None or value is True or value == "":
                continue
            text = str(value)
            return self.aliases.get(text, text)[:256]
        return ""

    def as_dict(self) -> dict[str, Any]:
        return {"keys": list(self.keys), "aliases": dict(self.aliases)}


def mapping_from(data: Mapping[str, Any]) -> BillMapping:
    """A ``BillMapping`` document's ``spec`` (``keys``, ``aliases``) → ``BillMapping``."""
    unknown = set(data) - {"keys", "aliases"}
    if unknown:
        raise InvalidInput(
            "a BillMapping spec has keys and aliases", details={"unknown": sorted(unknown)}
        )
    keys = data.get("keys", list(DEFAULT_KEYS))
    aliases = data.get("aliases", {}) or {}
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise InvalidInput("BillMapping keys must be a list of strings")
    if not isinstance(aliases, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in aliases.items()
    ):
        raise InvalidInput("BillMapping aliases map a resource key to an instance name")
    return BillMapping(tuple(keys), dict(aliases))


# -- spreading a charge over days ------------------------------------------------------------


def day_shares(line: BillLine, start: datetime, end: datetime) -> list[tuple[date, Decimal]]:
    """The fraction of ``line``'s charge period on each UTC day within ``[start, end)``
    (time-proportional: a charge of 48 hours is half on each of its two days)."""
    lo, hi = max(line.start, start), min(line.end, end)
    if hi <= lo:
        return []
    total = line.seconds
    out = []
    day = lo.date()
    while True:
        day_start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        day_end = day_start + timedelta(days=1)
        a, b = max(lo, day_start), min(hi, day_end)
        if b > a:
            out.append((day, Decimal((b - a).total_seconds()) / total))
        if day_end >= hi:
            break
        day = day_end.date()
    return out


__all__ = [
    "CATEGORIES",
    "COLUMNS",
    "DEFAULT_KEYS",
    "FOCUS_VERSION",
    "REQUIRED",
    "ZERO",
    "BadCell",
    "BillLine",
    "BillMapping",
    "check_header",
    "day_shares",
    "mapping_from",
    "read_line",
]
