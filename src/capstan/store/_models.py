"""The record schema: the rows the recorder writes and the MCP server, dashboard and CLI read.

This module is the one definition of that contract. Times are float seconds since the Unix epoch in Python and
RFC 3339 UTC strings in JSON (see :func:`to_json`); the database keeps integer microseconds.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import operator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from capstan import jsontext

ChangeType = Literal["added", "modified", "deleted"]
ObservedVia = Literal["watch", "relist"]
OutboxState = Literal["pending", "sent", "dead"]
CHANGE_TYPES: tuple[ChangeType, ...] = ("added", "modified", "deleted")
OBSERVED_VIA: tuple[ObservedVia, ...] = ("watch", "relist")

JsonDict = dict[str, Any]
_Record = TypeVar("_Record")


def _pickled_by_fields(cls: type[_Record]) -> type[_Record]:
    """``cls`` (a frozen, slotted dataclass) pickled as its constructor and its field values in order.

    NOTE: the recorder's diff workers send every change and state back this way; the pickling dataclasses
    generate for slotted classes calls ``dataclasses.fields()`` per object, and unpickling 64 changes with their
    states took 7.2 µs an item against 3.9 µs so (bench/history_ingest.py, the end-to-end run with diff workers).
    """
    values = operator.attrgetter(*(f.name for f in dataclasses.fields(cls)))  # type: ignore[arg-type]

    def __reduce__(self: _Record) -> tuple[type[_Record], tuple[Any, ...]]:
        return cls, values(self)

    cls.__reduce__ = __reduce__  # type: ignore[assignment,method-assign]
    return cls


def to_us(seconds: float) -> int:
    """Float epoch seconds -> integer microseconds (the database unit)."""
    return round(seconds * 1_000_000)


def from_us(micros: int) -> float:
    """Integer microseconds -> float epoch seconds."""
    return micros / 1_000_000


def rfc3339(seconds: float) -> str:
    """Epoch seconds as an RFC 3339 UTC string with microseconds (the JSON form of every time)."""
    return (
        dt.datetime.fromtimestamp(seconds, tz=dt.UTC)
        .isoformat(timespec="microseconds")
        .replace("+00:00", "Z")
    )


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class ObjectChange:
    """One observed version of a Kubernetes object (a row of ``object_changes``).

    ``patch`` is the RFC 6902 patch from the previous recorded version (None for the first); ``snapshot`` is the full
    (noise-reduced) object when this row is a snapshot row. ``version_seq`` counts the versions of ``uid`` from 1.
    """

    source: str
    observed_at: float
    kind: str
    api_version: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    change_type: ChangeType
    observed_via: ObservedVia
    version_seq: int
    patch: list[JsonDict] | None
    snapshot: JsonDict | None
    id: int | None = None


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class ObjectState:
    """The last recorded version of a live object (``object_state``), read back after a restart to diff a relist."""

    source: str
    uid: str
    kind: str
    api_version: str
    namespace: str
    name: str
    resource_version: str
    version_seq: int
    object: JsonDict
    # ``object`` already encoded as JSON by whoever built it (the diff builder keeps it encoded anyway); the store
    # writes it as is instead of encoding the object again. The diff builder's puts carry the text alone (their
    # ``object`` is empty): read them with :meth:`full_object`
    encoded: str | None = field(default=None, compare=False, repr=False)

    def full_object(self) -> JsonDict:
        """The object: ``object``, or decoded from ``encoded`` when the text alone was kept."""
        if self.object or self.encoded is None:
            return self.object
        decoded: JsonDict = jsontext.loads(self.encoded.encode())
        return decoded


@dataclass(frozen=True, slots=True)
class KindCursor:
    """The last resourceVersion seen for one watched kind (``kind`` is ``group/version/Kind``)."""

    source: str
    kind: str
    resource_version: str


@dataclass(frozen=True, slots=True)
class KubeEvent:
    """One occurrence of a Kubernetes Event (each count/series bump is a new resourceVersion and a new row)."""

    source: str
    uid: str
    resource_version: str
    observed_at: float
    event_time: float | None
    namespace: str
    name: str
    reason: str
    type: str
    message: str
    count: int
    involved_uid: str
    involved_kind: str
    involved_namespace: str
    involved_name: str
    payload: JsonDict
    id: int | None = None


@dataclass(frozen=True, slots=True)
class EngineEntry:
    """One entry of an engine log (slowlog, acllog, commandlog-*, config, restart) of one target.

    Unique on (target, log, run_id, native_id). ``mutable`` entries (ACL LOG merges) are upserted so ``count`` and
    the last-updated time stay current; immutable ones are inserted once.
    """

    target: str
    log: str
    run_id: str
    native_id: str
    happened_at: float
    observed_at: float
    payload: JsonDict
    mutable: bool = False
    id: int | None = None


@dataclass(frozen=True, slots=True)
class Gap:
    """An explicit hole in a history: ``lost`` entries (None when unknown) of ``log`` of ``source`` never recorded."""

    source: str
    log: str
    key: str
    observed_at: float
    lost: int | None
    reason: str
    detail: JsonDict = field(default_factory=dict)
    id: int | None = None


@dataclass(frozen=True, slots=True)
class EngineCursor:
    """Where a collector stopped reading one log of one target: server run id, last native id, extra state."""

    target: str
    log: str
    run_id: str
    last_id: int
    state: JsonDict = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Restart:
    """One observed container restart (written by the restart diagnostics)."""

    pod_uid: str
    namespace: str
    pod: str
    container: str
    container_type: str
    restart_count: int
    observed_at: float
    reason: str
    exit_code: int | None
    reported_state: JsonDict
    id: int | None = None


@dataclass(frozen=True, slots=True)
class RestartCount:
    """The last restart count seen for one container of one pod."""

    pod_uid: str
    container: str
    namespace: str
    pod: str
    restart_count: int


@dataclass(frozen=True, slots=True)
class OutboxItem:
    """A notification waiting for (or done with) delivery; ``dedupe_key`` is unique across the outbox."""

    id: int
    destination: str
    payload: JsonDict
    dedupe_key: str
    state: OutboxState
    attempts: int
    next_attempt_at: float
    last_error: str | None
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class ObjectVersion:
    """An object as it was at a time, rebuilt from the nearest snapshot plus patches."""

    source: str
    kind: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    version_seq: int
    observed_at: float
    deleted: bool
    object: JsonDict


@dataclass(frozen=True, slots=True)
class ObjectDiff:
    """The RFC 6902 patch that turns the object at ``since`` into the object at ``until`` (empty object if absent)."""

    kind: str
    namespace: str
    name: str
    since: float
    until: float
    before: ObjectVersion | None
    after: ObjectVersion | None
    patch: list[JsonDict]


@dataclass(slots=True)
class Batch:
    """Everything one transaction writes; cursors commit together with the records they cover."""

    object_changes: list[ObjectChange] = field(default_factory=list)
    state_puts: list[ObjectState] = field(default_factory=list)
    state_deletes: list[tuple[str, str]] = field(default_factory=list)
    kind_cursors: list[KindCursor] = field(default_factory=list)
    kube_events: list[KubeEvent] = field(default_factory=list)
    engine_entries: list[EngineEntry] = field(default_factory=list)
    engine_cursors: list[EngineCursor] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    restarts: list[Restart] = field(default_factory=list)
    restart_counts: list[RestartCount] = field(default_factory=list)

    # NOTE: the recorder calls these once per observed change: the field names are read once (_BATCH_FIELDS), not
    # through dataclasses.fields() on every call.
    def is_empty(self) -> bool:
        return not any(getattr(self, name) for name in _BATCH_FIELDS)

    def size(self) -> int:
        return sum(len(getattr(self, name)) for name in _BATCH_FIELDS)

    def extend(self, other: Batch) -> None:
        for name in _BATCH_FIELDS:
            getattr(self, name).extend(getattr(other, name))


_BATCH_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Batch))


@dataclass(frozen=True, slots=True)
class WriteResult:
    """Rows actually inserted per table (re-writes of already stored records count 0)."""

    inserted: dict[str, int]

    def total(self) -> int:
        return sum(self.inserted.values())


_TIME_FIELDS = frozenset(
    {
        "observed_at",
        "event_time",
        "happened_at",
        "next_attempt_at",
        "created_at",
        "updated_at",
        "since",
        "until",
    }
)


def to_json(record: Any) -> Any:
    """The JSON form of a record (the contract the HTTP API, ``--output json`` and OTLP bodies share)."""
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(record):
            if f.name == "mutable":
                continue
            value = getattr(record, f.name)
            if f.name in _TIME_FIELDS and isinstance(value, float | int) and not isinstance(value, bool):
                out[f.name] = rfc3339(float(value))
            else:
                out[f.name] = to_json(value)
        return out
    if isinstance(record, list | tuple):
        return [to_json(v) for v in record]
    if isinstance(record, dict):
        return {str(k): to_json(v) for k, v in record.items()}
    return record
