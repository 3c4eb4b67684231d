"""Kubernetes objects cut to what an agent reasons with, at three levels (after Radar's ``pkg/ai/context``).

- ``summary``: identity and health in one small dict: a pod's phase, ready containers, restarts, node, images and
  waiting/terminated reasons; a workload's desired/ready/updated replicas; a node's Ready and pressure conditions
  and GPU allocatable; a Service's type, ports and selector; a claim's phase and class. List and search rows.
- ``compact``: the object pruned for root-cause analysis: metadata noise gone (resourceVersion, uid, generation,
  managedFields, selfLink, annotations but a few), owner references as kind/name, a pod spec's defaults gone
  (dnsPolicy, schedulerName, grace period, securityContext, default tolerations), probes as one line, volumes as
  name and source, env and envFrom as names and the objects they reference, mounts as ``name:path``; status
  without podIP/hostIP/qosClass/observedGeneration and with only the conditions that are not healthy (plus
  Ready), each with reason and message.
- ``detail``: the whole spec and status minus noise (managedFields, resourceVersion, uid, the last-applied
  annotation, fields at their defaults, a node's image list).

A Secret is its type and key names at every level (its values were blanked by the redactor already; none is ever
shown, not even as a hash); a ConfigMap is its key names except at ``detail``. Pure and deterministic: the same
object gives the same dict, keys in a fixed order.

Measured on the typical pod of ``tests/unit/mcp/test_minify.py`` (one container with env, probes, mounts,
resources; managedFields; the default tolerations; the status a kubelet writes), in ``cl100k_base`` tokens of
compact JSON: raw 1,368; ``detail`` 953 (−30 %); ``compact`` 515 (−62 %); ``summary`` 75 (−95 %). The test
asserts summary < compact < detail < raw, compact at most 45 % of raw and summary at most 100 tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal

Level = Literal["summary", "compact", "detail"]

_METADATA_NOISE: Final = frozenset(
    {"resourceVersion", "uid", "generation", "managedFields", "selfLink", "generateName"}
)
LAST_APPLIED: Final = "kubectl.kubernetes.io/last-applied-configuration"
KEPT_ANNOTATIONS: Final = (
    "deployment.kubernetes.io/revision",
    "kubernetes.io/change-cause",
    "kubectl.kubernetes.io/restartedAt",
    "cluster-autoscaler.kubernetes.io/safe-to-evict",
    "karpenter.sh/do-not-disrupt",
)
"""The annotations ``compact`` keeps (they explain a rollout or an eviction); the rest are dropped."""
_WORKLOADS: Final = ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet")
_POD_SPEC_DEFAULTS: Final[Mapping[str, Any]] = {
    "dnsPolicy": "ClusterFirst",
    "schedulerName": "default-scheduler",
    "terminationGracePeriodSeconds": 30,
    "restartPolicy": "Always",
    "enableServiceLinks": True,
    "preemptionPolicy": "PreemptLowerPriority",
    "priority": 0,
    "securityContext": {},
}
_CONTAINER_DEFAULTS: Final[Mapping[str, Any]] = {
    "terminationMessagePath": "/dev/termination-log",
    "terminationMessagePolicy": "File",
    "imagePullPolicy": "IfNotPresent",
    "resources": {},
}
_SERVICE_DEFAULTS: Final[Mapping[str, Any]] = {
    "sessionAffinity": "None",
    "internalTrafficPolicy": "Cluster",
    "ipFamilyPolicy": "SingleStack",
}
_DEFAULT_TOLERATION_KEYS: Final = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
_COMPACT_POD_SPEC_DROP: Final = frozenset(
    {
        "dnsPolicy",
        "schedulerName",
        "terminationGracePeriodSeconds",
        "securityContext",
        "enableServiceLinks",
        "preemptionPolicy",
        "priority",
        "serviceAccount",
        "restartPolicy",
        "hostname",
        "subdomain",
        "dnsConfig",
        "automountServiceAccountToken",
    }
)
_COMPACT_CONTAINER_DROP: Final = frozenset(
    {
        "terminationMessagePath",
        "terminationMessagePolicy",
        "imagePullPolicy",
        "securityContext",
        "stdin",
        "tty",
    }
)
_COMPACT_STATUS_DROP: Final = frozenset(
    {"podIP", "podIPs", "hostIP", "hostIPs", "qosClass", "observedGeneration", "collisionCount"}
)
_CONTAINER_STATUS_DROP: Final = frozenset(
    {"imageID", "containerID", "allocatedResources", "volumeMounts", "user", "resources", "started"}
)
_PRESSURE: Final = ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")
_PROBES: Final = ("startupProbe", "readinessProbe", "livenessProbe")
_VOLUME_SOURCES: Final[Mapping[str, str]] = {
    "persistentVolumeClaim": "claimName",
    "configMap": "name",
    "secret": "secretName",
    "hostPath": "path",
    "nfs": "path",
}


def _m(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _l(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list) else ()


def identity(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``kind``, ``namespace`` (when namespaced) and ``name``."""
    meta = _m(obj.get("metadata"))
    out: dict[str, Any] = {"kind": str(obj.get("kind") or "")}
    if meta.get("namespace"):
        out["namespace"] = str(meta["namespace"])
    out["name"] = str(meta.get("name") or "")
    return out


def minify(obj: Mapping[str, Any], level: Level) -> dict[str, Any]:
    """``obj`` at ``level`` (see the module docstring)."""
    kind = str(obj.get("kind") or "")
    if kind == "Secret":
        return _secret(obj, level)
    if level == "summary":
        return {**identity(obj), **_SUMMARIES.get(kind, _generic_summary)(obj)}
    if level == "compact":
        return _compact(obj)
    return _detail(obj)


def health(obj: Mapping[str, Any]) -> str:
    """One line saying how ``obj`` is (``Running 1/2 ready, 4 restarts, CrashLoopBackOff``), from its summary."""
    summary = minify(obj, "summary")
    parts = [f"{k}={_short(v)}" for k, v in summary.items() if k not in ("kind", "namespace", "name")]
    return ", ".join(parts)


def _short(value: Any) -> str:
    if isinstance(value, list):
        return "[" + " ".join(_short(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + " ".join(f"{k}:{_short(v)}" for k, v in value.items()) + "}"
    return str(value)


# ---- summary -----------------------------------------------------------------------------------------------------
def pod_reasons(pod: Mapping[str, Any]) -> list[str]:
    """The waiting and terminated reasons of a pod's containers (current state, then last state), deduplicated."""
    status = _m(pod.get("status"))
    out: list[str] = []
    for cs in (*_l(status.get("initContainerStatuses")), *_l(status.get("containerStatuses"))):
        for field_name in ("state", "lastState"):
            state = _m(_m(cs).get(field_name))
            for phase in ("waiting", "terminated"):
                reason = _m(state.get(phase)).get("reason")
                if (
                    reason
                    and str(reason) not in out
                    and not (field_name == "state" and reason == "Completed")
                ):
                    out.append(str(reason))
    reason = status.get("reason")
    if reason and str(reason) not in out:
        out.insert(0, str(reason))
    return out


def _pod_summary(pod: Mapping[str, Any]) -> dict[str, Any]:
    spec, status = _m(pod.get("spec")), _m(pod.get("status"))
    statuses = [_m(cs) for cs in _l(status.get("containerStatuses"))]
    containers = [_m(c) for c in _l(spec.get("containers"))]
    out: dict[str, Any] = {"phase": str(status.get("phase") or "Unknown")}
    out["ready"] = f"{sum(1 for cs in statuses if cs.get('ready'))}/{len(containers) or len(statuses)}"
    restarts = sum(int(cs.get("restartCount") or 0) for cs in statuses)
    if restarts:
        out["restarts"] = restarts
    reasons = pod_reasons(pod)
    if reasons:
        out["reasons"] = reasons
    if spec.get("nodeName"):
        out["node"] = str(spec["nodeName"])
    out["images"] = [str(c.get("image") or "") for c in containers]
    if _m(pod.get("metadata")).get("deletionTimestamp"):
        out["terminating"] = True
    return out


def _workload_summary(obj: Mapping[str, Any]) -> dict[str, Any]:
    kind, spec, status = str(obj.get("kind")), _m(obj.get("spec")), _m(obj.get("status"))
    out: dict[str, Any]
    if kind == "DaemonSet":
        out = {
            "desired": int(status.get("desiredNumberScheduled") or 0),
            "ready": int(status.get("numberReady") or 0),
            "updated": int(status.get("updatedNumberScheduled") or 0),
        }
        if status.get("numberUnavailable"):
            out["unavailable"] = int(status["numberUnavailable"])
    else:
        desired = spec.get("replicas")
        out = {
            "desired": 1 if desired is None else int(desired),
            "ready": int(status.get("readyReplicas") or 0),
        }
        if kind != "ReplicaSet":
            out["updated"] = int(status.get("updatedReplicas") or 0)
    bad = [c for c in _unhealthy_conditions(obj) if c.get("type") not in ("Ready",)]
    if bad:
        out["conditions"] = [_condition_text(c) for c in bad]
    template = _m(_m(spec.get("template")).get("spec"))
    out["images"] = [str(_m(c).get("image") or "") for c in _l(template.get("containers"))]
    return out


def _job_summary(obj: Mapping[str, Any]) -> dict[str, Any]:
    spec, status = _m(obj.get("spec")), _m(obj.get("status"))
    out: dict[str, Any] = {
        "completions": int(spec.get("completions") or 1),
        "active": int(status.get("active") or 0),
        "succeeded": int(status.get("succeeded") or 0),
        "failed": int(status.get("failed") or 0),
    }
    bad = _unhealthy_conditions(obj)
    if bad:
        out["conditions"] = [_condition_text(c) for c in bad]
    return out


def _cronjob_summary(obj: Mapping[str, Any]) -> dict[str, Any]:
    spec, status = _m(obj.get("spec")), _m(obj.get("status"))
    out: dict[str, Any] = {
        "schedule": str(spec.get("schedule") or ""),
        "active": len(_l(status.get("active"))),
    }
    if spec.get("suspend"):
        out["suspended"] = True
    if status.get("lastScheduleTime"):
        out["last_schedule"] = str(status["lastScheduleTime"])
    return out


def gpu_allocatable(node: Mapping[str, Any]) -> dict[str, str]:
    alloc = _m(_m(node.get("status")).get("allocatable"))
    return {str(k): str(v) for k, v in sorted(alloc.items()) if str(k).endswith("/gpu") or "/mig-" in str(k)}


def _node_summary(node: Mapping[str, Any]) -> dict[str, Any]:
    status, spec = _m(node.get("status")), _m(node.get("spec"))
    conditions = {str(_m(c).get("type")): _m(c) for c in _l(status.get("conditions"))}
    ready = conditions.get("Ready")
    out: dict[str, Any] = {"ready": str(ready.get("status")) if ready else "Unknown"}
    if ready and ready.get("status") != "True" and ready.get("reason"):
        out["ready_reason"] = str(ready["reason"])
    pressure = [t for t in _PRESSURE if conditions.get(t, {}).get("status") == "True"]
    if pressure:
        out["pressure"] = pressure
    if spec.get("unschedulable"):
        out["unschedulable"] = True
    taints = [_taint_text(t) for t in _l(spec.get("taints"))]
    if taints:
        out["taints"] = taints
    gpus = gpu_allocatable(node)
    if gpus:
        out["gpu_allocatable"] = gpus
    return out


def _service_summary(svc: Mapping[str, Any]) -> dict[str, Any]:
    spec = _m(svc.get("spec"))
    out: dict[str, Any] = {"type": str(spec.get("type") or "ClusterIP")}
    out["ports"] = [_port_text(p) for p in _l(spec.get("ports"))]
    selector = _m(spec.get("selector"))
    out["selector"] = {str(k): str(v) for k, v in sorted(selector.items())}
    if spec.get("externalName"):
        out["external_name"] = str(spec["externalName"])
    return out


def _pvc_summary(pvc: Mapping[str, Any]) -> dict[str, Any]:
    spec, status = _m(pvc.get("spec")), _m(pvc.get("status"))
    out: dict[str, Any] = {"phase": str(status.get("phase") or "Unknown")}
    if spec.get("storageClassName"):
        out["storage_class"] = str(spec["storageClassName"])
    if spec.get("volumeName"):
        out["volume"] = str(spec["volumeName"])
    size = _m(status.get("capacity")).get("storage") or _m(_m(spec.get("resources")).get("requests")).get(
        "storage"
    )
    if size:
        out["size"] = str(size)
    return out


def _pv_summary(pv: Mapping[str, Any]) -> dict[str, Any]:
    spec, status = _m(pv.get("spec")), _m(pv.get("status"))
    out: dict[str, Any] = {"phase": str(status.get("phase") or "Unknown")}
    claim = _m(spec.get("claimRef"))
    if claim.get("name"):
        out["claim"] = f"{claim.get('namespace') or ''}/{claim['name']}"
    if spec.get("storageClassName"):
        out["storage_class"] = str(spec["storageClassName"])
    if _m(spec.get("capacity")).get("storage"):
        out["size"] = str(_m(spec.get("capacity"))["storage"])
    return out


def _configmap_summary(cm: Mapping[str, Any]) -> dict[str, Any]:
    return {"keys": sorted(str(k) for k in (*_m(cm.get("data")), *_m(cm.get("binaryData"))))}


def backends(ingress: Mapping[str, Any]) -> list[tuple[str, str]]:
    """An Ingress's (Service name, port) backends, the default backend first, in the order written."""
    spec = _m(ingress.get("spec"))
    out: list[tuple[str, str]] = []
    found = [_m(_m(spec.get("defaultBackend")).get("service"))]
    for rule in _l(spec.get("rules")):
        for path in _l(_m(_m(rule).get("http")).get("paths")):
            found.append(_m(_m(_m(path).get("backend")).get("service")))
    for svc in found:
        if svc.get("name"):
            port = _m(svc.get("port"))
            pair = (str(svc["name"]), str(port.get("number") or port.get("name") or ""))
            if pair not in out:
                out.append(pair)
    return out


def _ingress_summary(ingress: Mapping[str, Any]) -> dict[str, Any]:
    spec = _m(ingress.get("spec"))
    out: dict[str, Any] = {}
    if spec.get("ingressClassName"):
        out["class"] = str(spec["ingressClassName"])
    hosts = sorted({str(_m(r).get("host")) for r in _l(spec.get("rules")) if _m(r).get("host")})
    if hosts:
        out["hosts"] = hosts
    out["backends"] = [f"{name}:{port}" if port else name for name, port in backends(ingress)]
    return out


def _hpa_summary(hpa: Mapping[str, Any]) -> dict[str, Any]:
    spec, status = _m(hpa.get("spec")), _m(hpa.get("status"))
    target = _m(spec.get("scaleTargetRef"))
    out: dict[str, Any] = {
        "target": f"{target.get('kind') or ''}/{target.get('name') or ''}",
        "min": int(spec.get("minReplicas") or 1),
        "max": int(spec.get("maxReplicas") or 0),
        "current": int(status.get("currentReplicas") or 0),
        "desired": int(status.get("desiredReplicas") or 0),
    }
    bad = _unhealthy_conditions(hpa)
    if bad:
        out["conditions"] = [_condition_text(c) for c in bad]
    return out


def _pdb_summary(pdb: Mapping[str, Any]) -> dict[str, Any]:
    spec, status = _m(pdb.get("spec")), _m(pdb.get("status"))
    out: dict[str, Any] = {}
    for key in ("minAvailable", "maxUnavailable"):
        if spec.get(key) is not None:
            out[key] = spec[key]
    out["healthy"] = f"{int(status.get('currentHealthy') or 0)}/{int(status.get('desiredHealthy') or 0)}"
    out["disruptions_allowed"] = int(status.get("disruptionsAllowed") or 0)
    return out


def _generic_summary(obj: Mapping[str, Any]) -> dict[str, Any]:
    status = _m(obj.get("status"))
    out: dict[str, Any] = {}
    if status.get("phase"):
        out["phase"] = str(status["phase"])
    bad = _unhealthy_conditions(obj)
    if bad:
        out["conditions"] = [_condition_text(c) for c in bad]
    return out


_SUMMARIES: Final[Mapping[str, Callable[[Mapping[str, Any]], dict[str, Any]]]] = {
    "Pod": _pod_summary,
    **{kind: _workload_summary for kind in _WORKLOADS},
    "Job": _job_summary,
    "CronJob": _cronjob_summary,
    "Node": _node_summary,
    "Service": _service_summary,
    "PersistentVolumeClaim": _pvc_summary,
    "PersistentVolume": _pv_summary,
    "ConfigMap": _configmap_summary,
    "Ingress": _ingress_summary,
    "HorizontalPodAutoscaler": _hpa_summary,
    "PodDisruptionBudget": _pdb_summary,
}


def _secret(obj: Mapping[str, Any], level: Level) -> dict[str, Any]:
    out = identity(obj)
    out["type"] = str(obj.get("type") or "Opaque")
    out["keys"] = sorted(str(k) for k in (*_m(obj.get("data")), *_m(obj.get("stringData"))))
    if level != "summary":
        meta = _compact_metadata(_m(obj.get("metadata"))) if level == "compact" else _detail_metadata(obj)
        meta.pop("name", None)
        meta.pop("namespace", None)
        if meta:
            out["metadata"] = meta
    return out


# ---- shared pieces -----------------------------------------------------------------------------------------------
_HEALTHY_WHEN_FALSE: Final = frozenset(
    {*_PRESSURE, "ReplicaFailure", "Failed", "Suspended", "DisruptionTarget"}
)


def _unhealthy(cond: Mapping[str, Any]) -> bool:
    healthy = "False" if str(cond.get("type")) in _HEALTHY_WHEN_FALSE else "True"
    return str(cond.get("status")) != healthy


def _unhealthy_conditions(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [_m(c) for c in _l(_m(obj.get("status")).get("conditions")) if _unhealthy(_m(c))]


def _condition_text(cond: Mapping[str, Any]) -> str:
    text = f"{cond.get('type')}={cond.get('status')}"
    if cond.get("reason"):
        text += f" ({cond['reason']})"
    return text


def _compact_condition(cond: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: cond[k] for k in ("type", "status", "reason", "message") if cond.get(k) not in (None, "")}
    return out


def _taint_text(taint: Any) -> str:
    t = _m(taint)
    value = f"={t['value']}" if t.get("value") else ""
    return f"{t.get('key')}{value}:{t.get('effect')}"


def _port_text(port: Any) -> str:
    p = _m(port)
    text = f"{p.get('port')}/{p.get('protocol') or 'TCP'}"
    if p.get("targetPort") not in (None, p.get("port")):
        text += f"->{p['targetPort']}"
    if p.get("nodePort"):
        text += f" node:{p['nodePort']}"
    return f"{p['name']} {text}" if p.get("name") else text


def probe_text(probe: Any) -> str:
    """A probe as one line: ``httpGet :8080/healthz delay=5 period=10 timeout=1 failures=3``."""
    p = _m(probe)
    if "httpGet" in p:
        h = _m(p["httpGet"])
        how = f"httpGet :{h.get('port')}{h.get('path') or '/'}"
    elif "tcpSocket" in p:
        how = f"tcpSocket :{_m(p['tcpSocket']).get('port')}"
    elif "grpc" in p:
        how = f"grpc :{_m(p['grpc']).get('port')}"
    elif "exec" in p:
        how = "exec " + " ".join(str(a) for a in _l(_m(p["exec"]).get("command")))
    else:
        how = "probe"
    for key, label in (
        ("initialDelaySeconds", "delay"),
        ("periodSeconds", "period"),
        ("timeoutSeconds", "timeout"),
        ("failureThreshold", "failures"),
    ):
        if p.get(key) is not None:
            how += f" {label}={p[key]}"
    return how


def env_text(var: Any) -> str:
    """An env entry as its name and, for a reference, what it points at (``DB_URL<-Secret/db[url]``); never a
    value."""
    v = _m(var)
    name = str(v.get("name") or "")
    source = _m(v.get("valueFrom"))
    for ref_key, label in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
        ref = _m(source.get(ref_key))
        if ref:
            return f"{name}<-{label}/{ref.get('name')}[{ref.get('key')}]"
    field_ref = _m(source.get("fieldRef")).get("fieldPath")
    if field_ref:
        return f"{name}<-field/{field_ref}"
    if source.get("resourceFieldRef"):
        return f"{name}<-resource/{_m(source['resourceFieldRef']).get('resource')}"
    return name


def env_from_text(source: Any) -> str:
    s = _m(source)
    prefix = f"{s['prefix']}*" if s.get("prefix") else ""
    if s.get("configMapRef"):
        return f"{prefix}<-ConfigMap/{_m(s['configMapRef']).get('name')}"
    if s.get("secretRef"):
        return f"{prefix}<-Secret/{_m(s['secretRef']).get('name')}"
    return prefix or "?"


def volume_source(volume: Any) -> tuple[str, str]:
    """A volume's source kind and what it names (``persistentVolumeClaim``, the claim), ``("emptyDir", "")``…"""
    v = _m(volume)
    for key in v:
        if key == "name":
            continue
        name_key = _VOLUME_SOURCES.get(str(key))
        return str(key), str(_m(v[key]).get(name_key) or "") if name_key else ""
    return "unknown", ""


def _volume_text(volume: Any) -> str:
    kind, name = volume_source(volume)
    if kind == "projected":
        parts = []
        for src in _l(_m(_m(volume).get("projected")).get("sources")):
            for key, label in (("configMap", "ConfigMap"), ("secret", "Secret")):
                if _m(src).get(key):
                    parts.append(f"{label}/{_m(_m(src)[key]).get('name')}")
        return f"{_m(volume).get('name')}<-projected[{' '.join(parts)}]"
    return f"{_m(volume).get('name')}<-{kind}/{name}" if name else f"{_m(volume).get('name')}<-{kind}"


# ---- compact -----------------------------------------------------------------------------------------------------
def _compact_metadata(meta: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("name", "namespace", "labels", "creationTimestamp", "deletionTimestamp"):
        if meta.get(key):
            out[key] = meta[key]
    annotations = _m(meta.get("annotations"))
    kept = {k: annotations[k] for k in KEPT_ANNOTATIONS if k in annotations}
    if kept:
        out["annotations"] = kept
    owners = [f"{_m(o).get('kind')}/{_m(o).get('name')}" for o in _l(meta.get("ownerReferences"))]
    if owners:
        out["owners"] = owners
    return out


def _compact_container(container: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in _m(container).items():
        if key in _COMPACT_CONTAINER_DROP:
            continue
        if key in _PROBES:
            out[key] = probe_text(value)
        elif key == "env":
            out[key] = [env_text(v) for v in _l(value)]
        elif key == "envFrom":
            out[key] = [env_from_text(v) for v in _l(value)]
        elif key == "volumeMounts":
            out[key] = [
                f"{_m(m).get('name')}:{_m(m).get('mountPath')}" + (":ro" if _m(m).get("readOnly") else "")
                for m in _l(value)
            ]
        elif key == "ports":
            out[key] = [f"{_m(p).get('containerPort')}/{_m(p).get('protocol') or 'TCP'}" for p in _l(value)]
        elif key == "resources" and not value:
            continue
        else:
            out[key] = value
    return out


def _is_default_toleration(toleration: Any) -> bool:
    t = _m(toleration)
    return t.get("key") in _DEFAULT_TOLERATION_KEYS and t.get("effect") == "NoExecute"


def _compact_pod_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if key in _COMPACT_POD_SPEC_DROP:
            continue
        if key in ("containers", "initContainers", "ephemeralContainers"):
            out[key] = [_compact_container(c) for c in _l(value)]
        elif key == "volumes":
            out[key] = [_volume_text(v) for v in _l(value)]
        elif key == "tolerations":
            kept = [t for t in _l(value) if not _is_default_toleration(t)]
            if kept:
                out[key] = kept
        elif key == "serviceAccountName" and value == "default":
            continue
        else:
            out[key] = value
    return out


def _compact_container_status(cs: Any) -> dict[str, Any]:
    return {k: v for k, v in _m(cs).items() if k not in _CONTAINER_STATUS_DROP and v not in ({}, None)}


def _compact_status(kind: str, status: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in status.items():
        if key in _COMPACT_STATUS_DROP:
            continue
        if key == "conditions":
            kept = [
                _compact_condition(_m(c))
                for c in _l(value)
                if _unhealthy(_m(c)) or _m(c).get("type") in ("Ready", "Available")
            ]
            if kept:
                out[key] = kept
        elif key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
            out[key] = [_compact_container_status(cs) for cs in _l(value)]
        elif kind == "Node" and key in (
            "images",
            "volumesInUse",
            "volumesAttached",
            "daemonEndpoints",
            "addresses",
        ):
            continue
        elif kind == "Node" and key == "nodeInfo":
            info = _m(value)
            out[key] = {k: info[k] for k in ("kubeletVersion", "containerRuntimeVersion") if k in info}
        elif kind == "Node" and key == "capacity":
            continue  # allocatable is what the scheduler uses
        else:
            out[key] = value
    return out


def _compact(obj: Mapping[str, Any]) -> dict[str, Any]:
    kind = str(obj.get("kind") or "")
    out: dict[str, Any] = {"kind": kind}
    meta = _compact_metadata(_m(obj.get("metadata")))
    out.update({k: meta.pop(k) for k in ("namespace", "name") if k in meta})
    if meta:
        out["metadata"] = meta
    if kind == "ConfigMap":
        out.update(_configmap_summary(obj))
        return out
    spec = _m(obj.get("spec"))
    if spec:
        out["spec"] = _compact_spec(kind, spec)
    status = _m(obj.get("status"))
    if status:
        out["status"] = _compact_status(kind, status)
    for key, value in obj.items():
        if key not in ("kind", "apiVersion", "metadata", "spec", "status"):
            out[key] = value
    return out


def _compact_spec(kind: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    if kind == "Pod":
        return _compact_pod_spec(spec)
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if key in ("revisionHistoryLimit", "progressDeadlineSeconds", "podManagementPolicy"):
            continue
        if key == "template" and isinstance(value, Mapping):
            out[key] = _compact_template(value)
        elif key == "jobTemplate" and isinstance(value, Mapping):
            job_spec = _m(value.get("spec"))
            out[key] = {"spec": _compact_spec("Job", job_spec)}
        elif key in ("clusterIPs", "ipFamilies") or (
            kind == "Service" and _SERVICE_DEFAULTS.get(key) == value
        ):
            continue
        elif kind == "Service" and key == "ports":
            out[key] = [_port_text(p) for p in _l(value)]
        elif kind == "Node" and key in ("podCIDR", "podCIDRs", "providerID"):
            continue
        else:
            out[key] = value
    return out


def _compact_template(template: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    labels = _m(template.get("metadata")).get("labels")
    if labels:
        out["labels"] = labels
    annotations = _m(_m(template.get("metadata")).get("annotations"))
    kept = {k: annotations[k] for k in KEPT_ANNOTATIONS if k in annotations}
    if kept:
        out["annotations"] = kept
    out["spec"] = _compact_pod_spec(_m(template.get("spec")))
    return out


# ---- detail ------------------------------------------------------------------------------------------------------
def _detail_metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = _m(obj.get("metadata"))
    out: dict[str, Any] = {}
    for key, value in meta.items():
        if key in _METADATA_NOISE:
            continue
        if key == "annotations":
            kept = {k: v for k, v in _m(value).items() if k != LAST_APPLIED}
            if kept:
                out[key] = kept
        elif key == "ownerReferences":
            out[key] = [
                {k: _m(o)[k] for k in ("kind", "name", "controller") if k in _m(o)} for o in _l(value)
            ]
        else:
            out[key] = value
    return out


def _without_defaults(node: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in node.items() if not (k in defaults and defaults[k] == v)}


def _detail_pod_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    out = _without_defaults(spec, _POD_SPEC_DEFAULTS)
    if out.get("serviceAccount") == out.get("serviceAccountName"):
        out.pop("serviceAccount", None)
    for key in ("containers", "initContainers"):
        if key in out:
            out[key] = [_without_defaults(_m(c), _CONTAINER_DEFAULTS) for c in _l(out[key])]
    if "tolerations" in out:
        kept = [t for t in _l(out["tolerations"]) if not _is_default_toleration(t)]
        if kept:
            out["tolerations"] = kept
        else:
            del out["tolerations"]
    return out


def _detail(obj: Mapping[str, Any]) -> dict[str, Any]:
    kind = str(obj.get("kind") or "")
    out: dict[str, Any] = identity(obj)
    meta = _detail_metadata(obj)
    meta.pop("name", None)
    meta.pop("namespace", None)
    if meta:
        out["metadata"] = meta
    for key, value in obj.items():
        if key in ("kind", "metadata"):
            continue
        if key == "spec" and isinstance(value, Mapping):
            out[key] = _detail_spec(kind, value)
        elif key == "status" and isinstance(value, Mapping):
            out[key] = {
                k: v
                for k, v in value.items()
                if not (kind == "Node" and k == "images") and k != "observedGeneration"
            }
        else:
            out[key] = value
    return out


def _detail_spec(kind: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    if kind == "Pod":
        return _detail_pod_spec(spec)
    if kind == "Service":
        return _without_defaults(spec, _SERVICE_DEFAULTS)
    out = dict(spec)
    template = out.get("template")
    if isinstance(template, Mapping) and isinstance(template.get("spec"), Mapping):
        out["template"] = {**template, "spec": _detail_pod_spec(template["spec"])}
    return out
