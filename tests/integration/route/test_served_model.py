"""In front of engines that tokenize with a real model's tokenizer and hash blocks as vLLM does (issue 28 §3): the
engine simulator in that mode (``--tokenizer``, ``--prefix-caching-hash-algo``, the hash seed as PYTHONHASHSEED)
behind a real ``capstan route serve`` whose configuration names the same model files. One tokenizer.json, trained
here with the `tokenizers` library, serves both sides; nothing is downloaded.

* The keys an engine publishes in its KV events are exactly the ones the gateway computes for the request.
* With those keys the precise index predicts cached tokens and keeps each conversation on one engine; the same
  gateway hashing with Capstan's contract instead (no ``models:`` entry) predicts nothing: its keys never match.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import zmq

from capstan.kvcache import ServedModel, ServedTokenizer, VllmBlockHasher, decode_kv_batch, parse_kv_message
from capstan.route import recommended_scheduler
from tests.fixtures.tokenizer import train_tokenizer

from ._servers import EngineProcess, free_port, serve_gateway

pytestmark = pytest.mark.integration

MODEL = "served-m"
ALGO, SEED = "sha256_cbor", 7


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("model")
    train_tokenizer(directory)
    return directory


@pytest.fixture(scope="module")
def engines(model_dir: Path) -> Iterator[list[tuple[EngineProcess, str]]]:
    out = []
    try:
        for _ in range(3):
            kv = free_port()
            engine = EngineProcess(
                MODEL, "--kv-events-port", str(kv), "--tokenizer", str(model_dir / "tokenizer.json"),
                "--tokenizer-config", str(model_dir / "tokenizer_config.json"),
                "--prefix-caching-hash-algo", ALGO, "--hash-seed", str(SEED),
            ).__enter__()  # fmt: skip
            out.append((engine, f"tcp://127.0.0.1:{kv}"))
        yield out
    finally:
        for engine, _ in out:
            engine.__exit__()


def served_model(model_dir: Path) -> ServedModel:
    tokenizer = ServedTokenizer.from_files(model_dir / "tokenizer.json", model_dir / "tokenizer_config.json")
    return ServedModel(tokenizer, VllmBlockHasher(ALGO, str(SEED), 16))


def conversation(n: int) -> list[dict[str, str]]:
    system = f"You are agent {n}. " + " ".join(
        f"Answer the user's question about Kubernetes rule {n}-{i}." for i in range(12)
    )
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Which pods of team {n} wait?"},
    ]


def test_an_engine_publishes_the_keys_the_gateway_computes(
    engines: list[tuple[EngineProcess, str]], model_dir: Path
) -> None:
    engine, kv = engines[0]
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    try:
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(kv)
        time.sleep(0.5)  # a SUB socket misses what is published before it has joined
        body = {"model": MODEL, "messages": conversation(99), "max_tokens": 4}
        r = httpx.post(f"{engine.url}/v1/chat/completions", json=body, timeout=30)
        assert r.status_code == 200, r.text
        expected = served_model(model_dir)
        ids = expected.token_ids(body)
        keys = expected.block_hashes(ids)
        assert len(keys) >= 4, len(ids)
        assert r.json()["usage"]["prompt_tokens"] == len(ids)  # the engine counted the same tokens
        tokenized = httpx.post(
            f"{engine.url}/tokenize", json={"model": MODEL, "messages": body["messages"]}, timeout=10
        )
        assert tokenized.json()["tokens"] == ids
        stored: list[int] = []
        deadline = time.monotonic() + 20
        while len(stored) < len(keys) and time.monotonic() < deadline:  # bounded by the deadline
            if sub.poll(500):
                _, events = decode_kv_batch(parse_kv_message(sub.recv_multipart()).payload)
                stored += [h for e in events for h in getattr(e, "block_hashes", [])]
        assert stored[: len(keys)] == keys
    finally:
        sub.close(0)
        ctx.term()


def gateway(config: dict[str, object], tmp_path: Path, name: str) -> tuple[subprocess.Popen[bytes], str]:
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps(config))
    port = free_port()
    return serve_gateway(path, port, tmp_path / f"{name}.log"), f"http://127.0.0.1:{port}"


def predicted_cached(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    return sum(
        float(v) for v in re.findall(r"^capstan_route_predicted_cached_tokens_total (\S+)$", text, re.M)
    )


def run_conversations(url: str, first: int) -> dict[int, set[int]]:
    """Three two-turn conversations through ``url``: the engines (by port) that served each."""
    served: dict[int, set[int]] = {}
    for n in range(first, first + 3):
        turn = conversation(n)
        for _ in range(2):
            r = httpx.post(f"{url}/v1/chat/completions", json={"model": MODEL, "messages": turn, "max_tokens": 8},
                           timeout=30)  # fmt: skip
            assert r.status_code == 200, r.text
            served.setdefault(n, set()).add(int(r.json()["id"].split("-")[1]))
            reply = r.json()["choices"][0]["message"]["content"]
            turn = [*turn, {"role": "assistant", "content": reply}, {"role": "user", "content": "And then?"}]
            time.sleep(0.5)  # the engine's KV events reach the gateway's index
    return served


def test_the_gateway_with_the_model_s_files_predicts_hits_and_the_contract_does_not(
    engines: list[tuple[EngineProcess, str]], model_dir: Path, tmp_path: Path
) -> None:
    scheduler = recommended_scheduler().model_dump(mode="json")
    scheduler["prefix"]["inflight"] = False  # the index learns from the engines' KV events alone
    base: dict[str, object] = {
        "endpoints": [
            {"name": f"e{i}", "url": e.url, "models": [MODEL], "kv_events": kv}
            for i, (e, kv) in enumerate(engines)
        ],
        "proxy": {"poll_interval_s": 0.1},
        "scheduler": scheduler,
    }
    served = {
        **base,
        "models": [{"name": MODEL, "tokenizer": str(model_dir / "tokenizer.json"),
                    "tokenizer_config": str(model_dir / "tokenizer_config.json"),
                    "hash_algo": ALGO, "hash_seed": str(SEED)}],
    }  # fmt: skip
    for name, config, first in (("served", served, 0), ("contract", base, 10)):
        proc, url = gateway(config, tmp_path, name)
        try:
            by_conversation = run_conversations(url, first)
            predicted = predicted_cached(url)
        finally:
            proc.terminate()
            proc.wait(30)
        if name == "served":
            assert predicted > 0, "the gateway's keys never matched the engines' KV events"
            split = {c: e for c, e in by_conversation.items() if len(e) > 1}
            assert not split, f"conversations served by more than one engine: {split}"
        else:
            assert predicted == 0, "the contract's keys matched a served model's blocks"


def long_conversation(n: int) -> list[dict[str, str]]:
    """A conversation whose body is well over the gateway's off-loop threshold (16 KiB)."""
    rules = " ".join(
        f"Rule {n}-{i}: pods of team {n} wait for node pool {i % 7} to scale." for i in range(400)
    )
    return [
        {"role": "system", "content": rules},
        {"role": "user", "content": f"Which pods of team {n} wait?"},
    ]


def test_long_prompts_are_keyed_off_the_event_loop_with_the_engine_s_keys(
    engines: list[tuple[EngineProcess, str]], model_dir: Path, tmp_path: Path
) -> None:
    config: dict[str, object] = {
        "endpoints": [
            {"name": f"e{i}", "url": e.url, "models": [MODEL], "kv_events": kv}
            for i, (e, kv) in enumerate(engines)
        ],
        "proxy": {"poll_interval_s": 0.1},
        "scheduler": {**recommended_scheduler().model_dump(mode="json"), "prefix": {"kind": "precise", "inflight": False}},
        "models": [{"name": MODEL, "tokenizer": str(model_dir / "tokenizer.json"),
                    "tokenizer_config": str(model_dir / "tokenizer_config.json"),
                    "hash_algo": ALGO, "hash_seed": str(SEED)}],
    }  # fmt: skip
    expected = served_model(model_dir)
    messages = long_conversation(50)
    first: dict[str, object] = {"model": MODEL, "messages": messages, "max_tokens": 8}
    assert len(json.dumps(first)) > 16 * 1024
    proc, url = gateway(config, tmp_path, "long")
    try:
        r = httpx.post(f"{url}/v1/chat/completions", json=first, timeout=60)
        assert r.status_code == 200, r.text
        engine = r.json()["id"].split("-")[1]
        reply = r.json()["choices"][0]["message"]["content"]
        second = {**first, "messages": [*messages, {"role": "assistant", "content": reply},
                                        {"role": "user", "content": "And then?"}]}  # fmt: skip
        time.sleep(0.5)  # the engine's KV events reach the gateway's index
        r2 = httpx.post(f"{url}/v1/chat/completions", json=second, timeout=60)
        assert r2.status_code == 200, r2.text
        # keys computed on the worker thread match what the engine published: the whole first prompt's full
        # blocks are predicted cached, and the conversation stays on its engine
        block = expected.block_size
        assert predicted_cached(url) >= (len(expected.token_ids(first)) // block) * block
        assert r2.json()["id"].split("-")[1] == engine
        # concurrent long and short prompts: every one answered, every prompt token counted as the engine counts
        bodies = [{"model": MODEL, "messages": long_conversation(60 + i), "max_tokens": 4} for i in range(4)]
        bodies += [{"model": MODEL, "messages": conversation(70 + i), "max_tokens": 4} for i in range(4)]
        with httpx.Client(timeout=60) as client, ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda b: client.post(f"{url}/v1/chat/completions", json=b), bodies))
        assert [a.status_code for a in answers] == [200] * len(bodies)
        for body, answer in zip(bodies, answers, strict=True):
            assert answer.json()["usage"]["prompt_tokens"] == len(expected.token_ids(body))
        # a conversation the model's template cannot render (ChatML on an assistant turn without content): a 400
        # naming it, from the gateway, not a 500
        tool_turn = [
            {"role": "user", "content": "Which pods wait?"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "pods", "arguments": "{}"}}]},
        ]  # fmt: skip
        refused = httpx.post(
            f"{url}/v1/chat/completions", json={"model": MODEL, "messages": tool_turn}, timeout=30
        )
        assert refused.status_code == 400, refused.text
        assert "could not render the messages" in refused.json()["error"]["message"]
        text = httpx.get(f"{url}/metrics", timeout=5).text
        counted = float(re.findall(r"^capstan_route_prompt_tokens_total (\S+)$", text, re.M)[0])
        assert counted == sum(len(expected.token_ids(b)) for b in (first, second, *bodies))
    finally:
        proc.terminate()
        proc.wait(30)
