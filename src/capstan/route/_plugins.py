"""Filters, scorers and pickers: the scheduler runs each over one decision's snapshot (request + endpoint states).

A scorer returns one value per candidate, higher is better; the framework (:mod:`capstan.route._scheduler`) clamps
each to [0, 1], applies the weights and hands the totals to the picker, which breaks ties. No plugin names itself:
its name is the ``type`` of its configuration, and :mod:`capstan.route._config` maps each type to its
implementation. Stateful plugins (session affinity, round-robin) keep their state in an explicit object the
scheduler owns; a scorer updates it only through :meth:`Scorer.picked`, after the decision.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from capstan.route._model import EndpointState, RouteRequest


@dataclass(frozen=True, slots=True)
class SchedulingContext:
    """Everything a plugin may look at for one decision.

    ``prefix_blocks`` is the number of leading indexed blocks each candidate holds (from the configured
    prefix index,
    empty without one); ``indexed_blocks`` is how many blocks of the request the index keys on, each
    standing for
    ``tokens_per_indexed_block`` prompt tokens.
    """

    request: RouteRequest
    endpoints: tuple[EndpointState, ...]
    prefix_blocks: Mapping[str, int]
    indexed_blocks: int
    tokens_per_indexed_block: int

    def cached_tokens(self, name: str) -> int:
        return min(
            self.request.prompt_tokens, self.prefix_blocks.get(name, 0) * self.tokens_per_indexed_block
        )


_TIE_EPSILON = 1e-9


class Filter(Protocol):
    def filter(self, ctx: SchedulingContext) -> tuple[EndpointState, ...]: ...


class Scorer(Protocol):
    def score(self, ctx: SchedulingContext) -> Sequence[float]:
        """One score per ``ctx.endpoints`` entry, in the same order, meant in [0, 1] (the framework clamps it)."""
        ...

    def picked(self, ctx: SchedulingContext, chosen: EndpointState) -> None:
        """Called once after the decision (state-keeping scorers learn here; the others do nothing)."""
        ...


def _min_max_low_is_good(values: Sequence[float]) -> list[float]:
    """llm-d's normalisation: (max - v) / (max - min); all equal → 1.0 for everyone."""
    lo, hi = min(values), max(values)
    if hi - lo <= 0:
        return [1.0] * len(values)
    return [(hi - v) / (hi - lo) for v in values]


class HealthFilter:
    def filter(self, ctx: SchedulingContext) -> tuple[EndpointState, ...]:
        return tuple(e for e in ctx.endpoints if e.healthy)


class ModelFilter:
    """Endpoints serving the requested model; an endpoint that lists no models serves any."""

    def filter(self, ctx: SchedulingContext) -> tuple[EndpointState, ...]:
        model = ctx.request.model
        return tuple(e for e in ctx.endpoints if not e.endpoint.models or model in e.endpoint.models)


class RoleFilter:
    def __init__(self, roles: Sequence[str]) -> None:
        self.roles = frozenset(roles)

    def filter(self, ctx: SchedulingContext) -> tuple[EndpointState, ...]:
        return tuple(e for e in ctx.endpoints if e.endpoint.role in self.roles)


class _Stateless:
    def picked(self, ctx: SchedulingContext, chosen: EndpointState) -> None:
        return None


class PrefixScorer(_Stateless):
    """Share of the request's indexed blocks the endpoint holds as a leading run (llm-d's
    prefix-cache-scorer)."""

    def score(self, ctx: SchedulingContext) -> list[float]:
        if ctx.indexed_blocks == 0:
            return [0.0] * len(ctx.endpoints)
        return [ctx.prefix_blocks.get(e.name, 0) / ctx.indexed_blocks for e in ctx.endpoints]


class QueueScorer(_Stateless):
    """Shorter waiting queue is better, min-max normalised over the candidates (llm-d's queue-scorer)."""

    def score(self, ctx: SchedulingContext) -> list[float]:
        return _min_max_low_is_good([e.waiting for e in ctx.endpoints])


class KVUtilizationScorer(_Stateless):
    """1 - KV-cache usage (llm-d's kv-cache-utilization-scorer)."""

    def score(self, ctx: SchedulingContext) -> list[float]:
        return [1.0 - e.kv_usage for e in ctx.endpoints]


class InFlightScorer(_Stateless):
    """Fewer requests the router has in flight on the endpoint is better, min-max normalised."""

    def score(self, ctx: SchedulingContext) -> list[float]:
        return _min_max_low_is_good([float(e.in_flight) for e in ctx.endpoints])


class PrefillCostScorer(_Stateless):
    """Least prefill work ahead of this request's first token: queued prefill + this request's uncached
    tokens.

    This folds prefix reuse and load into one quantity in tokens (like Dynamo's cost), so a long cached
    prefix and a
    long queue are weighed in the same unit. Score = 1 - cost / max cost over the candidates.
    """

    def score(self, ctx: SchedulingContext) -> list[float]:
        costs = [
            float(e.pending_prefill_tokens + ctx.request.prompt_tokens - ctx.cached_tokens(e.name))
            for e in ctx.endpoints
        ]
        hi = max(costs) if costs else 0.0
        if hi <= 0:
            return [1.0] * len(costs)
        return [1.0 - c / hi for c in costs]


class SessionAffinityScorer:
    """1.0 for the endpoint that served the request's session last, 0 elsewhere; bounded LRU of sessions."""

    def __init__(self, header: str = "x-session-id", max_sessions: int = 100_000) -> None:
        self.header = header.lower()
        self.max_sessions = max_sessions
        self._last: OrderedDict[str, str] = OrderedDict()

    def _session(self, req: RouteRequest) -> str | None:
        return req.session_id or req.headers.get(self.header)

    def score(self, ctx: SchedulingContext) -> list[float]:
        sid = self._session(ctx.request)
        last = self._last.get(sid) if sid is not None else None
        return [1.0 if e.name == last else 0.0 for e in ctx.endpoints]

    def picked(self, ctx: SchedulingContext, chosen: EndpointState) -> None:
        sid = self._session(ctx.request)
        if sid is None:
            return
        self._last[sid] = chosen.name
        self._last.move_to_end(sid)
        while len(self._last) > self.max_sessions:
            self._last.popitem(last=False)


class Picker(Protocol):
    """Chooses one of the filtered candidates (sorted by name) from their weighted totals. ``needs_scores`` says
    whether the scorers run first: a picker that ignores the totals is not made to wait for them."""

    @property
    def needs_scores(self) -> bool: ...

    def pick(self, candidates: tuple[EndpointState, ...], totals: Mapping[str, float]) -> EndpointState: ...


class MaxScorePicker:
    """The highest weighted total; ties (within 1e-9) drawn with the scheduler's seeded RNG."""

    needs_scores = True

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def pick(self, candidates: tuple[EndpointState, ...], totals: Mapping[str, float]) -> EndpointState:
        best = max(totals.values())
        tied = [e for e in candidates if totals[e.name] >= best - _TIE_EPSILON]
        return tied[0] if len(tied) == 1 else self._rng.choice(tied)


class RandomPicker:
    """Any candidate, drawn with the scheduler's seeded RNG (a baseline)."""

    needs_scores = False

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def pick(self, candidates: tuple[EndpointState, ...], totals: Mapping[str, float]) -> EndpointState:
        return self._rng.choice(candidates)


class RoundRobinPicker:
    """The next candidate in turn, one counter over every decision (a baseline)."""

    needs_scores = False

    def __init__(self, rng: random.Random) -> None:
        self._turn = 0

    def pick(self, candidates: tuple[EndpointState, ...], totals: Mapping[str, float]) -> EndpointState:
        chosen = candidates[self._turn % len(candidates)]
        self._turn += 1
        return chosen
