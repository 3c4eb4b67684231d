"""The router's own view of the work it has sent: requests in flight and prefill tokens not yet answered.

Scraped metrics lag by up to one polling interval; these counts change at the moment of each decision,
which is what
keeps a burst of requests from all landing on the replica that looked idle at the last scrape. Both shells
(the
proxy and the virtual-clock harness) update it the same way.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass


@dataclass
class _Ticket:
    endpoint: str
    prefill_tokens: int
    prefilled: bool = False


class InFlightTracker:
    def __init__(self) -> None:
        self._ids = itertools.count()
        self._tickets: dict[int, _Ticket] = {}
        self.in_flight: dict[str, int] = {}
        self.pending_prefill: dict[str, int] = {}

    def start(self, endpoint: str, prefill_tokens: int) -> int:
        tid = next(self._ids)
        self._tickets[tid] = _Ticket(endpoint, max(0, prefill_tokens))
        self.in_flight[endpoint] = self.in_flight.get(endpoint, 0) + 1
        self.pending_prefill[endpoint] = self.pending_prefill.get(endpoint, 0) + max(0, prefill_tokens)
        return tid

    def first_token(self, tid: int) -> None:
        t = self._tickets.get(tid)
        if t is None or t.prefilled:
            return
        t.prefilled = True
        self.pending_prefill[t.endpoint] -= t.prefill_tokens

    def finish(self, tid: int) -> None:
        self.first_token(tid)
        t = self._tickets.pop(tid, None)
        if t is not None:
            self.in_flight[t.endpoint] -= 1
