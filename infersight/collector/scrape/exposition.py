"""Parsing Prometheus text and OpenMetrics into a flat sample table, repairing what
``prometheus_client``'s parsers get wrong for our purpose:

- the classic parser renames the samples of a ``counter`` family that lacks ``_total``
  (TGI's ``tgi_request_count``) to ``…_total``, a name the server never exposed; and it
  splits ``# TYPE x counter`` from its ``x_total`` samples into an "unknown" family;
- OpenMetrics bodies (exemplars, ``# EOF``) need the OpenMetrics parser, which rejects
  classic bodies, so each body is tried with the parser its content type names first.

Lookups therefore accept a name with or without ``_total``.

A server with data-parallel engines labels each engine's series (``engine="1"``,
``dp_rank="1"``): ``split`` gives one ``Exposition`` per engine. Some servers also repeat a
scheduler's series once per tensor- or pipeline-parallel worker (SGLang's ``tp_rank``):
``without_replicas`` keeps one copy, so that a sum counts the scheduler once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_classic

from infersight.core.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class Sample:
    labels: Mapping[str, str]
    value: float


class Exposition:
    """Samples by name; ``x`` and ``x_total`` find each other."""

    def __init__(self, samples: Iterable[tuple[str, Mapping[str, str], float]]) -> None:
        self._by_name: dict[str, list[Sample]] = {}
        for name, labels, value in samples:
            self._by_name.setdefault(name, []).append(Sample(dict(labels), value))

    def names(self) -> Iterator[str]:
        return iter(self._by_name)

    def samples(self, name: str) -> list[Sample]:
        for candidate in (name, name + "_total", name.removesuffix("_total")):
            if candidate in self._by_name:
                return self._by_name[candidate]
        return []

    def total(self, name: str, **match: str) -> float | None:
        """The sum over the series of ``name`` whose labels include ``match``; ``None`` when
        absent or not finite."""
        found = [
            s.value
            for s in self.samples(name)
            if all(s.labels.get(k) == v for k, v in match.items())
        ]
        if not found:
            return None
        value = math.fsum(found)
        return value if math.isfinite(value) else None

    def first(self, *names: str, **match: str) -> float | None:
        for name in names:
            value = self.total(name, **match)
            if value is not None:
                return value
        return None

    def without_replicas(self, *replica_labels: str) -> Exposition:
        """Series that differ only by ``replica_labels`` counted once: the copy with the
        lowest replica label values (numerically where they are numbers) is kept."""
        if not replica_labels:
            return self

        def order(sample: Sample) -> tuple[tuple[int, str], ...]:
            values = (sample.labels.get(label, "") for label in replica_labels)
            return tuple((int(v), "") if v.isdigit() else (1 << 62, v) for v in values)

        kept: list[tuple[str, Mapping[str, str], float]] = []
        for name, samples in self._by_name.items():
            copies: dict[tuple[tuple[str, str], ...], Sample] = {}
            for sample in samples:
                key = tuple(
                    sorted((k, v) for k, v in sample.labels.items() if k not in replica_labels)
                )
                if key not in copies or order(sample) < order(copies[key]):
                    copies[key] = sample
            kept.extend((name, s.labels, s.value) for s in copies.values())
        return Exposition(kept)

    def split(self, label: str, prefix: str = "") -> dict[str, Exposition]:
        """One exposition per value of ``label`` among the series named ``prefix…``, holding
        the series that carry that value."""
        parts: dict[str, list[tuple[str, Mapping[str, str], float]]] = {}
        for name, samples in self._by_name.items():
            if not name.startswith(prefix):
                continue
            for s in samples:
                if label in s.labels:
                    parts.setdefault(s.labels[label], []).append((name, s.labels, s.value))
        return {value: Exposition(found) for value, found in parts.items()}

    def label_values(self, label: str) -> set[str]:
        return {
            s.labels[label]
            for samples in self._by_name.values()
            for s in samples
            if label in s.labels
        }


def _flatten(
    families: Iterable[Any], renamed: set[str]
) -> Iterator[tuple[str, Mapping[str, str], float]]:
    for family in families:
        for sample in family.samples:
            name = sample.name
            if (
                family.type == "counter"
                and name == family.name + "_total"
                and family.name in renamed
            ):
                name = family.name  # undo the classic parser's invented suffix
            yield name, sample.labels, float(sample.value)


def _declared_without_total(text: str) -> set[str]:
    """Counter families whose samples are exposed without ``_total`` (TGI)."""
    counters: set[str] = set()
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) >= 4 and parts[3] == "counter":
                counters.add(parts[2])
        elif line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(" ", 1)[0])
    return {name for name in counters if name in names}


def parse(text: str, content_type: str = "") -> Exposition:
    openmetrics_first = "openmetrics" in content_type.lower()
    parsers = (
        [parse_openmetrics, parse_classic]
        if openmetrics_first
        else [parse_classic, parse_openmetrics]
    )
    renamed = _declared_without_total(text)
    errors: list[str] = []
    for parser in parsers:
        try:
            return Exposition(list(_flatten(parser(text), renamed)))
        except (ValueError, TypeError, IndexError, KeyError) as exc:
            errors.append(f"{parser.__module__}: {exc}")
    raise InvalidInput("unparseable /metrics body", details={"errors": errors})
