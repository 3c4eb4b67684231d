"""Prove that the real Karpenter and cluster-autoscaler (their kwok providers, built outside the repository by
bench/peers/build_autoscalers.sh) run on a Capstan sandbox through bench/_autoscalers.py.

For each peer: a fresh sandbox with one CPU node, the peer installed for three node types (1×L4 and 4×L4 tainted
``nvidia.com/gpu=present:NoSchedule``, a 16-CPU type), three pending 1-GPU pods tolerating that taint; it reports
how long until all three are bound to nodes the peer created (and Running), which node types it chose and the labels
those nodes carry, then deletes the pods and reports how long until the peer's nodes are gone. Every wait is bounded
(``--timeout``). Needs the peer binaries; it is not part of the test suite (a run takes minutes).

    .venv/bin/python bench/autoscaler_peers_smoke.py --peer both \\
        --karpenter ../peers/bin/karpenter-kwok --cluster-autoscaler ../peers/bin/cluster-autoscaler-kwok
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _autoscalers import (
    CA_FAST_SCALE_DOWN,
    GPU_PRODUCT_LABEL,
    INSTANCE_TYPE_LABEL,
    PeerError,
    PeerProcess,
    find_cluster_autoscaler,
    find_karpenter,
    install_cluster_autoscaler,
    install_karpenter,
    karpenter_teardown,
    start_cluster_autoscaler,
    start_karpenter,
    write_karpenter_instance_types,
)
from capstan.capacity import NodeType, Taint
from capstan.kube import KubeClient, resources
from capstan.sandbox import GPU_RESOURCE, NodePool, Sandbox, SandboxSpec, require_toolchain

GPU_TAINT = Taint(key=GPU_RESOURCE, value="present", effect="NoSchedule")
NODE_TYPES = (
    NodeType("l4-1", 8000, 32768, gpu=1, gpu_model="NVIDIA-L4", price_per_hour=0.8, taints=(GPU_TAINT,)),
    NodeType("l4-4", 48000, 196608, gpu=4, gpu_model="NVIDIA-L4", price_per_hour=4.6, taints=(GPU_TAINT,)),
    NodeType("cpu-16", 16000, 65536, price_per_hour=0.77),
)
PODS = 3
NAMESPACE = "default"
BASE_NODES = {"cpu-0"}


def _pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"gpu-{i}", "namespace": NAMESPACE, "labels": {"app": "peers-smoke"}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi", GPU_RESOURCE: "1"},
                        "limits": {GPU_RESOURCE: "1"},
                    },
                }
            ],
            "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 0,
        },
    }


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S.%f")[:-4]


async def _wait(what: str, timeout: float, probe: Any) -> dict[str, Any]:
    """Poll ``probe`` until true (bounded); the wait on both clocks: monotonic seconds, and wall-clock seconds with
    its UTC start and end (they differ when the machine stalls: on this shared VM a 5 s timer once fired 16 s late)."""
    t0, w0 = time.monotonic(), time.time()
    while True:
        if await probe():
            w1 = time.time()
            return {
                "s": round(time.monotonic() - t0, 1),
                "wall_s": round(w1 - w0, 1),
                "utc": f"{_utc(w0)}–{_utc(w1)}",
            }
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{what}: not within {timeout:g} s")
        await asyncio.sleep(0.5)


async def _peer_nodes(kube: KubeClient) -> list[dict[str, Any]]:
    nodes, _ = await kube.list(resources.NODES)
    return [n for n in nodes if n["metadata"]["name"] not in BASE_NODES]


async def run_one(peer: str, binary: Path, scratch: Path, logs: Path, timeout: float) -> dict[str, Any]:
    box = Sandbox(scratch / f"sandbox-{peer}", require_toolchain())
    state = box.up(SandboxSpec(name=f"peers-{peer}", node_pools=[NodePool(name="cpu", count=1)]), timeout=240)
    kubeconfig = Path(state.kubeconfig)
    result: dict[str, Any] = {"peer": peer, "binary": str(binary)}
    proc: PeerProcess | None = None
    try:
        async with await KubeClient.from_kubeconfig(kubeconfig) as kube:
            log = logs / f"{peer}.log"
            if peer == "karpenter":
                await install_karpenter(kube, NODE_TYPES, consolidate_after="10s")
                types_file = write_karpenter_instance_types(
                    NODE_TYPES, logs / "karpenter-instance-types.json"
                )
                proc = start_karpenter(binary, kubeconfig, types_file, log)
            else:
                await install_cluster_autoscaler(kube, NODE_TYPES, max_count=5)
                proc = start_cluster_autoscaler(binary, kubeconfig, log, extra_args=CA_FAST_SCALE_DOWN)
            result["argv"] = list(proc.argv)
            result["log"] = str(log)
            result["ready_s"] = round(await asyncio.to_thread(proc.wait_ready, 60.0), 1)
            for i in range(PODS):
                await kube.create(resources.PODS, _pod(i))

            async def all_running() -> bool:
                pods, _ = await kube.list(
                    resources.PODS, namespace=NAMESPACE, label_selector="app=peers-smoke"
                )
                return len(pods) == PODS and all(
                    (p.get("spec") or {}).get("nodeName") not in (None, *BASE_NODES)
                    and (p.get("status") or {}).get("phase") == "Running"
                    for p in pods
                )

            result["scale_up"] = await _wait("3 pods Running on new nodes", timeout, all_running)
            pods, _ = await kube.list(resources.PODS, namespace=NAMESPACE, label_selector="app=peers-smoke")
            result["pod_nodes"] = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
            result["nodes"] = [
                {
                    "name": n["metadata"]["name"],
                    "instance_type": n["metadata"]["labels"].get(INSTANCE_TYPE_LABEL),
                    "gpu_product": n["metadata"]["labels"].get(GPU_PRODUCT_LABEL),
                    "gpu_capacity": n["status"].get("capacity", {}).get(GPU_RESOURCE),
                    "gpu_allocatable": n["status"].get("allocatable", {}).get(GPU_RESOURCE),
                    "labels": {
                        k: v
                        for k, v in sorted(n["metadata"]["labels"].items())
                        if k.startswith(("nvidia.com/", "karpenter.sh/capacity-type", "kwok-nodegroup"))
                    },
                    "taints": [t["key"] for t in n.get("spec", {}).get("taints") or []],
                }
                for n in await _peer_nodes(kube)
            ]
            for i in range(PODS):
                await kube.delete(resources.PODS, f"gpu-{i}", NAMESPACE, grace_seconds=0)

            async def no_peer_nodes() -> bool:
                return not await _peer_nodes(kube)

            result["scale_down"] = await _wait("peer nodes gone", timeout, no_peer_nodes)
            if peer == "karpenter":
                result["nodeclaims_left"] = await karpenter_teardown(kube)
    finally:
        if proc is not None:
            result["exit_code"] = proc.stop()
        box.down()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer", choices=("karpenter", "cluster-autoscaler", "both"), default="both")
    ap.add_argument("--karpenter", help="Karpenter's kwok binary (default: $CAPSTAN_KARPENTER, ../peers/bin)")
    ap.add_argument("--cluster-autoscaler", help="cluster-autoscaler's kwok binary (default: …/bin too)")
    ap.add_argument("--timeout", type=float, default=180.0, help="bound on each wait, seconds")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "out", help="where the JSON goes")
    args = ap.parse_args()
    peers = ["karpenter", "cluster-autoscaler"] if args.peer == "both" else [args.peer]
    binaries = {"karpenter": find_karpenter(args.karpenter), "cluster-autoscaler": find_cluster_autoscaler(
        args.cluster_autoscaler)}  # fmt: skip
    missing = [p for p in peers if binaries[p] is None]
    if missing:
        print(
            f"no binary for {', '.join(missing)}: build with bench/peers/build_autoscalers.sh",
            file=sys.stderr,
        )
        sys.exit(2)
    results = []
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="peers-smoke-") as tmp:
        for peer in peers:
            binary = binaries[peer]
            assert binary is not None
            try:
                result = asyncio.run(run_one(peer, binary, Path(tmp), args.out, args.timeout))
            except (PeerError, TimeoutError) as exc:
                log = args.out / f"{peer}.log"
                tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
                print(f"{peer}: {exc}\n--- log tail ---\n{tail}", file=sys.stderr)
                sys.exit(1)
            print(json.dumps(result, indent=1))
            results.append(result)
    (args.out / "autoscaler_peers_smoke.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
