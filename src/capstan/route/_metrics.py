"""The router's own Prometheus metrics, in a registry owned by the app object (never the default one)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_BUCKETS = (2.5e-5, 5e-5, 1e-4, 2e-4, 3e-4, 5e-4, 7.5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 5e-2)


class RouterMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.decision_seconds = Histogram(
            "capstan_route_decision_seconds",
            "Time to pick an endpoint: filters + scorers + picker over the snapshot",
            buckets=_BUCKETS,
            registry=r,
        )
        self.learn_seconds = Histogram(
            "capstan_route_learn_seconds",
            "Time to learn from a pick once the endpoint accepted the request: session affinity and the "
            "approximate prefix index's recording (grows with the prompt)",
            buckets=_BUCKETS,
            registry=r,
        )
        self.prompt_hash_seconds = Histogram(
            "capstan_route_prompt_hash_seconds",
            "Time to tokenize the prompt and hash its blocks (before the decision)",
            buckets=_BUCKETS,
            registry=r,
        )
        self.requests = Counter(
            "capstan_route_requests_total", "Requests forwarded, per endpoint", ["endpoint"], registry=r
        )
        self.errors = Counter(
            "capstan_route_errors_total",
            "Upstream failures and abandoned answers, per endpoint and kind: connect (refused, reset or no "
            "connection before the answer), timeout (no answer within the read or stall timeout), status (the "
            "endpoint answered 5xx), stream (it broke a stream), stall (a stream sent nothing for the stall "
            "timeout), client_disconnect (the client left before the answer ended)",
            ["endpoint", "kind"],
            registry=r,
        )
        self.rejected = Counter(
            "capstan_route_rejected_total",
            "Requests answered by the router itself, per HTTP status and reason (the error body's code)",
            ["status", "reason"],
            registry=r,
        )
        self.responses = Counter(
            "capstan_route_responses_total",
            "Answers to /v1 requests per HTTP status, relayed or the router's own (499: the client left first)",
            ["status"],
            registry=r,
        )
        self.prompt_tokens = Counter(
            "capstan_route_prompt_tokens_total", "Prompt tokens of routed requests", registry=r
        )
        self.predicted_cached_tokens = Counter(
            "capstan_route_predicted_cached_tokens_total",
            "Prompt tokens the prefix index predicted to be cached on the chosen endpoint; "
            "predicted hit ratio = this / capstan_route_prompt_tokens_total",
            registry=r,
        )
        self.index_entries = Gauge(
            "capstan_route_prefix_index_entries", "Entries in the prefix index", registry=r
        )
        self.index_bytes = Gauge(
            "capstan_route_prefix_index_bytes", "Estimated memory of the prefix index", registry=r
        )
        self.endpoint_healthy = Gauge(
            "capstan_route_endpoint_healthy",
            "1 if the endpoint passed its last health check",
            ["endpoint"],
            registry=r,
        )
        self.kv_event_batches = Counter(
            "capstan_route_kv_event_batches_total",
            "KV-event batches applied, per endpoint",
            ["endpoint"],
            registry=r,
        )
