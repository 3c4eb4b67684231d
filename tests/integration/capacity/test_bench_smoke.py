"""The capacity benchmarks run end to end in smoke mode so they cannot rot (figures are not checked)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from bench.goals import limit

from tests.fixtures.benches import run_bench, run_smoke

pytestmark = pytest.mark.integration


def test_capacity_policies_bench_smoke(tmp_path: Path) -> None:
    run_smoke("capacity_policies.py", tmp_path)
    data = json.loads((tmp_path / "capacity_policies.json").read_text())
    assert data["smoke"] is True
    for row in data["rows"]:
        grown = row["case"].startswith("openb default x")  # the grown trace replays three policies
        three = {"capstan", "cluster-autoscaler", "oracle"}
        # every goal trace is also replayed told each pod an hour ahead (not the growth checks)
        signal = {"capstan + 1 h signal"} if not row["case"].endswith((" x2", " x3")) else set()
        assert (
            set(row["policies"])
            == (three if grown else three | {"ca-buffer", "karpenter", "static"}) | signal
        )
        assert (row["cost_with_signal"] is None) == (not signal)
        # each verdict is what the row's ratio says against the goal's limit
        verdicts = data["verdicts"][row["case"]]
        for field in ("idle_vs_oracle", "p99_vs_ca", "cost_vs_oracle", "cost_with_signal"):
            if row[field] is not None:
                met = row[field] <= limit(f"capacity.{field}")
                assert verdicts[f"capacity.{field}"] == ("met" if met else "missed")
        assert all(p["problems"] == 0 for p in row["policies"].values())
        assert all(p["cpu_seconds"] > 0 for p in row["policies"].values())
        # the bounds printed beside the goals: boots only add to the oracle's cost; the floor is a wait
        assert row["oracle_boot_paid_vs_oracle"] > 1.0
        assert row["p99_empty_start_floor_s"] >= 0.0
    assert any(row["case"] == "openb default x2" for row in data["rows"])
    pinned = next(row for row in data["rows"] if row["case"] == "openb default, BE not safe to evict")
    assert all(p["restarts"] == 0 and p["lost_gpu_h"] == 0 for p in pinned["policies"].values())
    variants = [r["variant"] for r in data["headroom_frontier_openb_default"]]
    assert "10 h look-back (forecast_days=0)" in variants and len(variants) == len(set(variants)) >= 10
    assert {"headroom wait 60 s", "no headroom wait", "headroom wait 30 %"} <= set(variants)
    # CA with static CapacityBuffers of the smoke sizes, on the three traces, each with its plot
    assert set(data["buffer_frontier"]) == {"openb default", "genai qps", "synthetic agentic"}
    for label, rows in data["buffer_frontier"].items():
        assert [r["buffer_gpus"] for r in rows] == [1, 4]
        assert (tmp_path / "capacity" / f"buffer_frontier_{label.replace(' ', '_')}.png").stat().st_size > 0


def test_capacity_policies_bench_takes_a_trace_and_names_a_missing_one(tmp_path: Path) -> None:
    trace = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "traces" / "alibaba-openb-2023"
    pods = tmp_path / "pods.csv"
    pods.write_text("".join((trace / "openb_pod_list_gpuspec20.csv").read_text().splitlines(True)[:150]))
    run_smoke("capacity_policies.py", tmp_path, "--trace", str(pods))
    data = json.loads((tmp_path / "capacity_policies.json").read_text())
    passed = [r for r in data["rows"] if r["case"].endswith("(--trace)")]
    assert len(passed) == 1 and passed[0]["cost_with_signal"] is not None
    assert set(data["verdicts"][passed[0]["case"]]) == {
        "capacity.idle_vs_oracle",
        "capacity.p99_vs_ca",
        "capacity.cost_vs_oracle",
        "capacity.cost_with_signal",
    }
    bad = run_bench("capacity_policies.py", "--smoke", "--trace", str(tmp_path / "nope.csv"), timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "nope.csv" in bad.stderr
    garbled = tmp_path / "garbled.csv"
    garbled.write_text("bad,header\n1,2\n")
    bad = run_bench("capacity_policies.py", "--smoke", "--trace", str(garbled), timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0, bad.stderr
    assert "garbled.csv:1: unknown trace header" in bad.stderr


def test_capacity_planner_speed_bench_smoke(tmp_path: Path) -> None:
    run_smoke("capacity_planner_speed.py", tmp_path)
    rows = json.loads((tmp_path / "capacity_planner_speed.json").read_text())
    assert rows[0]["pods"] == 100 and rows[0]["launches"] > 0
    busy = [r for r in rows if str(r.get("case", "")).startswith("busy cluster")]
    assert [r["case"] for r in busy] == ["busy cluster, both orders", "busy cluster, one order"] * 2
    # the replay left nodes with pods running; first the next tasks are pending beside any left from the replay,
    # then only those; a second plan is never made with one order
    assert all(r["nodes"] > 0 and r["running"] > 0 for r in busy)
    assert busy[0]["pods"] >= 100 and busy[2]["pods"] < 100
    assert not busy[1]["second_plan"] and not busy[3]["second_plan"]
    # a live decision from Node and Pod objects places the same gated pods and launches nodes for them
    live = [r for r in rows if str(r.get("case", "")).endswith("decision")]
    assert [r["case"] for r in live] == ["live place decision", "live review decision"]
    assert all(r["pods"] == 100 and r["launches"] > 0 and r["running"] > 0 for r in live)
    # decisions and replays against the cluster's size, at the smoke sizes
    sized = [r for r in rows if str(r.get("case", "")).startswith("cluster of")]
    assert [r["nodes"] for r in sized] == [20, 100]
    assert all(r["pods"] == 100 and r["replay_plans"] > 0 and r["replay_ms_per_pod"] > 0 for r in sized)
    # live decisions against the cluster's size: Node objects, their long tasks bound, the tasks gated
    live_sized = [r for r in rows if str(r.get("case", "")).startswith("live, cluster of")]
    assert [r["nodes"] for r in live_sized] == [20, 100]
    assert all(r["pods"] == 100 and r["launches"] > 0 and r["cold_median_ms"] > 0 for r in live_sized)
    assert all(r["provreq_ms"] > 0 for r in live_sized)


def test_capacity_seeds_bench_smoke(tmp_path: Path) -> None:
    # a variant may set the controller loop's intervals beside the planner's settings
    run_smoke(
        "capacity_seeds.py", tmp_path, "--variant", "no room moves:make_room_moves=0,repack_interval=300"
    )
    data = json.loads((tmp_path / "capacity_seeds.json").read_text())
    assert data["smoke"] is True and data["pods"] == 300 and data["jitter"] == 0.1
    assert [(r["seed"], r["variant"]) for r in data["rows"]] == [
        (0, "default"),
        (0, "no room moves"),
        (1, "default"),
        (1, "no room moves"),
    ]
    assert all(r["problems"] == 0 for r in data["rows"])
    assert [r["loop"] for r in data["rows"]] == [{}, {"repack_interval": 300.0}] * 2
    # each row's verdict is what its ratios say against the goals, and the summary counts those verdicts
    for r in data["rows"]:
        met = [k for k, bound in data["goals"].items() if r[k] <= bound]
        names = " ".join(k.split("_")[0] for k in met) or "none"
        assert r["goals_met"] == ("all" if len(met) == len(data["goals"]) else names)
    assert set(data["summary"]) == {"default", "no room moves"}
    for name, entry in data["summary"].items():
        mine = [r for r in data["rows"] if r["variant"] == name]
        assert entry["all_held"] == sum(r["goals_met"] == "all" for r in mine)
        for key, bound in data["goals"].items():
            assert entry[key]["held"] == sum(r[key] <= bound for r in mine)
            assert entry[key]["min"] <= entry[key]["median"] <= entry[key]["max"]
    assert (tmp_path / "capacity_seeds.png").stat().st_size > 0


def test_capacity_seeds_bench_names_a_bad_variant() -> None:
    r = run_bench("capacity_seeds.py", "--smoke", "--variant", "x:no_such=1", timeout=120)
    assert r.returncode == 2
    assert "--variant 'x:no_such=1': 'no_such' is not a PlannerConfig setting" in r.stderr
    r = run_bench("capacity_seeds.py", "--smoke", "--variant", "x:repack_interval=-5", timeout=120)
    assert r.returncode == 2
    assert (
        "--variant 'x:repack_interval=-5': repack_interval='-5': expected a positive number of seconds"
        in r.stderr
    )


def test_capacity_headroom_bound_bench_smoke(tmp_path: Path) -> None:
    run_smoke("capacity_headroom_bound.py", tmp_path, "--seeds", "1")
    data = json.loads((tmp_path / "capacity_headroom_bound.json").read_text())
    assert data["smoke"] is True and data["pods"] == 600 and data["target"] == 6
    rows = {r["label"]: r for r in data["rows"]}
    default = rows["planner forecast (default)"]
    clairvoyant = rows["told each hour's pods, ≤ 6 waiting"]
    # less headroom than the default's lets more pods wait; the clairvoyant policy meets its target
    assert rows["forecast quantile 0.97"]["gpu_hours"] <= default["gpu_hours"]
    assert rows["forecast quantile 0.97"]["waiting"] >= default["waiting"]
    assert clairvoyant["waiting"] <= 6
    # the hull: holding more never lets more pods wait
    assert set(data["clairvoyant_hulls"]) == {"hour", "4 h", "day"}
    hull = sorted(data["clairvoyant_hulls"]["hour"])
    assert all(b[1] <= a[1] for a, b in itertools.pairwise(hull))
    # the replays: a forecaster told each hour's pods (the clairvoyant levels) holds headroom that lets fewer
    # pods wait than none does
    replays = {r["policy"]: r for r in data["replays"]}
    assert set(replays) == {
        "cluster-autoscaler",
        "oracle",
        "capstan (its forecast)",
        "capstan, no headroom",
        "capstan, told each hour",
        "capstan, told each 4 h",
        "capstan, told each day",
    }
    assert all(r["problems"] == 0 for r in replays.values())
    told = replays["capstan, told each hour"]
    assert told["slow_starts"] < replays["capstan, no headroom"]["slow_starts"]
    assert told["headroom_idle_gpu_hours"] > 0
    # one seed of drawn boot delays: Capstan with its forecast and with each clairvoyant one
    assert [r["policy"] for r in data["seeded"]] == [
        "capstan (its forecast)",
        "capstan, told each hour",
        "capstan, told each 4 h",
        "capstan, told each day",
    ]
    assert all(r["seed"] == 0 for r in data["seeded"])
    # the seeds bench's verdicts; told each hour's pods, fewer pods wait than with the planner's own forecast
    seeded = {r["policy"]: r for r in data["seeded"]}
    assert seeded["capstan, told each hour"]["goals_met"] == "all"
    assert seeded["capstan, told each hour"]["slow_starts"] < seeded["capstan (its forecast)"]["slow_starts"]
    assert run_bench("capacity_headroom_bound.py", "--seeds", "-1").returncode == 2
    assert (tmp_path / "capacity" / "headroom_bound.png").stat().st_size > 0


def test_capacity_live_bench_smoke(tmp_path: Path, kubeconfig: Path) -> None:
    """The live bench on a sandbox of its own (kube-scheduler started from a configuration file, for its pod
    backoff; ``kubeconfig`` only makes sure the binaries are built): a few gated tasks placed by the controller,
    beside the simulator."""
    run_smoke("capacity_live.py", tmp_path)
    data = json.loads((tmp_path / "capacity_live.json").read_text())
    live = data["rows"][0]
    assert (live["policy"], live["where"]) == ("capstan", "live")
    assert live["bound"] == live["pods"] == 6 and live["launches"] > 0 and live["gpu_hours"] > 0
    simulated = {r["policy"] for r in data["rows"][1:]}
    assert simulated == {
        "capstan, live settings",
        "capstan, live settings, no headroom",
        "capstan",
        "cluster-autoscaler",
        "karpenter",
        "oracle",
        "karpenter, at this run's waits",
        "cluster-autoscaler, soft taints",
    }
    # idle GPU-hours by cause add up, live as in the simulator, and every live node was seen to boot
    for row in data["rows"]:
        assert sum(row["idle"].values()) == pytest.approx(row["idle_gpu_hours"])
    assert len(live["node_boot_s"]) == live["launches"] and min(live["node_boot_s"]) > 0
    # the bounds beside the goals: no peer ran live, so against the emulations; the oracle's idle is its row's
    bounds = data["bounds"]
    assert bounds["against"] == "emulated" and bounds["p99_floor_s"] >= 0
    oracle = next(r for r in data["rows"] if r["policy"] == "oracle")
    assert bounds["oracle_idle_gpu_hours"] == oracle["idle_gpu_hours"]
    emulated = [r for r in data["rows"] if r["policy"] in ("karpenter", "cluster-autoscaler")]
    assert bounds["idle_goal_gpu_hours"] == pytest.approx(0.5 * min(r["idle_gpu_hours"] for r in emulated))


def test_capacity_demand_signals_bench_smoke(tmp_path: Path) -> None:
    """Told each pod one launch-to-GPUs time ahead, fewer of the first 300 openb tasks wait over a minute than
    with the planner's own forecast; bad leads are one line, exit 2."""
    run_smoke("capacity_demand_signals.py", tmp_path)
    data = json.loads((tmp_path / "capacity_demand_signals.json").read_text())
    rows = {r["policy"]: r for r in data["results"][0]["rows"]}
    assert rows["capstan, told 390 s ahead"]["slow_starts"] < rows["capstan, its own forecast"]["slow_starts"]
    assert "capstan, told 900 s ahead, capped at 390 s" in rows
    assert (tmp_path / "capacity_demand_signals.png").stat().st_size > 0
    for bad in ("soon", "-5"):
        proc = run_bench("capacity_demand_signals.py", "--leads", bad)
        assert proc.returncode == 2 and "--leads" in proc.stderr and "Traceback" not in proc.stderr
