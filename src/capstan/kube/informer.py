"""List-then-watch with relist on loss, handing consumers every change exactly once and in order per object.

The informer keeps the consumer's view (``state``: key → last object). It lists, then watches from the list's
resourceVersion with bookmarks. When the watch breaks (network, API server restart) it re-watches from the last
resourceVersion it saw; when that version is too old (410 Gone, e.g. after an etcd compaction) it relists and hands
over the *difference* between the fresh list and the consumer's view (added / modified / deleted, marked
``via="relist"``), so a consumer never misses a change it could have seen, never sees one twice, and never sees an
object's changes out of order.

A consumer that persists its view (the recorder) passes it back as ``known`` with the stored ``resource_version``
after a restart: the informer first tries to resume the watch from that version (exact history), and falls back to
relisting against ``known``.

:func:`diff_states` is the pure core of the relist and is unit-tested on its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, Literal

from capstan.backoff import Backoff
from capstan.kube.client import LIST_PAGE, ApiError, KubeClient
from capstan.kube.resources import Resource

log = logging.getLogger(__name__)

DeltaType = Literal["added", "modified", "deleted", "synced"]
Via = Literal["list", "watch", "relist"]


@dataclasses.dataclass(frozen=True, slots=True)
class Delta:
    """One change as the consumer should apply it. ``synced`` carries no object: the view is now complete."""

    type: DeltaType
    obj: dict[str, Any] | None
    via: Via
    resource_version: str

    @property
    def key(self) -> str:
        return object_key(self.obj) if self.obj is not None else ""


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def _uid(obj: Mapping[str, Any]) -> str:
    if type(obj) is _Identity:  # what the informer keeps: read without building its metadata dict
        return str(obj._uid or "")
    return str((obj.get("metadata") or {}).get("uid") or "")


def _rv(obj: Mapping[str, Any]) -> str:
    if type(obj) is _Identity:
        return str(obj._rv or "")
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def diff_states(
    known: Mapping[str, Mapping[str, Any]], fresh: Iterable[dict[str, Any]], list_rv: str, via: Via = "relist"
) -> list[Delta]:
    """Deltas that turn the view ``known`` into ``fresh`` (a complete list), in a deterministic order.

    An object whose uid changed under the same name was deleted and re-created: a ``deleted`` for the old one comes
    before the ``added`` for the new one. Objects with an unchanged resourceVersion produce nothing.
    """
    out: list[Delta] = []
    seen: set[str] = set()
    for obj in sorted(fresh, key=object_key):
        key = object_key(obj)
        seen.add(key)
        old = known.get(key)
        if old is None:
            out.append(Delta("added", obj, via, _rv(obj)))
        elif _uid(old) and _uid(obj) and _uid(old) != _uid(obj):
            out.append(Delta("deleted", dict(old), via, list_rv))
            out.append(Delta("added", obj, via, _rv(obj)))
        elif _rv(old) != _rv(obj):
            out.append(Delta("modified", obj, via, _rv(obj)))
    for key in sorted(set(known) - seen):
        out.append(Delta("deleted", dict(known[key]), via, list_rv))
    return out


class _Identity(Mapping[str, Any]):
    """What ``keep_objects=False`` keeps of an object: reads like ``{"apiVersion", "kind", "metadata": {name,
    namespace, uid, resourceVersion}}`` but is one slotted object (about a third of the two dicts' memory, which
    matters at 10k pods); the repeated strings are interned."""

    __slots__ = ("_api_version", "_kind", "_name", "_namespace", "_rv", "_uid")

    def __init__(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        self._api_version = _interned(obj.get("apiVersion"))
        self._kind = _interned(obj.get("kind"))
        self._namespace = _interned(meta.get("namespace"))
        self._name = meta.get("name")
        self._uid = meta.get("uid")
        self._rv = meta.get("resourceVersion")

    def __getitem__(self, key: str) -> Any:
        if key == "apiVersion":
            return self._api_version
        if key == "kind":
            return self._kind
        if key == "metadata":
            fields = (
                ("name", self._name),
                ("namespace", self._namespace),
                ("uid", self._uid),
                ("resourceVersion", self._rv),
            )
            return {k: v for k, v in fields if v is not None}
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(("apiVersion", "kind", "metadata"))

    def __len__(self) -> int:
        return 3


def _interned(value: Any) -> Any:
    return sys.intern(value) if isinstance(value, str) else value


def _minimal(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _Identity(obj)


@dataclasses.dataclass
class InformerStats:
    lists: int = 0
    relists: int = 0
    watches: int = 0
    watch_errors: int = 0
    events: int = 0
    bookmarks: int = 0
    resumed: bool = False


class Informer:
    """Deltas for one resource (optionally one namespace / selector). Iterate :meth:`deltas`; call :meth:`stop`."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        known: Mapping[str, Mapping[str, Any]] | None = None,
        resource_version: str | None = None,
        keep_objects: bool = True,
        page_size: int = LIST_PAGE,
        remember: bool = True,
        watch_timeout: int = 300,
        inactivity_timeout: float = 90.0,
        backoff: Backoff | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.keep_objects = keep_objects
        # objects per list page: a decoded page is the list's peak memory, so memory-lean consumers ask for less
        self.page_size = max(1, page_size)
        # remember=False keeps no per-object state at all: every listed object comes as "added", a watch event as
        # "added"/"modified" by its type, and a relist cannot say what disappeared — for consumers that rebuild
        # their own view from each (re)list (its deltas end with "synced") and need no diff
        self.remember = remember
        self.state: dict[str, Mapping[str, Any]] = {k: dict(v) for k, v in (known or {}).items()}
        self._has_known = known is not None
        self.resource_version = resource_version or ""
        self.watch_timeout = watch_timeout
        self.inactivity_timeout = inactivity_timeout
        self.backoff = backoff or Backoff(rng=rng or random.Random(0))
        self._rng = rng or random.Random(0)
        self._sleep = sleep
        self._stopped = asyncio.Event()
        self.stats = InformerStats()

    def stop(self) -> None:
        self._stopped.set()

    def _remember(self, delta: Delta) -> None:
        if delta.obj is None or not self.remember:
            return
        key = object_key(delta.obj)
        if delta.type == "deleted":
            self.state.pop(key, None)
        else:
            self.state[key] = delta.obj if self.keep_objects else _minimal(delta.obj)

    async def _list(self) -> AsyncIterator[Delta]:
        """A (re)list, page by page: added/modified per page, deletions once every page was seen, then synced."""
        first = not self._has_known and self.stats.lists == 0
        via: Via = "list" if first else "relist"
        seen: set[str] = set()
        rv = ""
        async for items, page_rv in self.client.list_pages(
            self.resource,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            limit=self.page_size,
        ):
            rv = page_rv or rv
            page_known = {}
            for obj in items:
                key = object_key(obj)
                seen.add(key)
                if key in self.state:
                    page_known[key] = self.state[key]
            for delta in diff_states(page_known, items, rv, via=via):
                yield delta
        gone = {key: self.state[key] for key in self.state.keys() - seen}
        for delta in diff_states(gone, [], rv, via=via):
            yield delta
        self.stats.lists += 1
        if not first:
            self.stats.relists += 1
        self._has_known = True
        self.resource_version = rv
        yield Delta("synced", None, via, rv)

    def _apply_event(self, event: Mapping[str, Any]) -> list[Delta]:
        etype = event.get("type")
        obj = event.get("object") or {}
        if etype == "BOOKMARK":
            self.stats.bookmarks += 1
            self.resource_version = _rv(obj) or self.resource_version
            return []
        if etype == "ERROR":
            code = int(obj.get("code") or 0)
            raise ApiError(code, str(obj.get("reason") or "Error"), str(obj.get("message") or obj))
        if etype not in ("ADDED", "MODIFIED", "DELETED"):
            return []
        self.stats.events += 1
        obj.setdefault("kind", self.resource.kind)
        obj.setdefault("apiVersion", self.resource.api_version)
        rv = _rv(obj)
        self.resource_version = rv or self.resource_version
        key = object_key(obj)
        old = self.state.get(key)
        out: list[Delta] = []
        old_uid = _uid(old) if old is not None else ""
        if etype == "DELETED":
            if old_uid and old_uid != _uid(obj):
                return []  # a delete of an incarnation we never saw; the current one stays
            out.append(Delta("deleted", obj, "watch", rv))
            return out
        if old is not None and old_uid:
            new_uid = _uid(obj)
            if new_uid and old_uid != new_uid:
                out.append(Delta("deleted", dict(old), "watch", rv))
                old = None
        if old is not None and _rv(old) == rv:
            return out  # already seen (e.g. replayed after a resume)
        if old is None and not self.remember:
            out.append(Delta("added" if etype == "ADDED" else "modified", obj, "watch", rv))
            return out
        out.append(Delta("added" if old is None else "modified", obj, "watch", rv))
        return out

    async def deltas(self) -> AsyncIterator[Delta]:
        """Every change, forever (until :meth:`stop`); list first unless resuming from a stored version."""
        need_list = not self.resource_version
        if not need_list:
            self.stats.resumed = True
        # 410s in a row with no watch event between them: the first relists at once (a compaction), the next ones
        # back off, so an API server that keeps answering 410 is not relisted in a hot loop
        gone_in_a_row = 0
        while not self._stopped.is_set():
            try:
                if need_list:
                    async for delta in self._list():
                        self._remember(delta)
                        yield delta
                    need_list = False
                    if gone_in_a_row == 0:
                        self.backoff.reset()  # the failures before a good list are over
                self.stats.watches += 1
                timeout = int(self.watch_timeout * (0.8 + 0.4 * self._rng.random()))
                async for event in self.client.watch(
                    self.resource,
                    resource_version=self.resource_version,
                    namespace=self.namespace,
                    label_selector=self.label_selector,
                    field_selector=self.field_selector,
                    timeout_seconds=timeout,
                    inactivity_timeout=self.inactivity_timeout,
                ):
                    for delta in self._apply_event(event):
                        self._remember(delta)
                        yield delta
                    self.backoff.reset()
                    gone_in_a_row = 0
                    if self._stopped.is_set():
                        return
            except ApiError as exc:
                self.stats.watch_errors += 1
                if exc.gone:
                    gone_in_a_row += 1
                    delay = self.backoff.next() if gone_in_a_row > 1 else 0.0
                    log.info(
                        "resourceVersion expired; relisting",
                        extra={
                            "resource": self.resource.name,
                            "rv": self.resource_version,
                            "retry_in": delay,
                        },
                    )
                    need_list = True
                    if delay:
                        await self._sleep(delay)
                    continue
                delay = self.backoff.next()
                log.warning(
                    "watch failed; retrying",
                    extra={"resource": self.resource.name, "error": str(exc), "retry_in": round(delay, 2)},
                )
                await self._sleep(delay)
            except ValueError as exc:  # undecodable stream line: start again from the last good version
                self.stats.watch_errors += 1
                log.warning(
                    "bad watch data; re-watching", extra={"resource": self.resource.name, "error": str(exc)}
                )
                await self._sleep(self.backoff.next())
