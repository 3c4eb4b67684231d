"""`capstan route check` and `capstan route simulate` from the command line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

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


def _trace(tmp_path: Path, extra: str = "", step_ms: int = 100) -> Path:
    trace = tmp_path / "conversations.jsonl"
    lines = [
        f'{{"timestamp": {i * step_ms}, "input_length": 1100, "output_length": 4, "hash_ids": [0, {i % 3 + 1}, {i + 10}]}}'
        for i in range(12)
    ]
    trace.write_text("\n".join(lines) + "\n" + extra)
    return trace


def _rows(out: str) -> dict[str, list[str]]:
    """The table's body rows by policy name (cells stripped)."""
    return {
        cells[0]: cells[1:]
        for line in out.splitlines()
        if line.startswith("│")
        for cells in [[c.strip() for c in line.strip("│").split("│")]]
    }


SIM = ["route", "simulate", "--replicas", "2", "--preset", "tiny-test"]


def test_simulate_prints_a_table_in_80_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    trace = _trace(tmp_path)
    main([*SIM, "--trace", str(trace)])
    out = capsys.readouterr().out
    assert "pooled-cache reference" in out and "conversations.jsonl: 12 requests" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    # Capstan's recommended scheduler beside round-robin and the pooled reference, prefill work and GPU time as
    # ratios to round-robin's, and the requests the engines rejected
    rows = _rows(out)
    assert set(rows) == {"recommended", "round-robin", "pooled reference"}
    header = " ".join(line for line in out.splitlines() if line.startswith("┃"))
    for word in ("prefill", "GPU-s", "÷ RR", "rejected", "TTFT"):
        assert word in header
    assert rows["round-robin"][-3:] == ["1.00", "1.00", "0"]
    assert rows["recommended"][-3] != "1.00"  # the cache-aware pick computes less prefill than round-robin
    main([*SIM, "--trace", str(trace), "--no-baseline"])
    out = capsys.readouterr().out
    assert set(_rows(out)) == {"recommended"} and "round-robin" not in out


def test_simulate_without_a_config_runs_the_recommended_scheduler(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from capstan.route import SchedulerConfig, recommended_scheduler

    # arrivals 50 ms apart: close enough that the bare default (the approximate index, llm-d's weights) and the
    # recommended scheduler decide differently on these 12 requests
    trace = _trace(tmp_path, step_ms=50)
    rec = tmp_path / "rec.yaml"
    rec.write_text(yaml.safe_dump({"scheduler": recommended_scheduler().model_dump(mode="json")}))
    bare = tmp_path / "bare.yaml"
    bare.write_text("scheduler: {}\n")
    main([*SIM, "--trace", str(trace), "--no-baseline", "-c", str(rec), "-c", str(bare)])
    rows = _rows(capsys.readouterr().out)
    main([*SIM, "--trace", str(trace), "--no-baseline"])
    (recommended,) = _rows(capsys.readouterr().out).values()
    assert rows["rec"] == recommended != rows["bare"]
    assert recommended_scheduler() != SchedulerConfig()
    assert recommended_scheduler().prefix.kind == "precise"
    assert [(s.type, s.weight) for s in recommended_scheduler().scorers] == [
        ("prefix", 3),
        ("prefill-cost", 1),
    ]
    main(["route", "simulate", "--help"])  # the help says what runs without --config
    assert "recommended" in capsys.readouterr().out


def test_simulate_names_configs_apart_in_full(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    trace = _trace(tmp_path)
    deep = tmp_path / "experiments-with-a-long-directory-name" / "weights"
    (deep / "x").mkdir(parents=True)
    paths = [
        deep / "capstan-weights-a.yaml",
        deep / "capstan-weights-b.yaml",
        deep / "x" / "round-robin.yaml",
    ]
    for path in paths:
        path.write_text("scheduler: {prefix: {kind: approximate}}\n")
    main([*SIM, "--trace", str(trace), *(a for p in paths for a in ("-c", str(p)))])
    out = capsys.readouterr().out
    assert set(_rows(out)) == {
        "capstan-weights-a",
        "capstan-weights-b",
        "x/round-robin",
        "round-robin",
        "pooled reference",
    }
    assert max(len(line) for line in out.splitlines()) <= 80
    main([*SIM, "--trace", str(trace), "--no-baseline", "-c", str(paths[0]), "-c", str(paths[0])])
    assert set(_rows(capsys.readouterr().out)) == {"capstan-weights-a #1", "capstan-weights-a #2"}


def test_simulate_folds_a_long_policy_name_rather_than_cutting_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    name = "a-very-long-experiment-name-for-the-weights-of-x"
    config = tmp_path / f"{name}.yaml"
    config.write_text("scheduler: {prefix: {kind: approximate}}\n")
    main([*SIM, "--trace", str(_trace(tmp_path)), "-c", str(config)])
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    cells = [line.strip("│").split("│")[0].strip() for line in out.splitlines() if line.startswith("│")]
    assert "".join(cells).startswith(name + "round-robin")  # folded over lines of its cell, whole
    assert all(n in out for n in ("0.", "rejected"))


def test_simulate_counts_what_the_engines_reject(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    # 2,500 + 4 tokens need 157 blocks; a replica of 2,048 tokens has 128 (the others need 69)
    big = '{"timestamp": 2000, "input_length": 2500, "output_length": 4, "hash_ids": [0, 1, 2, 3, 4]}\n'
    trace = _trace(tmp_path, big)
    main([*SIM, "--trace", str(trace), "--kv-tokens", "2048"])
    out = capsys.readouterr().out
    rows = _rows(out)
    assert {name: cells[-1] for name, cells in rows.items()} == {
        "recommended": "1",
        "round-robin": "1",
        "pooled reference": "1",
    }
    assert "1 of 13 requests are longer than the context" in " ".join(out.split())


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--kv-tokens", "8"], "--kv-tokens 8: must be at least 16 (one KV block)"),
        (["--time-scale", "0"], "--time-scale must be positive"),
    ],
)
def test_simulate_bad_options_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], problem: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*SIM, "--trace", str(_trace(tmp_path)), *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and problem in err[0], err
