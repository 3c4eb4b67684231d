"""The shared cluster-access layer: an async client that speaks plain dicts, resource names, an informer, and the
one parser of Kubernetes timestamps.

Every package that reads the cluster (recorder, restart detector, router endpoint discovery, capacity controller)
goes through these three names; none of them talks HTTP to the API server itself.
"""

from capstan.kube import resources
from capstan.kube._time import parse_timestamp
from capstan.kube.client import ApiError, KubeClient
from capstan.kube.informer import Delta, Informer, InformerStats, diff_states, object_key
from capstan.kube.resources import Resource, resource_for

__all__ = [
    "ApiError",
    "Delta",
    "Informer",
    "InformerStats",
    "KubeClient",
    "Resource",
    "diff_states",
    "object_key",
    "parse_timestamp",
    "resource_for",
    "resources",
]
