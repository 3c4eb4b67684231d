"""The informer's retry, backoff and relist logic against the scripted API server (``fakeapi``), at the transport.

Each test scripts what the API server answers, runs the informer until the script runs out (the fake fails the next
unscripted watch, which ends the run) and checks every delta it handed over, every request it made and every
backoff delay it waited (through the injected sleep, which returns at once). The same cases against the real
control plane — compaction, API server restarts — are in tests/integration/kube/test_informer.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from capstan.backoff import Backoff, Jitter
from capstan.kube import ApiError, Delta, Informer, resources

from .fakeapi import FakeApiServer, Watch

pytestmark = pytest.mark.unit

CM = resources.CONFIGMAPS
NS = "app"
_MAX_RETRIES = 50


class Run:
    """One informer over ``fake``, with exact backoff (1, 2, 4, 8, 8, … s: no jitter) and a sleep that records."""

    def __init__(self, fake: FakeApiServer, **options: Any) -> None:
        self.fake = fake
        self.delays: list[float] = []
        self.informer = Informer(
            fake.client(),
            CM,
            namespace=NS,
            backoff=Backoff(base=1.0, factor=2.0, cap=8.0, jitter=Jitter()),
            sleep=self._sleep,
            **options,
        )

    async def _sleep(self, delay: float) -> None:
        self.delays.append(delay)
        if len(self.delays) > _MAX_RETRIES:
            raise AssertionError(
                f"more than {_MAX_RETRIES} retries: the informer is not following the script"
            )
        await asyncio.sleep(0)  # yields, so that a loop that never ends still meets the timeout guard

    async def deltas(self, *, stop_after: int | None = None) -> list[tuple[str, str, str, str]]:
        """``(type, key, via, resourceVersion)`` of every delta until the script runs out (or ``stop_after``
        deltas, then :meth:`Informer.stop`, and the stream must end by itself)."""
        out: list[tuple[str, str, str, str]] = []

        async def consume() -> None:
            async for delta in self.informer.deltas():
                out.append(_row(delta))
                if stop_after is not None and len(out) == stop_after:
                    self.informer.stop()

        async with asyncio.timeout(30):  # a guard against a hang, never a measurement
            if stop_after is not None:
                await consume()
            else:
                with pytest.raises(AssertionError, match="unscripted watch"):
                    await consume()
        await self.informer.client.close()
        return out


def _row(delta: Delta) -> tuple[str, str, str, str]:
    return (delta.type, delta.key, delta.via, delta.resource_version)


def world(*names: str) -> FakeApiServer:
    """A fake API server holding one ConfigMap per name (resourceVersions 101, 102, …)."""
    fake = FakeApiServer(CM, namespace=NS)
    for name in names:
        fake.put(name)
    return fake


async def test_lists_in_pages_then_watches_from_the_lists_version_with_bookmarks() -> None:
    fake = world("a", "b", "c", "d", "e")  # rv 105
    fake.script(Watch(lambda: [fake.put("f"), fake.put("a", {"v": "2"})]))
    run = Run(fake, page_size=2, watch_timeout=300)
    assert await run.deltas() == [
        ("added", "app/a", "list", "101"),
        ("added", "app/b", "list", "102"),
        ("added", "app/c", "list", "103"),
        ("added", "app/d", "list", "104"),
        ("added", "app/e", "list", "105"),
        ("synced", "", "list", "105"),
        ("added", "app/f", "watch", "106"),
        ("modified", "app/a", "watch", "107"),
    ]
    lists = [s.query for s in fake.requests if s.verb == "list"]
    assert [(q["limit"], q.get("continue")) for q in lists] == [("2", None), ("2", "2"), ("2", "4")]
    first_watch = next(s.query for s in fake.requests if s.verb == "watch")
    assert first_watch["resourceVersion"] == "105" and first_watch["allowWatchBookmarks"] == "true"
    assert 240 <= int(first_watch["timeoutSeconds"]) <= 360  # the jittered server-side timeout
    # the stream the server closed is resumed from its last event, without a relist or a backoff
    assert fake.verbs()[-1] == "watch@107" and run.delays == []
    assert set(run.informer.state) == {f"app/{n}" for n in "abcdef"}


async def test_a_bookmark_moves_the_version_the_next_watch_starts_from_and_hands_over_nothing() -> None:
    fake = world("a")  # rv 101

    def quiet() -> list[dict[str, Any]]:
        fake.advance(9)  # writes to other resources only: the revision moves to 110
        return [fake.bookmark()]

    fake.script(Watch(quiet), Watch(lambda: [fake.put("a", {"v": "2"})]))
    run = Run(fake)
    assert await run.deltas() == [
        ("added", "app/a", "list", "101"),
        ("synced", "", "list", "101"),
        ("modified", "app/a", "watch", "111"),
    ]
    assert fake.verbs() == ["list", "watch@101", "watch@110", "watch@111"]
    assert run.informer.stats.bookmarks == 1 and run.informer.stats.lists == 1


async def test_410_on_the_watch_relists_and_hands_over_only_the_difference() -> None:
    fake = world("a", "b", "c")  # rv 103

    def while_away() -> list[dict[str, Any]]:
        fake.put("b", {"v": "2"})  # 104
        fake.remove("c")  # 105
        fake.put("d")  # 106
        return []

    fake.script(Watch(while_away, status=410))
    run = Run(fake)
    assert await run.deltas() == [
        ("added", "app/a", "list", "101"),
        ("added", "app/b", "list", "102"),
        ("added", "app/c", "list", "103"),
        ("synced", "", "list", "103"),
        ("modified", "app/b", "relist", "104"),
        ("added", "app/d", "relist", "106"),
        ("deleted", "app/c", "relist", "106"),
        ("synced", "", "relist", "106"),
    ]
    assert fake.verbs() == ["list", "watch@103", "list", "watch@106"]
    assert run.delays == []  # a relist is not a failure to back off from
    stats = run.informer.stats
    assert (stats.lists, stats.relists, stats.watch_errors) == (2, 1, 1)


async def test_an_expired_error_event_mid_watch_relists_after_the_events_before_it() -> None:
    fake = world("a", "b")  # rv 102

    def events() -> list[dict[str, Any]]:
        change = fake.put("a", {"v": "2"})  # 103, seen by the watch
        fake.put("b", {"v": "2"})  # 104, lost with the stream: the relist finds it
        return [change, fake.expired()]

    fake.script(Watch(events))
    run = Run(fake)
    assert (await run.deltas())[3:] == [
        ("modified", "app/a", "watch", "103"),
        ("modified", "app/b", "relist", "104"),
        ("synced", "", "relist", "104"),
    ]
    assert fake.verbs() == ["list", "watch@102", "list", "watch@104"] and run.delays == []


async def test_resuming_from_a_stored_version_watches_first_and_skips_a_replayed_event() -> None:
    fake = world("a", "b")  # a@101, b@102
    stored = {key: dict(obj) for key, obj in fake.objects.items()}
    replayed = {"type": "MODIFIED", "object": dict(fake.objects["app/b"])}  # b@102 again: already in the view
    fake.script(Watch(lambda: [replayed, fake.put("a", {"v": "2"})]))
    run = Run(fake, known=stored, resource_version="102")
    assert await run.deltas() == [("modified", "app/a", "watch", "103")]
    assert fake.verbs() == ["watch@102", "watch@103"]  # no list at all
    assert run.informer.stats.resumed and run.informer.stats.lists == 0


async def test_resuming_from_a_compacted_version_relists_against_the_stored_view() -> None:
    fake = world("a", "b")  # a@101, b@102
    stored = {key: dict(obj) for key, obj in fake.objects.items()}
    stored["app/gone"] = {
        "metadata": {"name": "gone", "namespace": NS, "uid": "old", "resourceVersion": "90"}
    }
    fake.put("a", {"v": "2"})  # 103: changed while the consumer was down
    fake.put("new")  # 104
    fake.compact()
    run = Run(fake, known=stored, resource_version="102")
    assert await run.deltas() == [
        ("modified", "app/a", "relist", "103"),
        ("added", "app/new", "relist", "104"),
        ("deleted", "app/gone", "relist", "104"),
        ("synced", "", "relist", "104"),
    ]
    assert fake.verbs() == ["watch@102", "list", "watch@104"] and run.delays == []


async def test_broken_and_silent_streams_are_rewatched_from_the_last_version_with_growing_backoff() -> None:
    fake = world("a")  # rv 101
    fake.script(
        Watch(lambda: [fake.put("a", {"v": "2"})], end="broken"),  # 102, then the connection drops
        Watch(end="broken"),
        Watch(end="silent"),  # nothing, not even a bookmark: a dead watch
        Watch(lambda: [fake.put("a", {"v": "3"})]),  # 103: progress resets the backoff
        Watch(end="broken"),
    )
    run = Run(fake)
    assert [d for d in await run.deltas() if d[2] == "watch"] == [
        ("modified", "app/a", "watch", "102"),
        ("modified", "app/a", "watch", "103"),
    ]
    assert run.delays == [1.0, 2.0, 4.0, 1.0]
    assert fake.verbs() == [
        "list",
        "watch@101",
        "watch@102",
        "watch@102",
        "watch@102",
        "watch@103",
        "watch@103",
    ]
    assert run.informer.stats.lists == 1 and run.informer.stats.watch_errors == 4


async def test_server_errors_on_the_watch_back_off_up_to_the_maximum_and_never_relist() -> None:
    fake = world("a")
    fake.script(*(Watch(status=status) for status in (500, 503, 429, 500, 500, 504)))
    run = Run(fake)
    assert [d[0] for d in await run.deltas()] == ["added", "synced"]
    assert run.delays == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]  # bounded by Backoff.maximum
    assert fake.verbs() == ["list"] + ["watch@101"] * 7


async def test_an_undecodable_line_rewatches_from_the_last_good_version() -> None:
    fake = world("a")
    fake.script(Watch(lambda: [fake.put("b")], end="garbage"))
    run = Run(fake)
    assert (await run.deltas())[-1] == ("added", "app/b", "watch", "102")
    assert fake.verbs() == ["list", "watch@101", "watch@102"] and run.delays == [1.0]


async def test_a_failing_list_is_retried_with_backoff_before_any_delta() -> None:
    fake = world("a")
    fake.fail_lists(500, 403)
    run = Run(fake)
    assert await run.deltas() == [("added", "app/a", "list", "101"), ("synced", "", "list", "101")]
    assert fake.verbs() == ["list", "list", "list", "watch@101"] and run.delays == [1.0, 2.0]


async def test_an_expired_continue_token_restarts_the_list_without_handing_anything_over_twice() -> None:
    fake = world("a", "b", "c", "d", "e")
    fake.fail_lists(None, 410)  # the first page is served, the second answers 410 Gone
    run = Run(fake, page_size=2)
    assert await run.deltas() == [
        ("added", "app/a", "list", "101"),
        ("added", "app/b", "list", "102"),
        ("added", "app/c", "list", "103"),
        ("added", "app/d", "list", "104"),
        ("added", "app/e", "list", "105"),
        ("synced", "", "list", "105"),
    ]
    assert fake.verbs() == ["list", "list", "list", "list", "list", "watch@105"] and run.delays == []


async def test_without_per_object_state_a_relist_hands_over_everything_as_added() -> None:
    fake = world("a", "b")  # rv 102

    def while_away() -> list[dict[str, Any]]:
        fake.remove("b")  # 103: a relist without state cannot say so
        return []

    fake.script(Watch(while_away, status=410))
    run = Run(fake, remember=False)
    rows = await run.deltas()
    assert rows[3:] == [("added", "app/a", "relist", "101"), ("synced", "", "relist", "103")]
    assert run.informer.state == {}  # nothing kept: the consumer rebuilds its view from each (re)list


async def test_stop_ends_the_stream_after_the_event_in_hand() -> None:
    fake = world("a")
    fake.script(Watch(lambda: [fake.put("b"), fake.put("c"), fake.put("d")]))
    run = Run(fake)
    rows = await run.deltas(stop_after=3)  # added a, synced, added b: then stop()
    assert [r[1] for r in rows] == ["app/a", "", "app/b"]
    assert fake.verbs() == ["list", "watch@101"]  # it neither read on nor watched again


async def test_a_list_the_watch_cache_cannot_serve_yet_is_retried_by_the_client_a_bounded_number_of_times() -> (
    None
):
    fake = world("a")
    lag = (504, "Too large resource version: 200, current: 101")
    waits: list[float] = []

    async def sleep(delay: float) -> None:
        waits.append(delay)

    fake.fail_lists(lag, lag)
    client = fake.client(sleep=sleep)
    items, rv = await client.list(CM, namespace=NS)
    assert [o["metadata"]["name"] for o in items] == ["a"] and rv == "101"
    assert waits == [0.5, 1.0]  # the client's own retries, not the informer's backoff
    fake.fail_lists(*[lag] * 5)
    with pytest.raises(ApiError, match="Too large resource version"):
        await client.list(CM, namespace=NS)  # five answers of lag: given up
    assert waits[2:] == [0.5, 1.0, 2.0, 4.0]
    await client.close()


async def test_the_backoff_starts_again_after_a_good_list() -> None:
    fake = world("a")
    fake.fail_lists(500, 500, 500)
    fake.script(Watch(status=500))
    run = Run(fake)
    assert await run.deltas() == [("added", "app/a", "list", "101"), ("synced", "", "list", "101")]
    # three failed lists back off 1, 2, 4 s; the good list ends that, so the failed watch waits 1 s, not 8
    assert run.delays == [1.0, 2.0, 4.0, 1.0]
    assert fake.verbs() == ["list", "list", "list", "list", "watch@101", "watch@101"]


async def test_410s_in_a_row_back_off_after_the_first_and_an_event_ends_the_streak() -> None:
    fake = world("a")  # rv 101
    gone = Watch(status=410)
    fake.script(gone, gone, gone, Watch(lambda: [fake.put("b")]), gone)
    run = Run(fake)
    deltas = await run.deltas()
    assert ("added", "app/b", "watch", "102") in deltas
    # the first 410 relists at once (a compaction); the second and third wait 1 and 2 s; after an event the
    # next 410 is a first one again
    assert run.delays == [1.0, 2.0]
    assert fake.verbs() == ["list", "watch@101"] * 4 + ["watch@102", "list", "watch@102"]
    assert run.informer.stats.relists == 4
