"""Durable history of cluster changes and engine events: one store, SQLite (WAL) by default, PostgreSQL at scale.

:func:`open_store` gives a :class:`Store`: one database and its parts, each behind the narrow seam its callers need
(``store.history``, ``store.restart_records``, ``store.outbox``, ``store.threads``, ``store.retention``,
``store.keys``). Writers hand :class:`Batch` objects to :meth:`HistoryStore.write` (records and cursors in one
transaction, idempotent); readers use the :class:`HistoryReader` queries, the HTTP JSON app
(:func:`create_history_app`) or OTLP export. :func:`open_store` migrates the schema to :data:`HEAD_REVISION` (the
Alembic scripts are in :data:`MIGRATIONS_DIR`, for an operator's downgrade; :func:`schema_metadata` is the schema they
reach). The store never imports a collector: collectors live in :mod:`capstan.record`.
"""

from typing import TYPE_CHECKING

from capstan.lazy import lazy_attributes
from capstan.store._connection import (
    HEAD_REVISION,
    INGEST_CACHE_KIB,
    MIGRATIONS_DIR,
    StoreConnectError,
    parse_database_url,
)
from capstan.store._cursor import BadCursor, Position, decode_cursor, encode_cursor
from capstan.store._database import StoreWriteError
from capstan.store._history import HistoryReader, HistoryStore, HistoryWriter, StoreCorruptHistory
from capstan.store._keys import RedactionKeys
from capstan.store._metrics import HistoryMetrics
from capstan.store._models import (
    Batch,
    ChangeType,
    EngineCursor,
    EngineEntry,
    Gap,
    KindCursor,
    KubeEvent,
    ObjectChange,
    ObjectDiff,
    ObjectState,
    ObjectVersion,
    ObservedVia,
    OutboxItem,
    Restart,
    RestartCount,
    WriteResult,
    rfc3339,
    to_json,
)
from capstan.store._outbox import NotifyThreads, Outbox
from capstan.store._restart_records import RestartRecords
from capstan.store._retention import Retention, RetentionPolicy, RetentionWorker, apply_retention
from capstan.store._rows import position_of
from capstan.store._schema import schema_metadata
from capstan.store._store import Store, open_store
from capstan.store._timeparse import parse_time
from capstan.store._writer import BatchWriter

# The HTTP app (Starlette) and the OTLP exporter (OpenTelemetry SDK) are imported on first use (PEP 562): processes
# that only write or read the store (the restart watcher, the CLI's queries) do not pay for them.
_LAZY = {
    "create_history_app": "capstan.store._http",
    "OtlpExporter": "capstan.store._otel",
    "otlp_http_exporter": "capstan.store._otel",
}


__getattr__ = lazy_attributes("capstan.store", _LAZY)


if TYPE_CHECKING:
    from capstan.store._http import create_history_app
    from capstan.store._otel import OtlpExporter, otlp_http_exporter

__all__ = [
    "HEAD_REVISION",
    "INGEST_CACHE_KIB",
    "MIGRATIONS_DIR",
    "BadCursor",
    "Batch",
    "BatchWriter",
    "ChangeType",
    "EngineCursor",
    "EngineEntry",
    "Gap",
    "HistoryMetrics",
    "HistoryReader",
    "HistoryStore",
    "HistoryWriter",
    "KindCursor",
    "KubeEvent",
    "NotifyThreads",
    "ObjectChange",
    "ObjectDiff",
    "ObjectState",
    "ObjectVersion",
    "ObservedVia",
    "OtlpExporter",
    "Outbox",
    "OutboxItem",
    "Position",
    "RedactionKeys",
    "Restart",
    "RestartCount",
    "RestartRecords",
    "Retention",
    "RetentionPolicy",
    "RetentionWorker",
    "Store",
    "StoreConnectError",
    "StoreCorruptHistory",
    "StoreWriteError",
    "WriteResult",
    "apply_retention",
    "create_history_app",
    "decode_cursor",
    "encode_cursor",
    "open_store",
    "otlp_http_exporter",
    "parse_database_url",
    "parse_time",
    "position_of",
    "rfc3339",
    "schema_metadata",
    "to_json",
]
