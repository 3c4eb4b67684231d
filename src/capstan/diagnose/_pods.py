"""The pods analyzer: why a container does not run or is not ready, from its status, its Events and its previous
log. Waiting reasons (CrashLoopBackOff with the last termination's reason, exit code and signal; OOMKilled against the
memory limit; image pulls with the Event's message; CreateContainerConfigError naming the missing ConfigMap, Secret
or key), init containers and native sidecars, containers that exited for good, and failing probes from Events."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from capstan.diagnose._analyzer import about
from capstan.diagnose._common import is_terminal, preceding_changes, quote, ref_of
from capstan.diagnose._finding import Category, Evidence, Finding, ObjectRef, Severity, Source
from capstan.diagnose._snapshot import KubeObject, Snapshot, event_message, meta_of
from capstan.kube import event_time
from capstan.restarts import explain, is_probe_failure, last_termination, resolve_owner, signal_of

NAME: Final = "pods"
IMAGE_PULL: Final = ("ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull")
START_ERRORS: Final = (
    "CreateContainerError",
    "RunContainerError",
    "ContainerCannotRun",
    "PreStartHookError",
    "PostStartHookError",
    "StartError",
)
LOG_LINES: Final = 3


@dataclass(frozen=True)
class Container:
    """One container of a pod with its spec, its status and what kind it is."""

    name: str
    role: str  # "container", "init container", "sidecar" (an init container with restartPolicy Always)
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    where: str  # the status path, e.g. status.containerStatuses[app]


def containers(pod: KubeObject) -> Iterator[Container]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    for spec_key, status_key, role in (
        ("initContainers", "initContainerStatuses", "init container"),
        ("containers", "containerStatuses", "container"),
    ):
        statuses = {str(s.get("name")): s for s in status.get(status_key) or [] if isinstance(s, Mapping)}
        for c in spec.get(spec_key) or []:
            if not isinstance(c, Mapping):
                continue
            name = str(c.get("name") or "")
            kind = "sidecar" if role == "init container" and c.get("restartPolicy") == "Always" else role
            yield Container(name, kind, c, statuses.get(name) or {}, f"status.{status_key}[{name}]")


# ---- the log pattern library --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogClass:
    name: str
    pattern: re.Pattern[str]
    category: Category
    meaning: str


LOG_CLASSES: Final = (
    LogClass(
        "nccl-timeout",
        re.compile(r"NCCL.*(watchdog|timeout|timed out)|(watchdog|timeout).*NCCL", re.I),
        Category.GPU,
        "an NCCL collective timed out (a peer rank hung or the GPU interconnect failed)",
    ),
    LogClass(
        "cuda-oom",
        re.compile(
            r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError|cudaErrorMemoryAllocation", re.I
        ),
        Category.GPU,
        "the GPU ran out of memory",
    ),
    LogClass(
        "nccl-error",
        re.compile(
            r"NCCL WARN|NCCL error|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|ncclRemoteError"
            r"|ncclInvalidUsage|NCCL communicator was aborted",
            re.I,
        ),
        Category.GPU,
        "NCCL failed (a peer rank died, or the network or GPU interconnect between ranks failed)",
    ),
    LogClass(
        "gpu-xid",
        re.compile(r"\bXid\b|fallen off the bus|uncorrectable ECC|GPU is lost", re.I),
        Category.GPU,
        "the GPU hit a hardware or driver fault (an XID error): the node's GPU, not the program, is at fault",
    ),
    LogClass(
        "cuda-error",
        re.compile(r"CUDA error|CUDA driver|no CUDA-capable device|NVML", re.I),
        Category.GPU,
        "a CUDA or GPU driver error",
    ),
    LogClass(
        "rbac-forbidden",
        re.compile(
            r"\bforbidden\b.*\bcannot (get|list|watch|create|update|patch|delete)\b|\b403\b.*forbidden", re.I
        ),
        Category.SECURITY,
        "the API server refused the pod's service account (RBAC)",
    ),
    LogClass(
        "unreachable",
        re.compile(
            r"connection refused|no such host|could not resolve|name resolution|i/o timeout|timed out", re.I
        ),
        Category.NETWORKING,
        "a dependency it connects to is unreachable",
    ),
    LogClass(
        "bad-arguments",
        re.compile(
            r"flag provided but not defined|unknown (flag|option|shorthand flag)|unrecognized (option|arguments?)"
            r"|invalid (flag|option|argument)|no such option",
            re.I,
        ),
        Category.CONFIGURATION,
        "its command line has a flag or argument this version does not accept",
    ),
    LogClass(
        "missing-config",
        re.compile(
            r"environment variable|env var|KeyError|not set|is required|missing (required )?(config|setting|key)"
            r"|no such file or directory",
            re.I,
        ),
        Category.CONFIGURATION,
        "a setting, variable or file it needs is missing",
    ),
)
_ERRORISH: Final = re.compile(r"error|exception|fatal|panic|traceback|fail|refused|denied|killed|abort", re.I)


def classify_log(text: str) -> tuple[LogClass | None, list[str]]:
    """The first class (in library order) any of the last lines match, and the lines to quote: the matching lines,
    else the error-looking lines, else the last lines."""
    lines = [line for line in text.splitlines() if line.strip()][-200:]
    for cls in LOG_CLASSES:
        hits = [line for line in lines if cls.pattern.search(line)]
        if hits:
            return cls, hits[-LOG_LINES:]
    errors = [line for line in lines if _ERRORISH.search(line)]
    return None, (errors or lines)[-LOG_LINES:]


# ---- probes ---------------------------------------------------------------------------------------------------


def probe_events(snapshot: Snapshot, pod: KubeObject, container: str) -> list[KubeObject]:
    """``Unhealthy`` probe Events and kubelet kills for failed probes about this container (the restart report's
    test, :func:`capstan.restarts.is_probe_failure`), kept as Events for their times."""
    namespace, name, uid = meta_of(pod)
    return [e for e in snapshot.events_about("Pod", namespace, name, uid) if is_probe_failure(e, container)]


def _event_evidence(event: KubeObject, what: str) -> Evidence:
    count = int(event.get("count") or (event.get("series") or {}).get("count") or 1)
    suffix = f" (×{count})" if count > 1 else ""
    return Evidence(
        what,
        Source.EVENT,
        f"Event {event.get('reason')}",
        quote(event_message(event)) + suffix,
        event_time(event),
    )


# ---- the analyzer ---------------------------------------------------------------------------------------------


def analyze_pods(snapshot: Snapshot) -> list[Finding]:
    owners = {(kind, *meta_of(obj)[:2]): obj for kind in ("ReplicaSet", "Job") for obj in snapshot.of(kind)}
    out: list[Finding] = []
    for pod in snapshot.of("Pod"):
        ref = ref_of("Pod", pod)
        with about(ref):
            owner = resolve_owner(pod, owners)
            related = [ObjectRef(owner.kind, owner.namespace, owner.name)] if owner.kind != "Pod" else []
            out.extend(_pod(snapshot, pod, ref, related))
    return out


def _pod(snapshot: Snapshot, pod: KubeObject, ref: ObjectRef, related: list[ObjectRef]) -> Iterator[Finding]:
    if is_terminal(pod) and (pod.get("status") or {}).get("reason") == "Evicted":
        message = str((pod.get("status") or {}).get("message") or "")
        yield Finding.create(
            NAME,
            "Evicted",
            subject=ref,
            related=related,
            severity=Severity.WARNING,
            category=Category.NODE,
            root_cause=f"Pod {ref.namespace}/{ref.name} was evicted by the kubelet: {quote(message, 160)}",
            evidence=[Evidence("eviction", Source.OBJECT_FIELD, "status.message", quote(message))],
            next_check=f"kubectl describe node {(pod.get('spec') or {}).get('nodeName', '')}",
        )
        return
    restart_policy = str((pod.get("spec") or {}).get("restartPolicy") or "Always")
    cs = list(containers(pod))
    creating = [c for c in cs if _waiting_reason(c) in ("ContainerCreating", "PodInitializing")]
    mount = _mount_failure(snapshot, pod, ref, related) if creating else None
    if mount is not None:
        yield mount
    for c in cs:
        state = c.status.get("state") or {}
        waiting = state.get("waiting") if isinstance(state.get("waiting"), Mapping) else None
        terminated = state.get("terminated") if isinstance(state.get("terminated"), Mapping) else None
        reason = str((waiting or {}).get("reason") or "")
        if reason == "CrashLoopBackOff":
            yield _crash_loop(snapshot, pod, ref, related, c)
        elif reason in IMAGE_PULL:
            yield _image_pull(snapshot, pod, ref, related, c, reason)
        elif reason == "CreateContainerConfigError":
            yield _config_error(snapshot, pod, ref, related, c, str((waiting or {}).get("message") or ""))
        elif reason in START_ERRORS:
            yield _start_error(ref, related, c, reason, str((waiting or {}).get("message") or ""))
        elif terminated is not None and _failed_for_good(c, terminated, restart_policy):
            yield _exited(snapshot, pod, ref, related, c)
        elif "running" in state:
            if (
                c.status.get("restartCount")
                and (found := last_termination(pod, c.name)) is not None
                and found.reason == "OOMKilled"
            ):
                yield _oom(snapshot, pod, ref, related, c, Severity.WARNING, "restarted after an OOM kill")
            elif c.status.get("restartCount") and (
                killed := _probe_kills(
                    snapshot,
                    pod,
                    ref,
                    related,
                    c,
                    Severity.WARNING,
                    "so the kubelet has been killing and restarting the container",
                    [*_termination_evidence(pod, c), _restart_count(c)],
                    preceding_changes(snapshot, [ref, *related]),
                )
            ):
                yield killed
            elif not c.status.get("ready", True) or c.status.get("started") is False:
                found_probe = _probe(snapshot, pod, ref, related, c)
                if found_probe is not None:
                    yield found_probe


def _waiting_reason(c: Container) -> str:
    waiting = (c.status.get("state") or {}).get("waiting")
    return str(waiting.get("reason") or "") if isinstance(waiting, Mapping) else ""


_MOUNT_MISSING: Final = re.compile(
    r'volume "(?P<volume>[^"]+)"\s*:\s*(?P<kind>configmap|secret) "(?P<name>[^"]+)" not found', re.I
)


def _mount_failure(
    snapshot: Snapshot, pod: KubeObject, ref: ObjectRef, related: list[ObjectRef]
) -> Finding | None:
    """A pod stuck creating its containers because a volume cannot be mounted or attached (``FailedMount``,
    ``FailedAttachVolume``): a missing ConfigMap or Secret is a configuration fault, anything else storage."""
    namespace, name, uid = meta_of(pod)
    failed = [
        e
        for e in snapshot.events_about("Pod", namespace, name, uid)
        if e.get("reason") in ("FailedMount", "FailedAttachVolume", "FailedMapVolume")
    ]
    if not failed:
        return None
    named = [(e, m) for e in failed if (m := _MOUNT_MISSING.search(event_message(e))) is not None]
    evidence = [_event_evidence(e, "mount failure") for e in failed[-2:]]
    if named:
        m = named[-1][1]
        kind = "ConfigMap" if m["kind"].lower() == "configmap" else "Secret"
        target = ObjectRef(kind, namespace, m["name"])
        evidence.append(
            Evidence("volume", Source.OBJECT_FIELD, f"spec.volumes[{m['volume']}]", f"{kind} {m['name']}")
        )
        return Finding.create(
            NAME,
            f"mount-missing-{kind}/{m['name']}",
            subject=ref,
            related=[target, *related],
            severity=Severity.CRITICAL,
            category=Category.CONFIGURATION,
            root_cause=(
                f"Pod {namespace}/{name} cannot start its containers: volume {m['volume']} mounts {kind} "
                f"{namespace}/{m['name']}, which does not exist."
            ),
            evidence=evidence,
            changes=preceding_changes(snapshot, [target, ref, *related]),
            confidence=0.95,
            next_check=f"kubectl get {kind.lower()} -n {namespace} {m['name']}",
        )
    last = failed[-1]
    return Finding.create(
        NAME,
        f"{last.get('reason')}",
        subject=ref,
        related=related,
        severity=Severity.CRITICAL,
        category=Category.STORAGE,
        root_cause=f"Pod {namespace}/{name} cannot start its containers: {quote(event_message(last), 200)}.",
        evidence=evidence,
        changes=preceding_changes(snapshot, [ref, *related]),
        confidence=0.8,
        next_check=f"kubectl describe pod -n {namespace} {name}; kubectl get pvc,volumeattachments -n {namespace}",
    )


def _failed_for_good(c: Container, terminated: Mapping[str, Any], restart_policy: str) -> bool:
    code = terminated.get("exitCode")
    if code in (None, 0):
        return False
    return restart_policy == "Never" or (c.role == "init container" and restart_policy != "Always")


def _memory_limit(c: Container) -> str | None:
    limit = ((c.spec.get("resources") or {}).get("limits") or {}).get("memory")
    return str(limit) if limit else None


def _subject_words(ref: ObjectRef, c: Container) -> str:
    return f"{c.role} {c.name} of pod {ref.namespace}/{ref.name}"


def _termination_evidence(pod: KubeObject, c: Container) -> list[Evidence]:
    term = last_termination(pod, c.name)
    if term is None:
        return []
    state = "lastState" if (c.status.get("lastState") or {}).get("terminated") else "state"
    where = f"{c.where}.{state}.terminated"
    parts = [f"reason={term.reason}", f"exitCode={term.exit_code}"]
    if term.signal:
        parts.append(f"signal={term.signal}")
    if term.finished_at:
        parts.append(f"finishedAt={term.finished_at}")
    items = [Evidence("last termination", Source.OBJECT_FIELD, where, " ".join(parts))]
    if term.message:
        items.append(
            Evidence("termination message", Source.OBJECT_FIELD, f"{where}.message", quote(term.message))
        )
    return items


def _log_evidence(snapshot: Snapshot, ref: ObjectRef, c: Container) -> tuple[Any, list[Evidence]]:
    text = snapshot.log(ref.namespace, ref.name, c.name)
    if not text:
        return None, []
    cls, lines = classify_log(text)
    what = f"previous log ({cls.name})" if cls else "previous log"
    return cls, [
        Evidence(what, Source.LOG_LINE, f"log {ref.name}/{c.name} (previous)", quote(line)) for line in lines
    ]


def _restart_count(c: Container) -> Evidence:
    return Evidence(
        "restarts", Source.OBJECT_FIELD, f"{c.where}.restartCount", str(c.status.get("restartCount", 0))
    )


def _crash_loop(
    snapshot: Snapshot, pod: KubeObject, ref: ObjectRef, related: list[ObjectRef], c: Container
) -> Finding:
    term = last_termination(pod, c.name)
    if term is not None and term.reason == "OOMKilled":
        return _oom(snapshot, pod, ref, related, c, Severity.CRITICAL, "crash-loops")
    evidence = [*_termination_evidence(pod, c), _restart_count(c)]
    who = _subject_words(ref, c)
    changes = preceding_changes(snapshot, [ref, *related])
    killed = _probe_kills(snapshot, pod, ref, related, c, Severity.CRITICAL, "so the kubelet kills the container "
                          "and it crash-loops", evidence, changes)  # fmt: skip
    if killed is not None:
        return killed
    cls, log_items = _log_evidence(snapshot, ref, c)
    gone = _missing_references(snapshot, ref, c)
    if gone:
        return _crash_on_missing_reference(snapshot, ref, related, c, gone, [*evidence, *log_items])
    if term is None:
        meaning = "the last termination state is not available"
    else:
        meaning = explain(
            term.reason, term.exit_code, term.signal, memory_limit=_memory_limit(c), liveness_failed=False
        ).rstrip(".")
        meaning = meaning[0].lower() + meaning[1:]
    code = f" with exit code {term.exit_code}" if term is not None and term.exit_code is not None else ""
    sig = signal_of(term.exit_code, term.signal) if term is not None else None
    sig_text = f" ({sig})" if sig else ""
    because = f"; its log says {cls.meaning}: {quote(log_items[-1].text, 160)}" if cls and log_items else ""
    return Finding.create(
        NAME,
        f"CrashLoopBackOff/{c.name}",
        subject=ref,
        related=related,
        severity=Severity.CRITICAL,
        # an init container that keeps failing blocks the pod's start
        category=cls.category
        if cls
        else (Category.STARTUP if c.role == "init container" else Category.RUNTIME),
        root_cause=f"The {who} crash-loops: its last run ended{code}{sig_text}: {meaning}{because}.",
        evidence=[*evidence, *log_items],
        changes=changes,
        confidence=0.85 if cls else 0.7,
        next_check=f"kubectl logs -n {ref.namespace} {ref.name} -c {c.name} --previous",
    )


def _missing_references(snapshot: Snapshot, ref: ObjectRef, c: Container) -> list[tuple[Reference, str]]:
    """The container's environment references whose ConfigMap/Secret or key is gone, with what is wrong (kinds
    that could not be read are never called missing)."""
    out = []
    for r in references(c):
        if not snapshot.readable(r.kind).readable:
            continue
        obj = snapshot.get(r.kind, ref.namespace, r.name)
        if obj is None:
            out.append((r, f"{r.kind} {r.name} does not exist"))
        elif r.key and r.key not in data_keys(obj):
            present = ", ".join(sorted(data_keys(obj))) or "none"
            out.append((r, f"{r.kind} {r.name} has no key {r.key} (it has {present})"))
    return out


def _crash_on_missing_reference(
    snapshot: Snapshot,
    ref: ObjectRef,
    related: list[ObjectRef],
    c: Container,
    gone: list[tuple[Reference, str]],
    evidence: list[Evidence],
) -> Finding:
    """A container crash-looping while a ConfigMap or Secret key its environment reads is gone: the missing key is
    the cause (the recorded rename or deletion is cited through the object)."""
    first, problem = gone[0]
    targets = [ObjectRef(r.kind, ref.namespace, r.name) for r, _ in gone]
    refs = [
        Evidence(
            "reference",
            Source.OBJECT_FIELD,
            r.where,
            f"{r.kind} {r.name}" + (f" key {r.key}" if r.key else ""),
        )
        for r, _ in gone
    ]
    return Finding.create(
        NAME,
        f"missing-{first.kind}/{first.name}/{first.key or ''}/{c.name}",
        subject=ref,
        related=[*targets, *related],
        severity=Severity.CRITICAL,
        category=Category.CONFIGURATION,
        root_cause=(
            f"The {_subject_words(ref, c)} crash-loops and reads a reference that is gone: {problem} (read by "
            f"{first.where})."
        ),
        evidence=[*refs, *evidence],
        changes=preceding_changes(snapshot, [ref, *targets, *related]),
        confidence=0.85,
        next_check=f"kubectl get {first.kind.lower()} -n {ref.namespace} {first.name} -o yaml; restore the key or "
        "update the pod template",
    )


def _probe_kills(
    snapshot: Snapshot,
    pod: KubeObject,
    ref: ObjectRef,
    related: list[ObjectRef],
    c: Container,
    severity: Severity,
    outcome: str,
    evidence: list[Evidence],
    changes: Sequence[Any],
) -> Finding | None:
    """The container is killed by its liveness or startup probe (the kubelet's ``Unhealthy`` and ``Killing``
    Events say which): a startup probe that gives up before the app has started is a ``startup`` fault, a liveness
    probe that fails on a running app a ``runtime`` one."""
    probes = probe_events(snapshot, pod, c.name)
    kills = [e for e in probes if any(k in event_message(e).lower() for k in ("liveness", "startup"))]
    if not kills:
        return None
    failed = [e for e in kills if e.get("reason") == "Unhealthy"]
    last = (failed or kills)[-1]
    kind = "startup" if "startup" in event_message(last).lower() else "liveness"
    who = _subject_words(ref, c)
    if kind == "startup":
        check = (
            f"the app needs longer to start than spec.containers[{c.name}].startupProbe allows (failureThreshold × "
            f"periodSeconds): raise it, or find what slows the start: kubectl logs -n {ref.namespace} {ref.name} "
            f"-c {c.name} --previous"
        )
    else:
        check = (
            f"compare spec.containers[{c.name}].livenessProbe (path, port, initialDelaySeconds) with what "
            f"the app serves: kubectl logs -n {ref.namespace} {ref.name} -c {c.name} --previous"
        )
    restarts = int(c.status.get("restartCount") or 0)
    return Finding.create(
        NAME,
        f"{kind}/{c.name}",
        subject=ref,
        related=related,
        severity=severity,
        category=Category.STARTUP if kind == "startup" else Category.RUNTIME,
        root_cause=(
            f"The {kind} probe of {who} fails ({quote(event_message(last), 160)}), {outcome}"
            + (f" ({restarts} restart(s) so far)." if restarts else ".")
        ),
        evidence=[*evidence, *(_event_evidence(e, "probe failure") for e in kills[-2:])],
        changes=changes,
        confidence=0.9,
        next_check=check,
    )


def _oom(
    snapshot: Snapshot,
    pod: KubeObject,
    ref: ObjectRef,
    related: list[ObjectRef],
    c: Container,
    severity: Severity,
    doing: str,
) -> Finding:
    limit = _memory_limit(c)
    who = _subject_words(ref, c)
    evidence = [*_termination_evidence(pod, c), _restart_count(c)]
    if limit:
        evidence.append(
            Evidence(
                "memory limit",
                Source.OBJECT_FIELD,
                f"spec.containers[{c.name}].resources.limits.memory",
                limit,
            )
        )
        cause = f"its memory limit {limit} (resources.limits.memory) is below what it uses"
        check = f"raise spec.containers[{c.name}].resources.limits.memory above its peak, or find the leak"
    else:
        cause = "it has no memory limit and the node ran out of memory"
        check = f"kubectl describe node {(pod.get('spec') or {}).get('nodeName', '')} (memory pressure, other pods)"
    return Finding.create(
        NAME,
        f"OOMKilled/{c.name}",
        subject=ref,
        related=related,
        severity=severity,
        category=Category.RUNTIME,
        root_cause=f"The {who} is OOMKilled and {doing}: {cause}.",
        evidence=evidence,
        changes=preceding_changes(snapshot, [ref, *related]),
        confidence=0.95,
        next_check=check,
    )


def _pull_meaning(message: str) -> str:
    low = message.lower()
    if any(w in low for w in ("not found", "manifest unknown", "does not exist", "no such image")):
        return "the image or its tag does not exist in the registry"
    if any(w in low for w in ("unauthorized", "denied", "authentication required", "403", "401")):
        return "the registry refused the pull credentials (imagePullSecrets)"
    if any(w in low for w in ("no such host", "i/o timeout", "dial tcp", "connection refused", "timeout")):
        return "the registry is unreachable from the node"
    if "invalid" in low:
        return "the image reference is invalid"
    return "the image cannot be pulled"


def _image_pull(
    snapshot: Snapshot, pod: KubeObject, ref: ObjectRef, related: list[ObjectRef], c: Container, reason: str
) -> Finding:
    image = str(c.spec.get("image") or "")
    namespace, name, uid = meta_of(pod)
    failed = [
        e
        for e in snapshot.events_about("Pod", namespace, name, uid)
        if e.get("reason") in ("Failed", "ErrImagePull", "InspectFailed")
        and (image in event_message(e) or not image)
    ]
    waiting_message = str(((c.status.get("state") or {}).get("waiting") or {}).get("message") or "")
    message = event_message(failed[-1]) if failed else waiting_message
    evidence = [
        Evidence("waiting reason", Source.OBJECT_FIELD, f"{c.where}.state.waiting.reason", reason),
        Evidence("image", Source.OBJECT_FIELD, f"spec.containers[{c.name}].image", image),
    ]
    if failed:
        evidence.append(_event_evidence(failed[-1], "pull failure"))
    elif waiting_message:
        evidence.append(
            Evidence(
                "pull failure",
                Source.OBJECT_FIELD,
                f"{c.where}.state.waiting.message",
                quote(waiting_message),
            )
        )
    return Finding.create(
        NAME,
        f"{'ImagePull' if reason in ('ImagePullBackOff', 'ErrImagePull') else reason}/{c.name}",
        subject=ref,
        related=related,
        severity=Severity.CRITICAL,
        category=Category.STARTUP,
        root_cause=(
            f"The image {image} of {_subject_words(ref, c)} cannot be pulled ({reason}): {_pull_meaning(message)}"
            + (f" — {quote(message, 200)}" if message else "")
            + "."
        ),
        evidence=evidence,
        changes=preceding_changes(snapshot, [ref, *related]),
        confidence=0.95 if message else 0.7,
        next_check=f"check that {image} exists and the node can pull it (imagePullSecrets, registry reachability)",
    )


_MISSING_OBJECT: Final = re.compile(r'(?P<kind>configmap|secret) "(?P<name>[^"]+)" not found', re.I)
_MISSING_KEY: Final = re.compile(
    r"couldn't find key (?P<key>\S+) in (?P<kind>ConfigMap|Secret) (?P<ns>[^/\s]+)/(?P<name>\S+)"
)


@dataclass(frozen=True)
class Reference:
    kind: str  # ConfigMap or Secret
    name: str
    key: str | None  # None: the whole object (envFrom, a volume)
    where: str  # the spec path of the reference


def references(c: Container) -> list[Reference]:
    """The ConfigMaps, Secrets and keys one container's environment reads (optional ones left out)."""
    base = f"spec.{'initContainers' if c.role != 'container' else 'containers'}[{c.name}]"
    out = []
    for var in c.spec.get("env") or []:
        source = (var or {}).get("valueFrom") or {}
        for field, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
            key_ref = source.get(field)
            if isinstance(key_ref, Mapping) and not key_ref.get("optional"):
                where = f"{base}.env[{var.get('name')}].valueFrom.{field}"
                out.append(
                    Reference(kind, str(key_ref.get("name") or ""), str(key_ref.get("key") or ""), where)
                )
    for i, source in enumerate(c.spec.get("envFrom") or []):
        for field, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
            obj_ref = (source or {}).get(field)
            if isinstance(obj_ref, Mapping) and not obj_ref.get("optional"):
                out.append(
                    Reference(kind, str(obj_ref.get("name") or ""), None, f"{base}.envFrom[{i}].{field}")
                )
    return out


def data_keys(obj: KubeObject) -> set[str]:
    return {str(k) for field in ("data", "binaryData", "stringData") for k in (obj.get(field) or {})}


def _config_error(
    snapshot: Snapshot, pod: KubeObject, ref: ObjectRef, related: list[ObjectRef], c: Container, message: str
) -> Finding:
    who = _subject_words(ref, c)
    evidence = [
        Evidence("waiting message", Source.OBJECT_FIELD, f"{c.where}.state.waiting.message", quote(message))
    ]
    missing: Reference | None = None
    problem = ""
    blind = ""
    if (m := _MISSING_KEY.search(message)) is not None:
        missing = Reference(m["kind"], m["name"], m["key"], "")
        problem = f"{m['kind']} {m['ns']}/{m['name']} has no key {m['key']}"
    elif (m := _MISSING_OBJECT.search(message)) is not None:
        kind = "ConfigMap" if m["kind"].lower() == "configmap" else "Secret"
        missing = Reference(kind, m["name"], None, "")
        problem = f"{kind} {ref.namespace}/{m['name']} does not exist"
    refs = references(c)
    if missing is None:  # no message we know: check the references against the snapshot
        for r in refs:
            if not snapshot.readable(r.kind).readable:
                blind = (
                    f" (cannot read {r.kind}s to check its references: {snapshot.readable(r.kind).reason})"
                )
                continue
            obj = snapshot.get(r.kind, ref.namespace, r.name)
            if obj is None:
                missing, problem = r, f"{r.kind} {ref.namespace}/{r.name} does not exist"
                break
            if r.key and r.key not in data_keys(obj):
                missing, problem = r, f"{r.kind} {ref.namespace}/{r.name} has no key {r.key}"
                break
    if missing is None:
        return Finding.create(
            NAME,
            f"CreateContainerConfigError/{c.name}",
            subject=ref,
            related=related,
            severity=Severity.CRITICAL,
            category=Category.SECURITY if "runAsNonRoot" in message else Category.CONFIGURATION,
            root_cause=f"The {who} cannot be created (CreateContainerConfigError): {quote(message, 200)}{blind}.",
            evidence=evidence,
            changes=preceding_changes(snapshot, [ref, *related]),
            confidence=0.6,
            next_check=f"kubectl describe pod -n {ref.namespace} {ref.name}",
        )
    target = ObjectRef(missing.kind, ref.namespace, missing.name)
    where = next(
        (r.where for r in refs if r.kind == missing.kind and r.name == missing.name and r.key == missing.key),
        next((r.where for r in refs if r.kind == missing.kind and r.name == missing.name), ""),
    )
    if where:
        evidence.append(
            Evidence(
                "reference",
                Source.OBJECT_FIELD,
                where,
                f"{missing.kind} {missing.name}" + (f" key {missing.key}" if missing.key else ""),
            )
        )
    obj = snapshot.get(missing.kind, ref.namespace, missing.name)
    if obj is not None and missing.key:
        keys = ", ".join(sorted(data_keys(obj))) or "(none)"
        evidence.append(Evidence("keys present", Source.OBJECT_FIELD, f"{target.key} data", keys))
    by = f" (read by {where})" if where else ""
    return Finding.create(
        NAME,
        f"missing-{missing.kind}/{missing.name}/{missing.key or ''}/{c.name}",
        subject=ref,
        related=[target, *related],
        severity=Severity.CRITICAL,
        category=Category.CONFIGURATION,
        root_cause=f"The {who} cannot start: {problem}{by}.",
        evidence=evidence,
        changes=preceding_changes(snapshot, [target, ref, *related]),
        confidence=0.95,
        next_check=f"kubectl get {missing.kind.lower()} -n {ref.namespace} {missing.name} -o yaml",
    )


def _start_error(
    ref: ObjectRef, related: list[ObjectRef], c: Container, reason: str, message: str
) -> Finding:
    return Finding.create(
        NAME,
        f"{reason}/{c.name}",
        subject=ref,
        related=related,
        severity=Severity.CRITICAL,
        category=Category.STARTUP,
        root_cause=f"The {_subject_words(ref, c)} cannot start ({reason})"
        + (f": {quote(message, 200)}" if message else "")
        + ".",
        evidence=[
            Evidence(
                "waiting", Source.OBJECT_FIELD, f"{c.where}.state.waiting", f"{reason}: {quote(message)}"
            )
        ],
        confidence=0.8,
        next_check=f"kubectl describe pod -n {ref.namespace} {ref.name}",
    )


def _exited(
    snapshot: Snapshot, pod: KubeObject, ref: ObjectRef, related: list[ObjectRef], c: Container
) -> Finding:
    term = last_termination(pod, c.name)
    cls, log_items = _log_evidence(snapshot, ref, c)
    meaning = explain(term.reason, term.exit_code, term.signal) if term else ""
    blocks = " and blocks the pod's start" if c.role == "init container" else ""
    because = f" Its log says {cls.meaning}: {quote(log_items[-1].text, 160)}." if cls and log_items else ""
    return Finding.create(
        NAME,
        f"exited/{c.name}",
        subject=ref,
        related=related,
        severity=Severity.CRITICAL,
        category=cls.category
        if cls
        else (Category.STARTUP if c.role == "init container" else Category.RUNTIME),
        root_cause=f"The {_subject_words(ref, c)} failed{blocks}: {meaning}{because}",
        evidence=[*_termination_evidence(pod, c), *log_items],
        changes=preceding_changes(snapshot, [ref, *related]),
        confidence=0.8,
        next_check=f"kubectl logs -n {ref.namespace} {ref.name} -c {c.name}",
    )


def _probe(
    snapshot: Snapshot, pod: KubeObject, ref: ObjectRef, related: list[ObjectRef], c: Container
) -> Finding | None:
    probes = probe_events(snapshot, pod, c.name)
    failing: Sequence[KubeObject] = [e for e in probes if e.get("reason") == "Unhealthy"]
    if not failing:
        return None
    last = failing[-1]
    kind = next(
        (
            k
            for k in ("Readiness", "Startup", "Liveness")
            if event_message(last).lower().startswith(k.lower())
        ),
        "A",
    )
    return Finding.create(
        NAME,
        f"probe-{kind.lower()}/{c.name}",
        subject=ref,
        related=related,
        severity=Severity.WARNING,
        category=Category.RUNTIME,
        root_cause=(
            f"{kind} probe of {_subject_words(ref, c)} fails ({quote(event_message(last), 160)}): the container "
            "is not ready, so Services send it no traffic."
        ),
        evidence=[
            Evidence("ready", Source.OBJECT_FIELD, f"{c.where}.ready", str(c.status.get("ready"))),
            *(_event_evidence(e, "probe failure") for e in failing[-2:]),
        ],
        changes=preceding_changes(snapshot, [ref, *related]),
        confidence=0.85,
        next_check=f"compare spec.containers[{c.name}].{kind.lower()}Probe with what the app serves",
    )
