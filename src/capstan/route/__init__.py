"""Cache-aware OpenAI-compatible routing: a scheduling core (filters → scorers → picker) and its shells.

The core (:class:`Scheduler` over :class:`EndpointState` snapshots, the prefix indexes, the plugins chosen by
``type`` in :class:`SchedulerConfig`; :func:`recommended_scheduler` is Capstan's tuned one) is pure and runs unchanged in two shells
(the precise index's :class:`InFlightOverlay` counts the blocks of requests sent and not yet confirmed):

* :class:`Router`, the HTTP gateway (``capstan route serve``): give it a :class:`RouteConfig`, an
  :class:`EndpointSource` (default: the configured endpoints; :class:`KubernetesEndpointSource` discovers serving
  pods) and an :class:`UpstreamClient` (:func:`upstream_for` builds the configured one; a fake raises
  :class:`UpstreamError` and returns :class:`UpstreamResponse` objects). :func:`serving_problem` is what it refuses
  to start with.
* :func:`simulate`, the virtual-clock harness (``capstan route simulate``): :class:`SimRequest` workloads from
  Mooncake traces (:func:`mooncake_requests`) or request files (:func:`from_replay_requests`) onto simulated
  engines, with :func:`pooled_cache_reference` as the yardstick.
"""

from typing import TYPE_CHECKING

from capstan.lazy import lazy_attributes
from capstan.route._config import (
    KubernetesDiscoveryConfig,
    ProxyConfig,
    RouteConfig,
    SchedulerConfig,
    ServedModelConfig,
    recommended_scheduler,
    serving_problem,
)
from capstan.route._index import ApproximatePrefixIndex, InFlightOverlay, PreciseKVIndex
from capstan.route._model import Decision, Endpoint, EndpointState, RouteRequest
from capstan.route._scheduler import NoEndpointError, Scheduler

# The shells pull in what the core never needs: the gateway and its upstream clients Starlette, aiohttp and httpx,
# discovery the Kubernetes client, the harness the engine simulator (and its HTTP server). They are imported on
# first use, so ``import capstan.route`` (the CLI's help, the scheduler alone) stays light.
_LAZY = {
    "EndpointSource": "capstan.route._endpoints",
    "StaticEndpointSource": "capstan.route._endpoints",
    "KubernetesEndpointSource": "capstan.route._discovery",
    "Router": "capstan.route._proxy",
    "served_models": "capstan.route._proxy",
    "UpstreamClient": "capstan.route._upstream",
    "UpstreamError": "capstan.route._upstream",
    "UpstreamResponse": "capstan.route._upstream",
    "upstream_for": "capstan.route._upstream",
    "SimRequest": "capstan.route._sim",
    "SimResult": "capstan.route._sim",
    "pooled_cache_reference": "capstan.route._sim",
    "simulate": "capstan.route._sim",
    "from_replay_requests": "capstan.route._workloads",
    "mooncake_requests": "capstan.route._workloads",
}

__getattr__ = lazy_attributes("capstan.route", _LAZY)

if TYPE_CHECKING:
    from capstan.route._discovery import KubernetesEndpointSource
    from capstan.route._endpoints import EndpointSource, StaticEndpointSource
    from capstan.route._proxy import Router, served_models
    from capstan.route._sim import SimRequest, SimResult, pooled_cache_reference, simulate
    from capstan.route._upstream import UpstreamClient, UpstreamError, UpstreamResponse, upstream_for
    from capstan.route._workloads import from_replay_requests, mooncake_requests

__all__ = [
    "ApproximatePrefixIndex",
    "Decision",
    "Endpoint",
    "EndpointSource",
    "EndpointState",
    "InFlightOverlay",
    "KubernetesDiscoveryConfig",
    "KubernetesEndpointSource",
    "NoEndpointError",
    "PreciseKVIndex",
    "ProxyConfig",
    "RouteConfig",
    "RouteRequest",
    "Router",
    "Scheduler",
    "SchedulerConfig",
    "ServedModelConfig",
    "SimRequest",
    "SimResult",
    "StaticEndpointSource",
    "UpstreamClient",
    "UpstreamError",
    "UpstreamResponse",
    "from_replay_requests",
    "mooncake_requests",
    "pooled_cache_reference",
    "recommended_scheduler",
    "served_models",
    "serving_problem",
    "simulate",
    "upstream_for",
]
