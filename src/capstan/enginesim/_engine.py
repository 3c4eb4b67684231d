"""A pure, clock-injected model of one vLLM engine: paged KV cache with prefix caching, continuous batching.

Every method takes the current time (model seconds) as an argument; nothing reads a clock, sleeps or does I/O.
The in-process discrete-event harness steps it on a virtual clock (``submit`` / ``next_event_time`` /
``advance``); the HTTP server drives the very same object in real time. Facts for the outside world (KV events,
token progress) go into outboxes that one drainer empties.

Model, per engine step (one forward pass), after vLLM v1's scheduler:

* the running batch (at most ``max_num_seqs``) gets one decode token per decoding sequence, then prefill chunks
  in admission order within ``max_num_batched_tokens``; the waiting queue is admitted FCFS while a slot, token
  budget and KV blocks are free (the head of the queue blocks the rest, as in vLLM);
* admission looks up the longest cached prefix of the prompt's full-block hashes (at most ``prompt_len - 1``
  tokens, as vLLM always recomputes the last token), references those blocks and reserves blocks for the rest of
  the prompt **and** the requested output (no preemption is modelled: what is admitted always finishes);
* prompt blocks become cached (``BlockStored``) as soon as a chunk completes them; a hash that another running
  request already stored is not stored twice; blocks of generated tokens are never cached;
* finished (or aborted) sequences release their blocks; cached blocks whose reference count drops to zero join
  an LRU list, tail blocks first, so a prompt's deepest blocks are evicted before its head; allocation takes
  empty blocks first, then evicts from the LRU list (``BlockRemoved``);
* a step lasts :meth:`LatencyModel.step_time`; its effects apply at its end (the first token of a request is
  produced by the step that completes its prefill). Runs of identical decode-only steps are applied in one jump
  (cut short at the next arrival), which keeps whole-trace simulation fast and exact.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from capstan.enginesim._latency import LatencyModel
from capstan.kvcache import DEFAULT_BLOCK_SIZE, AllBlocksCleared, BlockRemoved, BlockStored, KVEvent


@dataclass(frozen=True)
class EngineConfig:
    """Static shape of one engine."""

    latency: LatencyModel
    num_gpu_blocks: int
    block_size: int = DEFAULT_BLOCK_SIZE
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 131072
    max_decode_jump: int | None = None
    """Most identical decode steps applied at once (``None``: unbounded). The HTTP server bounds it so streamed
    tokens arrive in small groups."""
    track_progress: bool = False
    """Record token progress of every request in an outbox (:meth:`Engine.drain_progress`), for streaming."""

    def __post_init__(self) -> None:
        if self.num_gpu_blocks <= 0 or self.block_size <= 0 or self.max_num_seqs <= 0:
            raise ValueError("num_gpu_blocks, block_size and max_num_seqs must be positive")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError("max_num_batched_tokens must be at least max_num_seqs")


@dataclass(frozen=True)
class EngineRequest:
    """One request as the engine sees it. ``block_hashes`` are the full-block hashes of the prompt
    (:func:`capstan.kvcache.block_hashes`); ``token_ids`` (optional) only feed the ``BlockStored`` events."""

    request_id: str
    prompt_len: int
    block_hashes: Sequence[int]
    max_tokens: int
    token_ids: Sequence[int] | None = None
    assume_cached_blocks: int = 0
    """Leading prompt blocks to count as cached whether or not this engine's cache holds them (their KV is then
    stored as if computed): the cache-bound optimum of ``capstan.route``'s simulator, where every request finds
    all that any earlier request computed. 0 for every real request."""


@dataclass(frozen=True)
class Completion:
    """A finished (or aborted) request, times in model seconds."""

    request_id: str
    arrival: float
    first_token: float | None
    finished: float
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    aborted: bool = False

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.arrival

    @property
    def e2e(self) -> float:
        return self.finished - self.arrival


@dataclass(frozen=True)
class Progress:
    """``request_id`` has produced ``tokens`` output tokens by ``at`` (first token: ``tokens == 1``)."""

    request_id: str
    at: float
    tokens: int
    cached_tokens: int
    finished: bool


@dataclass(frozen=True)
class EngineLoad:
    """Load signals as vLLM's ``/metrics`` exposes them."""

    running: int
    waiting: int
    kv_usage: float
    num_gpu_blocks: int
    block_size: int


@dataclass
class EngineCounters:
    """Monotonic counters (tokens, requests, busy GPU-seconds in model time)."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    prefill_tokens_computed: int = 0
    requests_finished: int = 0
    requests_aborted: int = 0
    steps: int = 0
    busy_seconds: float = 0.0


class RequestRejected(ValueError):
    """The request can never run on this engine (too long for the model or for the whole KV cache)."""


def admission_problem(config: EngineConfig, prompt_len: int, max_tokens: int) -> str | None:
    """Why an engine of ``config`` can never run a request of ``prompt_len`` + ``max_tokens`` tokens, or None.

    NOTE: the one admission rule: :meth:`Engine.submit` raises :class:`RequestRejected` with this text, and the
    routing harness's cache references (``capstan.route.pooled_cache_reference``) leave out the same requests.
    """
    if prompt_len <= 0 or max_tokens <= 0:
        return "prompt and max_tokens must each be at least 1 token"
    total = prompt_len + max_tokens
    if total > config.max_model_len:
        return (
            f"prompt ({prompt_len}) + max_tokens ({max_tokens}) = {total} tokens exceeds "
            f"max_model_len {config.max_model_len}"
        )
    blocks = -(-total // config.block_size)
    if blocks > config.num_gpu_blocks:
        return f"{total} tokens need {blocks} KV blocks; the cache has {config.num_gpu_blocks}"
    return None


@dataclass
class _Seq:
    req: EngineRequest
    arrival: float
    anon: int = 0  # private blocks: not (or not yet) cached
    hashed: list[int] = field(default_factory=list)  # cached blocks this sequence references
    stored_upto: int = 0  # prompt blocks already hashed into the cache (or found there)
    cached_tokens: int = 0
    computed: int = 0
    generated: int = 0
    first_token: float | None = None

    @property
    def prefilling(self) -> bool:
        return self.computed < self.req.prompt_len


@dataclass
class _Step:
    start: float
    duration: float
    repeats: int
    prefill: list[tuple[_Seq, int]]
    decode: list[_Seq]

    @property
    def end(self) -> float:
        return self.start + self.duration * self.repeats


class Engine:
    """One simulated engine. Create it with a config, then ``submit``/``advance`` with non-decreasing times."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.counters = EngineCounters()
        self._waiting: deque[_Seq] = deque()
        self._running: list[_Seq] = []
        self._ids: set[str] = set()
        self._refs: dict[int, int] = {}  # cached block hash -> reference count
        self._lru: OrderedDict[int, None] = OrderedDict()  # cached blocks with no reference, oldest first
        self._used = 0  # physical blocks in use: private blocks + cached blocks with references
        self._step: _Step | None = None
        self._now = 0.0
        self._events: list[KVEvent] = []
        self._progress: list[Progress] = []
        self._done: list[Completion] = []

    # ---- queries -------------------------------------------------------------------------------------------
    @property
    def now(self) -> float:
        return self._now

    def load(self) -> EngineLoad:
        c = self.config
        return EngineLoad(
            running=len(self._running),
            waiting=len(self._waiting),
            kv_usage=self._used / c.num_gpu_blocks,
            num_gpu_blocks=c.num_gpu_blocks,
            block_size=c.block_size,
        )

    def cached_blocks(self) -> int:
        """Number of blocks holding a cached prefix (referenced or not)."""
        return len(self._refs)

    def is_cached(self, block_hash: int) -> bool:
        return block_hash in self._refs

    def peek_hit_tokens(self, block_hashes: Sequence[int], prompt_len: int) -> int:
        """Tokens of the prompt a request submitted now would find cached (no state change)."""
        return self._hit_blocks(block_hashes, prompt_len) * self.config.block_size

    def next_event_time(self) -> float | None:
        """When the current step ends (the next moment state changes by itself), or None when idle."""
        return None if self._step is None else self._step.end

    # ---- outboxes ------------------------------------------------------------------------------------------
    def drain_kv_events(self) -> list[KVEvent]:
        out, self._events = self._events, []
        return out

    def drain_progress(self) -> list[Progress]:
        out, self._progress = self._progress, []
        return out

    # ---- commands ------------------------------------------------------------------------------------------
    def submit(self, req: EngineRequest, now: float) -> None:
        """Queue ``req`` arriving at ``now`` (applies every step that ends by ``now`` first)."""
        c = self.config
        if req.request_id in self._ids:
            raise ValueError(f"duplicate request id {req.request_id!r}")
        problem = admission_problem(c, req.prompt_len, req.max_tokens)
        if problem is not None:
            raise RequestRejected(problem)
        self._advance_to(now)
        self._ids.add(req.request_id)
        self._waiting.append(_Seq(req=req, arrival=now))
        if self._step is None:
            self._start_step(now)
        else:
            self._cut_jump(now)

    def advance(self, now: float) -> list[Completion]:
        """Apply every step that ends by ``now``; return the requests that finished, in finishing order."""
        self._advance_to(now)
        out, self._done = self._done, []
        return out

    def abort(self, request_id: str, now: float) -> bool:
        """Drop a waiting or running request (client went away); returns whether it was known."""
        self._advance_to(now)
        for seq in self._waiting:
            if seq.req.request_id == request_id:
                self._waiting.remove(seq)
                self._finish(seq, now, aborted=True)
                return True
        for seq in self._running:
            if seq.req.request_id == request_id:
                if self._step is not None:
                    self._forget_in_step(seq)
                self._running.remove(seq)
                self._release(seq)
                self._finish(seq, now, aborted=True)
                if self._step is None and (self._running or self._waiting):
                    self._start_step(now)
                return True
        return False

    def clear_prefix_cache(self) -> bool:
        """Drop every unreferenced cached block (vLLM's reset_prefix_cache); only when nothing is running."""
        if self._running or self._step is not None:
            return False
        self._lru.clear()
        self._refs.clear()
        self._events.append(AllBlocksCleared())
        return True

    # ---- internals -----------------------------------------------------------------------------------------
    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.config.block_size)

    def _hit_blocks(self, hashes: Sequence[int], prompt_len: int) -> int:
        limit = min(len(hashes), (prompt_len - 1) // self.config.block_size)
        n = 0
        refs = self._refs
        while n < limit and hashes[n] in refs:
            n += 1
        return n

    def _advance_to(self, now: float) -> None:
        if now < self._now:
            raise ValueError(f"time went backwards: {now} < {self._now}")
        # NOTE: bounded: each pass applies one step; a step lasts > 0 unless the latency model is all zeros,
        # in which case at most one step per request state change can happen at the same instant.
        limit = 4 * (len(self._running) + len(self._waiting) + 1) * (self.config.max_num_batched_tokens + 2)
        for _ in range(limit):
            step = self._step
            if step is None or step.end > now:
                break
            self._apply(step)
            self._step = None
            if self._running or self._waiting:
                self._start_step(step.end)
        self._now = now

    def _try_admit(self, seq: _Seq) -> bool:
        c = self.config
        req = seq.req
        hit = self._hit_blocks(req.block_hashes, req.prompt_len)
        # blocks past the cached run counted as computed all the same (the optimum's assumption): private blocks
        # now, stored into the cache by _store_blocks as computed ones are
        assumed = max(
            hit, min(req.assume_cached_blocks, len(req.block_hashes), (req.prompt_len - 1) // c.block_size)
        )
        total = self._blocks_for(req.prompt_len + req.max_tokens)
        hit_hashes = list(req.block_hashes[:hit])
        refs = self._refs
        unreferenced_hits = sum(1 for h in hit_hashes if refs[h] == 0)
        if c.num_gpu_blocks - self._used - unreferenced_hits < total - hit:
            return False
        for h in hit_hashes:
            if refs[h] == 0:
                del self._lru[h]
                self._used += 1
            refs[h] += 1
        seq.hashed = hit_hashes
        seq.stored_upto = hit
        seq.anon = total - hit
        self._used += seq.anon
        seq.cached_tokens = assumed * c.block_size
        seq.computed = seq.cached_tokens
        # Allocating the private blocks may evict unreferenced cached blocks, oldest first.
        evict = self._used + len(self._lru) - c.num_gpu_blocks
        if evict > 0:
            removed = [self._lru.popitem(last=False)[0] for _ in range(evict)]
            for h in removed:
                del refs[h]
            self._events.append(BlockRemoved(block_hashes=removed))
        self.counters.prefix_cache_queries += req.prompt_len
        self.counters.prefix_cache_hits += seq.cached_tokens
        self.counters.prompt_tokens += req.prompt_len
        return True

    def _start_step(self, start: float) -> None:
        c = self.config
        budget = c.max_num_batched_tokens
        decode = [s for s in self._running if not s.prefilling]
        budget -= len(decode)
        prefill: list[tuple[_Seq, int]] = []
        for s in self._running:
            if s.prefilling and budget > 0:
                chunk = min(budget, s.req.prompt_len - s.computed)
                prefill.append((s, chunk))
                budget -= chunk
        while self._waiting and len(self._running) < c.max_num_seqs and budget > 0:
            head = self._waiting[0]
            if not self._try_admit(head):
                break
            self._waiting.popleft()
            self._running.append(head)
            chunk = min(budget, head.req.prompt_len - head.computed)
            prefill.append((head, chunk))
            budget -= chunk
        if not prefill and not decode:
            return
        prefill_tokens = sum(n for _, n in prefill)
        duration = c.latency.step_time(prefill_tokens, len(decode))
        repeats = 1
        if not prefill:
            repeats = min(s.req.max_tokens - s.generated for s in decode)
            if c.max_decode_jump is not None:
                repeats = min(repeats, c.max_decode_jump)
            repeats = max(1, repeats)
        self._step = _Step(start=start, duration=duration, repeats=repeats, prefill=prefill, decode=decode)

    def _cut_jump(self, now: float) -> None:
        """A new arrival joins at the next step boundary: shorten a run of identical decode steps."""
        step = self._step
        if step is None or step.repeats == 1 or step.duration <= 0:
            return
        done = int((now - step.start) // step.duration) + 1
        step.repeats = max(1, min(step.repeats, done))

    def _forget_in_step(self, seq: _Seq) -> None:
        step = self._step
        assert step is not None
        step.prefill = [(s, n) for s, n in step.prefill if s is not seq]
        step.decode = [s for s in step.decode if s is not seq]

    def _apply(self, step: _Step) -> None:
        end = step.end
        self.counters.steps += step.repeats
        self.counters.busy_seconds += step.duration * step.repeats
        finished: list[_Seq] = []
        for seq, chunk in step.prefill:
            seq.computed += chunk
            self.counters.prefill_tokens_computed += chunk
            self._store_blocks(seq)
            if not seq.prefilling:
                seq.generated = 1
                seq.first_token = end
                self.counters.generation_tokens += 1
                self._note_progress(seq, end)
                if seq.generated >= seq.req.max_tokens:
                    finished.append(seq)
        for seq in step.decode:
            seq.generated += step.repeats
            self.counters.generation_tokens += step.repeats
            self._note_progress(seq, end)
            if seq.generated >= seq.req.max_tokens:
                finished.append(seq)
        for seq in finished:
            self._running.remove(seq)
            self._release(seq)
            self._finish(seq, end, aborted=False)

    def _store_blocks(self, seq: _Seq) -> None:
        bs = self.config.block_size
        hashes = seq.req.block_hashes
        first = seq.stored_upto
        upto = min(len(hashes), seq.computed // bs)
        if upto <= first:
            return
        seq.stored_upto = upto
        refs = self._refs
        ids = seq.req.token_ids
        stored: list[int] = []
        tokens: list[int] = []
        run_parent: int | None = None
        for i in range(first, upto):
            h = hashes[i]
            if h in refs:
                # NOTE: another request cached the same block meanwhile; as in vLLM, this sequence keeps its
                # own copy private (uncached) and the event run is cut here.
                if stored:
                    self._events.append(BlockStored(stored, run_parent, tokens, bs))
                    stored, tokens = [], []
                continue
            refs[h] = 1
            seq.anon -= 1
            seq.hashed.append(h)
            if not stored:
                run_parent = hashes[i - 1] if i > 0 else None
            stored.append(h)
            if ids is not None:
                tokens.extend(ids[i * bs : (i + 1) * bs])
        if stored:
            self._events.append(BlockStored(stored, run_parent, tokens, bs))

    def _release(self, seq: _Seq) -> None:
        # Tail blocks first, so that the head of a prompt stays cached longest.
        refs = self._refs
        for h in reversed(seq.hashed):
            n = refs.get(h)
            if n is None:
                continue
            n -= 1
            refs[h] = n
            if n == 0:
                self._used -= 1
                self._lru[h] = None
        self._used -= seq.anon
        seq.anon = 0
        seq.hashed = []

    def _finish(self, seq: _Seq, at: float, *, aborted: bool) -> None:
        self._ids.discard(seq.req.request_id)
        if aborted:
            self.counters.requests_aborted += 1
        else:
            self.counters.requests_finished += 1
        if self.config.track_progress and aborted:
            self._progress.append(
                Progress(seq.req.request_id, at, seq.generated, seq.cached_tokens, finished=True)
            )
        self._done.append(
            Completion(
                request_id=seq.req.request_id,
                arrival=seq.arrival,
                first_token=seq.first_token,
                finished=at,
                prompt_tokens=seq.req.prompt_len,
                cached_tokens=seq.cached_tokens,
                output_tokens=seq.generated,
                aborted=aborted,
            )
        )

    def _note_progress(self, seq: _Seq, at: float) -> None:
        if self.config.track_progress:
            self._progress.append(
                Progress(
                    seq.req.request_id,
                    at,
                    seq.generated,
                    seq.cached_tokens,
                    finished=seq.generated >= seq.req.max_tokens,
                )
            )
