"""Alembic environment and versions for the infersight store (PostgreSQL and SQLite)."""
