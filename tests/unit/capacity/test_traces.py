"""Trace readers: the real openb, GenAI and Mooncake files and generated request files parse to the documented
counts; bad rows name file and line."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest

from capstan.capacity import Delay, Pod, load_trace, read_openb_nodes, read_openb_pods, synthetic_agentic
from capstan.capacity.traces import (
    HpaBehavior,
    ReplicaShape,
    demand_to_replicas,
    read_genai_qps,
    read_request_rate,
    sniff_format,
)
from capstan.errors import UserError
from capstan.replay import AgenticConfig, agentic_requests, write_requests

pytestmark = pytest.mark.unit

TRACES = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "traces"
OPENB = TRACES / "alibaba-openb-2023"
HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"


def test_openb_default_pod_list_has_8152_tasks_with_shares() -> None:
    w = read_openb_pods(OPENB / "openb_pod_list_default.csv")
    assert len(w.pods) == 8152
    assert sum(1 for p in w.pods if p.wants_gpu) == 7064
    assert any(p.is_fractional for p in w.pods)
    assert all(p.duration >= 1 for p in w.pods)
    assert [p.arrival for p in w.pods] == sorted(p.arrival for p in w.pods)


def test_openb_batch_tasks_can_be_marked_not_safe_to_evict() -> None:
    """The default list's qos column: 3,398 BE (batch) tasks, 4,647 LS, 100 Burstable, 7 Guaranteed."""
    assert all(p.safe_to_evict for p in read_openb_pods(OPENB / "openb_pod_list_default.csv").pods)
    w = read_openb_pods(OPENB / "openb_pod_list_default.csv", frozenset({"BE"}))
    assert sum(1 for p in w.pods if not p.safe_to_evict) == 3398
    assert all(p.priority == 0 for p in w.pods if not p.safe_to_evict)  # BE is the lowest priority class


def test_openb_gpuspec_variant_carries_gpu_model_constraints() -> None:
    w = read_openb_pods(OPENB / "openb_pod_list_gpuspec20.csv")
    constrained = [p for p in w.pods if p.gpu_models]
    assert constrained
    assert any(p.gpu_models == frozenset({"V100M16", "V100M32"}) for p in constrained)


def test_openb_node_list_groups_1523_nodes_into_types() -> None:
    types = read_openb_nodes(OPENB / "openb_node_list_all_node.csv", Delay("fixed", 300), Delay("fixed", 60))
    assert sum(t.max_count or 0 for t in types) == 1523
    g2 = [t for t in types if t.gpu_model == "G2"]
    assert g2 and g2[0].gpu == 8 and g2[0].max_count == 549
    assert all(t.price_per_hour > 0 for t in types)
    assert all(t.gpu_ready_delay.a == 0 for t in types if t.gpu == 0)


def test_malformed_row_names_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "pods.csv"
    f.write_text(HEADER + "p0,1000,1024,1,500,,LS,Running,0,10,0\np1,abc,1024,0,0,,BE,Running,0,10,0\n")
    with pytest.raises(UserError, match=r"pods\.csv:3: column cpu_milli"):
        read_openb_pods(f)


def test_inconsistent_gpu_request_is_an_error(tmp_path: Path) -> None:
    f = tmp_path / "pods.csv"
    f.write_text(HEADER + "p0,1000,1024,2,500,,LS,Running,0,10,0\n")
    with pytest.raises(UserError, match=r"pods\.csv:2: num_gpu=2 and gpu_milli=500 disagree"):
        read_openb_pods(f)


def test_short_row_and_unknown_header(tmp_path: Path) -> None:
    f = tmp_path / "pods.csv"
    f.write_text(HEADER + "p0,1000\n")
    with pytest.raises(UserError, match=r"pods\.csv:2: expected 11 columns"):
        read_openb_pods(f)
    g = tmp_path / "other.csv"
    g.write_text("a,b\n1,2\n")
    with pytest.raises(UserError, match=r"other\.csv:1: unknown trace header"):
        load_trace(str(g))
    with pytest.raises(UserError, match="file not found"):
        load_trace(str(tmp_path / "missing.csv"))


def test_bad_node_row_names_line(tmp_path: Path) -> None:
    f = tmp_path / "nodes.csv"
    f.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,262144,8,G2\nn1,32000,262144,2,\n")
    with pytest.raises(UserError, match=r"nodes\.csv:3: bad node shape"):
        read_openb_nodes(f, Delay(), Delay())


def test_genai_qps_becomes_bursty_replicas() -> None:
    w = read_genai_qps(TRACES / "alibaba-genai-2026" / "qps.csv", window=300)
    assert w.pods
    assert all(p.service == "genai" and p.num_gpu == 1 for p in w.pods)
    # the count alive changes over time: demand is bursty
    starts = {p.arrival for p in w.pods}
    assert len(starts) > 10


def test_genai_bad_value_names_line(tmp_path: Path) -> None:
    f = tmp_path / "qps.csv"
    f.write_text(
        "timestamp_anon,value,container_ip,request_type\n1.0,0.5,a,API Requests\n2.0,x,a,API Requests\n"
    )
    with pytest.raises(UserError, match=r"qps\.csv:3: timestamp_anon and value must be numbers"):
        read_genai_qps(f)


def _alive(pods: list[Pod], times: tuple[float, ...]) -> list[int]:
    return [sum(1 for p in pods if p.arrival <= t < p.arrival + p.duration) for t in times]


def test_demand_to_replicas_follows_the_curve_without_hpa_limits() -> None:
    shape = ReplicaShape(per_replica=1.0, min_replicas=0)
    step = HpaBehavior(scale_down_stabilization_s=0.0, scale_up_pods=10**6)
    pods = demand_to_replicas("svc", [(0.0, 2.0), (60.0, 3.0), (120.0, 1.0)], 60.0, shape, step)
    assert _alive(pods, (30.0, 90.0, 150.0)) == [2, 3, 1]


def test_replicas_follow_the_hpa_defaults() -> None:
    """Scale-down waits for the highest recommendation of the last 300 s to fall (a dip shorter than that
    removes nothing); scale-up adds at most max(4 pods, 100 %) per 15 s."""
    shape = ReplicaShape(per_replica=1.0, min_replicas=1)
    dip = [(0.0, 6.0), (300.0, 3.0), (400.0, 6.0), (700.0, 2.0), (1500.0, 2.0)]
    pods = demand_to_replicas("svc", dip, 100.0, shape)
    assert _alive(pods, (350.0, 650.0, 980.0, 1000.0)) == [
        6,
        6,
        6,
        2,
    ]  # the last recommendation of 6 was at 690 s
    assert len(pods) == 6  # the 100-second dip at 300 s removed and re-created nothing
    ramp = demand_to_replicas("svc", [(0.0, 1.0), (60.0, 20.0), (600.0, 20.0)], 60.0, shape)
    # from 1 replica: +4 at 60 s (1 -> 5), then 5 -> 10 at 75 s, 10 -> 20 at 90 s
    assert _alive(ramp, (59.0, 61.0, 74.0, 76.0, 89.0, 91.0)) == [1, 5, 5, 10, 10, 20]


NO_HPA_LIMITS = HpaBehavior(scale_down_stabilization_s=0.0, scale_up_pods=10**9)


def test_a_request_file_becomes_replicas_sized_by_its_request_rate(tmp_path: Path) -> None:
    """The router's traffic (the replayer's request file, from the real agentic generator) sizes the replicas:
    with no HPA limits, each window has exactly ceil(requests / window / per-replica rate) replicas alive."""
    requests = agentic_requests(AgenticConfig(sessions=120, session_rate=0.5, seed=3))
    f = tmp_path / "agents.jsonl"
    write_requests(f, requests)
    assert sniff_format(f) == "requests"
    window, rps = 30.0, 0.2
    w = read_request_rate(f, window, ReplicaShape(per_replica=rps, min_replicas=0), NO_HPA_LIMITS)
    assert w.name == "agents.jsonl" and all(p.service == "agents" and p.num_gpu == 1 for p in w.pods)
    first = min(int(r.t // window) for r in requests)
    counts = Counter(int(r.t // window) - first for r in requests)
    mids = tuple((k + 0.5) * window for k in range(max(counts) + 1))
    want = [math.ceil(counts.get(k, 0) / window / rps - 1e-9) for k in range(max(counts) + 1)]
    assert max(want) > min(want)  # the traffic is bursty, so the check can tell windows apart
    assert _alive(list(w.pods), mids) == want


def test_a_mooncake_trace_becomes_replicas(tmp_path: Path) -> None:
    lines = (TRACES / "mooncake-fast25" / "conversation_trace.jsonl").read_text().splitlines()[:3000]
    f = tmp_path / "mooncake.jsonl"
    f.write_text("\n".join(lines) + "\n")
    assert sniff_format(f) == "mooncake"
    w = load_trace(str(f), window=60.0, per_replica=0.25)
    assert w.pods and all(p.service == "mooncake" for p in w.pods)
    peak = max(_alive(list(w.pods), tuple(float(t) for t in range(0, 900, 10))))
    assert peak > 4  # 3,000 requests in about 15 minutes at 0.25 requests per second per replica
    assert len(load_trace(str(f), window=60.0, per_replica=2.0).pods) < len(w.pods)


def test_bad_router_traffic_lines_name_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "req.jsonl"
    good = '{"t": 0, "api": "completions", "body": {"model": "m", "prompt": "hi"}}'
    f.write_text(good + '\n{"t": -1, "api": "completions", "body": {"model": "m", "prompt": "hi"}}\n')
    with pytest.raises(UserError, match=r"req\.jsonl:2: 't' must be a number >= 0"):
        load_trace(str(f))
    m = tmp_path / "mc.jsonl"
    m.write_text(
        '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n'
        '{"timestamp": 5, "input_length": 10, "output_length": 1}\n'
    )
    with pytest.raises(UserError, match=r"mc\.jsonl:2: missing field 'hash_ids'"):
        load_trace(str(m))
    other = tmp_path / "other.jsonl"
    other.write_text('\n{"time": 1}\n')
    with pytest.raises(UserError, match=r"other\.jsonl:2: unknown JSON trace line"):
        load_trace(str(other))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"t": 1,\n')
    with pytest.raises(UserError, match=r"broken\.jsonl:1: invalid JSON"):
        load_trace(str(broken))


def test_synthetic_generator_is_seeded() -> None:
    a, b, c = synthetic_agentic(7), synthetic_agentic(7), synthetic_agentic(8)
    assert a == b
    assert a.pods != c.pods
    assert any(p.gang for p in a.pods)


def test_a_header_only_file_and_an_unknown_qos_are_errors_naming_file_and_row(tmp_path: Path) -> None:
    empty = tmp_path / "openb_pod_list_empty.csv"
    empty.write_text(HEADER)
    with pytest.raises(
        UserError, match=r"openb_pod_list_empty.csv: no pods \(the file holds only the header\)"
    ):
        load_trace(str(empty))
    qos = tmp_path / "qos.csv"
    qos.write_text(
        HEADER + "p1,1000,1000,1,1000,,LS,Running,0,100,0\np2,1000,1000,1,1000,,Gold,Running,0,100,0\n"
    )
    with pytest.raises(UserError) as info:
        load_trace(str(qos))
    assert str(info.value) == (
        f"{qos}:3: column qos: unknown QoS class 'Gold'; expected one of LS, Guaranteed, Burstable, BE"
    )


@pytest.mark.parametrize("where", ["header", "row"])
def test_bytes_that_are_not_utf8_name_their_line(tmp_path: Path, where: str) -> None:
    path = tmp_path / "pods.csv"
    row = b"p1,1000,1000,1,1000,,LS,Running,0,100,0\n"
    if where == "header":
        path.write_bytes(b"\xef" + HEADER.encode() + row)
        line = 1
    else:
        path.write_bytes(HEADER.encode() + row + b"p\xe92,1000,1000,1,1000,,LS,Running,0,100,0\n")
        line = 3
    with pytest.raises(UserError, match=rf"pods.csv:{line}: not UTF-8 text \(byte 0x..") as info:
        load_trace(str(path))
    assert "\n" not in str(info.value)


def test_a_pod_of_any_size_is_read(tmp_path: Path) -> None:
    """Whether a pod fits is the simulator's question (it says 'fits no node type'), not the reader's."""
    path = tmp_path / "pods.csv"
    path.write_text(HEADER + f"huge,1000,1000,{10**30},1000,,LS,Running,0,100,0\n")
    (pod,) = load_trace(str(path)).pods
    assert pod.num_gpu == 10**30
