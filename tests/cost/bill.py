"""A FOCUS 1.2 cost export for the worked week (``tests.cost.scenario``), built to the
published column specification (FinOps Foundation, FOCUS_Spec ``specification/columns``, tag
v1.2): column ids, Decimal costs, ISO 8601 UTC charge periods ``YYYY-MM-DDTHH:mm:ssZ``, Tags
as a JSON object (key-value format), ChargeCategory from its allowed values.

The bill charges ``h200-a`` 3.00 USD an hour (EffectiveCost 2.90, ListCost 4.00) in hourly
lines; infersight's cost model prices its day at 80.64 (``scenario``), so each day drifts by
−8.64 (−10.71 %) and the bill implies 3.00 per GPU-hour. ``gpu-node-9`` is billed 100.00 a
day but never reported to infersight; ``h200-idle`` ran on Wednesday with no bill line. A
usage line for data transfer names no resource, and a tax line is not compared.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Final

from tests.cost.scenario import WEEK_START

HEADER: Final = (
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "BillingCurrency",
    "BillingAccountId",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ProviderName",
    "ServiceName",
    "ServiceCategory",
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
H200_ID: Final = "arn:aws:ec2:us-east-1:123456789012:instance/i-0aaa1111"


def _t(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def rows(first_day: int, days: int) -> list[dict[str, Any]]:
    """The bill's rows for ``days`` days from the worked week's day ``first_day`` (0: Monday)."""
    start = WEEK_START + timedelta(days=first_day)
    end = start + timedelta(days=days)
    common = {
        "BillingCurrency": "USD",
        "BillingAccountId": "123456789012",
        "BillingPeriodStart": _t(WEEK_START.replace(day=1)),
        "BillingPeriodEnd": _t(WEEK_START.replace(month=12, day=1)),
        "ChargeClass": None,
        "ProviderName": "AWS",
    }
    out: list[dict[str, Any]] = []
    hour = start
    while hour < end:
        out.append(
            {
                **common,
                "BilledCost": Decimal("3.00"),
                "EffectiveCost": Decimal("2.90"),
                "ListCost": Decimal("4.00"),
                "ChargePeriodStart": _t(hour),
                "ChargePeriodEnd": _t(hour + timedelta(hours=1)),
                "ChargeCategory": "Usage",
                "ChargeDescription": "p5e GPU instance hour",
                "ServiceName": "Amazon Elastic Compute Cloud",
                "ServiceCategory": "Compute",
                "ResourceId": H200_ID,
                "ResourceName": "i-0aaa1111",
                "ResourceType": "Virtual Machine",
                "SkuId": "SKU-H200",
                "SkuPriceId": "SKU-H200-OD",
                "PricingUnit": "Hours",
                "PricingQuantity": Decimal(1),
                "ConsumedQuantity": Decimal(1),
                "ConsumedUnit": "Hours",
                "Tags": json.dumps({"infersight.instance": "h200-a", "team": "ml"}),
            }
        )
        hour += timedelta(hours=1)
    day = start
    while day < end:
        nxt = day + timedelta(days=1)
        out.append(
            {
                **common,
                "BilledCost": Decimal("100.00"),
                "EffectiveCost": Decimal("100.00"),
                "ListCost": Decimal("100.00"),
                "ChargePeriodStart": _t(day),
                "ChargePeriodEnd": _t(nxt),
                "ChargeCategory": "Usage",
                "ChargeDescription": "GPU instance day",
                "ServiceName": "Amazon Elastic Compute Cloud",
                "ServiceCategory": "Compute",
                "ResourceId": "arn:aws:ec2:us-east-1:123456789012:instance/i-0999",
                "ResourceName": "gpu-node-9",
                "ResourceType": "Virtual Machine",
                "SkuId": "SKU-H200",
                "SkuPriceId": "SKU-H200-OD",
                "PricingUnit": "Hours",
                "PricingQuantity": Decimal(24),
                "ConsumedQuantity": Decimal(24),
                "ConsumedUnit": "Hours",
                "Tags": json.dumps({"kubernetes.io/hostname": "gpu-node-9"}),
            }
        )
        out.append(
            {
                **common,
                "BilledCost": Decimal("5.00"),
                "EffectiveCost": Decimal("5.00"),
                "ListCost": Decimal("5.00"),
                "ChargePeriodStart": _t(day),
                "ChargePeriodEnd": _t(nxt),
                "ChargeCategory": "Usage",
                "ChargeDescription": "Data transfer out",
                "ServiceName": "AWS Data Transfer",
                "ServiceCategory": "Networking",
                "ResourceId": None,
                "ResourceName": None,
                "ResourceType": None,
                "SkuId": "SKU-DTO",
                "SkuPriceId": "SKU-DTO-1",
                "PricingUnit": "GB",
                "PricingQuantity": Decimal(50),
                "ConsumedQuantity": Decimal(50),
                "ConsumedUnit": "GB",
                "Tags": None,
            }
        )
        out.append(
            {
                **common,
                "BilledCost": Decimal("10.00"),
                "EffectiveCost": Decimal("10.00"),
                "ListCost": None,
                "ChargePeriodStart": _t(day),
                "ChargePeriodEnd": _t(nxt),
                "ChargeCategory": "Tax",
                "ChargeDescription": "Sales tax",
                "ServiceName": "Tax",
                "ServiceCategory": "Other",
                "ResourceId": None,
                "ResourceName": None,
                "ResourceType": None,
                "SkuId": None,
                "SkuPriceId": None,
                "PricingUnit": None,
                "PricingQuantity": None,
                "ConsumedQuantity": None,
                "ConsumedUnit": None,
                "Tags": None,
            }
        )
        day = nxt
    return out


def to_csv(data: list[dict[str, Any]]) -> bytes:
    """The rows as FOCUS CSV (a null is an empty cell)."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\r\n")
    writer.writerow(HEADER)
    for row in data:
        writer.writerow(["" if row[c] is None else str(row[c]) for c in HEADER])
    return text.getvalue().encode()


def to_parquet(data: list[dict[str, Any]]) -> bytes:
    """The rows as Parquet, typed as FOCUS says: Decimal costs and quantities, UTC
    timestamps for date/times, strings (JSON for Tags)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    decimal = pa.decimal128(20, 10)
    stamp = pa.timestamp("s", tz="UTC")
    costs = ("BilledCost", "EffectiveCost", "ListCost", "PricingQuantity", "ConsumedQuantity")
    times = ("ChargePeriodStart", "ChargePeriodEnd", "BillingPeriodStart", "BillingPeriodEnd")
    types = dict.fromkeys(costs, decimal) | dict.fromkeys(times, stamp)
    arrays = []
    for column in HEADER:
        values = [row[column] for row in data]
        kind = types.get(column, pa.string())
        if kind == stamp:
            values = [
                None if v is None else datetime.fromisoformat(v.replace("Z", "+00:00"))
                for v in values
            ]
        arrays.append(pa.array(values, type=kind))
    table = pa.Table.from_arrays(arrays, names=list(HEADER))
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()
