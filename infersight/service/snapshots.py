"""The scheduled jobs' last results, shared by every ``serve`` worker (``store.results``).

Only the leader runs the jobs, and each keeps its last results in its own process
(``Evaluator.latest``, ``MoneyAlerts.latest``): the pages of ``serve --workers N``'s other
workers had none and counted every SLO over its window, and priced every budget and the cost
steps' eight windows, again per view. The leader now also stores them, as JSON in one row per
job, and a page takes, in order: its own process's results while fresh, the stored ones
while fresh, else computes them (``service.slos.with_status``, ``service.budgets``).

What is stored is the jobs' inputs to their judgements, not the judgements' text:

* ``evaluate``: per SLO, a digest of its spec and its event counts per window. A reader
  rebuilds each status with ``core.burn.evaluate`` under its own policy — the very function
  the cycle used — and only for the SLOs as they are stored now (a digest that differs, an SLO
  added or removed, another policy: computed afresh).
* ``money``: the cost model version that priced the cycle, each budget's (name, version)
  with its figures, top spenders and burn, each cost step's judgement, and the purchasing
  advice over the last 28 days (``to_data``: a frozen dataclass by its annotations). A reader
  uses them only under the same model version and step policy, and only for the budget
  versions in force now.

A body is data, never code: it is decoded field by field, and one that does not fit (another
format version, a field missing or of the wrong type) is ignored with a warning, and the
page computes.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import abc
from collections.abc import Mapping, Sequence
from dataclasses import fields, is_dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import Enum
from types import UnionType
from typing import Any, Final, Union, get_args, get_origin, get_type_hints

from infersight.core.budget import Budget, BudgetFigures, StepCause, StepJudgement, StepPolicy
from infersight.core.burn import Policy, Severity, evaluate
from infersight.core.cost import CostLine, CostModel
from infersight.core.slo import EventCounts, SloSpec
from infersight.service.budgets import BudgetStatus, MoneySnapshot
from infersight.service.evaluation import SloStatus
from infersight.service.purchasing import Purchasing
from infersight.storage.seam import Store

log = logging.getLogger(__name__)

EVALUATE: Final = "evaluate"
MONEY: Final = "money"
#: The body's format; a reader ignores another.
FORMAT: Final = 1


def digest(value: object) -> str:
    """A short digest of ``value``'s ``repr`` (frozen dataclasses: every field, floats exact)."""
    return hashlib.sha256(repr(value).encode()).hexdigest()[:16]


def _iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat()


def _when(text: Any) -> datetime:
    if not isinstance(text, str):
        raise TypeError("a time must be a string")
    return datetime.fromisoformat(text).astimezone(UTC)


# -- the evaluation's SLO statuses -----------------------------------------------------------


def encode_statuses(statuses: Sequence[SloStatus], policy: Policy) -> str:
    """The cycle's statuses: each SLO's spec digest and its counts per window (seconds)."""
    return json.dumps(
        {
            "format": FORMAT,
            "policy": digest(policy),
            "statuses": [
                {
                    "slo": s.spec.name,
                    "spec": digest(s.spec),
                    "counts": [
                        [int(w.total_seconds()), c.total, c.bad]
                        for w, c in sorted(s.evaluation.counts.items())
                    ],
                }
                for s in statuses
            ],
        },
        separators=(",", ":"),
    )


def decode_statuses(
    body: str, at: datetime, specs: Sequence[SloSpec], policy: Policy
) -> tuple[SloStatus, ...]:
    """The stored cycle's statuses of exactly ``specs`` (in their order), evaluated under
    ``policy`` at ``at``; ``()`` when the cycle was not of these specs or this policy."""
    data = json.loads(body)
    if data.get("format") != FORMAT or data.get("policy") != digest(policy):
        return ()
    by_name = {str(s["slo"]): s for s in data["statuses"]}
    if len(by_name) != len(specs):
        return ()
    out = []
    for spec in specs:
        stored = by_name.get(spec.name)
        if stored is None or stored.get("spec") != digest(spec):
            return ()
        counts = {
            timedelta(seconds=int(seconds)): EventCounts(int(total), int(bad))
            for seconds, total, bad in stored["counts"]
        }
        if spec.window not in counts:
            return ()
        out.append(
            SloStatus(spec, at, counts[spec.window], evaluate(policy, spec.objective, counts))
        )
    return tuple(out)


def latest_statuses(
    store: Store,
    recent: Sequence[SloStatus],
    specs: Sequence[SloSpec],
    policy: Policy,
    now: datetime,
    max_age: timedelta,
) -> Sequence[SloStatus]:
    """This process's last cycle (``recent``) while it is fresh, else the stored one while
    it is fresh and of ``specs``, else ``()`` (the caller counts)."""
    if _fresh_cycle(recent, now, max_age):
        return recent
    found = _stored(store, EVALUATE)
    if found is None or not now - max_age <= found[0] <= now:
        return ()
    try:
        return decode_statuses(found[1], found[0], specs, policy)
    except (KeyError, TypeError, ValueError) as exc:
        log.warning("the stored evaluation cycle does not fit (%s): counting", exc)
        return ()


def _fresh_cycle(recent: Sequence[SloStatus], now: datetime, max_age: timedelta) -> bool:
    return bool(recent) and all(now - max_age <= s.at <= now for s in recent)


def _stored(store: Store, job: str) -> tuple[datetime, str] | None:
    found = store.results.get(job)
    if found is None:
        return None
    at, body = found
    return at.astimezone(UTC), body


# -- values of frozen dataclasses as JSON, by their annotations --------------------------------


#: Leaf types and how each is written (``to_data``) and read back (``from_data``).
_WRITE: Final[dict[type, Any]] = {
    Decimal: str,  # exact
    datetime: _iso,
    timedelta: timedelta.total_seconds,
}
_READ: Final[dict[type, Any]] = {
    Decimal: lambda data: Decimal(str(data)),
    datetime: _when,
    timedelta: lambda data: timedelta(seconds=float(data)),
}


def to_data(value: Any) -> Any:
    """``value`` as JSON data: a dataclass as its fields, Decimals as strings (exact), times as
    ISO text, durations as seconds, enums as their values, mappings as [key, value] pairs (so
    that keys keep their type), collections as lists."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Enum):
        return value.value
    write = _WRITE.get(type(value))
    if write is not None:
        return write(value)
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_data(getattr(value, f.name)) for f in fields(value) if f.init}
    if isinstance(value, Mapping):
        return [[to_data(k), to_data(v)] for k, v in value.items()]
    if not isinstance(value, list | tuple | set | frozenset):
        raise TypeError(f"cannot store a {type(value).__name__}")
    items = sorted(value, key=repr) if isinstance(value, set | frozenset) else value
    return [to_data(v) for v in items]


def from_data(kind: Any, data: Any) -> Any:
    """``to_data``'s inverse for a value of type ``kind`` (a dataclass's fields by their
    annotations, each checked: data of another shape is a ``TypeError`` or ``ValueError``)."""
    origin, args = get_origin(kind), get_args(kind)
    if origin in (Union, UnionType):
        if data is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return from_data(inner, data)
    if isinstance(kind, type) and is_dataclass(kind):
        if not isinstance(data, dict):
            raise TypeError(f"{kind.__name__}: expected an object")
        hints = get_type_hints(kind)
        values = {f.name: from_data(hints[f.name], data[f.name]) for f in fields(kind) if f.init}
        return kind(**values)
    if origin is None:
        return _leaf(kind, data)
    if not isinstance(data, list):
        raise TypeError(f"expected a list for {kind}")
    return _collection(origin, args, data)


def _leaf(kind: Any, data: Any) -> Any:
    if kind is Any:
        return data
    read = _READ.get(kind)
    if read is not None:
        return read(data)
    if isinstance(kind, type) and issubclass(kind, Enum):
        return kind(data)
    if kind is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    if kind not in (bool, int, float, str) or not isinstance(data, kind):
        raise TypeError(f"expected {kind}, got {type(data).__name__}")
    if kind is int and isinstance(data, bool):
        raise TypeError("expected an int, got a bool")
    return data


def _collection(origin: Any, args: tuple[Any, ...], data: list[Any]) -> Any:
    if origin in (dict, abc.Mapping):
        key, item = args
        return {from_data(key, k): from_data(item, v) for k, v in data}
    if origin in (frozenset, set, abc.Set):
        return frozenset(from_data(args[0], v) for v in data)
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        return tuple(from_data(a, v) for a, v in zip(args, data, strict=True))
    if origin in (tuple, list, abc.Sequence):
        return tuple(from_data(args[0], v) for v in data)
    raise TypeError(f"cannot read a {origin}")


# -- the money job's judgements ----------------------------------------------------------------


def _money(value: Decimal) -> str:
    return str(value)


def _line(line: CostLine) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(CostLine):
        value = getattr(line, f.name)
        if isinstance(value, Decimal):
            value = _money(value)
        elif isinstance(value, frozenset):
            value = sorted(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        out[f.name] = value
    return out


_DECIMALS: Final = frozenset(f.name for f in fields(CostLine) if isinstance(f.default, Decimal))


def _cost_line(data: Mapping[str, Any]) -> CostLine:
    values: dict[str, Any] = {}
    for f in fields(CostLine):
        value = data[f.name]
        if f.name in _DECIMALS:
            value = Decimal(str(value))
        elif f.name == "good_bases":
            value = frozenset(str(v) for v in value)
        elif f.name == "labels":
            value = {str(k): str(v) for k, v in value.items()}
        values[f.name] = value
    return CostLine(**values)


def _status(status: BudgetStatus) -> dict[str, Any]:
    f = status.figures
    burning = status.burning
    return {
        "at": _iso(f.at),
        "start": _iso(f.start),
        "end": _iso(f.end),
        "spent": _money(f.spent),
        "window_spend": [
            [int(w.total_seconds()), _money(v)] for w, v in sorted(f.window_spend.items())
        ],
        "firing": None if status.firing is None else status.firing.value,
        "top": [_line(line) for line in status.top],
        "model_name": status.model_name,
        "burning": None
        if burning is None
        else {
            "window": int(burning[0].total_seconds()),
            "spent": _money(burning[1]),
            "top": [_line(line) for line in burning[2]],
        },
    }


def _budget_status(budget: Budget, data: Mapping[str, Any]) -> BudgetStatus:
    figures = BudgetFigures(
        budget,
        _when(data["at"]),
        _when(data["start"]),
        _when(data["end"]),
        Decimal(str(data["spent"])),
        {timedelta(seconds=int(s)): Decimal(str(v)) for s, v in data["window_spend"]},
    )
    burning = data["burning"]
    return BudgetStatus(
        figures,
        None if data["firing"] is None else Severity(data["firing"]),
        tuple(_cost_line(line) for line in data["top"]),
        str(data["model_name"]),
        None
        if burning is None
        else (
            timedelta(seconds=int(burning["window"])),
            Decimal(str(burning["spent"])),
            tuple(_cost_line(line) for line in burning["top"]),
        ),
    )


def _step(judged: StepJudgement) -> dict[str, Any]:
    return {
        "ratio": judged.ratio,
        "firing": judged.firing,
        "holding": judged.holding,
        "cause": None if judged.cause is None else judged.cause.value,
        "factors": dict(judged.factors),
        "evidence": [dict(e) for e in judged.evidence],
        "versions": list(judged.versions),
    }


def _step_judgement(data: Mapping[str, Any]) -> StepJudgement:
    ratio = data["ratio"]
    first, second = data["versions"]
    return StepJudgement(
        None if ratio is None else float(ratio),
        bool(data["firing"]),
        bool(data["holding"]),
        None if data["cause"] is None else StepCause(data["cause"]),
        {str(k): float(v) for k, v in data["factors"].items()},
        tuple(dict(e) for e in data["evidence"]),
        (str(first), str(second)),
    )


def encode_money(snapshot: MoneySnapshot) -> str:
    """The money cycle's judgements, under its cost model version and step policy."""
    return json.dumps(
        {
            "format": FORMAT,
            "at": _iso(snapshot.at),
            "model_version": snapshot.version,
            "step_policy": digest(snapshot.step_policy),
            "budgets": [
                {
                    "name": budget.name,
                    "version": budget.version,
                    "problem": problem,
                    "status": None if status is None else _status(status),
                }
                for budget, status, problem in snapshot.budgets
            ],
            "steps": [[name, _step(judged)] for name, judged in snapshot.steps],
            "purchasing": to_data(snapshot.purchasing),
        },
        separators=(",", ":"),
    )


def decode_money(
    body: str,
    model: CostModel,
    version: str,
    budgets: Sequence[Budget],
    step_policy: StepPolicy,
) -> MoneySnapshot | None:
    """The stored cycle as a ``MoneySnapshot`` of ``model`` (whose recorded version label is
    ``version``), for the budgets in force (``budgets``: a stored budget of another version
    is left out, so a view that needs it judges afresh); ``None`` when it was judged under
    another model version or step policy."""
    data = json.loads(body)
    if (
        data.get("format") != FORMAT
        or data.get("model_version") != version
        or data.get("step_policy") != digest(step_policy)
    ):
        return None
    current = {(b.name, b.version): b for b in budgets}
    judged: list[tuple[Budget, BudgetStatus | None, str | None]] = []
    for entry in data["budgets"]:
        budget = current.get((str(entry["name"]), int(entry["version"])))
        if budget is None:
            continue
        status = entry["status"]
        problem = entry["problem"]
        judged.append(
            (
                budget,
                None if status is None else _budget_status(budget, status),
                None if problem is None else str(problem),
            )
        )
    steps = tuple((str(name), _step_judgement(step)) for name, step in data["steps"])
    purchasing = from_data(Purchasing | None, data.get("purchasing"))
    return MoneySnapshot(
        _when(data["at"]), model, version, tuple(judged), steps, step_policy, purchasing
    )


def latest_money(
    store: Store,
    recent: MoneySnapshot | None,
    model: CostModel,
    now: datetime,
    max_age: timedelta,
    step_policy: StepPolicy,
) -> MoneySnapshot | None:
    """This process's last money cycle while it is fresh, else the stored one while it is
    fresh and of ``model``'s version, else ``None`` (the views judge)."""
    if recent is not None and recent.fresh(model, now, max_age):
        return recent
    found = _stored(store, MONEY)
    if found is None or not now - max_age <= found[0] <= now:
        return None
    try:
        return decode_money(
            found[1], model, store.budgets.version_label(model), store.budgets.all(), step_policy
        )
    except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
        log.warning("the stored money cycle does not fit (%s): judging afresh", exc)
        return None


__all__ = [
    "EVALUATE",
    "FORMAT",
    "MONEY",
    "decode_money",
    "decode_statuses",
    "digest",
    "encode_money",
    "encode_statuses",
    "from_data",
    "latest_money",
    "latest_statuses",
    "to_data",
]
