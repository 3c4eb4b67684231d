"""The history store's tables, defined once as SQLAlchemy Core metadata.

Every timestamp column holds integer microseconds since the Unix epoch (UTC): it sorts and compares the same way
on SQLite and PostgreSQL, range-partitions on PostgreSQL, and costs 8 bytes. JSON columns are JSONB on PostgreSQL.
The Alembic revisions under ``capstan/store/migrations`` create exactly this schema; a unit test compares the two.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING)

# NOTE: SQLite only auto-increments an INTEGER PRIMARY KEY (the rowid alias), so the surrogate keys are BIGINT on
# PostgreSQL and INTEGER on SQLite.
RowId = BigInteger().with_variant(Integer(), "sqlite")
# NOTE: none_as_null makes Python None a SQL NULL (not JSON 'null'), which "snapshot IS NOT NULL" relies on.
Json = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")

object_changes = Table(
    "object_changes",
    metadata,
    Column("id", RowId, primary_key=True, autoincrement=True),
    Column("source", String(128), nullable=False),
    Column("observed_at", BigInteger, nullable=False),
    Column("kind", String(128), nullable=False),
    Column("api_version", String(256), nullable=False),
    Column("namespace", String(253), nullable=False),
    Column("name", String(253), nullable=False),
    Column("uid", String(64), nullable=False),
    Column("resource_version", String(64), nullable=False),
    Column("change_type", String(16), nullable=False),
    Column("observed_via", String(16), nullable=False),
    # NOTE: version_seq counts the recorded versions of one uid from 1; a row whose snapshot is not NULL holds the
    # full object, and every later version is that snapshot plus the patches of the following rows in order.
    Column("version_seq", Integer, nullable=False),
    Column("patch", Json, nullable=True),
    Column("snapshot", Json, nullable=True),
    UniqueConstraint("source", "uid", "resource_version", "change_type"),
    # NOTE: queries name an object by (kind, namespace, name) and often omit the source, so source is not the
    # leading column (SQLite cannot skip-scan a leading column it is not given).
    Index("ix_object_changes_lookup", "kind", "namespace", "name", "observed_at"),
    Index("ix_object_changes_uid_seq", "source", "uid", "version_seq"),
    Index("ix_object_changes_observed_at", "observed_at"),
)

object_state = Table(
    "object_state",
    metadata,
    Column("source", String(128), primary_key=True),
    Column("uid", String(64), primary_key=True),
    Column("kind", String(128), nullable=False),
    Column("api_version", String(256), nullable=False),
    Column("namespace", String(253), nullable=False),
    Column("name", String(253), nullable=False),
    Column("resource_version", String(64), nullable=False),
    Column("version_seq", Integer, nullable=False),
    Column("object", Json, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    Index("ix_object_state_kind", "source", "kind"),
)

kind_cursors = Table(
    "kind_cursors",
    metadata,
    Column("source", String(128), primary_key=True),
    Column("kind", String(300), primary_key=True),
    Column("resource_version", String(64), nullable=False),
    Column("updated_at", BigInteger, nullable=False),
)

kube_events = Table(
    "kube_events",
    metadata,
    Column("id", RowId, primary_key=True, autoincrement=True),
    Column("source", String(128), nullable=False),
    Column("uid", String(64), nullable=False),
    Column("resource_version", String(64), nullable=False),
    Column("observed_at", BigInteger, nullable=False),
    Column("event_time", BigInteger, nullable=True),
    Column("namespace", String(253), nullable=False),
    Column("name", String(253), nullable=False),
    Column("reason", String(256), nullable=False),
    Column("type", String(64), nullable=False),
    Column("message", Text, nullable=False),
    Column("count", Integer, nullable=False),
    Column("involved_uid", String(64), nullable=False),
    Column("involved_kind", String(128), nullable=False),
    Column("involved_namespace", String(253), nullable=False),
    Column("involved_name", String(253), nullable=False),
    Column("payload", Json, nullable=False),
    UniqueConstraint("source", "uid", "resource_version"),
    Index("ix_kube_events_involved", "involved_uid", "observed_at"),
    Index("ix_kube_events_observed_at", "observed_at"),
)

engine_entries = Table(
    "engine_entries",
    metadata,
    Column("id", RowId, primary_key=True, autoincrement=True),
    Column("target", String(256), nullable=False),
    Column("log", String(64), nullable=False),
    # NOTE: engine ids restart at 0 with the server process, so uniqueness includes the server's run id.
    Column("run_id", String(64), nullable=False),
    Column("native_id", String(256), nullable=False),
    Column("happened_at", BigInteger, nullable=False),
    Column("observed_at", BigInteger, nullable=False),
    Column("payload", Json, nullable=False),
    UniqueConstraint("target", "log", "run_id", "native_id"),
    Index("ix_engine_entries_target_time", "target", "log", "happened_at"),
    Index("ix_engine_entries_observed_at", "observed_at"),
)

gaps = Table(
    "gaps",
    metadata,
    Column("id", RowId, primary_key=True, autoincrement=True),
    Column("source", String(256), nullable=False),
    Column("log", String(64), nullable=False),
    Column("key", String(256), nullable=False),
    Column("observed_at", BigInteger, nullable=False),
    Column("lost", BigInteger, nullable=True),
    Column("reason", String(256), nullable=False),
    Column("detail", Json, nullable=False),
    UniqueConstraint("source", "log", "key"),
    Index("ix_gaps_observed_at", "observed_at"),
)

engine_cursors = Table(
    "engine_cursors",
    metadata,
    Column("target", String(256), primary_key=True),
    Column("log", String(64), primary_key=True),
    Column("run_id", String(64), nullable=False),
    Column("last_id", BigInteger, nullable=False),
    Column("state", Json, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
)

outbox = Table(
    "outbox",
    metadata,
    Column("id", RowId, primary_key=True, autoincrement=True),
    Column("destination", String(256), nullable=False),
    Column("payload", Json, nullable=False),
    Column("dedupe_key", String(512), nullable=False),
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", BigInteger, nullable=False),
    Column("last_error", Text, nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    UniqueConstraint("dedupe_key"),
    Index("ix_outbox_due", "state", "next_attempt_at"),
)

restarts = Table(
    "restarts",
    metadata,
    Column("id", RowId, primary_key=True, autoincrement=True),
    Column("pod_uid", String(64), nullable=False),
    Column("namespace", String(253), nullable=False),
    Column("pod", String(253), nullable=False),
    Column("container", String(253), nullable=False),
    Column("container_type", String(32), nullable=False),
    Column("restart_count", Integer, nullable=False),
    Column("observed_at", BigInteger, nullable=False),
    Column("reason", String(256), nullable=False),
    Column("exit_code", Integer, nullable=True),
    Column("reported_state", Json, nullable=False),
    UniqueConstraint("pod_uid", "container", "restart_count"),
    Index("ix_restarts_pod", "namespace", "pod", "observed_at"),
)

restart_counts = Table(
    "restart_counts",
    metadata,
    Column("pod_uid", String(64), primary_key=True),
    Column("container", String(253), primary_key=True),
    Column("namespace", String(253), nullable=False),
    Column("pod", String(253), nullable=False),
    Column("restart_count", Integer, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
)

# Where a chat thread was started for a key (an owner workload), so a later digest replies in it even after a
# Capstan restart (revision 0002).
notify_threads = Table(
    "notify_threads",
    metadata,
    Column("key", String(512), primary_key=True),
    Column("channel", String(256), nullable=False),
    Column("ts", String(64), nullable=False),
    Column("created_at", BigInteger, nullable=False),
)

# Keys the store keeps for its own use (revision 0004): ``redaction`` is the random key of the keyed hashes that
# stand for redacted values (capstan.redact), so a changed secret still shows as a change but no one without the
# key can test a guess. Created on first use; never served.
store_keys = Table(
    "store_keys",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", String(128), nullable=False),
    Column("created_at", BigInteger, nullable=False),
)

# NOTE: the tables revision 0001 creates (its migration creates them from this metadata); tables added later
# are created by their own revision and listed in TABLES only.
ALL_TABLES = (
    object_changes,
    object_state,
    kind_cursors,
    kube_events,
    engine_entries,
    gaps,
    engine_cursors,
    outbox,
    restarts,
    restart_counts,
)

TABLES = (*ALL_TABLES, notify_threads, store_keys)

# ---------------------------------------------------------------------- PostgreSQL's physical schema (revision 0003)
# On PostgreSQL the three high-volume history tables are range-partitioned by observed_at, one partition per UTC
# day (capstan/store/_partitions.py creates and drops them), so age retention drops whole days instead of deleting
# rows. PostgreSQL requires the partition key in every unique constraint of a partitioned table, and the
# idempotency keys must hold across days (a re-delivered change is observed at a later time), so on PostgreSQL
# each partitioned table's key lives in a small unpartitioned key table that a write inserts into first
# (ON CONFLICT DO NOTHING); only the rows whose key was new go into the partitioned table. The queries use the
# logical tables above: the columns are the same.

PARTITION_KEYS: dict[str, tuple[str, ...]] = {
    "object_changes": ("source", "uid", "resource_version", "change_type"),
    "kube_events": ("source", "uid", "resource_version"),
    "engine_entries": ("target", "log", "run_id", "native_id"),
}
"""partitioned table -> the columns of its idempotency key"""

KEY_TABLE = {
    "object_changes": "object_change_keys",
    "kube_events": "kube_event_keys",
    "engine_entries": "engine_entry_keys",
}


def _partitioned(table: Table, into: MetaData) -> Table:
    key = PARTITION_KEYS[table.name]
    columns = [Column(c.name, c.type, nullable=c.nullable) for c in table.columns if c.name != "id"]
    indexes = [Index(ix.name, *[c.name for c in ix.columns]) for ix in table.indexes]
    return Table(
        table.name,
        into,
        # NOTE: the partition key must be part of the primary key; id stays a BIGSERIAL.
        Column("id", BigInteger, autoincrement=True, nullable=False),
        *columns,
        PrimaryKeyConstraint("id", "observed_at"),
        Index(f"ix_{table.name}_key", *key),
        *indexes,
        postgresql_partition_by="RANGE (observed_at)",
    )


def _key_table(table: Table, into: MetaData) -> Table:
    key = PARTITION_KEYS[table.name]
    name = KEY_TABLE[table.name]
    return Table(
        name,
        into,
        *[Column(c, table.c[c].type, primary_key=True) for c in key],
        Column("observed_at", BigInteger, nullable=False),
        Index(f"ix_{name}_observed_at", "observed_at"),
    )


def _postgres_schema() -> MetaData:
    """The logical tables, with the partitioned ones and their key tables in place of the three big ones."""
    out = MetaData(naming_convention=NAMING)
    for table in TABLES:
        if table.name in PARTITION_KEYS:
            _partitioned(table, out)
            _key_table(table, out)
        else:
            table.to_metadata(out)
    return out


postgres_metadata = _postgres_schema()


def schema_metadata(*, partitioned: bool = False) -> MetaData:
    """The store's tables as SQLAlchemy metadata, for checking a live database against them (e.g. with Alembic's
    ``compare_metadata``): the plain tables (SQLite's, and PostgreSQL's before revision 0003) or, ``partitioned``,
    PostgreSQL's (its three big tables partitioned by day, each with its key table). Shared: do not modify it."""
    return postgres_metadata if partitioned else metadata
