"""A scripted Kubernetes API server at the HTTP transport, for fast unit tests of the informer and its consumers.

The real :class:`~capstan.kube.KubeClient` talks to it through httpx2's ``MockTransport``, so everything above the
transport — the client's paging, status decoding and watch-line framing, the informer's resourceVersion handling,
retries, backoff and relists — runs as it does against a cluster. The fake holds the objects of one resource, as the
API server's storage does: :meth:`FakeApiServer.put` and :meth:`FakeApiServer.remove` change them with increasing
resourceVersions and return the watch event a watcher would see, and lists answer from them page by page
(``limit`` / ``continue``). What a watch request gets is scripted, one :class:`Watch` per request: events, then an
ending (the server closing the stream, a broken connection, silence, an undecodable line), or a status instead of a
stream (410 Gone, 500). :meth:`FakeApiServer.compact` makes every watch from an older version answer 410 as etcd
compaction does.

Every request is logged (:attr:`FakeApiServer.requests`) for tests to assert on. A request the script does not
cover (a watch with no :class:`Watch` left, another resource's path, a write), or more than ``max_requests`` of
them, fails the test with an ``AssertionError`` naming it, so a test can neither hang nor spin on a step it forgot. Integration tests against the
sandbox (``tests/integration/kube``) stay the proof against the real API server; this is their fast companion.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

import httpx2

from capstan.kube import KubeClient, Resource, object_key

Ending = Literal["close", "broken", "silent", "garbage", "hold"]
"""How a scripted watch stream ends after its events: ``close`` (the server's timeoutSeconds ran out), ``broken``
(the connection dropped mid-body), ``silent`` (nothing more arrived: the client's read timeout fires), ``garbage``
(a line that is not JSON), ``hold`` (it stays open and quiet until the client goes away: a consumer that runs on
in the background until the test stops it)."""


Events = Sequence[Mapping[str, Any]] | Callable[[], Sequence[Mapping[str, Any]]]


@dataclasses.dataclass(frozen=True)
class Watch:
    """The answer to one watch request: ``events`` are streamed, one JSON line each, then ``end`` happens; a
    ``status`` other than 200 answers with a Status object instead of a stream (410: the version is too old).

    ``events`` may be a callable, called when the request arrives: the changes it makes (:meth:`FakeApiServer.put`,
    ``remove``) happen while this watch runs, after the list before it, and it returns what the stream carries. With
    a status it is called all the same (the changes made while the client was away) and nothing is streamed.
    """

    events: Events = ()
    end: Ending = "close"
    status: int = 200


@dataclasses.dataclass(frozen=True)
class Seen:
    """One request the fake answered: ``verb`` is ``list`` or ``watch``; ``query`` the query parameters."""

    verb: Literal["list", "watch"]
    path: str
    query: Mapping[str, str]


def status_object(code: int, reason: str, message: str) -> dict[str, Any]:
    """A ``meta/v1 Status`` as the API server sends it with an error (and inside a watch ERROR event)."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


_REASONS = {
    403: "Forbidden",
    404: "NotFound",
    410: "Expired",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class FakeApiServer:
    """The objects of one resource behind a scripted API server (see the module docstring)."""

    def __init__(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        resource_version: int = 100,
        max_requests: int = 1000,
    ) -> None:
        self.resource = resource
        self.max_requests = max_requests
        self.namespace = namespace
        self.path = resource.collection_path(namespace)
        self.resource_version = resource_version
        self.compacted = 0
        self.objects: dict[str, dict[str, Any]] = {}
        self.watches: deque[Watch] = deque()
        self.list_statuses: deque[int | tuple[int, str] | None] = deque()
        """Scripted answers of the next list requests (page requests included): a status (or a status and its
        message) fails that request, None serves it; once empty, every list is served."""
        self.requests: list[Seen] = []
        self._uids = 0

    # ---- the stored objects ---------------------------------------------------------------------------------------
    def put(
        self,
        name: str,
        data: Mapping[str, str] | None = None,
        *,
        uid: str | None = None,
        fields: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Create or update one object (a new uid re-creates it); returns its ADDED/MODIFIED watch event.
        ``fields`` are further top-level fields (a Pod's ``status``), ``metadata`` further metadata (labels)."""
        meta: dict[str, Any] = {"name": name, **(metadata or {})}
        if self.namespace is not None:
            meta["namespace"] = self.namespace
        key = object_key({"metadata": meta})
        old = self.objects.get(key)
        if uid is None:
            uid = old["metadata"]["uid"] if old is not None else self._new_uid()
        self.resource_version += 1
        meta.update(uid=uid, resourceVersion=str(self.resource_version))
        obj = {
            "apiVersion": self.resource.api_version,
            "kind": self.resource.kind,
            "metadata": meta,
            "data": dict(data or {}),
            **copy.deepcopy(dict(fields or {})),
        }
        self.objects[key] = obj
        same = old is not None and old["metadata"]["uid"] == uid
        return {"type": "MODIFIED" if same else "ADDED", "object": copy.deepcopy(obj)}

    def _new_uid(self) -> str:
        self._uids += 1
        return f"uid-{self._uids}"

    def remove(self, name: str) -> dict[str, Any]:
        """Delete one object; returns its DELETED watch event (carrying the deletion's resourceVersion)."""
        key = f"{self.namespace}/{name}" if self.namespace is not None else name
        obj = self.objects.pop(key)
        self.resource_version += 1
        obj["metadata"]["resourceVersion"] = str(self.resource_version)
        return {"type": "DELETED", "object": obj}

    def bookmark(self) -> dict[str, Any]:
        """A BOOKMARK event at the current resourceVersion (an object with nothing but its version)."""
        return {
            "type": "BOOKMARK",
            "object": {
                "kind": self.resource.kind,
                "apiVersion": self.resource.api_version,
                "metadata": {"resourceVersion": str(self.resource_version)},
            },
        }

    def expired(self) -> dict[str, Any]:
        """The ERROR event of a watch whose version was compacted away while it ran."""
        return {"type": "ERROR", "object": status_object(410, "Expired", "too old resource version")}

    def advance(self, versions: int) -> None:
        """Writes to other resources: the resourceVersion (etcd's revision) moves on, nothing here changes."""
        self.resource_version += versions

    def compact(self) -> None:
        """Forget history up to now (etcd compaction): a watch from an older version answers 410 Gone."""
        self.compacted = self.resource_version

    # ---- scripting ------------------------------------------------------------------------------------------------
    def script(self, *watches: Watch) -> None:
        """Answer the next watch requests with these, in order."""
        self.watches.extend(watches)

    def fail_lists(self, *statuses: int | tuple[int, str] | None) -> None:
        """Answer the next list (page) requests with these statuses, or statuses and messages (None: serve it)."""
        self.list_statuses.extend(statuses)

    def client(
        self, *, timeout: float = 5.0, sleep: Callable[[float], Awaitable[None]] | None = None
    ) -> KubeClient:
        """A real :class:`KubeClient` whose transport is this fake (``sleep``: its wait between list retries)."""
        http = httpx2.AsyncClient(
            transport=httpx2.MockTransport(self._handle), base_url="https://fake-apiserver"
        )
        if sleep is None:
            return KubeClient(http, timeout=timeout, source="fake")
        return KubeClient(http, timeout=timeout, source="fake", sleep=sleep)

    async def connect(self) -> KubeClient:
        """A client factory, as the recorder is given (``connect``)."""
        return self.client()

    def verbs(self) -> list[str]:
        """The requests so far, each as ``list`` or ``watch@<resourceVersion>``."""
        return [
            "list" if s.verb == "list" else f"watch@{s.query.get('resourceVersion', '')}"
            for s in self.requests
        ]

    # ---- the transport ----------------------------------------------------------------------------------------------
    async def _handle(self, request: httpx2.Request) -> httpx2.Response:
        # NOTE: every request yields to the loop and they are counted, so a client that loops without end meets
        # the test's timeout guard, or this limit, instead of spinning on answers that never suspend
        await asyncio.sleep(0)
        if len(self.requests) >= self.max_requests:
            raise AssertionError(
                f"FakeApiServer: more than {self.max_requests} requests (a loop that never ends?)"
            )
        query = dict(request.url.params)
        path = request.url.path
        if request.method != "GET" or path != self.path:
            raise AssertionError(
                f"FakeApiServer: unscripted {request.method} {path} (serving GET {self.path})"
            )
        if query.get("watch") == "true":
            self.requests.append(Seen("watch", path, query))
            return self._watch(query)
        self.requests.append(Seen("list", path, query))
        return self._list(query)

    def _list(self, query: Mapping[str, str]) -> httpx2.Response:
        if self.list_statuses:
            status = self.list_statuses.popleft()
            if isinstance(status, tuple):
                return _status_response(*status)
            if status is not None:
                return _status_response(status, f"list {self.resource.name}: scripted failure")
        keys = sorted(self.objects)
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or len(keys) or 1)
        page = keys[start : start + limit]
        rest = start + limit < len(keys)
        # NOTE: the items of a list carry no kind/apiVersion, as the API server sends them
        items = [copy.deepcopy(self.objects[key]) for key in page]
        for item in items:
            del item["kind"], item["apiVersion"]
        meta = {"resourceVersion": str(self.resource_version), "continue": str(start + limit) if rest else ""}
        body = {
            "kind": f"{self.resource.kind}List",
            "apiVersion": self.resource.api_version,
            "metadata": meta,
        }
        return httpx2.Response(200, json={**body, "items": items})

    def _watch(self, query: Mapping[str, str]) -> httpx2.Response:
        rv = query.get("resourceVersion")
        if not rv:
            raise AssertionError(
                "FakeApiServer: a watch without a resourceVersion (the informer always sends one)"
            )
        if self.compacted and int(rv) < self.compacted:
            return _status_response(410, f"too old resource version: {rv} ({self.compacted})")
        if not self.watches:
            raise AssertionError(f"FakeApiServer: unscripted watch from resourceVersion {rv}")
        watch = self.watches.popleft()
        events = tuple(watch.events() if callable(watch.events) else watch.events)
        if watch.status != 200:
            return _status_response(watch.status, f"watch {self.resource.name}: scripted failure")
        return httpx2.Response(
            200, headers={"content-type": "application/json"}, content=_stream(events, watch.end)
        )


def _status_response(status: int, message: str) -> httpx2.Response:
    return httpx2.Response(status, json=status_object(status, _REASONS.get(status, "Failure"), message))


async def _stream(events: tuple[Mapping[str, Any], ...], end: Ending) -> AsyncIterator[bytes]:
    for event in events:
        yield json.dumps(event).encode() + b"\n"
    if end == "broken":
        raise httpx2.RemoteProtocolError("peer closed connection without sending complete message body")
    if end == "silent":
        raise httpx2.ReadTimeout("no data within the read timeout")
    if end == "garbage":
        yield b"{this is not json\n"
    if end == "hold":
        await asyncio.Event().wait()  # until the client closes the stream (the task reading it is cancelled)
