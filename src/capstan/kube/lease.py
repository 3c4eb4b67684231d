"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection package does it.

A candidate takes the Lease when nobody holds it or its holder has not renewed it within ``leaseDurationSeconds``,
then renews it every ``retry_period_s``. A leader that cannot renew within ``renew_deadline_s`` (the API server
unreachable, or another candidate took the Lease) has lost it and must stop acting at once: :attr:`lost` is set,
and the component exits so its Deployment restarts it as a candidate. On a clean stop the leader gives the Lease
up (client-go's ``ReleaseOnCancel``), so the next candidate takes over without waiting for it to expire; after a
kill -9 the next one takes over once the Lease has expired.

:func:`lease_verdict` is the decision itself, a pure function of the Lease and the clock. Every write carries
the ``resourceVersion`` it read, so two candidates racing for one Lease cannot both win: the API server answers
the second with 409.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from capstan.aio import wait_any
from capstan.kube._time import parse_timestamp
from capstan.kube.client import ApiError, KubeClient
from capstan.kube.resources import LEASES

log = logging.getLogger(__name__)

Verdict = Literal["take", "renew", "wait"]
T = TypeVar("T")


def scoped_lease_name(component: str, source: str, scope: Iterable[str]) -> str:
    """``capstan-<component>-<source>-<8 hex digits>``, the digits a hash of ``scope`` (what the component covers:
    kinds, namespaces, targets, in any order). Replicas of one configuration get one Lease; shards of one source
    (other namespaces, kinds or targets) get one each. ``source`` is made a DNS label (lower case, ``-`` for
    anything else), so the name is always a valid Lease name."""
    digest = hashlib.sha1("\n".join(sorted(scope)).encode(), usedforsecurity=False).hexdigest()[:8]
    label = re.sub(r"[^a-z0-9-]+", "-", source.lower()).strip("-")[:200] or "default"
    return f"capstan-{component}-{label}-{digest}"


def micro_time(at: float) -> str:
    """``metav1.MicroTime``: RFC 3339 with microseconds, UTC."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_verdict(
    spec: Mapping[str, Any] | None, identity: str, now: float, default_duration_s: float
) -> Verdict:
    """What ``identity`` may do with a Lease whose spec is ``spec`` (None: no Lease yet) at ``now``: ``renew`` it
    (it holds it), ``take`` it (free, released or expired) or ``wait``."""
    if spec is None:
        return "take"
    holder = str(spec.get("holderIdentity") or "")
    if holder == identity:
        return "renew"
    if not holder:
        return "take"
    renewed = parse_timestamp(spec.get("renewTime")) or parse_timestamp(spec.get("acquireTime")) or 0.0
    duration = float(spec.get("leaseDurationSeconds") or default_duration_s)
    return "take" if now > renewed + duration else "wait"


class LeaderElection:
    """One candidate for the Lease ``namespace/name``; ``identity`` names it (pod name, or host and pid)."""

    def __init__(
        self,
        client: KubeClient,
        name: str,
        namespace: str,
        identity: str,
        *,
        lease_duration_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not retry_period_s < renew_deadline_s < lease_duration_s:
            raise ValueError("leader election needs retry period < renew deadline < lease duration")
        self.client = client
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self.clock = clock
        self.leading = asyncio.Event()
        self.lost = asyncio.Event()
        self.transitions = 0
        self._last_renew = 0.0

    @classmethod
    def for_this_process(
        cls, client: KubeClient, name: str, namespace: str, *, lease_duration_s: float = 15.0
    ) -> LeaderElection:
        """A candidate named by ``POD_NAME`` (the Downward API) or ``<host>_<pid>``, with client-go's default
        proportions of ``lease_duration_s`` (15 s: renew deadline 10 s, retry every 2 s)."""
        identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}_{os.getpid()}"
        return cls(
            client,
            name,
            namespace,
            identity,
            lease_duration_s=lease_duration_s,
            renew_deadline_s=lease_duration_s * 2 / 3,
            retry_period_s=lease_duration_s * 2 / 15,
        )

    async def _try(self) -> bool:
        """One attempt to take or renew the Lease; True when this candidate holds it afterwards."""
        now = self.clock()
        try:
            lease: dict[str, Any] | None = await self.client.get(LEASES, self.name, self.namespace)
        except ApiError as exc:
            if not exc.not_found:
                raise
            lease = None
        spec = (lease or {}).get("spec")
        verdict = lease_verdict(
            spec if lease is not None else None, self.identity, now, self.lease_duration_s
        )
        if verdict == "wait":
            return False
        new_spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration_s),
            "renewTime": micro_time(now),
        }
        if lease is None:
            new_spec |= {"acquireTime": micro_time(now), "leaseTransitions": 0}
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": new_spec,
            }
            await self.client.create(LEASES, body, self.namespace)
        else:
            old = dict(spec or {})
            if verdict == "take":
                new_spec |= {
                    "acquireTime": micro_time(now),
                    "leaseTransitions": int(old.get("leaseTransitions") or 0) + 1,
                }
            lease["spec"] = {**old, **new_spec}
            await self.client.replace(LEASES, lease, self.namespace)  # carries the resourceVersion read
        if verdict == "take":
            self.transitions += 1
        self._last_renew = now
        return True

    async def _attempt(self) -> bool:
        try:
            return await self._try()
        except ApiError as exc:
            if exc.conflict or exc.status == 409:  # another candidate wrote first
                return False
            log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            return False
        except Exception as exc:  # any failure is a failed attempt; losing is decided by time
            log.warning("lease %s/%s: %s: %s", self.namespace, self.name, type(exc).__name__, exc)
            return False

    async def run(self, stop: asyncio.Event) -> None:
        """Campaign until leading, then renew until ``stop`` (the Lease is released) or until leadership is lost
        (:attr:`lost` set). Bounded by ``stop`` and by losing: it never leads twice."""
        while not stop.is_set():
            if await self._attempt():
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.retry_period_s)
        else:
            return
        log.info("lease %s/%s: %s is the leader", self.namespace, self.name, self.identity)
        self.leading.set()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.retry_period_s)
            if stop.is_set():
                break
            if await self._attempt():
                continue
            if self.clock() - self._last_renew > self.renew_deadline_s:
                log.warning("lease %s/%s: leadership lost by %s", self.namespace, self.name, self.identity)
                self.leading.clear()
                self.lost.set()
                return
        await self._release()

    async def _release(self) -> None:
        """Give the Lease up (holder cleared) so the next candidate need not wait for it to expire."""
        self.leading.clear()
        with contextlib.suppress(ApiError, OSError, TimeoutError):
            lease = await self.client.get(LEASES, self.name, self.namespace)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            lease["spec"] = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1}
            await self.client.replace(LEASES, lease, self.namespace)


async def while_leading(
    election: LeaderElection, stop: asyncio.Event, work: Callable[[asyncio.Event], Awaitable[T]]
) -> T | None:
    """Campaign for the Lease; once it is held, run ``work(until)`` and return what it returns. ``until`` is set
    when ``stop`` is, or the moment leadership is lost (:attr:`LeaderElection.lost`): ``work`` must then stop
    acting at once. None: stopped, or lost, before this candidate ever led. On a clean stop the Lease is
    released."""
    campaign_stop = asyncio.Event()
    campaign = asyncio.create_task(election.run(campaign_stop))
    until = asyncio.Event()

    async def watch() -> None:
        await wait_any(stop, election.lost)
        until.set()

    watcher = asyncio.create_task(watch())
    try:
        await wait_any(election.leading, until)
        if until.is_set() or not election.leading.is_set():
            return None
        return await work(until)
    finally:
        campaign_stop.set()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await campaign
