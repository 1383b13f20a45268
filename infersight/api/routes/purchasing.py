"""``GET /api/v1/purchasing``: the reserved / on-demand split that minimises cost for the
recorded GPU demand, and the idle windows by hour of week (``service.purchasing``).

``?range=28d`` (default) or ``start``/``end`` chooses the range (its whole hours are read);
``floor`` is the utilisation under which an hour of the week is an idle window (default
0.3), ``target`` the utilisation the what-if fills them to (default 0.6), ``top`` how many
windows are listed, ``tz`` the time zone of the hours of week (default the report time zone).
A range with no GPU data answers ``empty`` with the command to run next.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from infersight.api.auth import Scope
from infersight.api.deps import App, requires
from infersight.api.params import (
    RANGE_PATTERN,
    TIME_PATTERN,
    WINDOW_RULES,
    KnownQueryRoute,
    window_of,
)
from infersight.core.purchasing import (
    DEFAULT_FILL_TARGET,
    DEFAULT_IDLE_FLOOR,
    DEFAULT_TOP_WINDOWS,
    MAX_HOURS,
    MAX_TOP_WINDOWS,
)
from infersight.core.timestamps import TIME_HELP
from infersight.service.purchasing import purchasing as advise
from infersight.service.purchasing import purchasing_dict

DEFAULT_RANGE = "28d"
router = APIRouter(
    prefix="/api/v1",
    dependencies=[Depends(requires(Scope.READ))],
    route_class=KnownQueryRoute,
    tags=["purchasing"],
)


@router.get(
    "/purchasing",
    summary="Reserved / on-demand split for the recorded demand, and idle windows",
    description=WINDOW_RULES
    + f" The range (default {DEFAULT_RANGE}) covers at most {MAX_HOURS // 24} days, and target"
    " must be at least floor; its whole"
    " hours are read from the hour rollups of GPU samples. split.reserved_gpus is the number of"
    " GPUs to reserve that minimises reserved × hours + on-demand × the GPU-hours above it"
    " (per GPU pool), with the cost against all on-demand and the saving; idle.windows are the"
    " hours of week under the utilisation floor, merged into ranges and ranked by idle cost;"
    " fill is what lifting them to the target would do to cost per million tokens. Money is a"
    " decimal string with six places in currency. assumptions says what was assumed (a"
    " reserved price where the cost model has none).",
)
def get_purchasing(
    app: App,
    start: Annotated[str | None, Query(pattern=TIME_PATTERN, description=TIME_HELP)] = None,
    end: Annotated[
        str | None, Query(pattern=TIME_PATTERN, description=f"{TIME_HELP} (default: now)")
    ] = None,
    range_: Annotated[
        str | None,
        Query(
            alias="range",
            pattern=RANGE_PATTERN,
            description=f"the range that ends now (default {DEFAULT_RANGE}); not with start/end",
        ),
    ] = None,
    floor: Annotated[
        float, Query(ge=0.0, le=1.0, description="idle below this mean utilisation")
    ] = DEFAULT_IDLE_FLOOR,
    target: Annotated[
        float, Query(ge=0.0, le=1.0, description="fill idle windows to this utilisation")
    ] = DEFAULT_FILL_TARGET,
    top: Annotated[
        int, Query(ge=1, le=MAX_TOP_WINDOWS, description="idle windows listed")
    ] = DEFAULT_TOP_WINDOWS,
    tz: Annotated[
        str | None,
        Query(min_length=1, max_length=64, description="IANA time zone of the hours of week"),
    ] = None,
) -> dict[str, Any]:
    if range_ is None and start is None and end is None:
        range_ = DEFAULT_RANGE
    now = app.clock()
    answer = advise(
        app.store,
        app.cost_model(),
        window_of(app, now, start, end, range_),
        finest_for=app.retention.finest_for,
        now=now,
        timezone=tz or app.settings.report_timezone,
        floor=floor,
        target=target,
        top=top,
    )
    return purchasing_dict(answer)
