"""What the live controller tells people: Prometheus metrics (a registry of its own) and Kubernetes Events on the
pods and nodes it acts for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from capstan.capacity.live._cluster import ActionLog
from capstan.kube import KubeClient, resources
from capstan.kube.lease import micro_time
from capstan.redact import Redactor

COMPONENT = "capstan-capacity"
_DECISION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class ControllerMetrics:
    """``capstan_capacity_*``: decisions by scope and their latency, launches, placements, drains, headroom held,
    refused actions and failed API calls; with a gateway's demand signal, the rate read, the replicas announced
    and the failed scrapes; with ProvisioningRequests served, how many each outcome had on the last pass."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.decisions = Counter(
            "capstan_capacity_decisions_total",
            "Plans made, per scope (place, review, full)",
            ["scope"],
            registry=r,
        )
        self.skipped = Counter(
            "capstan_capacity_reviews_skipped_total",
            "Reviews skipped because nothing they read had changed",
            registry=r,
        )
        self.decision_seconds = Histogram(
            "capstan_capacity_decision_seconds",
            "Time to make one plan and record its actions (the snapshot included)",
            buckets=_DECISION_BUCKETS,
            registry=r,
        )
        self.launches = Counter(
            "capstan_capacity_launches_total",
            "Nodes launched, per type and purpose",
            ["type", "purpose"],
            registry=r,
        )
        self.placements = Counter(
            "capstan_capacity_placements_total", "Pods promised or nominated to a node", registry=r
        )
        self.drains = Counter("capstan_capacity_drains_total", "Nodes drained", registry=r)
        self.refused = Counter(
            "capstan_capacity_refused_total", "Plan actions the live cluster does not carry out", registry=r
        )
        self.failed_calls = Counter(
            "capstan_capacity_failed_calls_total", "API calls that failed (each is retried)", registry=r
        )
        self.headroom_nodes = Gauge(
            "capstan_capacity_headroom_nodes", "Nodes held empty for forecast demand", registry=r
        )
        self.pending_pods = Gauge(
            "capstan_capacity_pending_pods", "Pods gated for Capstan and not yet promised a node", registry=r
        )
        self.leader = Gauge(
            "capstan_capacity_leader", "1 while this instance holds the leader Lease", registry=r
        )
        self.gateway_rate = Gauge(
            "capstan_capacity_gateway_requests_per_second",
            "The gateway's request rate the demand signal read (NaN: none, too few or no recent scrapes)",
            registry=r,
        )
        self.gateway_replicas = Gauge(
            "capstan_capacity_gateway_announced_replicas",
            "Replicas the gateway's rate asks for beyond the Deployment's, announced as demand",
            registry=r,
        )
        self.provisioning_requests = Gauge(
            "capstan_capacity_provisioning_requests",
            "Open ProvisioningRequests served, by the last pass's outcome (provisioned, booked, waiting, "
            "not-found, failed, expired, no-template)",
            ["outcome"],
            registry=r,
        )
        self.gateway_scrape_errors = Counter(
            "capstan_capacity_gateway_scrape_errors_total",
            "Scrapes of the gateway's metrics that gave no request count (each retried with backoff)",
            registry=r,
        )


class EventRecorder:
    """``core/v1`` Events from ``capstan-capacity`` (reason and message redacted, as every output is); a failed
    write is counted by the caller and never stops the controller."""

    def __init__(self, client: KubeClient, redactor: Redactor | None = None, host: str = "") -> None:
        self.client = client
        self.redactor = redactor or Redactor()
        self.host = host
        self._seq = 0

    async def emit(
        self, obj: Mapping[str, Any], reason: str, message: str, now: float, *, warning: bool = False
    ) -> None:
        meta = obj.get("metadata") or {}
        kind = str(obj.get("kind") or ("Node" if not meta.get("namespace") else "Pod"))
        namespace = str(meta.get("namespace") or "default")
        self._seq += 1
        at = micro_time(now)[:19] + "Z"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta.get('name')}.capstan.{int(now * 1000)}.{self._seq}",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": "v1",
                "kind": kind,
                "name": meta.get("name"),
                "namespace": meta.get("namespace") or "",
                "uid": meta.get("uid") or "",
            },
            "reason": reason,
            "message": self.redactor.text(message),
            "type": "Warning" if warning else "Normal",
            "source": {"component": COMPONENT, "host": self.host},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.host or COMPONENT,
            "firstTimestamp": at,
            "lastTimestamp": at,
            "count": 1,
        }
        await self.client.create(resources.EVENTS, body, namespace)


def record_pass(
    metrics: ControllerMetrics,
    plans: Mapping[str, int],
    seen_plans: dict[str, int],
    log: ActionLog,
    counted: list[int],
    failed: int,
    pending: int,
    leading: bool,
) -> None:
    """Fold one pass into the metrics: new plans per scope (from the controller's counts, ``seen_plans`` being
    what was counted before), new actions (``counted``: launches, promises, drains and refusals counted before)."""
    for scope, n in plans.items():
        new = n - seen_plans.get(scope, 0)
        if new > 0:
            (metrics.skipped if scope == "skipped" else metrics.decisions.labels(scope)).inc(new)
        seen_plans[scope] = n
    for _node, type_name, purpose in log.launches[counted[0] :]:
        metrics.launches.labels(type_name, purpose).inc()
    metrics.placements.inc(len(log.promises) - counted[1])
    metrics.drains.inc(len(log.drains) - counted[2])
    metrics.refused.inc(len(log.refused) - counted[3])
    counted[:] = [len(log.launches), len(log.promises), len(log.drains), len(log.refused)]
    metrics.failed_calls.inc(failed)
    metrics.headroom_nodes.set(len(log.headroom))
    metrics.pending_pods.set(pending)
    metrics.leader.set(1 if leading else 0)
