"""Capstan's capacity controller on a live cluster: the same :class:`capstan.capacity.Controller` the simulator
replays, over the Node and Pod informers, acting through a :class:`Provider`.

Entry points: :func:`run_controller` (the loop; until its ``stop`` event), :class:`LiveCluster` (the informers'
view as a :class:`capstan.capacity.Cluster`), :class:`KwokProvider` (nodes for the sandbox), :class:`KarpenterProvider` (NodeClaims: Capstan decides, Karpenter launches), :func:`live_config`
(the planner's settings for a live cluster), :class:`ControllerMetrics` and :class:`EventRecorder` (what it
tells people), :class:`SuspendedJobs` (suspended Jobs as demand announced ahead, for ``QueuedDemand``),
:class:`ProvisioningRequests` and :func:`review_requests` (ProvisioningRequests served: their pods announced, their
conditions written), :class:`GatewayDemand` and :func:`follow_gateway` (an inference gateway's request rate as the replicas it will need, announced ahead the same way), :func:`replay_pods` (a workload's pods created and deleted on a cluster, time-compressed, and how
long each waited) and :func:`replay_under_controller` (the same, placed by the controller), and the names pods and nodes carry (:data:`GATE`,
:data:`PROMISED_ANNOTATION`, :data:`PURPOSE_LABEL`, the taints) and what makes a pod a service replica
(:func:`service_of`, :data:`SERVICE_LABEL`). docs/capacity.md, "Live", says how pods are
handed to Capstan and what each decision does in Kubernetes.
"""

from dataclasses import replace

from capstan.capacity.live._cluster import (
    FORGET_AFTER_S,
    NODE_PREFIX,
    ActionLog,
    LiveCluster,
    Provider,
    other_autoscalers,
)
from capstan.capacity.live._gateway import (
    MAX_GATEWAY_REPLICAS,
    RESPONSES_METRIC,
    GatewayDemand,
    GatewayError,
    follow_gateway,
    requests_total,
)
from capstan.capacity.live._karpenter import NODECLAIMS, KarpenterProvider
from capstan.capacity.live._kwok import KwokProvider
from capstan.capacity.live._loop import RunStats, run_controller
from capstan.capacity.live._objects import (
    BOOTING_TAINT,
    DRAINING_TAINT,
    GATE,
    PROMISED_ANNOTATION,
    PURPOSE_LABEL,
    SERVICE_LABEL,
    pod_from_object,
    service_of,
)
from capstan.capacity.live._provreq import (
    BEST_EFFORT_ATOMIC,
    BOOKING_S,
    CHECK_CAPACITY,
    CONSUME_ANNOTATION,
    PODTEMPLATES,
    PROVISIONING_REQUESTS,
    ProvisioningRequests,
    RequestView,
    Verdict,
    request_view,
)
from capstan.capacity.live._provreq import review as review_requests
from capstan.capacity.live._queue import MAX_PODS_PER_JOB, SuspendedJobs, job_pods
from capstan.capacity.live._replay import (
    POOL_LABEL,
    ControlledReplay,
    ReplayResult,
    ensure_namespace,
    follow_scale_down,
    pod_manifest,
    replay_pods,
    replay_under_controller,
)
from capstan.capacity.live._report import ControllerMetrics, EventRecorder
from capstan.capacity.planner import PlannerConfig

__all__ = [
    "BEST_EFFORT_ATOMIC",
    "BOOKING_S",
    "BOOTING_TAINT",
    "CHECK_CAPACITY",
    "CONSUME_ANNOTATION",
    "DRAINING_TAINT",
    "FORGET_AFTER_S",
    "GATE",
    "MAX_GATEWAY_REPLICAS",
    "MAX_PODS_PER_JOB",
    "NODECLAIMS",
    "NODE_PREFIX",
    "PODTEMPLATES",
    "POOL_LABEL",
    "PROMISED_ANNOTATION",
    "PROVISIONING_REQUESTS",
    "PURPOSE_LABEL",
    "RESPONSES_METRIC",
    "SERVICE_LABEL",
    "ActionLog",
    "ControlledReplay",
    "ControllerMetrics",
    "EventRecorder",
    "GatewayDemand",
    "GatewayError",
    "KarpenterProvider",
    "KwokProvider",
    "LiveCluster",
    "Provider",
    "ProvisioningRequests",
    "ReplayResult",
    "RequestView",
    "RunStats",
    "SuspendedJobs",
    "Verdict",
    "ensure_namespace",
    "follow_gateway",
    "follow_scale_down",
    "job_pods",
    "live_config",
    "other_autoscalers",
    "pod_from_object",
    "pod_manifest",
    "replay_pods",
    "replay_under_controller",
    "request_view",
    "requests_total",
    "review_requests",
    "run_controller",
    "service_of",
]


def live_config(config: PlannerConfig | None = None) -> PlannerConfig:
    """``config`` (default: the planner's defaults) with what the live cluster does not carry out yet turned
    off: moving running pods (repacks, room moves)."""
    return replace(config or PlannerConfig(), consolidate=False, make_room_moves=0)
