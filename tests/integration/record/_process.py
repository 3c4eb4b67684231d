"""`capstan record` as a child process of a test: its configuration written to a file, its output to a log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml


def start_record(
    config: dict[str, Any],
    path: Path,
    kubeconfig: Path | None,
    *args: str,
    log: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """``capstan record --config <path> [--kubeconfig <kubeconfig>] <args>`` with ``config`` written to
    ``path``, in ``env`` (None: this process's); its output appended to ``log`` (None: discarded)."""
    path.write_text(yaml.safe_dump(config))
    argv = [
        sys.executable,
        "-m",
        "capstan.cli.main",
        "record",
        "--config",
        str(path),
        *(["--kubeconfig", str(kubeconfig)] if kubeconfig is not None else []),
        *args,
    ]
    out = log.open("ab") if log is not None else subprocess.DEVNULL
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
