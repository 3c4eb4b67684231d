"""Certificates, keys and kubeconfigs for the local control plane.

One self-signed CA signs the API server's serving certificate, a client certificate per component (its identity is
the certificate's CN/O, as kubeadm does it) and kwok's kubelet serving certificate. ECDSA P-256 keys keep generation
in milliseconds. Every file is written with 0600 permissions into the sandbox's state directory.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import ipaddress
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVICE_CLUSTER_IP = "10.96.0.1"
_VALIDITY = dt.timedelta(days=3650)


@dataclasses.dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


@dataclasses.dataclass(frozen=True)
class Pki:
    """Paths of everything the components need."""

    ca: KeyPair
    apiserver: KeyPair
    kubelet_serving: KeyPair
    sa_private: Path
    sa_public: Path
    clients: dict[str, KeyPair]


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(0o600)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _sign(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    server_names: tuple[str, ...] = (),
    client: bool = False,
    now: dt.datetime,
) -> x509.Certificate:
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
    else:
        builder = builder.add_extension(
            x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True
        )
        usages = []
        if server_names:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if server_names:
        sans: list[x509.GeneralName] = []
        for name in server_names:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                sans.append(x509.DNSName(name))
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


# Client identities: (common name, organisations). system:masters is the built-in cluster-admin group.
CLIENT_IDENTITIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "admin": ("capstan-admin", ("system:masters",)),
    "controller-manager": ("system:kube-controller-manager", ()),
    "scheduler": ("system:kube-scheduler", ()),
    "kwok": ("kwok-controller", ("system:masters",)),
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", ("system:masters",)),
    # The aggregation layer's proxy identity (kube-apiserver --proxy-client-cert-file), trusted through the
    # requestheader CA so controllers stop complaining about a missing front-proxy bundle.
    "front-proxy-client": ("front-proxy-client", ()),
}


def create_pki(directory: Path, now: dt.datetime | None = None) -> Pki:
    """Generate a fresh CA and every certificate and key the sandbox needs under ``directory``."""
    now = now or dt.datetime.now(dt.UTC)
    ca_key = _key()
    ca_name = _name("capstan-sandbox-ca")
    ca_cert = _sign(ca_name, ca_key, ca_name, ca_key, ca=True, now=now)
    ca = KeyPair(directory / "ca.crt", directory / "ca.key")
    _write(ca.cert, ca_cert.public_bytes(serialization.Encoding.PEM))
    _write(ca.key, _key_pem(ca_key))

    def issue(
        name: str, subject: x509.Name, *, server_names: tuple[str, ...] = (), client: bool = False
    ) -> KeyPair:
        key = _key()
        cert = _sign(subject, key, ca_name, ca_key, server_names=server_names, client=client, now=now)
        pair = KeyPair(directory / f"{name}.crt", directory / f"{name}.key")
        _write(pair.cert, cert.public_bytes(serialization.Encoding.PEM))
        _write(pair.key, _key_pem(key))
        return pair

    apiserver = issue(
        "apiserver",
        _name("kube-apiserver"),
        server_names=(
            "127.0.0.1",
            "localhost",
            SERVICE_CLUSTER_IP,
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ),
    )
    kubelet = issue("kubelet-serving", _name("kwok-kubelet"), server_names=("127.0.0.1", "localhost"))
    clients = {
        ident: issue(f"client-{ident}", _name(cn, orgs), client=True)
        for ident, (cn, orgs) in CLIENT_IDENTITIES.items()
    }
    sa_key = _key()
    sa_private, sa_public = directory / "sa.key", directory / "sa.pub"
    _write(sa_private, _key_pem(sa_key))
    _write(
        sa_public,
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )
    return Pki(ca, apiserver, kubelet, sa_private, sa_public, clients)


def write_kubeconfig(path: Path, server: str, ca: Path, client: KeyPair, *, user: str, context: str) -> None:
    """A self-contained kubeconfig (certificates embedded) for one identity."""

    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server, "certificate-authority-data": b64(ca)}}],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": b64(client.cert), "client-key-data": b64(client.key)},
            }
        ],
        "contexts": [{"name": context, "context": {"cluster": context, "user": user}}],
        "current-context": context,
    }
    _write(path, yaml.safe_dump(doc, sort_keys=False).encode())
