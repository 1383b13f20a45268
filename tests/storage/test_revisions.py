"""``storage.revisions`` (the head and the store's revision without Alembic) agrees with
Alembic itself on both databases, at every step of the chain."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory

from infersight.core.errors import ConfigurationError
from infersight.storage import migrate, revisions
from tests.storage.test_migrations import fresh_engine  # noqa: F401 (the fixture)


def test_the_head_is_alembics_and_the_chain_is_its_history() -> None:
    config = Config()
    config.set_main_option("script_location", str(revisions.versions_directory().parent))
    script = ScriptDirectory.from_config(config)
    assert revisions.head() == script.get_current_head() == migrate.head()
    chain = revisions.chain()
    assert chain == {s.revision: s.down_revision for s in script.walk_revisions()}
    assert len(chain) >= 11


def test_the_current_revision_is_alembics_at_each_step(fresh_engine) -> None:  # noqa: F811
    with fresh_engine.connect() as connection:
        assert revisions.current(connection) is None  # never migrated
    for revision in ("0001", "0005", "head", "0009", "base"):
        if revision in ("0009", "base"):
            migrate.downgrade(fresh_engine, revision)
        else:
            migrate.upgrade(fresh_engine, revision)
        with fresh_engine.connect() as connection:
            assert revisions.current(connection) == migrate.current(fresh_engine)
    assert migrate.current(fresh_engine) is None


def test_a_migration_without_the_revision_it_follows_or_two_heads_are_refused(
    tmp_path: Path,
) -> None:
    (tmp_path / "0001_a.py").write_text('revision = "0001"\ndown_revision = None\n')
    (tmp_path / "0002_b.py").write_text("revision: str = '0002'\ndown_revision = '0001'\n")
    assert revisions.head(tmp_path) == "0002"
    (tmp_path / "0003_c.py").write_text('revision = "0003"\ndown_revision = "0001"\n')
    with pytest.raises(ConfigurationError, match="several heads: 0002, 0003"):
        revisions.head(tmp_path)
    (tmp_path / "0003_c.py").write_text('revision = "0003"\n')
    with pytest.raises(ConfigurationError, match=r"0003_c\.py names no revision it follows"):
        revisions.head(tmp_path)
