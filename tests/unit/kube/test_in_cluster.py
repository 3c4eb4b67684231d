"""Which cluster a command reaches without a kubeconfig: the one its pod runs in, or one line saying why not."""

from __future__ import annotations

from pathlib import Path

import pytest

from capstan.cli.main import main
from capstan.errors import UserError
from capstan.kube import KubeClient, in_a_pod

pytestmark = pytest.mark.unit


async def test_outside_a_pod_in_cluster_is_one_line() -> None:
    assert not in_a_pod({}) and in_a_pod(
        {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    )
    with pytest.raises(
        UserError, match=r"^in-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set"
    ):
        await KubeClient.in_cluster(environ={})


async def test_a_pod_without_its_token_or_ca_is_one_line(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(UserError, match=f"^in-cluster: {tmp_path}/token: no such file"):
        await KubeClient.in_cluster(service_account_dir=tmp_path, environ=env)
    (tmp_path / "token").write_text("t")
    with pytest.raises(UserError, match=f"^in-cluster: {tmp_path}/ca.crt: no such file"):
        await KubeClient.in_cluster(service_account_dir=tmp_path, environ=env)


async def test_an_ipv6_service_host_is_bracketed(tmp_path: Path) -> None:
    import certifi

    (tmp_path / "token").write_text("t")
    (tmp_path / "ca.crt").write_bytes(Path(certifi.where()).read_bytes())  # noqa: ASYNC240 (any valid CA bundle)
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}
    client = await KubeClient.in_cluster(service_account_dir=tmp_path, environ=env)
    try:
        assert (
            client.host.startswith("https://[fd00::1]:6443") and client.source == "in-cluster [fd00::1]:6443"
        )
    finally:
        await client.close()


def test_restarts_run_without_a_kubeconfig_outside_a_pod_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    code = 0
    try:
        main(["restarts", "run", "--config", str(tmp_path / "r.yaml"), "--store", str(tmp_path / "h.db")])
    except SystemExit as exc:
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--kubeconfig: not given" in err, err
    assert not (tmp_path / "h.db").exists()
