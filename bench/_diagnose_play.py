"""Plays the fault scenarios for bench/diagnose.py's suite (``--suite``): a sandbox of its own (or ``--kubeconfig``),
``capstan.faults.Runner`` over every scenario, and, while each scenario's state is live (the runner's ``on_state``
hook), k8sgpt on the same namespace. One :class:`~_diagnose_suite.ScenarioRow` per scenario:

- Capstan's top-1, evidence recall and false roots are ``capstan.faults.score``'s (the scenario's ``expect``);
- its seconds are one ``diagnose()`` over the scenario's snapshot (a fresh copy, indexes built again), its tokens
  the scoped diagnosis' JSON (every finding about the scenario's objects) by ``capstan.tokens.count_tokens``;
- k8sgpt's top-1 is ``_k8sgpt.k8sgpt_top1`` with the same expected object and keywords (a generated name such as
  ``worker-*`` is matched by prefix among its results; a scenario node by its name on the cluster), its tokens its
  JSON output's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from _diagnose_suite import ScenarioRow
from _k8sgpt import ALL_FILTERS, K8sgptError, K8sgptRun, k8sgpt_top1, run_k8sgpt_full
from capstan.diagnose import Diagnosis, diagnose
from capstan.faults import Outcome, Runner, Scenario
from capstan.jsontext import dumps
from capstan.tokens import count_tokens


def _k8sgpt_answer(run: K8sgptRun, outcome: Outcome) -> bool:
    expect = outcome.scenario.expect
    kind, name = expect.object.kind, expect.object.name
    if kind == "Node":
        name = outcome.nodes.get(name, name)
    if name.endswith("*"):
        names = sorted(
            {
                r.name
                for r in run.results
                if r.kind.rsplit("/", 1)[-1] == kind and r.name.startswith(name[:-1])
            }
        )
        parents = sorted(
            {r.parent.partition("/")[2] for r in run.results if r.parent.startswith(f"{kind}/{name[:-1]}")}
        )
        candidates = names or parents
        return any(k8sgpt_top1(run.results, kind, n, expect.keywords) for n in candidates)
    return k8sgpt_top1(run.results, kind, name, expect.keywords)


async def play(
    scenarios: Sequence[Scenario],
    kubeconfig: Path,
    log_dir: Path,
    k8sgpt: list[str] | None,
    progress: Callable[[ScenarioRow], None] | None = None,
) -> list[ScenarioRow]:
    peer: dict[str, K8sgptRun | str] = {}
    scratch = Path(tempfile.mkdtemp(prefix="capstan-k8sgpt-"))

    async def on_state(scenario: Scenario, namespace: str, config: Path) -> None:
        if k8sgpt is None:
            return
        try:
            peer[scenario.name] = await run_k8sgpt_full(
                k8sgpt, config, namespace, scratch, filters=ALL_FILTERS
            )
        except K8sgptError as exc:
            peer[scenario.name] = str(exc)

    runner = Runner(kubeconfig, log_dir, on_state=on_state)
    rows: list[ScenarioRow] = []
    for scenario in scenarios:
        outcome = await runner.run(scenario)
        row = _row(outcome, peer.get(scenario.name))
        rows.append(row)
        if progress is not None:
            progress(row)
    return rows


def _row(outcome: Outcome, peer: K8sgptRun | str | None) -> ScenarioRow:
    s = outcome.scenario
    base = {"scenario": s.name, "category": s.category, "tags": tuple(s.tags)}
    if outcome.score is None or outcome.snapshot is None or outcome.diagnosis is None:
        return ScenarioRow(**base, error=outcome.setup_error or "no diagnosis")  # type: ignore[arg-type]
    t0 = time.perf_counter()
    diagnose(dataclasses.replace(outcome.snapshot))  # a new Snapshot: its indexes are built again
    seconds = time.perf_counter() - t0
    diagnosis: Diagnosis = outcome.diagnosis
    tokens = count_tokens(dumps(diagnosis.to_json()))
    k_top1: bool | None = None
    k_tokens: int | None = None
    error = ""
    if isinstance(peer, K8sgptRun):
        k_top1, k_tokens = _k8sgpt_answer(peer, outcome), count_tokens(peer.raw)
    elif isinstance(peer, str):
        error = f"k8sgpt: {peer}"
    return ScenarioRow(
        **base,  # type: ignore[arg-type]
        capstan_top1=outcome.score.top1,
        evidence_recall=outcome.score.evidence_recall,
        false_roots=len(outcome.score.false_roots),
        seconds=seconds,
        tokens=tokens,
        k8sgpt_top1=k_top1,
        k8sgpt_tokens=k_tokens,
        error=error,
    )


def play_sync(*args: object, **kwargs: object) -> list[ScenarioRow]:
    return asyncio.run(play(*args, **kwargs))  # type: ignore[arg-type]
