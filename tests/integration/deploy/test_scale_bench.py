"""bench/cluster_scale.py in its smoke mode: a tiny sandbox, the recorder and the notifier as the chart runs them,
churn, and every figure the report prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.benches import run_smoke

pytestmark = pytest.mark.integration


def test_cluster_scale_bench_smoke(tmp_path: Path) -> None:
    proc = run_smoke("cluster_scale.py", tmp_path)
    assert "Capstan at scale" in proc.stdout
    data = json.loads((tmp_path / "cluster_scale.json").read_text())
    assert data["nodes_listed"] == 20 and data["pods"] == 200
    # both components took their Lease and synced; the churn happened and was seen
    assert set(data["first_sync_s"]) == {"record", "restarts"}
    assert data["reference_changes"] > 0 and data["rollouts"] > 0 and data["conditions"] > 0
    # no change lost and the store ends equal to what the API server lists
    assert data["lost_changes"] == 0, data["lost_examples"]
    assert not any(data["final_state_mismatches"].values()), data["final_state_mismatches"]
    # every injected restart detected
    assert data["restarts_injected"] > 0 and data["restarts_detected"] == data["restarts_injected"]
    # the API server's audit log saw both identities list and watch as they synced, and no list during the
    # churn: they follow watches, they do not poll
    for component in ("record", "restarts"):
        requests = data["api_requests"][component]
        assert any(k.startswith("watch ") for k in requests["by_verb"]["sync"]), requests
        assert not [k for k in requests["by_verb"]["churn"] if k.startswith("list ")], requests
    assert data["peak_rss_mb"]["record"] > 0
    assert (tmp_path / "cluster_scale.png").stat().st_size > 0
