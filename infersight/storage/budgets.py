"""Budgets in the store, every version kept (``budgets``), and the cost models seen in force
(``cost_model_versions``).

A budget is stored in a JSON form of ``core.budget.Budget`` of its own (amounts as decimal
text). ``put_budget`` adds version n + 1 only when the budget differs from version n, so
applying the same file twice changes nothing. ``record_model`` keeps a version of the cost
model each time the one in force changes (the budget job calls it every cycle); ``model_at``
answers which version priced a past instant.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Final

from sqlalchemy import Connection, Engine, func, insert, select
from sqlalchemy.exc import IntegrityError

from infersight.core.budget import Budget, Period
from infersight.core.burn import Rule, Severity
from infersight.core.cost import CostModel
from infersight.core.errors import Conflict, InvalidInput, NotFound
from infersight.storage.cost_models import model_from_json, model_to_json
from infersight.storage.sql import begin
from infersight.storage.tables import budgets, cost_model_versions

#: Most budgets the store keeps (each is evaluated every cycle: bounded work).
MAX_BUDGETS: Final = 200


def budget_to_json(budget: Budget) -> str:
    return json.dumps(
        {
            "amount": str(budget.amount),
            "currency": budget.currency,
            "period": budget.period.value,
            "scope": dict(budget.scope),
            "thresholds": [str(t) for t in budget.thresholds],
            "rules": [
                {
                    "severity": r.severity.value,
                    "burn_rate": r.burn_rate,
                    "long_window_s": r.long_window.total_seconds(),
                    "short_window_s": r.short_window.total_seconds(),
                }
                for r in budget.rules
            ],
            "description": budget.description,
        },
        sort_keys=True,
    )


def budget_from_json(name: str, version: int, text: str) -> Budget:
    data: dict[str, Any] = json.loads(text)
    return Budget(
        name=name,
        amount=Decimal(data["amount"]),
        currency=str(data["currency"]),
        period=Period(data["period"]),
        scope={str(k): str(v) for k, v in data["scope"].items()},
        thresholds=tuple(Decimal(t) for t in data["thresholds"]),
        rules=tuple(
            Rule(
                Severity(r["severity"]),
                float(r["burn_rate"]),
                timedelta(seconds=r["long_window_s"]),
                timedelta(seconds=r["short_window_s"]),
            )
            for r in data["rules"]
        ),
        description=str(data.get("description", "")),
        version=version,
    )


def _latest(connection: Connection, name: str) -> tuple[int, str] | None:
    row = connection.execute(
        select(budgets.c.version, budgets.c.spec)
        .where(budgets.c.name == name)
        .order_by(budgets.c.version.desc())
        .limit(1)
    ).first()
    return None if row is None else (int(row[0]), str(row[1]))


def put_budget(engine: Engine | Connection, budget: Budget, now: datetime) -> tuple[int, bool]:
    """Store ``budget`` as its name's next version unless it equals the newest one; the version
    in force and whether it is new. ``InvalidInput`` past ``MAX_BUDGETS`` names. On a
    connection, in the caller's transaction."""
    spec = budget_to_json(budget)
    try:
        with begin(engine) as connection:
            latest = _latest(connection, budget.name)
            if latest is not None and latest[1] == spec:
                return latest[0], False
            if latest is None:
                names = connection.execute(
                    select(func.count(func.distinct(budgets.c.name)))
                ).scalar_one()
                if names >= MAX_BUDGETS:
                    raise InvalidInput(
                        f"the store holds at most {MAX_BUDGETS} budgets",
                        details={"limit": MAX_BUDGETS},
                    )
            version = 1 if latest is None else latest[0] + 1
            connection.execute(
                insert(budgets).values(name=budget.name, version=version, spec=spec, created_at=now)
            )
    except IntegrityError:
        raise Conflict(
            f"budget {budget.name!r} was changed at the same time; apply it again",
            details={"name": budget.name},
        ) from None
    return version, True


def _newest_versions() -> Any:
    newest = (
        select(budgets.c.name, func.max(budgets.c.version).label("version"))
        .group_by(budgets.c.name)
        .subquery()
    )
    return (
        select(budgets.c.name, budgets.c.version, budgets.c.spec)
        .join(
            newest,
            (budgets.c.name == newest.c.name) & (budgets.c.version == newest.c.version),
        )
        .order_by(budgets.c.name)
    )


def list_budgets(engine: Engine) -> list[Budget]:
    """The version in force of every budget, by name."""
    with engine.connect() as connection:
        rows = connection.execute(_newest_versions().limit(MAX_BUDGETS)).all()
    return [budget_from_json(str(n), int(v), str(s)) for n, v, s in rows]


def get_budget(engine: Engine, name: str, version: int | None = None) -> Budget:
    """The budget ``name`` in force (or its ``version``); ``NotFound`` when there is none."""
    query = select(budgets.c.version, budgets.c.spec).where(budgets.c.name == name)
    query = (
        query.where(budgets.c.version == version)
        if version is not None
        else query.order_by(budgets.c.version.desc()).limit(1)
    )
    with engine.connect() as connection:
        row = connection.execute(query).first()
    if row is None:
        raise NotFound(f"no budget named {name!r}", details={"name": name})
    return budget_from_json(name, int(row[0]), str(row[1]))


def versions(engine: Engine, name: str) -> list[tuple[int, datetime]]:
    """Every version of ``name`` with when it was applied, oldest first."""
    with engine.connect() as connection:
        rows = connection.execute(
            select(budgets.c.version, budgets.c.created_at)
            .where(budgets.c.name == name)
            .order_by(budgets.c.version)
        ).all()
    return [(int(v), at) for v, at in rows]


# -- the cost models seen --------------------------------------------------------------------


def fingerprint(model: CostModel) -> str:
    """A short digest of a cost model's prices and rules (not its name)."""
    return hashlib.sha256(model_to_json(model).encode()).hexdigest()[:16]


def record_model(engine: Engine, model: CostModel, now: datetime) -> str:
    """Keep ``model`` as its name's next version when it differs from the newest one seen; the
    version's label (``v3:1a2b…``)."""
    digest = fingerprint(model)
    c = cost_model_versions.c
    with engine.begin() as connection:
        row = connection.execute(
            select(c.version, c.fingerprint)
            .where(c.name == model.name)
            .order_by(c.version.desc())
            .limit(1)
        ).first()
        if row is not None and row[1] == digest:
            return f"v{row[0]}:{digest}"
        version = 1 if row is None else int(row[0]) + 1
        connection.execute(
            insert(cost_model_versions).values(
                name=model.name,
                version=version,
                fingerprint=digest,
                spec=model_to_json(model),
                created_at=now,
            )
        )
    return f"v{version}:{digest}"


def version_label(engine: Engine, model: CostModel) -> str:
    """``record_model``'s label for ``model`` without recording it: the newest recorded version's
    when it is that model, else ``new:<digest>`` (a version the job has not seen yet)."""
    digest = fingerprint(model)
    c = cost_model_versions.c
    with engine.connect() as connection:
        row = connection.execute(
            select(c.version, c.fingerprint)
            .where(c.name == model.name)
            .order_by(c.version.desc())
            .limit(1)
        ).first()
    if row is not None and row[1] == digest:
        return f"v{row[0]}:{digest}"
    return f"new:{digest}"


def model_at(engine: Engine, name: str, at: datetime) -> tuple[CostModel, str] | None:
    """The version of cost model ``name`` in force at ``at`` (the newest recorded by then) and
    its label; ``None`` when none was recorded by then."""
    c = cost_model_versions.c
    with engine.connect() as connection:
        row = connection.execute(
            select(c.version, c.fingerprint, c.spec)
            .where(c.name == name, c.created_at <= at)
            .order_by(c.version.desc())
            .limit(1)
        ).first()
    if row is None:
        return None
    return model_from_json(name, str(row[2])), f"v{row[0]}:{row[1]}"


__all__ = [
    "MAX_BUDGETS",
    "budget_from_json",
    "budget_to_json",
    "fingerprint",
    "get_budget",
    "list_budgets",
    "model_at",
    "put_budget",
    "record_model",
    "version_label",
    "versions",
]
