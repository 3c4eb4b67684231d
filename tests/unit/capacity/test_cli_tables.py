"""The capacity CLI's tables: the headline a newcomer reads (ratios to the cluster-autoscaler and the oracle),
and the JSON that keeps every figure."""

from __future__ import annotations

import json

from rich.console import Console

from capstan.capacity import IDLE_CAUSES, STAGES, Summary
from capstan.cli.capacity import headline_table, summaries_json, summary_table


def summary(policy: str, idle: float, p99: float, cost: float) -> Summary:
    return Summary(
        policy=policy,
        gpu_hours=1000.0,
        allocated_gpu_hours=1000.0 - idle,
        idle={c: (idle if i == 0 else 0.0) for i, c in enumerate(IDLE_CAUSES)},
        cost=cost,
        pending={st: (0.0, 0.0, p99) for st in (*STAGES, "total")},
        launches=3,
        drains=1,
        moves=0,
        slow_starts=0,
        move_wait=(0.0, 0.0),
        pods=10,
        bound=10,
        unplaced=0,
        unplaced_reasons={},
        seconds=1.5,
        problems=(),
    )


def rendered(table: object) -> str:
    console = Console(width=400, record=True)
    console.print(table)
    return console.export_text()


RUN = [
    summary("capstan", 50, 120, 800),
    summary("cluster-autoscaler", 200, 240, 1000),
    summary("oracle", 40, 0, 700),
]


def test_the_headline_gives_each_figure_with_its_ratio_to_the_autoscaler_and_the_oracle() -> None:
    text = rendered(headline_table(RUN, "t"))
    row = next(line for line in text.splitlines() if "│ capstan" in line)
    cells = [c.strip() for c in row.split("│")[1:-1]]
    # idle 50 (÷ CA 0.25, ÷ oracle 1.25), p99 120 (0.50, oracle 0 s: no ratio), cost 800 (0.80, 1.14), unplaced
    assert cells == ["capstan", "50", "0.25×", "1.25×", "120", "0.50×", "—", "800", "0.80×", "1.14×", "0"]
    assert "idle " + IDLE_CAUSES[0] not in text  # the breakdown is --wide's
    assert "idle " + IDLE_CAUSES[0] in rendered(summary_table(RUN, "t"))


def test_without_the_peers_the_headline_has_no_ratio_columns() -> None:
    text = rendered(headline_table(RUN[:1], "t"))
    assert "÷" not in text.split("--wide")[0]


def test_the_json_keeps_every_figure() -> None:
    data = json.loads(json.dumps(summaries_json(RUN, "t")))
    assert [p["policy"] for p in data["policies"]] == ["capstan", "cluster-autoscaler", "oracle"]
    first = data["policies"][0]
    assert (
        first["idle_total"] == 50 and first["pending"]["total"] == [0.0, 0.0, 120] and first["launches"] == 3
    )
