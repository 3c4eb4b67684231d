"""The Helm chart of this checkout (deploy/helm/capstan) as the demo, the tests and the benches use it: where it is,
rendered by the helm that :func:`capstan.sandbox.build_helm` builds, and one component's identity (its
ServiceAccount, roles and bindings) with a token mounted the way the kubelet mounts it, so a process started by hand
runs exactly as the chart's pod would."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from capstan.errors import UserError
from capstan.sandbox.build import helm_path

CHART_COMPONENTS = ("record", "restarts", "mcp", "gateway", "capacity")
IDENTITY_KINDS = frozenset({"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"})
# the PostgreSQL store and the notifier with its configuration: what a highly available install sets
HA_VALUES = (
    "--set", "store.existingSecret=capstan-store",
    "--set", "restarts.enabled=true", "--set", "restarts.configSecret=capstan-restarts",
)  # fmt: skip


def chart_dir() -> Path:
    """The Helm chart in this checkout (deploy/helm/capstan), or a one-line error where Capstan was installed
    without its sources."""
    chart = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "capstan"
    if not (chart / "Chart.yaml").is_file():
        raise UserError(
            f"{chart}: no Helm chart here (it ships with the source checkout, deploy/helm/capstan)"
        )
    return chart


def render_chart(
    *args: str, release: str = "capstan", namespace: str = "capstan", timeout: float = 120
) -> str:
    """``helm template`` of the chart with ``args`` (``--set``, ``-f``, ``--show-only``…); its YAML. A helm that
    was not built, or values the chart refuses, is a UserError quoting helm's own line."""
    binary = helm_path()
    if not binary.is_file():
        raise UserError(f"no helm at {binary}: run `capstan sandbox build` (make bootstrap does)")
    proc = subprocess.run(
        [str(binary), "template", release, str(chart_dir()), "--namespace", namespace, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise UserError(f"helm template: {proc.stderr.strip()}")
    return proc.stdout


def chart_documents(text: str) -> list[dict[str, Any]]:
    """The non-empty documents of rendered YAML."""
    return [doc for doc in yaml.safe_load_all(text) if doc]


def identity_manifest(component: str, *values: str) -> str:
    """The chart's ServiceAccount, roles and bindings of ``component`` alone (``values``: more ``--set`` or ``-f``
    arguments, e.g. the gateway's discovery namespace), released as ``capstan`` in the namespace ``capstan``
    (names ``capstan-<component>``, ``capstan-<component>-read``, ``-leader``, ``-discovery``)."""
    if component not in CHART_COMPONENTS:
        raise UserError(f"{component!r}: not a component of the chart ({', '.join(CHART_COMPONENTS)})")
    enabled = [
        arg for c in CHART_COMPONENTS for arg in ("--set", f"{c}.enabled={str(c == component).lower()}")
    ]
    template = "templates/gateway.yaml" if component == "gateway" else "templates/rbac.yaml"
    text = render_chart(
        *HA_VALUES, *enabled, "--set", "mcp.tokenSecret=capstan-mcp-token",
        "--set-json", 'capacity.nodeTypes=[{"name": "unused"}]', *values, "--show-only", template,
    )  # fmt: skip
    return yaml.safe_dump_all([d for d in chart_documents(text) if d["kind"] in IDENTITY_KINDS])


def mount_service_account(account: Path, token: str, kubeconfig: Path, namespace: str) -> dict[str, str]:
    """The token, the cluster's CA (from ``kubeconfig``) and the namespace in ``account``, as the kubelet mounts
    them; returns the API server's service variables and where the files are (``CAPSTAN_SERVICE_ACCOUNT_DIR``):
    the environment of a pod of that account for :meth:`capstan.kube.KubeClient.in_cluster`."""
    account.mkdir(parents=True)
    (account / "token").write_text(token)
    cluster = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]
    (account / "ca.crt").write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    (account / "namespace").write_text(namespace)
    server = urlsplit(cluster["server"])
    return {
        "KUBERNETES_SERVICE_HOST": str(server.hostname),
        "KUBERNETES_SERVICE_PORT": str(server.port),
        "CAPSTAN_SERVICE_ACCOUNT_DIR": str(account),
    }
