"""Cache-aware OpenAI-compatible routing: a scheduling core (filters → scorers → picker) and its shells.

The core (:class:`Scheduler`, the prefix indexes, the plugins) is pure and runs unchanged in the virtual-clock
harness (:mod:`capstan.route.sim`) and behind the HTTP proxy (:func:`build_app`).
"""

from __future__ import annotations

from capstan.route._config import (
    EndpointConfig,
    PickerConfig,
    PrefixIndexConfig,
    ProxyConfig,
    RouteConfig,
    SchedulerConfig,
)
from capstan.route._index import ApproximatePrefixIndex, PreciseKVIndex
from capstan.route._inflight import InFlightTracker
from capstan.route._kvevents import KVEventSubscriber
from capstan.route._model import Decision, Endpoint, EndpointState, RouteRequest
from capstan.route._plugins import SchedulingContext
from capstan.route._scheduler import NoEndpointError, Scheduler

__all__ = [
    "ApproximatePrefixIndex",
    "Decision",
    "Endpoint",
    "EndpointConfig",
    "EndpointState",
    "InFlightTracker",
    "KVEventSubscriber",
    "NoEndpointError",
    "PickerConfig",
    "PreciseKVIndex",
    "PrefixIndexConfig",
    "ProxyConfig",
    "RouteConfig",
    "RouteRequest",
    "Scheduler",
    "SchedulerConfig",
    "SchedulingContext",
]
