"""Two `capstan route serve` replicas in front of the same three simulated engines, both subscribed to the engines'
KV events: the gateway is stateless, so whichever replica a request reaches, it goes to the same engine — the one
the engines' own events say holds its prefix (issue 30 §3: the gateway scales out)."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from capstan.route import recommended_scheduler

from ._servers import EngineProcess, free_port, serve_gateway

pytestmark = pytest.mark.integration

MODEL = "m"


def kv_batches(gateway: str) -> float:
    text = httpx.get(f"{gateway}/metrics", timeout=5).text
    return sum(
        float(m) for m in re.findall(r"^capstan_route_kv_event_batches_total\{.*\} (\S+)$", text, re.M)
    )


def settled(gateways: list[str], timeout: float = 30) -> None:
    """Until every replica has applied the same number of KV-event batches, twice in a row 0.3 s apart (the
    engines publish after each step; PUB/SUB delivers to each subscriber on its own)."""
    deadline = time.monotonic() + timeout
    last: list[float] = []
    while time.monotonic() < deadline:  # bounded by the deadline
        now = [kv_batches(g) for g in gateways]
        if len(set(now)) == 1 and now == last:
            return
        last = now
        time.sleep(0.3)
    raise AssertionError(f"the replicas' KV-event batches never agreed: {last}")


@pytest.fixture(scope="module")
def engines() -> Iterator[list[tuple[EngineProcess, str]]]:
    out = []
    for _ in range(3):
        kv = f"tcp://127.0.0.1:{free_port()}"
        engine = EngineProcess(MODEL, "--kv-events-port", kv.rsplit(":", 1)[1]).__enter__()
        out.append((engine, kv))
    yield out
    for engine, _ in out:
        engine.__exit__()


def served_by(gateway: str, messages: list[dict[str, str]]) -> tuple[int, str]:
    """(the engine's port, the reply): the simulator's response ids are ``chatcmpl-<its port>-<n>``."""
    r = httpx.post(
        f"{gateway}/v1/chat/completions",
        json={"model": MODEL, "messages": messages, "max_tokens": 8},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    return int(body["id"].split("-")[1]), body["choices"][0]["message"]["content"]


def test_two_gateway_replicas_send_each_conversation_to_the_same_engine(
    engines: list[tuple[EngineProcess, str]], tmp_path: Path
) -> None:
    config = tmp_path / "route.yaml"
    config.write_text(
        json.dumps(
            {
                "endpoints": [
                    {"name": f"e{i}", "url": e.url, "models": [MODEL], "kv_events": kv}
                    for i, (e, kv) in enumerate(engines)
                ],
                "proxy": {"poll_interval_s": 0.1},
                "scheduler": recommended_scheduler().model_dump(mode="json"),
            }
        )
    )
    ports = [free_port(), free_port()]
    procs = [serve_gateway(config, p, tmp_path / f"gateway-{i}.log") for i, p in enumerate(ports)]
    gateways = [f"http://127.0.0.1:{p}" for p in ports]
    decisions: list[tuple[int, str, int]] = []  # (conversation, which replica, engine)
    try:
        for conv in range(8):
            first, other = gateways[conv % 2], gateways[1 - conv % 2]
            system = f"You are agent {conv}. " + " ".join(f"rule{conv}-{i}" for i in range(120))
            turn = [{"role": "system", "content": system}, {"role": "user", "content": f"question {conv}"}]
            engine, reply = served_by(first, turn)
            decisions.append((conv, first, engine))
            settled(gateways)
            # the same request through the other replica, then the next turn through each
            decisions.append((conv, other, served_by(other, turn)[0]))
            turn2 = [*turn, {"role": "assistant", "content": reply}, {"role": "user", "content": "and then?"}]
            for gateway in (other, first):
                settled(gateways)
                decisions.append((conv, gateway, served_by(gateway, turn2)[0]))
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    by_conversation: dict[int, set[int]] = {}
    for conv, _, engine in decisions:
        by_conversation.setdefault(conv, set()).add(engine)
    split = {c: e for c, e in by_conversation.items() if len(e) > 1}
    assert not split, f"conversations served by more than one engine: {split} ({decisions})"
    # and the conversations were spread over the engines, not all sent to one (a trivial way to agree)
    assert len({next(iter(e)) for e in by_conversation.values()}) >= 2, decisions
