"""Strict configuration loading: a YAML (or JSON) file, optionally overridden by environment variables.

Every section is a pydantic model with ``extra="forbid"`` so an unknown or misspelt key fails at start with one line
that names the file and the key path.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Generic, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from capstan.errors import UserError

M = TypeVar("M", bound=BaseModel)
F = TypeVar("F")


class StrictModel(BaseModel):
    """Base for every configuration section: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


def describe_validation_error(err: ValidationError, where: str) -> str:
    """Turn pydantic's multi-line report into one line: ``where: a.b: problem; c: problem``."""
    parts = []
    for item in err.errors():
        loc = ".".join(str(p) for p in item["loc"]) or "(top level)"
        parts.append(f"{loc}: {item['msg']}")
    return f"{where}: " + "; ".join(parts)


MAX_CONFIG_BYTES = 16 * 1024 * 1024
"""A configuration file larger than this is refused (it is not one: a log, a dump, /dev/zero...)."""
MAX_YAML_ALIASES = 1000
"""More aliases than this is refused: a few anchors referring to each other expand to billions of nodes."""


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses a key given twice in one mapping, at any depth (PyYAML keeps the last
    one silently, so a typo'd override or a pasted block changes a setting without a word), and refuses alias
    bombs. Keys merged in with ``<<`` may be overridden, as YAML says."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._aliases = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_YAML_ALIASES:
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(
                    None, None, f"more than {MAX_YAML_ALIASES} aliases", event.start_mark
                )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # an unhashable key: the base class says so
            if first is None:
                seen[key] = key_node.start_mark.line
            else:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {first + 1})", key_node.start_mark
                )
        return super().construct_mapping(node, deep=deep)


def _text(path: Path) -> str:
    """The file as text, or a :class:`UserError` naming the file (and the line of a byte that is not UTF-8)."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise UserError(
            f"{path}: larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MiB: not a configuration file"
        )
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise UserError(
            f"{path}: line {line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None


def decoded_lines(path: Path, fh: BinaryIO) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` for each line of a file opened in binary, decoded one by one, so a byte that is not
    UTF-8 is a :class:`UserError` naming the file and its line (a text stream decodes ahead in blocks and can only
    raise UnicodeDecodeError, a traceback). The one reader of line-based inputs: traces, request files, CSVs."""
    for number, raw in enumerate(fh, 1):  # bounded by the file
        try:
            yield number, raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UserError(
                f"{path}:{number}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
            ) from None


def read_mapping(path: Path) -> dict[str, Any]:
    """Read a YAML/JSON mapping from ``path`` or raise :class:`UserError` naming the file and line: a file that is
    not UTF-8, invalid YAML, a key given twice in one mapping, or anything but a mapping at the top."""
    text = _text(path)
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" line {mark.line + 1} column {mark.column + 1}:" if mark is not None else ""
        if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow (NUL, other controls)
            at = f" line {text.count(chr(10), 0, exc.position) + 1}:"
            problem = f"character #x{exc.character:04x} is not allowed in YAML"
        else:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{path}:{at} invalid YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def load_model(model: type[M], data: dict[str, Any], where: str) -> M:
    """Validate ``data`` as ``model``; a failure becomes a one-line :class:`UserError` naming ``where``."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise UserError(describe_validation_error(err, where)) from None


def overlay_env(data: dict[str, Any], prefix: str, environ: Mapping[str, str]) -> list[str]:
    """Overlay ``PREFIX<KEY>__<SUBKEY>=value`` environment variables onto ``data`` (in place).

    Keys are lower-cased; values are parsed as YAML scalars or flow collections (``8``, ``true``, ``[a, b]``).
    Returns the variable names used, so an error can name them.
    """
    used = []
    for name in sorted(environ):
        if not name.startswith(prefix) or name == prefix:
            continue
        path = [part.lower() for part in name[len(prefix) :].split("__") if part]
        if not path:
            continue
        raw = environ[name]
        try:
            value = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            value = raw
        node = data
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[path[-1]] = value
        used.append(name)
    return used


def load_file(
    model: type[M],
    path: Path | None,
    *,
    env_prefix: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> M:
    """Read and validate a configuration file as ``model``; optional ``env_prefix`` variables override it.

    With ``path=None`` only the defaults and the environment apply.
    """
    data = read_mapping(path) if path is not None else {}
    where = str(path) if path is not None else "configuration"
    if env_prefix:
        used = overlay_env(data, env_prefix, os.environ if environ is None else environ)
        if used:
            where += f" (with {', '.join(used)})"
    return load_model(model, data, where)


@dataclass(frozen=True, slots=True)
class Plugin(Generic[F]):
    """One implementation of an extension point: the configuration model it is built from, and its factory."""

    config: type[BaseModel]
    build: F


def plugin_type(model: type[BaseModel]) -> str:
    """The name of a plugin: the ``type`` literal of its configuration model (``type: Literal["prefix"]``), the one
    place it is spelled. Configuration files, registries and messages all read it from there."""
    field = model.model_fields.get("type")
    names = typing.get_args(field.annotation) if field is not None else ()
    if len(names) != 1 or not isinstance(names[0], str):
        raise TypeError(f"{model.__name__}: a plugin's configuration declares type: Literal['<name>']")
    return names[0]


def plugin_registry(*plugins: tuple[type[BaseModel], F]) -> dict[str, Plugin[F]]:
    """The implementations of one extension point keyed by :func:`plugin_type`, built from ``(configuration
    model, factory)`` pairs; a name given twice is a TypeError (a programming error, raised by the first import)."""
    registry: dict[str, Plugin[F]] = {}
    for model, build in plugins:
        name = plugin_type(model)
        if name in registry:
            raise TypeError(f"plugin type {name!r} is registered twice")
        registry[name] = Plugin(model, build)
    return registry


def _implementation(registry: Mapping[str, Plugin[F]], config: BaseModel) -> Plugin[F] | None:
    name = getattr(config, "type", None)
    plugin = registry.get(name) if isinstance(name, str) else None
    return plugin if plugin is not None and type(config) is plugin.config else None


def plugin_problem(registry: Mapping[str, Plugin[Any]], config: BaseModel, point: str) -> str | None:
    """Why ``config`` has no implementation in ``registry`` (None: it has exactly its own). A configuration model
    added without a registry entry fails at start with this line instead of being built as some other plugin."""
    if _implementation(registry, config) is not None:
        return None
    name = getattr(config, "type", None)
    return f"{point} type {name!r} has no implementation (implemented: {', '.join(registry)})"


def plugin_for(registry: Mapping[str, Plugin[F]], config: BaseModel, point: str, where: str) -> F:
    """The factory of ``config``'s plugin; :class:`UserError` (one line naming ``where``) if it has none."""
    plugin = _implementation(registry, config)
    if plugin is None:
        raise UserError(f"{where}: {plugin_problem(registry, config, point)}")
    return plugin.build


def union_models(union: object) -> tuple[type[BaseModel], ...]:
    """The configuration models of a union, e.g. ``Annotated[A | B, Field(discriminator="type")]``."""
    if typing.get_origin(union) is typing.Annotated:
        union = typing.get_args(union)[0]
    return tuple(m for m in typing.get_args(union) if isinstance(m, type) and issubclass(m, BaseModel))
