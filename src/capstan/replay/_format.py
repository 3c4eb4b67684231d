"""The request file: JSONL, one request a line, so any trace can be converted once and replayed anywhere.

Each line is a JSON object:

* ``t`` (number ≥ 0, required): planned send time in seconds from the start of the run (model time; the
  replayer divides by its time scale).
* ``session`` (string or null): conversation/agent session id. The replayer sends it as ``x-session-id``
  and runs a session's requests in file order.
* ``think`` (number ≥ 0 or null): for a session's follow-up, send this many seconds after the session's previous
  request completed (a closed loop, like an agent waiting for a tool) instead of at ``t``. ``t`` then records the
  time planned with zero latency.
* ``api`` (``"chat"`` or ``"completions"``, default ``"chat"``): ``/v1/chat/completions`` or ``/v1/completions``.
* ``body`` (object, required): the OpenAI request body (``model``, ``messages`` or ``prompt``, ``max_tokens``...).
  The replayer may override ``model`` and forces streaming to measure time to first token.
* ``prompt_ref`` (object or null): a compact stand-in for a long completions ``prompt`` that the replayer
  expands at send time: ``{"kind": "mooncake", "hash_ids": [...], "input_length": n}`` becomes
  :meth:`capstan.kvcache.MooncakeText.prompt` (keeps a converted Mooncake trace small).
* ``id`` (string, optional): request id for the results (default: ``line-<n>``).

A bad line raises :class:`capstan.errors.UserError` naming the file and line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capstan.config import decoded_lines
from capstan.errors import UserError
from capstan.kvcache import MooncakeText

_KEYS = {"t", "session", "think", "api", "body", "prompt_ref", "id"}


@dataclass(frozen=True)
class ReplayRequest:
    """One line of a request file."""

    t: float
    body: dict[str, Any]
    session: str | None = None
    think: float | None = None
    api: str = "chat"
    prompt_ref: dict[str, Any] | None = None
    id: str = ""
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"t": round(self.t, 6), "session": self.session}
        if self.think is not None:
            out["think"] = round(self.think, 6)
        out["api"] = self.api
        if self.id:
            out["id"] = self.id
        if self.prompt_ref is not None:
            out["prompt_ref"] = self.prompt_ref
        out["body"] = self.body
        return out

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.api == "chat" else "/v1/completions"


def _parse(obj: Any, where: str, lineno: int) -> ReplayRequest:
    if not isinstance(obj, dict):
        raise UserError(f"{where}: expected a JSON object")
    unknown = set(obj) - _KEYS
    if unknown:
        raise UserError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    t = obj.get("t")
    if not isinstance(t, int | float) or isinstance(t, bool) or t < 0:
        raise UserError(f"{where}: 't' must be a number >= 0")
    session = obj.get("session")
    if session is not None and not isinstance(session, str):
        raise UserError(f"{where}: 'session' must be a string or null")
    think = obj.get("think")
    if think is not None and (not isinstance(think, int | float) or isinstance(think, bool) or think < 0):
        raise UserError(f"{where}: 'think' must be a number >= 0 or null")
    if think is not None and session is None:
        raise UserError(f"{where}: 'think' needs a 'session'")
    api = obj.get("api", "chat")
    if api not in ("chat", "completions"):
        raise UserError(f'{where}: \'api\' must be "chat" or "completions"')
    body = obj.get("body")
    if not isinstance(body, dict):
        raise UserError(f"{where}: 'body' must be an object")
    ref = obj.get("prompt_ref")
    if ref is not None:
        if not isinstance(ref, dict) or ref.get("kind") != "mooncake":
            raise UserError(f'{where}: \'prompt_ref\' must be {{"kind": "mooncake", ...}}')
        ids, n = ref.get("hash_ids"), ref.get("input_length")
        if not isinstance(ids, list) or not all(isinstance(h, int) for h in ids) or not isinstance(n, int):
            raise UserError(f"{where}: 'prompt_ref' needs integer 'hash_ids' and 'input_length'")
        if n < 1 or n > 512 * len(ids):
            raise UserError(f"{where}: 'prompt_ref' input_length {n} does not fit {len(ids)} hash ids")
        if api != "completions":
            raise UserError(f'{where}: \'prompt_ref\' needs "api": "completions"')
    elif api == "chat" and not isinstance(body.get("messages"), list):
        raise UserError(f"{where}: a chat body needs a 'messages' array")
    elif api == "completions" and "prompt" not in body:
        raise UserError(f"{where}: a completions body needs 'prompt' (or a 'prompt_ref')")
    rid = obj.get("id", f"line-{lineno}")
    if not isinstance(rid, str):
        raise UserError(f"{where}: 'id' must be a string")
    return ReplayRequest(
        t=float(t), body=body, session=session, think=None if think is None else float(think), api=api,
        prompt_ref=ref, id=rid,
    )  # fmt: skip


def read_requests(path: Path, *, limit: int | None = None) -> list[ReplayRequest]:
    """Read a request file; a bad line is a :class:`UserError` naming ``path:line``."""
    try:
        fh = path.open("rb")  # decoded line by line (decoded_lines): a bad byte names its line
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    out: list[ReplayRequest] = []
    with fh:
        for lineno, line in decoded_lines(path, fh):
            if limit is not None and len(out) >= limit:
                break
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})") from None
            out.append(_parse(obj, where, lineno))
    return out


def write_requests(path: Path, requests: Iterable[ReplayRequest]) -> int:
    """Write a request file; returns the number of lines."""
    n = 0
    with path.open("w", encoding="utf-8") as fh:
        for r in requests:
            fh.write(json.dumps(r.to_json(), separators=(",", ":")) + "\n")
            n += 1
    return n


def expand_body(req: ReplayRequest, mooncake: MooncakeText, model: str | None = None) -> dict[str, Any]:
    """The body to send: ``prompt_ref`` expanded, ``model`` overridden when given."""
    body = dict(req.body)
    if req.prompt_ref is not None:
        body["prompt"] = mooncake.prompt(req.prompt_ref["hash_ids"], req.prompt_ref["input_length"])
    if model is not None:
        body["model"] = model
    return body


def iter_sessions(requests: Iterable[ReplayRequest]) -> Iterator[tuple[str | None, list[ReplayRequest]]]:
    """Group by session in file order; requests without a session come one per group."""
    groups: dict[str, list[ReplayRequest]] = {}
    order: list[str | ReplayRequest] = []
    for r in requests:
        if r.session is None:
            order.append(r)
        else:
            if r.session not in groups:
                groups[r.session] = []
                order.append(r.session)
            groups[r.session].append(r)
    for item in order:
        if isinstance(item, str):
            yield item, groups[item]
        else:
            yield None, [item]
