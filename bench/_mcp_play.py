"""Plays the fault scenarios for bench/mcp_context.py's suite (``--suite``): ``capstan.faults.Runner`` over every scenario and,
while each scenario's state is live (the runner's ``on_state`` hook), MCP sessions against it:

- **Capstan**: :func:`capstan.mcp.create_server` over a fresh :class:`capstan.mcp.LiveSource` (the scenario's
  namespace, and the history its recorder wrote: ``Runner.history``, as a server started with ``--store`` reads
  it) and :class:`capstan.mcp.ClusterLogs`, through
  the SDK's in-memory client. One ``problems`` call (namespace = the scenario's), then ``diagnose`` on the expected
  object when the server has that tool; each scored by bench/_mcp_suite.py. The first call pays for reading the
  namespace and diagnosing it, as an agent's first call does.
- **Capstan with history**: after the scenario, ``problems`` once more on a server over ``FixedSource`` of the
  snapshot the runner read with its own store (so it holds the recorded changes): what a server started with
  ``--store`` answers on that state (the live session above cannot reach the runner's store).
- **kubernetes-mcp-server** (``--peer-command``), started over stdio with ``--kubeconfig K --read-only`` and driven
  by :func:`peer_plan`'s fixed, agent-like plan, noting the call at which the expected evidence has appeared and
  stopping at the one where the expected keywords have too (or at the plan's end).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from _mcp_suite import CallFigures, McpRow, peer_evidence, peer_found, score_answer
from capstan.faults import Outcome, Runner, Scenario
from capstan.kube import KubeClient, resources
from capstan.kube.resources import lookup_kind
from capstan.mcp import TOOLS, ClusterLogs, FixedSource, LiveSource, SnapshotLogs, create_server
from capstan.redact import Redactor
from capstan.store import HistoryReader
from capstan.tokens import count_tokens

RELATED: Final = (
    ("apps/v1", "Deployment"),
    ("apps/v1", "ReplicaSet"),
    ("apps/v1", "StatefulSet"),
    ("batch/v1", "Job"),
    ("v1", "Service"),
    ("v1", "PersistentVolumeClaim"),
    ("v1", "ConfigMap"),
    ("v1", "ResourceQuota"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("networking.k8s.io/v1", "Ingress"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("v1", "Node"),
)
"""The related kinds the peer's plan lists last, in this order (a kind the cluster lacks answers an error, counted)."""
MAX_OBJECTS: Final = 3
"""At most this many expected objects (a generated name's matches) and crashed pods' logs in the peer's plan."""


@dataclass(frozen=True)
class PeerRun:
    """The peer's plan: the calls made (tool, answer tokens), where the evidence appeared (the 1-based call, None:
    never) and where the evidence and keywords did (the plan stops there)."""

    log: tuple[tuple[str, int], ...]
    evidence_at: int | None
    found_at: int | None
    ms: float

    def tokens_to(self, call: int | None) -> int:
        return sum(t for _, t in self.log[: len(self.log) if call is None else call])


def _text(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def _names(client: KubeClient, kind: str, name: str, namespace: str) -> list[str]:
    """The expected object's names on the cluster: itself, or the first few matching a ``prefix*`` name."""
    if not name.endswith("*"):
        return [name]
    res = lookup_kind(kind)
    if res is None:
        return []
    items, _ = await client.list(res, namespace=namespace if res.namespaced else None)
    return sorted(
        str(o["metadata"]["name"]) for o in items if str(o["metadata"]["name"]).startswith(name[:-1])
    )[:MAX_OBJECTS]


def _expected(scenario: Scenario, node_names: dict[str, str]) -> tuple[str, str]:
    kind, name = scenario.expect.object.kind, scenario.expect.object.name
    return kind, node_names.get(name, name) if kind == "Node" else name


async def capstan_session(
    scenario: Scenario,
    namespace: str,
    config: Path,
    node_names: dict[str, str],
    history: HistoryReader | None = None,
) -> tuple[CallFigures, CallFigures, CallFigures | None]:
    """``problems`` (and ``diagnose``) on a fresh server over the live namespace, scored; then ``problems`` again
    without the namespace argument (the state is the same: only the tool's filter differs)."""
    specs = {s.name: s for s in TOOLS}
    redactor = Redactor()
    client = await KubeClient.from_kubeconfig(config)
    try:
        source = LiveSource(client, redactor=redactor, namespace=namespace, history=history, max_age_s=300.0)
        server = create_server(source, ClusterLogs(client), redactor=redactor)
        async with Client(server) as session:
            problems = await _scored(
                session, specs["problems"], {"namespace": namespace}, scenario, node_names
            )
            unscoped = await _scored(session, specs["problems"], {}, scenario, node_names)
            diagnose = None
            if "diagnose" in specs:
                kind, name = _expected(scenario, node_names)
                names = await _names(client, kind, name, namespace)
                res = lookup_kind(kind)
                args: dict[str, Any] = {"kind": kind, "name": names[0] if names else name.rstrip("*")}
                if res is None or res.namespaced:
                    args["namespace"] = namespace
                diagnose = await _scored(session, specs["diagnose"], args, scenario, node_names)
        return problems, unscoped, diagnose
    finally:
        await client.close()


async def with_history(outcome: Outcome) -> CallFigures | None:
    """``problems`` over the snapshot the runner read with its store's history (its recorded changes): what a
    server started with ``--store`` would have answered on the same state."""
    if outcome.snapshot is None:
        return None
    redactor = Redactor()
    source = FixedSource(outcome.snapshot, redactor=redactor, namespace=outcome.namespace)
    server = create_server(source, SnapshotLogs(outcome.snapshot.logs), redactor=redactor)
    specs = {s.name: s for s in TOOLS}
    async with Client(server) as session:
        return await _scored(
            session, specs["problems"], {"namespace": outcome.namespace}, outcome.scenario, outcome.nodes
        )


async def _scored(
    session: Client, spec: Any, args: dict[str, Any], scenario: Scenario, node_names: dict[str, str]
) -> CallFigures:
    t0 = time.perf_counter()
    result = await session.call_tool(spec.name, args)
    ms = (time.perf_counter() - t0) * 1000
    text = _text(result)
    answer = result.structured_content or {}
    tokens = int(answer.get("tokens") or count_tokens(text))
    s = score_answer(scenario, answer, text, node_names)
    return CallFigures(
        hit=s.hit,
        root_cause=s.root_cause,
        evidence_recall=s.evidence_recall,
        rank1=s.rank1,
        tokens=tokens,
        ms=ms,
        over_budget=tokens > spec.budget.pick(None),
        error=str(answer.get("error") or "") if result.is_error else "",
        text=text,
    )


async def peer_plan(
    client: KubeClient, scenario: Scenario, namespace: str, node_names: dict[str, str]
) -> list[tuple[str, dict[str, Any]]]:
    """The fixed plan: 1. Events of the namespace; 2. its pods; 3. the expected object(s), and when that is not a
    pod, the namespace's first pods (at most three); 4. the previous log of each container, init containers
    included, that restarted or failed (at most three); 5. the related kinds of :data:`RELATED`."""
    plan: list[tuple[str, dict[str, Any]]] = [
        ("events_list", {"namespace": namespace}),
        ("pods_list_in_namespace", {"namespace": namespace}),
    ]
    kind, name = _expected(scenario, node_names)
    res = lookup_kind(kind)
    for n in await _names(client, kind, name, namespace):
        if kind == "Pod":
            plan.append(("pods_get", {"namespace": namespace, "name": n}))
        elif res is not None:
            get: dict[str, Any] = {"apiVersion": res.api_version, "kind": kind, "name": n}
            if res.namespaced:
                get["namespace"] = namespace
            plan.append(("resources_get", get))
    pods, _ = await client.list(resources.PODS, namespace=namespace)
    names = sorted(str(p["metadata"]["name"]) for p in pods)
    if kind != "Pod":  # the pods behind a Service, a Job, a node: what an agent reads next
        for pod in names[:MAX_OBJECTS]:
            plan.append(("pods_get", {"namespace": namespace, "name": pod}))
    crashed = sorted(
        (str(p["metadata"]["name"]), str(cs.get("name") or ""))
        for p in pods
        for cs in [
            *((p.get("status") or {}).get("initContainerStatuses") or []),
            *((p.get("status") or {}).get("containerStatuses") or []),
        ]
        if int(cs.get("restartCount") or 0) > 0
        or (cs.get("lastState") or {}).get("terminated")
        or ((cs.get("state") or {}).get("terminated") or {}).get("exitCode") not in (None, 0)
    )
    for pod, container in crashed[:MAX_OBJECTS]:
        plan.append(
            ("pods_log", {"namespace": namespace, "name": pod, "container": container, "previous": True})
        )
    for api, k in RELATED:
        args: dict[str, Any] = {"apiVersion": api, "kind": k}
        if k != "Node":
            args["namespace"] = namespace
        plan.append(("resources_list", args))
    return plan


async def peer_session(
    command: Sequence[str], scenario: Scenario, namespace: str, config: Path, node_names: dict[str, str]
) -> PeerRun:
    """kubernetes-mcp-server over stdio, the plan called in order until the evidence appears."""
    client = await KubeClient.from_kubeconfig(config)
    try:
        plan = await peer_plan(client, scenario, namespace, node_names)
    finally:
        await client.close()
    params = StdioServerParameters(
        command=command[0], args=[*command[1:], "--kubeconfig", str(config), "--read-only"]
    )
    seen: list[str] = []
    log: list[tuple[str, int]] = []
    evidence_at: int | None = None
    t0 = time.perf_counter()
    async with Client(params) as session:
        for i, (tool, args) in enumerate(plan, 1):
            text = _text(await session.call_tool(tool, args))
            log.append((tool, count_tokens(text)))
            asked = args.get("kind") or ("Event" if tool.startswith("events") else "Pod")
            seen.append(
                f"{asked}\n{text}"
            )  # the kind asked for, for the object-name rule of evidence_present
            cumulative = "\n".join(seen)
            if evidence_at is None and peer_evidence(scenario, cumulative):
                evidence_at = i
            if peer_found(scenario, cumulative):
                return PeerRun(tuple(log), evidence_at, i, (time.perf_counter() - t0) * 1000)
    return PeerRun(tuple(log), evidence_at, None, (time.perf_counter() - t0) * 1000)


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]


async def play(
    scenarios: Sequence[Scenario],
    kubeconfig: Path,
    log_dir: Path,
    peer: list[str] | None,
    progress: Callable[[McpRow], None] | None = None,
) -> list[McpRow]:
    live: dict[str, tuple[CallFigures, CallFigures, CallFigures | None] | str] = {}
    peers: dict[str, PeerRun | str] = {}

    async def on_state(scenario: Scenario, namespace: str, config: Path) -> None:
        node_names = {n.name: f"{namespace}-{n.name}" for n in scenario.nodes}
        try:
            live[scenario.name] = await capstan_session(
                scenario, namespace, config, node_names, runner.history
            )
        except Exception as exc:  # one scenario's failure is its row's error; the suite goes on
            live[scenario.name] = f"capstan: {_one_line(exc)}"
        if peer is None:
            return
        try:
            peers[scenario.name] = await asyncio.wait_for(
                peer_session(peer, scenario, namespace, config, node_names), 120
            )
        except Exception as exc:
            peers[scenario.name] = f"peer: {_one_line(exc)}"

    runner = Runner(kubeconfig, log_dir, on_state=on_state)
    rows: list[McpRow] = []
    for scenario in scenarios:
        outcome = await runner.run(scenario)
        try:
            history = await with_history(outcome)
        except Exception as exc:
            history = None
            live.setdefault(scenario.name, f"capstan (with history): {_one_line(exc)}")
        row = _row(outcome, live.get(scenario.name), peers.get(scenario.name), history)
        rows.append(row)
        if progress is not None:
            progress(row)
    return rows


def _row(
    outcome: Outcome,
    live: tuple[CallFigures, CallFigures, CallFigures | None] | str | None,
    peer: PeerRun | str | None,
    history: CallFigures | None,
) -> McpRow:
    s = outcome.scenario
    errors = [e for e in (outcome.setup_error, live if isinstance(live, str) else None) if e]
    problems, unscoped, diagnose = live if isinstance(live, tuple) else (CallFigures(), None, None)
    run = peer if isinstance(peer, PeerRun) else None
    if live is None and not errors:
        errors.append("the scenario's state was never live")
    return McpRow(
        scenario=s.name,
        category=s.category,
        tags=tuple(s.tags),
        problems=problems,
        diagnose=diagnose,
        with_history=history,
        unscoped=unscoped,
        diagnosis_top1=outcome.score.top1 if outcome.score is not None else None,
        peer_found=None if run is None else run.found_at is not None,
        peer_calls=None if run is None else (run.found_at or len(run.log)),
        peer_tokens=None if run is None else run.tokens_to(run.found_at),
        peer_ms=None if run is None else run.ms,
        peer_evidence_found=None if run is None else run.evidence_at is not None,
        peer_evidence_calls=None if run is None else run.evidence_at,
        peer_evidence_tokens=None
        if run is None or run.evidence_at is None
        else run.tokens_to(run.evidence_at),
        peer_log=() if run is None else run.log,
        peer_error=peer if isinstance(peer, str) else "",
        error="; ".join(errors),
    )


def play_sync(*args: object, **kwargs: object) -> list[McpRow]:
    return asyncio.run(play(*args, **kwargs))  # type: ignore[arg-type]
