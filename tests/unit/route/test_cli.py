"""`capstan route check` and `capstan route simulate` from the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from capstan.cli.main import main

pytestmark = pytest.mark.unit


def test_check_accepts_a_good_config_and_names_a_bad_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "route.yaml"
    good.write_text(
        "endpoints:\n  - {name: r0, url: 'http://127.0.0.1:8100', models: [m]}\n"
        "scheduler:\n  scorers: [{type: prefix, weight: 3}, {type: prefill-cost, weight: 1}]\n"
    )
    main(["route", "check", str(good)])
    assert "ok (1 endpoints" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("scheduler:\n  picker: {type: best}\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["route", "check", str(bad)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.yaml: scheduler.picker.type" in err[0]


def test_simulate_prints_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    lines = [
        f'{{"timestamp": {i * 100}, "input_length": 1100, "output_length": 4, "hash_ids": [0, {i % 3 + 1}, {i + 10}]}}'
        for i in range(12)
    ]
    trace.write_text("\n".join(lines) + "\n")
    main(["route", "simulate", "--trace", str(trace), "--replicas", "2", "--preset", "tiny-test"])
    out = capsys.readouterr().out
    assert "pooled-cache reference" in out and "default" in out
