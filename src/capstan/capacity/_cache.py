"""What the planner keeps between decisions (:class:`PlanCache`: memos of pure facts, and the forecaster), with
the pure valuations it memoises: a pod's and a node type's type-independent value, the queue order, and the
forecast pods turned into headroom phantoms (:func:`_headroom_pods`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from capstan.capacity._nodes import _Nodes
from capstan.capacity._plan_types import PlannerConfig, Snapshot
from capstan.capacity.forecast import Forecast, Forecaster, SlidingForecast, gpu_horizon, headroom_window
from capstan.capacity.model import GPU_MILLI, NodeType, Pod, PodShape
from capstan.capacity.nodetypes import CPU_PRICE_PER_CORE_HOUR, DEFAULT_GPU_PRICE, MEMORY_PRICE_PER_GIB_HOUR


def pod_value(pod: Pod) -> float:
    """A type-independent price of what the pod uses, so node types can be compared by value per dollar."""
    return (
        pod.gpu_total_milli / 1000 * DEFAULT_GPU_PRICE
        + pod.cpu_milli / 1000 * CPU_PRICE_PER_CORE_HOUR
        + pod.memory_mib / 1024 * MEMORY_PRICE_PER_GIB_HOUR
    )


def node_value(nt: NodeType) -> float:
    """:func:`pod_value` of a whole node of type ``nt``: no set of pods that fits on it is worth more."""
    return (
        nt.gpu * DEFAULT_GPU_PRICE
        + nt.cpu_milli / 1000 * CPU_PRICE_PER_CORE_HOUR
        + nt.memory_mib / 1024 * MEMORY_PRICE_PER_GIB_HOUR
    )


def _by_value_bound(types: tuple[NodeType, ...]) -> tuple[tuple[float, int, NodeType], ...]:
    """(highest value per dollar a node of the type can serve, index, type), highest first."""
    bounds = [(node_value(nt) / max(nt.price_per_hour, 1e-9), i, nt) for i, nt in enumerate(types)]
    return tuple(sorted(bounds, key=lambda b: (-b[0], b[1])))


def _constraint_key(pod: Pod) -> tuple[bool, int]:
    """Pods limited to fewer GPU models first; pods any model may serve last."""
    return (not pod.gpu_models, len(pod.gpu_models))


def _queue_key(pod: Pod) -> tuple[int, int, int, int, float, str]:
    return (-pod.priority, -pod.gang_size, -pod.gpu_total_milli, -pod.cpu_milli, pod.arrival, pod.name)


class PlanCache:
    """Memo of pure facts kept between decisions: which node types a pod shape may use and why not, which type
    a new node for a shape and the shapes queued behind it should be, the last forecast, the last repack
    search that found nothing, and the last snapshot's nodes as the placement search reads them (``nodes``:
    each decision looks only at the nodes that changed since, :mod:`._nodes`).

    It never changes a plan, only how fast it is made, except through the :class:`Forecaster` it may be given
    (what headroom is held for; the planner's own :class:`SlidingForecast` by default). It resets itself when
    the node-type tuple changes or it grows past ``limit`` entries, keeping that forecaster.
    """

    def __init__(
        self,
        node_types: tuple[NodeType, ...] = (),
        limit: int = 2_000_000,
        forecaster: Forecaster | None = None,
    ) -> None:
        self.node_types = node_types
        self.by_name: dict[str, NodeType] = {t.name: t for t in node_types}
        self.limit = limit
        self.ok: dict[PodShape, frozenset[str]] = {}
        self.cheapest: dict[tuple[PodShape, float], float] = {}
        self.why: dict[tuple[str, PodShape], str | None] = {}
        self._forecast: tuple[tuple[object, ...], Forecast] | None = None
        self.no_repack: dict[bool, tuple[object, ...]] = {}
        """Per order of the repack search (before headroom or not), the inputs of the last one that found
        nothing."""
        self.types: dict[tuple[object, ...], NodeType | str] = {}
        self._horizon: float | None = None
        self._by_bound: tuple[tuple[float, int, NodeType], ...] | None = None
        self._gpu_price: float | None = None
        self._forecaster = forecaster
        """What headroom is held for, if not the planner's own :class:`SlidingForecast`."""
        self._sliding: Forecaster = forecaster or SlidingForecast()
        self._phantoms: tuple[Forecast, PlannerConfig, list[Pod]] | None = None
        self.nodes = _Nodes()
        """The bins of the last snapshot's nodes and their indexes, brought up to date by each decision."""
        self.replans = 0
        """How many full plans made with this cache were made a second time, with the repack search first
        (``repack_both_orders``; see :func:`plan`). A count, not a memo: :meth:`reset` keeps it."""

    @property
    def horizon(self) -> float:
        """:func:`gpu_horizon` of the node types."""
        if self._horizon is None:
            self._horizon = gpu_horizon(self.node_types)
        return self._horizon

    @property
    def gpu_price(self) -> float:
        """The lowest price per GPU per hour of any node type with GPUs (0 if none has any)."""
        if self._gpu_price is None:
            self._gpu_price = min((t.price_per_hour / t.gpu for t in self.node_types if t.gpu), default=0.0)
        return self._gpu_price

    @property
    def by_value_bound(self) -> tuple[tuple[float, int, NodeType], ...]:
        """The node types, highest value per dollar a node of the type can serve first (:func:`node_value`)."""
        if self._by_bound is None:
            self._by_bound = _by_value_bound(self.node_types)
        return self._by_bound

    def forecast(self, snap: Snapshot, cfg: PlannerConfig) -> Forecast:
        """:func:`forecast` for ``snap`` (or the cache's own :class:`Forecaster`'s answer), reused while the
        recent arrivals are the same and it does not say it has changed, and otherwise updated from the last
        one's windows (:class:`SlidingForecast`)."""
        ends = (snap.recent[0].name, snap.recent[-1].name) if snap.recent else ("", "")
        key = (len(snap.recent), ends, cfg)
        stale = (
            self._forecast is not None and (at := self._forecast[1].changes_at) is not None and snap.now >= at
        )
        if self._forecast is None or self._forecast[0] != key or stale:
            self._forecast = (key, self._sliding.forecast(snap, cfg, headroom_window(cfg, self.horizon)))
        return self._forecast[1]

    def forget_forecast(self) -> None:
        """Read the forecast afresh at the next decision (what its forecaster reads changed, unannounced)."""
        self._forecast = None

    def phantoms(
        self, fc: Forecast, cfg: PlannerConfig, fits: Callable[[Pod], frozenset[str]] | None = None
    ) -> list[Pod]:
        """The forecast's pods as headroom phantoms (:func:`_headroom_pods`), the first ``max_phantoms`` in
        queue order, placed most constrained first: those limited to fewest GPU models, then the rest, each in
        queue order. Kept while the forecast holds the same pods.

        NOTE: placed in queue order, phantoms any model may serve took the free room of scarce models first and
        the pinned ones found none (and, under ``pinned_headroom_node_ratio``, often no node either). Pinned
        first, fewer pods waited longer than a minute on openb gpuspec20 at every boot delay from 3 to 15
        minutes (docs/benchmarks.md)."""
        if (
            self._phantoms is None
            or self._phantoms[0].pods != fc.pods
            or self._phantoms[0].known != fc.known
            or self._phantoms[1] != cfg
        ):
            # NOTE: a forecast pod no node type can run (``fits``: the types it fits, by shape) is never held
            # as headroom: nothing could serve it, and split into one phantom per GPU, a pod asking for a
            # million GPUs made a million phantoms in every decision. What is left is at most a node's GPUs
            # per pod, whatever the trace asks for.
            wanted = fc.pods if fits is None else tuple(p for p in fc.pods if fits(p))
            pods = sorted(_headroom_pods(wanted, cfg, fc.known), key=_queue_key)[: cfg.max_phantoms]
            pods.sort(key=_constraint_key)  # stable: queue order among equally constrained phantoms
            self._phantoms = (fc, cfg, pods)
        return self._phantoms[2]

    def reset(self, node_types: tuple[NodeType, ...]) -> PlanCache:
        self.node_types = node_types
        self.by_name = {t.name: t for t in node_types}
        self.ok.clear()
        self.cheapest.clear()
        self.why.clear()
        self._forecast = None
        self.no_repack.clear()
        self.types.clear()
        self._horizon = None
        self._by_bound = None
        self._gpu_price = None
        self._sliding = self._forecaster or SlidingForecast()
        self._phantoms = None
        self.nodes = _Nodes()
        return self


def _headroom_pods(
    pods: tuple[Pod, ...], cfg: PlannerConfig, known: frozenset[str] = frozenset()
) -> list[Pod]:
    """The phantoms headroom is held for: the forecast's pods, with each guessed pod of more than
    ``headroom_split_gpus`` whole GPUs held as that many one-GPU pods (its CPU and memory split alike); pods a
    queue announced (``known``) are held whole.

    NOTE: pending time is counted per pod and pods of 5-8 GPUs are few, so keeping a whole 8-GPU machine
    free for one costs much and protects little; as single GPUs the same capacity sits in the free devices
    of busy nodes and on smaller nodes, where the many small arrivals use it. A big pod that then finds no
    room waits for a node like any pod beyond the forecast. On openb this cut cost by a tenth at the same p99
    (docs/benchmarks.md); 1, 2 and 4 were tried as the threshold, 4 did best. An announced pod is coming, so
    its node is no gamble: split, an announced 8-GPU pod found its eight GPUs scattered and waited a whole boot
    (openb default told an hour ahead: 115 pods waited over a minute split, 59 whole; docs/benchmarks.md).
    """
    split = cfg.headroom_split_gpus
    if split <= 0:
        return list(pods)
    out: list[Pod] = []
    for p in pods:
        if p.num_gpu <= split or p.is_fractional or p.name in known:
            out.append(p)
            continue
        n = p.num_gpu
        one = replace(  # one whole device each (a pod of several GPUs takes whole devices whatever its gpu_milli)
            p,
            num_gpu=1,
            gpu_milli=GPU_MILLI,
            cpu_milli=max(1, p.cpu_milli // n),
            memory_mib=max(1, p.memory_mib // n),
        )
        out.extend(replace(one, name=f"{p.name}#{i}") for i in range(n))
    return out
