"""The foundation benchmarks run end to end in smoke mode, so they cannot rot (figures are not checked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

BENCH = Path(__file__).resolve().parents[3] / "bench"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def test_kube_client_bench_smoke(kubeconfig: Path, tmp_path: Path) -> None:
    run(str(BENCH / "kube_client.py"), "--smoke", "--kubeconfig", str(kubeconfig), "--out", str(tmp_path))
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
    proc = run(str(BENCH / "sandbox_startup.py"), "--smoke", "--out", str(tmp_path))
    assert "sandbox up" in proc.stdout
    (result,) = json.loads((tmp_path / "sandbox_startup.json").read_text())
    assert result["nodes"] == 5 and result["first_pod_s"] > 0


def test_restart_storm_bench_smoke(tmp_path: Path) -> None:
    """The sandbox storm harness with Capstan as the collector: every injected restart accounted for."""
    run(str(BENCH / "restart_storm.py"), "--smoke", "--out", str(tmp_path))
    data = json.loads((tmp_path / "restart_storm.json").read_text())
    assert data["injected"] == 20
    assert data["accounted"] == data["injected"]
    assert (tmp_path / "restart_storm_latency.png").stat().st_size > 0
