"""Node types: from a strict YAML file, from an openb node list, or the built-in inference set.

Traces do not carry prices or boot delays, so those come from here: a YAML node-type file states them exactly;
for an openb node list they are filled from :data:`GPU_PRICE_PER_HOUR` (assumed list prices, documented in
docs/capacity.md) and the boot delays given on the command line.
"""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path
from typing import Literal

from pydantic import Field

from capstan.capacity.model import Delay, NodeType, Taint
from capstan.config import StrictModel, load_file
from capstan.errors import UserError

GPU_PRICE_PER_HOUR: dict[str, float] = {
    "T4": 0.35,
    "P100": 1.46,
    "V100M16": 2.48,
    "V100M32": 3.06,
    "A10": 1.10,
    "G1": 1.50,
    "G2": 2.50,
    "G3": 4.00,
    "A100": 3.67,
    "H100": 6.88,
    "L4": 0.80,
}
"""Assumed on-demand price of one GPU per hour by model (G1–G3 are undisclosed models: guesses)."""
DEFAULT_GPU_PRICE = 2.0
CPU_PRICE_PER_CORE_HOUR = 0.031
MEMORY_PRICE_PER_GIB_HOUR = 0.0042
SPOT_DISCOUNT = 0.7


def list_price(cpu_milli: int, memory_mib: int, gpu: int, gpu_model: str) -> float:
    """The assumed hourly price of a node shape: per-GPU price by model plus CPU and memory."""
    gpu_price = GPU_PRICE_PER_HOUR.get(gpu_model, DEFAULT_GPU_PRICE) if gpu else 0.0
    return round(
        gpu * gpu_price
        + cpu_milli / 1000 * CPU_PRICE_PER_CORE_HOUR
        + memory_mib / 1024 * MEMORY_PRICE_PER_GIB_HOUR,
        4,
    )


class DelayModel(StrictModel):
    kind: Literal["fixed", "uniform", "lognormal"] = "fixed"
    seconds: float | None = Field(default=None, ge=0, description="fixed: the delay")
    low: float | None = Field(default=None, ge=0, description="uniform: lower bound")
    high: float | None = Field(default=None, ge=0, description="uniform: upper bound")
    median: float | None = Field(default=None, ge=0, description="lognormal: median")
    sigma: float | None = Field(default=None, ge=0, description="lognormal: sigma of log")

    def to_delay(self, where: str) -> Delay:
        if self.kind == "fixed":
            if self.seconds is None:
                raise UserError(f"{where}: kind fixed needs 'seconds'")
            return Delay("fixed", self.seconds)
        if self.kind == "uniform":
            if self.low is None or self.high is None or self.high < self.low:
                raise UserError(f"{where}: kind uniform needs 'low' <= 'high'")
            return Delay("uniform", self.low, self.high)
        if self.median is None or self.sigma is None:
            raise UserError(f"{where}: kind lognormal needs 'median' and 'sigma'")
        return Delay("lognormal", self.median, self.sigma)


class TaintModel(StrictModel):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "NoExecute", "PreferNoSchedule"] = "NoSchedule"


class NodeTypeModel(StrictModel):
    name: str = Field(min_length=1)
    cpu_milli: int = Field(gt=0)
    memory_mib: int = Field(gt=0)
    gpu: int = Field(default=0, ge=0)
    gpu_model: str = ""
    price_per_hour: float | None = Field(default=None, ge=0)
    capacity_type: Literal["on-demand", "spot"] = "on-demand"
    boot_delay: DelayModel | None = None
    gpu_ready_delay: DelayModel | None = None
    taints: list[TaintModel] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    max_count: int | None = Field(default=None, ge=0)


class NodeTypeFile(StrictModel):
    node_types: list[NodeTypeModel] = Field(min_length=1)


def load_node_type_file(path: Path, boot_delay: Delay, gpu_ready_delay: Delay) -> tuple[NodeType, ...]:
    """Read a YAML node-type file; delays missing in the file take the given defaults."""
    spec = load_file(NodeTypeFile, path)
    out: list[NodeType] = []
    seen: set[str] = set()
    for i, m in enumerate(spec.node_types):
        where = f"{path}: node_types[{i}] ({m.name})"
        if m.name in seen:
            raise UserError(f"{where}: duplicate node type name")
        seen.add(m.name)
        if m.gpu and not m.gpu_model:
            raise UserError(f"{where}: gpu > 0 needs gpu_model")
        price = m.price_per_hour
        if price is None:
            price = list_price(m.cpu_milli, m.memory_mib, m.gpu, m.gpu_model)
            if m.capacity_type == "spot":
                price = round(price * SPOT_DISCOUNT, 4)
        out.append(
            NodeType(
                name=m.name,
                cpu_milli=m.cpu_milli,
                memory_mib=m.memory_mib,
                gpu=m.gpu,
                gpu_model=m.gpu_model,
                price_per_hour=price,
                capacity_type=m.capacity_type,
                boot_delay=m.boot_delay.to_delay(where + " boot_delay") if m.boot_delay else boot_delay,
                gpu_ready_delay=(
                    m.gpu_ready_delay.to_delay(where + " gpu_ready_delay")
                    if m.gpu_ready_delay
                    else gpu_ready_delay
                ),
                taints=tuple(Taint(t.key, t.value, t.effect) for t in m.taints),
                labels=tuple(sorted(m.labels.items())),
                max_count=m.max_count,
            )
        )
    return tuple(out)


OPENB_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")


def read_openb_nodes(path: Path, boot_delay: Delay, gpu_ready_delay: Delay) -> tuple[NodeType, ...]:
    """Group an openb node list (``sn,cpu_milli,memory_mib,gpu,model``) into node types, one per distinct shape.

    ``max_count`` is the number of nodes of that shape in the list: the planner may not launch more than the
    cluster had.
    """
    counts: Counter[tuple[int, int, int, str]] = Counter()
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None or tuple(h.strip() for h in header[:5]) != OPENB_NODE_COLUMNS:
                raise UserError(f"{path}:1: expected header {','.join(OPENB_NODE_COLUMNS)}, got {header}")
            for row in reader:
                line = reader.line_num
                if not row:
                    continue
                if len(row) < 5:
                    raise UserError(f"{path}:{line}: expected 5 columns, got {len(row)}")
                try:
                    cpu, mem, gpu = int(row[1]), int(row[2]), int(row[3])
                except ValueError:
                    raise UserError(
                        f"{path}:{line}: cpu_milli, memory_mib and gpu must be integers"
                    ) from None
                model = row[4].strip()
                if cpu <= 0 or mem <= 0 or gpu < 0 or (gpu > 0 and not model):
                    raise UserError(
                        f"{path}:{line}: bad node shape (cpu/memory must be > 0, a GPU node needs a model)"
                    )
                counts[(cpu, mem, gpu, model if gpu else "")] += 1
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    if not counts:
        raise UserError(f"{path}: no nodes")
    types = []
    for (cpu, mem, gpu, model), n in sorted(
        counts.items(), key=lambda kv: (kv[0][3], kv[0][2], kv[0][0], kv[0][1])
    ):
        name = f"{model.lower() or 'cpu'}-{gpu}g-{cpu // 1000}c-{mem // 1024}gi"
        types.append(
            NodeType(
                name=name,
                cpu_milli=cpu,
                memory_mib=mem,
                gpu=gpu,
                gpu_model=model,
                price_per_hour=list_price(cpu, mem, gpu, model),
                boot_delay=boot_delay,
                gpu_ready_delay=gpu_ready_delay if gpu else Delay(),
                max_count=n,
            )
        )
    return tuple(types)


def inference_node_types(boot_delay: Delay, gpu_ready_delay: Delay) -> tuple[NodeType, ...]:
    """A small cloud-like menu for inference traces that bring no node list: 1/4/8 × L4 and 1/8 × A100."""
    shapes = [
        ("l4-1", 8000, 32768, 1, "L4"),
        ("l4-4", 48000, 196608, 4, "L4"),
        ("l4-8", 96000, 393216, 8, "L4"),
        ("a100-1", 12000, 87040, 1, "A100"),
        ("a100-8", 96000, 1179648, 8, "A100"),
        ("cpu-16", 16000, 65536, 0, ""),
    ]
    return tuple(
        NodeType(
            name=n,
            cpu_milli=c,
            memory_mib=m,
            gpu=g,
            gpu_model=model,
            price_per_hour=list_price(c, m, g, model),
            boot_delay=boot_delay,
            gpu_ready_delay=gpu_ready_delay if g else Delay(),
        )
        for n, c, m, g, model in shapes
    )
