"""Money: ``Decimal`` amounts with an explicit currency, kept to a millionth of the unit, and
the exact split of an amount into shares (largest remainders, so shares add up exactly)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, ROUND_HALF_EVEN, Decimal
from typing import Final

from infersight.core.errors import InvalidInput

#: Money is kept to a millionth of the currency unit.
QUANTUM: Final = Decimal("0.000001")
MILLION: Final = Decimal(1_000_000)
_CURRENCY = re.compile(r"[A-Z]{3}")
ZERO: Final = Decimal(0)


def check_currency(code: str) -> str:
    if not _CURRENCY.fullmatch(code):
        raise InvalidInput(
            "currency must be an ISO 4217 code such as USD", details={"currency": code[:16]}
        )
    return code


def quantize(amount: Decimal) -> Decimal:
    return amount.quantize(QUANTUM, rounding=ROUND_HALF_EVEN)


def decimal_of(value: float, places: int = 6) -> Decimal:
    """A measured float as a Decimal rounded to ``places`` (seconds, joules from the store)."""
    if not math.isfinite(value):
        raise InvalidInput("a measured quantity is not finite", details={"value": repr(value)})
    return Decimal(f"{value:.{places}f}")


@dataclass(frozen=True, slots=True)
class Money:
    """An amount in one currency; adding amounts of two currencies is an error."""

    amount: Decimal
    currency: str

    def __post_init__(self) -> None:
        if not isinstance(self.amount, Decimal) or not self.amount.is_finite():
            raise InvalidInput(
                "money amounts are finite Decimals", details={"amount": str(self.amount)}
            )
        check_currency(self.currency)

    @classmethod
    def zero(cls, currency: str) -> Money:
        return cls(ZERO, currency)

    def _same(self, other: Money) -> None:
        if other.currency != self.currency:
            raise InvalidInput(
                "cannot combine amounts in different currencies",
                details={"currencies": [self.currency, other.currency]},
            )

    def __add__(self, other: Money) -> Money:
        self._same(other)
        return Money(self.amount + other.amount, self.currency)

    def __sub__(self, other: Money) -> Money:
        self._same(other)
        return Money(self.amount - other.amount, self.currency)

    def times(self, factor: Decimal) -> Money:
        return Money(self.amount * factor, self.currency)

    def per_million(self, units: int) -> Money | None:
        """This amount per million ``units`` (tokens), or ``None`` for no units."""
        if units <= 0:
            return None
        return Money(quantize(self.amount * MILLION / Decimal(units)), self.currency)

    def __str__(self) -> str:
        return f"{self.amount} {self.currency}"


def allocate(
    total: Decimal, weights: Sequence[Decimal], quantum: Decimal = QUANTUM
) -> list[Decimal]:
    """Split ``total`` (a multiple of ``quantum``) in proportion to ``weights``, in multiples
    of ``quantum`` that add up to ``total`` exactly (largest remainders get the leftovers).
    Zero weights everywhere split evenly."""
    if not weights:
        return []
    if any(w < 0 for w in weights):
        raise InvalidInput("allocation weights must be ≥ 0")
    whole = sum(weights, ZERO)
    if whole == 0:
        weights, whole = [Decimal(1)] * len(weights), Decimal(len(weights))
    units = (total / quantum).to_integral_value(rounding=ROUND_HALF_EVEN)
    exact = [units * w / whole for w in weights]
    floors = [e.to_integral_value(rounding=ROUND_FLOOR) for e in exact]
    left = int(units - sum(floors, ZERO))
    order = sorted(range(len(exact)), key=lambda i: (exact[i] - floors[i], -i), reverse=True)
    for i in order[:left] if left > 0 else ():
        floors[i] += 1
    if left < 0:  # negative totals: take the leftovers back from the smallest remainders
        for i in order[left:]:
            floors[i] -= 1
    return [f * quantum for f in floors]
