"""The replay and enginesim CLIs: one-line errors with exit code 2, request files written."""

from __future__ import annotations

from pathlib import Path

import pytest

from capstan.cli.main import main
from capstan.replay import read_requests

pytestmark = pytest.mark.unit


def run(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_bad_trace_line_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}\n{oops\n')
    code = run(["replay", "mooncake", str(trace), "--out", str(tmp_path / "o.jsonl")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.count("\n") == 0
    assert f"{trace}:2: invalid JSON" in err


def test_generators_write_request_files(tmp_path: Path) -> None:
    out = tmp_path / "sp.jsonl"
    assert (
        run(["replay", "shared-prefix", "--out", str(out), "--groups", "2", "--prompts-per-group", "3"]) == 0
    )
    assert len(read_requests(out)) == 6
    out2 = tmp_path / "ag.jsonl"
    assert run(["replay", "agentic", "--out", str(out2), "--sessions", "2", "--seed", "1"]) == 0
    assert {r.session for r in read_requests(out2)} and all(r.session for r in read_requests(out2))


def test_bad_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "a.yaml"
    cfg.write_text("sesions: 3\n")
    assert run(["replay", "agentic", "--out", str(tmp_path / "x"), "--config", str(cfg)]) == 2
    assert "sesions" in capsys.readouterr().err
    assert run(["enginesim", "serve", "--preset", "nope"]) == 2
    assert "unknown preset 'nope'" in capsys.readouterr().err
    assert run(["replay", "run", str(cfg), "--target", "http://example.com"]) == 2
    assert "loopback" in capsys.readouterr().err
