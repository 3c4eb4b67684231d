"""Check that the goal table at the top of docs/benchmarks.md has one row per goal of bench/goals.py.

The table is the first Markdown table under the ``## Goals`` heading. Each row names its goal in the first
column as a code span (`` `capacity.cost_vs_oracle` ``) and gives a verdict in the column headed ``verdict``
that starts with one of ``met``, ``missed``, ``partly`` or ``not measured``. The check fails, one line per
problem, when a goal has no row, a row names no goal or one twice, a row has more or fewer cells than the
header, or a verdict is not one of those words.

    .venv/bin/python bench/goal_table.py                     # checks docs/benchmarks.md, exit 0 or 1
    .venv/bin/python bench/goal_table.py --doc OTHER.md

A unit test (tests/unit/bench/test_goal_table.py) runs it.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from goals import GOALS

ROOT = Path(__file__).resolve().parent.parent
HEADING = "## Goals"
VERDICTS = ("met", "missed", "partly", "not measured")
_KEY = re.compile(r"^`([A-Za-z0-9_.]+)`$")


def table_rows(text: str) -> tuple[list[str], list[list[str]]]:
    """The header cells and the body rows of the first table under ``## Goals`` (both empty when none)."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == HEADING)
    except StopIteration:
        return [], []
    table: list[list[str]] = []
    for line in lines[start + 1 :]:
        stripped = line.strip()
        if stripped.startswith("#"):
            break
        if stripped.startswith("|"):
            table.append([cell.strip() for cell in stripped.strip("|").split("|")])
        elif table:
            break
    if len(table) < 2:
        return [], []
    return table[0], table[2:]


def problems(text: str, keys: Sequence[str]) -> list[str]:
    """Everything wrong with the goal table in ``text`` against the goals ``keys``; empty when it is right."""
    header, rows = table_rows(text)
    if not header:
        return [f"no table under the {HEADING!r} heading"]
    try:
        verdict_col = [h.lower() for h in header].index("verdict")
    except ValueError:
        return ["the goal table has no 'verdict' column"]
    found: list[str] = []
    out: list[str] = []
    for n, row in enumerate(rows, start=1):
        match = _KEY.match(row[0]) if row else None
        if match is None:
            out.append(f"row {n}: the first cell is not a goal id in backticks: {row[:1]}")
            continue
        key = match.group(1)
        if len(row) != len(header):
            out.append(
                f"row {n} ({key}): {len(row)} cells, the header has {len(header)} (a '|' inside a cell?)"
            )
            continue
        if key in found:
            out.append(f"row {n}: goal {key!r} has a second row")
        found.append(key)
        if key not in keys:
            out.append(f"row {n}: {key!r} is not a goal in bench/goals.py")
        verdict = row[verdict_col].strip("* ").lower()
        if not verdict.startswith(VERDICTS):
            out.append(f"row {n} ({key}): verdict {verdict!r} starts with none of {', '.join(VERDICTS)}")
    out.extend(f"goal {key!r} has no row in the goal table" for key in keys if key not in found)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args(argv)
    if not args.doc.is_file():
        print(f"{args.doc}: no such file", file=sys.stderr)
        return 2
    found = problems(args.doc.read_text(encoding="utf-8"), [g.key for g in GOALS])
    for line in found:
        print(f"{args.doc}: {line}")
    if found:
        return 1
    print(f"{args.doc}: {len(GOALS)} goals, each with one row in the goal table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
