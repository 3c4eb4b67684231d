"""Sample arguments for every MCP tool, for bench/mcp_context.py's scale mode: one table keyed by tool name.

Each entry turns the synthetic cluster's :class:`Targets` (a crashing pod, its namespace, Deployment and Service, a
node) into the arguments of one realistic call. :func:`calls_for` gives the calls for the tools the server
registers and raises :class:`MissingSample` naming every registered tool without an entry, so a tool added to the
catalog without a sample here makes the bench fail loudly instead of going unmeasured. Entries for tools not (yet)
registered are ignored (listed by :func:`unused`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Targets:
    """The objects the sample calls ask about (all exist in the snapshot)."""

    namespace: str
    pod: str
    deployment: str
    service: str
    node: str


Sample = Callable[[Targets], dict[str, Any]]

SAMPLES: Mapping[str, Sample] = {
    # cluster-wide where the tool allows it: the costliest answer at scale
    "overview": lambda t: {},
    "problems": lambda t: {},
    "events": lambda t: {"type": "Warning"},
    "diagnose": lambda t: {"kind": "Pod", "name": t.pod, "namespace": t.namespace},
    "get_resource": lambda t: {"kind": "Pod", "name": t.pod, "namespace": t.namespace, "level": "compact"},
    "list_resources": lambda t: {
        "kind": "Pod",
        "namespace": t.namespace,
        "label_selector": f"app={t.deployment}",
        "level": "summary",
    },
    "search": lambda t: {"query": t.deployment},
    "neighborhood": lambda t: {"kind": "Pod", "name": t.pod, "namespace": t.namespace},
    "logs": lambda t: {"kind": "Pod", "name": t.pod, "namespace": t.namespace, "previous": True},
    "changes": lambda t: {"kind": "Deployment", "name": t.deployment, "namespace": t.namespace},
    "timeline": lambda t: {"namespace": t.namespace},
    "restarts": lambda t: {"namespace": t.namespace},
    "engine_events": lambda t: {},
    "gpu_capacity": lambda t: {},
}


class MissingSample(Exception):
    """Registered tools without sample arguments (the bench refuses to skip them)."""


def calls_for(tools: Iterable[str], targets: Targets) -> list[tuple[str, dict[str, Any]]]:
    """``(tool, arguments)`` for every tool of ``tools``, in their order."""
    names = list(tools)
    missing = [n for n in names if n not in SAMPLES]
    if missing:
        raise MissingSample(
            f"no sample arguments for {', '.join(missing)}: add them to SAMPLES in bench/_mcp_calls.py"
        )
    return [(n, SAMPLES[n](targets)) for n in names]


def unused(tools: Iterable[str]) -> list[str]:
    """Sample entries for tools the server does not register (yet)."""
    registered = set(tools)
    return sorted(n for n in SAMPLES if n not in registered)
