"""The scheduling framework: filters → weighted scorers → picker, built from :class:`SchedulerConfig`.

The :class:`Scheduler` is the pure decision core used by both the HTTP proxy and the virtual-clock harness: it takes
a request and a snapshot of endpoint states and returns a :class:`Decision`. Its only state is the prefix index,
the plugins' own (session map, round-robin turn) and the picker's seeded RNG, all owned by the object, so two
schedulers built from the same config and fed the same inputs decide identically. The framework, not the
scorers, clamps every score to [0, 1] and applies the weights; the picker breaks ties.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from capstan.config import plugin_for
from capstan.errors import UserError
from capstan.route._config import FILTERS, PICKERS, SCORERS, SchedulerConfig, picker_problem
from capstan.route._index import ApproximatePrefixIndex, InFlightOverlay, PreciseKVIndex, Rekey
from capstan.route._model import Decision, EndpointState, RouteRequest
from capstan.route._plugins import Filter, Picker, SchedulingContext, Scorer


class NoEndpointError(Exception):
    """No endpoint survived the filters (the proxy answers 503)."""

    def __init__(self, message: str, rejected_by: str) -> None:
        super().__init__(message)
        self.rejected_by = rejected_by


@dataclass(frozen=True, slots=True)
class WeightedScorer:
    """A scorer as the framework runs it: named by its configuration's type, with its weight."""

    name: str
    scorer: Scorer
    weight: float


class Scheduler:
    """Decides where each request goes. Not thread-safe: one event loop (or one simulation) drives it."""

    def __init__(self, cfg: SchedulerConfig, rekey: Rekey | None = None) -> None:
        """Builds every plugin ``cfg`` names through the registries of :mod:`capstan.route._config`; a type
        without an implementation is a :class:`UserError` naming its place (``scheduler.scorers.2: …``)."""
        self.cfg = cfg
        self.filters: list[tuple[str, Filter]] = [
            (f.type, plugin_for(FILTERS, f, "filter", f"scheduler.filters.{i}")(f))
            for i, f in enumerate(cfg.filters)
        ]
        self.scorers: list[WeightedScorer] = [
            WeightedScorer(s.type, plugin_for(SCORERS, s, "scorer", f"scheduler.scorers.{i}")(s), s.weight)
            for i, s in enumerate(cfg.scorers)
        ]
        pick = PICKERS.get(cfg.picker.type)
        if pick is None:
            raise UserError(f"scheduler.picker: {picker_problem(cfg.picker)}")
        self.approximate: ApproximatePrefixIndex | None = None
        self.precise: PreciseKVIndex | None = None
        if cfg.prefix.kind == "approximate":
            self.approximate = ApproximatePrefixIndex(cfg.prefix.capacity_per_endpoint, cfg.prefix.stride)
        elif cfg.prefix.kind == "precise":
            p = cfg.prefix
            overlay = InFlightOverlay(p.inflight_ttl_s, p.max_inflight_requests) if p.inflight else None
            self.precise = PreciseKVIndex(rekey, p.max_blocks_per_endpoint, overlay)
        # NOTE: one seeded RNG, the picker's: decisions are reproducible from the config's seed
        self.picker: Picker = pick(random.Random(cfg.seed))

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
        for name, f in self.filters:
            kept = f.filter(SchedulingContext(req, candidates, {}, 0, req.block_size))
            if not kept:
                raise NoEndpointError(f"no endpoint left after the {name} filter", name)
            candidates = kept
        ctx = self._context(req, candidates)
        totals = dict.fromkeys((e.name for e in candidates), 0.0)
        scores: dict[str, dict[str, float]] = {}
        if self.picker.needs_scores:
            for weighted in self.scorers:
                row: dict[str, float] = {}
                weight = weighted.weight
                for e, raw in zip(candidates, weighted.scorer.score(ctx), strict=True):
                    # NOTE: the framework's clamp to [0, 1] (NaN becomes 0: max keeps its first argument); the
                    # usual in-range value skips the two builtin calls (a measurable share of a decision)
                    value = raw if 0.0 < raw <= 1.0 else min(1.0, max(0.0, raw))
                    row[e.name] = value
                    totals[e.name] += weight * value
                scores[weighted.name] = row
        chosen = self.picker.pick(candidates, totals)
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
        for weighted in self.scorers:
            weighted.scorer.picked(ctx, decision.endpoint)
        if self.approximate is not None and ctx.request.block_hashes:
            self.approximate.record(decision.endpoint.name, ctx.request.block_hashes)

    def sending(self, decision: Decision, ticket: int, now: float) -> None:
        """The shell is sending ``decision``'s request to its endpoint as ``ticket`` (its own unique id) at
        ``now`` (its clock): the precise index's in-flight overlay counts the request's blocks as on their way
        there until the engine's events confirm them or :meth:`settle` is called with ``ticket``. Called before
        the request leaves, so a request waiting in the engine's queue is already known; a shell that sent it
        must settle it on every way out (answered, failed, refused). No overlay: nothing to do."""
        ctx = decision.context
        if self.precise is not None and ctx is not None and ctx.request.block_hashes:
            self.precise.sent(ticket, decision.endpoint.name, ctx.request.block_hashes, now)

    def settle(self, ticket: int) -> None:
        """The request sent as ``ticket`` is answered, failed or was refused: its blocks leave the in-flight
        overlay (the KV events have the truth from now on). Unknown tickets are ignored."""
        if self.precise is not None:
            self.precise.settle(ticket)
