"""``capstan capacity simulate`` end to end: real trace files, a real process, its table, plots and errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
OPENB = ROOT / ".." / "shared" / "data" / "traces" / "alibaba-openb-2023"
HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"


def assert_one_line_exit_2(r: subprocess.CompletedProcess[str], message: str) -> None:
    """A bad input: exit 2 and one line on stderr that says ``message``."""
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0
    assert message in r.stderr


def capstan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from capstan.cli.main import main; main()", "capacity", "simulate", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def test_simulate_openb_prints_table_and_writes_plots(tmp_path: Path) -> None:
    out = tmp_path / "plots"
    r = capstan(
        "--trace",
        str(OPENB / "openb_pod_list_gpuspec20.csv"),
        "--max-pods",
        "150",
        "--policy",
        "capstan",
        "--policy",
        "cluster-autoscaler",
        "--policy",
        "static",
        "--boot-delay",
        "4m",
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    assert "capstan" in r.stdout and "cluster-autoscaler" in r.stdout and "static" in r.stdout
    assert "idle" in r.stdout and "cost" in r.stdout
    assert "÷ CA" in r.stdout and "launches" not in r.stdout  # the headline; the breakdown is --wide's
    assert "conservation check failed" not in r.stdout
    for name in ("idle_gpu_hours.png", "pending_p99.png", "cost_allocation.png"):
        assert (out / name).stat().st_size > 1000


def test_sweep_writes_the_boot_delay_plot(tmp_path: Path) -> None:
    r = capstan(
        "--trace",
        "synthetic:agentic:0.1",
        "--policy",
        "capstan",
        "--policy",
        "cluster-autoscaler",
        "--policy",
        "oracle",
        "--sweep",
        "--out",
        str(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    assert "Boot-delay sweep" in r.stdout
    assert (tmp_path / "boot_delay_sweep.png").stat().st_size > 1000
    # each boot delay: the oracle's cost, then the same launches paying that boot delay (dearer, and more so
    # as the delay grows)
    sweep = r.stdout.split("Boot-delay sweep", 1)[1]
    costs: dict[str, list[float]] = {"oracle": [], "oracle + boot": []}
    for line in sweep.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 6 and cells[2] in costs:
            costs[cells[2]].append(float(cells[6].replace(",", "")))  # the cost column, after "waited > 60 s"
    assert len(costs["oracle"]) == len(costs["oracle + boot"]) == 5
    extra = [b - o for o, b in zip(costs["oracle"], costs["oracle + boot"], strict=True)]
    assert all(x > 0 for x in extra)
    assert extra == sorted(extra) and extra[-1] > extra[0]


def test_unknown_policy_is_one_line_exit_2(tmp_path: Path) -> None:
    r = capstan("--trace", "synthetic:agentic:0.1", "--policy", "magic", "--out", str(tmp_path))
    assert_one_line_exit_2(r, "--policy magic: unknown policy")


def test_headroom_quantile_out_of_range_is_one_line_exit_2(tmp_path: Path) -> None:
    r = capstan("--trace", "synthetic:agentic:0.1", "--headroom-quantile", "1.5", "--out", str(tmp_path))
    assert_one_line_exit_2(r, "--headroom-quantile 1.5: must be between 0 and 1")


def test_headroom_wait_takes_a_duration_and_a_bad_one_or_bad_share_is_one_line_exit_2(tmp_path: Path) -> None:
    args = ["--trace", "synthetic:agentic:0.2", "--policy", "capstan", "--headroom-wait", "60s", "--out"]
    ok = capstan(*args, str(tmp_path))
    assert ok.returncode == 0, ok.stderr
    assert "capstan" in ok.stdout and "conservation check failed" not in ok.stdout
    r = capstan("--trace", "synthetic:agentic:0.1", "--headroom-wait", "soon", "--out", str(tmp_path))
    assert_one_line_exit_2(r, "--headroom-wait 'soon': expected seconds")
    r = capstan("--trace", "synthetic:agentic:0.1", "--headroom-wait", "120%", "--out", str(tmp_path))
    assert_one_line_exit_2(r, "--headroom-wait '120%': a share must be at least 0% and below 100%")


def test_batch_tasks_not_safe_to_evict_and_an_unknown_qos_class_is_one_line_exit_2(tmp_path: Path) -> None:
    trace = str(OPENB / "openb_pod_list_default.csv")
    args = ["--max-pods", "300", "--policy", "cluster-autoscaler", "--not-safe-to-evict", "BE", "--out"]
    ok = capstan("--trace", trace, *args, str(tmp_path))
    assert ok.returncode == 0, ok.stderr
    assert "cluster-autoscaler" in ok.stdout and "restarted" not in ok.stdout
    r = capstan("--trace", "synthetic:agentic:0.1", "--not-safe-to-evict", "batch", "--out", str(tmp_path))
    assert_one_line_exit_2(
        r, "--not-safe-to-evict batch: unknown QoS class; choose from LS, Guaranteed, Burstable, BE"
    )


def test_pinned_headroom_ratio_takes_inf_and_a_negative_one_is_one_line_exit_2(tmp_path: Path) -> None:
    args = ["--trace", "synthetic:agentic:0.2", "--policy", "capstan", "--out", str(tmp_path)]
    ok = capstan(*args, "--pinned-headroom-ratio", "inf")
    assert ok.returncode == 0, ok.stderr
    assert "capstan" in ok.stdout and "conservation check failed" not in ok.stdout
    r = capstan(*args, "--pinned-headroom-ratio", "-1")
    assert_one_line_exit_2(r, "--pinned-headroom-ratio -1.0: must be >= 0")


def test_room_moves_can_be_turned_off_and_a_negative_count_is_one_line_exit_2(tmp_path: Path) -> None:
    args = ["--trace", "synthetic:agentic:0.2", "--policy", "capstan", "--out", str(tmp_path)]
    ok = capstan(*args, "--room-moves", "0")
    assert ok.returncode == 0, ok.stderr
    assert "capstan" in ok.stdout and "conservation check failed" not in ok.stdout
    assert_one_line_exit_2(capstan(*args, "--room-moves", "-1"), "--room-moves -1: must be >= 0")


def test_ca_buffer_takes_a_size_and_a_bad_one_is_one_line_exit_2(tmp_path: Path) -> None:
    args = ["--trace", "synthetic:agentic:0.2", "--policy", "ca-buffer", "--out", str(tmp_path)]
    ok = capstan(*args, "--policy", "cluster-autoscaler", "--buffer-gpus", "2")
    assert ok.returncode == 0, ok.stderr
    assert "ca-buffer" in ok.stdout and "conservation check failed" not in ok.stdout
    assert "ca-buffer: a CapacityBuffer of 2 one-GPU pods (8000m CPU, 32768Mi memory each)" in ok.stdout
    peak = capstan(*args)
    assert peak.returncode == 0, peak.stderr
    assert "the trace's peak burst" in peak.stdout
    r = capstan(*args, "--buffer-gpus", "some")
    assert_one_line_exit_2(r, "--buffer-gpus 'some': expected a count of GPUs (>= 0) or 'peak'")


def test_negative_forecast_days_is_one_line_exit_2(tmp_path: Path) -> None:
    r = capstan("--trace", "synthetic:agentic:0.1", "--forecast-days", "-1", "--out", str(tmp_path))
    assert_one_line_exit_2(r, "--forecast-days -1: must be >= 0")


def test_bad_node_type_file_is_one_line_exit_2(tmp_path: Path) -> None:
    f = tmp_path / "types.yaml"
    f.write_text("node_types:\n  - name: x\n    cpu_milli: 1000\n    memory_mib: 1024\n    gpus: 2\n")
    r = capstan("--trace", "synthetic:agentic:0.1", "--nodes", str(f), "--out", str(tmp_path))
    assert_one_line_exit_2(r, "types.yaml")
    assert "gpus" in r.stderr


def test_malformed_trace_row_names_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "pods.csv"
    f.write_text(HEADER + "p0,1000,1024,1,500,,LS,Running,0,10,0\np1,1000,1024,1,500,,LS,Running,0,oops,0\n")
    r = capstan("--trace", str(f), "--out", str(tmp_path))
    assert r.returncode == 2
    assert f"{f}:3: column deletion_time" in r.stderr


def test_pod_larger_than_every_type_is_reported_and_run_goes_on(tmp_path: Path) -> None:
    types = tmp_path / "types.yaml"
    types.write_text(
        "node_types:\n"
        "  - name: l4-1\n    cpu_milli: 8000\n    memory_mib: 32768\n    gpu: 1\n    gpu_model: L4\n"
        "    price_per_hour: 0.8\n    boot_delay: {kind: uniform, low: 120, high: 240}\n"
    )
    pods = tmp_path / "pods.csv"
    pods.write_text(
        HEADER
        + "small,1000,1024,1,500,,LS,Running,0,600,0\n"
        + "huge,1000,1024,8,1000,,LS,Running,10,600,10\n"
        + "later,1000,1024,1,1000,,LS,Running,20,900,20\n"
    )
    r = capstan(
        "--trace",
        str(pods),
        "--nodes",
        str(types),
        "--policy",
        "capstan",
        "--policy",
        "cluster-autoscaler",
        "--out",
        str(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    assert "1 pod(s) not placed: fits no node type" in r.stdout


def test_router_traffic_sizes_inference_replicas_and_a_bad_replica_rate_is_one_line_exit_2(
    tmp_path: Path,
) -> None:
    """A Mooncake trace (the router benchmarks' traffic) replays as inference replicas on the built-in types."""
    lines = ROOT / ".." / "shared" / "data" / "traces" / "mooncake-fast25" / "conversation_trace.jsonl"
    f = tmp_path / "mooncake.jsonl"
    f.write_text("\n".join(lines.read_text().splitlines()[:2000]) + "\n")
    r = capstan(
        "--trace", str(f), "--replica-rps", "0.25", "--policy", "capstan", "--policy", "oracle",
        "--out", str(tmp_path / "plots"),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "mooncake.jsonl:" in r.stdout and "conservation check failed" not in r.stdout
    # no node list: said on stderr, with the types it falls back to
    assert "no node list (--nodes)" in r.stderr and "using the built-in node types (l4-1," in r.stderr
    pods = int(r.stdout.split("mooncake.jsonl: ")[1].split(" pods")[0])
    assert pods > 4  # 2,000 requests in about 10 minutes at 0.25 requests per second per replica
    for bad in ("0", "-1", "nan"):
        assert_one_line_exit_2(capstan("--trace", str(f), "--replica-rps", bad), "--replica-rps")


def test_the_controller_intervals_and_repack_orders_are_options_and_bad_ones_are_one_line_exit_2(
    tmp_path: Path,
) -> None:
    args = ["--trace", "synthetic:agentic:0.2", "--policy", "capstan", "--out", str(tmp_path)]
    ok = capstan(*args, "--repack-interval", "5m", "--review-interval", "30s", "--repack-orders", "one")
    assert ok.returncode == 0, ok.stderr
    assert "capstan" in ok.stdout and "conservation check failed" not in ok.stdout
    assert_one_line_exit_2(
        capstan(*args, "--repack-interval", "0"), "--repack-interval '0': must be longer than 0 s"
    )
    assert_one_line_exit_2(
        capstan(*args, "--review-interval", "soon"), "--review-interval 'soon': expected seconds"
    )
    assert_one_line_exit_2(
        capstan(*args, "--repack-orders", "two"), "--repack-orders two: expected 'both' or 'one'"
    )


def test_wide_prints_every_figure_and_json_keeps_them(tmp_path: Path) -> None:
    out = tmp_path / "summary.json"
    r = capstan("--trace", "synthetic:agentic:0.1", "--policy", "capstan", "--policy", "oracle", "--wide",
                "--json", str(out), "--out", str(tmp_path))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (
        "launches" in r.stdout and "drains" in r.stdout and "÷" not in r.stdout
    )  # headers wrap: one word each
    data = json.loads(out.read_text())
    assert [p["policy"] for p in data["policies"]] == ["capstan", "oracle"]
    assert {"idle", "pending", "cost", "launches", "drains", "moves", "unplaced"} <= set(data["policies"][0])


def test_json_into_a_directory_that_does_not_exist_is_one_line_before_the_replay(tmp_path: Path) -> None:
    r = capstan("--trace", "synthetic:agentic:0.1", "--json", str(tmp_path / "no" / "such.json"))
    assert_one_line_exit_2(r, "--json")


def test_pods_announced_ahead_wait_less_and_the_flags_that_cannot_work_are_one_line_exit_2(
    tmp_path: Path,
) -> None:
    """``--announce-ahead 1h --queue-only``: the first 300 openb tasks, each announced an hour before it comes, with
    the queue as Capstan's whole forecast: fewer pods wait over a minute than with its own forecast (the JSON
    says so); the flags alone or beside no headroom are one line, exit 2."""
    trace = ("--trace", str(OPENB / "openb_pod_list_default.csv"), "--max-pods", "300", "--policy", "capstan")

    def slow_starts(*extra: str) -> int:
        out = tmp_path / f"run{len(extra)}.json"
        r = capstan(*trace, *extra, "--json", str(out), "--out", str(tmp_path))
        assert r.returncode == 0, r.stderr
        (only,) = json.loads(out.read_text())["policies"]
        return int(only["slow_starts"])

    own = slow_starts()
    told = slow_starts("--announce-ahead", "1h", "--queue-only")
    assert told < own, (told, own)
    assert_one_line_exit_2(capstan(*trace, "--queue-only"), "--queue-only")
    assert_one_line_exit_2(capstan(*trace, "--announce-ahead", "soon"), "--announce-ahead 'soon'")
    assert_one_line_exit_2(
        capstan(*trace, "--announce-ahead", "1h", "--headroom-quantile", "0"), "--headroom-quantile 0"
    )
