"""The one named-document store (``storage.documents``) on SQLite and PostgreSQL, over the two
shapes of table it serves: stamped rows that keep their ``created_at`` (SLOs, cost models) and
rows replaced whole or refused (baselines)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from infersight.core.errors import Conflict, NotFound
from infersight.storage.documents import NamedDocuments
from infersight.storage.tables import baselines, slos

NOW = datetime(2026, 11, 20, 12, 0, 17, tzinfo=UTC)
LATER = NOW + timedelta(hours=1)

STAMPED = NamedDocuments(slos, "spec", "SLO")
WHOLE = NamedDocuments(baselines, "document", "baseline")


def _stamps(engine, name):
    with engine.connect() as connection:
        return tuple(
            connection.execute(
                select(slos.c.created_at, slos.c.updated_at).where(slos.c.name == name)
            ).one()
        )


def _baseline(document: str, at: datetime = NOW, source: str = "window") -> dict[str, object]:
    return {"created_at": at, "source": source, "description": "d", "document": document}


def test_a_stamped_replacement_keeps_its_creation_time_and_takes_the_rest(store):
    assert STAMPED.put_stamped(store.engine, "a", "1", NOW) is True
    assert _stamps(store.engine, "a") == (NOW, NOW)
    assert STAMPED.put_stamped(store.engine, "a", "2", LATER) is False
    assert STAMPED.get(store.engine, "a") == "2"
    assert _stamps(store.engine, "a") == (NOW, LATER)


def test_a_replacement_keeps_the_kept_columns_only(store):
    assert WHOLE.put(store.engine, "b", _baseline("{}"), keep=("created_at", "source")) is True
    again = WHOLE.put(store.engine, "b", _baseline("[]", LATER, "import"), keep=("source",))
    assert again is False
    with store.engine.connect() as connection:
        row = connection.execute(select(baselines).where(baselines.c.name == "b")).one()
    assert (row.document, row.created_at, row.source) == ("[]", LATER, "window")


def test_without_kept_columns_a_replacement_takes_every_value(store):
    assert WHOLE.put(store.engine, "b", _baseline("{}"), replace=True) is True
    assert WHOLE.put(store.engine, "b", _baseline("[]", LATER, "import"), replace=True) is False
    with store.engine.connect() as connection:
        row = connection.execute(select(baselines).where(baselines.c.name == "b")).one()
    assert (row.document, row.created_at, row.source) == ("[]", LATER, "import")


def test_an_existing_name_is_a_conflict_unless_replaced_and_stays_as_it_was(store):
    assert WHOLE.put(store.engine, "b", _baseline("{}"), replace=False) is True
    with pytest.raises(Conflict) as caught:
        WHOLE.put(store.engine, "b", _baseline("[]"), replace=False)
    assert str(caught.value) == "a baseline named 'b' exists (replace it explicitly)"
    assert caught.value.details == {"name": "b"}
    assert WHOLE.get(store.engine, "b") == "{}"


def test_a_missing_name_is_not_found_or_none(store):
    assert STAMPED.find(store.engine, "nope") is None
    with pytest.raises(NotFound) as caught:
        STAMPED.get(store.engine, "nope")
    assert str(caught.value) == "no SLO named 'nope'"
    assert caught.value.details == {"name": "nope"}
    with pytest.raises(NotFound, match="no baseline named 'nope'"):
        WHOLE.delete(store.engine, "nope")


def test_all_lists_by_name_unless_told_and_honours_the_limit(store):
    for name, at in (("c", NOW), ("a", LATER), ("b", NOW - timedelta(days=1))):
        WHOLE.put(store.engine, name, _baseline(f'"{name}"', at))
    assert WHOLE.all(store.engine) == [("a", '"a"'), ("b", '"b"'), ("c", '"c"')]
    newest_first = (baselines.c.created_at.desc(), baselines.c.name)
    assert [n for n, _ in WHOLE.all(store.engine, newest_first)] == ["a", "c", "b"]
    assert [n for n, _ in WHOLE.all(store.engine, newest_first, limit=2)] == ["a", "c"]
    assert STAMPED.all(store.engine) == []


def test_delete_removes_one_document_only(store):
    for name in ("a", "b"):
        STAMPED.put_stamped(store.engine, name, name, NOW)
    STAMPED.delete(store.engine, "a")
    assert STAMPED.find(store.engine, "a") is None
    assert STAMPED.all(store.engine) == [("b", "b")]
    with pytest.raises(NotFound):
        STAMPED.delete(store.engine, "a")
