"""The diff builder in worker processes, sharded by object: the recorder's whole path is otherwise one GIL.

Profiling the recorder end to end (watch line → informer → diff builder → committed row) showed the pure diff
builder (normalisation, redaction, patches) taking about two thirds of the one thread everything else also runs on,
so no tuning of the writer could lift the whole path past the diff builder's own rate. :class:`DiffPool` runs
:class:`~capstan.record.ObjectHistory` in ``workers`` processes, each owning the objects whose uid hashes to it
(crc32, so the assignment is the same in every run), and hands the results back **in the order the changes were
submitted**, whatever order the workers finish in:

- every submitted change and every :meth:`DiffPool.mark` (a cursor to set, a batch to move) takes one place in a
  FIFO; a change's place is filled when its worker's answer arrives (each worker answers in the order it was
  asked, so per object order holds), and places are applied strictly from the head. A batch the recorder writes
  therefore always holds a prefix of what it observed, with the cursors of exactly that prefix: the exactly-once
  and resume guarantees are those of the in-process diff builder.
- changes travel as compact JSON (orjson, :mod:`capstan.jsontext`) in messages of up to :data:`SEND_EVERY`
  changes, flushed as soon as the event loop gets control, so a quiet stream waits for nothing.
- a worker that fails (a bug, an object without a uid, a process killed) makes the next :meth:`submit` or
  :meth:`settle` raise, and the collector restarts as after any crash; a parent killed with SIGKILL closes the
  pipes, and the workers exit on the end of their input.

The workers are forked from a fork server started once per process (``forkserver``: no fork of a threaded
recorder, and no fresh interpreter per worker either).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing
import pickle
import threading
import zlib
from collections import deque
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any

from capstan import jsontext
from capstan.record._diff import DiffPolicy
from capstan.record._objects import ObjectHistory
from capstan.redact import Redactor
from capstan.store import Batch, ObjectChange, ObjectState, ObservedVia

SEND_EVERY = 64
"""changes per message to a worker (a message also goes as soon as the event loop gets control)"""

STALL_S = 60.0
"""seconds without any answer while changes are in flight after which the pool counts as failed"""

_Result = tuple[ObjectChange | None, ObjectState | None, tuple[str, str] | None, str | None]


def shard_of(uid: str, workers: int) -> int:
    """The worker that owns ``uid`` (the same in every run)."""
    return zlib.crc32(uid.encode()) % workers


def _serve(
    inbox: Connection,
    outbox: Connection,
    source: str,
    states: dict[str, ObjectState],
    policy: DiffPolicy,
    redactor: Redactor,
) -> None:
    """A worker: diff what arrives, answer each message with one result per change, until the input ends."""
    history = ObjectHistory(source, states, policy=policy, redactor=redactor)
    del states
    gc.collect()
    gc.freeze()  # what is alive now lives as long as the worker (as in the collector: KubeCollector.run)
    while True:
        try:
            message = inbox.recv_bytes()
        except (EOFError, OSError):
            return
        out: list[_Result] = []
        for etype, raw, observed_at, via in pickle.loads(message):
            batch = Batch()
            try:
                history.observe_into(batch, etype, jsontext.decode(raw), observed_at=observed_at, via=via)
            except Exception as exc:  # handed to the collector, which crashes and restarts
                out.append((None, None, None, f"{type(exc).__name__}: {exc}"))
                continue
            out.append(
                (
                    batch.object_changes[0] if batch.object_changes else None,
                    batch.state_puts[0] if batch.state_puts else None,
                    batch.state_deletes[0] if batch.state_deletes else None,
                    None,
                )
            )
        try:
            outbox.send_bytes(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))
        except (BrokenPipeError, OSError):
            return


class DiffPoolError(RuntimeError):
    """A diff worker failed or died; the collector crashes and restarts."""


class DiffPool:
    """``workers`` diff-builder processes over the objects of ``states`` (see the module docstring).

    ``sink`` returns the batch a change submitted without a target goes into *when its result is applied* (the
    collector's pending batch, which the writer swaps for a fresh one at each flush). Use it from one event loop.
    """

    def __init__(
        self,
        source: str,
        states: Mapping[str, ObjectState],
        *,
        policy: DiffPolicy,
        redactor: Redactor,
        workers: int,
        sink: Callable[[], Batch],
    ) -> None:
        if workers < 1:
            raise ValueError("a diff pool needs at least one worker")
        self._workers = workers
        self._sink = sink
        self._loop = asyncio.get_running_loop()
        shards: list[dict[str, ObjectState]] = [{} for _ in range(workers)]
        for uid, st in states.items():
            shards[shard_of(uid, workers)][uid] = st
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload([__name__])
        # NOTE: one pipe each way per worker: closing ours to a worker ends its input, it exits, and that ends
        # the input of the thread reading its answers (no fd is closed under a blocked reader).
        self._conns: list[Connection] = []
        self._answers: list[Connection] = []
        self._procs: list[Any] = []
        for i in range(workers):
            inbox, to_worker = ctx.Pipe(duplex=False)
            from_worker, outbox = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_serve,
                args=(inbox, outbox, source, shards[i], policy, redactor),
                name=f"capstan-diff-{i}",
                daemon=True,
            )
            proc.start()
            inbox.close()
            outbox.close()
            self._conns.append(to_worker)
            self._answers.append(from_worker)
            self._procs.append(proc)
        self._outgoing: list[list[tuple[str, bytes, float, str]]] = [[] for _ in range(workers)]
        self._send_scheduled = False
        self._results: list[deque[_Result]] = [deque() for _ in range(workers)]
        # NOTE: the FIFO of places: (worker, target batch or None for the sink) for a change, (-1, callable) for a
        # mark; applied strictly from the head, so what reaches a batch is always a prefix of what was submitted.
        self._fifo: deque[tuple[int, Any]] = deque()
        self._changes_in_flight = 0
        self._progress = asyncio.Event()
        self._failed = asyncio.Event()
        self._error: str | None = None
        self._closed = False
        self._readers = [
            threading.Thread(target=self._read, args=(i,), name=f"capstan-diff-reader-{i}", daemon=True)
            for i in range(workers)
        ]
        for t in self._readers:
            t.start()

    # ---- submitting ---------------------------------------------------------------------------------------------
    def submit(
        self,
        target: Batch | None,
        event_type: str,
        obj: dict[str, Any],
        *,
        observed_at: float,
        via: ObservedVia,
    ) -> None:
        """Diff ``obj`` in the worker owning its uid; its record and state go into ``target`` (None: the sink) in
        submission order."""
        self._raise_if_failed()
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        w = shard_of(uid, self._workers)
        self._outgoing[w].append((event_type, jsontext.encode_transient(obj), observed_at, via))
        self._fifo.append((w, target))
        self._changes_in_flight += 1
        if len(self._outgoing[w]) >= SEND_EVERY:
            self._send(w)
        elif not self._send_scheduled:
            self._send_scheduled = True
            self._loop.call_soon(self._send_all)

    def mark(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` once everything submitted before it has been applied (at once when nothing is in flight)."""
        if not self._fifo:
            fn()
        else:
            self._fifo.append((-1, fn))

    def in_flight(self) -> int:
        """Changes submitted whose results are not applied yet."""
        return self._changes_in_flight

    async def wait_below(self, n: int) -> None:
        """Until fewer than ``n`` changes are in flight (raises :class:`DiffPoolError` if a worker failed, or
        if nothing came back for ``STALL_S`` seconds: a silent worker counts as a dead one)."""
        self._send_all()
        while self._changes_in_flight >= max(1, n):
            await self._next_progress()
        self._raise_if_failed()

    async def settle(self) -> None:
        """Until everything submitted (marks included) has been applied (raises as :meth:`wait_below`)."""
        self._send_all()
        while self._fifo:
            await self._next_progress()
        self._raise_if_failed()

    async def _next_progress(self) -> None:
        self._raise_if_failed()
        self._progress.clear()
        try:
            await asyncio.wait_for(self._progress.wait(), timeout=STALL_S)
        except TimeoutError:
            self._fail(f"no diff worker answered for {STALL_S:.0f} s")
        self._raise_if_failed()

    def _send_all(self) -> None:
        self._send_scheduled = False
        for w in range(self._workers):
            if self._outgoing[w]:
                self._send(w)

    def _send(self, w: int) -> None:
        items, self._outgoing[w] = self._outgoing[w], []
        try:
            self._conns[w].send_bytes(pickle.dumps(items, protocol=pickle.HIGHEST_PROTOCOL))
        except OSError as exc:
            self._fail(f"diff worker {w} is gone ({exc})")

    # ---- results ------------------------------------------------------------------------------------------------
    def _read(self, w: int) -> None:
        conn = self._answers[w]
        while True:
            try:
                results: list[_Result] = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):
                conn.close()
                if not self._closed:
                    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
                        self._loop.call_soon_threadsafe(self._fail, f"diff worker {w} exited")
                return
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._arrived, w, results)

    def _arrived(self, w: int, results: list[_Result]) -> None:
        self._results[w].extend(results)
        self._advance()

    def _advance(self) -> None:
        fifo = self._fifo
        applied = False
        while fifo:
            w, what = fifo[0]
            if w < 0:
                fifo.popleft()
                what()
                applied = True
                continue
            pending = self._results[w]
            if not pending:
                break
            change, put, delete, error = pending.popleft()
            fifo.popleft()
            self._changes_in_flight -= 1
            applied = True
            if error is not None:
                self._fail(f"diff worker {w}: {error}")
                return
            batch: Batch = what if what is not None else self._sink()
            if change is not None:
                batch.object_changes.append(change)
            if put is not None:
                batch.state_puts.append(put)
            if delete is not None:
                batch.state_deletes.append(delete)
        if applied:
            self._progress.set()

    def _fail(self, why: str) -> None:
        if self._error is None and not self._closed:
            self._error = why
            self._failed.set()
        self._progress.set()

    async def failure(self) -> None:
        """Wait until a worker fails, then raise :class:`DiffPoolError` (a task beside the collector's, so a
        failure ends the collector even when no new change arrives)."""
        await self._failed.wait()
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise DiffPoolError(self._error)

    # ---- the end ------------------------------------------------------------------------------------------------
    def pids(self) -> list[int]:
        """The workers' process ids (for a benchmark's memory figure)."""
        return [p.pid for p in self._procs if p.pid is not None]

    def close(self, timeout_s: float = 5.0) -> None:
        """End the workers (their input ends; killed if they do not exit within ``timeout_s``)."""
        self._closed = True
        for conn in self._conns:
            conn.close()
        for proc in self._procs:
            proc.join(timeout=timeout_s)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=timeout_s)
        for t in self._readers:
            t.join(timeout=timeout_s)
