"""PostgreSQL: object changes, events and engine entries partitioned by day, idempotency keys in key tables.

SQLite is unchanged. On PostgreSQL each of the three tables is rebuilt as a partitioned table (the rows copied into
day partitions), its idempotency keys copied into the new key table, and its id sequence carried on. The downgrade
does the reverse: one plain table with its unique key again, the rows and the id sequence carried back.
See capstan/store/_partitions.py for why and how.
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import Connection

from capstan.store._partitions import DAY_US, create_day_partitions
from capstan.store._schema import KEY_TABLE, PARTITION_KEYS, metadata, postgres_metadata

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    for table in PARTITION_KEYS:
        _partition(conn, table)


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    for table in PARTITION_KEYS:
        _unpartition(conn, table)


def _partition(conn: Connection, table: str) -> None:
    old = f"{table}_unpartitioned"
    conn.exec_driver_sql(f'ALTER TABLE "{table}" RENAME TO "{old}"')
    # free the names the partitioned table takes: its constraints, indexes and id sequence
    for (name,) in conn.exec_driver_sql(
        f"SELECT conname FROM pg_constraint WHERE conrelid = '\"{old}\"'::regclass"
    ).all():
        conn.exec_driver_sql(f'ALTER TABLE "{old}" DROP CONSTRAINT "{name}"')
    for (name,) in conn.exec_driver_sql(f"SELECT indexname FROM pg_indexes WHERE tablename = '{old}'").all():
        conn.exec_driver_sql(f'DROP INDEX "{name}"')
    conn.exec_driver_sql(f'ALTER SEQUENCE "{table}_id_seq" RENAME TO "{old}_id_seq"')
    postgres_metadata.tables[table].create(conn)
    keys = KEY_TABLE[table]
    postgres_metadata.tables[keys].create(conn)
    days = [
        int(d)
        for (d,) in conn.exec_driver_sql(
            f'SELECT DISTINCT floor(observed_at::numeric / {DAY_US}) * {DAY_US} FROM "{old}"'
        ).all()
    ]
    create_day_partitions(conn, table, days)
    columns = ", ".join(f'"{c.name}"' for c in postgres_metadata.tables[table].columns)
    conn.exec_driver_sql(f'INSERT INTO "{table}" ({columns}) SELECT {columns} FROM "{old}"')
    key_cols = ", ".join(f'"{c}"' for c in PARTITION_KEYS[table])
    conn.exec_driver_sql(
        f'INSERT INTO "{keys}" ({key_cols}, observed_at) SELECT {key_cols}, min(observed_at) FROM "{old}" '
        f"GROUP BY {key_cols}"
    )
    conn.exec_driver_sql(
        f'SELECT setval(\'"{table}_id_seq"\', COALESCE((SELECT max(id) FROM "{old}"), 0) + 1, false)'
    )
    conn.exec_driver_sql(f'DROP TABLE "{old}"')


def _unpartition(conn: Connection, table: str) -> None:
    old = f"{table}_partitioned"
    conn.exec_driver_sql(f'ALTER TABLE "{table}" RENAME TO "{old}"')
    # free the names the plain table takes (dropping a partitioned index drops it on every partition)
    conn.exec_driver_sql(f'ALTER TABLE "{old}" DROP CONSTRAINT "pk_{table}"')
    for (name,) in conn.exec_driver_sql(f"SELECT indexname FROM pg_indexes WHERE tablename = '{old}'").all():
        conn.exec_driver_sql(f'DROP INDEX "{name}"')
    conn.exec_driver_sql(f'ALTER SEQUENCE "{table}_id_seq" RENAME TO "{old}_id_seq"')
    metadata.tables[table].create(conn)
    columns = ", ".join(f'"{c.name}"' for c in metadata.tables[table].columns)
    conn.exec_driver_sql(f'INSERT INTO "{table}" ({columns}) SELECT {columns} FROM "{old}"')
    conn.exec_driver_sql(
        f'SELECT setval(\'"{table}_id_seq"\', COALESCE((SELECT max(id) FROM "{old}"), 0) + 1, false)'
    )
    conn.exec_driver_sql(f'DROP TABLE "{old}"')  # its partitions go with it
    conn.exec_driver_sql(f'DROP TABLE "{KEY_TABLE[table]}"')
