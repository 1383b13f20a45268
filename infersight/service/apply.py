"""One ``apply`` for every versioned document kind, all or nothing.

``infersight apply -f FILE`` (a mixed stream), the per-area commands (``slo apply``, ``cost
apply``, ``scaling apply``, ``budget apply``) and the API's ``PUT /api/v1/slos/{name}`` and
``PUT /api/v1/cost/model`` read their documents with ``service.documents`` and store them here.

``KINDS`` is the table of what is applied: SLO (``store.slos``), CostModel
(``store.cost_models``), ScalingPolicy (``store.scaling``) and Budget (``store.budgets``, a new
version only where it changed). A new kind adds its ``DocumentKind`` (its module) and its
writer here.

``apply`` checks what spans documents before it writes anything — a kind and name stands once;
a budget is in the currency of the cost model in use, the one the same documents apply if they
name it — then writes every document, in order, in one ``store.transaction()``: a write that
is refused (two scaling policies for one model, the store's budget cap, a budget changed at
the same time) rolls back all of them. ``dry_run`` makes the same writes and rolls them back
(``transaction(dry_run=True)``), so it answers exactly what applying would (created or
updated, the budget version) and stores nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from infersight.core.budget import Budget
from infersight.core.cost import CostModel
from infersight.core.errors import InfersightError, InvalidInput
from infersight.core.scaling import ScalingPolicy
from infersight.core.slo import GoodputUnit, SloSpec
from infersight.service.budgets import BUDGET, same_currency
from infersight.service.cost_spec import COST_MODEL, example_model
from infersight.service.documents import Document, DocumentKind, check_names, read
from infersight.service.scaling_spec import SCALING_POLICY
from infersight.service.specs import SLO
from infersight.storage.seam import Store

__all__ = ["KINDS", "OUTPUT_TOKENS_NOTE", "Applied", "Outcome", "apply", "read_documents"]

#: Every kind ``apply`` stores, in the order ``infersight apply --help`` names them.
KINDS: Final[tuple[DocumentKind[Any], ...]] = (SLO, COST_MODEL, SCALING_POLICY, BUDGET)
#: Said when a per-token goodput SLO is applied (docs/concepts.md, "SLOs").
OUTPUT_TOKENS_NOTE: Final = (
    "note: {name} counts output tokens, so requests that fail before their first token weigh "
    "nothing (an outage of instant failures spends none of its budget): pair it with an "
    "availability or per-request SLO on the same selector"
)


@dataclass(frozen=True, slots=True)
class Applied:
    """What applying one document did (or, in a dry run, would do)."""

    document: Document[Any]
    created: bool
    """A name the store did not hold."""
    changed: bool
    """``False``: a budget equal to its newest version, left alone."""
    version: int | None = None
    """A budget's version in force after the apply."""
    in_use: bool = False
    """A cost model named as the process's (``INFERSIGHT_COST_MODEL``)."""
    notes: tuple[str, ...] = ()
    """What the person applying should know (said apart from the outcome)."""

    def said(self, dry_run: bool = False) -> str:
        """``created``, ``updated``, ``version 2``, ``unchanged (version 1)``; in a dry run
        ``would be created``, …"""
        if self.version is not None:
            if not self.changed:
                return f"unchanged (version {self.version})"
            text = f"version {self.version}"
        else:
            text = "created" if self.created else "updated"
        return f"would be {text}" if dry_run else text

    def to_dict(self) -> dict[str, Any]:
        d = self.document
        return {
            "kind": d.kind,
            "name": d.name,
            "source": d.source or None,
            "document": d.index,
            "created": self.created,
            "changed": self.changed,
            "version": self.version,
            "in_use": self.in_use,
            "notes": list(self.notes),
        }


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one ``apply`` did: every document's, in order."""

    applied: tuple[Applied, ...]
    dry_run: bool

    def to_dict(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "applied": [a.to_dict() for a in self.applied]}


def read_documents(text: str | bytes, *, source: str = "") -> list[Document[Any]]:
    """Every document of ``text``, each of any kind ``apply`` stores (``documents.read``)."""
    return read(text, KINDS, source=source)


def apply(
    store: Store,
    documents: Sequence[Document[Any]],
    *,
    now: datetime,
    cost_model: str | None = None,
    dry_run: bool = False,
) -> Outcome:
    """Store ``documents`` in one transaction (rolled back when ``dry_run``). ``cost_model``
    names the cost model in use: budgets must be in its currency, and a cost model of that
    name is said to be in use; ``None`` checks no currency."""
    check_names(documents)
    _check_currency(store, documents, cost_model)
    with store.transaction(dry_run=dry_run) as bound:
        applied = tuple(
            _write(bound, document, now, cost_model, len(documents)) for document in documents
        )
    return Outcome(applied, dry_run)


def _check_currency(
    store: Store, documents: Sequence[Document[Any]], cost_model: str | None
) -> None:
    """Budgets in the currency of the cost model in use: the one ``documents`` apply under its
    name, else the stored one (or the example prices)."""
    budgets = [d for d in documents if isinstance(d.value, Budget)]
    if cost_model is None or not budgets:
        return
    applied = [
        d.value for d in documents if isinstance(d.value, CostModel) and d.name == cost_model
    ]
    in_use = applied[0] if applied else store.cost_models.find(cost_model) or example_model()
    for document in budgets:
        try:
            same_currency(document.value, in_use.currency)
        except InvalidInput as exc:
            raise _at(document, len(documents), exc) from None


def _write(
    store: Store, document: Document[Any], now: datetime, cost_model: str | None, count: int
) -> Applied:
    writer = _WRITERS[document.kind]
    try:
        return writer(store, document, now, cost_model)
    except InfersightError as exc:
        raise _at(document, count, exc) from None


def _at(document: Document[Any], count: int, exc: InfersightError) -> InfersightError:
    """``exc`` naming the document it is about, when there are several."""
    if count == 1:
        return exc
    return type(exc)(
        f"{document.where} ({document.kind} {document.name}): {exc.message}",
        details={**exc.details, "document": document.index},
    )


# -- one writer per kind --------------------------------------------------------------------


def _slo(store: Store, d: Document[Any], now: datetime, _model: str | None) -> Applied:
    spec: SloSpec = d.value
    created = store.slos.put(spec, now)
    notes = (
        (OUTPUT_TOKENS_NOTE.format(name=spec.name),) if spec.sli.per is GoodputUnit.TOKEN else ()
    )
    return Applied(d, created, True, notes=notes)


def _cost_model(store: Store, d: Document[Any], now: datetime, model: str | None) -> Applied:
    value: CostModel = d.value
    return Applied(d, store.cost_models.put(value, now), True, in_use=value.name == model)


def _scaling_policy(store: Store, d: Document[Any], now: datetime, _model: str | None) -> Applied:
    policy: ScalingPolicy = d.value
    return Applied(d, store.scaling.put_policy(policy, now), True)


def _budget(store: Store, d: Document[Any], now: datetime, _model: str | None) -> Applied:
    budget: Budget = d.value
    version, new = store.budgets.put(budget, now)
    return Applied(d, new and version == 1, new, version=version)


_WRITERS: Final[dict[str, Callable[[Store, Document[Any], datetime, str | None], Applied]]] = {
    SLO.kind: _slo,
    COST_MODEL.kind: _cost_model,
    SCALING_POLICY.kind: _scaling_policy,
    BUDGET.kind: _budget,
}
