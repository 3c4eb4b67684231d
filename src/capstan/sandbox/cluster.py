"""Run a real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok.

The processes are children started in their own session so they outlive ``capstan sandbox up``; their pids, ports and
command lines are kept in ``state.json`` in the sandbox directory, and ``down`` stops exactly those pids (checking
that each pid still runs the binary we started, so a recycled pid is never signalled).

Ports are chosen free by the kernel; if a component still loses a race for its port, the whole start is retried
with new ports.

NOTE: a little over 600 lines on purpose: :class:`Sandbox` is one lifecycle (start, wait until serving, stop,
restart one component), and every step reads and writes the same ``state.json`` and makes the same check that a
pid still runs the binary started, so the steps stay in one class beside that state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from capstan.errors import UserError
from capstan.sandbox.build import Toolchain
from capstan.sandbox.datastores import free_port
from capstan.sandbox.pki import Pki, create_pki, write_kubeconfig
from capstan.sandbox.spec import KWOK_NODE_ANNOTATION, KWOK_NODE_ANNOTATION_VALUE, SandboxSpec, node_manifests

log = logging.getLogger(__name__)

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
STATE_FILE = "state.json"
_KWOK_CRDS = ("logs", "clusterlogs")


def default_state_dir(name: str = "default") -> Path:
    """``$CAPSTAN_STATE_DIR/sandbox/<name>`` or ``~/.local/state/capstan/sandbox/<name>``."""
    base = os.environ.get("CAPSTAN_STATE_DIR")
    root = (
        Path(base)
        if base
        else Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "capstan"
    )
    return root / "sandbox" / name


def port_again(previous: int | None) -> int:
    """``previous`` if it is free again, else a new free port. A sandbox that comes up again on its old data keeps
    its ports where it can: kwok's node port is written into each node's status (the kubelet endpoint the API server
    dials for logs) when kwok first initialises the node, and is not rewritten later."""
    if previous:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", previous))
            except OSError:
                pass
            else:
                return previous
    return free_port()


@dataclasses.dataclass
class ProcessInfo:
    name: str
    pid: int
    argv: list[str]
    log_file: str


@dataclasses.dataclass
class SandboxState:
    """What ``up`` started; written to ``state.json``."""

    name: str
    directory: str
    kubeconfig: str
    server: str
    ports: dict[str, int]
    processes: list[ProcessInfo]
    kubernetes_version: str
    started_at: float
    ready_seconds: float = 0.0
    log_dir: str = ""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> SandboxState:
        data = json.loads(text)
        data["processes"] = [ProcessInfo(**p) for p in data["processes"]]
        return cls(**data)


@dataclasses.dataclass(frozen=True)
class ComponentStatus:
    name: str
    pid: int
    running: bool


def _pid_runs(pid: int, binary: str) -> bool:
    """True if ``pid`` is alive and is the executable we started (guards against recycled pids)."""
    try:
        exe = str(Path(f"/proc/{pid}/exe").readlink())
    except OSError:
        return False
    return Path(exe.removesuffix(" (deleted)")).name == Path(binary).name


class Sandbox:
    """One local cluster living in ``directory``."""

    def __init__(self, directory: Path, toolchain: Toolchain | None = None) -> None:
        self.directory = directory
        self.toolchain = toolchain

    # ---- state -------------------------------------------------------------------------------------------------
    @property
    def state_path(self) -> Path:
        return self.directory / STATE_FILE

    def load_state(self) -> SandboxState | None:
        try:
            return SandboxState.from_json(self.state_path.read_text())
        except FileNotFoundError:
            return None
        except (ValueError, TypeError, KeyError) as exc:
            raise UserError(
                f"{self.state_path}: unreadable sandbox state ({exc}); remove the directory"
            ) from None

    def status(self) -> tuple[SandboxState | None, list[ComponentStatus]]:
        state = self.load_state()
        if state is None:
            return None, []
        return state, [ComponentStatus(p.name, p.pid, _pid_runs(p.pid, p.argv[0])) for p in state.processes]

    def is_up(self) -> bool:
        state, comps = self.status()
        return state is not None and len(comps) == len(COMPONENTS) and all(c.running for c in comps)

    # ---- up ----------------------------------------------------------------------------------------------------
    def up(
        self,
        spec: SandboxSpec,
        *,
        timeout: float = 120.0,
        on_step: Callable[[str], None] | None = None,
        extra_apiserver_args: list[str] | None = None,
    ) -> SandboxState:
        """Start the cluster (or reuse a running one) and return once it can schedule pods onto kwok nodes."""
        step = on_step or (lambda msg: None)
        if self.is_up():
            state = self.load_state()
            assert state is not None
            step("sandbox already up: reusing it")
            return state
        if self.load_state() is not None:
            self.down()  # stale or partly running: clean up first
        if self.toolchain is None:
            raise UserError("no control plane toolchain given: run `capstan sandbox build`")
        last_error: UserError | None = None
        for attempt in range(3):
            try:
                return self._start(spec, timeout, step, extra_apiserver_args or [])
            except _PortTaken as exc:
                last_error = UserError(str(exc))
                log.warning("port race, retrying with new ports", extra={"attempt": attempt + 1})
                self.down()
            except BaseException:
                self.down()
                raise
        assert last_error is not None
        raise last_error

    def _start(
        self, spec: SandboxSpec, timeout: float, step: Callable[[str], None], extra_apiserver_args: list[str]
    ) -> SandboxState:
        assert self.toolchain is not None
        tc = self.toolchain
        t0 = time.monotonic()
        deadline = t0 + timeout
        d = self.directory
        d.mkdir(parents=True, exist_ok=True)
        logs = d / "logs"
        logs.mkdir(exist_ok=True)
        (d / "pod-logs").mkdir(exist_ok=True)
        step("generating certificates and kubeconfigs")
        pki = create_pki(d / "pki")
        before = self.load_state()
        old_ports = before.ports if before is not None else {}
        ports = {
            name: port_again(old_ports.get(name))
            for name in (
                "etcd-client",
                "etcd-peer",
                "apiserver",
                "controller-manager",
                "scheduler",
                "kwok",
                "kwok-metrics",
            )
        }
        server = f"https://127.0.0.1:{ports['apiserver']}"
        kubeconfigs = {}
        for ident in ("admin", "controller-manager", "scheduler", "kwok"):
            path = d / f"{ident}.kubeconfig"
            write_kubeconfig(
                path,
                server,
                pki.ca.cert,
                pki.clients[ident],
                user=f"capstan-{ident}",
                context=f"capstan-{spec.name}",
            )
            kubeconfigs[ident] = path
        state = SandboxState(
            name=spec.name,
            directory=str(d),
            kubeconfig=str(kubeconfigs["admin"]),
            server=server,
            ports=ports,
            processes=[],
            kubernetes_version=tc.kubernetes_version,
            started_at=time.time(),
            log_dir=str(logs),
        )

        def launch(name: str, argv: list[str]) -> None:
            log_path = logs / f"{name}.log"
            with log_path.open("ab") as out:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    cwd=d,
                )
            state.processes.append(ProcessInfo(name, proc.pid, argv, str(log_path)))
            self.state_path.write_text(state.to_json())

        # etcd
        step("starting etcd")
        etcd_url = f"http://127.0.0.1:{ports['etcd-client']}"
        launch(
            "etcd",
            [
                str(tc.binary("etcd")),
                "--name=capstan",
                f"--data-dir={d / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{ports['etcd-peer']}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{ports['etcd-peer']}",
                f"--initial-cluster=capstan=http://127.0.0.1:{ports['etcd-peer']}",
                "--quota-backend-bytes=8589934592",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self._wait("etcd", deadline, lambda: _http_ok(f"{etcd_url}/health"))

        step("starting kube-apiserver")
        launch("kube-apiserver", self._apiserver_argv(spec, pki, ports, etcd_url, extra_apiserver_args))
        self._wait("kube-apiserver", deadline, lambda: self._api_ok(pki, server, "/readyz"))

        step("installing kwok resources")
        crds = [tc.bin_dir.parent / "crds" / f"kwok.x-k8s.io_{c}.yaml" for c in _KWOK_CRDS]
        self.kubectl(["apply", "--server-side", *[arg for p in crds for arg in ("-f", str(p))]])

        step("starting kube-controller-manager, kube-scheduler and kwok")
        launch(
            "kube-controller-manager",
            [
                str(tc.binary("kube-controller-manager")),
                f"--kubeconfig={kubeconfigs['controller-manager']}",
                f"--authentication-kubeconfig={kubeconfigs['controller-manager']}",
                f"--authorization-kubeconfig={kubeconfigs['controller-manager']}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['controller-manager']}",
                f"--cert-dir={d / 'kcm-certs'}",
                f"--service-account-private-key-file={pki.sa_private}",
                f"--root-ca-file={pki.ca.cert}",
                f"--cluster-signing-cert-file={pki.ca.cert}",
                f"--cluster-signing-key-file={pki.ca.key}",
                "--use-service-account-credentials=true",
                "--leader-elect=false",
                "--controllers=*,-nodeipam",
                # a node is NotReady once its Lease is this old (the default, 50 s, fits the kubelet's 40 s Lease)
                f"--node-monitor-grace-period={max(50, spec.node_lease_duration_s * 5 // 4)}s",
                f"--kube-api-qps={spec.client_qps}",
                f"--kube-api-burst={spec.client_qps * 2}",
                "--concurrent-gc-syncs=5",
                "--v=1",
            ],
        )
        scheduler_client = [
            f"--kubeconfig={kubeconfigs['scheduler']}",
            "--leader-elect=false",
            f"--kube-api-qps={spec.client_qps}",
            f"--kube-api-burst={spec.client_qps * 2}",
        ]
        if (spec.scheduler_pod_initial_backoff_s, spec.scheduler_pod_max_backoff_s) != (1, 10):
            # the pod backoff has no flag: a configuration file, which then carries what the flags said
            config = d / "kube-scheduler.yaml"
            config.write_text(
                json.dumps(
                    {
                        "apiVersion": "kubescheduler.config.k8s.io/v1",
                        "kind": "KubeSchedulerConfiguration",
                        "clientConnection": {
                            "kubeconfig": str(kubeconfigs["scheduler"]),
                            "qps": spec.client_qps,
                            "burst": spec.client_qps * 2,
                        },
                        "leaderElection": {"leaderElect": False},
                        "podInitialBackoffSeconds": spec.scheduler_pod_initial_backoff_s,
                        "podMaxBackoffSeconds": spec.scheduler_pod_max_backoff_s,
                    }
                )
            )
            scheduler_client = [f"--config={config}"]
        launch(
            "kube-scheduler",
            [
                str(tc.binary("kube-scheduler")),
                *scheduler_client,
                f"--authentication-kubeconfig={kubeconfigs['scheduler']}",
                f"--authorization-kubeconfig={kubeconfigs['scheduler']}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['scheduler']}",
                f"--cert-dir={d / 'scheduler-certs'}",
                "--v=1",
            ],
        )
        kwok_config = d / "kwok.yaml"
        kwok_config.write_text("\n---\n".join(p.read_text() for p in tc.kwok_stages))
        launch(
            "kwok",
            [
                str(tc.binary("kwok")),
                f"--config={kwok_config}",
                f"--kubeconfig={kubeconfigs['kwok']}",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}",
                "--node-ip=127.0.0.1",
                f"--node-port={ports['kwok']}",
                f"--server-address=127.0.0.1:{ports['kwok']}",
                f"--tls-cert-file={pki.kubelet_serving.cert}",
                f"--tls-private-key-file={pki.kubelet_serving.key}",
                "--cidr=10.244.0.0/16",
                "--enable-crds=Logs,ClusterLogs",
                f"--node-lease-duration-seconds={spec.node_lease_duration_s}",
            ],
        )
        self._wait(
            "kube-controller-manager",
            deadline,
            lambda: _http_ok(f"https://127.0.0.1:{ports['controller-manager']}/healthz", verify=False),
        )
        self._wait(
            "kube-scheduler",
            deadline,
            lambda: _http_ok(f"https://127.0.0.1:{ports['scheduler']}/healthz", verify=False),
        )

        step(f"creating {sum(p.count for p in spec.node_pools)} kwok nodes")
        self.apply_nodes(spec)
        self._repoint_kubelet_endpoints(ports["kwok"])
        self._wait("kwok nodes Ready", deadline, lambda: self._nodes_ready(pki, server, spec))
        self._wait("default service account", deadline, lambda: self._default_sa(pki, server))
        state.ready_seconds = time.monotonic() - t0
        self.state_path.write_text(state.to_json())
        step(f"sandbox up in {state.ready_seconds:.1f} s")
        return state

    def _apiserver_argv(
        self, spec: SandboxSpec, pki: Pki, ports: dict[str, int], etcd_url: str, extra: list[str]
    ) -> list[str]:
        assert self.toolchain is not None
        return [
            str(self.toolchain.binary("kube-apiserver")),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={ports['apiserver']}",
            f"--tls-cert-file={pki.apiserver.cert}",
            f"--tls-private-key-file={pki.apiserver.key}",
            f"--client-ca-file={pki.ca.cert}",
            f"--service-account-key-file={pki.sa_public}",
            f"--service-account-signing-key-file={pki.sa_private}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--authorization-mode=Node,RBAC",
            "--allow-privileged=true",
            f"--event-ttl={spec.event_ttl}",
            f"--etcd-compaction-interval={spec.etcd_compaction_interval}",
            f"--kubelet-client-certificate={pki.clients['apiserver-kubelet-client'].cert}",
            f"--kubelet-client-key={pki.clients['apiserver-kubelet-client'].key}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--requestheader-client-ca-file={pki.ca.cert}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki.clients['front-proxy-client'].cert}",
            f"--proxy-client-key-file={pki.clients['front-proxy-client'].key}",
            "--profiling=false",
            "--v=1",
            *extra,
        ]

    # ---- helpers -----------------------------------------------------------------------------------------------
    def _wait(self, what: str, deadline: float, probe: Callable[[], bool]) -> None:
        """Poll ``probe`` until true; fail fast when one of our processes died, naming it with its log tail."""
        delay = 0.05
        while True:
            state = self.load_state()
            if state is not None:
                for p in state.processes:
                    if not _pid_runs(p.pid, p.argv[0]):
                        tail = _log_tail(Path(p.log_file))
                        if "address already in use" in tail:
                            raise _PortTaken(f"{p.name}: port already in use")
                        raise UserError(f"{p.name} exited during start-up; last log lines: {tail}")
            with contextlib.suppress(Exception):
                if probe():
                    return
            if time.monotonic() > deadline:
                raise UserError(f"timed out waiting for {what}; logs are in {self.directory / 'logs'}")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    def _client_ssl(self, pki: Pki) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(pki.ca.cert))
        admin = pki.clients["admin"]
        ctx.load_cert_chain(str(admin.cert), str(admin.key))
        return ctx

    def _api_get(self, pki: Pki, server: str, path: str) -> httpx.Response:
        with httpx.Client(verify=self._client_ssl(pki), timeout=5.0) as client:
            return client.get(server + path)

    def _api_ok(self, pki: Pki, server: str, path: str) -> bool:
        return self._api_get(pki, server, path).status_code == 200

    def _nodes_ready(self, pki: Pki, server: str, spec: SandboxSpec) -> bool:
        want = {n["metadata"]["name"] for n in node_manifests(spec)}
        items = self._api_get(pki, server, "/api/v1/nodes").json().get("items", [])
        ready = {
            n["metadata"]["name"]
            for n in items
            if any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in n.get("status", {}).get("conditions", [])
            )
        }
        return want <= ready

    def _default_sa(self, pki: Pki, server: str) -> bool:
        return self._api_ok(pki, server, "/api/v1/namespaces/default/serviceaccounts/default")

    def kubectl(self, args: list[str], *, stdin: str | None = None, timeout: float = 60.0) -> str:
        """Run the built kubectl against this sandbox."""
        assert self.toolchain is not None
        state = self.load_state()
        kubeconfig = state.kubeconfig if state else str(self.directory / "admin.kubeconfig")
        proc = subprocess.run(
            [str(self.toolchain.binary("kubectl")), f"--kubeconfig={kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if proc.returncode != 0:
            raise UserError(f"kubectl {' '.join(args[:2])}: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc.stdout

    def _repoint_kubelet_endpoints(self, port: int) -> None:
        """Nodes initialised by an earlier kwok (same data, another port) point the API server's log and exec
        requests at that kwok's port; point them at this one."""
        listing = json.loads(self.kubectl(["get", "nodes", "-o", "json"], timeout=120))
        patch = json.dumps({"status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}})
        for node in listing.get("items") or []:
            current = ((node.get("status") or {}).get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}
            if current.get("Port") not in (None, port):
                self.kubectl(
                    [
                        "patch",
                        "node",
                        node["metadata"]["name"],
                        "--subresource=status",
                        "--type=merge",
                        "-p",
                        patch,
                    ]
                )

    def apply_nodes(self, spec: SandboxSpec) -> None:
        docs = node_manifests(spec)
        if docs:
            body = json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
            self.kubectl(["apply", "--server-side", "--force-conflicts", "-f", "-"], stdin=body, timeout=300)

    # ---- down --------------------------------------------------------------------------------------------------
    def down(self, *, grace: float = 10.0) -> list[str]:
        """Stop exactly the processes ``up`` started (newest first); returns the names that were running."""
        state = self.load_state()
        if state is None:
            return []
        stopped: list[str] = []
        for p in reversed(state.processes):
            if _pid_runs(p.pid, p.argv[0]):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGTERM)
                stopped.append(p.name)
        deadline = time.monotonic() + grace
        for p in state.processes:
            while _pid_runs(p.pid, p.argv[0]) and time.monotonic() < deadline:
                _reap(p.pid)
                time.sleep(0.05)
            if _pid_runs(p.pid, p.argv[0]):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)
            _reap(p.pid)
        with contextlib.suppress(FileNotFoundError):
            self.state_path.unlink()
        return stopped

    def etcd_url(self) -> str:
        state = self.load_state()
        if state is None:
            raise UserError("sandbox is not up")
        return f"http://127.0.0.1:{state.ports['etcd-client']}"

    def compact_etcd(self) -> int:
        """Compact etcd at its current revision (what the API server does every few minutes); returns it.

        Afterwards any watch or list from an older resourceVersion is answered with 410 Gone.
        """
        url = self.etcd_url()
        with httpx.Client(timeout=10.0) as client:
            head = client.post(f"{url}/v3/kv/range", json={"key": "AA==", "limit": 1}).json()
            revision = int(head["header"]["revision"])
            client.post(
                f"{url}/v3/kv/compaction", json={"revision": str(revision), "physical": True}
            ).raise_for_status()
        return revision

    def signal_component(self, name: str, sig: signal.Signals) -> None:
        """Send ``sig`` to one component (used by tests to restart the API server)."""
        state = self.load_state()
        if state is None:
            raise UserError("sandbox is not up")
        for p in state.processes:
            if p.name == name and _pid_runs(p.pid, p.argv[0]):
                os.kill(p.pid, sig)
                return
        raise UserError(f"component {name} is not running")

    def restart_component(self, name: str, timeout: float = 60.0) -> None:
        """Stop one component and start it again with the same command line; waits for health."""
        state = self.load_state()
        if state is None:
            raise UserError("sandbox is not up")
        idx = next((i for i, p in enumerate(state.processes) if p.name == name), None)
        if idx is None:
            raise UserError(f"unknown component {name}")
        proc = state.processes[idx]
        if _pid_runs(proc.pid, proc.argv[0]):
            os.kill(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + 20
            while _pid_runs(proc.pid, proc.argv[0]) and time.monotonic() < deadline:
                _reap(proc.pid)
                time.sleep(0.05)
            if _pid_runs(proc.pid, proc.argv[0]):
                os.kill(proc.pid, signal.SIGKILL)
            _reap(proc.pid)
        with Path(proc.log_file).open("ab") as out:
            new = subprocess.Popen(
                proc.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.directory,
            )
        state.processes[idx] = ProcessInfo(proc.name, new.pid, proc.argv, proc.log_file)
        self.state_path.write_text(state.to_json())
        if name == "kube-apiserver":
            pki_dir = self.directory / "pki"
            ctx = ssl.create_default_context(cafile=str(pki_dir / "ca.crt"))
            ctx.load_cert_chain(str(pki_dir / "client-admin.crt"), str(pki_dir / "client-admin.key"))

            def ready() -> bool:
                with httpx.Client(verify=ctx, timeout=5.0) as c:
                    return c.get(state.server + "/readyz").status_code == 200

            self._wait("kube-apiserver", time.monotonic() + timeout, ready)


class _PortTaken(Exception):
    pass


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _http_ok(url: str, verify: bool = True) -> bool:
    with httpx.Client(verify=verify, timeout=2.0) as client:
        return client.get(url).status_code == 200


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return " | ".join(ln.strip() for ln in text.strip().splitlines()[-lines:])


def load_kubeconfig_server(path: Path) -> dict[str, Any]:
    """Parse a kubeconfig minimally to report its server; errors name the file."""
    from capstan.config import read_mapping

    data = read_mapping(path)
    try:
        ctx_name = data["current-context"]
        ctx = next(c["context"] for c in data["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in data["clusters"] if c["name"] == ctx["cluster"])
        return {"server": cluster["server"], "context": ctx_name}
    except (KeyError, StopIteration, TypeError) as exc:
        raise UserError(f"{path}: not a usable kubeconfig (missing {exc})") from None
