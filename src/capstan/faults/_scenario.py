"""The fault-scenario format (docs/faults.md): one YAML file per scenario, validated strictly, every problem reported
as one line ``FILE:LINE: problem`` (a :class:`~capstan.errors.UserError`).

A scenario says what to create (``nodes``, ``manifests``), what to wait for (``wait``), what to change over time so
the recorder has history to cite (``edits``), which kubelet-like faults to inject (``inject``, through
:class:`capstan.faults.Kubelet`), which misleading second symptom to add (``decoy``), and what a correct diagnosis
says (``expect``). The models here are plain data; :mod:`capstan.faults._runner` plays them.

Line numbers come from the YAML node marks: the loader keeps each mapping's and list's key lines, and a pydantic
error's location is walked down that tree to the deepest line it reaches.
"""

from __future__ import annotations

import importlib.resources
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from capstan.diagnose import Category
from capstan.errors import UserError

MAX_SCENARIO_BYTES = 1024 * 1024
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")
CATEGORIES = tuple(str(c) for c in Category)
"""The categories an expectation may name: those of :class:`capstan.diagnose.Category`."""


# ---- YAML with line numbers -----------------------------------------------------------------------------------------
class _MarkedDict(dict[Any, Any]):
    line: int = 0
    key_lines: dict[Any, int]


class _MarkedList(list[Any]):
    line: int = 0
    item_lines: list[int]


class _MarkedLoader(yaml.SafeLoader):
    """A safe loader whose mappings and lists remember the line of each key and item; a key given twice in one
    mapping is an error (PyYAML would silently keep the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.construct_object(key_node)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {seen[key]})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line + 1
        out = _MarkedDict(super().construct_mapping(node, deep=True))
        out.line = node.start_mark.line + 1
        out.key_lines = seen
        return out

    def construct_sequence(self, node: yaml.SequenceNode, deep: bool = False) -> list[Any]:
        out = _MarkedList(super().construct_sequence(node, deep=True))
        out.line = node.start_mark.line + 1
        out.item_lines = [child.start_mark.line + 1 for child in node.value]
        return out


_MarkedLoader.add_constructor(
    "tag:yaml.org,2002:map",
    lambda loader, node: loader.construct_mapping(node),  # type: ignore[arg-type]
)
_MarkedLoader.add_constructor(
    "tag:yaml.org,2002:seq",
    lambda loader, node: loader.construct_sequence(node),  # type: ignore[arg-type]
)


def _line_of(data: Any, loc: Iterable[int | str]) -> int:
    """The line of the deepest node of ``data`` that the pydantic location ``loc`` reaches."""
    line = getattr(data, "line", 1) or 1
    node = data
    for part in loc:
        if isinstance(node, _MarkedDict) and part in node:
            line = node.key_lines.get(part, line)
            node = node[part]
        elif isinstance(node, _MarkedList) and isinstance(part, int) and 0 <= part < len(node):
            line = node.item_lines[part]
            node = node[part]
        elif isinstance(node, _MarkedDict | _MarkedList):
            continue  # a union member's tag or a model name in the location: not a key of the data
        else:
            break
    return line


def _plain(data: Any) -> Any:
    """``data`` as plain dicts and lists (the marks dropped), for the manifests sent to the API server."""
    if isinstance(data, dict):
        return {k: _plain(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_plain(v) for v in data]
    return data


def _check_manifest(m: dict[str, Any]) -> dict[str, Any]:
    for key in ("apiVersion", "kind"):
        if not isinstance(m.get(key), str):
            raise ValueError(f"a manifest needs {key}")
    meta = m.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        raise ValueError("a manifest needs metadata.name")
    if "namespace" in meta:
        raise ValueError("a manifest must not set metadata.namespace (the scenario's namespace is used)")
    return m


Manifest = Annotated[dict[str, Any], AfterValidator(_check_manifest)]
"""A Kubernetes object (apiVersion, kind, metadata.name; no namespace), applied in the scenario's namespace."""


# ---- the model ------------------------------------------------------------------------------------------------------
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ObjectKey(_Strict):
    """An object of the scenario: ``kind`` and ``name`` (in the scenario's namespace; a Node by its scenario name).
    ``name`` ending in ``*`` matches by prefix (a Deployment's pods and ReplicaSets have generated names)."""

    kind: str
    name: str

    def matches(self, kind: str, name: str) -> bool:
        if kind != self.kind:
            return False
        if self.name.endswith("*"):
            return name.startswith(self.name[:-1])
        return name == self.name


class NodeSpec(_Strict):
    """An extra kwok Node for the scenario, named ``<namespace>-<name>`` on the cluster and deleted afterwards."""

    name: str
    cpu: str = "16"
    memory: str = "64Gi"
    pods: int = Field(default=110, ge=1)
    gpu: int = Field(default=0, ge=0, le=64)
    gpu_product: str | None = None
    gpu_memory_mib: int | None = Field(default=None, ge=1)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[dict[str, str]] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _dns(cls, v: str) -> str:
        if not _NAME.match(v) or len(v) > 30:
            raise ValueError(f"{v!r} is not a DNS label of at most 30 characters")
        return v


class PodRef(_Strict):
    """Which pod a step acts on: by ``pod`` name, or the first (by name) matching ``selector`` (``app=web``)."""

    pod: str | None = None
    selector: str | None = None

    @model_validator(mode="after")
    def _one(self) -> PodRef:
        if (self.pod is None) == (self.selector is None):
            raise ValueError("give exactly one of pod or selector")
        return self


class TerminationSpec(_Strict):
    reason: str = "Error"
    exit_code: int = 1
    signal: int | None = None
    message: str | None = None
    runtime_seconds: float = Field(default=30.0, ge=0)


class RestartStep(PodRef):
    container: str
    termination: TerminationSpec = Field(default_factory=TerminationSpec)
    previous_log: list[str] | None = None
    then: Literal["running", "crashloop"] = "crashloop"
    times: int = Field(default=1, ge=1, le=20)


class WaitingStep(PodRef):
    container: str
    reason: str
    message: str = ""


class ProbeStep(PodRef):
    container: str
    probe: Literal["Liveness", "Readiness", "Startup"] = "Liveness"
    message: str = "HTTP probe failed with statuscode: 500"
    failures: int = Field(default=3, ge=1, le=100)
    restart: bool = True
    previous_log: list[str] | None = None
    times: int = Field(default=1, ge=1, le=20)


class LogStep(PodRef):
    container: str
    lines: list[str]


class NodeConditionStep(_Strict):
    node: str
    condition: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""


class GpuStep(_Strict):
    node: str
    count: int = Field(ge=0)


class EventStep(_Strict):
    object: ObjectKey
    reason: str
    message: str
    type: Literal["Normal", "Warning"] = "Warning"
    component: str = "kubelet"
    field_path: str | None = None
    count: int = Field(default=1, ge=1, le=100)


class ReadyStep(PodRef):
    container: str
    ready: bool = False


class PodPhaseStep(PodRef):
    """Write the pod's phase and terminated containers (a Job's pod that failed: kwok runs nothing to end)."""

    phase: Literal["Failed", "Succeeded"]
    container: str
    termination: TerminationSpec = Field(default_factory=TerminationSpec)
    log: list[str] | None = None


STEP_KINDS = (
    "restart_container",
    "set_waiting",
    "probe_failure",
    "write_log",
    "node_condition",
    "set_gpu_allocatable",
    "event",
    "pod_phase",
    "set_ready",
)


class Step(_Strict):
    """One injection: exactly one key naming a :class:`capstan.faults.Kubelet` action."""

    restart_container: RestartStep | None = None
    set_waiting: WaitingStep | None = None
    probe_failure: ProbeStep | None = None
    write_log: LogStep | None = None
    node_condition: NodeConditionStep | None = None
    set_gpu_allocatable: GpuStep | None = None
    event: EventStep | None = None
    pod_phase: PodPhaseStep | None = None
    set_ready: ReadyStep | None = None

    @model_validator(mode="before")
    @classmethod
    def _exactly_one(cls, data: Any) -> Any:
        if isinstance(data, dict):
            given = [k for k in data if data[k] is not None]
            if len(given) != 1:
                raise ValueError(f"a step is one of {', '.join(STEP_KINDS)}; got {given or 'none'}")
        return data

    @property
    def action(self) -> tuple[str, Any]:
        for name in STEP_KINDS:
            value = getattr(self, name)
            if value is not None:
                return name, value
        raise AssertionError("validated to have one action")  # pragma: no cover


class WaitSpec(_Strict):
    """Something to wait for (at most ``timeout`` seconds, else the scenario fails to set up)."""

    running: PodRef | None = None
    count: int = Field(default=1, ge=1)
    unschedulable: PodRef | None = None
    event: str | None = Field(default=None, description="an Event reason in the namespace")
    condition: ObjectKey | None = None
    type: str | None = None
    status: str = "True"
    field: str | None = Field(default=None, description="a dotted path, e.g. status.phase")
    equals: str | None = None
    object: ObjectKey | None = None
    seconds: float | None = Field(default=None, ge=0, le=120, description="just sleep")
    timeout: float = Field(default=60.0, gt=0, le=600)

    @model_validator(mode="after")
    def _one(self) -> WaitSpec:
        given = [
            k
            for k in ("running", "unschedulable", "event", "condition", "field", "seconds")
            if getattr(self, k) is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "a wait is one of running, unschedulable, event, condition (with type), field (with object "
                f"and equals) or seconds; got {given or 'none'}"
            )
        if self.condition is not None and not self.type:
            raise ValueError("a condition wait needs type")
        if self.field is not None and (self.object is None or self.equals is None):
            raise ValueError("a field wait needs object and equals")
        return self


class Edit(_Strict):
    """A change made over time, recorded by the recorder before the diagnosis: a merge ``patch`` of an object, an
    ``apply`` (replace, or create when absent) of a whole manifest, a ``delete``, or a ``wait``."""

    patch: ObjectKey | None = None
    body: dict[str, Any] | None = None
    apply: Manifest | None = None
    delete: ObjectKey | None = None
    wait: WaitSpec | None = None

    @model_validator(mode="after")
    def _one(self) -> Edit:
        given = [k for k in ("patch", "apply", "delete", "wait") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"an edit is one of patch (with body), apply, delete or wait; got {given or 'none'}"
            )
        if self.patch is not None and self.body is None:
            raise ValueError("a patch edit needs body (a JSON merge patch)")
        return self

    @property
    def changes(self) -> ObjectKey | None:
        """The object this edit changes (what the recorder must have recorded before the diagnosis)."""
        if self.patch is not None:
            return self.patch
        if self.apply is not None:
            return ObjectKey(kind=self.apply["kind"], name=self.apply["metadata"]["name"])
        return self.delete


class Decoy(_Strict):
    """A second, misleading symptom: its steps and edits are played after the fault; ``objects`` are the objects
    it touches, which must never be named as a root cause."""

    objects: list[ObjectKey] = Field(default_factory=list)
    manifests: list[Manifest] = Field(default_factory=list)
    inject: list[Step] = Field(default_factory=list)


class Expectation(_Strict):
    """What a correct diagnosis says: the top finding is about ``object`` (its subject or first object), of
    ``category``, its root cause contains every one of ``keywords`` (case-insensitive) and its evidence or recorded
    changes contain every string of ``evidence``. ``symptoms`` are objects that suffer from the fault and must not
    be reported as a root of their own."""

    object: ObjectKey
    category: str
    keywords: list[str] = Field(default_factory=list)
    evidence: list[str] = Field(default_factory=list)
    symptoms: list[ObjectKey] = Field(default_factory=list)

    @field_validator("category")
    @classmethod
    def _category(cls, v: str) -> str:
        if v not in CATEGORIES:
            raise ValueError(f"{v!r} is not a category; one of {', '.join(CATEGORIES)}")
        return v


class Scenario(_Strict):
    """One fault scenario (docs/faults.md). ``path`` is the file it came from."""

    name: str
    description: str
    category: str
    tags: list[str] = Field(default_factory=list)
    namespace_labels: dict[str, str] = Field(default_factory=dict)
    nodes: list[NodeSpec] = Field(default_factory=list)
    manifests: list[Manifest] = Field(default_factory=list)
    wait: list[WaitSpec] | None = None
    edits: list[Edit] = Field(default_factory=list)
    inject: list[Step] = Field(default_factory=list)
    decoy: Decoy | None = None
    settle: list[WaitSpec] = Field(default_factory=list)
    expect: Expectation
    path: str = ""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v) or len(v) > 50:
            raise ValueError(f"{v!r} is not a DNS label of at most 50 characters")
        return v

    @field_validator("category")
    @classmethod
    def _category(cls, v: str) -> str:
        return Expectation._category(v)

    @field_validator("nodes")
    @classmethod
    def _unique_nodes(cls, v: list[NodeSpec]) -> list[NodeSpec]:
        names = [n.name for n in v]
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique")
        return v

    @property
    def decoy_objects(self) -> list[ObjectKey]:
        return list(self.decoy.objects) if self.decoy else []

    @property
    def gpu(self) -> bool:
        return "gpu" in self.tags or self.category == "gpu"


def _placeholders(data: Any, allowed: set[str]) -> Iterator[tuple[list[int | str], str]]:
    """(location, placeholder) for each ``${...}`` in a string of ``data`` that is not one of ``allowed``."""
    if isinstance(data, dict):
        for k, v in data.items():
            for loc, bad in _placeholders(v, allowed):
                yield [k, *loc], bad
    elif isinstance(data, list):
        for i, v in enumerate(data):
            for loc, bad in _placeholders(v, allowed):
                yield [i, *loc], bad
    elif isinstance(data, str):
        for m in _PLACEHOLDER.finditer(data):
            if m.group(1) not in allowed:
                yield [], m.group(0)


def substitute(data: Any, values: dict[str, str]) -> Any:
    """``data`` with ``${namespace}`` and ``${node.NAME}`` replaced by ``values`` (validated to be known)."""
    if isinstance(data, dict):
        return {k: substitute(v, values) for k, v in data.items()}
    if isinstance(data, list):
        return [substitute(v, values) for v in data]
    if isinstance(data, str):
        return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), data)
    return data


# ---- loading --------------------------------------------------------------------------------------------------------
def parse_scenario(text: str, where: str) -> Scenario:
    """Validate one scenario's YAML text; ``where`` (the file) starts each error line."""
    try:
        data = yaml.load(text, Loader=_MarkedLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{where}:{line}: invalid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise UserError(f"{where}:1: a scenario is a mapping (name, description, category, expect, ...)")
    try:
        scenario = Scenario.model_validate({**_plain(data), "path": where})
    except ValidationError as err:
        item = err.errors()[0]
        where_in = list(item["loc"])
        path = ".".join(str(p) for p in where_in) or "(top level)"
        msg = item["msg"].removeprefix("Value error, ")
        raise UserError(f"{where}:{_line_of(data, where_in)}: {path}: {msg}") from None
    node_names = {n.name for n in scenario.nodes}
    for section, steps in (
        ("inject", scenario.inject),
        ("decoy", scenario.decoy.inject if scenario.decoy else []),
    ):
        for i, step in enumerate(steps):
            kind, action = step.action
            node = getattr(action, "node", None)
            if node is not None and node not in node_names:
                at: list[int | str] = [section, i] if section == "inject" else ["decoy", "inject", i]
                raise UserError(
                    f"{where}:{_line_of(data, at)}: {'.'.join(map(str, at))}.{kind}: node {node!r} is not one "
                    "of the scenario's nodes (only those may be broken)"
                )
    allowed = {"namespace", *(f"node.{n}" for n in node_names)}
    for section in ("manifests", "edits", "inject", "decoy", "wait", "settle"):
        for loc, bad in _placeholders(_plain(data.get(section)), allowed):
            full = [section, *loc]
            raise UserError(
                f"{where}:{_line_of(data, full)}: {'.'.join(map(str, full))}: unknown placeholder {bad} "
                f"(known: {', '.join('${' + a + '}' for a in sorted(allowed))})"
            )
    return scenario


def load_scenario(path: Path) -> Scenario:
    """One scenario file; any problem is a :class:`UserError` ``FILE:LINE: problem``."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(raw) > MAX_SCENARIO_BYTES:
        raise UserError(f"{path}:1: larger than {MAX_SCENARIO_BYTES // 1024} KiB: not a scenario")
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise UserError(f"{path}:{line}: not UTF-8 text") from None
    return parse_scenario(text, str(path))


def builtin_dir() -> Path:
    """The scenarios shipped in the package."""
    return Path(str(importlib.resources.files("capstan.faults") / "scenarios"))


def load_scenarios(directory: Path | None = None) -> list[Scenario]:
    """Every ``*.yaml``/``*.yml`` scenario in ``directory`` (default: the shipped ones), sorted by name; two
    scenarios with one name is an error naming both files."""
    root = directory if directory is not None else builtin_dir()
    if not root.is_dir():
        raise UserError(f"{root}: not a directory of scenarios")
    files = sorted(p for p in root.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    scenarios: dict[str, Scenario] = {}
    for f in files:
        s = load_scenario(f)
        if s.name in scenarios:
            raise UserError(f"{f}:1: scenario name {s.name!r} is also used by {scenarios[s.name].path}")
        scenarios[s.name] = s
    return [scenarios[n] for n in sorted(scenarios)]
