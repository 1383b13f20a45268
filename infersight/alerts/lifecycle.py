"""What a later diagnosis does to an open incident's headline: keep it, or raise itself over it.

An incident's headline is the diagnosis made at its onset — the cause its page named. Later
diagnoses (while it fires) go to its history; one replaces the headline (``RAISED``) only
with clearly stronger evidence from the incident's own place: a named cause (never
``unknown``), on the headline's instance when the headline names one (a fault on another
instance is another incident's business, never this one's), at least ``RAISE_MARGIN`` more
confident than the headline and at least ``RAISE_FLOOR``, and confirmed by the diagnosis
before it (same cause, same instance), so one noisy window cannot rewrite an incident.

Pure: diagnoses come in as the dictionaries ``alerts.diagnose.Diagnosis.to_dict`` makes.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final

#: How much more confident a later cause must be than the headline to replace it.
RAISE_MARGIN: Final = 0.15
#: The least confidence a cause needs to replace a headline at all.
RAISE_FLOOR: Final = 0.5


class Verdict(StrEnum):
    KEPT = "kept"
    RAISED = "raised"


def _confidence(diagnosis: Mapping[str, Any]) -> float:
    value = diagnosis.get("confidence")
    return float(value) if isinstance(value, int | float) else 0.0


def _place(diagnosis: Mapping[str, Any]) -> tuple[str, str]:
    return str(diagnosis.get("cause") or "unknown"), str(diagnosis.get("instance") or "")


def judge(
    headline: Mapping[str, Any],
    latest: Mapping[str, Any],
    previous: Mapping[str, Any] | None,
) -> Verdict:
    """Whether ``latest`` replaces ``headline``; ``previous`` is the diagnosis before it."""
    cause, instance = _place(latest)
    held, where = _place(headline)
    if cause in ("unknown", held):
        return Verdict.KEPT
    if where and instance != where:
        return Verdict.KEPT  # a fault elsewhere
    if _confidence(latest) < max(RAISE_FLOOR, _confidence(headline) + RAISE_MARGIN):
        return Verdict.KEPT
    if previous is None or _place(previous) != (cause, instance):
        return Verdict.KEPT  # not confirmed yet
    return Verdict.RAISED
