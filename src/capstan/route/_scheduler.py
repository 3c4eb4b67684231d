"""The scheduling framework: filters → weighted scorers → picker, built from :class:`SchedulerConfig`.

The :class:`Scheduler` is the pure decision core used by both the HTTP proxy and the virtual-clock harness:
it takes
a request and a snapshot of endpoint states and returns a :class:`Decision`. Its only state is the prefix
index, the
session map and a seeded RNG, all owned by the object, so two schedulers built from the same config and fed
the same
inputs decide identically.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from capstan.route._config import (
    HealthFilterConfig,
    InFlightScorerConfig,
    KVUtilizationScorerConfig,
    ModelFilterConfig,
    PrefillCostScorerConfig,
    PrefixScorerConfig,
    QueueScorerConfig,
    RoleFilterConfig,
    SchedulerConfig,
    SessionAffinityScorerConfig,
)
from capstan.route._index import ApproximatePrefixIndex, PreciseKVIndex, Rekey
from capstan.route._model import Decision, EndpointState, RouteRequest
from capstan.route._plugins import (
    Filter,
    HealthFilter,
    InFlightScorer,
    KVUtilizationScorer,
    ModelFilter,
    PrefillCostScorer,
    PrefixScorer,
    QueueScorer,
    RoleFilter,
    SchedulingContext,
    Scorer,
    SessionAffinityScorer,
)

_TIE_EPSILON = 1e-9


class NoEndpointError(Exception):
    """No endpoint survived the filters (the proxy answers 503)."""

    def __init__(self, message: str, rejected_by: str) -> None:
        super().__init__(message)
        self.rejected_by = rejected_by


def build_filter(cfg: HealthFilterConfig | ModelFilterConfig | RoleFilterConfig) -> Filter:
    if isinstance(cfg, HealthFilterConfig):
        return HealthFilter()
    if isinstance(cfg, ModelFilterConfig):
        return ModelFilter()
    return RoleFilter(cfg.roles)


def build_scorer(
    cfg: PrefixScorerConfig
    | QueueScorerConfig
    | KVUtilizationScorerConfig
    | InFlightScorerConfig
    | PrefillCostScorerConfig
    | SessionAffinityScorerConfig,
) -> Scorer:
    if isinstance(cfg, PrefixScorerConfig):
        return PrefixScorer()
    if isinstance(cfg, QueueScorerConfig):
        return QueueScorer()
    if isinstance(cfg, KVUtilizationScorerConfig):
        return KVUtilizationScorer()
    if isinstance(cfg, InFlightScorerConfig):
        return InFlightScorer()
    if isinstance(cfg, PrefillCostScorerConfig):
        return PrefillCostScorer()
    return SessionAffinityScorer(cfg.header, cfg.max_sessions)


class Scheduler:
    """Decides where each request goes. Not thread-safe: one event loop (or one simulation) drives it."""

    def __init__(self, cfg: SchedulerConfig, rekey: Rekey | None = None) -> None:
        self.cfg = cfg
        self.filters: list[Filter] = [build_filter(f) for f in cfg.filters]
        self.scorers: list[tuple[Scorer, float]] = [(build_scorer(s), s.weight) for s in cfg.scorers]
        self.approximate: ApproximatePrefixIndex | None = None
        self.precise: PreciseKVIndex | None = None
        if cfg.prefix.kind == "approximate":
            self.approximate = ApproximatePrefixIndex(cfg.prefix.capacity_per_endpoint, cfg.prefix.stride)
        elif cfg.prefix.kind == "precise":
            self.precise = PreciseKVIndex(rekey, cfg.prefix.max_blocks_per_endpoint)
        self._rng = random.Random(cfg.seed)
        self._rr = 0

    @property
    def index(self) -> ApproximatePrefixIndex | PreciseKVIndex | None:
        return self.approximate if self.approximate is not None else self.precise

    def _context(self, req: RouteRequest, endpoints: tuple[EndpointState, ...]) -> SchedulingContext:
        index = self.index
        if index is None or not req.block_hashes:
            return SchedulingContext(req, endpoints, {}, 0, req.block_size)
        keyed = index.indexed(req.block_hashes)
        stride = self.approximate.stride if self.approximate is not None else 1
        matched = index.match(req.block_hashes, (e.name for e in endpoints))
        return SchedulingContext(req, endpoints, matched, len(keyed), stride * req.block_size)

    def schedule(self, req: RouteRequest, endpoints: Sequence[EndpointState]) -> Decision:
        """Pick an endpoint for ``req``; raises :class:`NoEndpointError`. Nothing learns from the pick until
        :meth:`learn` is called with it, once the request is on its way there (llm-d's PreRequest step)."""
        candidates = tuple(sorted(endpoints, key=lambda e: e.name))
        for f in self.filters:
            kept = f.filter(SchedulingContext(req, candidates, {}, 0, req.block_size))
            if not kept:
                raise NoEndpointError(f"no endpoint left after the {f.name} filter", f.name)
            candidates = kept
        ctx = self._context(req, candidates)
        totals = dict.fromkeys((e.name for e in candidates), 0.0)
        scores: dict[str, dict[str, float]] = {}
        picker = self.cfg.picker.type
        if picker == "max-score":
            for scorer, weight in self.scorers:
                values = scorer.score(ctx)
                scores[scorer.name] = {e.name: v for e, v in zip(candidates, values, strict=True)}
                for e, v in zip(candidates, values, strict=True):
                    totals[e.name] += weight * v
            best = max(totals.values())
            tied = [e for e in candidates if totals[e.name] >= best - _TIE_EPSILON]
            chosen = tied[0] if len(tied) == 1 else self._rng.choice(tied)
        elif picker == "random":
            chosen = self._rng.choice(candidates)
        else:
            chosen = candidates[self._rr % len(candidates)]
            self._rr += 1
        return Decision(
            chosen,
            totals,
            scores,
            tuple(e.name for e in candidates),
            ctx.cached_tokens(chosen.name),
            context=ctx,
        )

    def learn(self, decision: Decision) -> None:
        """The request ``decision`` was made for went to its endpoint: session affinity remembers it, and the
        approximate index assumes the endpoint now holds the request's blocks (a cost that grows with the
        prompt, kept out of the decision itself)."""
        ctx = decision.context
        if ctx is None:
            return
        for scorer, _ in self.scorers:
            scorer.picked(ctx, decision.endpoint)
        if self.approximate is not None and ctx.request.block_hashes:
            self.approximate.record(decision.endpoint.name, ctx.request.block_hashes)
