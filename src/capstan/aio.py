"""Small asyncio helpers that no library offers in this shape; the one copy of each."""

from __future__ import annotations

import asyncio


async def wait_any(*events: asyncio.Event) -> None:
    """Return as soon as one of ``events`` is set (at once if one already is)."""
    waits = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
