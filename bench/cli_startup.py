"""How fast ``capstan --help`` and every ``capstan X [Y] --help`` answer, each timed as a fresh process.

Goal: every help well under a second. Each command path of the CLI is run ``--runs`` times as
``python -c 'from capstan.cli.main import main; main(...)' PATH --help`` (what the console script does); the table
gives the median and worst wall time, the peak RSS, and the heaviest imports ``python -X importtime`` finds for the
group. Two floors run in the same process tree for scale: an empty interpreter, and one that imports Typer (which
every help must pay for). ``--compare-src DIR`` runs the same paths against another checkout's ``src`` (e.g. the
code before a change, from ``git archive``) and adds its median as a column.

    .venv/bin/python bench/cli_startup.py --runs 5
    .venv/bin/python bench/cli_startup.py --runs 5 --compare-src /tmp/capstan-before/src
    .venv/bin/python bench/cli_startup.py --smoke
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
ENTRY = "import sys; from capstan.cli.main import main; main(sys.argv[1:])"
# NOTE: the child reports its own peak RSS (VmHWM of its address space) at exit: wait4's ru_maxrss would carry
# the forking parent's high-water mark across exec (Linux keeps it), the bench's own ~40 MiB for every child.
_HWM = (
    "import atexit, os\n"
    "def _hwm():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    "            open(os.environ['CLI_BENCH_HWM'], 'w').write(line.split()[1])\n"
    "atexit.register(_hwm)\n"
)


@dataclass
class Row:
    path: str
    runs: list[float] = field(default_factory=list)
    rss_kib: list[int] = field(default_factory=list)
    compare: list[float] = field(default_factory=list)
    heaviest: list[tuple[str, float]] = field(default_factory=list)


def command_paths(leaves: bool) -> list[tuple[str, ...]]:
    """``()`` (the root), every sub-command, and with ``leaves`` every command below them."""
    import typer

    from capstan.cli.main import SUBCOMMANDS, build_app

    paths: list[tuple[str, ...]] = [()]
    for name in SUBCOMMANDS:
        paths.append((name,))
        if not leaves:
            continue
        group = typer.main.get_command(build_app(name)).commands[name]  # type: ignore[attr-defined]
        for sub in sorted(getattr(group, "commands", None) or {}):
            paths.append((name, sub))
    return paths


def _env(src: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG" and not k.startswith("CAPSTAN_")}
    env["PYTHONPATH"] = str(src)
    return env


def timed(code: str, args: list[str], env: dict[str, str], scratch: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one ``python -c code args`` process."""
    hwm = scratch / "hwm"
    hwm.unlink(missing_ok=True)
    argv = [sys.executable, "-c", _HWM + code, *args]
    t0 = time.perf_counter()
    proc = subprocess.run(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env={**env, "CLI_BENCH_HWM": str(hwm)},
        timeout=120,
        check=False,
    )
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited with {proc.returncode}")
    return elapsed, int(hwm.read_text()) if hwm.exists() else 0


def heaviest_imports(path: tuple[str, ...], env: dict[str, str], top: int = 3) -> list[tuple[str, float]]:
    """The top-level packages with the largest cumulative import time (``-X importtime``) for this help."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", ENTRY, *path, "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    by_package: dict[str, float] = {}
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = line.split("|")
        try:
            cumulative_us = int(parts[1].strip())
        except ValueError:
            continue
        name = parts[2].rstrip()
        if name.startswith("  "):  # only outermost imports (one space; nested ones are indented further)
            continue
        package = name.strip().split(".")[0]
        by_package[package] = by_package.get(package, 0.0) + cumulative_us / 1e6
    return sorted(by_package.items(), key=lambda kv: -kv[1])[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="one run of the root and each sub-command")
    parser.add_argument("--compare-src", type=Path, default=None, help="another checkout's src directory")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = parser.parse_args()
    runs = 1 if args.smoke else max(1, args.runs)
    env = _env(ROOT / "src")
    paths = command_paths(leaves=not args.smoke)

    scratch = Path(tempfile.mkdtemp(prefix="cli-bench-"))
    load_before = os.getloadavg()[0]
    rows: list[Row] = []
    for label, code in (("(python, empty)", "pass"), ("(python, import typer)", "import typer")):
        row = Row(label)
        for _ in range(runs):
            elapsed, rss = timed(code, [], env, scratch)
            row.runs.append(elapsed)
            row.rss_kib.append(rss)
        rows.append(row)
    for path in paths:
        row = Row(" ".join(("capstan", *path, "--help")))
        for _ in range(runs):
            elapsed, rss = timed(ENTRY, [*path, "--help"], env, scratch)
            row.runs.append(elapsed)
            row.rss_kib.append(rss)
            if args.compare_src is not None:
                before = timed(ENTRY, [*path, "--help"], _env(args.compare_src), scratch)[0]
                row.compare.append(before)
        if len(path) <= 1:
            row.heaviest = heaviest_imports(path, env)
        rows.append(row)

    table = Table(title=f"CLI help start-up, {runs} run(s) each (wall seconds, fresh process)")
    table.add_column("command")
    table.add_column("median s", justify="right")
    table.add_column("worst s", justify="right")
    table.add_column("peak RSS MiB", justify="right")
    if args.compare_src is not None:
        table.add_column(f"median s, {args.compare_src}", justify="right")
    table.add_column("heaviest imports (cumulative s)")
    for row in rows:
        cells = [
            row.path,
            f"{statistics.median(row.runs):.3f}",
            f"{max(row.runs):.3f}",
            f"{max(row.rss_kib) / 1024:.0f}",
        ]
        if args.compare_src is not None:
            cells.append(f"{statistics.median(row.compare):.3f}" if row.compare else "")
        cells.append(", ".join(f"{name} {seconds:.3f}" for name, seconds in row.heaviest))
        table.add_row(*cells)
    Console(width=200).print(table)
    worst = max(rows[2:], key=lambda r: statistics.median(r.runs))
    print(f"slowest help: {worst.path} (median {statistics.median(worst.runs):.3f} s)")
    print(
        f"1-minute load average: {load_before:.2f} before, {os.getloadavg()[0]:.2f} after ({os.cpu_count()} CPUs)"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cli_startup.json").write_text(json.dumps([asdict(r) for r in rows], indent=2))


if __name__ == "__main__":
    main()
