"""The MCP bench's pure parts: reading a served `problems` answer back and scoring it (bench/_mcp_suite.py), the
peer's evidence rule, the summary, and the sample-call table refusing to skip a tool (bench/_mcp_calls.py)."""

from __future__ import annotations

from typing import Any

import pytest
from bench._mcp_calls import SAMPLES, MissingSample, Targets, calls_for
from bench._mcp_suite import (
    CallFigures,
    McpRow,
    finding_from_json,
    normalise,
    peer_evidence,
    peer_found,
    percentile,
    score_answer,
    summarize,
)

from capstan.diagnose import Category, Evidence, Finding, ObjectRef, Severity, Source
from capstan.faults import Scenario, parse_scenario
from capstan.jsontext import dumps
from capstan.mcp import tool_names
from capstan.restarts import RecordedChange

pytestmark = pytest.mark.unit

SCENARIO = """
name: netpol-deny
description: a deny-all policy
category: networking
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {selector: {app: web}, ports: [{port: 80}]}}
expect:
  object: {kind: Service, name: web}
  category: networking
  keywords: [default-deny, denies every connection]
  evidence: [NetworkPolicy/default-deny, ingress rules 0]
"""


def scenario() -> Scenario:
    return parse_scenario(SCENARIO, "test.yaml")


def finding(subject: str = "web", *, changes: bool = True, sentence: str = "") -> Finding:
    return Finding(
        id=f"id-{subject}",
        analyzer="network-policies",
        cause="deny-all/default-deny",
        severity=Severity.WARNING,
        category=Category.NETWORKING,
        root_cause=sentence
        or "NetworkPolicy default-deny selects the pods of Service web: it denies every connection.",
        objects=(ObjectRef("Service", "ns", subject), ObjectRef("NetworkPolicy", "ns", "default-deny")),
        evidence=(Evidence("policy", Source.OBJECT_FIELD, "spec", "podSelector {}; ingress rules 0"),),
        changes=(RecordedChange(1.0, "NetworkPolicy", "ns", "default-deny", "added", "added"),)
        if changes
        else (),
    )


def answer(*findings: Finding) -> tuple[dict[str, Any], str]:
    data = {"findings": [f.to_json() for f in findings], "total": len(findings), "tokens": 300}
    return data, dumps(data)


def test_a_served_finding_reads_back_as_itself() -> None:
    f = finding()
    assert finding_from_json(f.to_json()) == f
    cut = finding_from_json({"root_cause": "x", "severity": "nonsense"})  # what a budget cut may leave
    assert cut.severity is Severity.WARNING and cut.objects[0].kind == ""


def test_hit_needs_the_expected_object_the_keywords_and_every_evidence_item() -> None:
    data, text = answer(finding())
    s = score_answer(scenario(), data, text, {})
    assert (s.hit, s.root_cause, s.evidence_recall, s.rank1) == (True, True, 1.0, True)
    # without the recorded change, "NetworkPolicy/default-deny" is not in the answer (as for faults.score)
    data, text = answer(finding(changes=False))
    s = score_answer(scenario(), data, text, {})
    assert (s.hit, s.root_cause, s.evidence_recall, s.missing) == (
        False,
        True,
        0.5,
        ("NetworkPolicy/default-deny",),
    )


def test_the_expected_finding_second_is_a_hit_but_not_rank_one() -> None:
    other = finding("api", sentence="Service api has no endpoints.")
    data, text = answer(other, finding())
    s = score_answer(scenario(), data, text, {})
    assert s.hit and not s.rank1
    data, text = answer(other)
    assert not score_answer(scenario(), data, text, {}).root_cause


def test_peer_evidence_counts_an_object_by_its_kind_and_name() -> None:
    yaml_text = "kind: NetworkPolicy\nmetadata:\n  name: default-deny\n... ingress rules 0 default-deny"
    assert not peer_found(
        scenario(), yaml_text
    )  # "denies every connection" is Capstan's sentence, not the API's
    assert peer_found(scenario(), yaml_text + " denies every connection")
    assert not peer_found(
        scenario(), "kind: Service name: web ingress rules 0 default-deny denies every connection"
    )


def test_summary_percentiles_and_budget() -> None:
    rows = [
        McpRow("a", "networking", problems=CallFigures(hit=True, evidence_recall=1.0, tokens=100, ms=10)),
        McpRow("b", "networking", problems=CallFigures(hit=False, evidence_recall=0.5, tokens=300, ms=30,
                                                       over_budget=True)),
        McpRow("c", "gpu", problems=CallFigures(hit=True, evidence_recall=1.0, tokens=200, ms=20),
               peer_found=True, peer_calls=4, peer_tokens=2000),
        McpRow("d", "gpu", error="setup failed"),
    ]  # fmt: skip
    s = summarize(rows)
    assert (s.hits, s.scenarios, s.hit_rate) == (2, 4, 0.5)
    assert (s.median_tokens, s.p95_tokens, s.max_tokens) == (200, 300, 300)  # the error row is left out
    assert s.over_budget == 1 and s.misses == ("b", "d") and s.errors == ("d: setup failed",)
    assert (s.peer_scenarios, s.peer_found, s.peer_median_calls) == (1, 1, 4)
    assert percentile([], 99) == 0 and percentile([5, 1, 3], 50) == 3


def test_every_registered_tool_has_a_sample_and_an_unknown_one_fails_loudly() -> None:
    targets = Targets("team-00", "web-1-abcde", "web", "web", "cpu-000")
    assert [name for name, _ in calls_for(tool_names(), targets)] == tool_names()
    assert all(isinstance(SAMPLES[n](targets), dict) for n in SAMPLES)
    with pytest.raises(MissingSample, match="brand_new_tool"):
        calls_for([*tool_names(), "brand_new_tool"], targets)


def test_peer_evidence_reads_yaml_and_json_fields_as_capstan_writes_them() -> None:
    assert normalise("exitCode: 139") == normalise('"exitCode":139') == normalise("exitCode=139")
    yaml_text = "kind: NetworkPolicy\nmetadata:\n  name: default-deny\nspec: {}\n# ingress rules 0"
    assert peer_evidence(scenario(), yaml_text)  # the evidence is there; Capstan's sentence is not
    assert not peer_found(scenario(), yaml_text)
