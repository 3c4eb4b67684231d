"""Running several policies on one workload and summarising what each cost: the numbers the CLI and benches show.

``run_policies`` replays the same workload, node types and seed against each policy (the static cluster is sized
to the oracle's peak node count per type, so the oracle runs first when static is asked for). ``summarize``
reduces a :class:`SimResult` to flat figures; ``write_plots`` draws them with matplotlib's Agg backend.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from capstan.capacity.forecast import Forecaster
from capstan.capacity.model import NodeType, PodShape, Workload
from capstan.capacity.placement import why_incompatible
from capstan.capacity.planner import PlannerConfig
from capstan.capacity.policies import POLICY_NAMES, make_policy
from capstan.capacity.sim import IDLE_CAUSES, STAGES, Sim, SimResult
from capstan.errors import UserError
from capstan.percentile import percentile

SLOW_START_S = 60.0
"""A pod that waits longer than this has waited for capacity to be added (a boot is minutes)."""


@dataclass(frozen=True)
class Summary:
    policy: str
    gpu_hours: float
    allocated_gpu_hours: float
    idle: dict[str, float]
    cost: float
    pending: dict[str, tuple[float, float, float]]
    """Per stage and ``total``: (p50, p95, p99) seconds."""
    launches: int
    drains: int
    moves: int
    slow_starts: int
    """Pods that waited longer than ``SLOW_START_S`` before they first ran (a count, robust on short traces)."""
    move_wait: tuple[float, float]
    """(p50, p99) seconds an evicted pod waited to run again (moves and drains; not in ``pending``)."""
    pods: int
    bound: int
    unplaced: int
    unplaced_reasons: dict[str, int]
    seconds: float
    """Wall-clock seconds the replay took."""
    problems: tuple[str, ...]
    boot_cost: float = 0.0
    """:meth:`SimResult.boot_cost`: for the oracle, what its launches would add if each paid its boot delay."""
    cpu_seconds: float = 0.0
    """CPU seconds the replay's process spent (one core): other processes competing for the cores lengthen it
    far less than ``seconds``."""
    restarts: int = 0
    """Moves of pods that were not safe to evict (:attr:`Pod.safe_to_evict`): each ran again from the start."""
    lost_gpu_hours: float = 0.0
    """GPU-hours of running those restarts threw away."""

    @property
    def idle_total(self) -> float:
        return sum(self.idle.values())

    @property
    def moves_text(self) -> str:
        """Moves as the tables show them, with the restarts among them when there were any."""
        return f"{self.moves} ({self.restarts} restarted)" if self.restarts else str(self.moves)

    @property
    def allocation_rate(self) -> float:
        return self.allocated_gpu_hours / self.gpu_hours if self.gpu_hours else 0.0


def empty_start_floor(workload: Workload, node_types: Sequence[NodeType], q: float = 99.0) -> float:
    """A floor under the ``q``-th percentile pending time of any policy that starts with no nodes and asks for
    none before the first pod arrives: every autoscaler, but not the static cluster or the oracle, whose nodes
    need no boot.

    A pod can run no earlier than the first arrival plus the shortest mean boot delay (and GPU-ready delay, if
    it asks for GPUs) among the node types it fits; each pod's floor is that minus its own arrival, if positive.
    On a short, bursty trace the first burst alone can put this above the p99 goal.
    """
    if not workload.pods:
        return 0.0
    first = min(p.arrival for p in workload.pods)
    quickest: dict[PodShape, float | None] = {}  # pods of one shape fit the same types
    floors: list[float] = []
    for pod in workload.pods:
        if pod.shape not in quickest:
            delays = [
                nt.boot_delay.mean() + (nt.gpu_ready_delay.mean() if pod.wants_gpu else 0.0)
                for nt in node_types
                if why_incompatible(nt, pod) is None
            ]
            quickest[pod.shape] = min(delays, default=None)
        up = quickest[pod.shape]
        if up is not None:
            floors.append(max(0.0, first + up - pod.arrival))
    return percentile(floors, q, empty=0.0)


def peak_counts(result: SimResult) -> dict[str, int]:
    """Most nodes of each type alive at once during a run."""
    out: dict[str, int] = {}
    by_type: dict[str, list[tuple[float, int]]] = {}
    for n in result.nodes:
        ev = by_type.setdefault(n.nt.name, [])
        ev.append((n.requested_at, 1))
        ev.append((n.gone_at if n.gone_at is not None else result.end + 1, -1))
    for name, ev in by_type.items():
        cur = best = 0
        for _, d in sorted(ev, key=lambda e: (e[0], e[1])):
            cur += d
            best = max(best, cur)
        out[name] = best
    return out


def summarize(result: SimResult, seconds: float = 0.0, cpu_seconds: float = 0.0) -> Summary:
    stages = result.pending_stages()
    reasons: dict[str, int] = {}
    for sp in result.unplaced():
        key = sp.reason.split(" (")[0]
        reasons[key] = reasons.get(key, 0) + 1
    return Summary(
        policy=result.policy,
        gpu_hours=result.gpu_hours(),
        allocated_gpu_hours=result.allocated_gpu_hours(),
        idle=result.idle_gpu_hours(),
        cost=result.cost(),
        pending={
            s: (percentile(v, 50, empty=0.0), percentile(v, 95, empty=0.0), percentile(v, 99, empty=0.0))
            for s, v in stages.items()
        },
        launches=result.launches,
        drains=result.drains,
        moves=result.moves,
        slow_starts=sum(1 for w in stages["total"] if w > SLOW_START_S),
        move_wait=(percentile(waits := result.move_waits(), 50, empty=0.0), percentile(waits, 99, empty=0.0)),
        pods=len(result.pods),
        bound=sum(1 for p in result.pods if p.bound_at is not None),
        unplaced=len(result.unplaced()),
        unplaced_reasons=reasons,
        seconds=seconds,
        problems=tuple(result.check()),
        boot_cost=result.boot_cost(),
        cpu_seconds=cpu_seconds,
        restarts=result.restarts(),
        lost_gpu_hours=result.lost_gpu_hours(),
    )


def run_policies(
    workload: Workload,
    node_types: tuple[NodeType, ...],
    policies: Sequence[str],
    *,
    seed: int = 0,
    record: bool = False,
    progress: Callable[[str, float], None] | None = None,
    planner: PlannerConfig | None = None,
    buffer_gpus: int | None = None,
    review_interval: float | None = None,
    repack_interval: float | None = None,
    forecaster: Callable[[], Forecaster] | None = None,
) -> dict[str, tuple[SimResult, Summary]]:
    """Replay ``workload`` against each of ``policies`` (static sized from the oracle's peak, which is replayed
    for it if not asked for); ``planner``, the two intervals and ``forecaster`` (a new forecast for each replay)
    configure Capstan (None: its defaults)."""
    for name in policies:
        if name not in POLICY_NAMES:
            raise UserError(f"--policy {name}: unknown policy; choose from {', '.join(POLICY_NAMES)}")
    order = list(dict.fromkeys(policies))
    if "static" in order and "oracle" not in order:
        order.insert(order.index("static"), "oracle")
        hidden_oracle = True
    else:
        hidden_oracle = False
    if "static" in order and "oracle" in order and order.index("oracle") > order.index("static"):
        order.remove("oracle")
        order.insert(order.index("static"), "oracle")
    out: dict[str, tuple[SimResult, Summary]] = {}
    for name in order:
        counts = peak_counts(out["oracle"][0]) if name == "static" else None
        policy = make_policy(name, counts, planner, buffer_gpus, review_interval, repack_interval, forecaster)
        cb = (lambda f, _n=name: progress(_n, f)) if progress else None
        t0, c0 = time.perf_counter(), time.process_time()
        result = Sim(workload, node_types, policy, seed=seed, record=record, progress=cb).run()
        out[name] = (result, summarize(result, time.perf_counter() - t0, time.process_time() - c0))
    if hidden_oracle:
        del out["oracle"]
    return {name: out[name] for name in policies if name in out}


def write_plots(summaries: Sequence[Summary], out_dir: Path, title: str) -> list[Path]:
    """Idle GPU-hours by cause, pending p99 by stage, cost and allocation rate: one PNG each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    names = [s.policy for s in summaries]
    paths = []

    fig, ax = plt.subplots(figsize=(8, 4.5))
    bottom = [0.0] * len(summaries)
    for cause in IDLE_CAUSES:
        vals = [s.idle[cause] for s in summaries]
        ax.bar(names, vals, bottom=bottom, label=cause)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_ylabel("idle GPU-hours")
    ax.set_title(f"Idle GPU-hours by cause — {title}")
    ax.legend()
    fig.tight_layout()
    paths.append(out_dir / "idle_gpu_hours.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    bottom = [0.0] * len(summaries)
    for stage in STAGES:
        vals = [s.pending[stage][2] / 60 for s in summaries]
        ax.bar(names, vals, bottom=bottom, label=stage)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.scatter(
        names, [s.pending["total"][2] / 60 for s in summaries], color="black", zorder=3, label="total p99"
    )
    ax.set_ylabel("minutes (p99 per stage, stacked)")
    ax.set_title(f"Pod pending time p99 by stage — {title}")
    ax.legend()
    fig.tight_layout()
    paths.append(out_dir / "pending_p99.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    a1.bar(names, [s.cost for s in summaries])
    a1.set_ylabel("cost ($)")
    a1.set_title("Cost")
    a2.bar(names, [100 * s.allocation_rate for s in summaries])
    a2.set_ylabel("GPU allocation rate (%)")
    a2.set_title("Allocated / provisioned GPU-hours")
    for a in (a1, a2):
        a.tick_params(axis="x", labelrotation=20)
    fig.tight_layout()
    paths.append(out_dir / "cost_allocation.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def write_sweep_plot(rows: Sequence[tuple[float, str, Summary]], out_dir: Path, title: str) -> Path:
    """Idle GPU-hours and p99 pending against boot delay, one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(14, 4))
    for policy in dict.fromkeys(r[1] for r in rows):
        pts = sorted((d, s) for d, p, s in rows if p == policy)
        xs = [d / 60 for d, _ in pts]
        a1.plot(xs, [s.idle_total for _, s in pts], marker="o", label=policy)
        a2.plot(xs, [s.pending["total"][2] / 60 for _, s in pts], marker="o", label=policy)
        a3.plot(xs, [s.cost for _, s in pts], marker="o", label=policy)
    a1.set_ylabel("idle GPU-hours")
    a2.set_ylabel("p99 pending (min)")
    a3.set_ylabel("cost ($)")
    for a in (a1, a2, a3):
        a.set_xlabel("boot delay (min)")
        a.legend(fontsize=7)
    fig.suptitle(f"Boot-delay sweep — {title}")
    fig.tight_layout()
    path = out_dir / "boot_delay_sweep.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
