"""Check that the goal table at the top of docs/benchmarks.md has one row per goal of bench/goals.py.

The table is the first Markdown table under the ``## Goals`` heading. Each row names its goal in the first
column as a code span (`` `capacity.cost_vs_oracle` ``), states it in the column headed ``goal`` exactly as
the goal's ``statement`` in bench/goals.py, and gives a verdict in the column headed ``verdict`` that starts
with one of ``met``, ``missed``, ``partly`` or ``not measured``. The check fails, one line per problem, when a
goal has no row, a row names no goal or one twice, a row has more or fewer cells than the header, its goal cell
is not the statement, or its verdict is not one of those words.

    .venv/bin/python bench/goal_table.py                     # checks docs/benchmarks.md, exit 0 or 1
    .venv/bin/python bench/goal_table.py --write             # first copies each statement into its row
    .venv/bin/python bench/goal_table.py --doc OTHER.md

A unit test (tests/unit/bench/test_goal_table.py) runs it.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from goals import GOALS, Goal

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


def _columns(header: list[str]) -> tuple[int, int] | str:
    """The indexes of the ``goal`` and ``verdict`` columns, or what is missing."""
    names = [h.lower() for h in header]
    missing = [name for name in ("goal", "verdict") if name not in names]
    if missing:
        return f"the goal table has no {' or '.join(repr(m) for m in missing)} column"
    return names.index("goal"), names.index("verdict")


def problems(text: str, goals: Sequence[Goal]) -> list[str]:
    """Everything wrong with the goal table in ``text`` against ``goals``; empty when it is right."""
    header, rows = table_rows(text)
    if not header:
        return [f"no table under the {HEADING!r} heading"]
    columns = _columns(header)
    if isinstance(columns, str):
        return [columns]
    goal_col, verdict_col = columns
    statements = {g.key: g.statement for g in goals}
    keys = list(statements)
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
        elif row[goal_col] != statements[key]:
            out.append(
                f"row {n} ({key}): the goal cell is not the statement in bench/goals.py (--write copies it)"
            )
        verdict = row[verdict_col].strip("* ").lower()
        if not verdict.startswith(VERDICTS):
            out.append(f"row {n} ({key}): verdict {verdict!r} starts with none of {', '.join(VERDICTS)}")
    out.extend(f"goal {key!r} has no row in the goal table" for key in keys if key not in found)
    return out


def write_statements(text: str, goals: Sequence[Goal]) -> str:
    """``text`` with the goal cell of each goal's row replaced by its statement (other cells and rows as they are)."""
    header, _ = table_rows(text)
    columns = _columns(header) if header else "no table"
    if isinstance(columns, str):
        return text
    goal_col = columns[0]
    for g in goals:
        pattern = re.compile(r"^\| `" + re.escape(g.key) + r"` \|.*$", re.M)
        match = pattern.search(text)
        if match is None:
            continue
        cells = [cell.strip() for cell in match.group(0).strip().strip("|").split("|")]
        if len(cells) != len(header):
            continue
        cells[goal_col] = g.statement
        text = text[: match.start()] + "| " + " | ".join(cells) + " |" + text[match.end() :]
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--write", action="store_true", help="copy each goal's statement into its row first")
    args = parser.parse_args(argv)
    if not args.doc.is_file():
        print(f"{args.doc}: no such file", file=sys.stderr)
        return 2
    text = args.doc.read_text(encoding="utf-8")
    if args.write:
        updated = write_statements(text, GOALS)
        if updated != text:
            args.doc.write_text(updated, encoding="utf-8")
            text = updated
    found = problems(text, GOALS)
    for line in found:
        print(f"{args.doc}: {line}")
    if found:
        return 1
    print(f"{args.doc}: {len(GOALS)} goals, each with one row in the goal table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
