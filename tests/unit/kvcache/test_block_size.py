"""The KV block size is one named constant that every consumer's default follows."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from capstan.enginesim import EngineConfig, ReplicaSpec
from capstan.kvcache import DEFAULT_BLOCK_SIZE, MooncakeText, PromptHasher, block_hashes
from capstan.route import RouteRequest, SchedulerConfig

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
