"""Exec credential plugins: the pure parts (config, the plugin's answer, when to refresh) and the shell that runs a
real plugin process (tests/unit/kube/exec_plugin.py) with a deadline. The same plugin against the sandbox's API
server is tests/integration/kube/test_exec_credentials.py."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import pytest

from capstan.errors import UserError
from capstan.kube import KubeClient
from capstan.kube._exec import (
    Credential,
    ExecAuth,
    ExecConfig,
    ExecCredentialError,
    parse_exec_credential,
    should_refresh,
)
from tests.unit.kube.exec_plugin import runs, write_kubeconfig

pytestmark = pytest.mark.unit

V1 = "client.authentication.k8s.io/v1"
V1BETA1 = "client.authentication.k8s.io/v1beta1"
CONFIG = ExecConfig(api_version=V1, command="/usr/bin/aws", args=("eks", "get-token"))


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (
            {"apiVersion": "client.authentication.k8s.io/v1alpha1", "command": "x"},
            "removed in Kubernetes 1.24",
        ),
        ({"apiVersion": "v1", "command": "x"}, "apiVersion 'v1' is not supported"),
        ({"apiVersion": V1}, "exec.command must be a non-empty string"),
        ({"apiVersion": V1, "command": "x", "args": "get-token"}, "exec.args must be a list of strings"),
        (
            {"apiVersion": V1, "command": "x", "env": [{"name": "A"}]},
            "exec.env must be a list of {name, value}",
        ),
        ({"apiVersion": V1, "command": "x", "interactiveMode": "Sometimes"}, "interactiveMode 'Sometimes'"),
    ],
)
def test_a_bad_exec_section_says_which_field(raw: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        ExecConfig.from_kubeconfig(raw)


def test_both_api_versions_are_read() -> None:
    for version in (V1, V1BETA1):
        cfg = ExecConfig.from_kubeconfig(
            {"apiVersion": version, "command": "aws", "args": ["eks"], "env": [{"name": "A", "value": 1}]}
        )
        assert (cfg.api_version, cfg.args, cfg.env) == (version, ("eks",), (("A", "1"),))


def _answer(status: object, *, version: str = V1, kind: str = "ExecCredential") -> bytes:
    return json.dumps({"apiVersion": version, "kind": kind, "status": status}).encode()


def test_a_good_answer_gives_the_token_and_its_expiry() -> None:
    cred = parse_exec_credential(
        _answer({"token": "k8s-aws-v1.abc", "expirationTimestamp": "2030-01-01T00:00:00Z"}), CONFIG, 5.0
    )
    assert cred == Credential("k8s-aws-v1.abc", 1893456000.0, 5.0)
    assert parse_exec_credential(_answer({"token": "t"}), CONFIG, 5.0).expires_at is None


@pytest.mark.parametrize(
    ("output", "problem"),
    [
        (b"Open https://login.example to sign in\n", "did not print an ExecCredential (invalid JSON"),
        (b"", "it printed nothing"),
        (b"token: k8s-aws-v1.secret", "invalid JSON: Expecting value: line 1 column 1 (char 0))"),
        (_answer({"token": "t"}, kind="Status"), "printed JSON that is not an ExecCredential"),
        (
            _answer({"token": "t"}, version=V1BETA1),
            "answered with apiVersion 'client.authentication.k8s.io/v1beta1'",
        ),
        (_answer(None), "without status"),
        (_answer({"token": ""}), "without status.token"),
        (_answer({"clientCertificateData": "x", "clientKeyData": "y"}), "gave a client certificate"),
        (_answer({"token": "t", "expirationTimestamp": "tomorrow"}), "'tomorrow' is not an RFC 3339 time"),
        (_answer({"token": "a\nb"}), "a token with a line break"),
    ],
)
def test_a_bad_answer_is_one_line_naming_the_plugin(output: bytes, problem: str) -> None:
    with pytest.raises(ExecCredentialError) as info:
        parse_exec_credential(output, CONFIG, 0.0)
    assert str(info.value).startswith("exec plugin aws") and problem in str(info.value)
    assert "secret" not in str(info.value)  # what a plugin prints is never echoed
    assert "\n" not in str(info.value)


def test_a_token_is_refreshed_a_tenth_of_its_life_before_it_expires_at_most_a_minute() -> None:
    short = Credential("t", expires_at=100.0, obtained_at=0.0)  # 100 s: refreshed from 90 s
    assert not should_refresh(short, 89.9) and should_refresh(short, 90.0)
    long = Credential("t", expires_at=3600.0, obtained_at=0.0)  # an hour: from a minute before
    assert not should_refresh(long, 3539.0) and should_refresh(long, 3540.0)
    assert not should_refresh(Credential("t", None, 0.0), 1e12)
    assert should_refresh(None, 0.0)


def _auth(tmp_path: Path, mode: str = "ok", ttl: float | None = None, **kw: object) -> tuple[ExecAuth, Path]:
    state = tmp_path / "state"
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", state, mode=mode, ttl=ttl)
    raw = json.loads(kubeconfig.read_text())["users"][0]["user"]["exec"]
    cluster = {"server": "https://127.0.0.1:1"}
    return ExecAuth(ExecConfig.from_kubeconfig(raw), base_dir=tmp_path, cluster=cluster, **kw), state  # type: ignore[arg-type]


async def test_the_plugin_runs_once_while_its_token_is_good(tmp_path: Path) -> None:
    auth, state = _auth(tmp_path)
    (state / "token").write_text("first")
    assert await auth.token() == "first" and await auth.token() == "first" and runs(state) == 1
    info = json.loads((state / "exec_info.json").read_text())
    assert info == {
        "apiVersion": V1,
        "kind": "ExecCredential",
        "spec": {"interactive": False, "cluster": {"server": "https://127.0.0.1:1"}},
    }


async def test_the_plugin_runs_again_shortly_before_its_token_expires(tmp_path: Path) -> None:
    """A token for an hour (status.expirationTimestamp) is replaced a minute before it expires (clock injected)."""
    import time

    now = [time.time()]
    auth, state = _auth(tmp_path, ttl=3600, clock=lambda: now[0])
    await auth.token()
    now[0] += 3530
    await auth.token()
    assert runs(state) == 1
    now[0] += 20
    await auth.token()
    assert runs(state) == 2


async def test_a_refused_token_is_replaced_once(tmp_path: Path) -> None:
    """The API server answers 401 to the plugin's first token: the plugin runs again and the request is retried
    with the new token, once (a plugin whose every token is refused does not loop)."""
    auth, state = _auth(tmp_path, mode="bogus-first")
    (state / "token").write_text("good")
    seen: list[str] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.headers["Authorization"])
        return httpx2.Response(200 if request.headers["Authorization"] == "Bearer good" else 401)

    async with httpx2.AsyncClient(transport=httpx2.MockTransport(handler), auth=auth) as client:
        assert (await client.get("https://api.example/api")).status_code == 200
        assert seen == ["Bearer not-a-valid-token", "Bearer good"] and runs(state) == 2
        (state / "token").write_text("revoked")
        auth._credential = None  # the next token the plugin gives is refused too
        assert (await client.get("https://api.example/api")).status_code == 401
        assert runs(state) == 4  # one new token for the 401, then the answer is given back


@pytest.mark.parametrize(
    ("mode", "problem"),
    [
        ("fail", "exited with 3: error: the SSO session has expired; run 'cloud login'"),
        ("badjson", "did not print an ExecCredential (invalid JSON"),
        ("wrongversion", "answered with apiVersion 'client.authentication.k8s.io/v1alpha1'"),
        ("hang", "gave no answer within 1 s (stopped)"),
    ],
)
async def test_a_failing_plugin_is_one_line_from_the_kubeconfig(
    tmp_path: Path, mode: str, problem: str
) -> None:
    state = tmp_path / "state"
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", state, mode=mode)
    with pytest.raises(UserError) as info:
        await KubeClient.from_kubeconfig(kubeconfig, exec_timeout=1.0)
    message = str(info.value)
    assert (
        message.startswith(f"kubeconfig {kubeconfig}: user 'plugin-user': exec plugin ")
        and problem in message
    )
    assert "\n" not in message and runs(state) == 1


async def test_a_missing_plugin_names_it_with_its_install_hint(tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", tmp_path / "state")
    data = json.loads(kubeconfig.read_text())
    data["users"][0]["user"]["exec"].update(
        command="no-such-auth-plugin-for-capstan",
        args=[],
        installHint="Install it with: gcloud components install\nmore",
    )
    kubeconfig.write_text(json.dumps(data))
    with pytest.raises(
        UserError, match=r"exec plugin 'no-such-auth-plugin-for-capstan' not found \(Install it with: gcloud"
    ):
        await KubeClient.from_kubeconfig(kubeconfig)


async def test_a_plugin_that_needs_a_terminal_is_refused(tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", tmp_path / "state", interactiveMode="Always")
    with pytest.raises(UserError, match=r"needs an interactive terminal \(interactiveMode: Always\)"):
        await KubeClient.from_kubeconfig(kubeconfig)
    assert runs(tmp_path / "state") == 0


async def test_a_relative_command_is_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    """client-go's rule: ``./bin/plugin`` in /etc/kube/config is /etc/kube/bin/plugin, wherever one runs from."""
    plugin = tmp_path / "bin" / "plugin"
    plugin.parent.mkdir()
    plugin.write_text(
        '#!/bin/sh\necho \'{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", '
        '"status": {"token": "from-sh"}}\'\n'
    )
    plugin.chmod(0o755)
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", tmp_path / "state")
    data = json.loads(kubeconfig.read_text())
    data["users"][0]["user"]["exec"].update(command="./bin/plugin", args=[])
    kubeconfig.write_text(json.dumps(data))
    client = await KubeClient.from_kubeconfig(kubeconfig)
    try:
        assert client.exec_auth is not None and await client.exec_auth.token() == "from-sh"
    finally:
        await client.close()
