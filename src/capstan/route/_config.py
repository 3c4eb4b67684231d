"""The router's YAML configuration, parsed strictly: an unknown plugin type or key fails at start.

Example (``docs/route.md`` has the full reference)::

    endpoints:
      - {name: r0, url: "http://127.0.0.1:8100", models: [sim-llama]}
    scheduler:
      seed: 0
      prefix: {kind: approximate, capacity_per_endpoint: 31250, stride: 4}
      filters: [{type: health}, {type: model}]
      scorers:
        - {type: prefix, weight: 3}
        - {type: queue, weight: 2}
        - {type: kv-utilization, weight: 2}
      picker: {type: max-score}
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from capstan.config import StrictModel


class EndpointConfig(StrictModel):
    name: str
    url: str
    models: list[str] = Field(default_factory=list)
    role: str = "both"
    kv_events: str | None = Field(
        default=None,
        description="ZMQ endpoint of this replica's KV-event publisher, e.g. tcp://127.0.0.1:5557",
    )


class KubernetesDiscoveryConfig(StrictModel):
    """Endpoints discovered as Running, Ready pods selected by labels (``discovery.kubernetes``)."""

    namespace: str = Field(min_length=1)
    selector: str = Field(min_length=1, description="label selector of the serving pods, e.g. app=vllm")
    port: int = Field(default=8000, ge=1, le=65535)
    scheme: Literal["http", "https"] = "http"
    models: list[str] = Field(
        default_factory=list, description="models every pod serves (or the label below)"
    )
    model_label: str = "capstan.io/model"
    role_label: str = "capstan.io/role"
    url_annotation: str = Field(
        default="capstan.io/url",
        description="a pod annotation that overrides <scheme>://<podIP>:<port> (pods behind a port-forward)",
    )
    kv_events_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="port of each pod's KV-event publisher (vLLM --kv-events-config): tcp://<podIP>:<port>",
    )
    kv_events_annotation: str = Field(
        default="capstan.io/kv-events",
        description="a pod annotation with its KV-event publisher's address; overrides kv_events_port",
    )


class DiscoveryConfig(StrictModel):
    kubernetes: KubernetesDiscoveryConfig


class HealthFilterConfig(StrictModel):
    type: Literal["health"]


class ModelFilterConfig(StrictModel):
    type: Literal["model"]


class RoleFilterConfig(StrictModel):
    type: Literal["role"]
    roles: list[str] = Field(default_factory=lambda: ["both", "decode"])


FilterConfig = Annotated[
    HealthFilterConfig | ModelFilterConfig | RoleFilterConfig, Field(discriminator="type")
]


class _WeightedScorer(StrictModel):
    weight: float = Field(default=1.0, ge=0)


class PrefixScorerConfig(_WeightedScorer):
    type: Literal["prefix"]


class QueueScorerConfig(_WeightedScorer):
    type: Literal["queue"]


class KVUtilizationScorerConfig(_WeightedScorer):
    type: Literal["kv-utilization"]


class InFlightScorerConfig(_WeightedScorer):
    type: Literal["in-flight"]


class PrefillCostScorerConfig(_WeightedScorer):
    type: Literal["prefill-cost"]


class SessionAffinityScorerConfig(_WeightedScorer):
    type: Literal["session-affinity"]
    header: str = "x-session-id"
    max_sessions: int = Field(default=100_000, ge=1)


ScorerConfig = Annotated[
    PrefixScorerConfig
    | QueueScorerConfig
    | KVUtilizationScorerConfig
    | InFlightScorerConfig
    | PrefillCostScorerConfig
    | SessionAffinityScorerConfig,
    Field(discriminator="type"),
]


class PrefixIndexConfig(StrictModel):
    kind: Literal["none", "approximate", "precise"] = "approximate"
    capacity_per_endpoint: int = Field(
        default=31250, ge=1, description="approximate: LRU entries per endpoint"
    )
    stride: int = Field(
        default=4, ge=1, description="approximate: index every k-th block (k × block_size tokens)"
    )
    max_blocks_per_endpoint: int = Field(default=4_000_000, ge=1, description="precise: memory guard")


class PickerConfig(StrictModel):
    type: Literal["max-score", "random", "round-robin"] = "max-score"


def _default_filters() -> list[FilterConfig]:
    return [HealthFilterConfig(type="health"), ModelFilterConfig(type="model")]


def _default_scorers() -> list[ScorerConfig]:
    """llm-d's built-in default weights: prefix 3, queue 2, KV utilisation 2."""
    return [
        PrefixScorerConfig(type="prefix", weight=3),
        QueueScorerConfig(type="queue", weight=2),
        KVUtilizationScorerConfig(type="kv-utilization", weight=2),
    ]


class SchedulerConfig(StrictModel):
    seed: int = 0
    block_size: int = Field(default=16, ge=1)
    prefix: PrefixIndexConfig = PrefixIndexConfig()
    filters: list[FilterConfig] = Field(default_factory=_default_filters)
    scorers: list[ScorerConfig] = Field(default_factory=_default_scorers)
    picker: PickerConfig = PickerConfig()


class ProxyConfig(StrictModel):
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1)
    connect_timeout_s: float = Field(default=2.0, gt=0, allow_inf_nan=False)
    read_timeout_s: float = Field(
        default=300.0,
        gt=0,
        allow_inf_nan=False,
        description="non-streaming requests: the longest wait for the upstream's answer (the whole generation)",
    )
    stall_timeout_s: float = Field(
        default=15.0,
        gt=0,
        allow_inf_nan=False,
        description="streaming requests: the longest wait for the response headers and between two chunks; "
        "then the stream ends with an error event and the endpoint is marked unhealthy",
    )
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        allow_inf_nan=False,
        description="a client's request headers must be complete this long after the connection opened (or "
        "after the request's first byte on a kept-alive connection), else the connection is closed",
    )
    body_timeout_s: float = Field(
        default=60.0,
        gt=0,
        allow_inf_nan=False,
        description="a client's request body must arrive within this, else 408 and the connection is closed",
    )
    max_attempts: int = Field(
        default=3, ge=1, description="endpoints tried when one fails before the first byte"
    )
    upstream_client: Literal["aiohttp", "httpx"] = Field(
        default="aiohttp", description="HTTP client for upstream requests (see bench/route_http.py)"
    )
    poll_interval_s: float = Field(default=0.075, ge=0.01, le=10)
    poll_timeout_s: float = Field(default=0.5, gt=0)
    unhealthy_after_failures: int = Field(default=2, ge=1)


class RouteConfig(StrictModel):
    endpoints: list[EndpointConfig] = Field(default_factory=list)
    discovery: DiscoveryConfig | None = None
    scheduler: SchedulerConfig = SchedulerConfig()
    proxy: ProxyConfig = ProxyConfig()
