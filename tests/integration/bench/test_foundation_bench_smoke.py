"""The foundation benchmarks run end to end in smoke mode, so they cannot rot (figures are not checked)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.benches import run_smoke

pytestmark = pytest.mark.integration


def test_kube_client_bench_smoke(kubeconfig: Path, tmp_path: Path) -> None:
    run_smoke("kube_client.py", tmp_path, "--kubeconfig", str(kubeconfig))
    data = json.loads((tmp_path / "kube_client.json").read_text())
    assert data["pods"] == 200
    by_variant = {r["variant"]: r for r in data["results"]}
    assert set(by_variant) == {
        "capstan", "k8s-asyncio-raw", "k8s-asyncio-models", "kr8s", "lightkube",
        "capstan-informer", "restart-watcher", "recorder",
    }  # fmt: skip
    assert not [r for r in data["results"] if "error" in r]
    assert by_variant["capstan"]["items"] == 200
    assert by_variant["capstan"]["events"] == data["events"] >= 200


def test_sandbox_startup_bench_smoke(tmp_path: Path) -> None:
    proc = run_smoke("sandbox_startup.py", tmp_path)
    assert "sandbox up" in proc.stdout
    (result,) = json.loads((tmp_path / "sandbox_startup.json").read_text())
    assert result["nodes"] == 5 and result["first_pod_s"] > 0


def test_restart_storm_bench_smoke(tmp_path: Path) -> None:
    """The sandbox storm harness with Capstan as the collector: every injected restart accounted for."""
    run_smoke("restart_storm.py", tmp_path)
    data = json.loads((tmp_path / "restart_storm.json").read_text())
    assert data["injected"] == 20
    assert data["accounted"] == data["injected"]
    assert (tmp_path / "restart_storm_latency.png").stat().st_size > 0
