"""``capstan record --once`` and ``capstan history …`` end to end, against a real Redis."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from capstan.cli.main import main
from capstan.sandbox.datastores import RedisServer, free_port

pytestmark = pytest.mark.integration


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_record_once_then_query_engine_entries_and_gaps(
    tmp_path: Path, redis_factory: Callable[..., RedisServer], capsys: pytest.CaptureFixture[str]
) -> None:
    server = redis_factory("--slowlog-log-slower-than", "0", "--slowlog-max-len", "4")
    db = tmp_path / "h.db"
    config = tmp_path / "record.yaml"
    config.write_text(
        f"store: {db}\nredis:\n  - name: cache\n    address: {server.address}\n    logs: [slowlog]\n"
        f"  - name: down\n    address: 127.0.0.1:{free_port()}\n    timeout_s: 1\n"
    )
    code, out, _ = run(["record", "--config", str(config), "--once"], capsys)
    assert code == 1  # one target is down
    assert "cache: ok" in out
    assert "down" in out and "unreachable" in out
    client = redis.Redis(host="127.0.0.1", port=server.port)
    for i in range(20):
        client.set(f"k{i}", "v")
    code, _, _ = run(["record", "--config", str(config), "--once"], capsys)
    code, out, _ = run(["history", "engine", "--store", str(db), "--target", "cache", "-o", "json"], capsys)
    assert code == 0
    items = json.loads(out)["items"]
    assert any(e["payload"]["args"][:1] == ["SET"] for e in items)
    code, out, _ = run(["history", "gaps", "--store", str(db), "-o", "json"], capsys)
    gaps = json.loads(out)["items"]
    assert len(gaps) == 1 and gaps[0]["lost"] > 0
    code, out, _ = run(["history", "gaps", "--store", str(db)], capsys)
    assert code == 0 and "ring overwrote" in out


def test_bad_inputs_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["history", "timeline", "--store", "mysql://x@127.0.0.1/db"], capsys)
    assert code == 2 and err.count("\n") == 1 and "unsupported scheme" in err
    code, _, err = run(["history", "timeline", "--store", str(tmp_path / "h.db"), "--since", "soon"], capsys)
    assert code == 2 and "--since" in err
    config = tmp_path / "bad.yaml"
    config.write_text(f"store: {tmp_path / 'h.db'}\nredis:\n  - name: a\n    adress: 127.0.0.1:1\n")
    code, _, err = run(["record", "--config", str(config), "--once"], capsys)
    assert code == 2 and err.count("\n") == 1 and "adress" in err and "bad.yaml" in err
