"""Sandbox pieces that need no processes: the spec, node manifests, certificates, the build's preconditions."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from cryptography import x509

from capstan.errors import UserError
from capstan.sandbox import Sandbox, SandboxSpec, load_spec, node_manifests
from capstan.sandbox.build import GoBuilder
from capstan.sandbox.pki import create_pki, write_kubeconfig

pytestmark = pytest.mark.unit


def test_default_spec_has_cpu_and_gpu_nodes_with_nfd_labels() -> None:
    nodes = {n["metadata"]["name"]: n for n in node_manifests(SandboxSpec())}
    assert {"cpu-0", "cpu-1", "gpu-h100-0", "gpu-h100-1", "gpu-l4-0"} <= set(nodes)
    h100 = nodes["gpu-h100-0"]
    assert h100["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert h100["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert h100["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert h100["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"
    assert h100["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert h100["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
    assert "nvidia.com/gpu" not in nodes["cpu-0"]["status"]["capacity"]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            "node_pools:\n  - name: a\n    count: 1\n    gpus: 8\n",
            "node_pools.0.gpus: Extra inputs are not permitted",
        ),
        ("node_pools:\n  - name: Bad_Name\n    count: 1\n", "is not a DNS label"),
        ("node_pools:\n  - name: a\n    count: 1\n    memory: lots\n", "is not a Kubernetes quantity"),
        ("event_ttl: forever\n", "is not a duration"),
        ("node_pools:\n  - {name: a, count: 1}\n  - {name: a, count: 2}\n", "repeated: a"),
        ("node_pools: [\n", "invalid YAML"),
        ("scheduler_pod_max_backoff_s: 0\n", "greater than or equal to 1"),
        ("scheduler_pod_initial_backoff_s: 5\nscheduler_pod_max_backoff_s: 2\n", "is below"),
    ],
)
def test_bad_spec_is_one_line_naming_file_and_key(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as info:
        load_spec(path)
    assert str(path) in str(info.value) and fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_pki_chains_to_the_ca_and_names_loopback(tmp_path: Path) -> None:
    pki = create_pki(tmp_path)
    ca = x509.load_pem_x509_certificate(pki.ca.cert.read_bytes())
    server = x509.load_pem_x509_certificate(pki.apiserver.cert.read_bytes())
    server.verify_directly_issued_by(ca)
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "kubernetes.default.svc" in sans.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "10.96.0.1"]
    admin = x509.load_pem_x509_certificate(pki.clients["admin"].cert.read_bytes())
    orgs = [a.value for a in admin.subject.get_attributes_for_oid(x509.oid.NameOID.ORGANIZATION_NAME)]
    assert orgs == ["system:masters"]
    assert oct(pki.ca.key.stat().st_mode & 0o777) == "0o600"
    # The client certificate and key load together, as an HTTPS client would use them.
    ctx = ssl.create_default_context(cafile=str(pki.ca.cert))
    ctx.load_cert_chain(str(pki.clients["admin"].cert), str(pki.clients["admin"].key))
    write_kubeconfig(
        tmp_path / "k", "https://127.0.0.1:6443", pki.ca.cert, pki.clients["admin"], user="u", context="c"
    )
    assert "certificate-authority-data" in (tmp_path / "k").read_text()


def test_missing_go_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match=r"Go toolchain is required .* install Go"):
        GoBuilder(tmp_path)


def test_down_and_status_without_a_sandbox(tmp_path: Path) -> None:
    box = Sandbox(tmp_path / "none")
    assert box.down() == []
    assert box.status() == (None, [])
    assert not box.is_up()


def test_corrupt_state_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text("{not json")
    with pytest.raises(UserError, match="unreadable sandbox state"):
        Sandbox(tmp_path).load_state()
