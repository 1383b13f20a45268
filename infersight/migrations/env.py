"""Alembic environment: runs the versions against the connection that ``storage.migrate`` passes."""

from __future__ import annotations

from alembic import context

from infersight.storage.tables import metadata

config = context.config
connection = config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through storage.migrate (infersight db upgrade)")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
