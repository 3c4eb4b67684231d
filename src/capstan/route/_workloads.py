"""Turning traces into :class:`SimRequest` lists for the virtual-clock harness.

Mooncake traces (``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids`` of 512-token blocks) are
mapped to text and 16-token block hashes through :class:`capstan.kvcache.MooncakeText`, so the simulated requests
share prefixes exactly as the trace says and exactly as the HTTP replay of the same trace would.
"""

from __future__ import annotations

import json
from pathlib import Path

from capstan.config import decoded_lines
from capstan.errors import UserError
from capstan.kvcache import (
    DEFAULT_BLOCK_SIZE,
    MooncakeText,
    Tokenizer,
    block_hashes,
    prompt_text,
    prompt_token_ids,
)
from capstan.replay import ReplayRequest, expand_body
from capstan.route._sim import SimRequest


def mooncake_requests(
    path: Path,
    *,
    limit: int | None = None,
    time_scale: float = 1.0,
    block_size: int = DEFAULT_BLOCK_SIZE,
    max_output_tokens: int | None = None,
) -> list[SimRequest]:
    """Read a Mooncake JSONL trace; ``time_scale`` > 1 compresses arrival times (more load), as in
    ``capstan.replay``. Bad lines are a :class:`UserError` naming the file and line."""
    text = MooncakeText(block_size)
    out: list[SimRequest] = []
    try:
        fh = path.open("rb")  # decoded line by line (decoded_lines): a bad byte names its line
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    with fh:
        for lineno, line in decoded_lines(path, fh):
            if limit is not None and len(out) >= limit:
                break
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                ts = float(rec["timestamp"]) / 1000.0
                n_in = int(rec["input_length"])
                n_out = int(rec["output_length"])
                ids = [int(h) for h in rec["hash_ids"]]
                hashes = text.block_hashes(ids, n_in)
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise UserError(f"{path}:{lineno}: bad Mooncake record: {exc}") from None
            if n_out < 1 or n_in < 1:
                continue
            if max_output_tokens is not None:
                n_out = min(n_out, max_output_tokens)
            out.append(SimRequest(ts / time_scale, f"mc-{lineno}", hashes, n_in, n_out, None))
    out.sort(key=lambda r: (r.arrival, r.request_id))
    return out


def from_replay_requests(
    requests: list[ReplayRequest], *, block_size: int = DEFAULT_BLOCK_SIZE, default_max_tokens: int = 16
) -> list[SimRequest]:
    """Convert requests of the documented request-file format (``capstan.replay``) for the harness: the prompt
    is rendered and tokenized with the shared contract, exactly as router and engine do over HTTP. A request with
    ``think`` arrives that long after its session's previous request finished (closed loop)."""
    tokenizer = Tokenizer()
    mooncake = MooncakeText(block_size)
    out: list[SimRequest] = []
    for i, r in enumerate(requests):
        body = expand_body(r, mooncake)
        tokens = prompt_token_ids(body)
        if tokens is None:
            try:
                tokens = tokenizer.encode(prompt_text(body))
            except ValueError as exc:
                raise UserError(f"request {r.id or i}: {exc}") from None
        salt = body.get("cache_salt")
        hashes = block_hashes(tokens, block_size, salt=salt if isinstance(salt, str) else None)
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or default_max_tokens
        out.append(
            SimRequest(
                arrival=r.t,
                request_id=r.id or f"req-{i}",
                block_hashes=hashes,
                prompt_tokens=len(tokens),
                output_tokens=int(max_tokens),
                session_id=r.session,
                think_s=r.think,
            )
        )
    return out
