"""Strict configuration loading: a YAML (or JSON) file, optionally overridden by environment variables.

Every section is a pydantic model with ``extra="forbid"`` so an unknown or misspelt key fails at start with one line
that names the file and the key path.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from capstan.errors import UserError

M = TypeVar("M", bound=BaseModel)


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


def read_mapping(path: Path) -> dict[str, Any]:
    """Read a YAML/JSON mapping from ``path`` or raise :class:`UserError` naming the file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{path}:{at}: invalid YAML: {problem}") from None
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
