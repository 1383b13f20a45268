"""Instants as the API and the CLI write them: RFC 3339 with a time zone, or Unix seconds.

``parse_time`` raises ``InvalidInput`` naming the parameter; ``iso`` writes UTC with ``Z``.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Final

from infersight.core.errors import InvalidInput

#: What ``parse_time`` accepts: Unix seconds before 7,000,000,000 (the year 2191), or an
#: RFC 3339-style date and time with its offset in the years 1970 to 2199 (a window near year 1
#: or 9999 could not be computed with, nor shifted to a time zone).
TIME_REGEX: Final = (
    r"^\s*(?:[0-9]{1,9}|[1-6][0-9]{9})(?:\.[0-9]{1,9})?\s*$"
    r"|^\s*(?:19[7-9][0-9]|2[01][0-9]{2})-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}"
    r"(?::[0-9]{2}(?:\.[0-9]{1,9})?)?"
    r"(?:[Zz]|[+-][0-9]{2}:[0-9]{2})\s*$"
)
_TIME = re.compile(TIME_REGEX)
TIME_HELP: Final = "RFC 3339 (2026-11-30T10:00:00Z) or Unix seconds, in 1970 to 2199"


def parse_time(name: str, text: str) -> datetime:
    if len(text) > 64 or not _TIME.match(text):
        raise InvalidInput(f"{name} must be {TIME_HELP}", details={name: text[:64]})
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds) or not 0 <= seconds < 7_258_118_400:  # before 2200
            raise InvalidInput(f"{name} is out of range", details={name: text})
        return datetime.fromtimestamp(seconds, UTC)
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        return value.astimezone(UTC)
    except (ValueError, OverflowError):  # no such date, or beyond year 1..9999 in UTC
        raise InvalidInput(f"{name} must be {TIME_HELP}", details={name: text[:64]}) from None


def iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")
