"""Query-string parsing shared by the query routes: times, windows, selectors, grouping, and
the refusal of parameters a route does not declare.

Times are RFC 3339 (``2026-11-30T10:00:00Z``) or Unix seconds (in a JSON body also a number);
a window is ``start``/``end`` or ``range`` (the dashboard's ``15m``, ``6h``, ``7d``: the span
that ends now), by default the hour that ends now. Everything invalid raises ``InvalidInput``
with the parameter named. Every route under ``/api/v1`` is a ``KnownQueryRoute``: a query
parameter it does not declare is answered 400 with the allowed ones, never silently ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Final

import annotated_types
from fastapi import Depends, Query, Request
from fastapi.dependencies.models import Dependant
from fastapi.params import Depends as DependsParam
from fastapi.routing import APIRoute
from pydantic import Field

from infersight.api.auth import tenant_filter
from infersight.api.deps import App, tenants_of
from infersight.api.errors import described
from infersight.core.errors import InvalidInput
from infersight.core.query import Selector, check_group_by
from infersight.core.records import MAX_LABEL_LEN
from infersight.core.timestamps import TIME_HELP, TIME_REGEX, parse_time
from infersight.core.window import Window, parse_duration

DEFAULT_SPAN = timedelta(hours=1)

#: The largest id a stored row can have: the store's ids are 32-bit integers (PostgreSQL INTEGER).
MAX_ID: Final = 2**31 - 1
#: A stored row's id in a path or query parameter. Bounded so that a larger number is refused
#: as invalid input (400) instead of overflowing the store's integer type (a 500).
Id = Annotated[int, annotated_types.Interval(ge=1, le=MAX_ID)]


#: What ``parse_time`` accepts, as the OpenAPI document states it.
TIME_PATTERN: Final = described(
    TIME_REGEX, "RFC 3339 with a time zone (2026-11-30T10:00:00Z) or Unix seconds, in 1970 to 2199"
)


_LABEL = "(?:model|instance|tenant|priority|adapter|team|workload)"
#: ``group_by``: comma-separated label names (or nothing).
GROUP_BY_PATTERN: Final = described(
    rf"^\s*(?:{_LABEL}\s*(?:,\s*{_LABEL}\s*){{0,6}})?$",
    "comma-separated labels: model, instance, tenant, priority, adapter, team, workload "
    "(cannot group by others)",
)
#: Longest label value a selector takes (``core.query.Selector``'s limit).
MAX_LABEL: Final = MAX_LABEL_LEN
#: ``range``: a whole number of seconds, minutes, hours, days or weeks (the dashboard's
#: ``15m``, ``1h``, ``6h``, ``24h``, ``7d``, ``30d`` among them).
RANGE_PATTERN: Final = described(
    r"^[1-9][0-9]{0,5}[smhdw]$",
    "a duration such as 15m, 6h or 7d (a whole number of s, m, h, d or w)",
)
#: Rules between parameters that no JSON Schema states; said in each operation's description.
WINDOW_RULES: Final = (
    "start must be before end, range is given without start and end, and a window covers at "
    "most max_query_days (400 by default); a request that breaks any of these is answered 400."
)
#: Unix seconds before 2200, as ``parse_time`` takes them.
_UNIX_END: Final = 7_258_118_400
#: A time in a JSON body: RFC 3339 or Unix seconds as a string, or Unix seconds as a number.
Instant = (
    Annotated[str, Field(pattern=TIME_PATTERN, description=TIME_HELP)]
    | Annotated[float, Field(strict=True, ge=0, lt=_UNIX_END, description="Unix seconds")]
)


def instant(name: str, value: str | float) -> datetime:
    """``value`` of an ``Instant`` field as a UTC datetime; ``InvalidInput`` names ``name``."""
    if isinstance(value, str):
        return parse_time(name, value)
    return datetime.fromtimestamp(float(value), UTC)


# -- unknown query parameters ---------------------------------------------------------------


def _query_names(dependant: Dependant) -> set[str]:
    """The query parameters ``dependant`` and its dependencies declare (by their alias)."""
    names = {field.alias for field in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


def _known_query(request: Request) -> None:
    route = request.scope.get("route")
    if not isinstance(route, KnownQueryRoute):
        return
    unknown = sorted(set(request.query_params) - route.allowed_query)
    if unknown:
        allowed = sorted(route.allowed_query)
        raise InvalidInput(
            f"unknown query parameter{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(unknown)}; this endpoint takes "
            + (", ".join(allowed) if allowed else "no query parameters"),
            details={"unknown": unknown, "allowed": allowed},
        )


_KNOWN_QUERY: Final = Depends(_known_query)


class KnownQueryRoute(APIRoute):
    """A route that answers 400 (``invalid_input``, the unknown names and the allowed ones in
    ``details``) to a query parameter it does not declare, instead of ignoring it: a misspelt
    ``metrc=`` or an unsupported ``range=`` would otherwise answer another question. The
    check runs after the route's own dependencies (the scope check: 401 comes first)."""

    def __init__(
        self,
        path: str,
        endpoint: Callable[..., Any],
        *,
        dependencies: Sequence[DependsParam] | None = None,
        **kwargs: Any,
    ) -> None:
        deps = list(dependencies or ())
        if not any(d.dependency is _known_query for d in deps):
            deps.append(_KNOWN_QUERY)
        super().__init__(path, endpoint, dependencies=deps, **kwargs)
        self.allowed_query = frozenset(_query_names(self.dependant))
        #: Its filters come from ``common``, which limits them to the token's tenants, and
        #: its answer holds nothing else (``FLEET_WIDE``): a token limited to tenants may
        #: call it (``api.deps.requires``; 403 elsewhere).
        self.honours_tenants = path not in FLEET_WIDE and (
            _depends_on(self.dependant, common) or _depends_on(self.dependant, tenant_scope)
        )


#: Routes that take ``common``'s filters but answer fleet-wide figures beside the filtered
#: ones, so a token limited to tenants gets 403 there. None today: ``/api/v1/cost`` answers
#: such a token with its requests' lines alone (each instance's cost shared out by the time
#: the requests used it, ``core.cost.attribute``) and leaves the instances' own figures out.
FLEET_WIDE: Final[frozenset[str]] = frozenset()


def tenant_scope(request: Request) -> frozenset[str] | None:
    """The tenants the caller's token is limited to (``None``: every tenant). A route that
    depends on it (``TenantScope``) limits its answer to them itself (SLOs whose selector
    lies within them, their incidents): a token limited to tenants may call it."""
    return tenants_of(request)


#: A route's parameter for ``tenant_scope`` (adds nothing to the OpenAPI document).
TenantScope = Annotated[frozenset[str] | None, Depends(tenant_scope)]


def _depends_on(dependant: Dependant, call: Callable[..., Any]) -> bool:
    return any(d.call is call or _depends_on(d, call) for d in dependant.dependencies)


@dataclass(frozen=True, slots=True)
class Common:
    """What every query route takes: a window, a selector and the labels to group by."""

    window: Window
    selector: Selector
    group_by: tuple[str, ...]
    now: datetime


#: The window's query parameters, declared once for every windowed route (``window_of``).
StartParam = Annotated[
    str | None, Query(pattern=TIME_PATTERN, description=f"{TIME_HELP} (default: end − 1 h)")
]
EndParam = Annotated[
    str | None, Query(pattern=TIME_PATTERN, description=f"{TIME_HELP} (default: now)")
]
RangeParam = Annotated[
    str | None,
    Query(
        alias="range",
        pattern=RANGE_PATTERN,
        description="the window that ends now, as the dashboard writes it: 15m, 1h, 6h, 24h, "
        "7d, 30d (any whole number of s, m, h, d or w); not with start or end",
    ),
]


def window_query(
    app: App, start: StartParam = None, end: EndParam = None, range_: RangeParam = None
) -> Window:
    """The window of a route that takes only a window (``Annotated[Window,
    Depends(window_query)]``)."""
    return window_of(app, app.clock(), start, end, range_)


def common(
    app: App,
    request: Request,
    start: StartParam = None,
    end: EndParam = None,
    range_: RangeParam = None,
    model: str | None = Query(None, max_length=MAX_LABEL),
    instance: str | None = Query(None, max_length=MAX_LABEL),
    tenant: str | None = Query(None, max_length=MAX_LABEL),
    priority: str | None = Query(None, max_length=MAX_LABEL),
    adapter: str | None = Query(
        None, max_length=MAX_LABEL, description="LoRA adapter (empty: the base model itself)"
    ),
    team: str | None = Query(
        None, max_length=MAX_LABEL, description="team, from the trace's gateway or client span"
    ),
    workload: str | None = Query(
        None,
        max_length=MAX_LABEL,
        description="workload, from the trace's gateway or client span",
    ),
    group_by: str = Query(
        "",
        pattern=GROUP_BY_PATTERN,
        description="comma-separated: model, instance, tenant, priority, adapter, team, workload",
    ),
) -> Common:
    now = app.clock()
    window = window_of(app, now, start, end, range_)
    # A token limited to tenants: the one asked within them (403 outside), else all of its
    # tenants (``api.auth.tenant_filter``).
    tenant, tenant_set = tenant_filter(tenants_of(request), tenant)
    selector = Selector(
        model=model,
        instance=instance,
        tenant=tenant,
        priority=priority,
        adapter=adapter,
        team=team,
        workload=workload,
    ).within(tenant_set)
    groups = check_group_by(p.strip() for p in group_by.split(",") if p.strip())
    return Common(window, selector, groups, now)


def window_of(
    app: App, now: datetime, start: str | None, end: str | None, range_: str | None
) -> Window:
    """The window ``start``/``end`` or ``range`` give (module doc), checked against
    ``max_query_days``; ``InvalidInput`` names what is wrong."""
    max_days = app.settings.max_query_days
    too_long = InvalidInput(
        f"a query covers at most {max_days} days", details={"max_query_days": max_days}
    )
    if range_ is not None:
        if start or end:
            given = {k: v for k, v in (("start", start), ("end", end)) if v}
            raise InvalidInput(
                f"give range or start/end, not both: which of range={range_} and "
                f"{', '.join(given)} sets the window would be ambiguous",
                details={"range": range_, **given},
            )
        span = parse_duration(range_)
        if span > timedelta(days=max_days):
            raise too_long
        window = Window(now - span, now)
    else:
        end_ts = parse_time("end", end) if end else now
        start_ts = parse_time("start", start) if start else end_ts - DEFAULT_SPAN
        window = Window(start_ts, end_ts)
    if window.end - window.start > timedelta(days=max_days):
        raise too_long
    return window
