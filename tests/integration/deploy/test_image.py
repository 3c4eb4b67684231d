"""What deploy/Dockerfile puts in the image, checked without a container runtime (none runs here, and no registry
serves its base image): the build stage's own steps, outside a container. The files its COPY lines name are copied
into a build context of their own, installed into a fresh virtual environment without the dev or bench extras, and
that environment, with nothing of the checkout on its path, must run every command the chart's containers run
(their exact arguments, behind the image's entry point) and record a real cluster into SQLite."""

from __future__ import annotations

import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.fixtures.helm import POSTGRES, documents, render

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
# every component the chart can run, each enabled with the values it needs
ALL_COMPONENTS = (
    *POSTGRES,
    "--set", "mcp.enabled=true", "--set", "mcp.tokenSecret=capstan-mcp-token",
    "--set", "gateway.enabled=true", "--set-json",
    'gateway.config={"discovery": {"kubernetes": {"namespace": "llm", "selector": "app=vllm"}}}',
    "--set", "capacity.enabled=true", "--set-json", 'capacity.nodeTypes=[{"name": "gpu-l4", "gpu": 2}]',
)  # fmt: skip


def build_stage() -> tuple[list[str], list[str]]:
    """The build stage of the Dockerfile: the sources its COPY lines name, and its ENTRYPOINT (of the final stage)."""
    lines = DOCKERFILE.read_text().splitlines()
    stages = [i for i, line in enumerate(lines) if line.startswith("FROM ")]
    assert len(stages) == 2, "the Dockerfile has a build stage and a final stage"
    sources = [
        src
        for line in lines[stages[0] : stages[1]]
        if line.startswith("COPY ")
        for src in shlex.split(line)[1:-1]
    ]
    (entry,) = [line for line in lines[stages[1] :] if line.startswith("ENTRYPOINT ")]
    return sources, yaml.safe_load(entry.removeprefix("ENTRYPOINT "))


@pytest.fixture(scope="module")
def image_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment holding what the Dockerfile's build stage installs (its ``pip install .`` done by uv,
    the installer the bootstrap uses: the same resolution from the same PyPI, with a cache)."""
    work = tmp_path_factory.mktemp("image")
    context = work / "context"
    context.mkdir()
    sources, _ = build_stage()
    assert "src" in sources and "pyproject.toml" in sources, sources
    for name in sources:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, context / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, context / name)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    uv = Path(sys.executable).parent / "uv"
    install = subprocess.run(
        [str(uv), "pip", "install", "-q", "--python", str(venv / "bin" / "python"), str(context)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    return venv


def image_environ(venv: Path) -> dict[str, str]:
    """The environment of a process in the image: its venv first on PATH, nothing of the checkout importable."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "KUBECONFIG")}
    return env | {"PATH": f"{venv / 'bin'}:{env.get('PATH', '')}", "PYTHONDONTWRITEBYTECODE": "1"}


def test_the_image_holds_capstan_without_the_checkout_or_the_dev_extras(
    image_env: Path, tmp_path: Path
) -> None:
    python = str(image_env / "bin" / "python")
    where = subprocess.run(
        [python, "-c", "import capstan; print(capstan.__file__)"],
        capture_output=True, text=True, cwd=tmp_path, env=image_environ(image_env), timeout=60, check=True,
    )  # fmt: skip
    assert where.stdout.startswith(str(image_env)), where.stdout
    for dev_only in ("pytest", "hypothesis", "ruff", "kr8s"):
        probe = subprocess.run([python, "-c", f"import {dev_only}"], capture_output=True, cwd=tmp_path,
                               env=image_environ(image_env), timeout=60, check=False)  # fmt: skip
        assert probe.returncode != 0, f"{dev_only} is in the image: only the dev or bench extras need it"


def test_every_command_the_chart_runs_starts_from_the_image(image_env: Path, tmp_path: Path) -> None:
    """Each container's arguments, exactly as rendered, behind the Dockerfile's ENTRYPOINT: the command exists in
    the installed package and takes every option the chart passes (``--help`` parses them first, then stops)."""
    _, entrypoint = build_stage()
    assert entrypoint[0] == "capstan"
    containers = [
        c
        for d in documents(render(*ALL_COMPONENTS))
        if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
    ]
    assert {c["name"] for c in containers} >= {"record", "restarts", "mcp", "gateway", "capacity"}, containers
    for container in containers:
        argv = [str(image_env / "bin" / entrypoint[0]), *entrypoint[1:], *container["args"], "--help"]
        run = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=image_environ(image_env),
                             timeout=120, check=False)  # fmt: skip
        assert run.returncode == 0, f"{container['name']}: {shlex.join(argv[1:])}\n{run.stderr[-2000:]}"
        assert "Usage:" in run.stdout and "Traceback" not in run.stderr, run.stdout[-500:]


def test_the_image_records_a_real_cluster_with_the_chart_s_configuration(
    image_env: Path, kubeconfig: Path, tmp_path: Path
) -> None:
    """The chart's default recorder configuration (its ConfigMap), the SQLite store of the default values: the
    store's migrations and every runtime dependency of the recorder come with the package."""
    (config,) = [
        d["data"]["record.yaml"]
        for d in documents(render())
        if d["kind"] == "ConfigMap" and "record.yaml" in d["data"]
    ]
    (tmp_path / "record.yaml").write_text(config)
    db = tmp_path / "history.db"
    _, entrypoint = build_stage()
    argv = [str(image_env / "bin" / entrypoint[0]), *entrypoint[1:], "record", "--config", "record.yaml",
            "--kubeconfig", str(kubeconfig), "--store", f"sqlite:///{db}", "--once"]  # fmt: skip
    run = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=image_environ(image_env),
                         timeout=300, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    with sqlite3.connect(db) as conn:
        kinds = dict(conn.execute("SELECT kind, count(*) FROM object_state GROUP BY kind").fetchall())
    assert kinds.get("Node", 0) >= 1 and kinds.get("Namespace", 0) >= 4, kinds
