"""k8sgpt beside Capstan on the same live cluster state: run ``k8sgpt analyze --output json`` (no AI backend, no
``--explain``), parse its results, and score them the way Capstan's findings are scored.

The command line is given (``--k8sgpt`` in bench/diagnose.py; the Go module proxy refuses k8sgpt, so it is built from
the fetched public repository, ../shared/research/peers.md). It runs as::

    <command> analyze --output json --kubeconfig KUBECONFIG --namespace NS [--filter A,B,…]

with ``HOME``, ``XDG_CONFIG_HOME``, ``XDG_CACHE_HOME`` and ``XDG_DATA_HOME`` in a scratch directory (k8sgpt writes
``$XDG_CONFIG_HOME/k8sgpt/k8sgpt.yaml`` on every run). Without ``--filter`` k8sgpt runs its default analyzers
(:data:`DEFAULT_FILTERS`: Pod, Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob, PersistentVolumeClaim,
Service, Ingress, Node, ConfigMap and the two webhook configurations); :data:`ALL_FILTERS` adds the optional ones that
apply to a plain cluster (HPA, PDB, NetworkPolicy, Log, Storage, Security; the Gateway API and OLM ones are left out:
without their CRDs they only add errors).

Its JSON (commit 05247a8)::

    {"provider": "", "errors": null, "status": "ProblemDetected", "problems": 1,
     "results": [{"kind": "Service", "name": "shop/web",
                  "error": [{"Text": "Service has no endpoints, expected label app=web", "KubernetesDoc": "",
                             "Sensitive": [{"Unmasked": "app", "Masked": "RSI+"}, …]}],
                  "details": "", "parentObject": ""}]}

``name`` is ``namespace/name`` (the Log analyzer adds ``/container``; cluster-scoped kinds have no namespace);
``kind`` may be qualified (``Security/ServiceAccount``); ``parentObject`` is ``Deployment/web`` style or empty;
``results`` is null when nothing is found; ``errors`` lists analyzers that failed (``[Gateway] no matches for kind…``).

**Scoring** (:func:`k8sgpt_top1`). k8sgpt does not rank: its analyzers run concurrently and append their results as
they finish, so the order of ``results`` changes from run to run, and its first entry is often an unrelated
``ConfigMap … is not used by any pods`` (every namespace has ``kube-root-ca.crt``). So k8sgpt's "first result" is
its answer **about the expected object**, taken in an order that does not depend on the run: the results whose kind
is the expected kind (the last part of a qualified kind, ``Security/ServiceAccount``) and whose name is the expected
name (the second part of ``namespace/name[/container]``), all of them together (the Pod and Log analyzers may both
report one pod); when there are none, the results whose ``parentObject`` is ``Kind/name`` of the expected object (a
Deployment's pods). It is right when those results' error texts, joined, contain every expected keyword
(case-insensitive), the keyword rule Capstan is scored by. This is more lenient than Capstan's rule (Capstan's first
ranked finding must be the one), and the report says so; ``strict=True`` applies Capstan's rule literally (the first
entry of ``results`` only, which varies between runs).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_FILTERS: tuple[str, ...] = (
    "Pod", "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob", "PersistentVolumeClaim",
    "Service", "Ingress", "Node", "ConfigMap", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
)  # fmt: skip
ALL_FILTERS: tuple[str, ...] = (
    *DEFAULT_FILTERS,
    "HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy", "Log", "Storage", "Security",
)  # fmt: skip


class K8sgptError(RuntimeError):
    """k8sgpt exited non-zero or printed something that is not its JSON."""


@dataclass(frozen=True)
class K8sgptResult:
    """One entry of k8sgpt's ``results``."""

    kind: str
    namespace: str
    name: str
    errors: tuple[str, ...]
    parent: str = ""
    details: str = ""
    container: str = ""

    @property
    def text(self) -> str:
        return " ".join(self.errors)


@dataclass(frozen=True)
class K8sgptRun:
    results: tuple[K8sgptResult, ...]
    raw: str
    errors: tuple[str, ...] = ()
    seconds: float = 0.0
    command: tuple[str, ...] = field(default=())


def parse_results(raw: str) -> tuple[tuple[K8sgptResult, ...], tuple[str, ...]]:
    """k8sgpt's JSON output → its results and its analyzers' errors."""
    start = raw.find("{")  # k8sgpt prints analyzer failures as plain lines before the JSON
    try:
        data = json.loads(raw[start:] if start >= 0 else raw)
    except json.JSONDecodeError as exc:
        raise K8sgptError(f"k8sgpt printed no JSON: {exc}: {raw[:300]!r}") from None
    if not isinstance(data, dict):
        raise K8sgptError(f"k8sgpt printed {type(data).__name__}, not an object")
    out: list[K8sgptResult] = []
    for item in data.get("results") or []:
        parts = str(item.get("name") or "").split("/")
        if len(parts) == 1:
            namespace, name, container = "", parts[0], ""
        else:
            namespace, name, container = parts[0], parts[1], "/".join(parts[2:])
        texts = tuple(str(e.get("Text") or "") for e in item.get("error") or [] if isinstance(e, dict))
        out.append(
            K8sgptResult(
                kind=str(item.get("kind") or ""),
                namespace=namespace,
                name=name,
                errors=texts,
                parent=str(item.get("parentObject") or ""),
                details=str(item.get("details") or ""),
                container=container,
            )
        )
    return tuple(out), tuple(str(e) for e in data.get("errors") or [])


def _env(scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG",)}
    for var, sub in (
        ("HOME", "home"),
        ("XDG_CONFIG_HOME", "home/.config"),
        ("XDG_CACHE_HOME", "home/.cache"),
        ("XDG_DATA_HOME", "home/.local/share"),
    ):
        path = scratch / sub
        path.mkdir(parents=True, exist_ok=True)
        env[var] = str(path)
    return env


async def run_k8sgpt_full(
    command: Sequence[str],
    kubeconfig: Path,
    namespace: str,
    scratch: Path,
    *,
    filters: Sequence[str] | None = None,
    timeout: float = 120.0,
) -> K8sgptRun:
    """Run k8sgpt once (bounded by ``timeout``) and parse what it printed."""
    argv = [
        *command, "analyze", "--output", "json", "--kubeconfig", str(kubeconfig), "--namespace", namespace,
    ]  # fmt: skip
    if filters:
        argv += ["--filter", ",".join(filters)]
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
        env=_env(scratch),
        cwd=scratch,
    )
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise K8sgptError(f"k8sgpt did not finish in {timeout:g} s: {' '.join(argv)}") from None
    seconds = time.perf_counter() - t0
    raw = stdout.decode(errors="replace")
    if proc.returncode != 0:
        raise K8sgptError(f"k8sgpt exited {proc.returncode}: {stderr.decode(errors='replace')[-500:]}")
    results, errors = parse_results(raw)
    return K8sgptRun(results, raw[raw.find("{") :] if "{" in raw else raw, errors, seconds, tuple(argv))


async def run_k8sgpt(
    command: list[str], kubeconfig: Path, namespace: str, scratch: Path
) -> list[K8sgptResult]:
    """k8sgpt's results for ``namespace`` with its default analyzers."""
    run = await run_k8sgpt_full(command, kubeconfig, namespace, scratch)
    return list(run.results)


def k8sgpt_top1(
    results: Sequence[K8sgptResult],
    expected_kind: str,
    expected_name: str,
    keywords: Sequence[str],
    *,
    strict: bool = False,
) -> bool:
    """Whether k8sgpt named the expected root cause (the rule in the module docstring)."""
    candidates = results[:1] if strict else results
    own = [r for r in candidates if r.kind.rsplit("/", 1)[-1] == expected_kind and r.name == expected_name]
    about = own or [r for r in candidates if r.parent == f"{expected_kind}/{expected_name}"]
    if not about:
        return False
    text = " ".join(r.text for r in about).lower()
    return all(k.lower() in text for k in keywords)


def find_k8sgpt(explicit: str | None = None) -> list[str] | None:
    """The k8sgpt command: ``explicit``, else ``$CAPSTAN_K8SGPT`` (a command line, split on spaces), else
    ../peers/k8sgpt beside the repository when it exists (where the peer is built); None when there is none."""
    given = explicit or os.environ.get("CAPSTAN_K8SGPT")
    if given:
        return given.split()
    default = Path(__file__).resolve().parents[2] / "peers" / "k8sgpt"
    return [str(default)] if default.is_file() and os.access(default, os.X_OK) else None


def summary_json(run: K8sgptRun) -> dict[str, Any]:
    return {
        "command": list(run.command),
        "seconds": run.seconds,
        "errors": list(run.errors),
        "results": [
            {
                "kind": r.kind,
                "namespace": r.namespace,
                "name": r.name,
                "errors": list(r.errors),
                "parent": r.parent,
            }
            for r in run.results
        ],
    }
