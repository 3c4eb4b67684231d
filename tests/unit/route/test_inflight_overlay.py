"""The precise index's in-flight overlay: requests sent and not yet confirmed count for affinity, and leave it
when the engine's events, the shell's answer or the clock say so."""

from __future__ import annotations

import pytest

from capstan.config import load_model
from capstan.errors import UserError
from capstan.kvcache import AllBlocksCleared, BlockRemoved, BlockStored
from capstan.route import (
    Endpoint,
    EndpointState,
    InFlightOverlay,
    PreciseKVIndex,
    RouteRequest,
    Scheduler,
    SchedulerConfig,
    recommended_scheduler,
)

CHAIN = [11, 12, 13, 14, 15, 16]


def _index(ttl_s: float = 60.0, max_requests: int = 100) -> PreciseKVIndex:
    return PreciseKVIndex(inflight=InFlightOverlay(ttl_s, max_requests))


def test_sent_blocks_match_before_any_event_and_union_with_confirmed() -> None:
    idx = _index()
    idx.apply("a", [BlockStored(CHAIN[:2], None, [], 16)])
    assert idx.match(CHAIN, ["a", "b"]) == {"a": 2, "b": 0}
    idx.sent(1, "b", CHAIN[:4], now=0.0)  # queued on b: the events know nothing yet
    assert idx.match(CHAIN, ["a", "b"]) == {"a": 2, "b": 4}
    idx.sent(2, "a", CHAIN, now=0.0)  # a: confirmed 2, in flight 6 -> the longer run
    assert idx.match(CHAIN, ["a", "b"]) == {"a": 6, "b": 4}
    assert idx.inflight is not None and idx.inflight.requests == 2


def test_a_settled_request_leaves_the_overlay_and_shared_blocks_stay_while_another_holds_them() -> None:
    idx = _index()
    idx.sent(1, "a", CHAIN[:3], now=0.0)
    idx.sent(2, "a", CHAIN, now=0.0)
    idx.settle(2)  # answered (or refused): only ticket 1's blocks remain
    assert idx.match(CHAIN, ["a"]) == {"a": 3}
    idx.settle(1)
    assert idx.match(CHAIN, ["a"]) == {"a": 0}
    assert idx.inflight is not None and idx.inflight.size == 0 and idx.inflight.requests == 0
    idx.settle(1)  # unknown ticket: no-op
    idx.settle(99)


def test_the_engine_storing_the_last_block_confirms_the_request() -> None:
    idx = _index()
    overlay = idx.inflight
    assert overlay is not None
    idx.sent(1, "a", CHAIN, now=0.0)
    idx.apply("a", [BlockStored(CHAIN[:3], None, [], 16)])  # a first chunk: still in flight
    assert 1 in overlay
    idx.apply("b", [BlockStored(CHAIN, None, [], 16)])  # another endpoint storing it confirms nothing
    assert 1 in overlay
    idx.apply("a", [BlockStored(CHAIN[3:], CHAIN[2], [], 16)])
    assert 1 not in overlay and overlay.confirmed == 1 and overlay.size == 0
    # from now on the events are the truth: a removal shortens the match
    idx.apply("a", [BlockRemoved(CHAIN[4:])])
    assert idx.match(CHAIN, ["a"]) == {"a": 4}


def test_a_removal_before_the_request_runs_does_not_touch_its_claim() -> None:
    idx = _index()
    idx.apply("a", [BlockStored(CHAIN[:2], None, [], 16)])
    idx.sent(1, "a", CHAIN, now=0.0)
    idx.apply("a", [BlockRemoved(CHAIN[:2])])  # evicted while the request waits: it will compute them again
    assert idx.match(CHAIN, ["a"]) == {"a": 6}


def test_cleared_cache_or_departed_endpoint_drops_its_requests_only() -> None:
    idx = _index()
    idx.sent(1, "a", CHAIN, now=0.0)
    idx.sent(2, "b", CHAIN[:2], now=0.0)
    idx.apply("a", [AllBlocksCleared()])
    assert idx.match(CHAIN, ["a", "b"]) == {"a": 0, "b": 2}
    idx.forget("b")
    assert idx.match(CHAIN, ["a", "b"]) == {"a": 0, "b": 0}
    assert idx.inflight is not None and idx.inflight.requests == 0


def test_requests_expire_on_the_shells_clock() -> None:
    idx = _index(ttl_s=10.0)
    overlay = idx.inflight
    assert overlay is not None
    idx.sent(1, "a", CHAIN, now=0.0)
    idx.sent(2, "b", CHAIN[:2], now=5.0)
    idx.sent(3, "c", [99], now=9.999)  # not yet: 1 is 9.999 s old
    assert 1 in overlay
    idx.sent(4, "c", [98], now=10.0)  # 1 is 10 s old: gone, 2 stays
    assert 1 not in overlay and 2 in overlay and overlay.expired == 1
    assert idx.match(CHAIN, ["a", "b"]) == {"a": 0, "b": 2}
    overlay.expire(100.0)
    assert overlay.requests == 0 and overlay.expired == 4 and overlay.size == 0


def test_memory_is_bounded_by_requests_oldest_first() -> None:
    idx = _index(max_requests=2)
    overlay = idx.inflight
    assert overlay is not None
    for t in range(5):
        idx.sent(t, f"e{t}", [100 + t], now=float(t))
    assert overlay.requests == 2 and 3 in overlay and 4 in overlay and overlay.expired == 3
    idx.sent(4, "e9", [200], now=6.0)  # a reused ticket replaces its request
    assert overlay.requests == 2 and idx.match([104], ["e4"]) == {"e4": 0}
    assert idx.match([200], ["e9"]) == {"e9": 1}
    with pytest.raises(ValueError):
        InFlightOverlay(ttl_s=0)
    with pytest.raises(ValueError):
        InFlightOverlay(max_requests=0)


def test_without_the_overlay_only_events_count() -> None:
    idx = PreciseKVIndex()
    idx.sent(1, "a", CHAIN, now=0.0)
    assert idx.match(CHAIN, ["a"]) == {"a": 0}
    idx.settle(1)


def _states(*names: str) -> list[EndpointState]:
    return [EndpointState(Endpoint(n, f"http://{n}", ("m",))) for n in names]


def test_scheduler_keeps_affinity_for_a_request_queued_behind_its_predecessor() -> None:
    """Two turns of one conversation back to back: the second goes where the first was sent, before any KV
    event; with the overlay off (the events alone) nothing points there."""
    turn1 = RouteRequest("m", tuple(CHAIN[:4]), 4 * 16 + 5, 16)
    turn2 = RouteRequest("m", tuple(CHAIN), 6 * 16 + 5, 16)
    cfg = recommended_scheduler()
    sched = Scheduler(cfg)
    d1 = sched.schedule(turn1, _states("a", "b", "c"))
    sched.sending(d1, 7, now=1.0)
    sched.learn(d1)
    d2 = sched.schedule(turn2, _states("a", "b", "c"))
    assert d2.endpoint.name == d1.endpoint.name and d2.predicted_cached_tokens == 4 * 16
    sched.settle(7)  # the answer came back without events (none configured): the claim goes
    assert sched.schedule(turn2, _states("a", "b", "c")).predicted_cached_tokens == 0

    off = load_model(
        SchedulerConfig,
        {**cfg.model_dump(mode="json"), "prefix": {"kind": "precise", "inflight": False}},
        "no-overlay",
    )
    sched = Scheduler(off)
    d1 = sched.schedule(turn1, _states("a", "b", "c"))
    sched.sending(d1, 7, now=1.0)
    assert sched.schedule(turn2, _states("a", "b", "c")).predicted_cached_tokens == 0


def test_overlay_settings_are_parsed_strictly() -> None:
    cfg = load_model(
        SchedulerConfig,
        {"prefix": {"kind": "precise", "inflight_ttl_s": 30, "max_inflight_requests": 10}},
        "s",
    )
    overlay = Scheduler(cfg).precise.inflight  # type: ignore[union-attr]
    assert overlay is not None and overlay.ttl_s == 30 and overlay.max_requests == 10
    with pytest.raises(UserError, match="inflight_ttl_s"):
        load_model(SchedulerConfig, {"prefix": {"kind": "precise", "inflight_ttl_s": 0}}, "s")
