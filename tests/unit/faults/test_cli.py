"""``capstan faults``: list the shipped scenarios and a --dir of one's own; bad input is one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from capstan.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_list_shows_the_shipped_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "faults", "list")
    assert code == 0 and "fault scenarios" in out and "missing-secret" in out


def test_a_malformed_scenario_in_dir_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "bad.yaml").write_text("name: bad\ndescription: x\ncategory: nonsense\nexpect: {}\n")
    code, _, err = run(capsys, "faults", "list", "--dir", str(tmp_path))
    assert code == 2
    assert err.strip().splitlines() == [
        f"capstan: error: {tmp_path / 'bad.yaml'}:3: category: 'nonsense' is not a category; one of startup, "
        "runtime, scheduling, configuration, networking, storage, scaling, security, node, gpu, control-plane"
    ]


def test_run_needs_a_name_or_all_and_a_cluster(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAPSTAN_STATE_DIR", str(tmp_path))
    code, _, err = run(capsys, "faults", "run")
    assert code == 2 and "give a scenario name" in err
    code, _, err = run(capsys, "faults", "run", "no-such-scenario")
    assert code == 2 and "unknown scenario 'no-such-scenario'" in err
    code, _, err = run(capsys, "faults", "run", "missing-secret")
    assert code == 2
    assert err.strip() == (
        "capstan: error: no sandbox is running: start one with `capstan sandbox up` (or give --kubeconfig)"
    )
