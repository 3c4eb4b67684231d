"""Initial history schema: object changes and state, cursors, events, engine entries, gaps, outbox, restarts.

NOTE: this revision creates the tables from ``capstan.store._schema`` as they are at revision 0001. Any later change
to ``_schema`` comes with a new revision that alters the tables; a unit test compares the migrated database with
the metadata, so a change without a revision fails.
"""

from __future__ import annotations

from alembic import op

from capstan.store._schema import ALL_TABLES, metadata

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    metadata.create_all(op.get_bind(), tables=list(ALL_TABLES))


def downgrade() -> None:
    metadata.drop_all(op.get_bind(), tables=list(ALL_TABLES))
