"""Resources (cluster health, recent problems) and prompts (troubleshoot a workload, a pending GPU pod, what
changed before a failure) of the MCP server. Resources are tool answers under a fixed URI; prompts are text that
steers an agent through the tools in the order that finds a root cause in the fewest calls."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from capstan.jsontext import dumps

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from capstan.mcp._server import ToolRunner
    from capstan.mcp._tool import ToolSpec

RESOURCES = {
    "capstan://cluster/health": (
        "overview",
        "Cluster health: counts, unhealthy workloads, Warning groups, GPUs.",
    ),
    "capstan://cluster/problems": ("problems", "The analyzers' ranked findings (first page)."),
}


def register_resources(server: MCPServer[Any], runner: ToolRunner, specs: Mapping[str, ToolSpec]) -> None:
    for uri, (tool, description) in RESOURCES.items():
        spec = specs.get(tool)
        if spec is None:
            continue

        def make(spec: ToolSpec = spec) -> Any:
            async def read() -> str:
                answer, _ = await runner.answer(spec, {})
                return dumps(answer)

            return read

        server.resource(
            uri, name=uri.rsplit("/", 1)[-1], description=description, mime_type="application/json"
        )(make())


def register_prompts(server: MCPServer[Any]) -> None:
    @server.prompt(name="troubleshoot_workload", title="Troubleshoot a workload")
    def troubleshoot_workload(kind: str, name: str, namespace: str = "default") -> str:
        """Find why a workload (Deployment, StatefulSet, DaemonSet, Job or Pod) is not healthy."""
        return (
            f"Find the root cause of why {kind}/{name} in namespace {namespace} is not healthy. Call `diagnose` "
            f"with kind={kind!r}, name={name!r}, namespace={namespace!r} first: it returns the findings, spec, "
            "status, logs, Warning events and recent changes in one answer. If the cause is outside the object, "
            "follow `neighborhood` (owners, Services, volumes, node) and `problems` for the namespace. Name the root "
            "cause, cite the evidence (field, event or log line), and say which recorded change came before it."
        )

    @server.prompt(name="gpu_pod_pending", title="Why is this GPU pod pending")
    def gpu_pod_pending(name: str, namespace: str = "default") -> str:
        """Explain why a pod that asks for GPUs is not running."""
        return (
            f"Explain why the GPU pod {name} in namespace {namespace} is pending. Call `diagnose` with kind='Pod', "
            f"name={name!r}, namespace={namespace!r}, then `gpu_capacity` for GPUs by model (allocatable, "
            "allocated, idle), pending GPU pods and what the autoscaler or planner has in flight. Distinguish: no "
            "GPUs of that model free, a resource name no node advertises (MIG profile), a device plugin down, an "
            "untolerated taint or a selector no node matches, and capacity already on its way."
        )

    @server.prompt(name="what_changed", title="What changed before this broke")
    def what_changed(kind: str, name: str, namespace: str = "default", window_seconds: int = 3600) -> str:
        """List what changed around an object before it failed."""
        return (
            f"Find what changed before {kind}/{name} in namespace {namespace} broke. Call `changes` for the object "
            f"and `timeline` for namespace {namespace!r} over the last {window_seconds} seconds, then `restarts` "
            "and `events` for the same window. Order the changes in time against the first failure and say which "
            "change most likely caused it, quoting its diff."
        )
