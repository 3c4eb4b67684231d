"""The values the scheduling core works on: endpoints, their state snapshot, a request and a decision.

Everything here is immutable and free of I/O so that the same scheduler runs in the discrete-event harness
(virtual
clock, engine model in-process) and behind the HTTP proxy (state scraped from ``/metrics``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from capstan.kvcache import DEFAULT_BLOCK_SIZE

if TYPE_CHECKING:
    from capstan.route._plugins import SchedulingContext


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One model server replica the router may send requests to."""

    name: str
    url: str
    models: tuple[str, ...] = ()
    role: str = "both"
    kv_events: str | None = None
    """ZMQ address of the replica's KV-event publisher (``tcp://host:port``), if it publishes one."""


@dataclass(frozen=True, slots=True)
class EndpointState:
    """A snapshot of one endpoint's load signals, as last scraped (or as the simulator reports them).

    NOTE: ``in_flight`` and ``pending_prefill_tokens`` are the router's own counts (requests it sent that
    have not
    finished / whose first token has not arrived), so they are fresh even when the scrape is 100 ms old.
    """

    endpoint: Endpoint
    healthy: bool = True
    waiting: float = 0.0
    running: float = 0.0
    kv_usage: float = 0.0
    in_flight: int = 0
    pending_prefill_tokens: int = 0

    @property
    def name(self) -> str:
        return self.endpoint.name


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """What the scheduler knows about one request.

    ``block_hashes`` are the chained hashes of the prompt's full KV blocks (the ``capstan.kvcache``
    contract shared
    with the engine), ``block_size`` tokens each; ``prompt_tokens`` counts all prompt tokens.
    """

    model: str
    block_hashes: tuple[int, ...] = ()
    prompt_tokens: int = 0
    block_size: int = DEFAULT_BLOCK_SIZE
    session_id: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Decision:
    """The picked endpoint and why: the per-scorer scores and the weighted total of every candidate."""

    endpoint: EndpointState
    totals: Mapping[str, float]
    scores: Mapping[str, Mapping[str, float]]
    candidates: tuple[str, ...]
    predicted_cached_tokens: int = 0
    context: SchedulingContext | None = field(default=None, compare=False, repr=False)
    """What the scorers saw; :meth:`Scheduler.learn` hands it back to them."""
