"""The controller's loop on a live cluster: informers in, the same :class:`Controller` the simulator replays, and
the plan's actions out through a :class:`Provider`.

One pass: fold what the informers show into the cluster (:meth:`LiveCluster.observe`), tell the controller what
changed and which of its timers are due (it plans, and the cluster records the actions), carry the actions out,
and let the provider move its nodes on. Then wait for the next change, timer or tick. A pass whose calls fail
waits with backoff before the next one, and the plan is made again from what the cluster then shows; nothing of
the plan lives only in memory that a restart would need (promises are pod annotations, launches are Nodes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from capstan.aio import wait_any
from capstan.backoff import Backoff
from capstan.capacity.controller import Controller
from capstan.capacity.live._cluster import ActionLog, EventSink, LiveCluster, Provider
from capstan.capacity.live._gateway import GatewayDemand, follow_gateway
from capstan.capacity.live._provreq import (
    OUTCOMES,
    PODTEMPLATES,
    PROVISIONING_REQUESTS,
    ProvisioningRequests,
)
from capstan.capacity.live._queue import SuspendedJobs
from capstan.capacity.live._report import ControllerMetrics, record_pass
from capstan.capacity.model import NodeType
from capstan.kube import Informer, KubeClient, LeaderElection, resources, while_leading

log = logging.getLogger(__name__)


@dataclass
class RunStats:
    """What one run of the loop did (the dry run's plans are in :attr:`LiveCluster.log`)."""

    passes: int = 0
    decisions: int = 0
    decision_s: deque[float] = field(default_factory=lambda: deque(maxlen=1000))
    """Seconds each decision (a plan and recording its actions) took, the last 1,000."""
    failures: list[str] = field(default_factory=list)
    provider_changes: int = 0
    actions: ActionLog = field(default_factory=ActionLog)
    """Every action the controller decided (what a dry run would have done)."""
    led: bool = False
    """This run held the leader Lease (always True without leader election)."""
    lost_leadership: bool = False
    """It stopped because another candidate took the Lease or it could not renew it."""
    gateway_errors: int = 0
    """Scrapes of the gateway's metrics that gave no request count (each retried with backoff)."""


async def run_controller(
    client: KubeClient,
    provider: Provider,
    controller: Controller,
    node_types: tuple[NodeType, ...],
    *,
    stop: asyncio.Event,
    namespace: str | None = None,
    dry_run: bool = False,
    tick_s: float = 1.0,
    clock: Callable[[], float] = time.time,
    on_pass: Callable[[LiveCluster, RunStats], None] | None = None,
    election: LeaderElection | None = None,
    metrics: ControllerMetrics | None = None,
    events: EventSink | None = None,
    placeholder_namespace: str | None = None,
    queue: SuspendedJobs | None = None,
    gateway: tuple[str, GatewayDemand] | None = None,
    provisioning: ProvisioningRequests | None = None,
) -> RunStats:
    """Run until ``stop`` is set; ``namespace`` limits the pods Capstan places (nodes are cluster-wide). With
    ``queue`` (the announcements the controller's :class:`~capstan.capacity.QueuedDemand` reads) a Job informer
    in ``namespace`` feeds it the suspended Jobs. With ``gateway`` (a gateway's metrics URL and the
    :class:`GatewayDemand` the controller's forecast reads) the gateway's request counter is scraped into it and
    a Deployment informer in its namespace feeds it the Deployment (a failing scrape is retried with backoff and
    counted in :attr:`RunStats.gateway_errors`; it never stops the loop). With
    ``election`` the loop acts only while it holds the Lease: it waits as a candidate, and stops (with
    :attr:`RunStats.lost_leadership`) the moment leadership is lost; a clean stop releases the Lease. With
    ``provisioning`` (announcements the controller's forecast also reads) the ProvisioningRequests and
    PodTemplates in ``namespace`` are read, and after each pass the requests' conditions that changed are
    written (logged only, in a dry run)."""
    await provider.check()
    if provisioning is not None:
        await provisioning.check(client)

    def acting_until(until: asyncio.Event) -> Awaitable[RunStats]:
        return _run(client, provider, controller, node_types, until, namespace, dry_run, tick_s, clock, on_pass,
                    metrics, events, placeholder_namespace, queue, gateway, provisioning)  # fmt: skip

    if election is None:
        return await acting_until(stop)
    stats = await while_leading(election, stop, acting_until)
    if stats is None:
        return RunStats(lost_leadership=election.lost.is_set())
    stats.lost_leadership = election.lost.is_set()
    return stats


async def _run(
    client: KubeClient,
    provider: Provider,
    controller: Controller,
    node_types: tuple[NodeType, ...],
    stop: asyncio.Event,
    namespace: str | None,
    dry_run: bool,
    tick_s: float,
    clock: Callable[[], float],
    on_pass: Callable[[LiveCluster, RunStats], None] | None,
    metrics: ControllerMetrics | None,
    events: EventSink | None,
    placeholder_namespace: str | None,
    queue: SuspendedJobs | None,
    gateway: tuple[str, GatewayDemand] | None,
    provisioning: ProvisioningRequests | None,
) -> RunStats:
    nodes_inf = Informer(client, resources.NODES)
    pods_inf = Informer(client, resources.PODS)
    informers = {"nodes": nodes_inf, "pods": pods_inf}
    if queue is not None:
        informers["jobs"] = Informer(client, resources.JOBS, namespace=namespace)
        queue.follow(informers["jobs"].state)
    if provisioning is not None:
        informers["provisioningrequests"] = Informer(client, PROVISIONING_REQUESTS, namespace=namespace)
        informers["podtemplates"] = Informer(client, PODTEMPLATES, namespace=namespace)
        provisioning.follow(
            informers["provisioningrequests"].state, informers["podtemplates"].state, pods_inf.state
        )
    changed = asyncio.Event()
    synced = {name: asyncio.Event() for name in informers}
    if gateway is not None:
        # not waited for: until the Deployment is read (a watch refused, a namespace not there yet, retried with
        # backoff by the informer) the gateway's rate announces nothing, and the controller places pods meanwhile
        informers["deployments"] = Informer(client, resources.DEPLOYMENTS, namespace=gateway[1].namespace)
        gateway[1].follow(informers["deployments"].state)

    announcing = asyncio.Event()  # an informer of announced demand (Jobs, ProvisioningRequests) saw a change

    async def follow(name: str, inf: Informer) -> None:
        async for delta in inf.deltas():
            if delta.type == "synced" and name in synced:
                synced[name].set()
            if name in _ANNOUNCING:
                announcing.set()
            changed.set()

    tasks = [asyncio.create_task(follow(name, inf)) for name, inf in informers.items()]
    cluster = LiveCluster(
        node_types,
        nodes_inf.state,
        pods_inf.state,
        clock=clock,
        namespace=namespace,
        placeholder_namespace=placeholder_namespace,
    )
    stats = RunStats(actions=cluster.log, led=True)
    missing_said = False  # the gateway's Deployment was said to be missing (once, until it is found)
    scraping = asyncio.Event()  # set when the loop ends, so the scraper ends with it
    if gateway is not None:

        def scrape_failed(why: str) -> None:
            stats.gateway_errors += 1
            if metrics is not None:
                metrics.gateway_scrape_errors.inc()

        tasks.append(
            asyncio.create_task(follow_gateway(*gateway, scraping, clock=clock, on_error=scrape_failed))
        )
    said: dict[str, str] = {}  # ProvisioningRequest → the outcome last logged
    announced: tuple[tuple[str, ...], ...] = ((), ())  # the pods announced when last told to the controller
    seen_plans: dict[str, int] = {}
    counted = [0, 0, 0, 0]
    timed = 0
    backoff = Backoff(base=0.5, cap=30.0)
    try:
        for ev in synced.values():
            waiter = asyncio.create_task(ev.wait())
            stopper = asyncio.create_task(stop.wait())
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            stopper.cancel()
            if stop.is_set():
                return stats
        controller.start(cluster)
        while not stop.is_set():
            stats.passes += 1
            try:
                in_flight = await provider.in_flight()
            except Exception as exc:
                # without the provider's launches a plan could launch them again: no plan until they are read
                stats.failures.append(f"{provider.name} provider: {exc}")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=backoff.next())
                continue
            cluster.observe(in_flight)
            now = clock()
            if changed.is_set():
                changed.clear()
                controller.on_change(cluster, now)
            if announcing.is_set():
                announcing.clear()
                heard = _announced_names(queue, provisioning, now)
                if heard != announced:
                    announced = heard
                    controller.on_announced(cluster, now)
            for tag in cluster.due(now):
                started = time.perf_counter()
                before = sum(controller.plans.values())
                controller.on_wake(cluster, now, tag)
                if sum(controller.plans.values()) != before:
                    stats.decisions += 1
                    stats.decision_s.append(time.perf_counter() - started)
            _log_new_actions(cluster, dry_run)
            failed = await cluster.carry_out(
                client, provider, dry_run=dry_run, events=None if dry_run else events
            )
            if provisioning is not None:
                failed.extend(await _serve_requests(client, cluster, provisioning, dry_run, said))
                if metrics is not None:
                    for outcome in OUTCOMES:
                        metrics.provisioning_requests.labels(outcome).set(
                            sum(1 for o in provisioning.outcomes.values() if o == outcome)
                        )
            if not dry_run:
                try:
                    stats.provider_changes += await provider.advance(
                        list(cluster.nodes.values()), cluster.busy_nodes(), clock()
                    )
                except Exception as exc:
                    failed.append(f"{provider.name} provider: {exc}")
            if metrics is not None:
                fresh = stats.decisions - timed
                for seconds in list(stats.decision_s)[-fresh:] if fresh else ():
                    metrics.decision_seconds.observe(seconds)
                timed = stats.decisions
                pending = cluster.pending_count()
                record_pass(
                    metrics, controller.plans, seen_plans, cluster.log, counted, len(failed), pending, True
                )
                if gateway is not None:
                    now = clock()
                    rate = gateway[1].rate(now)
                    metrics.gateway_rate.set(math.nan if rate is None else rate)
                    metrics.gateway_replicas.set(len(gateway[1].announced(now)[0]))
            if gateway is not None and gateway[1].missing != missing_said:
                missing_said = gateway[1].missing
                if missing_said:
                    log.warning(
                        "the gateway's rate asks for replicas of a Deployment that is not there; none announced",
                        extra={"deployment": gateway[1].key},
                    )
            if on_pass is not None:
                on_pass(cluster, stats)
            wait = tick_s
            if failed:
                stats.failures.extend(failed)
                del stats.failures[:-100]
                wait = backoff.next()
                for line in failed:
                    log.warning(
                        "capacity action failed; retrying", extra={"error": line, "retry_in": round(wait, 2)}
                    )
            else:
                backoff.reset()
            nxt = cluster.next_wake()
            if nxt is not None:
                wait = min(wait, max(0.0, nxt - clock()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wait_any(changed, stop), timeout=wait)
    finally:
        scraping.set()
        for inf in informers.values():
            inf.stop()
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
    return stats


_ANNOUNCING = frozenset({"jobs", "provisioningrequests", "podtemplates"})
"""The informers whose changes change the demand announced ahead."""


def _announced_names(
    queue: SuspendedJobs | None, provisioning: ProvisioningRequests | None, now: float
) -> tuple[tuple[str, ...], ...]:
    return tuple(
        tuple(p.name for p in source.announced(now)[0]) if source is not None else ()
        for source in (queue, provisioning)
    )


async def _serve_requests(
    client: KubeClient,
    cluster: LiveCluster,
    provisioning: ProvisioningRequests,
    dry_run: bool,
    said: dict[str, str],
) -> list[str]:
    """Review the ProvisioningRequests against the cluster as this pass left it (its launches included) and write
    the conditions that changed; one log line when a request's outcome changes (``dry run:`` when not written)."""
    if not provisioning.any_open():  # no snapshot to take: at 5,000 nodes even an unchanged one costs ms
        provisioning.outcomes = {}
        said.clear()
        return []
    updates = provisioning.updates(cluster.snapshot(peek=True))
    prefix = "dry run: " if dry_run else ""
    for ns, name, _, _, verdict in updates:
        key = f"{ns}/{name}"
        if said.get(key) != verdict.outcome:
            said[key] = verdict.outcome
            log.info(f"{prefix}ProvisioningRequest {key}: {verdict.outcome} ({verdict.message})")
    for key in [k for k in said if k not in provisioning.outcomes]:  # bounded: only requests still open
        del said[key]
    return [] if dry_run else await provisioning.write(client, updates)


def _log_new_actions(cluster: LiveCluster, dry_run: bool) -> None:
    """One log line per action decided since the last pass (``dry run:`` in front when nothing is done)."""
    book = cluster.log
    launches, promises, drains = book.reported
    prefix = "dry run: " if dry_run else ""
    for node, type_name, purpose in book.launches[launches:]:
        log.info(f"{prefix}launch {type_name} as {node} for {purpose}")
    for pod, node in book.promises[promises:]:
        log.info(f"{prefix}promise {pod} to {node}")
    for node in book.drains[drains:]:
        log.info(f"{prefix}drain {node}")
    book.reported = (len(book.launches), len(book.promises), len(book.drains))
