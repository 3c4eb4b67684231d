"""Every usage error of every ``capstan`` command is Click's short usage message and exit 2, never a traceback.

The cases are drawn from the command tree itself (every group, every command, every required parameter, every
numeric and choice option), and each runs through the installed ``capstan`` console script, as a user runs it.
"""

from __future__ import annotations

import enum
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer

from capstan.cli.main import SUBCOMMANDS, build_app

pytestmark = pytest.mark.unit

CAPSTAN = Path(sys.executable).with_name("capstan")


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    expect: str
    """A fragment of Click's message for this case."""


def _kind(param: Any) -> str:
    """``int``, ``float``, ``choice`` or ``other`` for a parameter, from Typer's own annotation (Typer 0.2x) or
    Click's parameter type (older Typer)."""
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is not None:
        annotation = descriptor.annotation
        if annotation is int or annotation is float:
            return annotation.__name__
        if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
            return "choice"
        return "other"
    name = getattr(param.type, "name", "")
    return {"integer": "int", "integer range": "int", "float": "float", "float range": "float"}.get(
        name, "choice" if getattr(param.type, "choices", None) else "other"
    )


def _dummy(param: Any) -> str:
    """A well-formed value for a required parameter, so that the case under test is the only problem."""
    kind = _kind(param)
    if kind == "int":
        return "1"
    if kind == "float":
        return "1.0"
    if kind == "choice":
        descriptor = getattr(param, "type_descriptor", None)
        if descriptor is not None:
            return str(next(iter(descriptor.annotation)).value)
        return str(next(iter(param.type.choices)))
    return "/nonexistent/capstan-test"


def _required_args(command: Any, skip: Any = None) -> list[str]:
    out: list[str] = []
    for param in command.params:
        if param is skip or not param.required:
            continue
        if param.param_type_name == "argument":
            out.append(_dummy(param))
        else:
            out += [param.opts[0], _dummy(param)]
    return out


def _walk(command: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in sorted((getattr(command, "commands", None) or {}).items()):
        yield from _walk(sub, (*path, name))


def _cases() -> list[Case]:
    cases = [Case(("no-such-command",), "No such command"), Case(("--no-such-option",), "No such option")]
    for name in SUBCOMMANDS:
        root = typer.main.get_command(build_app(name))
        sub = root.commands[name]  # type: ignore[attr-defined]
        for path, command in _walk(sub, (name,)):
            if getattr(command, "commands", None):
                cases.append(Case((*path, "no-such-command"), "No such command"))
            cases.append(Case((*path, "--no-such-option"), "No such option"))
            required = [p for p in command.params if p.required]
            if required:
                cases.append(Case(path, "Missing"))
            for param in command.params:
                if param.param_type_name != "option" or param.is_flag:
                    continue
                if _kind(param) in ("int", "float", "choice"):
                    bad = (*path, *_required_args(command, skip=param), param.opts[0], "not-a-value")
                    cases.append(Case(bad, "Invalid value"))
    return cases


CASES = _cases()


def _clean_env() -> dict[str, str]:
    """The environment without the variables that stand in for options (KUBECONFIG, CAPSTAN_*), so that a missing
    option is missing."""
    return {k: v for k, v in os.environ.items() if k != "KUBECONFIG" and not k.startswith("CAPSTAN_")}


def _run(case: Case) -> tuple[Case, subprocess.CompletedProcess[str]]:
    proc = subprocess.run(
        [str(CAPSTAN), *case.argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
        env=_clean_env(),
    )
    return case, proc


def test_the_command_tree_has_usage_cases_for_every_sub_command() -> None:
    assert CAPSTAN.exists(), f"{CAPSTAN}: the console script is not installed (run scripts/bootstrap.sh)"
    covered = {c.argv[0] for c in CASES}
    assert set(SUBCOMMANDS) <= covered
    assert sum(c.expect == "Invalid value" for c in CASES) >= 20  # numeric and choice options are many


def test_every_usage_error_is_a_short_usage_message_and_exit_2() -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_run, CASES))
    failures = []
    for case, proc in results:
        ok = (
            proc.returncode == 2
            and "Traceback" not in proc.stderr
            and case.expect in proc.stderr
            and "Error:" in proc.stderr
            and len(proc.stderr.strip().splitlines()) <= 4
        )
        if not ok:
            failures.append(f"capstan {' '.join(case.argv)} -> {proc.returncode}: {proc.stderr[-300:]!r}")
    assert not failures, "\n".join(failures)


def test_the_root_help_lists_every_sub_command_with_its_own_help() -> None:
    """``capstan --help`` shows each sub-command's help without importing it: the table in main.py must say what
    the sub-app says."""
    import importlib

    for name, sub in SUBCOMMANDS.items():
        module = importlib.import_module(f"capstan.cli.{sub.module}")
        assert module.app.info.help == sub.help, name
