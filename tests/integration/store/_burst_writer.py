"""A writer process for the kill -9 test: writes a deterministic burst of object changes in batches.

Run as ``python -m tests.integration.store._burst_writer URL TOTAL BATCH``. On start it reads the kind cursor and
resumes one batch *before* it (re-writing an already committed batch on purpose, to exercise idempotency). It prints
``committed <rv>`` after each commit.
"""

from __future__ import annotations

import sys
from typing import Any

from capstan.record import ObjectHistory
from capstan.store import Batch, open_store

SOURCE = "burst"
OBJECTS = 50


def obj(i: int) -> dict[str, Any]:
    k = i % OBJECTS
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"d{k}", "namespace": "ns", "uid": f"uid-{k}", "resourceVersion": str(i)},
        "spec": {
            "replicas": i % 7,
            "template": {"spec": {"containers": [{"name": "c", "image": f"img:{i}"}]}},
        },
    }


def batches(total: int, size: int) -> list[tuple[int, Batch]]:
    history = ObjectHistory(SOURCE)
    out: list[tuple[int, Batch]] = []
    current = Batch()
    for i in range(1, total + 1):
        etype = "ADDED" if i <= OBJECTS else "MODIFIED"
        current.extend(history.observe(etype, obj(i), observed_at=1000.0 + i))
        if i % size == 0 or i == total:
            out.append((i, current))
            current = Batch()
    return out


def main() -> None:
    url, total, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    store = open_store(url)
    cursor = store.history.kind_cursor(SOURCE, "apps/v1/Deployment")
    done = int(cursor.resource_version) if cursor else 0
    for last_rv, batch in batches(total, size):
        if last_rv <= done - size:
            continue
        store.history.write(batch)
        print(f"committed {last_rv}", flush=True)
    store.close()


if __name__ == "__main__":
    main()
