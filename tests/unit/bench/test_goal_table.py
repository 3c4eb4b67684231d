"""The goal table at the top of docs/benchmarks.md has one row per goal of bench/goals.py (bench/goal_table.py),
and the check fails when a row is missing, unknown or carries no verdict."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from bench.goals import GOALS, goal, limit

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "benchmarks.md"


def check(doc: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "goal_table.py"), "--doc", str(doc)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )


def test_every_goal_has_a_row_in_the_report() -> None:
    proc = check(DOC)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "each with one row in the goal table" in proc.stdout


def test_a_goal_without_a_row_fails_naming_it(tmp_path: Path) -> None:
    text = DOC.read_text(encoding="utf-8")
    without = re.sub(r"^\| `capacity\.cost_vs_oracle` \|.*\n", "", text, count=1, flags=re.M)
    assert without != text
    doc = tmp_path / "benchmarks.md"
    doc.write_text(without, encoding="utf-8")
    proc = check(doc)
    assert proc.returncode == 1
    assert proc.stdout.strip().splitlines() == [
        f"{doc}: goal 'capacity.cost_vs_oracle' has no row in the goal table"
    ]


def test_an_unknown_goal_and_a_verdict_that_is_not_one_fail(tmp_path: Path) -> None:
    text = DOC.read_text(encoding="utf-8")
    row = re.search(r"^\| `history\.timeline` \|.*$", text, flags=re.M)
    assert row is not None
    cells = row.group(0).split("|")
    verdict_col = 5  # '', id, capability, goal, figure, verdict, ...
    bad = cells.copy()
    bad[1] = " `history.made_up` "
    bad[verdict_col] = " good "
    doc = tmp_path / "benchmarks.md"
    doc.write_text(text.replace(row.group(0), row.group(0) + "\n" + "|".join(bad)), encoding="utf-8")
    proc = check(doc)
    assert proc.returncode == 1
    out = proc.stdout
    assert "'history.made_up' is not a goal in bench/goals.py" in out
    assert "verdict 'good' starts with none of met, missed, partly, not measured" in out


def test_a_missing_document_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = check(tmp_path / "absent.md")
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"{tmp_path / 'absent.md'}: no such file"
    assert "Traceback" not in proc.stderr


def test_a_row_with_a_stray_cell_fails(tmp_path: Path) -> None:
    text = DOC.read_text(encoding="utf-8")
    row = re.search(r"^\| `sandbox\.startup` \|.*$", text, flags=re.M)
    assert row is not None
    doc = tmp_path / "benchmarks.md"
    doc.write_text(
        text.replace(row.group(0), row.group(0).replace("| met |", "| me | t |", 1)), encoding="utf-8"
    )
    proc = check(doc)
    assert proc.returncode == 1
    assert "(sandbox.startup): 9 cells, the header has 8" in proc.stdout


def test_a_goal_cell_that_is_not_the_statement_fails_and_write_copies_it(tmp_path: Path) -> None:
    text = DOC.read_text(encoding="utf-8")
    statement = "one object's timeline ≤ 20 ms with 1M records stored"
    assert text.count(f"| {statement} |") == 1
    doc = tmp_path / "benchmarks.md"
    doc.write_text(text.replace(f"| {statement} |", "| timelines are fast |"), encoding="utf-8")
    proc = check(doc)
    assert proc.returncode == 1
    assert "(history.timeline): the goal cell is not the statement in bench/goals.py" in proc.stdout
    written = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "goal_table.py"), "--doc", str(doc), "--write"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert written.returncode == 0, written.stdout + written.stderr
    assert doc.read_text(encoding="utf-8") == text


def test_each_goal_names_a_bench_that_exists_and_its_limit_keeps_its_type() -> None:
    assert len({g.key for g in GOALS}) == len(GOALS)
    for g in GOALS:
        assert (ROOT / "bench" / g.bench).is_file(), g
        assert "|" not in g.statement, g
    assert goal("history.api_memory").limit == 300 and isinstance(limit("history.api_memory"), int)
    assert limit("capacity.cost_vs_oracle") == 1.10
    with pytest.raises(KeyError, match=r"no goal 'made\.up'"):
        goal("made.up")
    with pytest.raises(KeyError, match="has no numeric limit"):
        limit("route.ttft_p90_vs_peers")
