"""Trace readers and the synthetic generator: every source becomes a :class:`Workload` of pods.

Formats (documented in docs/capacity.md, recognised by their CSV header so any file of the same shape works):

* openb pod list (``openb_pod_list_*.csv``): one batch or service task a row; duration is
  ``deletion_time - scheduled_time`` (``creation_time`` when never scheduled).
* GenAI request rate (``qps.csv``): samples summed per window across containers give a demand curve, turned into
  inference replicas as an HPA with Kubernetes' default behaviour would (:class:`HpaBehavior`: recommendations
  ``ceil(demand / per_replica)``); replicas above the current count leave newest first.
* Router traffic (JSONL): a Capstan request file (the replayer's and the router benchmarks' format,
  :mod:`capstan.replay`) or a Mooncake trace. Requests per window give a demand curve in requests per second,
  turned into replicas the same way as the GenAI curve: the traffic the router serves sizes the replicas the
  planner provisions for.
* ``synthetic:agentic``: a seeded bursty agentic-inference generator (calm/burst Markov-modulated arrivals,
  fan-out, some two-node gangs).

A malformed row raises :class:`UserError` naming the file and line.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import random
from collections import defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from capstan.capacity.model import GPU_MILLI, Pod, Toleration, Workload
from capstan.config import decoded_lines
from capstan.errors import UserError

OPENB_POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
GENAI_QPS_COLUMNS = ("timestamp_anon", "value", "container_ip", "request_type")
QOS_PRIORITY = {"LS": 1000, "Guaranteed": 1000, "Burstable": 500, "BE": 0}
OPENB_QOS = tuple(QOS_PRIORITY)
"""The QoS classes of openb's ``qos`` column."""
GPU_TOLERATION = Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")


def sniff_format(path: Path) -> str:
    """``openb-pods`` or ``genai-qps`` from the CSV header, ``requests`` or ``mooncake`` from the first JSON line;
    anything else is a one-line error."""
    try:
        with path.open("rb") as fh:
            lineno, first = 0, ""
            # bounded by the file: stops at the first non-blank line
            for n, text in decoded_lines(path, fh):
                if text.strip():
                    lineno, first = n, text
                    break
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if first.lstrip().startswith("{"):
        return _sniff_json(path, lineno, first)
    header = next(csv.reader([first]), [])
    cols = tuple(h.strip() for h in header)
    if cols == OPENB_POD_COLUMNS:
        return "openb-pods"
    if cols == GENAI_QPS_COLUMNS:
        return "genai-qps"
    raise UserError(
        f"{path}:1: unknown trace header {','.join(cols)!r}; expected an openb pod list, a GenAI qps.csv, "
        "a request file or a Mooncake trace"
    )


def _sniff_json(path: Path, lineno: int, line: str) -> str:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}:{lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
    if isinstance(obj, dict) and {"timestamp", "input_length"} <= obj.keys():
        return "mooncake"
    if isinstance(obj, dict) and {"t", "body"} <= obj.keys():
        return "requests"
    raise UserError(
        f"{path}:{lineno}: unknown JSON trace line; expected a request file ('t', 'body') or a Mooncake trace "
        "('timestamp', 'input_length', 'output_length', 'hash_ids')"
    )


def _int(path: Path, line: int, col: str, text: str, *, blank: int | None = None) -> int:
    text = text.strip()
    if not text and blank is not None:
        return blank
    try:
        return int(float(text)) if "." in text else int(text)
    except ValueError:
        raise UserError(f"{path}:{line}: column {col}: expected an integer, got {text!r}") from None


def read_openb_pods(path: Path, not_safe_to_evict: frozenset[str] = frozenset()) -> Workload:
    """Read an openb pod list (default or gpuspec variants) into a workload sorted by arrival; pods whose QoS
    class (``qos``: LS, BE, Burstable, Guaranteed) is in ``not_safe_to_evict`` get
    :attr:`Pod.safe_to_evict` False (BE: the batch tasks, whose work an eviction would lose)."""
    pods: list[Pod] = []
    with path.open("rb") as fh:
        rows = _rows(path, fh)
        header = tuple(h.strip() for h in next(rows, (1, []))[1])
        if header != OPENB_POD_COLUMNS:
            raise UserError(f"{path}:1: expected header {','.join(OPENB_POD_COLUMNS)}")
        for line, row in rows:
            if not row:
                continue
            if len(row) != len(OPENB_POD_COLUMNS):
                raise UserError(f"{path}:{line}: expected {len(OPENB_POD_COLUMNS)} columns, got {len(row)}")
            name = row[0].strip()
            cpu = _int(path, line, "cpu_milli", row[1])
            mem = _int(path, line, "memory_mib", row[2])
            num_gpu = _int(path, line, "num_gpu", row[3])
            gpu_milli = _int(path, line, "gpu_milli", row[4])
            created = _int(path, line, "creation_time", row[8])
            deleted = _int(path, line, "deletion_time", row[9])
            scheduled = _int(path, line, "scheduled_time", row[10], blank=created)
            if not name:
                raise UserError(f"{path}:{line}: empty name")
            if cpu < 0 or mem < 0 or num_gpu < 0 or not 0 <= gpu_milli <= GPU_MILLI:
                raise UserError(f"{path}:{line}: negative request or gpu_milli outside 0..1000")
            if (num_gpu == 0) != (gpu_milli == 0) or (num_gpu > 1 and gpu_milli != GPU_MILLI):
                raise UserError(f"{path}:{line}: num_gpu={num_gpu} and gpu_milli={gpu_milli} disagree")
            if deleted < created:
                raise UserError(f"{path}:{line}: deletion_time before creation_time")
            models = frozenset(m.strip() for m in row[5].split("|") if m.strip())
            qos = row[6].strip()
            if qos not in QOS_PRIORITY:
                raise UserError(
                    f"{path}:{line}: column qos: unknown QoS class {qos!r}; expected one of {', '.join(OPENB_QOS)}"
                )
            pods.append(
                Pod(
                    name=name,
                    arrival=float(created),
                    cpu_milli=cpu,
                    memory_mib=mem,
                    num_gpu=num_gpu,
                    gpu_milli=gpu_milli,
                    gpu_models=models,
                    tolerations=(GPU_TOLERATION,) if num_gpu else (),
                    priority=QOS_PRIORITY[qos],
                    duration=float(max(1, deleted - max(scheduled, created))),
                    safe_to_evict=qos not in not_safe_to_evict,
                )
            )
    if not pods:
        raise UserError(f"{path}: no pods (the file holds only the header)")
    pods.sort(key=lambda p: (p.arrival, p.name))
    return Workload(name=path.name, pods=tuple(pods))


def _rows(path: Path, fh: BinaryIO) -> Iterator[tuple[int, list[str]]]:
    """``(line, row)`` for each CSV row of ``fh``; bad bytes and malformed rows are one-line UserErrors."""
    reader = csv.reader(line for _, line in decoded_lines(path, fh))
    for _ in itertools.count():  # bounded by the file
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise UserError(f"{path}:{reader.line_num}: {exc}") from None
        yield reader.line_num, row


@dataclass(frozen=True)
class ReplicaShape:
    """The pod that serves one replica of an inference service, and how much demand one replica absorbs."""

    cpu_milli: int = 8000
    memory_mib: int = 32768
    num_gpu: int = 1
    gpu_milli: int = GPU_MILLI
    gpu_models: frozenset[str] = frozenset()
    per_replica: float = 2.0
    min_replicas: int = 1


@dataclass(frozen=True)
class HpaBehavior:
    """How a HorizontalPodAutoscaler turns the demand curve into a replica count; the defaults are those
    Kubernetes fills in for ``autoscaling/v2`` with no ``behavior`` set (pkg/apis/autoscaling/v2/defaults.go),
    and the controller's 15 s sync period.

    Scale-down uses the highest recommendation of the last ``scale_down_stabilization_s``; scale-up adds at most
    the larger of ``scale_up_pods`` and ``scale_up_percent`` % of the replicas there were ``scale_up_period_s``
    ago, with no stabilization. ``HpaBehavior(scale_down_stabilization_s=0, scale_up_pods=10**9)`` follows the
    curve step by step.
    """

    sync_period_s: float = 15.0
    scale_down_stabilization_s: float = 300.0
    scale_up_pods: int = 4
    scale_up_percent: int = 100
    scale_up_period_s: float = 15.0


def demand_to_replicas(
    service: str,
    curve: list[tuple[float, float]],
    window: float,
    shape: ReplicaShape,
    hpa: HpaBehavior | None = None,
) -> list[Pod]:
    """Turn ``(window start, demand)`` into replica pods as an HPA would: every sync period it recommends
    ``ceil(demand / per_replica)`` (at least ``min_replicas``) and moves the count toward it within ``hpa``'s
    limits; replicas above the count leave newest first."""
    hpa = hpa or HpaBehavior()
    live: list[float] = []  # start time of replica i
    pods: list[Pod] = []
    end_time = (curve[-1][0] + window) if curve else 0.0

    def emit(idx: int, start: float, stop: float) -> None:
        pods.append(
            Pod(
                name=f"{service}-r{idx}-{int(start)}",
                arrival=start,
                cpu_milli=shape.cpu_milli,
                memory_mib=shape.memory_mib,
                num_gpu=shape.num_gpu,
                gpu_milli=shape.gpu_milli,
                gpu_models=shape.gpu_models,
                tolerations=(GPU_TOLERATION,) if shape.num_gpu else (),
                priority=1000,
                duration=max(1.0, stop - start),
                service=service,
            )
        )

    def want(demand: float) -> int:
        return max(shape.min_replicas, math.ceil(demand / shape.per_replica - 1e-9))

    step = max(hpa.sync_period_s, 1e-3)
    recs: deque[tuple[float, int]] = deque()  # (time, recommendation) within the stabilization window
    ups: deque[tuple[float, int]] = deque()  # (time, replicas added) within the scale-up period
    k = 0
    for i in range(math.ceil(end_time / step) + 1 if curve else 0):  # bounded: one pass over the curve
        t = i * step
        if t >= end_time:
            break
        while k + 1 < len(curve) and curve[k + 1][0] <= t:
            k += 1
        rec = want(curve[k][1])
        recs.append((t, rec))
        while len(recs) > 1 and recs[0][0] <= t - hpa.scale_down_stabilization_s:
            recs.popleft()
        while ups and ups[0][0] <= t - hpa.scale_up_period_s:
            ups.popleft()
        now = len(live)
        if rec < now:
            target = max(r for _, r in recs)  # the highest recommendation of the window (>= rec)
        elif rec > now and live:
            start = now - sum(n for _, n in ups)  # the count when the scale-up period began
            limit = max(start + hpa.scale_up_pods, start + start * hpa.scale_up_percent // 100)
            target = min(rec, max(limit, now))
        else:
            target = rec
        while len(live) > target:
            idx = len(live) - 1
            emit(idx, live.pop(), t)
        if target > len(live):
            ups.append((t, target - len(live)))
        while len(live) < target:
            live.append(t)
    for idx in range(len(live) - 1, -1, -1):
        emit(idx, live[idx], end_time)
    pods.sort(key=lambda p: (p.arrival, p.name))
    return pods


def read_genai_qps(
    path: Path, window: float = 300.0, shape: ReplicaShape | None = None, hpa: HpaBehavior | None = None
) -> Workload:
    """Sum the qps samples per window across containers and turn the curve into replica pods (:func:`demand_to_replicas`)."""
    if window <= 0:
        raise UserError("window must be > 0 seconds")
    sums: dict[int, float] = defaultdict(float)
    with path.open("rb") as fh:
        rows = _rows(path, fh)
        header = tuple(h.strip() for h in next(rows, (1, []))[1])
        if header != GENAI_QPS_COLUMNS:
            raise UserError(f"{path}:1: expected header {','.join(GENAI_QPS_COLUMNS)}")
        for line, row in rows:
            if not row:
                continue
            if len(row) != len(GENAI_QPS_COLUMNS):
                raise UserError(f"{path}:{line}: expected {len(GENAI_QPS_COLUMNS)} columns, got {len(row)}")
            try:
                ts, value = float(row[0]), float(row[1])
            except ValueError:
                raise UserError(f"{path}:{line}: timestamp_anon and value must be numbers") from None
            if not (math.isfinite(ts) and math.isfinite(value)) or value < 0:
                raise UserError(f"{path}:{line}: value must be a finite number >= 0")
            sums[int(ts // window)] += value
    if not sums:
        raise UserError(f"{path}: no samples")
    first = min(sums)
    curve = [((k - first) * window, sums.get(k, 0.0)) for k in range(first, max(sums) + 1)]
    pods = demand_to_replicas("genai", curve, window, shape or ReplicaShape(), hpa)
    return Workload(name=path.name, pods=tuple(pods))


def read_request_rate(
    path: Path,
    window: float = 300.0,
    shape: ReplicaShape | None = None,
    hpa: HpaBehavior | None = None,
    fmt: str | None = None,
) -> Workload:
    """Router traffic as replica demand: count a request file's or a Mooncake trace's requests per window, take
    the rate in requests per second as the demand curve (one replica absorbs ``shape.per_replica`` of it) and
    turn it into replicas (:func:`demand_to_replicas`). A bad line is a :class:`UserError` naming
    ``path:line``."""
    from capstan.replay import mooncake_requests, read_requests  # the replay layer's own parsers and checks

    if window <= 0:
        raise UserError("window must be > 0 seconds")
    fmt = fmt or sniff_format(path)
    if fmt == "mooncake":
        times = [r.t for r in mooncake_requests(path, model="demand")]
    elif fmt == "requests":
        times = [r.t for r in read_requests(path)]
    else:
        raise UserError(f"{path}: not a request file or a Mooncake trace ({fmt})")
    if not times:
        raise UserError(f"{path}: no requests")
    counts: dict[int, int] = defaultdict(int)
    for t in times:
        counts[int(t // window)] += 1
    first = min(counts)
    curve = [((k - first) * window, counts.get(k, 0) / window) for k in range(first, max(counts) + 1)]
    pods = demand_to_replicas(path.stem, curve, window, shape or ReplicaShape(), hpa)
    return Workload(name=path.name, pods=tuple(pods))


@dataclass(frozen=True)
class AgenticSpec:
    """Knobs of the synthetic bursty agentic-inference generator (all times in seconds)."""

    hours: float = 6.0
    calm_rate_per_min: float = 0.5
    burst_rate_per_min: float = 6.0
    mean_calm: float = 1800.0
    mean_burst: float = 300.0
    fan_out_max: int = 4
    gang_fraction: float = 0.05
    median_life: float = 900.0


def synthetic_agentic(seed: int, spec: AgenticSpec | None = None) -> Workload:
    """Seeded bursty arrivals of agent sessions, each fanning out into tool/model replicas on GPUs."""
    spec = spec or AgenticSpec()
    rng = random.Random(seed)
    horizon = spec.hours * 3600
    pods: list[Pod] = []
    t, burst = 0.0, False
    phase_end = rng.expovariate(1 / spec.mean_calm)
    shapes = [  # (cpu, mem, num_gpu, gpu_milli, models, weight)
        (4000, 16384, 1, 250, frozenset(), 4),
        (4000, 16384, 1, 500, frozenset(), 3),
        (8000, 32768, 1, 1000, frozenset(), 3),
        (16000, 65536, 2, 1000, frozenset({"A100"}), 1),
        (2000, 4096, 0, 0, frozenset(), 1),
    ]
    weights = [s[5] for s in shapes]
    n = 0
    for _ in range(1_000_000):  # bounded: the horizon ends it long before
        rate = (spec.burst_rate_per_min if burst else spec.calm_rate_per_min) / 60
        gap = rng.expovariate(rate)
        if t + gap >= phase_end:
            t = phase_end
            burst = not burst
            phase_end = t + rng.expovariate(1 / (spec.mean_burst if burst else spec.mean_calm))
            if t >= horizon:
                break
            continue
        t += gap
        if t >= horizon:
            break
        life = spec.median_life * math.exp(rng.gauss(0, 0.8))
        if rng.random() < spec.gang_fraction:
            gang = f"gang-{n}"
            for k in range(2):
                pods.append(
                    Pod(
                        name=f"agent-{n}-g{k}",
                        arrival=t,
                        cpu_milli=32000,
                        memory_mib=262144,
                        num_gpu=8,
                        gpu_milli=GPU_MILLI,
                        gpu_models=frozenset({"A100"}),
                        tolerations=(GPU_TOLERATION,),
                        priority=1000,
                        gang=gang,
                        gang_size=2,
                        duration=life,
                    )
                )
            n += 1
            continue
        fan = rng.randint(1, spec.fan_out_max)
        for k in range(fan):
            cpu, mem, ng, gm, models, _ = rng.choices(shapes, weights)[0]
            pods.append(
                Pod(
                    name=f"agent-{n}-{k}",
                    arrival=t + k * 0.5,
                    cpu_milli=cpu,
                    memory_mib=mem,
                    num_gpu=ng,
                    gpu_milli=gm,
                    gpu_models=models,
                    tolerations=(GPU_TOLERATION,) if ng else (),
                    priority=500,
                    duration=life * rng.uniform(0.5, 1.0),
                )
            )
        n += 1
    pods.sort(key=lambda p: (p.arrival, p.name))
    return Workload(name=f"synthetic-agentic-seed{seed}", pods=tuple(pods))


def load_trace(
    spec: str,
    seed: int = 0,
    window: float = 300.0,
    not_safe_to_evict: frozenset[str] = frozenset(),
    per_replica: float | None = None,
) -> Workload:
    """A trace by path (format from the header or first line) or ``synthetic:agentic[:hours]``;
    ``not_safe_to_evict``: the openb QoS classes whose pods must not be evicted (:func:`read_openb_pods`);
    ``per_replica``: the demand one inference replica absorbs (requests per second; default
    :class:`ReplicaShape`'s)."""
    if spec.startswith("synthetic:"):
        parts = spec.split(":")
        if parts[1] != "agentic" or len(parts) > 3:
            raise UserError(
                f"--trace {spec}: unknown generator; use synthetic:agentic or synthetic:agentic:HOURS"
            )
        hours = AgenticSpec().hours
        if len(parts) == 3:
            try:
                hours = float(parts[2])
            except ValueError:
                raise UserError(f"--trace {spec}: HOURS must be a number") from None
        return synthetic_agentic(seed, AgenticSpec(hours=hours))
    path = Path(spec)
    fmt = sniff_format(path)
    if fmt == "openb-pods":
        return read_openb_pods(path, not_safe_to_evict)
    shape = ReplicaShape() if per_replica is None else ReplicaShape(per_replica=per_replica)
    if fmt == "genai-qps":
        return read_genai_qps(path, window, shape)
    return read_request_rate(path, window, shape, fmt=fmt)
