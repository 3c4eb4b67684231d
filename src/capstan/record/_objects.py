"""Turning observed Kubernetes objects and Events into store batches (the pure core of the object recorder).

:class:`ObjectHistory` holds the last recorded version of every live object (loaded from the store after a restart)
and turns each watch event, or each relist, into a :class:`~capstan.store.Batch`: change records with patches and
periodic snapshots, the new last states, and the kind's cursor. The caller writes the batch; nothing here does I/O,
so a crash between building and writing simply rebuilds the same batch (writes are idempotent).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from capstan import jsontext
from capstan.kube import event_time
from capstan.record._diff import DiffPolicy, make_patch, normalize
from capstan.redact import Redactor
from capstan.store import Batch, ChangeType, KindCursor, KubeEvent, ObjectChange, ObjectState, ObservedVia

JsonDict = dict[str, Any]


def kind_key(api_version: str, kind: str) -> str:
    """The cursor key of a watched kind: ``group/version/Kind`` (core kinds: ``/v1/Pod``)."""
    group, _, version = api_version.rpartition("/")
    return f"{group}/{version}/{kind}"


class ObjectHistory:
    """Last recorded state per object of one source (cluster) and the rules that turn changes into records."""

    def __init__(
        self,
        source: str,
        states: Mapping[str, ObjectState] | None = None,
        *,
        policy: DiffPolicy | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        self.source = source
        self.policy = policy or DiffPolicy()
        # NOTE: the recorder passes the store's keyed redactor, so a redacted value's marker is the same across
        # restarts (an unkeyed default would make every stored state differ from the next observation).
        self.redactor = redactor or Redactor()
        # NOTE: the last version of every live object is kept serialised (compact JSON bytes, ~7x smaller than the
        # dicts) beside an ObjectState whose ``object`` is empty; it is decoded only when a change needs a diff.
        self._states: dict[str, ObjectState] = {}
        self._objects: dict[str, bytes] = {}
        for uid, st in (states or {}).items():
            self._keep(uid, st)

    def _keep(self, uid: str, st: ObjectState) -> str:
        encoded, raw = jsontext.encode(st.object)
        self._objects[uid] = raw
        self._states[uid] = _with_object(st, {})
        return encoded

    def _full(self, st: ObjectState) -> ObjectState:
        return _with_object(st, jsontext.decode(self._objects[st.uid]))

    def state(self, uid: str) -> ObjectState | None:
        st = self._states.get(uid)
        return None if st is None else self._full(st)

    def __len__(self) -> int:
        return len(self._states)

    def observe(
        self,
        event_type: str,
        obj: JsonDict,
        *,
        observed_at: float,
        via: ObservedVia = "watch",
        resource_version: str | None = None,
    ) -> Batch:
        """One watch event (ADDED/MODIFIED/DELETED or added/modified/deleted) -> a batch (empty when noise only).

        The batch also carries the kind cursor at the object's resourceVersion (or ``resource_version``).
        """
        batch = Batch()
        self.observe_into(batch, event_type, obj, observed_at=observed_at, via=via)
        meta = obj.get("metadata") or {}
        rv = resource_version or str(meta.get("resourceVersion", ""))
        if rv:
            batch.kind_cursors.append(
                KindCursor(
                    self.source, kind_key(str(obj.get("apiVersion", "")), str(obj.get("kind", ""))), rv
                )
            )
        return batch

    def observe_into(
        self, batch: Batch, event_type: str, obj: JsonDict, *, observed_at: float, via: ObservedVia = "watch"
    ) -> None:
        """:meth:`observe` appending its record and state to ``batch`` (the recorder's pending batch), without the
        kind cursor: the caller puts one cursor per kind in the batch it writes, not one per change."""
        etype = event_type.lower()
        if etype not in ("added", "modified", "deleted"):
            raise ValueError(f"unknown watch event type {event_type!r}")
        self._apply(batch, etype, obj, observed_at, via)  # type: ignore[arg-type]

    def relist(
        self,
        api_version: str,
        kind: str,
        objects: Iterable[JsonDict],
        *,
        resource_version: str,
        observed_at: float,
    ) -> Batch:
        """A full list of one kind -> records (marked ``relist``) for what changed since the stored state:
        new objects, edited objects and objects that disappeared (deleted while nobody watched)."""
        batch = Batch()
        seen: set[str] = set()
        for obj in objects:
            obj = {"apiVersion": api_version, "kind": kind, **obj}
            uid = str((obj.get("metadata") or {}).get("uid", ""))
            seen.add(uid)
            etype: ChangeType = "modified" if uid in self._states else "added"
            self._apply(batch, etype, obj, observed_at, "relist")
        gone = [
            st
            for st in self._states.values()
            if st.kind == kind and st.api_version == api_version and st.uid not in seen
        ]
        for st in sorted(gone, key=lambda x: (x.namespace, x.name, x.uid)):
            self._apply(batch, "deleted", self._full(st).object, observed_at, "relist", normalized=True)
        batch.kind_cursors.append(KindCursor(self.source, kind_key(api_version, kind), resource_version))
        return batch

    def _apply(
        self,
        batch: Batch,
        etype: ChangeType,
        obj: JsonDict,
        observed_at: float,
        via: ObservedVia,
        *,
        normalized: bool = False,
    ) -> None:
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        if not uid:
            raise ValueError("object without metadata.uid")
        norm = obj if normalized else normalize(obj, self.policy, self.redactor)
        prev = self._states.get(uid)  # its object is kept serialised in self._objects
        patch: list[JsonDict] | None
        snapshot: JsonDict | None
        rv = str(meta.get("resourceVersion", "") or (prev.resource_version if prev else ""))
        if prev is None:
            # First sight (or a deletion of an object never seen alive): the full object is the snapshot.
            seq, patch, snapshot = 1, None, norm
        else:
            patch = make_patch(jsontext.decode(self._objects[uid]), norm)
            if not patch and etype == "modified":
                # noise only (a heartbeat, a new resourceVersion): the kept object stays as it is encoded
                if rv != prev.resource_version:
                    self._states[uid] = dataclasses.replace(prev, resource_version=rv)
                return
            seq = prev.version_seq + 1
            snapshot = norm if seq % self.policy.snapshot_every == 0 else None
        kind = str(obj.get("kind", prev.kind if prev else ""))
        api_version = str(obj.get("apiVersion", prev.api_version if prev else ""))
        namespace = str(meta.get("namespace", "") or "")
        name = str(meta.get("name", ""))
        batch.object_changes.append(
            ObjectChange(
                source=self.source,
                observed_at=observed_at,
                kind=kind,
                api_version=api_version,
                namespace=namespace,
                name=name,
                uid=uid,
                resource_version=rv,
                change_type=etype,
                observed_via=via,
                version_seq=seq,
                patch=patch,
                snapshot=snapshot,
            )
        )
        if etype == "deleted":
            self._states.pop(uid, None)
            self._objects.pop(uid, None)
            batch.state_deletes.append((self.source, uid))
        else:
            encoded, raw = jsontext.encode(norm)
            self._objects[uid] = raw
            self._states[uid] = ObjectState(self.source, uid, kind, api_version, namespace, name, rv, seq, {})
            # NOTE: the put carries the object as its JSON text only: a pending batch holding each version's
            # decoded object kept thousands of containers alive for the garbage collector to walk (and a diff
            # worker pickled them back), for a writer that reads the text
            batch.state_puts.append(
                ObjectState(self.source, uid, kind, api_version, namespace, name, rv, seq, {}, encoded)
            )


def _with_object(st: ObjectState, obj: JsonDict) -> ObjectState:
    """``st`` carrying ``obj`` (an empty dict while the object is kept serialised)."""
    return ObjectState(
        st.source,
        st.uid,
        st.kind,
        st.api_version,
        st.namespace,
        st.name,
        st.resource_version,
        st.version_seq,
        obj,
    )


def event_record(
    source: str, obj: JsonDict, *, observed_at: float, redactor: Redactor | None = None
) -> KubeEvent:
    """A core/v1 or events.k8s.io/v1 Event object -> one occurrence row (each count/series bump is a new row), its
    message and payload redacted (:meth:`Redactor.json`)."""
    r = redactor if redactor is not None else Redactor()
    meta = obj.get("metadata") or {}
    involved = obj.get("involvedObject") or obj.get("regarding") or {}
    series = obj.get("series") or {}
    count = obj.get("count") or series.get("count") or obj.get("deprecatedCount") or 1
    when = event_time(obj, or_created=False)
    payload = {k: v for k, v in obj.items() if k != "metadata"}
    payload["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    payload = r.json(payload)
    return KubeEvent(
        source=source,
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        observed_at=observed_at,
        event_time=when,
        namespace=str(meta.get("namespace", "") or ""),
        name=str(meta.get("name", "")),
        reason=str(obj.get("reason", "") or ""),
        type=str(obj.get("type", "") or ""),
        message=r.text(str(obj.get("message", obj.get("note", "")) or "")),
        count=int(count),
        involved_uid=str(involved.get("uid", "") or ""),
        involved_kind=str(involved.get("kind", "") or ""),
        involved_namespace=str(involved.get("namespace", "") or ""),
        involved_name=str(involved.get("name", "") or ""),
        payload=payload,
    )
