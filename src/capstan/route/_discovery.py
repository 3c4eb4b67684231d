"""Endpoints discovered in Kubernetes: the serving pods a label selector picks, kept current by one informer.

A pod is an endpoint while it is Running, Ready and has an address: ``<scheme>://<podIP>:<port>`` or the URL in its
``capstan.io/url`` annotation (pods reached through a port-forward or a per-pod Service). Its models come from the
configuration or the ``capstan.io/model`` label (comma-separated), its role from ``capstan.io/role``, its KV-event
publisher from the ``capstan.io/kv-events`` annotation or ``tcp://<podIP>:<kv_events_port>``. The endpoint's name
is ``<namespace>/<pod>``. Implements :class:`capstan.route.EndpointSource`; the monitor asks for
the set on every polling round, so a pod that turns unready or goes away leaves the rotation within a round.

The source is given ``connect`` (a :data:`capstan.kube.KubeConnect`; ``capstan route serve`` binds
``KubeClient.from_kubeconfig`` to ``--kubeconfig``) and opens its client in :meth:`KubernetesEndpointSource.start`,
inside the server's event loop, closing it in ``stop``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from capstan.kube import Informer, KubeClient, KubeConnect, resources
from capstan.route._config import KubernetesDiscoveryConfig
from capstan.route._model import Endpoint

log = logging.getLogger(__name__)


def pod_endpoint(pod: Mapping[str, Any], cfg: KubernetesDiscoveryConfig) -> Endpoint | None:
    """The endpoint a pod stands for now, or None (not Running, not Ready, no address, being deleted)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") != "Running":
        return None
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    if not ready:
        return None
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    url = annotations.get(cfg.url_annotation)
    if not url:
        ip = status.get("podIP")
        if not ip:
            return None
        host = f"[{ip}]" if ":" in str(ip) else str(ip)
        url = f"{cfg.scheme}://{host}:{cfg.port}"
    models = tuple(cfg.models) or tuple(
        m.strip() for m in str(labels.get(cfg.model_label, "")).split(",") if m.strip()
    )
    role = str(labels.get(cfg.role_label) or "both")
    kv_events = annotations.get(cfg.kv_events_annotation)
    if not kv_events and cfg.kv_events_port is not None and status.get("podIP"):
        ip = str(status["podIP"])
        kv_events = f"tcp://{f'[{ip}]' if ':' in ip else ip}:{cfg.kv_events_port}"
    name = f"{meta.get('namespace')}/{meta.get('name')}"
    return Endpoint(name, str(url).rstrip("/"), models, role, str(kv_events) if kv_events else None)


class KubernetesEndpointSource:
    """Serving pods as endpoints (see the module text)."""

    def __init__(self, cfg: KubernetesDiscoveryConfig, *, connect: KubeConnect) -> None:
        self._connect = connect
        self._client: KubeClient | None = None
        self._cfg = cfg
        self._by_pod: dict[str, Endpoint] = {}
        self._task: asyncio.Task[None] | None = None
        self._informer: Informer | None = None
        self.synced = asyncio.Event()

    async def endpoints(self) -> Sequence[Endpoint]:
        return tuple(self._by_pod[k] for k in sorted(self._by_pod))

    def apply(self, change: str, pod: Mapping[str, Any]) -> None:
        """One pod change (``added``/``modified``/``deleted``)."""
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        endpoint = None if change == "deleted" else pod_endpoint(pod, self._cfg)
        if endpoint is None:
            if self._by_pod.pop(key, None) is not None:
                log.info("endpoint left", extra={"endpoint": key})
        elif self._by_pod.get(key) != endpoint:
            self._by_pod[key] = endpoint
            log.info("endpoint ready", extra={"endpoint": key, "url": endpoint.url})

    async def start(self) -> None:
        self._client = await self._connect()
        self._informer = Informer(
            self._client,
            resources.PODS,
            namespace=self._cfg.namespace,
            label_selector=self._cfg.selector,
            keep_objects=False,
        )
        informer = self._informer

        async def consume() -> None:
            async for delta in informer.deltas():
                if delta.type == "synced":
                    self.synced.set()
                elif delta.obj is not None:
                    self.apply(delta.type, delta.obj)

        self._task = asyncio.create_task(consume(), name="kubernetes-endpoints")
        with contextlib.suppress(
            TimeoutError
        ):  # start serving with what the first list found, if it is quick
            async with asyncio.timeout(10):
                await self.synced.wait()

    async def stop(self) -> None:
        if self._informer is not None:
            self._informer.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._client is not None:
            await self._client.close()
            self._client = None
