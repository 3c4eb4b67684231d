"""Chat threads started per key (restart digests reply under the first report even after a Capstan restart)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notify_threads",
        sa.Column("key", sa.String(512), nullable=False),
        sa.Column("channel", sa.String(256), nullable=False),
        sa.Column("ts", sa.String(64), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_notify_threads"),
    )


def downgrade() -> None:
    op.drop_table("notify_threads")
