"""The one seam to the Kubernetes API: an async client that speaks plain dicts.

Built on lightkube's kubeconfig handling (contexts, client certificates, tokens), which configures an
``httpx2.AsyncClient``; exec credential plugins (EKS, GKE, AKS) run through :mod:`capstan.kube._exec`, which adds
what lightkube lacks (``client.authentication.k8s.io/v1``, a deadline, token expiry); responses are decoded once with ``json.loads`` and handed on as dicts,
never as generated models — what the informer and the recorder store anyway, and several times cheaper than model
deserialisation. docs/kube-client.md has the measurement (10k pods: list, watch, memory) that chose this over
kubernetes_asyncio, kr8s and lightkube's own models.

Every call has a timeout; errors surface as :class:`ApiError` with the status and the API server's message.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import httpx2
from lightkube.config import client_adapter
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.config.models import Cluster, User
from lightkube.core.exceptions import ConfigError

from capstan import jsontext
from capstan.config import read_mapping
from capstan.errors import UserError
from capstan.kube._exec import (
    DEFAULT_EXEC_TIMEOUT_S,
    ExecAuth,
    ExecConfig,
    ExecCredentialError,
    cluster_info,
)
from capstan.kube.resources import PODS, Resource

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 30.0
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
LIST_PAGE = 500
_CACHE_LAG_RETRIES = 5
_MAX_PAGES = 100_000


class ApiError(Exception):
    """A non-2xx answer from the API server."""

    def __init__(self, status: int, reason: str, message: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409


def _load_kubeconfig(path: Path, context: str | None) -> tuple[dict[str, Any], SingleConfig, str]:
    """Read the kubeconfig once (through :func:`capstan.config.read_mapping`: not UTF-8, invalid YAML and
    duplicate keys are one line) and pick the context; returns the raw mapping, lightkube's view of the context,
    and the context's user name. Every problem is a :class:`UserError` naming the file."""
    try:
        data = read_mapping(path)
    except UserError as exc:
        raise UserError(f"kubeconfig {exc}") from None
    for key in ("clusters", "contexts", "users"):
        if not isinstance(data.get(key), list) or not data[key]:
            raise UserError(f"kubeconfig {path}: no {key} defined")
        for i, item in enumerate(data[key]):
            singular = key[:-1]
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise UserError(f"kubeconfig {path}: {key}[{i}]: expected a mapping with a name")
            if not isinstance(item.get(singular), dict):
                raise UserError(f"kubeconfig {path}: {key}[{i}] ({item['name']}): no {singular} mapping")
    name = context or data.get("current-context")
    if not name:
        raise UserError(f"kubeconfig {path}: no current-context set")
    contexts = {c["name"]: c["context"] for c in data["contexts"]}
    if name not in contexts:
        raise UserError(f"kubeconfig {path}: context {name!r} not found")
    ctx = contexts[name]
    clusters = {c["name"] for c in data["clusters"]}
    users = {u["name"] for u in data["users"]}
    if ctx.get("cluster") not in clusters:
        raise UserError(
            f"kubeconfig {path}: context {name!r} names cluster {ctx.get('cluster')!r}, not defined"
        )
    if ctx.get("user") is not None and ctx.get("user") not in users:
        raise UserError(f"kubeconfig {path}: context {name!r} names user {ctx.get('user')!r}, not defined")
    try:
        single = KubeConfig.from_dict(data, fname=path).get(context_name=name)
    except (ConfigError, ValueError, KeyError, TypeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"kubeconfig {path}: {first}") from None
    if single is None:
        raise UserError(f"kubeconfig {path}: no context to use")
    return data, single, str(ctx.get("user") or "")


def _exec_auth(
    path: Path, data: dict[str, Any], single: SingleConfig, user: str, timeout_s: float
) -> ExecAuth | None:
    """The exec credential plugin of the context's user, if it has one (see :mod:`capstan.kube._exec`)."""
    raw_user = next((u["user"] for u in data["users"] if u["name"] == user), None)
    if not raw_user or "exec" not in raw_user:
        return None
    if raw_user.get("token") or raw_user.get("tokenFile") or raw_user.get("client-certificate-data"):
        return None  # client-go prefers these too
    try:
        config = ExecConfig.from_kubeconfig(raw_user["exec"])
    except ValueError as exc:
        raise UserError(f"kubeconfig {path}: user {user!r}: {exc}") from None
    cluster_name = single.context.cluster
    raw_cluster: dict[str, Any] = next(
        (c["cluster"] for c in data["clusters"] if c["name"] == cluster_name), {}
    )
    return ExecAuth(
        config, base_dir=path.parent, cluster=cluster_info(raw_cluster, path.parent), timeout_s=timeout_s
    )


class KubeClient:
    """Async access to one cluster. Create with :meth:`from_kubeconfig`; close with :meth:`close`."""

    def __init__(
        self,
        http: httpx2.AsyncClient,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        source: str = "",
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._http = http
        self._sleep = sleep  # between the retries of a list the watch cache cannot serve yet
        self.timeout = timeout
        self.source = source
        self.exec_auth: ExecAuth | None = None
        """The exec credential plugin this client's tokens come from, if any."""

    @classmethod
    async def from_kubeconfig(
        cls,
        path: Path | str,
        *,
        context: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        exec_timeout: float = DEFAULT_EXEC_TIMEOUT_S,
    ) -> KubeClient:
        """A client for the kubeconfig's context. Everything that can be checked before the first request is
        checked here and is one :class:`UserError` naming the file: the file itself, the context, TLS files, and
        an exec credential plugin, which is run once now (``exec_timeout`` bounds each run)."""
        path = Path(path)
        data, single, user = _load_kubeconfig(path, context)
        try:
            params = client_adapter.ConnectionParams(timeout=httpx2.Timeout(timeout), trust_env=False)
            options = params.httpx_params(single)
        except (ConfigError, ValueError, KeyError, TypeError, OSError, AssertionError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise UserError(f"kubeconfig {path}: {first}") from None
        auth = _exec_auth(path, data, single, user, exec_timeout)
        if auth is not None:
            options["auth"] = auth
            try:
                await auth.token()
            except ExecCredentialError as exc:
                raise UserError(f"kubeconfig {path}: user {user!r}: {exc}") from None
        http = httpx2.AsyncClient(**options)
        client = cls(http, timeout=timeout, source=str(path))
        client.exec_auth = auth
        return client

    @classmethod
    async def in_cluster(
        cls,
        *,
        service_account_dir: Path | str | None = None,
        environ: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> KubeClient:
        """A client for the cluster this process runs in, as client-go's ``rest.InClusterConfig`` finds it: the API
        server at ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``, verified with the service
        account's ``ca.crt``, authenticated with its ``token`` (read again when the API server answers 401, since
        the kubelet rotates bound tokens). The files are in ``service_account_dir``, by default
        ``$CAPSTAN_SERVICE_ACCOUNT_DIR`` or ``/var/run/secrets/kubernetes.io/serviceaccount``. A missing variable
        or file is one :class:`UserError`."""
        env = os.environ if environ is None else environ
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
        if not host or not port:
            raise UserError(
                "in-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set (not running in a "
                "pod? give a kubeconfig)"
            )
        account = Path(service_account_dir or env.get("CAPSTAN_SERVICE_ACCOUNT_DIR") or SERVICE_ACCOUNT_DIR)
        for name in ("token", "ca.crt"):
            if not (account / name).is_file():
                raise UserError(
                    f"in-cluster: {account / name}: no such file (is a service account token mounted?)"
                )
        url_host = f"[{host}]" if ":" in host else host
        single = KubeConfig.from_one(
            cluster=Cluster(server=f"https://{url_host}:{port}", certificate_auth=str(account / "ca.crt")),
            user=User(token_file=str(account / "token")),
            namespace=_read_namespace(account),
        ).get()
        assert single is not None  # from_one makes its one context the current one
        try:
            params = client_adapter.ConnectionParams(timeout=httpx2.Timeout(timeout), trust_env=False)
            options = params.httpx_params(single)
        except (ConfigError, ValueError, KeyError, TypeError, OSError, AssertionError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise UserError(f"in-cluster: {account}: {first}") from None
        return cls(httpx2.AsyncClient(**options), timeout=timeout, source=f"in-cluster {url_host}:{port}")

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def host(self) -> str:
        return str(self._http.base_url)

    # ---- raw request --------------------------------------------------------------------------------------------
    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: httpx2.Timeout | float | None = None,
        stream: bool = False,
    ) -> httpx2.Response:
        params: list[tuple[str, str | int | float | bool | None]] = [
            (k, _qv(v)) for k, v in (query or {}).items() if v is not None
        ]
        headers = {"Accept": "application/json"}
        content = None
        if body is not None:
            headers["Content-Type"] = content_type
            content = json.dumps(body).encode()
        request = self._http.build_request(
            method,
            path,
            params=params,
            headers=headers,
            content=content,
            timeout=timeout if timeout is not None else self.timeout,
        )
        try:
            resp = await self._http.send(request, stream=stream)
        except ExecCredentialError as exc:  # a token could not be renewed: retried like a lost connection
            raise ApiError(0, "Credentials", f"{method} {path}: {exc}") from None
        except httpx2.TimeoutException as exc:
            raise ApiError(0, "Timeout", f"{method} {path}: {type(exc).__name__}") from None
        except httpx2.HTTPError as exc:
            raise ApiError(0, "ConnectionError", f"{method} {path}: {exc}") from exc
        if resp.status_code >= 300:
            try:
                raw = await resp.aread()
            finally:
                await resp.aclose()
            try:
                status_obj = json.loads(raw)
                message = status_obj.get("message", raw.decode(errors="replace"))
                reason = status_obj.get("reason", resp.reason_phrase or "")
            except ValueError:
                status_obj, message, reason = (
                    None,
                    raw.decode(errors="replace")[:300],
                    resp.reason_phrase or "",
                )
            raise ApiError(resp.status_code, str(reason), str(message), status_obj)
        return resp

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> Any:
        """One request whose JSON answer is decoded and returned."""
        total = timeout if timeout is not None else self.timeout
        try:
            async with asyncio.timeout(total):
                resp = await self._send(
                    method, path, query=query, body=body, content_type=content_type, timeout=total
                )
        except TimeoutError:
            raise ApiError(0, "Timeout", f"{method} {path}: no answer within {total:.0f} s") from None
        raw = resp.content
        return json.loads(raw) if raw else None

    # ---- typed helpers over dicts --------------------------------------------------------------------------------
    async def list_page(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = LIST_PAGE,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        query: dict[str, Any] = {
            "limit": limit,
            "continue": continue_token,
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
        }
        if resource_version is not None and continue_token is None:
            query["resourceVersion"] = resource_version
            query["resourceVersionMatch"] = "NotOlderThan" if resource_version != "0" else None
        path = resource.collection_path(namespace)
        for attempt in range(_CACHE_LAG_RETRIES):  # bounded
            try:
                result: dict[str, Any] = await self.request("GET", path, query=query)
                return result
            except ApiError as exc:
                # The API server serves lists from its watch cache and answers 504 "Too large resource version"
                # when the cache lags etcd for a few seconds under load; client-go's reflector retries too.
                if (
                    exc.status != 504
                    or "Too large resource version" not in str(exc)
                    or attempt == _CACHE_LAG_RETRIES - 1
                ):
                    raise
                await self._sleep(0.5 * 2**attempt)
        raise AssertionError("unreachable")

    async def list_pages(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = LIST_PAGE,
    ) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        """Pages of one consistent list (``continue`` tokens pin the snapshot), each with the list's resourceVersion.

        Consumers that need not hold every object at once (the informer) process page by page, so a list of 10k pods
        costs one page of memory, not ten thousand objects.
        """
        token: str | None = None
        for _ in range(_MAX_PAGES):
            page = await self.list_page(
                resource,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=limit,
                continue_token=token,
            )
            items = page.get("items") or []
            for item in items:
                item.setdefault("kind", resource.kind)
                item.setdefault("apiVersion", resource.api_version)
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            yield items, str(meta.get("resourceVersion") or "")
            if not token:
                return
        raise ApiError(0, "TooManyPages", f"list {resource.name}: more than {_MAX_PAGES} pages")

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = LIST_PAGE,
    ) -> tuple[list[dict[str, Any]], str]:
        """All items (following ``continue``) and the list's resourceVersion, a consistent snapshot."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        rv = ""
        for _ in range(_MAX_PAGES):
            page = await self.list_page(
                resource,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=limit,
                continue_token=token,
            )
            kind = resource.kind
            for item in page.get("items") or []:
                item.setdefault("kind", kind)
                item.setdefault("apiVersion", resource.api_version)
                items.append(item)
            meta = page.get("metadata") or {}
            rv = meta.get("resourceVersion") or rv
            token = meta.get("continue") or None
            if not token:
                return items, rv
        raise ApiError(0, "TooManyPages", f"list {resource.name}: more than {_MAX_PAGES} pages")

    async def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        inactivity_timeout: float = 90.0,
        bookmarks: bool = True,
    ) -> AsyncIterator[dict[str, Any]]:
        """Raw watch events (``{"type", "object"}``) from ``resource_version`` until the server ends the stream.

        A stream that sends nothing (not even a bookmark) for ``inactivity_timeout`` seconds counts as dead and
        raises :class:`ApiError` with reason ``Inactive``.
        """
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true" if bookmarks else None,
            "timeoutSeconds": timeout_seconds,
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
        }
        timeout = httpx2.Timeout(self.timeout, read=inactivity_timeout)
        try:
            # NOTE: asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation that arrives
            # as the response does, and the cancelled task then sat in the watch stream until the server ended it
            # (minutes): `capstan record --once`, which stops right after its first list, hung so.
            async with asyncio.timeout(self.timeout):
                resp = await self._send(
                    "GET", resource.collection_path(namespace), query=query, timeout=timeout, stream=True
                )
        except TimeoutError:
            raise ApiError(
                0, "Timeout", f"watch {resource.name}: no answer within {self.timeout:.0f} s"
            ) from None
        try:
            # NOTE: the hot path of recording (one line per change): a read holding many lines is split once,
            # and each line decoded by orjson where that reads it as json.loads would (capstan.jsontext.loads).
            buffer = b""
            async for chunk in resp.aiter_raw():
                if b"\n" not in chunk:
                    buffer += chunk
                    continue
                *lines, rest = (buffer + chunk).split(b"\n")
                buffer = rest
                for line in lines:
                    if line.strip():
                        yield jsontext.loads(line)
            if buffer.strip():
                yield jsontext.loads(buffer)
        except httpx2.ReadTimeout:
            raise ApiError(
                0, "Inactive", f"watch {resource.name}: silent for {inactivity_timeout:.0f} s"
            ) from None
        except httpx2.HTTPError as exc:
            raise ApiError(0, "StreamBroken", f"watch {resource.name}: {exc}") from exc
        finally:
            await resp.aclose()

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await self.request("GET", resource.item_path(name, namespace))
        return result

    async def create(
        self, resource: Resource, body: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        ns = namespace or (body.get("metadata") or {}).get("namespace")
        result: dict[str, Any] = await self.request("POST", resource.collection_path(ns), body=body)
        return result

    async def replace(
        self, resource: Resource, body: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        meta = body.get("metadata") or {}
        ns = namespace or meta.get("namespace")
        result: dict[str, Any] = await self.request("PUT", resource.item_path(meta["name"], ns), body=body)
        return result

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        patch_type: str = "merge",
    ) -> dict[str, Any]:
        content_type = {
            "merge": "application/merge-patch+json",
            "strategic": "application/strategic-merge-patch+json",
            "json": "application/json-patch+json",
        }[patch_type]
        result: dict[str, Any] = await self.request(
            "PATCH", resource.item_path(name, namespace, subresource), body=patch, content_type=content_type
        )
        return result

    async def apply(
        self,
        resource: Resource,
        body: dict[str, Any],
        *,
        field_manager: str = "capstan",
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """Server-side apply."""
        meta = body["metadata"]
        result: dict[str, Any] = await self.request(
            "PATCH",
            resource.item_path(meta["name"], meta.get("namespace"), subresource),
            query={"fieldManager": field_manager, "force": "true"},
            body=body,
            content_type="application/apply-patch+yaml",
        )
        return result

    async def delete(
        self, resource: Resource, name: str, namespace: str | None = None, *, grace_seconds: int | None = None
    ) -> dict[str, Any] | None:
        body = {"gracePeriodSeconds": grace_seconds} if grace_seconds is not None else None
        try:
            result: dict[str, Any] = await self.request(
                "DELETE", resource.item_path(name, namespace), body=body
            )
        except ApiError as exc:
            if exc.not_found:
                return None
            raise
        return result

    async def pod_log(
        self,
        namespace: str,
        name: str,
        container: str,
        *,
        previous: bool = False,
        tail_lines: int | None = None,
        limit_bytes: int | None = None,
        since_seconds: int | None = None,
    ) -> str:
        """The pod-log API (``kubectl logs [--previous] [--since]``); kwok serves it from files on its nodes."""
        query = {
            "container": container,
            "previous": "true" if previous else None,
            "tailLines": tail_lines,
            "limitBytes": limit_bytes,
            "sinceSeconds": since_seconds,
        }
        try:
            async with asyncio.timeout(self.timeout):
                resp = await self._send("GET", PODS.item_path(name, namespace, "log"), query=query)
        except TimeoutError:
            raise ApiError(0, "Timeout", f"logs {namespace}/{name}/{container}: no answer") from None
        return resp.content.decode("utf-8", errors="replace")


KubeConnect = Callable[[], Awaitable[KubeClient]]
"""Opens a new client to one cluster, for a component that owns its client's lifecycle (one per run, inside its
event loop): ``functools.partial(KubeClient.from_kubeconfig, path)`` in the command that builds the component, a
fake API server's client in unit tests. Whoever calls it closes what it returns."""


def connector(kubeconfig: Path | str | None, **options: Any) -> KubeConnect:
    """How a command reaches its cluster: through ``kubeconfig`` when one is given, else from inside the cluster
    (:meth:`KubeClient.in_cluster`, in a pod). ``options`` go to the chosen constructor (e.g. ``timeout``)."""
    if kubeconfig is not None:
        return functools.partial(KubeClient.from_kubeconfig, kubeconfig, **options)
    return functools.partial(KubeClient.in_cluster, **options)


def in_a_pod(environ: Mapping[str, str] | None = None) -> bool:
    """True when this process runs in a Kubernetes pod (the API server's service variables are set)."""
    env = os.environ if environ is None else environ
    return bool(env.get("KUBERNETES_SERVICE_HOST") and env.get("KUBERNETES_SERVICE_PORT"))


def _read_namespace(account: Path) -> str | None:
    try:
        return (account / "namespace").read_text().strip() or None
    except OSError:
        return None


def _qv(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)
