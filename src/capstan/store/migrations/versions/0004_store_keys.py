"""The store's own keys: the random key of the keyed hashes that stand for redacted values (capstan.redact)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "store_keys",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("value", sa.String(128), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_store_keys"),
    )


def downgrade() -> None:
    op.drop_table("store_keys")
