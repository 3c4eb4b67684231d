"""The webhooks analyzer: an admission webhook whose backend is gone (k8sgpt's Validating/MutatingWebhook
analyzers): its ``clientConfig.service`` names a Service that does not exist, or one with no running pod behind it.

With ``failurePolicy: Fail`` (the default) every request the webhook matches is rejected, so this is the root of
the ``FailedCreate`` of every controller whose message names the webhook (they are its symptoms, and the
``workloads`` findings about them fold into it); with ``Ignore`` requests pass unchecked (a warning). Nothing is
concluded when Services (or, for the backing pods, Pods) cannot be read.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from capstan.diagnose._analyzer import about
from capstan.diagnose._common import preceding_changes, quote, ref_of
from capstan.diagnose._finding import Category, Evidence, Finding, ObjectRef, Severity, Source, Symptom
from capstan.diagnose._snapshot import KubeObject, Snapshot
from capstan.diagnose._workloads import CONTROLLERS, WEBHOOK_KINDS, backed, failure_of

NAME: Final = "webhooks"


def analyze_webhooks(snapshot: Snapshot) -> list[Finding]:
    if not snapshot.readable("Service").readable:
        return []
    failures: list[tuple[ObjectRef, str]] = []
    for kind in CONTROLLERS:
        for obj in snapshot.of(kind):
            found = failure_of(snapshot, kind, obj)
            if found is not None:
                failures.append((ref_of(kind, obj), found[0]))
    out: list[Finding] = []
    for kind in WEBHOOK_KINDS:
        for config in snapshot.of(kind):
            ref = ref_of(kind, config)
            with about(ref):
                for i, hook in enumerate(config.get("webhooks") or ()):
                    if isinstance(hook, Mapping):
                        out.extend(_hook(snapshot, ref, i, hook, failures))
    return out


def _hook(
    snapshot: Snapshot, ref: ObjectRef, i: int, hook: Mapping[str, Any], failures: list[tuple[ObjectRef, str]]
) -> Iterator[Finding]:
    service = (hook.get("clientConfig") or {}).get("service")
    if not isinstance(service, Mapping) or not service.get("name"):
        return  # a URL webhook: nothing in the cluster to check
    name = str(hook.get("name") or i)
    svc_ref = ObjectRef("Service", str(service.get("namespace") or ""), str(service["name"]))
    svc: KubeObject | None = snapshot.get("Service", svc_ref.namespace, svc_ref.name)
    if svc is None:
        problem = f"its Service {svc_ref.namespace}/{svc_ref.name} does not exist"
    elif snapshot.readable("Pod").readable and not backed(snapshot, svc):
        problem = f"no running pod is behind its Service {svc_ref.namespace}/{svc_ref.name}"
    else:
        return
    policy = str(hook.get("failurePolicy") or "Fail")
    effect = (
        "every request it matches is rejected (failurePolicy Fail)"
        if policy == "Fail"
        else "requests it matches pass unchecked (failurePolicy Ignore)"
    )
    symptoms = [
        Symptom(controller, f"cannot create its pods: {quote(message, 160)}")
        for controller, message in failures
        if f'webhook "{name}"' in message
    ]
    yield Finding.create(
        NAME,
        f"service/{name}",
        subject=ref,
        related=[svc_ref],
        severity=Severity.CRITICAL if policy == "Fail" else Severity.WARNING,
        category=Category.CONTROL_PLANE,
        root_cause=f"Admission webhook {name} of {ref.kind} {ref.name} cannot be called: {problem}, so {effect}.",
        evidence=[
            Evidence(
                "webhook service", Source.OBJECT_FIELD, f"webhooks[{name}].clientConfig.service", svc_ref.key
            ),
            Evidence("failure policy", Source.OBJECT_FIELD, f"webhooks[{name}].failurePolicy", policy),
        ],
        changes=preceding_changes(snapshot, [ref, svc_ref]),
        symptoms=symptoms,
        confidence=0.9,
        next_check=f"kubectl get endpointslices -n {svc_ref.namespace} -l kubernetes.io/service-name={svc_ref.name}; "
        f"kubectl get pods -n {svc_ref.namespace}",
    )
