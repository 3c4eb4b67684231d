"""The engine model on a virtual clock: latency formula, prefix caching, LRU order, batching, KV events."""

from __future__ import annotations

import random

import pytest

from capstan.enginesim import (
    Completion,
    Engine,
    EngineConfig,
    EngineRequest,
    LatencyModel,
    RequestRejected,
    admission_problem,
)
from capstan.kvcache import AllBlocksCleared, BlockRemoved, BlockStored, block_hashes

pytestmark = pytest.mark.unit

LAT = LatencyModel(step_overhead_s=0.01, prefill_s_per_token=0.001, decode_s_per_seq=0.0005)


def make(blocks: int = 100, seqs: int = 4, **kw: object) -> Engine:
    return Engine(EngineConfig(latency=LAT, num_gpu_blocks=blocks, max_num_seqs=seqs, **kw))  # type: ignore[arg-type]


def req(rid: str, tokens: list[int], out: int = 10) -> EngineRequest:
    return EngineRequest(rid, len(tokens), block_hashes(tokens), out, tokens)


def run_all(e: Engine, until: float = 1e6) -> list[Completion]:
    out: list[Completion] = []
    for _ in range(100_000):
        t = e.next_event_time()
        if t is None or t > until:
            break
        out += e.advance(t)
    return out


def test_lone_request_follows_the_formula() -> None:
    e = make()
    e.submit(req("a", list(range(100)), out=10), 1.0)
    (c,) = run_all(e)
    assert c.ttft == pytest.approx(0.01 + 100 * 0.001)
    # 9 decode steps, one decoding sequence each.
    assert c.e2e is not None and c.ttft is not None
    assert c.e2e - c.ttft == pytest.approx(9 * (0.01 + 0.0005))
    assert c.cached_tokens == 0 and c.output_tokens == 10
    assert e.counters.busy_seconds == pytest.approx(c.e2e)


def test_cached_prefix_cuts_ttft_and_counts_tokens() -> None:
    e = make()
    toks = list(range(100))
    e.submit(req("a", toks), 0.0)
    run_all(e)
    e.submit(req("b", toks), 5.0)
    (c,) = run_all(e)
    # vLLM never reuses the whole prompt: 96 of 100 tokens (6 full blocks) hit, 4 are recomputed.
    assert c.cached_tokens == 96
    assert c.ttft == pytest.approx(0.01 + 4 * 0.001)
    assert e.counters.prefix_cache_queries == 200
    assert e.counters.prefix_cache_hits == 96
    assert e.counters.prefill_tokens_computed == 104


def test_prompt_of_exact_blocks_recomputes_last_block() -> None:
    e = make()
    toks = list(range(64))
    e.submit(req("a", toks), 0.0)
    run_all(e)
    e.submit(req("b", toks), 5.0)
    (c,) = run_all(e)
    assert c.cached_tokens == 48


def test_lru_evicts_oldest_unreferenced_tail_first() -> None:
    # 10 blocks; each request: 32 prompt tokens (2 blocks) + 16 output = 3 blocks.
    e = make(blocks=10, seqs=1)
    prompts = {name: [i * 1000 + k for k in range(32)] for i, name in enumerate("abcd")}
    t = 0.0
    for name in "abc":
        e.submit(req(name, prompts[name], out=16), t)
        run_all(e)
        t += 10
    assert e.cached_blocks() == 6
    events = e.drain_kv_events()
    assert [type(ev) for ev in events] == [BlockStored] * 3
    # "d" needs 3 blocks; 10 - 6 cached = 4 empty, so nothing is evicted yet.
    e.submit(req("d", prompts["d"], out=16), t)
    run_all(e)
    assert not [ev for ev in e.drain_kv_events() if isinstance(ev, BlockRemoved)]
    # "e" (3 blocks) finds 2 empty; it evicts one block: a's tail block (oldest, released tail first).
    e.submit(req("e", [7] * 32, out=16), t + 10)
    run_all(e)
    removed = [ev for ev in e.drain_kv_events() if isinstance(ev, BlockRemoved)]
    a_hashes = block_hashes(prompts["a"])
    assert removed == [BlockRemoved([a_hashes[1]])]
    assert e.is_cached(a_hashes[0]) and not e.is_cached(a_hashes[1])


def test_hit_blocks_are_protected_from_eviction_while_referenced() -> None:
    e = make(blocks=8, seqs=2)
    shared = list(range(32))
    hs = block_hashes(shared)
    e.submit(req("a", shared, out=16), 0.0)
    run_all(e)
    # "b" hits a's first block (31 tokens at most can hit) and holds 5 blocks; "c" needs 3 of the 3 left,
    # so one cached block must go: a's second block, never the first that "b" references.
    e.submit(req("b", shared, out=40), 1.0)
    e.advance(e.next_event_time() or 1.0)
    e.drain_kv_events()
    e.submit(req("c", list(range(500, 532)), out=16), e.now)
    done = run_all(e)
    assert {c.request_id: c.cached_tokens for c in done}["b"] == 16
    assert BlockRemoved([hs[1]]) in e.drain_kv_events()
    assert e.is_cached(hs[0])


def test_max_num_seqs_queues_the_rest() -> None:
    e = make(blocks=1000, seqs=2)
    for i in range(5):
        e.submit(req(f"r{i}", [i * 100 + k for k in range(20)], out=50), 0.0)
    # The first arrival starts a step alone; the others join at its end, up to max_num_seqs.
    assert (e.load().running, e.load().waiting) == (1, 4)
    e.advance(e.next_event_time() or 0.0)
    load = e.load()
    assert (load.running, load.waiting) == (2, 3)
    assert load.kv_usage == pytest.approx(2 * 5 / 1000)
    done = run_all(e)
    assert [c.request_id for c in done][:2] == ["r0", "r1"]
    assert len(done) == 5
    ttfts = [c.ttft for c in done]
    assert ttfts[4] is not None and ttfts[0] is not None and ttfts[4] > ttfts[0]
    assert e.load().running == 0 and e.load().kv_usage == 0


def test_decode_jumps_equal_single_steps() -> None:
    rng = random.Random(7)
    plan = []
    t = 0.0
    for i in range(60):
        t += rng.expovariate(20)
        prefix = rng.choice([list(range(64)), list(range(1000, 1080)), []])
        toks = prefix + [rng.randrange(10**6) for _ in range(rng.randint(1, 90))]
        plan.append((t, req(f"r{i}", toks, out=rng.randint(1, 60))))

    def simulate(jump: int | None) -> list[Completion]:
        e = make(blocks=80, seqs=6, max_num_batched_tokens=64, max_decode_jump=jump)
        out: list[Completion] = []
        for at, r in plan:
            out += e.advance(at)
            e.submit(r, at)
        out += run_all(e)
        return out

    a, b = simulate(None), simulate(1)
    assert len(a) == 60
    assert [(c.request_id, c.cached_tokens) for c in a] == [(c.request_id, c.cached_tokens) for c in b]
    for x, y in zip(a, b, strict=True):
        assert x.finished == pytest.approx(y.finished)
        assert x.first_token == pytest.approx(y.first_token)


def test_chunked_prefill_adds_one_overhead_per_chunk() -> None:
    e = make(max_num_batched_tokens=40)
    e.submit(req("a", list(range(100)), out=1), 0.0)
    (c,) = run_all(e)
    assert c.ttft == pytest.approx(3 * 0.01 + 100 * 0.001)
    assert c.e2e == c.ttft


def test_events_chain_and_dedupe() -> None:
    e = make()
    toks = list(range(48))
    e.submit(req("a", toks), 0.0)
    # "b" arrives during a's prefill step: it hits a's first two blocks (47 tokens at most can hit) and
    # recomputes the third, which is already cached and is not stored twice.
    e.submit(req("b", toks), 0.0)
    run_all(e)
    stored = [ev for ev in e.drain_kv_events() if isinstance(ev, BlockStored)]
    hs = block_hashes(toks)
    assert stored == [BlockStored(hs[:3], None, toks, 16)]


def test_partial_store_then_continue_chain() -> None:
    e = make(max_num_batched_tokens=20)
    toks = list(range(48))
    e.submit(req("a", toks, out=1), 0.0)
    run_all(e)
    stored = [ev for ev in e.drain_kv_events() if isinstance(ev, BlockStored)]
    hs = block_hashes(toks)
    assert [(ev.block_hashes, ev.parent_block_hash) for ev in stored] == [
        ([hs[0]], None),
        ([hs[1]], hs[0]),
        ([hs[2]], hs[1]),
    ]


def test_abort_releases_blocks() -> None:
    e = make(seqs=1)
    e.submit(req("a", list(range(40)), out=100), 0.0)
    e.submit(req("b", list(range(40)), out=5), 0.0)
    e.advance(0.5)
    assert e.abort("a", 0.5)
    assert not e.abort("zzz", 0.5)
    done = run_all(e)
    assert [c.request_id for c in done] == ["a", "b"]
    assert done[0].aborted and not done[1].aborted
    assert e.load().kv_usage == 0


def test_rejects_impossible_requests_and_time_travel() -> None:
    e = make(blocks=4, max_model_len=100)
    with pytest.raises(RequestRejected, match="max_model_len"):
        e.submit(req("a", list(range(95)), out=10), 0.0)
    with pytest.raises(RequestRejected, match="KV blocks"):
        e.submit(req("a", list(range(60)), out=10), 0.0)
    with pytest.raises(RequestRejected, match="at least 1 token"):
        e.submit(req("a", list(range(10)), out=0), 0.0)
    e.advance(5.0)
    with pytest.raises(ValueError, match="backwards"):
        e.advance(4.0)


def test_submit_rejects_by_the_shared_admission_rule() -> None:
    """`admission_problem` is what `submit` raises, word for word, and nothing else is rejected."""
    e = make(blocks=4, max_model_len=100)
    for prompt, out in ((95, 10), (60, 10), (10, 0), (0, 5), (54, 10), (40, 10), (1, 1)):
        problem = admission_problem(e.config, prompt, out)
        tokens = list(range(prompt))
        if problem is None:
            e.submit(req(f"ok{prompt}", tokens, out=out), 0.0)
        else:
            with pytest.raises(RequestRejected) as info:
                e.submit(req("x", tokens, out=out), 0.0)
            assert str(info.value) == problem
    # 64 tokens fill the 4 blocks of 16 exactly; 65 need a fifth
    assert admission_problem(e.config, 54, 10) is None
    assert admission_problem(e.config, 55, 10) == "65 tokens need 5 KV blocks; the cache has 4"
    assert len(run_all(e)) == 3


def test_clear_prefix_cache_only_when_idle() -> None:
    e = make()
    e.submit(req("a", list(range(40)), out=3), 0.0)
    assert not e.clear_prefix_cache()
    run_all(e)
    e.drain_kv_events()
    assert e.clear_prefix_cache()
    assert e.drain_kv_events() == [AllBlocksCleared()]
    assert e.cached_blocks() == 0
