"""The diagnosis bench's pure parts: the fault-scenario summary and table (bench/_diagnose_suite.py) on fabricated
rows, and the synthetic cluster (bench/_diagnose_cluster.py) being deterministic and broken where it says."""

from __future__ import annotations

import pytest
from bench._diagnose_cluster import synthesize
from bench._diagnose_suite import ScenarioRow, suite_table, summarize, summary_table
from rich.console import Console

from capstan.diagnose import ObjectRef, diagnose

pytestmark = pytest.mark.unit

ROWS = [
    ScenarioRow("crashloop-configmap-key", "configuration", ("decoy",), True, 1.0, 0, 0.012, 900, False, 300),
    ScenarioRow("gpu-shortage-h100", "gpu", (), True, 0.5, 0, 0.020, 1_400, True, 250),
    ScenarioRow("selector-relabel", "networking", ("decoy",), False, 1.0, 2, 0.008, 2_000, True, 200),
    ScenarioRow("pvc-no-class", "storage", (), True, 1.0, 1, 0.010, 600),  # k8sgpt not run
    ScenarioRow("quota-failedcreate", "scaling", (), False, 0.0, 0, 0.0, 0, False, 100, error="apply failed"),
]


def test_summary_counts_each_measure_as_documented() -> None:
    s = summarize(ROWS)
    assert s.scenarios == 5
    assert s.top1 == pytest.approx(3 / 5) and s.capstan_right == 3
    assert s.evidence_recall == pytest.approx((1.0 + 0.5 + 1.0 + 1.0 + 0.0) / 5)
    # false roots count on decoy scenarios only: the 1 of pvc-no-class is not a decoy's
    assert (s.false_roots_on_decoys, s.decoy_scenarios) == (2, 2)
    assert s.median_tokens == 900 and s.median_seconds == 0.010 and s.max_seconds == 0.020
    # k8sgpt over the four rows where it ran: right on two; Capstan right on two of those four
    assert (s.k8sgpt_right, s.k8sgpt_scenarios, s.capstan_right_where_k8sgpt_ran) == (2, 4, 2)
    assert s.k8sgpt_median_tokens == 225
    assert s.only_capstan == ("crashloop-configmap-key",) and s.only_k8sgpt == ("selector-relabel",)
    assert s.errors == ("quota-failedcreate: apply failed",)
    assert s.by_category["gpu"] == (1, 1) and s.by_category["scaling"] == (0, 1)
    assert s.to_json()["by_category"]["storage"] == {"right": 1, "scenarios": 1}


def test_summary_of_nothing_and_without_k8sgpt() -> None:
    empty = summarize([])
    assert (empty.scenarios, empty.top1, empty.median_tokens, empty.k8sgpt_right) == (0, 0.0, 0.0, None)
    alone = summarize([ROWS[3]])
    assert alone.k8sgpt_right is None and alone.k8sgpt_median_tokens is None and alone.only_capstan == ()


def test_tables_render_every_row_and_the_verdicts() -> None:
    console = Console(width=200, record=True)
    console.print(suite_table(ROWS))
    s = summarize(ROWS)
    console.print(summary_table(s, top1_goal=0.95, recall_goal=0.95, tokens_goal=1500, seconds_goal=1.0))
    text = console.export_text()
    for row in ROWS:
        assert row.scenario in text
    assert "error: apply failed" in text
    assert "60.0% (3/5)" in text and "2 in 2" in text and "2 vs 2 of 4" in text
    assert "missed" in text and "met" in text  # top-1 missed, median tokens met


def test_synthetic_cluster_is_deterministic_and_diagnosed_where_broken() -> None:
    a, b = synthesize(300, seed=4), synthesize(300, seed=4)
    assert a.snapshot == b.snapshot and a.faults == b.faults
    assert a.pods == 300 and a.snapshot.of("Pod") and a.changes == 150
    assert synthesize(300, seed=5).snapshot != a.snapshot
    planted = [key for keys in a.faults.values() for key in keys]
    assert planted
    diagnosis = diagnose(a.snapshot)
    assert not diagnosis.failures
    for key in planted:
        kind, namespace, name = key.split("/", 2)
        assert diagnosis.about(ObjectRef(kind, namespace, name)), key
