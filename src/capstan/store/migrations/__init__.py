"""Alembic migration scripts of the history store (run by :func:`capstan.store.migrate`, never by hand)."""
