"""The shared cluster-access layer: an async client that speaks plain dicts, resource names, an informer, and the
one reading of Kubernetes timestamps (:func:`parse_timestamp`, :func:`event_time`) and label selectors
(:func:`parse_label_selector`).

Entry points: :meth:`KubeClient.from_kubeconfig` and, in a pod, :meth:`KubeClient.in_cluster` (:func:`connector`
picks one; a :data:`KubeConnect` opens one for a component that owns its client) and an :class:`Informer` over a :class:`Resource`, which keeps its objects and yields :class:`Delta`
values. Every package that reads the cluster (recorder, restart detector, router endpoint discovery, diagnosis,
capacity controller) goes through these names, and singletons elect a leader on a Lease (:class:`LeaderElection`); none of them talks HTTP to the API server itself.
"""

from typing import TYPE_CHECKING

from capstan.kube import resources
from capstan.kube._labels import Requirement, parse_label_selector
from capstan.kube._time import event_time, parse_timestamp
from capstan.kube.resources import Resource, resource_for
from capstan.lazy import lazy_attributes

# The client and the informer pull in lightkube and the HTTP stack; the pure cores that only read timestamps or
# resource names (the restart report, the recorder's diff) never need them, so they are imported on first use.
_LAZY = {
    "ApiError": "capstan.kube.client",
    "KubeClient": "capstan.kube.client",
    "KubeConnect": "capstan.kube.client",
    "connector": "capstan.kube.client",
    "in_a_pod": "capstan.kube.client",
    "Delta": "capstan.kube.informer",
    "Informer": "capstan.kube.informer",
    "InformerStats": "capstan.kube.informer",
    "diff_states": "capstan.kube.informer",
    "object_key": "capstan.kube.informer",
    "LeaderElection": "capstan.kube.lease",
    "lease_verdict": "capstan.kube.lease",
    "scoped_lease_name": "capstan.kube.lease",
    "while_leading": "capstan.kube.lease",
}

__getattr__ = lazy_attributes("capstan.kube", _LAZY)

if TYPE_CHECKING:
    from capstan.kube.client import ApiError, KubeClient, KubeConnect, connector, in_a_pod
    from capstan.kube.informer import Delta, Informer, InformerStats, diff_states, object_key
    from capstan.kube.lease import LeaderElection, lease_verdict, scoped_lease_name, while_leading

__all__ = [
    "ApiError",
    "Delta",
    "Informer",
    "InformerStats",
    "KubeClient",
    "KubeConnect",
    "LeaderElection",
    "Requirement",
    "Resource",
    "connector",
    "diff_states",
    "event_time",
    "in_a_pod",
    "lease_verdict",
    "object_key",
    "parse_label_selector",
    "parse_timestamp",
    "resource_for",
    "resources",
    "scoped_lease_name",
    "while_leading",
]
