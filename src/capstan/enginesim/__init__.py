"""A vLLM-compatible engine simulator: a pure engine model plus an HTTP/ZMQ shell that emulates vLLM replicas.

Core (pure, clock-injected, used by the in-process discrete-event harness and by the HTTP server alike):

* :class:`Engine` with :class:`EngineConfig` and a :class:`LatencyModel` (or a :class:`Preset`):
  ``submit(EngineRequest, now)``, ``advance(now) -> list[Completion]``, ``next_event_time()``, ``load()``,
  ``counters``, ``drain_kv_events()`` (``BlockStored`` / ``BlockRemoved`` / ``AllBlocksCleared``);
  :func:`admission_problem` is the rule by which ``submit`` raises :class:`RequestRejected`.
* Requests carry the prompt's full-block hashes, and KV events use the types and wire format, of the shared
  contract in :mod:`capstan.kvcache`.

Shell: :class:`Replica` (one emulated vLLM replica: OpenAI HTTP, ``/metrics`` with vLLM's names, ZMQ KV events)
configured by a :class:`ReplicaSpec`, :func:`running_replicas` (several replicas on loopback ports in one process)
and :func:`serve_forever` (``capstan enginesim serve``; :func:`port_conflict` is what it refuses). The shell is
imported on first use, so the engine model alone loads no HTTP stack.

See docs/enginesim.md for the model, the HTTP surface and the KV-event wire format.
"""

from typing import TYPE_CHECKING

from capstan.enginesim._engine import (
    Completion,
    Engine,
    EngineConfig,
    EngineCounters,
    EngineLoad,
    EngineRequest,
    Progress,
    RequestRejected,
    admission_problem,
)
from capstan.enginesim._latency import LatencyModel, Preset, get_preset, preset_names
from capstan.lazy import lazy_attributes

# The shell (Starlette, uvicorn, ZMQ, prometheus_client) is imported on first use: the in-process harness
# (capstan.route.simulate) and the benches that step engines directly never need it.
_LAZY = {
    "Replica": "capstan.enginesim._server",
    "ReplicaSpec": "capstan.enginesim._server",
    "port_conflict": "capstan.enginesim._serve",
    "running_replicas": "capstan.enginesim._serve",
    "serve_forever": "capstan.enginesim._serve",
}

__getattr__ = lazy_attributes("capstan.enginesim", _LAZY)

if TYPE_CHECKING:
    from capstan.enginesim._serve import port_conflict, running_replicas, serve_forever
    from capstan.enginesim._server import Replica, ReplicaSpec

__all__ = [
    "Completion",
    "Engine",
    "EngineConfig",
    "EngineCounters",
    "EngineLoad",
    "EngineRequest",
    "LatencyModel",
    "Preset",
    "Progress",
    "Replica",
    "ReplicaSpec",
    "RequestRejected",
    "admission_problem",
    "get_preset",
    "port_conflict",
    "preset_names",
    "running_replicas",
    "serve_forever",
]
