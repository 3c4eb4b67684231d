"""Which API resources Capstan talks about, named once: group, version, plural, kind, scope.

A :class:`Resource` is enough to build every list/watch/get path, so the informer and the recorder work the same for
built-in kinds and for custom resources given as ``group/version/kind`` in configuration.
"""

from __future__ import annotations

import dataclasses
import re

from capstan.errors import UserError


@dataclasses.dataclass(frozen=True, order=True)
class Resource:
    """One API resource. ``group`` is empty for the core group."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def name(self) -> str:
        """``plural.group`` as kubectl prints it (``pods``, ``deployments.apps``)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def base_path(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def collection_path(self, namespace: str | None = None) -> str:
        if self.namespaced and namespace:
            return f"{self.base_path()}/namespaces/{namespace}/{self.plural}"
        return f"{self.base_path()}/{self.plural}"

    def item_path(self, name: str, namespace: str | None = None, subresource: str | None = None) -> str:
        path = f"{self.collection_path(namespace)}/{name}"
        return f"{path}/{subresource}" if subresource else path


def _r(group: str, version: str, plural: str, kind: str, namespaced: bool = True) -> Resource:
    return Resource(group, version, plural, kind, namespaced)


PODS = _r("", "v1", "pods", "Pod")
NODES = _r("", "v1", "nodes", "Node", False)
NAMESPACES = _r("", "v1", "namespaces", "Namespace", False)
EVENTS = _r("", "v1", "events", "Event")
EVENTS_V1 = _r("events.k8s.io", "v1", "events", "Event")
CONFIGMAPS = _r("", "v1", "configmaps", "ConfigMap")
SECRETS = _r("", "v1", "secrets", "Secret")
SERVICES = _r("", "v1", "services", "Service")
SERVICE_ACCOUNTS = _r("", "v1", "serviceaccounts", "ServiceAccount")
PVCS = _r("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
PVS = _r("", "v1", "persistentvolumes", "PersistentVolume", False)
RESOURCE_QUOTAS = _r("", "v1", "resourcequotas", "ResourceQuota")
LIMIT_RANGES = _r("", "v1", "limitranges", "LimitRange")
DEPLOYMENTS = _r("apps", "v1", "deployments", "Deployment")
REPLICASETS = _r("apps", "v1", "replicasets", "ReplicaSet")
STATEFULSETS = _r("apps", "v1", "statefulsets", "StatefulSet")
DAEMONSETS = _r("apps", "v1", "daemonsets", "DaemonSet")
JOBS = _r("batch", "v1", "jobs", "Job")
CRONJOBS = _r("batch", "v1", "cronjobs", "CronJob")
ENDPOINTSLICES = _r("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice")
INGRESSES = _r("networking.k8s.io", "v1", "ingresses", "Ingress")
NETWORK_POLICIES = _r("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")
HPAS = _r("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler")
PDBS = _r("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
ROLES = _r("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDINGS = _r("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
CLUSTER_ROLES = _r("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False)
CLUSTER_ROLE_BINDINGS = _r(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False
)
LEASES = _r("coordination.k8s.io", "v1", "leases", "Lease")
KWOK_LOGS = _r("kwok.x-k8s.io", "v1alpha1", "logs", "Logs")
# Read by the diagnosis (capstan.diagnose.read_snapshot), not recorded by default:
STORAGE_CLASSES = _r("storage.k8s.io", "v1", "storageclasses", "StorageClass", False)
INGRESS_CLASSES = _r("networking.k8s.io", "v1", "ingressclasses", "IngressClass", False)
VALIDATING_WEBHOOKS = _r(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    False,
)
MUTATING_WEBHOOKS = _r(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    False,
)
HTTP_ROUTES = _r("gateway.networking.k8s.io", "v1", "httproutes", "HTTPRoute")

WELL_KNOWN: tuple[Resource, ...] = (
    PODS,
    NODES,
    NAMESPACES,
    EVENTS,
    EVENTS_V1,
    CONFIGMAPS,
    SECRETS,
    SERVICES,
    SERVICE_ACCOUNTS,
    PVCS,
    PVS,
    RESOURCE_QUOTAS,
    LIMIT_RANGES,
    DEPLOYMENTS,
    REPLICASETS,
    STATEFULSETS,
    DAEMONSETS,
    JOBS,
    CRONJOBS,
    ENDPOINTSLICES,
    INGRESSES,
    NETWORK_POLICIES,
    HPAS,
    PDBS,
    ROLES,
    ROLE_BINDINGS,
    CLUSTER_ROLES,
    CLUSTER_ROLE_BINDINGS,
    LEASES,
)

READ_ONLY: tuple[Resource, ...] = (
    STORAGE_CLASSES,
    INGRESS_CLASSES,
    VALIDATING_WEBHOOKS,
    MUTATING_WEBHOOKS,
    HTTP_ROUTES,
)
"""Kinds Capstan reads (the diagnosis) but does not record by default."""

# kubectl's short names for the kinds above
_SHORT_NAMES = {
    "po": "Pod", "no": "Node", "ns": "Namespace", "ev": "Event", "cm": "ConfigMap", "svc": "Service",
    "sa": "ServiceAccount", "pvc": "PersistentVolumeClaim", "pv": "PersistentVolume", "quota": "ResourceQuota",
    "limits": "LimitRange", "deploy": "Deployment", "rs": "ReplicaSet", "sts": "StatefulSet", "ds": "DaemonSet",
    "cj": "CronJob", "ing": "Ingress", "netpol": "NetworkPolicy", "hpa": "HorizontalPodAutoscaler",
    "pdb": "PodDisruptionBudget", "sc": "StorageClass",
}  # fmt: skip


def lookup_kind(text: str) -> Resource | None:
    """The resource ``text`` names as kubectl would take it: a kind in any case (``Deployment``, ``deployment``),
    its plural (``deployments``, ``deployments.apps``) or its short name (``deploy``); None when none does."""
    lowered = text.lower()
    lowered = _SHORT_NAMES.get(lowered, lowered).lower()
    for res in (*WELL_KNOWN, *READ_ONLY):
        if res is not EVENTS_V1 and lowered in (res.kind.lower(), res.plural, res.name):
            return res
    return None


_SPEC = re.compile(
    r"^(?:(?P<group>[a-z0-9.-]+)/)?(?P<version>v[0-9]+(?:(?:alpha|beta)[0-9]+)?)/(?P<kind>[A-Z][A-Za-z0-9]*)$"
)


def resource_for(spec: str, *, plural: str | None = None, namespaced: bool = True) -> Resource:
    """Resolve ``Kind``, ``version/Kind`` or ``group/version/Kind``.

    Well-known kinds resolve by kind (``Deployment``) or by ``group/version/Kind``; anything else (a custom resource)
    needs the full ``group/version/Kind`` and takes its plural from ``plural`` or the usual lower-case + 's'.
    """
    for res in WELL_KNOWN:
        if spec in (res.kind, f"{res.api_version}/{res.kind}", res.name):
            if spec == "Event" and res is EVENTS_V1:
                continue
            return res
    m = _SPEC.match(spec)
    if not m:
        raise UserError(f"unknown kind {spec!r}: use a built-in kind (e.g. Deployment) or group/version/Kind")
    kind = m["kind"]
    return Resource(m["group"] or "", m["version"], plural or kind.lower() + "s", kind, namespaced)
