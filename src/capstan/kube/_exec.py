"""Exec credential plugins (``users[].user.exec`` in a kubeconfig): how EKS, GKE and AKS clusters hand out tokens.

lightkube 1.0 runs a plugin for ``client.authentication.k8s.io/v1alpha1`` and ``v1beta1`` only (not ``v1``, which
current ``aws eks``, ``gke-gcloud-auth-plugin`` and ``kubelogin`` write), without a timeout (a plugin waiting for a
browser login hangs the process), without ``KUBERNETES_EXEC_INFO``, and it ignores
``status.expirationTimestamp`` (a token is only replaced after a request failed with 401). This module does what
client-go does: the plugin is run non-interactively with a deadline, its answer is checked (kind, apiVersion,
token), the token is cached until shortly before it expires and replaced on a 401, and one failure is one line.

The core is pure (:func:`parse_exec_credential`, :func:`exec_info`, :func:`should_refresh`); :class:`ExecAuth` is
the thin shell that runs the process and plugs into httpx2 as an ``Auth``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncGenerator, Callable, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2

from capstan.kube._time import parse_timestamp

SUPPORTED_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
DEFAULT_EXEC_TIMEOUT_S = 30.0
MAX_OUTPUT_BYTES = 1024 * 1024
_REFRESH_MARGIN_S = 60.0


class ExecCredentialError(Exception):
    """The plugin could not give a credential; the message is one line naming the plugin and the problem."""


@dataclass(frozen=True)
class ExecConfig:
    """The ``exec`` section of a kubeconfig user."""

    api_version: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    interactive_mode: str = "IfAvailable"
    provide_cluster_info: bool = False
    install_hint: str = ""

    @classmethod
    def from_kubeconfig(cls, raw: Any) -> ExecConfig:
        """Read and check the raw ``exec`` mapping; a ValueError says which field is wrong."""
        if not isinstance(raw, Mapping):
            raise ValueError("exec must be a mapping")
        api_version = raw.get("apiVersion")
        if api_version not in SUPPORTED_API_VERSIONS:
            hint = (
                " (v1alpha1 was removed in Kubernetes 1.24)" if str(api_version).endswith("v1alpha1") else ""
            )
            raise ValueError(
                f"exec apiVersion {api_version!r} is not supported{hint}; use one of {', '.join(SUPPORTED_API_VERSIONS)}"
            )
        command = raw.get("command")
        if not isinstance(command, str) or not command:
            raise ValueError("exec.command must be a non-empty string")
        args = raw.get("args") or []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ValueError("exec.args must be a list of strings")
        env_items = raw.get("env") or []
        env: list[tuple[str, str]] = []
        if not isinstance(env_items, list):
            raise ValueError("exec.env must be a list of {name, value}")
        for item in env_items:
            if not (isinstance(item, Mapping) and isinstance(item.get("name"), str) and "value" in item):
                raise ValueError("exec.env must be a list of {name, value}")
            env.append((item["name"], str(item["value"])))
        mode = raw.get("interactiveMode") or "IfAvailable"
        if mode not in ("Never", "IfAvailable", "Always"):
            raise ValueError(f"exec.interactiveMode {mode!r}: expected Never, IfAvailable or Always")
        return cls(
            api_version=str(api_version),
            command=command,
            args=tuple(args),
            env=tuple(env),
            interactive_mode=str(mode),
            provide_cluster_info=bool(raw.get("provideClusterInfo", False)),
            install_hint=str(raw.get("installHint") or ""),
        )


@dataclass(frozen=True)
class Credential:
    token: str
    expires_at: float | None
    """Epoch seconds from ``status.expirationTimestamp``; None: valid until the API server refuses it."""
    obtained_at: float


def exec_info(config: ExecConfig, cluster: Mapping[str, Any] | None) -> str:
    """The ``KUBERNETES_EXEC_INFO`` the plugin reads: never interactive; the cluster when it asks for it
    (``provideClusterInfo``), its CA given as data as client-go does."""
    spec: dict[str, Any] = {"interactive": False}
    if config.provide_cluster_info and cluster is not None:
        spec["cluster"] = cluster
    return json.dumps({"apiVersion": config.api_version, "kind": "ExecCredential", "spec": spec})


def cluster_info(cluster: Mapping[str, Any], base_dir: Path) -> dict[str, Any]:
    """A kubeconfig cluster as ExecCredential's ``spec.cluster`` (a CA file is read into ``certificate-authority-data``)."""
    out: dict[str, Any] = {"server": cluster.get("server", "")}
    ca_data = cluster.get("certificate-authority-data")
    ca_file = cluster.get("certificate-authority")
    if ca_data:
        out["certificate-authority-data"] = ca_data
    elif ca_file:
        with contextlib.suppress(OSError):
            out["certificate-authority-data"] = base64.b64encode(
                (base_dir / str(ca_file)).read_bytes()
            ).decode()
    for key in ("insecure-skip-tls-verify", "tls-server-name", "proxy-url"):
        if key in cluster:
            out[key] = cluster[key]
    for ext in cluster.get("extensions") or []:
        if isinstance(ext, Mapping) and ext.get("name") == "client.authentication.k8s.io/exec":
            out["config"] = ext.get("extension")
    return out


def parse_exec_credential(output: bytes, config: ExecConfig, now: float) -> Credential:
    """Check a plugin's standard output and take its token; :class:`ExecCredentialError` says what is wrong."""
    name = Path(config.command).name
    try:
        obj = json.loads(output)
    except (ValueError, UnicodeDecodeError) as exc:
        # NOTE: what it printed is not shown: a plugin's standard output is where its secrets are
        said = f"invalid JSON: {exc}" if output.strip() else "it printed nothing"
        raise ExecCredentialError(f"exec plugin {name} did not print an ExecCredential ({said})") from None
    if not isinstance(obj, dict) or obj.get("kind") != "ExecCredential":
        raise ExecCredentialError(f"exec plugin {name} printed JSON that is not an ExecCredential")
    if obj.get("apiVersion") != config.api_version:
        raise ExecCredentialError(
            f"exec plugin {name} answered with apiVersion {obj.get('apiVersion')!r}, "
            f"the kubeconfig asks for {config.api_version!r}"
        )
    status = obj.get("status")
    if not isinstance(status, dict):
        raise ExecCredentialError(f"exec plugin {name} printed an ExecCredential without status")
    token = status.get("token")
    if not isinstance(token, str) or not token:
        if status.get("clientCertificateData"):
            raise ExecCredentialError(
                f"exec plugin {name} gave a client certificate; only tokens are supported for now"
            )
        raise ExecCredentialError(f"exec plugin {name} printed an ExecCredential without status.token")
    if any(c in token for c in "\r\n"):
        raise ExecCredentialError(f"exec plugin {name} printed a token with a line break")
    expires_at = None
    raw_expiry = status.get("expirationTimestamp")
    if raw_expiry:
        expires_at = parse_timestamp(str(raw_expiry))
        if expires_at is None:
            raise ExecCredentialError(
                f"exec plugin {name}: status.expirationTimestamp {raw_expiry!r} is not an RFC 3339 time"
            )
    return Credential(token=token, expires_at=expires_at, obtained_at=now)


def should_refresh(credential: Credential | None, now: float) -> bool:
    """Run the plugin again: no credential yet, or it expires within its refresh margin (a tenth of its life, at
    most a minute), so no request goes out with a token that lapses on the way."""
    if credential is None:
        return True
    if credential.expires_at is None:
        return False
    life = max(0.0, credential.expires_at - credential.obtained_at)
    return now >= credential.expires_at - min(_REFRESH_MARGIN_S, life / 10)


def resolve_command(command: str, base_dir: Path) -> str:
    """A relative command with a path separator is relative to the kubeconfig's directory (client-go's rule);
    a bare name is looked up on PATH."""
    if os.sep in command and not Path(command).is_absolute():
        return str(base_dir / command)
    return command


class ExecAuth(httpx2.Auth):
    """Bearer tokens from an exec plugin, for an ``httpx2.AsyncClient`` (see the module docstring)."""

    def __init__(
        self,
        config: ExecConfig,
        *,
        base_dir: Path,
        cluster: Mapping[str, Any] | None = None,
        timeout_s: float = DEFAULT_EXEC_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.base_dir = base_dir
        self.cluster = cluster
        self.timeout_s = timeout_s
        self.clock = clock
        self.runs = 0
        """How often the plugin ran (tests and metrics)."""
        self._credential: Credential | None = None
        self._lock = asyncio.Lock()

    @property
    def name(self) -> str:
        return Path(self.config.command).name

    async def token(self, *, replacing: str | None = None) -> str:
        """The current token, running the plugin when there is none, it is about to expire, or it is
        ``replacing`` (the API server refused it). Concurrent callers share one run."""
        async with self._lock:
            current = self._credential
            stale = current is not None and replacing is not None and current.token == replacing
            if stale or should_refresh(current, self.clock()):
                self._credential = current = await self._run()
            assert current is not None
            return current.token

    async def _run(self) -> Credential:
        if self.config.interactive_mode == "Always":
            raise ExecCredentialError(
                f"exec plugin {self.name} needs an interactive terminal (interactiveMode: Always), which a "
                "non-interactive process cannot give: log in with it by hand first, or use interactiveMode IfAvailable"
            )
        argv = [resolve_command(self.config.command, self.base_dir), *self.config.args]
        env = dict(os.environ)
        env.update(self.config.env)
        env["KUBERNETES_EXEC_INFO"] = exec_info(self.config, self.cluster)
        self.runs += 1
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                start_new_session=True,  # its own process group: a timeout kills what it started too
            )
        except FileNotFoundError:
            hint = (
                f" ({self.config.install_hint.strip().splitlines()[0]})"
                if self.config.install_hint.strip()
                else ""
            )
            raise ExecCredentialError(f"exec plugin {argv[0]!r} not found{hint}") from None
        except OSError as exc:
            raise ExecCredentialError(f"exec plugin {argv[0]!r} cannot run ({exc.strerror or exc})") from None
        try:
            stdout, stderr = await asyncio.wait_for(proc.communicate(), self.timeout_s)
        except TimeoutError:
            await _kill(proc)
            raise ExecCredentialError(
                f"exec plugin {self.name} gave no answer within {self.timeout_s:g} s (stopped)"
            ) from None
        except BaseException:
            await _kill(proc)
            raise
        if proc.returncode != 0:
            said = stderr.decode("utf-8", "replace").strip().splitlines()
            detail = f": {said[0][:300]}" if said else ""
            raise ExecCredentialError(f"exec plugin {self.name} exited with {proc.returncode}{detail}")
        if len(stdout) > MAX_OUTPUT_BYTES:
            raise ExecCredentialError(f"exec plugin {self.name} printed more than {MAX_OUTPUT_BYTES} bytes")
        return parse_exec_credential(stdout, self.config, self.clock())

    def sync_auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        raise RuntimeError("ExecAuth serves asynchronous clients only")

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        token = await self.token()
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code == 401:
            # the token was revoked or expired early: one new one, one retry (client-go does the same)
            fresh = await self.token(replacing=token)
            if fresh != token:
                request.headers["Authorization"] = f"Bearer {fresh}"
                yield request


async def _kill(proc: asyncio.subprocess.Process) -> None:
    """Stop a plugin and everything it started (its process group), and reap it."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(TimeoutError, ProcessLookupError):
        await asyncio.wait_for(proc.wait(), 5.0)
