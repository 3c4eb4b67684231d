"""Turning traces into :class:`SimRequest` lists for the virtual-clock harness.

Mooncake traces (``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids`` of 512-token blocks) are
mapped to text and 16-token block hashes through :class:`capstan.kvcache.MooncakeText`, so the simulated requests
share prefixes exactly as the trace says and exactly as the HTTP replay of the same trace would.
"""

from __future__ import annotations

import json
from pathlib import Path

from capstan.errors import UserError
from capstan.kvcache import MooncakeText
from capstan.route._sim import SimRequest


def mooncake_requests(
    path: Path,
    *,
    limit: int | None = None,
    time_scale: float = 1.0,
    block_size: int = 16,
    max_output_tokens: int | None = None,
) -> list[SimRequest]:
    """Read a Mooncake JSONL trace; ``time_scale`` < 1 compresses arrival times (more load). Bad lines are a
    :class:`UserError` naming the file and line."""
    text = MooncakeText(block_size)
    out: list[SimRequest] = []
    try:
        fh = path.open(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    with fh:
        for lineno, line in enumerate(fh, 1):
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
            out.append(SimRequest(ts * time_scale, f"mc-{lineno}", hashes, n_in, n_out, None))
    out.sort(key=lambda r: (r.arrival, r.request_id))
    return out
