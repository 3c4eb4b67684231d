"""The pure diff builder: noise removal, redaction (:mod:`capstan.redact`) and RFC 6902 patches between two object
versions.

Everything here is a function of its inputs (no clock, no I/O), so the same code runs in the live recorder, in
tests and in benchmarks. Patches come from the well-kept ``jsonpatch`` library; this module only decides what an
object looks like before it is compared (``normalize``).
"""

from __future__ import annotations

import functools
from typing import Any

import jsonpatch
from pydantic import Field

from capstan import jsontext
from capstan.config import StrictModel
from capstan.redact import Redactor

JsonDict = dict[str, Any]

DEFAULT_DROP_PATHS: tuple[str, ...] = (
    "/metadata/managedFields",
    "/metadata/resourceVersion",
    "/metadata/generation",
    "/metadata/selfLink",
    "/status/conditions/*/lastHeartbeatTime",
    "/status/conditions/*/lastProbeTime",
)


class DiffPolicy(StrictModel):
    """What counts as noise. ``drop_paths`` are JSON pointers where ``*`` matches any key or list index."""

    drop_paths: list[str] = Field(default_factory=lambda: list(DEFAULT_DROP_PATHS))
    snapshot_every: int = Field(default=20, ge=1, description="Store the full object every N versions.")
    redact_kinds: list[str] = Field(default_factory=lambda: ["Secret"])


@functools.lru_cache(maxsize=256)
def _split(pointer: str) -> tuple[str, ...]:
    if not pointer.startswith("/"):
        raise ValueError(f"drop path {pointer!r}: a JSON pointer must start with '/'")
    return tuple(p.replace("~1", "/").replace("~0", "~") for p in pointer[1:].split("/"))


def _dropped(node: Any, parts: tuple[str, ...]) -> Any:
    """``node`` without what ``parts`` points at, copying only the containers on the way (copy-on-write): what is
    not dropped stays shared with ``node``, which is never mutated."""
    if not parts:
        return node
    head, rest = parts[0], parts[1:]
    if isinstance(node, dict):
        keys = list(node) if head == "*" else ([head] if head in node else [])
        out: Any = None
        for key in keys:
            if rest:
                new = _dropped(node[key], rest)
                if new is not node[key]:
                    out = dict(node) if out is None else out
                    out[key] = new
            else:
                out = dict(node) if out is None else out
                del out[key]
        return node if out is None else out
    if isinstance(node, list):
        if head == "*":
            indices = list(range(len(node)))
        elif head.isdigit() and int(head) < len(node):
            indices = [int(head)]
        else:
            return node
        if not rest:
            gone = set(indices)
            return [v for i, v in enumerate(node) if i not in gone] if gone else node
        out = None
        for idx in indices:
            new = _dropped(node[idx], rest)
            if new is not node[idx]:
                out = list(node) if out is None else out
                out[idx] = new
        return node if out is None else out
    return node


_DropTree = dict[str, "_DropTree | None"]
"""drop paths merged by their common prefixes: a key's subtree, or None where the pointer ends (drop it)"""


@functools.lru_cache(maxsize=64)
def _drop_tree(pointers: tuple[str, ...]) -> _DropTree | None:
    """``pointers`` as one tree walked once per object, or None when one of them names a list index: removing an
    element shifts the ones after it, so such pointers are applied one after the other, as written."""
    tree: _DropTree = {}
    for pointer in pointers:
        parts = _split(pointer)
        if any(p.isdigit() for p in parts):
            return None
        node = tree
        for i, part in enumerate(parts):
            if i == len(parts) - 1:
                node[part] = None  # everything below goes with it
                break
            child = node.get(part, {})
            if child is None:
                break  # an earlier pointer drops this whole subtree already
            node[part] = child
            node = child
    return tree


def _dropped_tree(node: Any, tree: _DropTree) -> Any:
    """``node`` without what ``tree`` points at, in one walk; copy-on-write as :func:`_dropped`, and the same
    result as applying its pointers one after the other (none names a list index, so nothing shifts)."""
    if isinstance(node, dict):
        out: Any = None
        for head, sub in tree.items():
            cur = node if out is None else out
            keys = list(cur) if head == "*" else ([head] if head in cur else [])
            for key in keys:
                if sub is None:
                    out = dict(node) if out is None else out
                    del out[key]
                    continue
                new = _dropped_tree(cur[key], sub)
                if new is not cur[key]:
                    out = dict(node) if out is None else out
                    out[key] = new
        return node if out is None else out
    if isinstance(node, list) and "*" in tree:
        sub = tree["*"]
        if sub is None:
            return [] if node else node
        edited = [_dropped_tree(v, sub) for v in node]
        return edited if any(a is not b for a, b in zip(edited, node, strict=True)) else node
    return node


def normalize(obj: JsonDict, policy: DiffPolicy, redactor: Redactor | None = None) -> JsonDict:
    """The object as it is stored and compared: noise paths removed, then secrets redacted (``policy.redact_kinds``
    reduced to key names and keyed hashes, every other kind through :meth:`Redactor.kube_object`; a default,
    unkeyed redactor when none is given). Never mutates ``obj``; the result shares every part that was not changed
    with ``obj`` (so ``obj`` must not be mutated afterwards)."""
    out: JsonDict = obj
    tree = _drop_tree(tuple(policy.drop_paths))
    if tree is not None:
        out = _dropped_tree(out, tree)
    else:
        for pointer in policy.drop_paths:
            out = _dropped(out, _split(pointer))
    r = redactor if redactor is not None else Redactor()
    return r.secret(out) if out.get("kind") in policy.redact_kinds else r.kube_object(out)


_SCALARS = (str, int, float, bool)


def _same(a: Any, b: Any) -> bool:
    # NOTE: Python's == says 1 == True == 1.0; JSON does not. Scalars of the same type compare exactly; equal
    # containers are confirmed by their JSON text.
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        return False
    if kind in _SCALARS:
        return bool(a == b)
    return a == b and jsontext.dumpb(a) == jsontext.dumpb(b)


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _diff(a: Any, b: Any, path: str, ops: list[JsonDict]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in a:
            if key not in b:
                ops.append({"op": "remove", "path": f"{path}/{_escape(key)}"})
        for key, vb in b.items():
            if key not in a:
                ops.append({"op": "add", "path": f"{path}/{_escape(key)}", "value": _copy(vb)})
            elif not _same(a[key], vb):
                _diff(a[key], vb, f"{path}/{_escape(key)}", ops)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        # Same length (the common case: a field inside a container changed): element by element.
        for i, (va, vb) in enumerate(zip(a, b, strict=True)):
            if not _same(va, vb):
                _diff(va, vb, f"{path}/{i}", ops)
    elif isinstance(a, list) and isinstance(b, list):
        # Lists that grew or shrank: jsonpatch's minimal list diff (moves, inserts), re-rooted at this path.
        for op in jsonpatch.make_patch(a, b):
            op = dict(op)
            op["path"] = path + op["path"]
            if "from" in op:
                op["from"] = path + op["from"]
            ops.append(op)
    else:
        ops.append({"op": "replace", "path": path, "value": _copy(b)})


def _copy(value: Any) -> Any:
    # a patch's value is its own (never shared with the states it was diffed from); a scalar needs no copy
    if value is None or type(value) in _SCALARS:
        return value
    return jsontext.copy(value)


def make_patch(before: JsonDict, after: JsonDict) -> list[JsonDict]:
    """RFC 6902 operations turning ``before`` into ``after`` (both already normalized).

    Dicts are compared here, subtree by subtree with C-speed equality, so unchanged parts of a large object cost
    almost nothing; lists are handed to the ``jsonpatch`` library.
    """
    ops: list[JsonDict] = []
    if not _same(before, after):
        _diff(before, after, "", ops)
    return ops


def apply_patch(doc: JsonDict, patch: list[JsonDict]) -> JsonDict:
    """Apply RFC 6902 ``patch`` to a copy of ``doc``."""
    result: JsonDict = jsonpatch.apply_patch(doc, patch, in_place=False)
    return result
