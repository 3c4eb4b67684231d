"""Request-file generators: Mooncake traces, synthetic agentic sessions, llm-d-benchmark-like shared prefixes.

All are deterministic for a given seed; texts are made of single-token words (see :mod:`capstan.kvcache`), so
the token counts asked for are the token counts the engine sees (plus the chat template's few tokens).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from capstan.config import StrictModel, decoded_lines
from capstan.errors import UserError
from capstan.replay._format import ReplayRequest

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


class Words:
    """Seeded source of text with an exact token count (each word is one token: a space and 3-7 letters)."""

    def __init__(self, seed: int, vocabulary: int = 2048) -> None:
        self._rng = random.Random(seed)
        vocab_rng = random.Random(0x5EED)
        self._vocab = [
            " " + "".join(vocab_rng.choice(_LETTERS) for _ in range(vocab_rng.randint(3, 7)))
            for _ in range(vocabulary)
        ]

    def text(self, tokens: int) -> str:
        return "".join(self._rng.choices(self._vocab, k=max(0, tokens)))


# ---- Mooncake ----------------------------------------------------------------------------------------------
def mooncake_requests(
    path: Path,
    *,
    model: str,
    limit: int | None = None,
    max_output_tokens: int | None = None,
    time_scale: float = 1.0,
) -> Iterator[ReplayRequest]:
    """Convert a Mooncake trace (``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids`` of 512-token
    blocks) to completions requests whose prompt is a ``prompt_ref`` to the trace's fixed text.
    ``time_scale`` > 1 compresses arrivals (more load). A bad line is a UserError naming ``path:line``."""
    try:
        fh = path.open("rb")  # decoded line by line (decoded_lines): a bad byte names its line
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    n = 0
    with fh:
        for lineno, line in decoded_lines(path, fh):
            if limit is not None and n >= limit:
                break
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(rec, dict):
                raise UserError(f"{where}: expected a JSON object")
            try:
                ts = rec["timestamp"]
                n_in = rec["input_length"]
                n_out = rec["output_length"]
                ids = rec["hash_ids"]
            except KeyError as exc:
                raise UserError(f"{where}: missing field {exc.args[0]!r}") from None
            if not isinstance(ts, int | float) or isinstance(ts, bool) or ts < 0:
                raise UserError(f"{where}: 'timestamp' must be a number of ms >= 0")
            if not isinstance(n_in, int) or not isinstance(n_out, int) or n_in < 1 or n_out < 0:
                raise UserError(f"{where}: 'input_length' must be >= 1 and 'output_length' >= 0 integers")
            if not isinstance(ids, list) or not all(isinstance(h, int) and h >= 0 for h in ids):
                raise UserError(f"{where}: 'hash_ids' must be a list of integers >= 0")
            if n_in > 512 * len(ids):
                raise UserError(
                    f"{where}: input_length {n_in} needs more than {len(ids)} hash ids of 512 tokens"
                )
            out = max(1, n_out)
            if max_output_tokens is not None:
                out = min(out, max_output_tokens)
            n += 1
            yield ReplayRequest(
                t=float(ts) / 1000.0 / time_scale,
                body={"model": model, "max_tokens": out},
                api="completions",
                prompt_ref={"kind": "mooncake", "hash_ids": ids, "input_length": n_in},
                id=f"mooncake-{lineno}",
            )


# ---- agentic sessions ---------------------------------------------------------------------------------------
class AgenticConfig(StrictModel):
    """Synthetic agent sessions: each agent type has its own system prompt and tool definitions (shared by all
    its sessions); a session starts with a user task, then each turn appends the assistant's tool call and the
    tool's output, and an occasional user follow-up; turns follow the previous answer after a think time."""

    model: str = "sim-model"
    seed: int = 0
    sessions: int = Field(50, ge=1)
    session_rate: float = Field(1.0, gt=0, description="new sessions per second (Poisson)")
    turns_min: int = Field(3, ge=1)
    turns_max: int = Field(12, ge=1)
    agent_types: int = Field(3, ge=1)
    mix: list[float] | None = Field(None, description="weight of each agent type (default: equal)")
    system_tokens: int = Field(1500, ge=1)
    tools: int = Field(8, ge=0)
    tool_schema_tokens: int = Field(250, ge=1)
    user_tokens: int = Field(150, ge=1)
    tool_output_tokens: int = Field(600, ge=1, description="mean; each is uniform in [0.5, 1.5] x mean")
    answer_tokens: int = Field(200, ge=1, description="mean max_tokens; uniform in [0.5, 1.5] x mean")
    think_time_s: float = Field(2.0, ge=0, description="mean tool/think time between turns (exponential)")
    user_followup_prob: float = Field(0.2, ge=0, le=1)

    @model_validator(mode="after")
    def _check(self) -> AgenticConfig:
        if self.turns_max < self.turns_min:
            raise ValueError("turns_max must be >= turns_min")
        if self.mix is not None and (len(self.mix) != self.agent_types or any(w < 0 for w in self.mix)):
            raise ValueError("mix must have one non-negative weight per agent type")
        if self.mix is not None and sum(self.mix) <= 0:
            raise ValueError("mix needs a positive weight")
        return self


def _vary(rng: random.Random, mean: int) -> int:
    return max(1, round(mean * rng.uniform(0.5, 1.5)))


def agentic_requests(cfg: AgenticConfig) -> list[ReplayRequest]:
    """Requests of ``cfg.sessions`` sessions; follow-up turns carry ``think`` (closed loop)."""
    rng = random.Random(cfg.seed)
    words = Words(cfg.seed)
    prompts: list[str] = []
    for a in range(cfg.agent_types):
        tools = "".join(f" tool{a}x{i}:{words.text(cfg.tool_schema_tokens - 1)}" for i in range(cfg.tools))
        prompts.append(f"agent{a}:{words.text(cfg.system_tokens - 1)}{tools}")
    weights = cfg.mix or [1.0] * cfg.agent_types
    out: list[ReplayRequest] = []
    start = 0.0
    for s in range(cfg.sessions):
        start += rng.expovariate(cfg.session_rate)
        agent = rng.choices(range(cfg.agent_types), weights=weights)[0]
        sid = f"s{s:05d}-a{agent}"
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": prompts[agent]},
            {"role": "user", "content": f"task{s}:" + words.text(cfg.user_tokens - 1)},
        ]
        t = start
        turns = rng.randint(cfg.turns_min, cfg.turns_max)
        for k in range(turns):
            answer = _vary(rng, cfg.answer_tokens)
            think = (
                None if k == 0 else rng.expovariate(1.0 / cfg.think_time_s) if cfg.think_time_s > 0 else 0.0
            )
            if think is not None:
                t += think
            out.append(
                ReplayRequest(
                    t=t,
                    session=sid,
                    think=think,
                    api="chat",
                    body={"model": cfg.model, "messages": [dict(m) for m in messages], "max_tokens": answer},
                    id=f"{sid}-t{k:03d}",
                )
            )
            call = f"call{k}:" + words.text(answer - 1)
            messages.append({"role": "assistant", "content": call})
            messages.append(
                {"role": "tool", "content": f"out{k}:" + words.text(_vary(rng, cfg.tool_output_tokens))}
            )
            if rng.random() < cfg.user_followup_prob:
                messages.append({"role": "user", "content": words.text(_vary(rng, cfg.user_tokens))})
    out.sort(key=lambda r: r.t)
    return out


# ---- shared prefix (llm-d-benchmark shape) --------------------------------------------------------------------
class SharedPrefixConfig(StrictModel):
    """``groups`` x ``prompts_per_group`` requests; a group shares a system prompt, each request has its own
    question (llm-d-benchmark's shared_prefix shape, e.g. 150 x 5 with 6000/1200/1000 tokens)."""

    model: str = "sim-model"
    seed: int = 0
    groups: int = Field(150, ge=1)
    prompts_per_group: int = Field(5, ge=1)
    system_tokens: int = Field(6000, ge=1)
    question_tokens: int = Field(1200, ge=1)
    output_tokens: int = Field(1000, ge=1)
    rate: float = Field(10.0, ge=0, description="requests per second, Poisson (0: all at t=0)")


def shared_prefix_requests(cfg: SharedPrefixConfig) -> list[ReplayRequest]:
    """Completions requests ``system + question`` in a seeded random order."""
    rng = random.Random(cfg.seed)
    words = Words(cfg.seed)
    systems = [words.text(cfg.system_tokens) for _ in range(cfg.groups)]
    pairs = [(g, p) for g in range(cfg.groups) for p in range(cfg.prompts_per_group)]
    rng.shuffle(pairs)
    out: list[ReplayRequest] = []
    t = 0.0
    for g, p in pairs:
        if cfg.rate > 0:
            t += rng.expovariate(cfg.rate)
        out.append(
            ReplayRequest(
                t=t,
                session=None,
                api="completions",
                body={
                    "model": cfg.model,
                    "prompt": systems[g] + words.text(cfg.question_tokens),
                    "max_tokens": cfg.output_tokens,
                },
                id=f"g{g:04d}-p{p:03d}",
            )
        )
    return out
