#!/usr/bin/env python3
"""A real exec credential plugin for the tests, driven by environment variables (a kubeconfig's ``exec.env``).

PLUGIN_STATE   directory: each run appends a line to ``runs`` and writes ``exec_info.json``; the token printed
               is the content of ``token`` (``static-token`` if there is none)
PLUGIN_MODE    ok | fail | badjson | wrongversion | hang | bogus-first (the first run prints a token the API
               server refuses)
PLUGIN_TTL     seconds: status.expirationTimestamp is now + this (no expiry when unset)
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def write_kubeconfig(
    path: Path,
    state: Path,
    *,
    server: str = "https://127.0.0.1:1",
    ca_data: str | None = None,
    mode: str = "ok",
    ttl: float | None = None,
    api_version: str = "client.authentication.k8s.io/v1",
    **exec_extra: object,
) -> Path:
    """A kubeconfig whose user's token comes from this plugin (run as ``python exec_plugin.py``)."""
    state.mkdir(parents=True, exist_ok=True)
    env = [{"name": "PLUGIN_STATE", "value": str(state)}, {"name": "PLUGIN_MODE", "value": mode}]
    if ttl is not None:
        env.append({"name": "PLUGIN_TTL", "value": str(ttl)})
    cluster: dict[str, object] = {"server": server}
    if ca_data is not None:
        cluster["certificate-authority-data"] = ca_data
    else:
        cluster["insecure-skip-tls-verify"] = True
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [
            {
                "name": "plugin-user",
                "user": {
                    "exec": {
                        "apiVersion": api_version,
                        "command": sys.executable,
                        "args": [str(Path(__file__).resolve())],
                        "env": env,
                        "interactiveMode": "Never",
                        "provideClusterInfo": True,
                        **exec_extra,
                    }
                },
            }
        ],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "plugin-user"}}],
        "current-context": "ctx",
    }
    path.write_text(json.dumps(config))
    return path


def runs(state: Path) -> int:
    """How often the plugin ran."""
    file = state / "runs"
    return len(file.read_text().splitlines()) if file.exists() else 0


def main() -> int:
    state = Path(os.environ["PLUGIN_STATE"])
    mode = os.environ.get("PLUGIN_MODE", "ok")
    info = json.loads(os.environ.get("KUBERNETES_EXEC_INFO") or "{}")
    (state / "exec_info.json").write_text(json.dumps(info))
    with (state / "runs").open("a") as fh:
        fh.write(f"{time.time()}\n")
    runs = len((state / "runs").read_text().splitlines())
    if mode == "fail":
        print("error: the SSO session has expired; run 'cloud login'", file=sys.stderr)
        return 3
    if mode == "badjson":
        print("Please visit https://login.example/device and enter the code")
        return 0
    if mode == "hang":
        # waits for a login that never comes, in a child that holds the output pipe open too
        subprocess.run(["sleep", "600"], check=False)
        return 0
    token_file = state / "token"
    token = token_file.read_text().strip() if token_file.exists() else "static-token"
    if mode == "bogus-first" and runs == 1:
        token = "not-a-valid-token"
    status: dict[str, str] = {"token": token}
    ttl = os.environ.get("PLUGIN_TTL")
    if ttl:
        expiry = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=float(ttl))
        status["expirationTimestamp"] = expiry.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    version = info.get("apiVersion", "client.authentication.k8s.io/v1")
    if mode == "wrongversion":
        version = "client.authentication.k8s.io/v1alpha1"
    print(json.dumps({"apiVersion": version, "kind": "ExecCredential", "status": status}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
