"""The store: SQLAlchemy Core tables, migrations' target metadata, bulk writers, rollups, queries.

PostgreSQL in production, SQLite (WAL) on a single box. Everything here takes an ``Engine`` or a
``Connection`` as an argument and returns ``core`` types.
"""
