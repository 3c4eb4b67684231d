"""Request-file format, generators and summaries (pure code)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from capstan.errors import UserError
from capstan.kvcache import MooncakeText, Tokenizer, block_hashes, prompt_text
from capstan.percentile import percentile
from capstan.replay import (
    AgenticConfig,
    ReplayReport,
    ReplayRequest,
    RequestResult,
    SharedPrefixConfig,
    agentic_requests,
    expand_body,
    mooncake_requests,
    read_requests,
    shared_prefix_requests,
    write_requests,
)
from capstan.replay._format import iter_sessions
from capstan.replay._replayer import summarize

pytestmark = pytest.mark.unit


def test_round_trip(tmp_path: Path) -> None:
    reqs = [
        ReplayRequest(
            t=0.5, body={"model": "m", "messages": [{"role": "user", "content": "hi"}]}, session="s", id="a"
        ),
        ReplayRequest(t=1.0, body={"model": "m", "messages": []}, session="s", think=0.25, id="b"),
        ReplayRequest(
            t=2.0,
            body={"model": "m", "max_tokens": 3},
            api="completions",
            prompt_ref={"kind": "mooncake", "hash_ids": [1, 2], "input_length": 600},
            id="c",
        ),
    ]
    path = tmp_path / "r.jsonl"
    assert write_requests(path, reqs) == 3
    assert read_requests(path) == reqs
    assert read_requests(path, limit=1) == reqs[:1]


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("{not json", "invalid JSON"),
        ('{"t": -1, "body": {}}', "'t'"),
        ('{"t": 0, "body": {"messages": []}, "extra": 1}', "unknown key(s) extra"),
        ('{"t": 0, "body": []}', "'body'"),
        ('{"t": 0, "body": {"model": "m"}}', "'messages'"),
        ('{"t": 0, "api": "completions", "body": {"model": "m"}}', "'prompt'"),
        ('{"t": 0, "api": "x", "body": {}}', "'api'"),
        ('{"t": 0, "think": 1, "body": {"messages": []}}', "needs a 'session'"),
        (
            '{"t": 0, "api": "completions", "body": {}, "prompt_ref": {"kind": "mooncake", "hash_ids": [1], "input_length": 600}}',
            "does not fit",
        ),
    ],
)
def test_bad_line_names_file_and_line(tmp_path: Path, line: str, needle: str) -> None:
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"t": 0, "body": {"model": "m", "messages": []}})
    path.write_text(f"{good}\n\n{line}\n")
    with pytest.raises(UserError) as err:
        read_requests(path)
    assert str(err.value).startswith(f"{path}:3: ")
    assert needle in str(err.value)


def test_missing_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot read"):
        read_requests(tmp_path / "nope.jsonl")


def test_mooncake_conversion_and_expansion(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 700, "output_length": 20, "hash_ids": [0, 1]}\n'
        '{"timestamp": 1500, "input_length": 600, "output_length": 0, "hash_ids": [0, 2]}\n'
    )
    reqs = list(mooncake_requests(trace, model="m", max_output_tokens=10, time_scale=2.0))
    assert [r.t for r in reqs] == [0.0, 0.75]
    assert [r.body["max_tokens"] for r in reqs] == [10, 1]
    mt = MooncakeText()
    bodies = [expand_body(r, mt, model="other") for r in reqs]
    assert bodies[0]["model"] == "other"
    ids = [Tokenizer().encode(prompt_text(b)) for b in bodies]
    assert [len(i) for i in ids] == [700, 600]
    # Both start with hash id 0: exactly 512 shared tokens, 32 shared blocks.
    a, b = block_hashes(ids[0]), block_hashes(ids[1])
    assert a[:32] == b[:32] and a[32] != b[32]


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ('{"timestamp": 0, "input_length": 700}', "missing field 'output_length'"),
        (
            '{"timestamp": 0, "input_length": 1100, "output_length": 1, "hash_ids": [1, 2]}',
            "needs more than 2",
        ),
        ('{"timestamp": "x", "input_length": 1, "output_length": 1, "hash_ids": [1]}', "'timestamp'"),
        ("[1]", "JSON object"),
    ],
)
def test_bad_mooncake_line(tmp_path: Path, line: str, needle: str) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}\n' + line + "\n"
    )
    with pytest.raises(UserError) as err:
        list(mooncake_requests(trace, model="m"))
    assert str(err.value).startswith(f"{trace}:2: ")
    assert needle in str(err.value)


def test_agentic_sessions_grow_and_share_prompts() -> None:
    cfg = AgenticConfig(sessions=6, agent_types=2, seed=3, turns_min=3, turns_max=5)
    reqs = agentic_requests(cfg)
    assert reqs == agentic_requests(cfg)  # seeded
    assert reqs != agentic_requests(
        AgenticConfig(sessions=6, agent_types=2, seed=4, turns_min=3, turns_max=5)
    )
    tok = Tokenizer()
    by_session = dict(iter_sessions(reqs))
    assert len(by_session) == 6
    for turns in by_session.values():
        assert 3 <= len(turns) <= 5
        assert turns[0].think is None and all(t.think is not None for t in turns[1:])
        prompts = [tok.encode(prompt_text(t.body)) for t in turns]
        for prev, nxt in itertools.pairwise(prompts):
            # The next turn resends the conversation: the previous prompt minus its generation header is a prefix.
            head = tok.encode(" <|assistant|>")
            assert nxt[: len(prev) - len(head)] == prev[: len(prev) - len(head)]
            assert len(nxt) > len(prev)
    # Sessions of the same agent type share the system + tool prompt.
    firsts = [turns[0].body["messages"][0]["content"] for turns in by_session.values()]
    assert len(set(firsts)) <= 2
    system_tokens = len(tok.encode(firsts[0]))
    assert system_tokens >= cfg.system_tokens + cfg.tools * cfg.tool_schema_tokens - 5


def test_agentic_config_is_strict() -> None:
    with pytest.raises(ValueError, match="turns_max"):
        AgenticConfig(turns_min=5, turns_max=2)
    with pytest.raises(ValueError, match="mix"):
        AgenticConfig(agent_types=2, mix=[1.0])
    with pytest.raises(ValueError, match="extra"):
        AgenticConfig.model_validate({"sesions": 3})


def test_shared_prefix_shape() -> None:
    cfg = SharedPrefixConfig(
        groups=3, prompts_per_group=4, system_tokens=64, question_tokens=20, output_tokens=7, rate=0
    )
    reqs = shared_prefix_requests(cfg)
    assert len(reqs) == 12 and all(r.t == 0 for r in reqs)
    tok = Tokenizer()
    lens = {len(tok.encode(r.body["prompt"])) for r in reqs}
    assert lens == {84}
    groups: dict[str, set[tuple[int, ...]]] = {}
    for r in reqs:
        groups.setdefault(r.id.split("-")[0], set()).add(
            tuple(block_hashes(tok.encode(r.body["prompt"]))[:4])
        )
    assert len(groups) == 3 and all(len(v) == 1 for v in groups.values())


def test_percentile_and_summary() -> None:
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.0
    assert percentile([3.0, 1.0, 2.0, 4.0], 99) == 4.0
    results = [
        RequestResult("a", None, 0, status=200, ttft=1.0, e2e=2.0, prompt_tokens=100, cached_tokens=50),
        RequestResult("b", None, 0, status=200, ttft=3.0, e2e=4.0, prompt_tokens=100, cached_tokens=0),
        RequestResult("c", None, 0, status=500, error="HTTP 500: x"),
    ]
    s = summarize(ReplayReport(results=results, backends=[], wall_seconds=1.0, time_scale=10.0))
    assert s["ok"] == 2 and s["errors"] == 1
    assert s["usage_hit_ratio"] == 0.25
    assert s["ttft_p50"] == 1.0
    assert s["throughput_rps"] == pytest.approx(0.2)
