"""Exec credential plugins against the sandbox's API server, as EKS, GKE and AKS kubeconfigs use them.

The plugin (tests/unit/kube/exec_plugin.py) prints an ExecCredential holding a real ServiceAccount token, made with
the TokenRequest API for an account bound to a ClusterRole that may read everything. Every command that reads a
kubeconfig is run with it; the real cloud plugins installed here (aws, gke-gcloud-auth-plugin) fail in one line.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from capstan.errors import UserError
from capstan.kube import ApiError, KubeClient, resources
from capstan.sandbox import free_port
from tests.unit.kube.exec_plugin import runs, write_kubeconfig

pytestmark = pytest.mark.integration

CAPSTAN = Path(sys.executable).with_name("capstan")
V1 = "client.authentication.k8s.io/v1"
V1BETA1 = "client.authentication.k8s.io/v1beta1"


@dataclass
class Account:
    token: str
    server: str
    ca_data: str


@pytest.fixture
async def account(kube: KubeClient, kubeconfig: Path, namespace: str) -> AsyncIterator[Account]:
    """A ServiceAccount that may get, list and watch everything, and a token for it (TokenRequest API)."""
    name = f"reader-{namespace}"[:63]
    await kube.create(
        resources.SERVICE_ACCOUNTS,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "capstan-exec", "namespace": namespace},
        },
    )
    await kube.create(
        resources.CLUSTER_ROLES,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}],
        },
    )
    await kube.create(
        resources.CLUSTER_ROLE_BINDINGS,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "capstan-exec", "namespace": namespace}],
        },
    )
    try:
        answer = await kube.request(
            "POST",
            resources.SERVICE_ACCOUNTS.item_path("capstan-exec", namespace, "token"),
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600},
            },
        )
        server, ca_data = await asyncio.to_thread(_admin_cluster, kubeconfig)
        yield Account(answer["status"]["token"], server, ca_data)
    finally:
        await kube.delete(resources.CLUSTER_ROLE_BINDINGS, name)
        await kube.delete(resources.CLUSTER_ROLES, name)


def _admin_cluster(kubeconfig: Path) -> tuple[str, str]:
    """The sandbox's API server address and CA (as data) from its admin kubeconfig."""
    cluster = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]
    ca_data = (
        cluster.get("certificate-authority-data")
        or base64.b64encode((kubeconfig.parent / cluster["certificate-authority"]).read_bytes()).decode()
    )
    return str(cluster["server"]), str(ca_data)


def _kubeconfig(tmp_path: Path, account: Account, **kw: object) -> tuple[Path, Path]:
    state = tmp_path / "plugin"
    state.mkdir(exist_ok=True)
    (state / "token").write_text(account.token)
    path = write_kubeconfig(
        tmp_path / "kubeconfig",
        state,
        server=account.server,
        ca_data=account.ca_data,
        **kw,  # type: ignore[arg-type]
    )
    return path, state


async def _wait_authorized(client: KubeClient, namespace: str) -> None:
    """RBAC bindings reach the authorizer's cache within moments; wait (bounded) until the account may list."""
    for _ in range(100):
        try:
            await client.list(resources.CONFIGMAPS, namespace=namespace)
            return
        except ApiError as exc:
            if exc.status != 403:
                raise
            await asyncio.sleep(0.1)
    pytest.fail("the ServiceAccount was never authorized")


@pytest.mark.parametrize("api_version", [V1, V1BETA1])
async def test_a_token_from_an_exec_plugin_reads_the_cluster(
    tmp_path: Path, account: Account, namespace: str, api_version: str
) -> None:
    path, state = _kubeconfig(tmp_path, account, api_version=api_version)
    client = await KubeClient.from_kubeconfig(path)
    try:
        await _wait_authorized(client, namespace)
        pods, _ = await client.list(resources.PODS, namespace=namespace)
        who = await client.request(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    finally:
        await client.close()
    assert pods == [] and runs(state) == 1  # one run for every request while the token is good
    assert who["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:capstan-exec"
    info = json.loads((state / "exec_info.json").read_text())
    assert info["apiVersion"] == api_version and info["spec"]["cluster"]["server"] == account.server


async def test_the_plugin_runs_again_when_its_token_expires(
    tmp_path: Path, account: Account, namespace: str
) -> None:
    """The plugin says its token lasts 3 s (status.expirationTimestamp): a request after that runs it again."""
    path, state = _kubeconfig(tmp_path, account, ttl=3)
    client = await KubeClient.from_kubeconfig(path)
    try:
        await _wait_authorized(client, namespace)
        before = runs(state)
        await asyncio.sleep(3.5)
        await client.list(resources.PODS, namespace=namespace)
        assert runs(state) == before + 1
    finally:
        await client.close()


async def test_a_refused_token_runs_the_plugin_again(
    tmp_path: Path, account: Account, namespace: str
) -> None:
    """The first token the plugin gives is one the API server refuses (401): the client runs it again and the
    request succeeds with the new token."""
    path, state = _kubeconfig(tmp_path, account, mode="bogus-first")
    client = await KubeClient.from_kubeconfig(path)
    try:
        await _wait_authorized(client, namespace)
    finally:
        await client.close()
    assert runs(state) == 2


async def test_a_token_that_cannot_be_renewed_is_an_api_error_the_callers_retry(
    tmp_path: Path, account: Account, namespace: str
) -> None:
    path, _ = _kubeconfig(tmp_path, account, ttl=2)
    client = await KubeClient.from_kubeconfig(path)
    try:
        await _wait_authorized(client, namespace)
        auth = client.exec_auth
        assert auth is not None  # from now on the plugin fails (the user's SSO session ended)
        auth.config = dataclasses.replace(auth.config, env=(*auth.config.env, ("PLUGIN_MODE", "fail")))
        await asyncio.sleep(2.5)
        with pytest.raises(ApiError) as info:
            await client.list(resources.PODS, namespace=namespace)
        assert info.value.reason == "Credentials" and "exited with 3" in str(info.value)
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("mode", "problem"),
    [
        ("fail", "exited with 3: error: the SSO session has expired"),
        ("badjson", "did not print an ExecCredential"),
        ("wrongversion", "answered with apiVersion 'client.authentication.k8s.io/v1alpha1'"),
        ("hang", "gave no answer within 30 s (stopped)"),
    ],
)
def test_every_command_says_a_failing_plugin_in_one_line(
    tmp_path: Path, account: Account, mode: str, problem: str
) -> None:
    """record (--once and daemon), restarts run and route serve --kubeconfig; the hanging plugin is stopped after
    the default 30 s deadline (not asserted as a time: the command must end, with that line)."""
    path, _ = _kubeconfig(tmp_path, account, mode=mode)
    record = tmp_path / "record.yaml"
    record.write_text(json.dumps({"store": str(tmp_path / "h.db"), "kubernetes": {"kinds": ["Pod"]}}))
    restarts = tmp_path / "restarts.yaml"
    restarts.write_text("sinks:\n  - {type: webhook, name: audit, url: 'http://127.0.0.1:9/hook'}\n")
    route = tmp_path / "route.yaml"
    route.write_text("discovery: {kubernetes: {namespace: default, selector: app=vllm}}\n")
    commands = {
        "record --once": ["record", "--config", str(record), "--kubeconfig", str(path), "--once"],
        "record": ["record", "--config", str(record), "--kubeconfig", str(path)],
        "restarts run": [
            "restarts", "run", "--config", str(restarts), "--kubeconfig", str(path), "--store", str(tmp_path / "r.db"),
        ],
        "route serve": ["route", "serve", "--config", str(route), "--kubeconfig", str(path), "--port", str(free_port())],
    }  # fmt: skip
    if mode == "hang":  # one command is enough to show the deadline (each costs 30 s)
        commands = {"restarts run": commands["restarts run"]}
    failures = []
    for name, argv in commands.items():
        try:
            proc = subprocess.run(
                [str(CAPSTAN), *argv], capture_output=True, text=True, timeout=120, check=False
            )
        except subprocess.TimeoutExpired:
            failures.append(f"{name}: still running after 120 s")
            continue
        lines = proc.stderr.strip().splitlines()
        if not (
            proc.returncode == 2
            and len(lines) == 1
            and f"kubeconfig {path}" in lines[0]
            and problem in lines[0]
        ):
            failures.append(f"{name}: exit {proc.returncode}: {proc.stderr[-600:]!r}")
    assert not failures, "\n".join(failures)


async def test_every_command_works_with_an_exec_plugin(
    tmp_path: Path, account: Account, kube: KubeClient, namespace: str
) -> None:
    """record --once records, restarts run starts watching, route serve discovers endpoints, each with the
    plugin's token only."""
    path, state = _kubeconfig(tmp_path, account)
    probe = await KubeClient.from_kubeconfig(path)
    try:
        await _wait_authorized(probe, namespace)
    finally:
        await probe.close()
    await kube.create(
        resources.CONFIGMAPS,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": namespace}},
    )
    db = tmp_path / "h.db"
    record = tmp_path / "record.yaml"
    record.write_text(
        json.dumps(
            {
                "store": str(db),
                "kubernetes": {"kinds": ["ConfigMap"], "events": False, "namespace": namespace},
            }
        )
    )
    proc = await asyncio.to_thread(
        subprocess.run,
        [str(CAPSTAN), "record", "--config", str(record), "--kubeconfig", str(path), "--once"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0 and "kubernetes/default: ok" in proc.stdout, proc.stdout + proc.stderr

    # route serve: discovery through the plugin's token; /health answers once the first list is in
    route = tmp_path / "route.yaml"
    route.write_text(f"discovery: {{kubernetes: {{namespace: {namespace}, selector: app=vllm}}}}\n")
    port = free_port()
    server = subprocess.Popen(
        [
            str(CAPSTAN),
            "route",
            "serve",
            "--config",
            str(route),
            "--kubeconfig",
            str(path),
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        async with httpx.AsyncClient(timeout=2) as http:
            for _ in range(300):
                with contextlib.suppress(httpx.HTTPError):
                    await http.get(f"http://127.0.0.1:{port}/health")  # any answer: it is serving
                    break
                assert server.poll() is None, server.communicate()[1][-800:]
                await asyncio.sleep(0.1)
            else:
                pytest.fail("route serve never answered /health")
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            _, err = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            _, err = server.communicate()
    assert "Traceback" not in err, err[-800:]

    # restarts run: it watches with the plugin's token until told to stop
    restarts = tmp_path / "restarts.yaml"
    restarts.write_text("sinks:\n  - {type: webhook, name: audit, url: 'http://127.0.0.1:9/hook'}\n")
    before = runs(state)
    watcher = subprocess.Popen(
        [
            str(CAPSTAN), "--log-text", "restarts", "run", "--config", str(restarts), "--kubeconfig", str(path),
            "--store", str(tmp_path / "r.db"), "--namespace", namespace,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        for _ in range(300):
            if runs(state) > before or watcher.poll() is not None:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(3)  # lists and watches with the token
        assert watcher.poll() is None, watcher.communicate()[1][-800:]
    finally:
        watcher.send_signal(signal.SIGTERM)
        try:
            _, err = watcher.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            watcher.kill()
            _, err = watcher.communicate()
    assert runs(state) > before and "Traceback" not in err and "401" not in err and "403" not in err, err[
        -800:
    ]


@pytest.mark.parametrize(
    ("command", "args", "problem"),
    [
        ("gke-gcloud-auth-plugin", [], "exec plugin gke-gcloud-auth-plugin exited with 1"),
        (
            "aws",
            ["--region", "eu-west-1", "eks", "get-token", "--cluster-name", "demo"],
            "exec plugin aws exited with",
        ),
    ],
    ids=["gke", "eks"],
)
async def test_the_real_cloud_plugins_fail_in_one_line_without_their_login(
    tmp_path: Path, command: str, args: list[str], problem: str
) -> None:
    """The kubeconfigs `gcloud container clusters get-credentials` and `aws eks update-kubeconfig` write, on a
    machine where nobody logged in: the plugin's own first line, no hang."""
    if shutil.which(command) is None:
        pytest.skip(f"{command} is not installed")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True},
                    }
                ],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
                "users": [
                    {
                        "name": "u",
                        "user": {
                            "exec": {
                                "apiVersion": V1BETA1,
                                "command": command,
                                "args": args,
                                "provideClusterInfo": True,
                                "interactiveMode": "IfAvailable",
                                "env": [{"name": "HOME", "value": str(tmp_path)}],  # no stored login
                            }
                        },
                    }
                ],
            }
        )
    )
    with pytest.raises(UserError) as info:
        await KubeClient.from_kubeconfig(kubeconfig, exec_timeout=60)
    assert problem in str(info.value) and "\n" not in str(info.value)
