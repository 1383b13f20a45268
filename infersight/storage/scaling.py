"""The replica recommender's store: ``ScalingPolicy`` documents and recommendations.

Policies are kept one row per name in ``scaling_policies`` (``storage.documents``), in a JSON
form of ``core.scaling.ScalingPolicy`` of their own: the policy's fields by name, so a field
added later reads its default from a row stored before it. Recommendations are kept one row
per model, pool and cycle in ``scaling_recommendations`` (pool "": a model whose instances
serve whole requests; "prefill" / "decode": a disaggregated model's pools, recommended for
apart): ``record`` adds one (and prunes that model and pool's rows older than ``KEEP``),
``latest`` answers the newest per model and pool, ``history`` a model's pool's in a time range,
bounded by ``MAX_HISTORY`` rows.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from sqlalchemy import Connection, Engine, Row, and_, delete, func, select

from infersight.core.errors import InvalidInput
from infersight.core.scaling import Recommendation, ScalingPolicy
from infersight.storage.documents import NamedDocuments
from infersight.storage.sql import insert_for
from infersight.storage.tables import scaling_policies, scaling_recommendations

#: How long a model's recommendations are kept (the Scaling page charts up to a week).
KEEP: Final = timedelta(days=35)
#: The most rows one ``history`` answer holds (a week at one cycle a minute is 10 080).
MAX_HISTORY: Final = 20_000
#: The most models one ``latest`` answer lists.
MAX_MODELS: Final = 1_000

_POLICIES: Final = NamedDocuments(scaling_policies, "spec", "scaling policy")
_POLICY_FIELDS: Final = {f.name for f in dataclasses.fields(ScalingPolicy)}


# -- policies ---------------------------------------------------------------------------------


def policy_to_json(policy: ScalingPolicy) -> str:
    data = {f: getattr(policy, f) for f in sorted(_POLICY_FIELDS) if f != "name"}
    return json.dumps(data, sort_keys=True)


def policy_from_json(name: str, text: str) -> ScalingPolicy:
    data = {k: v for k, v in json.loads(text).items() if k in _POLICY_FIELDS and k != "name"}
    return ScalingPolicy(name=name, **data)


def put_policy(engine: Engine | Connection, policy: ScalingPolicy, now: datetime) -> bool:
    """Create or replace the policy of ``policy.name``; ``True`` when it was created. Two
    policies for the same model (or two defaults) are a ``InvalidInput``. On a connection, in
    the caller's transaction."""
    for other in list_policies(engine):
        if other.name != policy.name and other.model == policy.model:
            target = "every model" if policy.model is None else f"model {policy.model!r}"
            raise InvalidInput(
                f"scaling policy {other.name!r} already applies to {target}",
                details={"name": policy.name, "conflicts_with": other.name},
            )
    return _POLICIES.put_stamped(engine, policy.name, policy_to_json(policy), now)


def get_policy(engine: Engine, name: str) -> ScalingPolicy:
    return policy_from_json(name, _POLICIES.get(engine, name))


def list_policies(engine: Engine | Connection) -> list[ScalingPolicy]:
    return [policy_from_json(name, text) for name, text in _POLICIES.all(engine, limit=10_000)]


def delete_policy(engine: Engine, name: str) -> None:
    _POLICIES.delete(engine, name)


# -- recommendations --------------------------------------------------------------------------


def _at(unix_s: float) -> datetime:
    return datetime.fromtimestamp(unix_s, UTC)


def _row(rec: Recommendation) -> dict[str, Any]:
    return {
        "model": rec.model,
        "pool": rec.pool,
        "at": _at(rec.at),
        "observed": rec.observed,
        "desired": rec.desired,
        "predictive": rec.predictive,
        "reactive": rec.reactive,
        "forecast_rps": rec.forecast_rps,
        "driver": rec.driver[:32],
        "reason": rec.reason[:1024],
        "stale": json.dumps(list(rec.stale)),
    }


def _recommendation(row: Row[Any]) -> Recommendation:
    return Recommendation(
        model=str(row.model),
        at=row.at.timestamp(),
        observed=int(row.observed),
        desired=int(row.desired),
        predictive=None if row.predictive is None else int(row.predictive),
        reactive=None if row.reactive is None else int(row.reactive),
        forecast_rps=None if row.forecast_rps is None else float(row.forecast_rps),
        driver=str(row.driver),
        reason=str(row.reason),
        stale=tuple(str(s) for s in json.loads(row.stale)),
        pool=str(row.pool),
    )


def record(engine: Engine, rec: Recommendation) -> None:
    """Keep ``rec`` (a second one for the same model, pool and time replaces it) and drop that
    model and pool's recommendations older than ``KEEP``."""
    values = _row(rec)
    statement = insert_for(engine, scaling_recommendations).values(**values)
    statement = statement.on_conflict_do_update(
        index_elements=["model", "pool", "at"],
        set_={k: statement.excluded[k] for k in values if k not in ("model", "pool", "at")},
    )
    r = scaling_recommendations.c
    with engine.begin() as connection:
        connection.execute(statement)
        connection.execute(
            delete(scaling_recommendations).where(
                r.model == rec.model, r.pool == rec.pool, r.at < values["at"] - KEEP
            )
        )


def latest(engine: Engine) -> list[Recommendation]:
    """The newest recommendation of every model and pool, by model then pool."""
    r = scaling_recommendations.c
    newest = (
        select(r.model, r.pool, func.max(r.at).label("at"))
        .group_by(r.model, r.pool)
        .subquery("newest")
    )
    query = (
        select(scaling_recommendations)
        .join(
            newest,
            and_(r.model == newest.c.model, r.pool == newest.c.pool, r.at == newest.c.at),
        )
        .order_by(r.model, r.pool)
        .limit(MAX_MODELS)
    )
    with engine.connect() as connection:
        return [_recommendation(row) for row in connection.execute(query)]


def history(
    engine: Engine, model: str, start: datetime, end: datetime, pool: str = ""
) -> list[Recommendation]:
    """``model``'s recommendations for ``pool`` in ``[start, end)``, oldest first (the newest
    ``MAX_HISTORY`` of them when there are more)."""
    if end <= start:
        raise InvalidInput("the history's end must be after its start")
    r = scaling_recommendations.c
    query = (
        select(scaling_recommendations)
        .where(r.model == model, r.pool == pool, r.at >= start, r.at < end)
        .order_by(r.at.desc())
        .limit(MAX_HISTORY)
    )
    with engine.connect() as connection:
        rows = [_recommendation(row) for row in connection.execute(query)]
    return rows[::-1]
