"""The KV block size is one named constant that every consumer's default follows."""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest

from capstan.cli.main import main
from capstan.enginesim import EngineConfig, ReplicaSpec
from capstan.kvcache import DEFAULT_BLOCK_SIZE, MooncakeText, PromptHasher, block_hashes
from capstan.route import (
    RouteRequest,
    SchedulerConfig,
    from_replay_requests,
    mooncake_requests,
    pooled_cache_reference,
)

pytestmark = pytest.mark.unit


def _default(cls: type, name: str) -> object:
    return {f.name: f.default for f in dataclasses.fields(cls)}[name]


def test_every_default_block_size_is_the_contracts() -> None:
    assert DEFAULT_BLOCK_SIZE == 16  # vLLM's default; a change here is a change of the contract
    assert SchedulerConfig().block_size == DEFAULT_BLOCK_SIZE
    assert PromptHasher().block_size == DEFAULT_BLOCK_SIZE
    assert _default(RouteRequest, "block_size") == DEFAULT_BLOCK_SIZE
    assert _default(ReplicaSpec, "block_size") == DEFAULT_BLOCK_SIZE
    assert _default(EngineConfig, "block_size") == DEFAULT_BLOCK_SIZE
    assert inspect.signature(block_hashes).parameters["block_size"].default == DEFAULT_BLOCK_SIZE
    assert inspect.signature(MooncakeText).parameters["block_size"].default == DEFAULT_BLOCK_SIZE
    for builder in (mooncake_requests, from_replay_requests, pooled_cache_reference):
        assert inspect.signature(builder).parameters["block_size"].default == DEFAULT_BLOCK_SIZE, builder


def test_the_simulators_cli_default_block_size_is_the_contracts(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        main(["enginesim", "serve", "--help"])
    except SystemExit as exc:
        assert exc.code in (0, None)
    shown = re.search(r"--block-size\s.*?\[default: (\d+)\]", capsys.readouterr().out, re.S)
    assert shown is not None and int(shown.group(1)) == DEFAULT_BLOCK_SIZE
