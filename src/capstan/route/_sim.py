"""The in-process discrete-event harness: the router's :class:`Scheduler` over simulated engines, on a virtual clock.

No HTTP and no sleeping: requests arrive at their trace times, the scheduler picks an endpoint from a snapshot that
is refreshed every ``scrape_interval_s`` (as the proxy's monitor does) plus the router's own in-flight counts, and
the chosen :class:`capstan.enginesim.Engine` is stepped on the same virtual clock. KV events go straight from the
engines' outboxes into the precise index (the ZMQ hop is not modelled: its delay is milliseconds against a
75 ms scrape). A whole one-hour trace runs in seconds to minutes, and the decisions are the ones the live proxy
would take, because it is the same scheduler code.

:func:`pooled_cache_reference` is the yardstick for hit ratios: one LRU cache holding ``total_blocks`` (all
replicas' capacity), fed the requests in arrival order: what routing without duplicated blocks could reach.
With ``total_blocks=None`` it is the infinite-cache bound. Given the engines' configuration it leaves out the
requests they reject, by the engine's own rule, as the simulated engines' counters do.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from capstan.enginesim import Engine, EngineConfig, EngineRequest, RequestRejected, admission_problem
from capstan.kvcache import DEFAULT_BLOCK_SIZE
from capstan.percentile import percentile
from capstan.route._config import SchedulerConfig
from capstan.route._inflight import InFlightTracker
from capstan.route._model import Endpoint, EndpointState, RouteRequest
from capstan.route._scheduler import Scheduler


@dataclass(frozen=True, slots=True)
class SimRequest:
    """One request of a workload, already reduced to what router and engine need."""

    arrival: float
    request_id: str
    block_hashes: Sequence[int]
    prompt_tokens: int
    output_tokens: int
    session_id: str | None = None
    think_s: float | None = None
    """Closed loop: arrive ``think_s`` after the previous request of the session finished (``arrival`` is then
    only the open-loop fallback). None: arrive at ``arrival``."""


@dataclass
class ReplicaStats:
    name: str
    prefill_tokens: int
    busy_seconds: float
    hits: int
    queries: int
    requests: int


@dataclass
class SimResult:
    policy: str
    requests: int
    rejected: int
    ttft: list[float]
    e2e: list[float]
    output_tokens: int
    makespan_s: float
    replicas: list[ReplicaStats]
    decision_s: list[float]
    index_entries: int
    index_bytes: int
    predicted_cached_tokens: int = 0
    extra: dict[str, float] = field(default_factory=dict)
    learn_s: list[float] = field(default_factory=list)
    """Time :meth:`Scheduler.learn` took after each decision (the approximate index's recording)."""

    @property
    def hit_ratio(self) -> float:
        q = sum(r.queries for r in self.replicas)
        return sum(r.hits for r in self.replicas) / q if q else 0.0

    @property
    def gpu_seconds_per_request(self) -> float:
        return sum(r.busy_seconds for r in self.replicas) / max(1, len(self.ttft))

    @property
    def prefill_imbalance(self) -> float:
        """Busiest replica's prefill tokens over the mean."""
        work = [r.prefill_tokens for r in self.replicas]
        mean = sum(work) / len(work) if work else 0
        return max(work) / mean if mean else 0.0

    @property
    def throughput_tok_s(self) -> float:
        return self.output_tokens / self.makespan_s if self.makespan_s > 0 else 0.0


def simulate(
    requests: Sequence[SimRequest],
    policy: SchedulerConfig,
    engine: EngineConfig,
    replicas: int = 8,
    *,
    name: str = "policy",
    model: str = "sim",
    scrape_interval_s: float = 0.075,
    clock: Callable[[], float] = time.perf_counter,
    quiet_decisions: int = 0,
    assume_cached: Mapping[str, int] | None = None,
) -> SimResult:
    """Replay ``requests`` (sorted by arrival) through the scheduler onto ``replicas`` engines.

    ``assume_cached`` (request id → leading blocks): each request counts that many blocks as cached wherever it
    goes. Given the infinite-cache bound's (:func:`pooled_cache_reference` with ``total_blocks=None``, its
    ``blocks_hit``) this is the cache-bound optimum: every request finds all that any earlier request computed, and
    its busy GPU-seconds are the least any routing could reach.

    ``quiet_decisions`` > 0: afterwards, time that many decisions again against the final state, each repeated
    five times keeping the fastest, which removes the preemption noise of a shared machine from the figure
    (``SimResult.extra["quiet_decision_s"]`` holds them joined as p50/p99 in ``quiet_p50_s``/``quiet_p99_s``).
    """
    names = [f"r{i}" for i in range(replicas)]
    endpoints = {n: Endpoint(n, f"sim://{n}", (model,)) for n in names}
    engines = {n: Engine(replace(engine, track_progress=True)) for n in names}
    sched = Scheduler(policy)
    tracker = InFlightTracker()
    tickets: dict[str, tuple[str, int]] = {}
    per_replica_requests = dict.fromkeys(names, 0)
    ttft: list[float] = []
    e2e: list[float] = []
    decision_s: list[float] = []
    learn_s: list[float] = []
    output_tokens = 0
    rejected = 0
    predicted = 0
    last_finish = 0.0
    loads = {n: engines[n].load() for n in names}

    def drain(n: str) -> None:
        nonlocal output_tokens, last_finish
        eng = engines[n]
        if sched.precise is not None:
            events = eng.drain_kv_events()
            if events:
                sched.precise.apply(n, events)
        else:
            eng.drain_kv_events()
        for p in eng.drain_progress():
            t = tickets.get(p.request_id)
            if t is not None and p.tokens >= 1:
                tracker.first_token(t[1])

    def advance(n: str, now: float) -> None:
        nonlocal output_tokens, last_finish
        done = engines[n].advance(now)
        drain(n)
        for c in done:
            t = tickets.pop(c.request_id, None)
            if t is not None:
                tracker.finish(t[1])
                sched.settle(t[1])
            if c.ttft is not None:
                ttft.append(c.ttft)
            e2e.append(c.e2e)
            on_finish.append((c.request_id, c.finished))
            output_tokens += c.output_tokens
            last_finish = max(last_finish, c.finished)

    # Arrivals: open-loop requests at their times; a closed-loop turn is released when its predecessor finishes.
    heap: list[tuple[float, int, SimRequest]] = []
    follow: dict[str, SimRequest] = {}  # request id -> the session's next closed-loop request
    last_of_session: dict[str, SimRequest] = {}
    for i, r in enumerate(requests):
        prev = last_of_session.get(r.session_id) if r.session_id is not None else None
        if r.think_s is not None and prev is not None:
            follow[prev.request_id] = r
        else:
            heapq.heappush(heap, (r.arrival, i, r))
        if r.session_id is not None:
            last_of_session[r.session_id] = r
    seq = len(requests)
    on_finish: list[tuple[str, float]] = []

    def release() -> None:
        nonlocal seq
        for rid, at in on_finish:
            nxt = follow.pop(rid, None)
            if nxt is not None:
                heapq.heappush(heap, (at + (nxt.think_s or 0.0), seq, nxt))
                seq += 1
        on_finish.clear()

    next_scrape = 0.0
    start = min((r.arrival for r in requests), default=0.0)
    inf = math.inf
    # NOTE: bounded: every pass consumes an arrival, a scrape tick or an engine step, each finite in number.
    for _ in range(1_000_000_000):
        t_arr = heap[0][0] if heap else inf
        if follow:  # closed-loop turns wait on completions: process engine steps in time order
            t_eng, n_eng = min(
                ((t, n) for n in names if (t := engines[n].next_event_time()) is not None), default=(inf, "")
            )
            if t_eng <= min(t_arr, next_scrape):
                advance(n_eng, t_eng)
                release()
                continue
            if not heap and t_eng == inf:
                break  # cannot happen while every chain's head is queued or running; guards the loop
        if not heap and not follow:
            break
        if next_scrape <= t_arr:
            for n in names:
                advance(n, next_scrape)
                loads[n] = engines[n].load()
            next_scrape += scrape_interval_s
            release()
            continue
        now, _, req = heapq.heappop(heap)
        for n in names:
            advance(n, now)
        release()
        states = [
            EndpointState(
                endpoints[n],
                healthy=True,
                waiting=loads[n].waiting,
                running=loads[n].running,
                kv_usage=loads[n].kv_usage,
                in_flight=tracker.in_flight.get(n, 0),
                pending_prefill_tokens=tracker.pending_prefill.get(n, 0),
            )
            for n in names
        ]
        rreq = RouteRequest(
            model=model,
            block_hashes=req.block_hashes,  # type: ignore[arg-type]
            prompt_tokens=req.prompt_tokens,
            block_size=engine.block_size,
            session_id=req.session_id,
        )
        t0 = clock()
        decision = sched.schedule(rreq, states)
        decision_s.append(clock() - t0)
        chosen = decision.endpoint.name
        predicted += decision.predicted_cached_tokens
        # as the proxy does: counted as in flight (and its blocks in the overlay) before it leaves
        tid = tracker.start(chosen, req.prompt_tokens - decision.predicted_cached_tokens)
        sched.sending(decision, tid, now)
        try:
            engines[chosen].submit(
                EngineRequest(
                    req.request_id,
                    req.prompt_tokens,
                    req.block_hashes,
                    req.output_tokens,
                    assume_cached_blocks=assume_cached.get(req.request_id, 0) if assume_cached else 0,
                ),
                now,
            )
        except RequestRejected:
            tracker.finish(tid)
            sched.settle(tid)
            rejected += 1
            on_finish.append((req.request_id, now))
            release()
            continue
        t0 = clock()  # accepted: learn from the pick, as the proxy does
        sched.learn(decision)
        learn_s.append(clock() - t0)
        per_replica_requests[chosen] += 1
        tickets[req.request_id] = (chosen, tid)
        drain(chosen)
    # Run every engine dry.
    for _ in range(10_000_000):  # bounded: each pass finishes at least one step
        pending = [(t, n) for n in names if (t := engines[n].next_event_time()) is not None]
        if not pending:
            break
        t, n = min(pending)
        advance(n, t)
    extra: dict[str, float] = {}
    if quiet_decisions > 0 and requests:
        final = [EndpointState(endpoints[n], kv_usage=engines[n].load().kv_usage) for n in names]
        step = max(1, len(requests) // quiet_decisions)
        quiet: list[float] = []
        for req in requests[::step][:quiet_decisions]:
            rreq = RouteRequest(model, req.block_hashes, req.prompt_tokens, engine.block_size, req.session_id)  # type: ignore[arg-type]
            best = math.inf
            for _ in range(5):
                t0 = clock()
                sched.schedule(rreq, final)
                best = min(best, clock() - t0)
            quiet.append(best)
        extra = {"quiet_p50_s": percentile(quiet, 50), "quiet_p99_s": percentile(quiet, 99)}
    index = sched.index
    stats = [
        ReplicaStats(
            n,
            engines[n].counters.prefill_tokens_computed,
            engines[n].counters.busy_seconds,
            engines[n].counters.prefix_cache_hits,
            engines[n].counters.prefix_cache_queries,
            per_replica_requests[n],
        )
        for n in names
    ]
    return SimResult(
        policy=name,
        requests=len(requests),
        rejected=rejected,
        ttft=ttft,
        e2e=e2e,
        output_tokens=output_tokens,
        makespan_s=max(0.0, last_finish - start),
        replicas=stats,
        decision_s=decision_s,
        learn_s=learn_s,
        index_entries=index.size if index is not None else 0,
        index_bytes=index.approx_bytes if index is not None else 0,
        predicted_cached_tokens=predicted,
        extra=extra,
    )


@dataclass(frozen=True)
class ReferenceResult:
    hits: int
    queries: int
    rejected: int = 0
    """Requests left out: the engine would reject them (:func:`capstan.enginesim.admission_problem`)."""
    blocks_hit: dict[str, int] = field(default_factory=dict)
    """Per request id, the leading blocks it found cached (the requests counted only)."""

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


def pooled_cache_reference(
    requests: Sequence[SimRequest],
    total_blocks: int | None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    *,
    engine: EngineConfig | None = None,
) -> ReferenceResult:
    """Hit ratio of one LRU cache of ``total_blocks`` (None: infinite) fed the requests in arrival order.

    Hits follow the engine's rule: the longest cached run of leading blocks, at most ``(prompt - 1) // block_size``
    blocks (the last token is always recomputed). After each request its blocks are touched tail first, so the head
    of a prompt is the most recently used, as the engine's release order does.

    ``engine``: the replicas' configuration. The requests one of its engines would reject (the engine's own
    :func:`~capstan.enginesim.admission_problem`: longer than the context, or than one replica's whole cache) reach
    no cache in :func:`simulate` and count in none of its hit ratios, so they are left out here too (counted in
    ``rejected``). None: every request counts.
    """
    if engine is not None and engine.block_size != block_size:
        raise ValueError(f"block_size {block_size} is not the engine's {engine.block_size}")
    lru: OrderedDict[int, None] = OrderedDict()
    hits = queries = rejected = 0
    blocks_hit: dict[str, int] = {}
    for req in requests:
        if engine is not None and admission_problem(engine, req.prompt_tokens, req.output_tokens) is not None:
            rejected += 1
            continue
        limit = min(len(req.block_hashes), (req.prompt_tokens - 1) // block_size)
        n = 0
        while n < limit and req.block_hashes[n] in lru:
            n += 1
        blocks_hit[req.request_id] = n
        hits += n * block_size
        queries += req.prompt_tokens
        for h in reversed(req.block_hashes):
            if h in lru:
                lru.move_to_end(h)
            else:
                lru[h] = None
        if total_blocks is not None:
            while len(lru) > total_blocks:
                lru.popitem(last=False)
    return ReferenceResult(hits, queries, rejected, blocks_hit)
