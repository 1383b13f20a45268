"""Routing: which notifiers hear about an incident, by severity, model and tenant.

Routes are data (a list of ``{notifiers, severity?, model?, tenant?}`` mappings): every route
whose given labels all match contributes its notifiers; with no route matching, the fallback
(by default: every notifier) is used. An empty route list sends everything everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from infersight.core.errors import InvalidInput

MATCH_LABELS: Final = ("severity", "model", "tenant", "slo")


@dataclass(frozen=True, slots=True)
class Route:
    notifiers: tuple[str, ...]
    match: Mapping[str, str]

    def __post_init__(self) -> None:
        if not self.notifiers:
            raise InvalidInput("a route names at least one notifier")
        unknown = set(self.match) - set(MATCH_LABELS)
        if unknown:
            raise InvalidInput("routes match on severity, model, tenant and slo only")

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match.items())


@dataclass(frozen=True, slots=True)
class Router:
    routes: tuple[Route, ...] = ()
    fallback: tuple[str, ...] | None = None
    """Notifiers used when no route matches; ``None`` means all of them."""

    def targets(self, labels: Mapping[str, str], available: Sequence[str]) -> tuple[str, ...]:
        chosen: list[str] = []
        for route in self.routes:
            if route.matches(labels):
                chosen += [n for n in route.notifiers if n not in chosen]
        if not chosen:
            chosen = list(available if self.fallback is None else self.fallback)
        return tuple(n for n in chosen if n in available)


def router_from_data(data: Any) -> Router:
    """``[{"notifiers": [...], "severity": "page", ...}, ...]`` → ``Router``."""
    if data is None:
        return Router()
    if not isinstance(data, list):
        raise InvalidInput("routes are a list of mappings")
    routes = []
    for item in data:
        if not isinstance(item, dict) or not isinstance(item.get("notifiers"), list):
            raise InvalidInput("a route is a mapping with a `notifiers` list")
        match = {str(k): str(v) for k, v in item.items() if k != "notifiers"}
        routes.append(Route(tuple(str(n) for n in item["notifiers"]), match))
    return Router(tuple(routes))
