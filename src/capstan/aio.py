"""Small asyncio helpers that no library offers in this shape; the one copy of each."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


async def wait_any(*events: asyncio.Event) -> None:
    """Return as soon as one of ``events`` is set (at once if one already is)."""
    waits = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


async def in_daemon_thread(fn: Callable[[], T], *, name: str = "capstan-blocking") -> T:
    """``fn()`` in a daemon thread of its own, awaited. Unlike :func:`asyncio.to_thread`, a caller that stops
    waiting (cancelled on SIGTERM) leaves nothing that ``asyncio.run`` waits for at exit: a blocking connect with a
    10 s timeout cannot hold a process that was told to stop. What ``fn`` returns after that is dropped."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if done.done():
            return  # the caller stopped waiting
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            result, error = fn(), None
        except BaseException as exc:  # handed to the awaiting task
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return await done
