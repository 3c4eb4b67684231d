"""The routing packages' public names resolve, and their heavy shells load only when a name that needs them is
used: the scheduling core, the harness and the engine model never pull in the HTTP stack (each probe runs in a fresh
interpreter, so what one import loaded cannot hide what another does)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

_PROBE = """
import importlib, json, sys
mod = importlib.import_module(sys.argv[1])
for name in json.loads(sys.argv[2]):
    getattr(mod, name)
heavy = ("aiohttp", "httpx", "starlette", "uvicorn", "zmq", "numpy", "lightkube", "prometheus_client")
print(json.dumps(sorted(m for m in heavy if m in sys.modules)))
"""


def loaded(module: str, *names: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, module, json.dumps(names)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return list(json.loads(proc.stdout))


def test_every_exported_name_resolves() -> None:
    for module in ("capstan.route", "capstan.enginesim", "capstan.kvcache", "capstan.replay"):
        mod = __import__(module, fromlist=["__all__"])
        missing = [name for name in mod.__all__ if getattr(mod, name, None) is None]
        assert missing == [], module


def test_the_scheduling_core_loads_no_shell() -> None:
    assert loaded("capstan.route", "Scheduler", "SchedulerConfig", "PreciseKVIndex") == []


def test_the_harness_loads_no_http_stack() -> None:
    assert loaded("capstan.route", "simulate", "SimRequest", "pooled_cache_reference") == []


def test_the_engine_model_loads_no_server() -> None:
    assert loaded("capstan.enginesim", "Engine", "EngineConfig", "get_preset") == []


def test_the_block_hash_contract_loads_no_numpy_until_mooncake_text() -> None:
    assert loaded("capstan.kvcache", "DEFAULT_BLOCK_SIZE", "block_hashes", "PromptHasher") == []
    assert loaded("capstan.kvcache", "MooncakeText") == ["numpy"]


def test_the_gateway_loads_its_shell_when_asked_for() -> None:
    assert {"aiohttp", "starlette"} <= set(loaded("capstan.route", "Router", "upstream_for"))
