"""``capstan faults list|run|eval``: the fault-scenario suite (docs/faults.md). ``run`` plays scenarios on the
sandbox (or the cluster of ``--kubeconfig``), each in its own namespace, and scores the diagnosis: exit 0 when every
scenario passed, 1 when any scored wrong or failed to set up, 2 for bad input. ``eval`` lets a model (an
OpenAI-compatible endpoint) diagnose each scenario with Capstan's MCP tools and/or a read-only kubectl tool and
prints accuracy and time per arm: exit 0 when every scenario was evaluated (a wrong answer is a measurement), 1 when
any could not be (setup failed, the model could not be asked), 2 for bad input."""

from __future__ import annotations

import asyncio
import json
import os
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from capstan.errors import UserError

if TYPE_CHECKING:
    from capstan.faults import Arm, EvalResult, Outcome, Scenario

app = typer.Typer(
    help="Fault scenarios: play them on the sandbox and score the diagnosis.", no_args_is_help=True
)


class Output(StrEnum):
    text = "text"
    json = "json"


_DIR_HELP = "A directory of scenario files (default: the scenarios shipped with Capstan)."


@app.command("list")
def list_(dir_: Path | None = typer.Option(None, "--dir", help=_DIR_HELP)) -> None:
    """The scenarios: name, category, tags, expected root object and description."""
    from capstan.faults import load_scenarios

    scenarios = load_scenarios(dir_)
    table = Table(title=f"{len(scenarios)} fault scenarios")
    table.add_column("name", no_wrap=True)
    for col in ("category", "tags", "expected root", "description"):
        table.add_column(col, overflow="fold")
    for s in scenarios:
        table.add_row(
            s.name,
            s.category,
            ",".join(s.tags),
            f"{s.expect.object.kind}/{s.expect.object.name}",
            escape(s.description),
        )
    Console().print(table)


def _sandbox_paths(kubeconfig: Path | None, log_dir: Path | None) -> tuple[Path, Path]:
    """The cluster and the directory its kwok serves pod logs from: the sandbox's unless both are given."""
    if kubeconfig is not None and log_dir is not None:
        return kubeconfig, log_dir
    from capstan.sandbox import Sandbox, default_state_dir

    box = Sandbox(default_state_dir("default"))
    state = box.load_state()
    if state is None or not box.is_up():
        if kubeconfig is not None:
            raise UserError(
                "--kubeconfig without --log-dir: give the directory the cluster's kwok serves pod logs from"
            )
        raise UserError("no sandbox is running: start one with `capstan sandbox up` (or give --kubeconfig)")
    return kubeconfig or Path(state.kubeconfig), log_dir or box.directory / "pod-logs"


def _chosen(dir_: Path | None, name: list[str] | None, all_: bool) -> list[Scenario]:
    from capstan.faults import load_scenarios

    scenarios = load_scenarios(dir_)
    if all_ and name:
        raise UserError("give scenario names or --all, not both")
    if not all_ and not name:
        raise UserError("give a scenario name (see `capstan faults list`) or --all")
    if name:
        known = {s.name: s for s in scenarios}
        unknown = [n for n in name if n not in known]
        if unknown:
            raise UserError(f"unknown scenario {unknown[0]!r} (see `capstan faults list`)")
        scenarios = [known[n] for n in name]
    return scenarios


@app.command("run")
def run(
    name: list[str] = typer.Argument(None, metavar="[NAME]...", help="The scenarios to play."),
    all_: bool = typer.Option(False, "--all", help="Play every scenario."),
    dir_: Path | None = typer.Option(None, "--dir", help=_DIR_HELP),
    kubeconfig: Path | None = typer.Option(
        None,
        "--kubeconfig",
        help="Cluster to play on (default: the local sandbox from `capstan sandbox up`).",
    ),
    log_dir: Path | None = typer.Option(
        None, "--log-dir", help="Where the cluster's kwok serves pod logs from (default: the sandbox's)."
    ),
    output: Output = typer.Option(Output.text, "--output", "-o", help="text (Rich) or json."),
) -> None:
    """Play scenarios and score the diagnosis of each."""
    scenarios = _chosen(dir_, name, all_)
    path, logs = _sandbox_paths(kubeconfig, log_dir)
    console = Console(stderr=output is Output.json)
    outcomes = asyncio.run(_play(path, logs, scenarios, console, output))
    if output is Output.json:
        typer.echo(json.dumps({"scenarios": [o.to_json() for o in outcomes], **_summary(outcomes)}, indent=2))
    else:
        _print_summary(console, outcomes)
    if not all(o.passed for o in outcomes):
        raise typer.Exit(1)


async def _play(
    kubeconfig: Path, log_dir: Path, scenarios: list[Scenario], console: Console, output: Output
) -> list[Outcome]:
    from capstan.faults import Runner

    def progress(o: Outcome) -> None:
        if output is Output.text:
            _print_outcome(console, o)
        else:
            console.print(f"{o.scenario.name}: {'passed' if o.passed else 'FAILED'}")

    return await Runner(kubeconfig, log_dir).run_all(scenarios, progress=progress)


def _print_outcome(console: Console, o: Outcome) -> None:
    table = Table(
        title=f"{o.scenario.name} ({o.seconds:.1f}s, namespace {o.namespace})", title_justify="left"
    )
    for col in ("category", "top-1", "evidence recall", "false roots", "first finding's root cause"):
        table.add_column(col, overflow="fold")
    if o.setup_error is not None or o.score is None:
        table.add_row(o.scenario.category, "[red]setup failed[/]", "", "", escape(o.setup_error or ""))
    else:
        first = o.diagnosis.findings[0].root_cause if o.diagnosis and o.diagnosis.findings else "(no finding)"
        sc = o.score
        table.add_row(
            o.scenario.category,
            "[green]yes[/]" if sc.top1 else "[red]no[/]",
            f"{sc.evidence_recall:.0%}",
            escape(", ".join(sc.false_roots)) or "0",
            escape(first),
        )
    console.print(table)
    if o.score is not None and not o.score.passed:
        why = [*o.score.reasons]
        if o.score.missing_evidence:
            why.append("evidence missing: " + ", ".join(o.score.missing_evidence))
        if o.score.false_roots:
            why.append("false roots: " + ", ".join(o.score.false_roots))
        console.print(f"  [red]wrong:[/] {escape('; '.join(why))}")
    if o.cleanup_error:
        console.print(f"  [yellow]cleanup:[/] {escape(o.cleanup_error)}")


def _summary(outcomes: list[Outcome]) -> dict[str, object]:
    scored = [o for o in outcomes if o.score is not None]
    return {
        "total": len(outcomes),
        "passed": sum(1 for o in outcomes if o.passed),
        "top1": sum(1 for o in scored if o.score and o.score.top1),
        "setup_failures": sum(1 for o in outcomes if o.setup_error is not None),
        "evidence_recall": (
            round(sum(o.score.evidence_recall for o in scored if o.score) / len(scored), 3)
            if scored
            else None
        ),
        "false_roots": sum(len(o.score.false_roots) for o in scored if o.score),
    }


def _print_summary(console: Console, outcomes: list[Outcome]) -> None:
    s = _summary(outcomes)
    recall = s["evidence_recall"]
    recall_text = f"{recall:.0%}" if isinstance(recall, float) else "n/a"
    console.print(
        f"[bold]{s['passed']}/{s['total']} passed[/]: top-1 {s['top1']}/{s['total']}, evidence recall "
        f"{recall_text}, {s['false_roots']} false root(s), {s['setup_failures']} setup failure(s)"
    )


# ---- eval -----------------------------------------------------------------------------------------------------------
class ToolsArm(StrEnum):
    mcp = "mcp"
    shell = "shell"


@app.command("eval")
def eval_(
    name: list[str] = typer.Argument(None, metavar="[NAME]...", help="The scenarios to play."),
    model_url: str = typer.Option(
        ..., "--model-url", help="An OpenAI-compatible server (its root, /v1 or /v1/chat/completions)."
    ),
    model: str = typer.Option(..., "--model", help="The model's name, as the server knows it."),
    tools: list[ToolsArm] = typer.Option(
        None,
        "--tools",
        help="The arm(s): mcp (Capstan's MCP tools) or shell (read-only kubectl); default both.",
    ),
    api_key_env: str | None = typer.Option(
        None, "--api-key-env", help="The environment variable holding the API key (sent as a bearer token)."
    ),
    time_limit: float = typer.Option(
        120.0, "--time-limit", min=1.0, max=3600.0, help="Seconds of wall clock per scenario and arm."
    ),
    max_turns: int = typer.Option(
        20, "--max-turns", min=1, max=200, help="Model calls per scenario and arm."
    ),
    all_: bool = typer.Option(False, "--all", help="Play every scenario."),
    dir_: Path | None = typer.Option(None, "--dir", help=_DIR_HELP),
    kubeconfig: Path | None = typer.Option(
        None,
        "--kubeconfig",
        help="Cluster to play on (default: the local sandbox from `capstan sandbox up`).",
    ),
    log_dir: Path | None = typer.Option(
        None, "--log-dir", help="Where the cluster's kwok serves pod logs from (default: the sandbox's)."
    ),
    output: Output = typer.Option(Output.text, "--output", "-o", help="text (Rich) or json."),
) -> None:
    """Let a model diagnose each scenario with Capstan's MCP tools and/or a read-only kubectl; score its answers."""
    from capstan.faults import ARMS

    scenarios = _chosen(dir_, name, all_)
    if not model_url.startswith(("http://", "https://")) or len(model_url) > 2000:
        raise UserError(f"--model-url must be an http:// or https:// URL, not {model_url[:100]!r}")
    if not model.strip():
        raise UserError("--model must name a model")
    api_key = None
    if api_key_env is not None:
        api_key = os.environ.get(api_key_env)
        if not api_key:
            raise UserError(f"the environment variable {api_key_env} (--api-key-env) is not set")
    arms: tuple[Arm, ...] = tuple(a for a in ARMS if a in {str(t) for t in tools}) if tools else ARMS
    path, logs = _sandbox_paths(kubeconfig, log_dir)
    kubectl = None
    if "shell" in arms:
        from capstan.sandbox import require_toolchain

        kubectl = require_toolchain().binary("kubectl")
    console = Console(stderr=output is Output.json)
    results = asyncio.run(
        _evaluate(
            path,
            logs,
            scenarios,
            console,
            output,
            model_url,
            model,
            api_key,
            arms,
            kubectl,
            time_limit,
            max_turns,
        )
    )
    from capstan.faults import summarize

    arms_summary = summarize(results)
    if output is Output.json:
        doc = {
            "model": model,
            "time_limit_s": time_limit,
            "max_turns": max_turns,
            "results": [r.to_json() for r in results],
            "arms": arms_summary,
        }
        typer.echo(json.dumps(doc, indent=2))
    else:
        _print_eval(console, results, arms_summary)
    if any(r.error is not None for r in results):
        raise typer.Exit(1)


async def _evaluate(
    kubeconfig: Path,
    log_dir: Path,
    scenarios: list[Scenario],
    console: Console,
    output: Output,
    model_url: str,
    model: str,
    api_key: str | None,
    arms: tuple[Arm, ...],
    kubectl: Path | None,
    time_limit: float,
    max_turns: int,
) -> list[EvalResult]:
    from capstan.faults import Evaluation, OpenAIChat

    def progress(r: EvalResult) -> None:
        verdict = "[green]right[/]" if r.passed else "[red]WRONG[/]" if r.error is None else "[red]failed[/]"
        line = f"{escape(f'{r.scenario} [{r.arm}]')}: {verdict} ({r.seconds:.1f}s, {r.turns} turn(s))"
        if r.reason:
            line += f": {escape(r.reason)}"
        console.print(line)

    async with OpenAIChat(model_url, model, api_key=api_key) as chat:
        evaluation = Evaluation(
            kubeconfig,
            log_dir,
            chat,
            arms=arms,
            kubectl=kubectl,
            time_limit_s=time_limit,
            max_turns=max_turns,
        )
        return await evaluation.run_all(scenarios, progress=progress)


def _print_eval(console: Console, results: list[EvalResult], arms: dict[str, dict[str, Any]]) -> None:
    table = Table(title="Agent evaluation", title_justify="left")
    for col in ("scenario", "arm", "result", "seconds", "turns", "tool calls", "answer or reason"):
        table.add_column(col, overflow="fold")
    for r in results:
        verdict = "[green]right[/]" if r.passed else "[red]wrong[/]" if r.error is None else "[red]failed[/]"
        detail = " — ".join(part for part in (r.reason, r.answer or "") if part)
        table.add_row(
            r.scenario,
            r.arm,
            verdict,
            f"{r.seconds:.1f}",
            str(r.turns),
            str(len(r.tool_calls)),
            escape(detail[:300]),
        )
    console.print(table)
    summary = Table(title="Per arm", title_justify="left")
    for col in ("arm", "accuracy", "right", "failed to run", "total s", "median s"):
        summary.add_column(col)
    for arm, s in arms.items():
        summary.add_row(
            arm,
            f"{float(s['accuracy']):.0%}",
            f"{s['passed']}/{s['scenarios']}",
            str(s["errors"]),
            f"{float(s['seconds_total']):.1f}",
            f"{float(s['seconds_median']):.1f}",
        )
    console.print(summary)
