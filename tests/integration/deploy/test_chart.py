"""The Helm chart (deploy/helm/capstan): `helm lint`, `helm template` for each values profile, values that cannot
work refused by its schema with the value named, and the rendered manifests server-side applied to the sandbox's
real API server: every object accepted, a second apply changes nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from capstan.kube import KubeClient
from capstan.sandbox import Sandbox
from tests.fixtures.helm import CHART, POSTGRES, documents, helm, render
from tests.fixtures.identity import active_namespace

pytestmark = pytest.mark.integration

PG = list(POSTGRES)
PROFILES: dict[str, tuple[list[str], dict[str, int]]] = {
    # name: (helm arguments, kinds rendered and how many)
    "defaults (the recorder on SQLite, one pod)": (
        [],
        {"ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "Role": 1, "RoleBinding": 1,
         "Deployment": 1, "ConfigMap": 1, "Service": 1, "NetworkPolicy": 1, "PersistentVolumeClaim": 1},
    ),
    "PostgreSQL, the recorder and the notifier": (
        PG,
        {"ServiceAccount": 2, "ClusterRole": 2, "ClusterRoleBinding": 2, "Role": 2, "RoleBinding": 2,
         "Deployment": 2, "ConfigMap": 1, "Service": 2, "PodDisruptionBudget": 2, "NetworkPolicy": 2},
    ),
    "PostgreSQL, the recorder alone, one replica, no policies": (
        [*PG, "--set", "restarts.enabled=false", "--set", "record.replicas=1", "--set", "networkPolicy.enabled=false"],
        {"ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "Role": 1, "RoleBinding": 1,
         "Deployment": 1, "ConfigMap": 1, "Service": 1},
    ),
    "PostgreSQL, the notifier alone": (
        [*PG, "--set", "record.enabled=false"],
        {"ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "Role": 1, "RoleBinding": 1,
         "Deployment": 1, "Service": 1, "PodDisruptionBudget": 1, "NetworkPolicy": 1},
    ),
    "PostgreSQL, with the MCP server": (
        [*PG, "--set", "mcp.enabled=true", "--set", "mcp.tokenSecret=capstan-mcp-token"],
        {"ServiceAccount": 3, "ClusterRole": 3, "ClusterRoleBinding": 3, "Role": 2, "RoleBinding": 2,
         "Deployment": 3, "ConfigMap": 1, "Service": 3, "PodDisruptionBudget": 3, "NetworkPolicy": 3},
    ),
    "SQLite, with the MCP server without history": (
        ["--set", "mcp.enabled=true", "--set", "mcp.tokenSecret=capstan-mcp-token", "--set", "mcp.history=false"],
        {"ServiceAccount": 2, "ClusterRole": 2, "ClusterRoleBinding": 2, "Role": 1, "RoleBinding": 1,
         "Deployment": 2, "ConfigMap": 1, "Service": 2, "PodDisruptionBudget": 1, "NetworkPolicy": 2,
         "PersistentVolumeClaim": 1},
    ),
    "with the gateway discovering the serving pods of one namespace": (
        ["--set", "gateway.enabled=true", "--set-json",
         'gateway.config={"discovery": {"kubernetes": {"namespace": "llm", "selector": "app=vllm"}}}'],
        {"ServiceAccount": 2, "ClusterRole": 1, "ClusterRoleBinding": 1, "Role": 2, "RoleBinding": 2,
         "Deployment": 2, "ConfigMap": 2, "Service": 2, "PodDisruptionBudget": 1, "NetworkPolicy": 2,
         "PersistentVolumeClaim": 1},
    ),
    "with the capacity controller and a placeholder namespace": (
        ["--set", "capacity.enabled=true", "--set-json", 'capacity.nodeTypes=[{"name": "gpu-l4", "gpu": 2}]',
         "--set", "capacity.placeholderNamespace=capstan-headroom"],
        {"ServiceAccount": 2, "ClusterRole": 2, "ClusterRoleBinding": 2, "Role": 4, "RoleBinding": 4,
         "Deployment": 2, "ConfigMap": 2, "Service": 2, "PodDisruptionBudget": 1, "NetworkPolicy": 2,
         "PersistentVolumeClaim": 1},
    ),
    "PostgreSQL, with the Grafana dashboard": (
        [*PG, "--set", "grafanaDashboard.enabled=true"],
        {"ServiceAccount": 2, "ClusterRole": 2, "ClusterRoleBinding": 2, "Role": 2, "RoleBinding": 2,
         "Deployment": 2, "ConfigMap": 2, "Service": 2, "PodDisruptionBudget": 2, "NetworkPolicy": 2},
    ),
    "PostgreSQL, the gateway and the capacity controller, with ServiceMonitors (the CRD present)": (
        [*PG, "--set", "serviceMonitor.enabled=true", "--api-versions", "monitoring.coreos.com/v1",
         "--set", "gateway.enabled=true",
         "--set-json", 'gateway.config={"endpoints": [{"name": "e0", "url": "http://vllm:8000"}]}',
         "--set", "capacity.enabled=true", "--set-json", 'capacity.nodeTypes=[{"name": "gpu-l4", "gpu": 2}]',
         "--set-json", 'networkPolicy.metricsNamespaceSelector={"matchLabels": {"name": "monitoring"}}',
         "--set-json", 'networkPolicy.gatewayClientNamespaceSelector={"matchLabels": {"name": "llm"}}'],
        {"ServiceAccount": 4, "ClusterRole": 3, "ClusterRoleBinding": 3, "Role": 4, "RoleBinding": 4,
         "Deployment": 4, "ConfigMap": 3, "Service": 4, "PodDisruptionBudget": 4, "NetworkPolicy": 4,
         "ServiceMonitor": 4},
    ),
}  # fmt: skip


def kinds(docs: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for doc in docs:
        out[doc["kind"]] = out.get(doc["kind"], 0) + 1
    return out


def test_the_chart_lints() -> None:
    for args in ((), POSTGRES):
        proc = helm("lint", str(CHART), "--strict", *args)
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("profile", list(PROFILES))
def test_each_values_profile_renders_what_it_enables(profile: str) -> None:
    args, expected = PROFILES[profile]
    docs = documents(render(*args))
    assert kinds(docs) == expected
    for doc in docs:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == "capstan" and labels["app.kubernetes.io/component"]
    for deployment in (d for d in docs if d["kind"] == "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert pod["securityContext"]["runAsNonRoot"] is True
        if container["name"] == "gateway":  # its own /healthz on its port; stateless, no Lease, no store
            assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
            assert not any(a.startswith("--leader-elect") for a in container["args"])
            assert "env" not in container
            continue
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        singleton = container["name"] != "mcp"  # the MCP server is stateless: its replicas all serve
        assert ("--leader-elect" in container["args"]) is singleton
        assert "--probe-address=0.0.0.0" in container["args"]
        store = next((e for e in container["env"] if e["name"] == "CAPSTAN_HISTORY_STORE"), None)
        if container["name"] == "capacity":  # it keeps no history: no store
            assert store is None
            continue
        postgres = "store.existingSecret=capstan-store" in args
        if container["name"] == "mcp" and (not postgres or "mcp.history=false" in args):
            assert store is None  # an MCP server without history has no store at all
        elif postgres:  # the URL only as a reference to its Secret, never literal
            assert store is not None and store["valueFrom"]["secretKeyRef"] == {
                "name": "capstan-store",
                "key": "url",
            }
        else:  # SQLite: the file on the recorder's volume, one pod that replaces itself (Recreate)
            assert store == {"name": "CAPSTAN_HISTORY_STORE", "value": "/var/lib/capstan/history.db"}
            assert deployment["spec"]["replicas"] == 1
            assert deployment["spec"]["strategy"]["type"] == "Recreate"
            (claim,) = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
            assert claim["persistentVolumeClaim"]["claimName"] == "capstan-record-store"
    for monitor in (d for d in docs if d["kind"] == "ServiceMonitor"):
        scraped(docs, monitor, args)
    for dashboard in (d for d in docs if d["metadata"]["labels"].get("grafana_dashboard") == "1"):
        assert json.loads(dashboard["data"]["capstan.json"])["uid"] == "capstan-overview"  # the file, whole
    # no credential or URL of the store anywhere in what the chart renders
    assert "postgresql" not in json.dumps(docs)


def scraped(docs: list[dict[str, Any]], monitor: dict[str, Any], args: list[str]) -> None:
    """A ServiceMonitor selects exactly one of the release's Services, by a port that Service has, and the
    component's NetworkPolicy (if any) admits that port from the namespaces of networkPolicy.metricsNamespaceSelector:
    Prometheus can reach what it is told to scrape."""
    selector = monitor["spec"]["selector"]["matchLabels"]
    (service,) = [
        d for d in docs if d["kind"] == "Service" and selector.items() <= d["metadata"]["labels"].items()
    ]
    ((endpoint,),) = [monitor["spec"]["endpoints"]]
    assert endpoint["path"] == "/metrics"
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    policies = [
        d
        for d in docs
        if d["kind"] == "NetworkPolicy" and d["spec"]["podSelector"]["matchLabels"] == selector
    ]
    if not policies:
        return
    (policy,) = policies
    given = next((a for a in args if a.startswith("networkPolicy.metricsNamespaceSelector=")), None)
    metrics_namespaces = json.loads(given.partition("=")[2]) if given else {}
    assert any(
        {"port": port["targetPort"], "protocol": "TCP"} in rule["ports"]
        and {"namespaceSelector": metrics_namespaces} in rule["from"]
        for rule in policy["spec"]["ingress"]
    ), (monitor["metadata"]["name"], policy["spec"]["ingress"])


def test_the_recorder_configuration_follows_its_values() -> None:
    args = ["--set", "source=prod-eu", "--set", "record.kinds={Pod,Node}", "--set", "record.events=false",
            "--set", "record.excludeNamespaces={kube-system}"]  # fmt: skip
    (config,) = [d for d in documents(render(*args)) if d["kind"] == "ConfigMap"]
    import yaml

    from capstan.record import RecorderConfig

    data = yaml.safe_load(config["data"]["record.yaml"])
    parsed = RecorderConfig.model_validate({**data, "store": "unused.db"})  # the store comes from the Secret
    assert parsed.source == "prod-eu" and parsed.kubernetes is not None
    assert parsed.kubernetes.kinds == ["Pod", "Node"] and parsed.kubernetes.events is False
    assert parsed.kubernetes.exclude_namespaces == ["kube-system"] and parsed.kubernetes.kubeconfig is None


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ([*POSTGRES, "--set", "restarts.configSecret="], "/restarts/configSecret"),
        (["--set", "store.existingSecret=Not_A_Name"], "/store/existingSecret"),
        (["--set", "store.sqlite.size=lots"], "/store/sqlite/size"),
        (["--set", "record.bogus=1"], "additional properties 'bogus' not allowed"),
        (["--set", "leaderElection.leaseDuration=soon"], "/leaderElection/leaseDuration"),
        (["--set", "probePort=80"], "/probePort"),
        (["--set", "record.replicas=-1"], "/record/replicas"),
        (["--set", "image.pullPolicy=Sometimes"], "/image/pullPolicy"),
        ([*POSTGRES, "--set", "mcp.enabled=true"], "/mcp/tokenSecret"),
        (["--set", "restarts.enabled=true", "--set", "restarts.configSecret=c"],
         "restarts.enabled: the notifier needs the PostgreSQL store"),
        (["--set", "mcp.enabled=true", "--set", "mcp.tokenSecret=t"], "mcp.history: the MCP server reads history"),
        (["--set", "gateway.enabled=true"], "/gateway/config"),
        (["--set", "capacity.enabled=true"], "/capacity/nodeTypes"),
        (["--set", "capacity.provider=gke"], "/capacity/provider"),
        (["--set-json", 'gateway.extraVolumeMounts=[{"name": "tok"}]'], "/gateway/extraVolumeMounts/0"),
        (["--set", "capacity.gatewayDemand.metricsUrl=http://gw/metrics"], "/capacity/gatewayDemand/deployment"),
        (["--set", "capacity.gatewayDemand.metricsUrl=gw:8080"], "/capacity/gatewayDemand/metricsUrl"),
        (["--set", "capacity.gatewayDemand.replicaRps=lots"], "/capacity/gatewayDemand/replicaRps"),
    ],
)  # fmt: skip
def test_values_that_cannot_work_are_refused_naming_the_value(args: list[str], named: str) -> None:
    proc = helm("template", "capstan", str(CHART), *args)
    assert proc.returncode != 0 and named in proc.stderr, proc.stderr


def test_the_gateway_mounts_the_files_its_served_models_name() -> None:
    """A model served by real vLLM engines is tokenized with its own files (docs/route.md, "In front of vLLM"):
    the volumes and mounts given reach the gateway's pod, and its configuration names the mounted files."""
    models = [{"name": "llama", "tokenizer": "/models/llama/tokenizer.json", "hash_seed": "0"}]
    args = ["--set", "gateway.enabled=true", "--set-json",
            'gateway.config={"endpoints": [{"name": "e0", "url": "http://vllm:8000"}], "models": ' + json.dumps(models) + "}",
            "--set-json", 'gateway.extraVolumes=[{"name": "tok", "configMap": {"name": "llama-tokenizer"}}]',
            "--set-json", 'gateway.extraVolumeMounts=[{"name": "tok", "mountPath": "/models/llama", "readOnly": true}]']  # fmt: skip
    docs = documents(render(*args))
    (deploy,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("gateway")]
    pod = deploy["spec"]["template"]["spec"]
    assert {"name": "tok", "configMap": {"name": "llama-tokenizer"}} in pod["volumes"]
    (container,) = pod["containers"]
    assert {"name": "tok", "mountPath": "/models/llama", "readOnly": True} in container["volumeMounts"]
    import yaml

    from capstan.route import RouteConfig

    (config,) = [d for d in docs if d["kind"] == "ConfigMap" and "route.yaml" in d["data"]]
    parsed = RouteConfig.model_validate(yaml.safe_load(config["data"]["route.yaml"]))
    assert [str(m.tokenizer) for m in parsed.models] == ["/models/llama/tokenizer.json"]


def test_the_default_values_need_no_secret() -> None:
    proc = helm("template", "capstan", str(CHART))
    assert proc.returncode == 0, proc.stderr


async def test_the_rendered_manifests_are_accepted_by_the_api_server_and_a_second_apply_changes_nothing(
    sandbox: Sandbox, kube: KubeClient, tmp_path: Path
) -> None:
    namespace, release = "capstan-chart", "chart-test"
    everything = (
        "--set",
        "mcp.enabled=true",
        "--set",
        "mcp.tokenSecret=t",
        "--set",
        "grafanaDashboard.enabled=true",
    )
    text = render(*POSTGRES, *everything, release=release, namespace=namespace)
    path = tmp_path / "rendered.yaml"
    path.write_text(text)
    docs = documents(text)
    await active_namespace(kube, namespace)

    def versions() -> dict[str, str]:
        """Each object's generation (bumped by a change of its spec, not by a controller writing its status, as
        the disruption controller does to a PDB), else its resourceVersion."""
        listing = json.loads(sandbox.kubectl(["get", "-f", str(path), "-o", "json"]))
        out = {}
        for item in listing["items"]:
            meta = item["metadata"]
            out[f"{item['kind']}/{meta['name']}"] = str(meta.get("generation") or meta["resourceVersion"])
        return out

    try:
        first = await asyncio.to_thread(
            sandbox.kubectl, ["apply", "--server-side", "--field-manager=helm", "-f", str(path)]
        )
        applied = [line for line in first.splitlines() if line.strip()]
        assert len(applied) == len(docs) and all(line.endswith("serverside-applied") for line in applied), (
            first
        )
        before = await asyncio.to_thread(versions)
        assert len(before) == len(docs)
        await asyncio.to_thread(
            sandbox.kubectl, ["apply", "--server-side", "--field-manager=helm", "-f", str(path)]
        )
        after = await asyncio.to_thread(versions)
        assert after == before  # nothing was written the second time
        # and the API server, asked what applying once more would change, says nothing (kubectl diff exits 0)
        await asyncio.to_thread(
            sandbox.kubectl, ["diff", "--server-side", "--field-manager=helm", "-f", str(path)]
        )
    finally:
        await asyncio.to_thread(
            sandbox.kubectl, ["delete", "--ignore-not-found", "--wait=false", "-f", str(path)]
        )


async def test_helm_installs_the_defaults_upgrades_to_postgresql_and_uninstalls_on_the_sandbox(
    sandbox: Sandbox, kube: KubeClient, kubeconfig: Path, tmp_path: Path
) -> None:
    """A real `helm install --wait` with the default values (the recorder on SQLite: its claim bound to a volume the
    test provides, as a cluster's default StorageClass would; kwok runs the pod), an upgrade to the PostgreSQL
    store with the notifier (a new revision: two Deployments of two available replicas), and `helm uninstall`,
    which leaves nothing of the release but the history's claim (kept on purpose)."""
    from capstan.kube import ApiError, resources

    namespace, release = "capstan-helm", "helm-test"
    common = ("--kubeconfig", str(kubeconfig), "--namespace", namespace)
    volume = {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "capstan-helm-test-store"},
        "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                 "hostPath": {"path": str(tmp_path / "volume")}, "persistentVolumeReclaimPolicy": "Delete"},
    }  # fmt: skip
    await kube.create(resources.PVS, volume)
    try:
        install = await asyncio.to_thread(
            helm, "install", release, str(CHART), *common, "--create-namespace", "--wait", "--timeout", "180s",
            timeout=240,
        )  # fmt: skip
        assert install.returncode == 0, install.stderr
        assert "STATUS: deployed" in install.stdout and "The recorder (one pod: SQLite" in install.stdout
        deployments, _ = await kube.list(resources.DEPLOYMENTS, namespace=namespace)
        assert {d["metadata"]["name"]: d["status"].get("availableReplicas") for d in deployments} == {
            f"{release}-capstan-record": 1
        }
        claim = await kube.get(resources.PVCS, f"{release}-capstan-record-store", namespace)
        assert claim["status"]["phase"] == "Bound"
        upgrade = await asyncio.to_thread(
            helm,
            "upgrade",
            release,
            str(CHART),
            *common,
            *POSTGRES,
            "--wait",
            "--timeout",
            "180s",
            timeout=240,
        )
        assert upgrade.returncode == 0 and "REVISION: 2" in upgrade.stdout, upgrade.stderr
        assert "The recorder (2 replicas, one leading)" in upgrade.stdout
        deployments, _ = await kube.list(resources.DEPLOYMENTS, namespace=namespace)
        assert {d["metadata"]["name"]: d["status"].get("availableReplicas") for d in deployments} == {
            f"{release}-capstan-record": 2,
            f"{release}-capstan-restarts": 2,
        }
    finally:
        uninstall = await asyncio.to_thread(helm, "uninstall", release, *common, "--wait", timeout=240)
        assert uninstall.returncode == 0, uninstall.stderr
        roles, _ = await kube.list(
            resources.CLUSTER_ROLES, label_selector=f"app.kubernetes.io/instance={release}"
        )
        left, _ = await kube.list(resources.DEPLOYMENTS, namespace=namespace)
        kept, _ = await kube.list(resources.PVCS, namespace=namespace)
        for item in kept:
            with contextlib.suppress(ApiError):
                await kube.delete(resources.PVCS, item["metadata"]["name"], namespace)
        with contextlib.suppress(ApiError):
            await kube.delete(resources.NAMESPACES, namespace)
        with contextlib.suppress(ApiError):
            await kube.delete(resources.PVS, "capstan-helm-test-store")
    assert roles == [] and left == []
    assert [c["metadata"]["name"] for c in kept] == [f"{release}-capstan-record-store"]  # the history is kept


async def test_the_demo_s_step_installs_the_defaults_and_shows_what_they_made(
    sandbox: Sandbox, kube: KubeClient, kubeconfig: Path, tmp_path: Path
) -> None:
    """`capstan demo`'s step, run twice (a second demo upgrades the release in place), then uninstalled."""
    import io

    from rich.console import Console

    from capstan.cli.demo import chart_step
    from capstan.kube import ApiError, resources

    release, namespace = "demo-test", "capstan-demo-test"
    out = io.StringIO()
    console = Console(file=out, width=200)
    try:
        for _ in range(2):
            await chart_step(console, kubeconfig, tmp_path, release=release, namespace=namespace)
        text = out.getvalue()
        rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in text.splitlines() if "│" in line]
        assert ["Deployment", f"{release}-capstan-record", "1/1 available"] in rows, text
        assert f"{release}-capstan-record-store" in text and "Bound" in text, text
        assert "ClusterRole" in text and "verbs ['get', 'list', 'watch']" in text, text
    finally:
        common = ("--kubeconfig", str(kubeconfig), "--namespace", namespace)
        await asyncio.to_thread(helm, "uninstall", release, *common, "--wait", timeout=240)
        claims, _ = await kube.list(resources.PVCS, namespace=namespace)
        for claim in claims:
            with contextlib.suppress(ApiError):
                await kube.delete(resources.PVCS, claim["metadata"]["name"], namespace)
        for name, kind in ((namespace, resources.NAMESPACES), (f"{release}-demo-store", resources.PVS)):
            with contextlib.suppress(ApiError):
                await kube.delete(kind, name)


def test_the_capacity_controller_reads_the_demand_signals_it_is_given() -> None:
    """``capacity.readSuspendedJobs``, ``capacity.serveProvisioningRequests`` and ``capacity.gatewayDemand`` reach
    the controller's command line (a decimal
    given with --set, a string to Helm, is passed as written), and its ClusterRole may watch the Deployment."""
    base = [
        "--set",
        "capacity.enabled=true",
        "--set-json",
        'capacity.nodeTypes=[{"name": "gpu-l4", "gpu": 2}]',
    ]
    signals = ["--set", "capacity.readSuspendedJobs=true", "--set", "capacity.serveProvisioningRequests=true", "--set", "capacity.queueOnly=true",
               "--set", "capacity.gatewayDemand.metricsUrl=http://capstan-gateway.llm:8080/metrics",
               "--set", "capacity.gatewayDemand.deployment=llm/vllm", "--set", "capacity.gatewayDemand.replicaRps=2.5"]  # fmt: skip

    def capacity_args(*args: str) -> list[str]:
        docs = documents(render(*args))
        (deploy,) = [
            d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("capacity")
        ]
        (container,) = deploy["spec"]["template"]["spec"]["containers"]
        return [str(a) for a in container["args"]]

    given = capacity_args(*base, *signals)
    assert {"--read-suspended-jobs", "--serve-provisioning-requests", "--queue-only", "--gateway-metrics=http://capstan-gateway.llm:8080/metrics",
            "--gateway-deployment=llm/vllm", "--replica-rps=2.5"} <= set(given)  # fmt: skip
    plain = capacity_args(*base)
    assert not [
        a
        for a in plain
        if a.startswith(("--read-suspended-jobs", "--serve-", "--queue-only", "--gateway-", "--replica-rps"))
    ]
    roles = [
        d
        for d in documents(render(*base))
        if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("capacity-read")
    ]
    (rule,) = [r for r in roles[0]["rules"] if r.get("resources") == ["deployments"]]
    assert set(rule["verbs"]) == {"list", "watch"}
