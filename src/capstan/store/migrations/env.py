"""Alembic environment: the store passes its open connection in ``config.attributes["connection"]``."""

from __future__ import annotations

from alembic import context

from capstan.store._schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
