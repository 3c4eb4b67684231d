"""The router's YAML configuration, parsed strictly: an unknown plugin type or key fails at start.

Each filter, scorer and picker type is spelled once, as the ``type`` literal of its configuration model, and wired
to its implementation once, in :data:`FILTERS`, :data:`SCORERS` and :data:`PICKERS`; a configuration type without an
entry there fails validation with one line rather than being built as some other plugin.

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

import random
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from capstan.config import Plugin, StrictModel, plugin_problem, plugin_registry
from capstan.kube import parse_label_selector
from capstan.kvcache import DEFAULT_BLOCK_SIZE
from capstan.route._plugins import (
    Filter,
    HealthFilter,
    InFlightScorer,
    KVUtilizationScorer,
    MaxScorePicker,
    ModelFilter,
    Picker,
    PrefillCostScorer,
    PrefixScorer,
    QueueScorer,
    RandomPicker,
    RoleFilter,
    RoundRobinPicker,
    Scorer,
    SessionAffinityScorer,
)

Role = Literal["both", "prefill", "decode"]
"""What an endpoint serves: whole requests, or one side of disaggregated prefill/decode (llm-d's roles)."""

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _without_password(url: str) -> str:
    """``scheme://user:***@host…``: a URL as an error message may show it."""
    scheme, sep, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    if not sep or not at:
        return url
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}{slash}{path}"


def check_endpoint_url(url: str) -> str:
    """An upstream's base URL: http(s), a host, a valid port, no credentials, query or fragment (the router
    appends /v1/..., /health and /metrics to it). Returns it without a trailing slash; ValueError says why not."""
    shown = _without_password(url)
    try:
        parts = urlsplit(url)
        port = parts.port  # a bad port raises here
    except ValueError as exc:
        raise ValueError(f"{shown!r} is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{shown!r} is not an http(s) URL")
    if not parts.hostname:
        raise ValueError(f"{shown!r} has no host")
    if port == 0:
        raise ValueError(f"{shown!r}: port 0 is not a TCP port")
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            f"{shown!r}: credentials in the URL are not supported (they would reach logs and metrics)"
        )
    if parts.query or parts.fragment:
        raise ValueError(f"{shown!r}: a base URL has no query or fragment")
    return url.rstrip("/")


def check_kv_events_address(address: str) -> str:
    """A ZMQ address the router can connect its SUB socket to: ``tcp://HOST:PORT`` or ``ipc://PATH``."""
    scheme, sep, rest = address.partition("://")
    if not sep or scheme not in ("tcp", "ipc"):
        raise ValueError(f"{address!r} is not a ZMQ address (tcp://HOST:PORT or ipc://PATH)")
    if scheme == "ipc":
        if not rest:
            raise ValueError(f"{address!r}: no path")
        return address
    host, colon, port = rest.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not colon or not host or host == "*" or any(c in host for c in "/ "):
        raise ValueError(f"{address!r}: expected tcp://HOST:PORT with a host to connect to")
    if not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{address!r}: {port!r} is not a TCP port")
    return address


class EndpointConfig(StrictModel):
    name: str = Field(min_length=1, max_length=253)
    url: str
    models: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    role: Role = "both"
    kv_events: str | None = Field(
        default=None,
        description="ZMQ endpoint of this replica's KV-event publisher, e.g. tcp://127.0.0.1:5557",
    )

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        return check_endpoint_url(v)

    @field_validator("kv_events")
    @classmethod
    def _kv_events(cls, v: str | None) -> str | None:
        return None if v is None else check_kv_events_address(v)


class KubernetesDiscoveryConfig(StrictModel):
    """Endpoints discovered as Running, Ready pods selected by labels (``discovery.kubernetes``)."""

    namespace: str = Field(min_length=1)
    selector: str = Field(min_length=1, description="label selector of the serving pods, e.g. app=vllm")

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        if not _DNS_LABEL.fullmatch(v):
            raise ValueError(
                f"{v!r} is not a namespace name (lower-case letters, digits and '-', at most 63)"
            )
        return v

    @field_validator("selector")
    @classmethod
    def _selector(cls, v: str) -> str:
        parse_label_selector(
            v
        )  # a ValueError names the bad part; the API server would refuse it at every list
        return v

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


class _FilterBase(StrictModel):
    @model_validator(mode="after")
    def _implemented(self) -> _FilterBase:
        problem = plugin_problem(FILTERS, self, "filter")
        if problem is not None:
            raise ValueError(problem)
        return self


class HealthFilterConfig(_FilterBase):
    type: Literal["health"]


class ModelFilterConfig(_FilterBase):
    type: Literal["model"]


def _default_roles() -> list[Role]:
    return ["both", "decode"]


class RoleFilterConfig(_FilterBase):
    type: Literal["role"]
    roles: list[Role] = Field(default_factory=_default_roles, min_length=1)


FilterConfig = Annotated[
    HealthFilterConfig | ModelFilterConfig | RoleFilterConfig, Field(discriminator="type")
]


class _WeightedScorer(StrictModel):
    weight: float = Field(default=1.0, ge=0)

    @model_validator(mode="after")
    def _implemented(self) -> _WeightedScorer:
        problem = plugin_problem(SCORERS, self, "scorer")
        if problem is not None:
            raise ValueError(problem)
        return self


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


def _role_filter(cfg: RoleFilterConfig) -> Filter:
    return RoleFilter(cfg.roles)


def _session_affinity_scorer(cfg: SessionAffinityScorerConfig) -> Scorer:
    return SessionAffinityScorer(cfg.header, cfg.max_sessions)


FilterFactory = Callable[[Any], Filter]
ScorerFactory = Callable[[Any], Scorer]

# NOTE: one entry per model of FilterConfig / ScorerConfig, none for anything else (tests/unit/route pins it)
FILTERS: Mapping[str, Plugin[FilterFactory]] = plugin_registry(
    (HealthFilterConfig, lambda _: HealthFilter()),
    (ModelFilterConfig, lambda _: ModelFilter()),
    (RoleFilterConfig, _role_filter),
)
SCORERS: Mapping[str, Plugin[ScorerFactory]] = plugin_registry(
    (PrefixScorerConfig, lambda _: PrefixScorer()),
    (QueueScorerConfig, lambda _: QueueScorer()),
    (KVUtilizationScorerConfig, lambda _: KVUtilizationScorer()),
    (InFlightScorerConfig, lambda _: InFlightScorer()),
    (PrefillCostScorerConfig, lambda _: PrefillCostScorer()),
    (SessionAffinityScorerConfig, _session_affinity_scorer),
)


class PrefixIndexConfig(StrictModel):
    kind: Literal["none", "approximate", "precise"] = "approximate"
    capacity_per_endpoint: int = Field(
        default=31250, ge=1, description="approximate: LRU entries per endpoint"
    )
    stride: int = Field(
        default=4, ge=1, description="approximate: index every k-th block (k × block_size tokens)"
    )
    max_blocks_per_endpoint: int = Field(default=4_000_000, ge=1, description="precise: memory guard")
    inflight: bool = Field(
        default=True,
        description="precise: also count the blocks of requests sent and not yet answered (the in-flight "
        "overlay), so that affinity holds while an engine's queue builds",
    )
    inflight_ttl_s: float = Field(
        default=600.0, gt=0, description="precise: an in-flight request's blocks expire after this long"
    )
    max_inflight_requests: int = Field(
        default=65_536,
        ge=1,
        description="precise: in-flight requests the overlay remembers (oldest go first)",
    )


PickerType = Literal["max-score", "random", "round-robin"]

# NOTE: one entry per PickerType (a picker has no settings of its own, so one model with a literal per name keeps
# `picker: {}` meaning max-score); each factory takes the scheduler's seeded RNG
PICKERS: Mapping[PickerType, Callable[[random.Random], Picker]] = {
    "max-score": MaxScorePicker,
    "random": RandomPicker,
    "round-robin": RoundRobinPicker,
}


class PickerConfig(StrictModel):
    type: PickerType = "max-score"

    @model_validator(mode="after")
    def _implemented(self) -> PickerConfig:
        problem = picker_problem(self)
        if problem is not None:
            raise ValueError(problem)
        return self


def picker_problem(cfg: PickerConfig) -> str | None:
    """Why ``cfg`` names no picker of :data:`PICKERS` (None: it names one)."""
    if cfg.type in PICKERS:
        return None
    return f"picker type {cfg.type!r} has no implementation (implemented: {', '.join(PICKERS)})"


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
    block_size: int = Field(default=DEFAULT_BLOCK_SIZE, ge=1)
    prefix: PrefixIndexConfig = PrefixIndexConfig()
    filters: list[FilterConfig] = Field(default_factory=_default_filters)
    scorers: list[ScorerConfig] = Field(default_factory=_default_scorers)
    picker: PickerConfig = PickerConfig()


def recommended_scheduler() -> SchedulerConfig:
    """Capstan's recommended scheduler: the precise prefix index (fed by the engines' KV events) scored by
    prefix 3 + prefill-cost 1, the tuning of docs/route.md ("Tuning"). A bare :class:`SchedulerConfig` keeps
    llm-d's weights over the approximate index, so that a file without scorers behaves like that baseline.

    NOTE: the one definition: ``capstan route simulate`` without ``--config`` and the benches' ``capstan-precise``
    policy use it."""
    return SchedulerConfig(
        prefix=PrefixIndexConfig(kind="precise"),
        scorers=[
            PrefixScorerConfig(type="prefix", weight=3),
            PrefillCostScorerConfig(type="prefill-cost", weight=1),
        ],
    )


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
        description="streaming requests: the longest wait for the response headers and between two chunks "
        "(before the first token, while the endpoint answers its health checks, up to read_timeout_s: a busy "
        "engine is queueing); then the stream ends with an error event and the endpoint is marked unhealthy",
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


class ServedModelConfig(StrictModel):
    """A model served by real vLLM engines: the gateway tokenizes its requests with the model's own tokenizer and
    chat template and keys their blocks with vLLM's hash chain, so a precise index learns from the engines' KV
    events (docs/route.md, "In front of vLLM"). Models not listed use Capstan's contract (the engine simulator)."""

    name: str = Field(min_length=1, description="the model name requests give (vLLM's --served-model-name)")
    tokenizer: Path = Field(description="the model's tokenizer.json")
    tokenizer_config: Path | None = Field(
        default=None, description="the model's tokenizer_config.json: its chat_template and special tokens"
    )
    chat_template: Path | None = Field(
        default=None, description="a chat template file, as vLLM's --chat-template (wins over the config's)"
    )
    hash_algo: str = Field(default="sha256", description="the engines' --prefix-caching-hash-algo")
    hash_seed: str = Field(
        min_length=1,
        description="the engines' PYTHONHASHSEED: without it vLLM seeds its block hashes at random and no one "
        "outside the engine can compute them",
    )
    lora_adapters: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list,
        description="names of LoRA adapters served on this model (vLLM's --lora-modules): a request for one "
        "is tokenized as the model and its blocks keyed with the adapter's name",
    )

    @field_validator("hash_algo")
    @classmethod
    def _known_algo(cls, v: str) -> str:
        from capstan.kvcache import HASH_ALGOS

        if v not in HASH_ALGOS:
            raise ValueError(f"unknown hash algorithm {v!r} (vLLM's: {', '.join(HASH_ALGOS)})")
        return v


class RouteConfig(StrictModel):
    endpoints: list[EndpointConfig] = Field(default_factory=list)
    discovery: DiscoveryConfig | None = None
    scheduler: SchedulerConfig = SchedulerConfig()
    proxy: ProxyConfig = ProxyConfig()
    models: list[ServedModelConfig] = Field(
        default_factory=list, description="models served by real vLLM engines (their tokenizer and hashing)"
    )

    @model_validator(mode="after")
    def _endpoints_are_distinct(self) -> RouteConfig:
        # NOTE: the prefix index, the in-flight counts and the metrics are keyed by endpoint name, and a KV-event
        # publisher feeds the one endpoint it is given to: two endpoints sharing any of these would mix their
        # caches and their load.
        for what, values in (
            ("names", [e.name for e in self.endpoints]),
            ("URLs", [e.url for e in self.endpoints]),
            ("kv_events addresses", [e.kv_events for e in self.endpoints if e.kv_events]),
        ):
            twice = sorted({v for v in values if values.count(v) > 1})
            if twice:
                raise ValueError(
                    f"endpoint {what} must be distinct: {', '.join(map(str, twice))} given twice"
                )
        if self.endpoints and self.discovery is not None:
            raise ValueError("give either 'endpoints' or 'discovery', not both")
        names = [m.name for m in self.models] + [a for m in self.models for a in m.lora_adapters]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"models: each model and adapter name once: {', '.join(twice)} given twice")
        return self


def serving_problem(cfg: RouteConfig) -> str | None:
    """Why ``route serve`` cannot route with ``cfg`` (None: it can); ``route check`` says the same."""
    if not cfg.endpoints and cfg.discovery is None:
        return "no endpoints: give an 'endpoints' list or 'discovery.kubernetes' (or --endpoint URL)"
    if (
        cfg.scheduler.prefix.kind == "precise"
        and cfg.endpoints
        and not any(e.kv_events for e in cfg.endpoints)
    ):
        return (
            "scheduler.prefix.kind precise: no endpoint has 'kv_events', so the precise index would stay empty "
            "(give each endpoint its KV-event publisher, or use kind approximate)"
        )
    if cfg.discovery is not None:
        k = cfg.discovery.kubernetes
        if cfg.scheduler.prefix.kind == "precise" and k.kv_events_port is None and not k.kv_events_annotation:
            return "scheduler.prefix.kind precise: discovery.kubernetes gives no KV-event publisher (kv_events_port)"
    return None
