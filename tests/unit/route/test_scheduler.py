"""The scheduling core without a network: filters, scorers, picker, indexes, KV-event decoding."""

from __future__ import annotations

import msgpack
import pytest

from capstan.config import load_model
from capstan.errors import UserError
from capstan.kvcache import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEvent,
    KVEventFormatError,
    Tokenizer,
    block_hashes,
    decode_kv_batch,
    encode_kv_batch,
)
from capstan.route import (
    ApproximatePrefixIndex,
    Endpoint,
    EndpointState,
    NoEndpointError,
    PreciseKVIndex,
    RouteConfig,
    RouteRequest,
    Scheduler,
    SchedulerConfig,
)
from capstan.route._inflight import InFlightTracker
from capstan.route._plugins import (
    KVUtilizationScorer,
    PrefillCostScorer,
    QueueScorer,
    SchedulingContext,
    SessionAffinityScorer,
)

pytestmark = pytest.mark.unit


def states(n: int, **kw: float) -> list[EndpointState]:
    return [EndpointState(Endpoint(f"r{i}", f"http://127.0.0.1:{9000 + i}", ("m",))) for i in range(n)]


def sched(**cfg: object) -> Scheduler:
    return Scheduler(load_model(SchedulerConfig, dict(cfg), "test"))


def req(hashes: list[int], prompt_tokens: int | None = None, **kw: object) -> RouteRequest:
    return RouteRequest(
        model="m",
        block_hashes=tuple(hashes),
        prompt_tokens=len(hashes) * 16 if prompt_tokens is None else prompt_tokens,
        **kw,  # type: ignore[arg-type]
    )


def test_unknown_key_and_unknown_plugin_fail_with_one_line() -> None:
    with pytest.raises(UserError, match=r"route.yaml: scheduler.scorers.0.prefix.wieght"):
        load_model(RouteConfig, {"scheduler": {"scorers": [{"type": "prefix", "wieght": 3}]}}, "route.yaml")
    with pytest.raises(UserError, match=r"route.yaml: scheduler.scorers.0"):
        load_model(RouteConfig, {"scheduler": {"scorers": [{"type": "magic"}]}}, "route.yaml")
    with pytest.raises(UserError, match=r"endpoints.0.url"):
        load_model(RouteConfig, {"endpoints": [{"name": "a"}]}, "route.yaml")


def test_defaults_are_llmd_weights() -> None:
    cfg = SchedulerConfig()
    assert [(s.type, s.weight) for s in cfg.scorers] == [("prefix", 3), ("queue", 2), ("kv-utilization", 2)]


def test_approximate_index_sends_a_shared_prefix_back_to_the_same_endpoint() -> None:
    s = sched(prefix={"kind": "approximate", "stride": 1})
    eps = states(4)
    d = s.schedule(req([1, 2, 3, 4]), eps)
    first = d.endpoint.name
    s.learn(d)
    for i in range(5):
        d = s.schedule(req([1, 2, 3, 4, 100 + i]), eps)
        s.learn(d)
        assert d.endpoint.name == first
        assert d.predicted_cached_tokens == 4 * 16


def test_nothing_is_learnt_from_a_pick_until_it_is_sent() -> None:
    """A pick whose request never reaches its endpoint (the send failed) teaches the index nothing."""
    s = sched(prefix={"kind": "approximate", "stride": 1})
    eps = states(4)
    unsent = s.schedule(req([1, 2, 3, 4]), eps)
    assert s.approximate is not None and s.approximate.size == 0
    again = s.schedule(req([1, 2, 3, 4]), eps)
    assert again.predicted_cached_tokens == 0
    s.learn(unsent)
    assert s.approximate.size == 4
    learnt = s.schedule(req([1, 2, 3, 4]), eps)
    assert learnt.endpoint.name == unsent.endpoint.name
    assert learnt.predicted_cached_tokens == 4 * 16


def test_load_outweighs_a_small_prefix_match() -> None:
    s = sched(prefix={"kind": "approximate", "stride": 1})
    s.approximate.record("r0", [1])  # type: ignore[union-attr]
    eps = [
        EndpointState(Endpoint("r0", "u", ("m",)), waiting=10, kv_usage=0.9),
        EndpointState(Endpoint("r1", "u", ("m",)), waiting=0, kv_usage=0.1),
    ]
    # r0 has 1/10 of the prefix: 3*0.1 + 0 + 2*0.1 = 0.5 against 0 + 2 + 2*0.9 = 3.8
    d = s.schedule(req([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]), eps)
    assert d.endpoint.name == "r1"
    assert d.totals["r0"] == pytest.approx(0.5)
    assert d.totals["r1"] == pytest.approx(3.8)


def test_ties_are_broken_by_the_seeded_rng_reproducibly() -> None:
    picks_a = [sched(seed=7).schedule(req([]), states(8)).endpoint.name for _ in range(1)]
    s1, s2, s3 = sched(seed=7), sched(seed=7), sched(seed=8)
    seq1 = [s1.schedule(req([i]), states(8)).endpoint.name for i in range(40)]
    seq2 = [s2.schedule(req([i]), states(8)).endpoint.name for i in range(40)]
    seq3 = [s3.schedule(req([i]), states(8)).endpoint.name for i in range(40)]
    assert seq1 == seq2
    assert seq1 != seq3
    assert len(set(seq1)) > 4  # spreads cold requests
    assert picks_a[0] == seq1[0]


def test_input_order_of_endpoints_does_not_change_the_decision() -> None:
    a = sched(seed=3).schedule(req([5]), states(5)).endpoint.name
    b = sched(seed=3).schedule(req([5]), list(reversed(states(5)))).endpoint.name
    assert a == b


def test_filters_reject_unhealthy_wrong_model_and_role() -> None:
    eps = [
        EndpointState(Endpoint("a", "u", ("m",)), healthy=False),
        EndpointState(Endpoint("b", "u", ("other",))),
        EndpointState(Endpoint("c", "u", ("m",), role="prefill")),
        EndpointState(Endpoint("d", "u", ("m",))),
    ]
    s = sched(filters=[{"type": "health"}, {"type": "model"}, {"type": "role", "roles": ["both"]}])
    assert {s.schedule(req([i]), eps).endpoint.name for i in range(10)} == {"d"}
    with pytest.raises(NoEndpointError) as err:
        s.schedule(req([1]), eps[:1])
    assert err.value.rejected_by == "health"
    with pytest.raises(NoEndpointError, match="model"):
        s.schedule(RouteRequest(model="nope"), eps[1:])


def test_round_robin_and_random_pickers() -> None:
    rr = sched(picker={"type": "round-robin"}, prefix={"kind": "none"})
    assert [rr.schedule(req([]), states(3)).endpoint.name for _ in range(6)] == ["r0", "r1", "r2"] * 2
    r1 = sched(picker={"type": "random"}, seed=1)
    r2 = sched(picker={"type": "random"}, seed=1)
    assert [r1.schedule(req([]), states(8)).endpoint.name for _ in range(20)] == [
        r2.schedule(req([]), states(8)).endpoint.name for _ in range(20)
    ]


def ctx(
    eps: list[EndpointState], prefix: dict[str, int] | None = None, r: RouteRequest | None = None
) -> SchedulingContext:
    return SchedulingContext(r or req([1, 2, 3, 4]), tuple(eps), prefix or {}, 4, 16)


def test_queue_scorer_min_max_and_all_equal() -> None:
    eps = [EndpointState(Endpoint(f"e{i}", "u"), waiting=w) for i, w in enumerate([0, 5, 10])]
    assert QueueScorer().score(ctx(eps)) == [1.0, 0.5, 0.0]
    same = [EndpointState(Endpoint(f"e{i}", "u"), waiting=3) for i in range(3)]
    assert QueueScorer().score(ctx(same)) == [1.0, 1.0, 1.0]


def test_kv_utilization_scores_are_clamped_by_the_framework() -> None:
    usage = [0.0, 0.25, 1.5, -1.0, float("nan")]
    eps = [EndpointState(Endpoint(f"e{i}", "u", ("m",)), kv_usage=u) for i, u in enumerate(usage)]
    assert KVUtilizationScorer().score(ctx(eps))[:4] == [1.0, 0.75, -0.5, 2.0]  # the scorer does not clamp
    s = sched(scorers=[{"type": "kv-utilization", "weight": 2}], prefix={"kind": "none"})
    d = s.schedule(req([]), eps)
    assert d.scores["kv-utilization"] == {"e0": 1.0, "e1": 0.75, "e2": 0.0, "e3": 1.0, "e4": 0.0}
    assert d.totals == {"e0": 2.0, "e1": 1.5, "e2": 0.0, "e3": 2.0, "e4": 0.0}


def test_prefill_cost_weighs_cached_prefix_against_queued_prefill() -> None:
    eps = [
        EndpointState(Endpoint("hot", "u"), pending_prefill_tokens=60),
        EndpointState(Endpoint("cold", "u"), pending_prefill_tokens=0),
    ]
    # hot: 60 queued + 64 - 48 cached = 76; cold: 0 + 64 = 64 → cold wins
    scores = PrefillCostScorer().score(ctx(eps, {"hot": 3}))
    assert scores[1] > scores[0]
    assert scores[0] == 0.0


def test_session_affinity_follows_the_last_pick_and_is_bounded() -> None:
    sc = SessionAffinityScorer(max_sessions=2)
    eps = states(3)
    for sid, chosen in [("a", 0), ("b", 1), ("c", 2)]:
        c = ctx(eps, r=req([], session_id=sid))
        sc.picked(c, eps[chosen])
    assert sc.score(ctx(eps, r=req([], session_id="c"))) == [0.0, 0.0, 1.0]
    assert sc.score(ctx(eps, r=req([], headers={"x-session-id": "b"}))) == [0.0, 1.0, 0.0]
    assert sc.score(ctx(eps, r=req([], session_id="a"))) == [0.0, 0.0, 0.0]  # evicted


def test_approximate_index_lru_evicts_oldest_first_and_stride() -> None:
    idx = ApproximatePrefixIndex(capacity_per_endpoint=3, stride=1)
    idx.record("a", [1, 2, 3])  # tail first: LRU order (oldest first) is 3, 2, 1
    idx.record("a", [2])  # touch 2: 3, 1, 2
    idx.record("a", [7])  # evicts 3
    assert idx.match([1, 2, 3], ["a"]) == {"a": 2}  # 3 is gone, the run stops there
    idx.record("a", [8])  # evicts 1, the oldest now
    assert idx.match([1, 2], ["a"]) == {"a": 0}
    assert idx.size == 3
    idx.forget("a")
    assert idx.size == 0 and idx.match([1], ["a"]) == {"a": 0}
    strided = ApproximatePrefixIndex(capacity_per_endpoint=10, stride=4)
    assert list(strided.indexed(list(range(10)))) == [3, 7]


def test_longest_run_stops_per_endpoint_where_its_chain_breaks() -> None:
    idx = PreciseKVIndex()
    idx.apply("a", [BlockStored([1, 2, 3, 4], None, [], 16)])
    idx.apply("b", [BlockStored([1, 2], None, [], 16)])
    idx.apply("c", [BlockStored([1, 3, 4], None, [], 16)])
    assert idx.match([1, 2, 3, 4, 5], ["a", "b", "c", "d"]) == {"a": 4, "b": 2, "c": 1, "d": 0}
    assert idx.match([], ["a"]) == {"a": 0}
    assert idx.match([9, 1], ["a"]) == {"a": 0}


def test_blocks_offloaded_to_cpu_neither_add_to_nor_remove_from_the_gpu_cache_the_index_holds() -> None:
    """vLLM with KV offloading reports its CPU tier too (medium "CPU"): a GPU block evicted while its CPU copy
    stays, and a CPU copy dropped while the GPU still holds it, must leave the index holding exactly the GPU's."""
    idx = PreciseKVIndex()
    idx.apply("a", [BlockStored([1, 2, 3], None, list(range(48)), 16)])  # GPU (the default medium)
    idx.apply("a", [BlockStored([1, 2, 3, 4], None, list(range(64)), 16, medium="CPU")])
    assert idx.match([1, 2, 3, 4], ["a"]) == {"a": 3}  # the CPU-only block 4 is no GPU hit
    idx.apply("a", [BlockRemoved([1, 2, 3], medium="CPU")])
    assert idx.match([1, 2, 3], ["a"]) == {"a": 3}  # the CPU tier dropping its copies leaves the GPU's
    idx.apply("a", [BlockRemoved([3], medium="GPU"), BlockStored([9], None, [0] * 16, 16, medium=None)])
    assert idx.match([1, 2, 3], ["a"]) == {"a": 2} and idx.match([9], ["a"]) == {"a": 1}
    assert idx.other_medium_events == 2


def test_precise_index_follows_events() -> None:
    idx = PreciseKVIndex()
    idx.apply("a", [BlockStored([1, 2, 3], None, list(range(48)), 16)])
    idx.apply("b", [BlockStored([1], None, list(range(16)), 16)])
    assert idx.match([1, 2, 3, 4], ["a", "b", "c"]) == {"a": 3, "b": 1, "c": 0}
    idx.apply("a", [BlockRemoved([2])])
    assert idx.match([1, 2, 3], ["a"]) == {"a": 1}
    idx.apply("a", [AllBlocksCleared()])
    assert idx.match([1], ["a", "b"]) == {"a": 0, "b": 1}
    assert idx.size == 1


def test_precise_index_rekeys_engine_hashes_through_the_token_ids() -> None:
    tok = Tokenizer()
    tokens = tok.encode(" ".join(f"w{i}" for i in range(64)))
    router_keys = block_hashes(tokens, 16)

    def rekey(parent: int | None, token_ids: object, bs: int) -> list[int]:
        return block_hashes(list(token_ids), bs, parent=parent)  # type: ignore[call-overload]

    idx = PreciseKVIndex(rekey=rekey)
    # The engine uses other hashes (e.g. another seed): 101, 102 then 103, 104 chained on 102.
    idx.apply("a", [BlockStored([101, 102], None, tokens[:32], 16)])
    idx.apply("a", [BlockStored([103, 104], 102, tokens[32:64], 16)])
    assert idx.match(router_keys, ["a"]) == {"a": 4}
    idx.apply("a", [BlockRemoved([103])])
    assert idx.match(router_keys, ["a"]) == {"a": 2}
    # a block whose parent is unknown cannot be keyed and is skipped
    idx.apply("b", [BlockStored([555], 999, tokens[:16], 16)])
    assert idx.match(router_keys, ["b"]) == {"b": 0}


def test_precise_index_memory_guard_drops_oldest() -> None:
    idx = PreciseKVIndex(max_blocks_per_endpoint=2)
    idx.apply("a", [BlockStored([1, 2, 3], None, [], 16)])
    assert idx.size == 2
    assert idx.match([2, 3], ["a"]) == {"a": 2}
    assert idx.match([1], ["a"]) == {"a": 0}


def test_kv_batch_roundtrip_and_vllm_shapes() -> None:
    events: list[KVEvent] = [
        BlockStored([1, 2], None, list(range(32)), 16),
        BlockRemoved([1]),
        AllBlocksCleared(),
    ]
    ts, decoded = decode_kv_batch(encode_kv_batch(events, 12.5))
    assert ts == 12.5 and decoded == events
    # vLLM may send hashes as bytes, and newer versions append fields
    raw = msgpack.packb(
        [1.0, [["BlockStored", [b"\x00\x01", 5], b"\x02", [1, 2], 16, None, "GPU", None, "extra"]]],
        use_bin_type=True,
    )
    _, (ev,) = decode_kv_batch(raw)
    assert ev == BlockStored([1, 5], 2, [1, 2], 16, None, "GPU")


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1",
        msgpack.packb({"a": 1}),
        msgpack.packb([1.0, [["Nope"]]]),
        msgpack.packb([1.0, [["BlockStored", [1.5], None, [], 16]]]),
        msgpack.packb([1.0, [["BlockStored", [1], None, ["x"], 16]]]),
        msgpack.packb([1.0, [["BlockStored", [1], None, [], 0]]]),
        msgpack.packb(["ts", []]),
        msgpack.packb([1.0, [[]]]),
    ],
)
def test_kv_batch_rejects_malformed_payloads(payload: bytes) -> None:
    with pytest.raises(KVEventFormatError):
        decode_kv_batch(payload)


def test_in_flight_tracker_counts_prefill_until_first_token() -> None:
    t = InFlightTracker()
    a = t.start("r0", 100)
    b = t.start("r0", 50)
    assert t.in_flight["r0"] == 2 and t.pending_prefill["r0"] == 150
    t.first_token(a)
    t.first_token(a)  # idempotent
    assert t.pending_prefill["r0"] == 50
    t.finish(b)  # finishing without a first token also releases its prefill
    t.finish(a)
    assert t.in_flight["r0"] == 0 and t.pending_prefill["r0"] == 0
