"""Build the control-plane binaries from the Go module proxy and cache them by version.

Why a wrapper module: ``k8s.io/kubernetes`` requires its staging modules at ``v0.0.0`` and replaces them with local
paths, which ``go install pkg@version`` refuses. A small module that requires ``k8s.io/kubernetes vX.Y.Z`` and
replaces every staging module with ``v0.Y.Z`` builds the commands unchanged. The staging list is read from the
release's own go.mod, so a new release needs only a new version pin. etcd is built from the same wrapper module at
the version that release requires; kwok has no replace directives and is installed directly.

Binaries land in ``<cache>/controlplane/k8s-<version>/``; a second run finds them and returns in milliseconds.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from capstan.errors import UserError

KUBERNETES_VERSION = "1.36.3"
KWOK_VERSION = "0.8.0"
# Helm, for the chart's tests (deploy/helm/capstan: lint, template, the rendered manifests applied to the sandbox)
HELM_VERSION = "4.3.2"
HELM_PACKAGE = "helm.sh/helm/v4/cmd/helm"

KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
ETCD_PACKAGE = "go.etcd.io/etcd/server/v3"
KWOK_PACKAGE = "sigs.k8s.io/kwok/cmd/kwok"
# The kwok stage definitions we run with are read from the kwok module itself (never copied into this repo).
KWOK_STAGE_DIRS = (
    "kustomize/stage/node/fast",
    "kustomize/stage/node/heartbeat-with-lease",
    "kustomize/stage/pod/fast",
)

KWOK_CRDS = ("kwok.x-k8s.io_logs.yaml", "kwok.x-k8s.io_clusterlogs.yaml")

ProgressFn = Callable[[str, int, int], None]
"""Called as ``progress(step, done, total)`` while building; ``total`` may grow."""


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """Where the built control plane lives. ``bin_dir`` holds one executable per component."""

    bin_dir: Path
    kwok_stages: tuple[Path, ...]
    kubernetes_version: str
    kwok_version: str

    def binary(self, name: str) -> Path:
        return self.bin_dir / name


def cache_root() -> Path:
    """``$CAPSTAN_CACHE_DIR`` or ``$XDG_CACHE_HOME/capstan`` or ``~/.cache/capstan`` (outside the work tree)."""
    explicit = os.environ.get("CAPSTAN_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "capstan"


def toolchain_dir(kubernetes_version: str = KUBERNETES_VERSION, kwok_version: str = KWOK_VERSION) -> Path:
    return cache_root() / "controlplane" / f"k8s-v{kubernetes_version}-kwok-v{kwok_version}"


def _binaries() -> tuple[str, ...]:
    return (*KUBE_COMMANDS, "etcd", "kwok")


def find_toolchain(
    kubernetes_version: str = KUBERNETES_VERSION, kwok_version: str = KWOK_VERSION
) -> Toolchain | None:
    """The cached toolchain if every binary and the stage files are present, else None."""
    root = toolchain_dir(kubernetes_version, kwok_version)
    manifest = root / "manifest.json"
    if not manifest.is_file():
        return None
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return None
    bin_dir = root / "bin"
    stages = tuple(root / "stages" / name for name in data.get("stages", []))
    crds = [root / "crds" / c for c in KWOK_CRDS]
    if not all(os.access(bin_dir / b, os.X_OK) for b in _binaries()) or not all(
        p.is_file() for p in (*stages, *crds)
    ):
        return None
    return Toolchain(bin_dir, stages, kubernetes_version, kwok_version)


def require_toolchain() -> Toolchain:
    """The cached toolchain, or a :class:`UserError` telling the user how to build it."""
    found = find_toolchain()
    if found is None:
        raise UserError(
            f"control plane binaries not built (expected in {toolchain_dir()}): run `capstan sandbox build`"
        )
    return found


class GoBuilder:
    """Runs the Go toolchain with a fixed environment, reporting progress by counting compiled packages."""

    def __init__(self, work_dir: Path, progress: ProgressFn | None = None) -> None:
        self.work_dir = work_dir
        self.progress = progress or (lambda step, done, total: None)
        go = shutil.which("go")
        if go is None:
            raise UserError(
                "the Go toolchain is required to build the control plane and was not found on PATH: "
                "install Go >= 1.26 (https://go.dev/doc/install, or Debian's golang package) and retry"
            )
        self.go = go
        self.env = {
            **os.environ,
            "GOTOOLCHAIN": "local",
            "GOFLAGS": "-mod=mod -buildvcs=false",
        }

    def run(self, args: list[str], step: str, *, timeout: float = 3600.0, cwd: Path | None = None) -> str:
        """Run ``go args`` and return stdout; a failure becomes a UserError with the tail of its output."""
        try:
            proc = subprocess.run(
                [self.go, *args],
                cwd=cwd or self.work_dir,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise UserError(f"{step}: `go {' '.join(args)}` did not finish within {timeout:.0f} s") from None
        if proc.returncode != 0:
            raise UserError(f"{step}: `go {' '.join(args[:3])} …` failed: {_tail(proc.stderr)}")
        return proc.stdout

    def build(self, out: Path, packages: list[str], step: str, ldflags: str = "") -> None:
        """``go build -v`` counting the packages it compiles against ``go list -deps`` for progress."""
        total = len(self.run(["list", "-deps", *packages], f"{step}: list dependencies").split())
        self.progress(step, 0, total)
        args = [self.go, "build", "-v", "-o", str(out)]
        if ldflags:
            args += ["-ldflags", ldflags]
        done = 0
        lines: list[str] = []
        with subprocess.Popen(
            [*args, *packages],
            cwd=self.work_dir,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        ) as proc:
            assert proc.stderr is not None
            for line in _bounded_lines(proc.stderr, deadline=time.monotonic() + 3600):
                lines.append(line)
                if not line.startswith(("go: ", "#")) and " " not in line.strip():
                    done += 1
                    self.progress(step, min(done, total), total)
            rc = proc.wait(timeout=60)
        if rc != 0:
            raise UserError(f"{step}: go build failed: {_tail(''.join(lines))}")
        self.progress(step, total, total)


def _bounded_lines(stream: object, deadline: float) -> Iterator[str]:
    for line in stream:  # type: ignore[attr-defined]
        yield line
        if time.monotonic() > deadline:
            raise UserError("go build did not finish within an hour")


def _tail(text: str, lines: int = 6) -> str:
    kept = [ln for ln in text.strip().splitlines() if ln.strip()][-lines:]
    return " | ".join(kept) if kept else "(no output)"


def _staging_modules(builder: GoBuilder, kubernetes_version: str) -> list[str]:
    info = json.loads(
        builder.run(
            ["mod", "download", "-json", f"k8s.io/kubernetes@v{kubernetes_version}"], "download go.mod"
        )
    )
    gomod = Path(info["GoMod"]).read_text()
    return sorted(set(re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", gomod, re.MULTILINE)))


def _write_wrapper(work: Path, kubernetes_version: str, staging: list[str]) -> None:
    minor = kubernetes_version.split(".", 1)[1]
    replaces = "\n".join(f"\t{m} => {m} v0.{minor}" for m in staging)
    imports = "\n".join(f'\t_ "k8s.io/kubernetes/cmd/{c}"' for c in KUBE_COMMANDS)
    work.mkdir(parents=True, exist_ok=True)
    (work / "go.mod").write_text(
        f"module capstan.local/controlplane\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes v{kubernetes_version}\n\n"
        f"replace (\n{replaces}\n)\n"
    )
    (work / "tools.go").write_text(
        f'//go:build tools\n\npackage tools\n\nimport (\n{imports}\n\t_ "{ETCD_PACKAGE}"\n)\n'
    )


def _kube_ldflags(kubernetes_version: str) -> str:
    major, minor, _ = kubernetes_version.split(".")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    pairs = {
        "gitVersion": f"v{kubernetes_version}",
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "gitCommit": "0000000000000000000000000000000000000000",
        "buildDate": stamp,
    }
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.{k}={v}" for k, v in pairs.items()]
    return " ".join(flags)


def build_toolchain(
    progress: ProgressFn | None = None,
    *,
    kubernetes_version: str = KUBERNETES_VERSION,
    kwok_version: str = KWOK_VERSION,
    force: bool = False,
) -> Toolchain:
    """Build (or find cached) kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd and kwok."""
    if not force:
        found = find_toolchain(kubernetes_version, kwok_version)
        if found is not None:
            return found
    root = toolchain_dir(kubernetes_version, kwok_version)
    work = root / "gomod"
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    builder = GoBuilder(work, progress)

    work.mkdir(parents=True, exist_ok=True)
    staging = _staging_modules(builder, kubernetes_version)
    if not staging:
        raise UserError(f"k8s.io/kubernetes v{kubernetes_version}: no staging modules found in its go.mod")
    _write_wrapper(work, kubernetes_version, staging)
    builder.run(["mod", "tidy"], "resolve Kubernetes modules", timeout=1800)

    ldflags = _kube_ldflags(kubernetes_version)
    for cmd in KUBE_COMMANDS:
        tmp = bin_dir / f".{cmd}.tmp"
        builder.build(tmp, [f"k8s.io/kubernetes/cmd/{cmd}"], cmd, ldflags)
        tmp.replace(bin_dir / cmd)
    tmp = bin_dir / ".etcd.tmp"
    builder.build(tmp, [ETCD_PACKAGE], "etcd", "-s -w")
    tmp.replace(bin_dir / "etcd")

    # kwok: its own module (no replace directives), built in a throwaway wrapper so its versions stay its own.
    kwok_work = root / "gomod-kwok"
    kwok_work.mkdir(parents=True, exist_ok=True)
    (kwok_work / "go.mod").write_text(
        f"module capstan.local/kwok\n\ngo 1.26.0\n\nrequire sigs.k8s.io/kwok v{kwok_version}\n"
    )
    (kwok_work / "tools.go").write_text(f'//go:build tools\n\npackage tools\n\nimport _ "{KWOK_PACKAGE}"\n')
    kwok_builder = GoBuilder(kwok_work, progress)
    kwok_builder.run(["mod", "tidy"], "resolve kwok modules", timeout=1800)
    tmp = bin_dir / ".kwok.tmp"
    kwok_builder.build(tmp, [KWOK_PACKAGE], "kwok", "-s -w")
    tmp.replace(bin_dir / "kwok")

    info = json.loads(
        kwok_builder.run(["mod", "download", "-json", f"sigs.k8s.io/kwok@v{kwok_version}"], "kwok")
    )
    stage_dir = root / "stages"
    stage_dir.mkdir(exist_ok=True)
    stage_names: list[str] = []
    for rel in KWOK_STAGE_DIRS:
        for src in sorted((Path(info["Dir"]) / rel).glob("*.yaml")):
            if src.name == "kustomization.yaml":
                continue
            dest = stage_dir / src.name
            shutil.copyfile(src, dest)
            stage_names.append(src.name)
    crd_dir = root / "crds"
    crd_dir.mkdir(exist_ok=True)
    for crd in KWOK_CRDS:
        shutil.copyfile(Path(info["Dir"]) / "kustomize" / "crd" / "bases" / crd, crd_dir / crd)
    (root / "manifest.json").write_text(
        json.dumps(
            {
                "kubernetes": kubernetes_version,
                "kwok": kwok_version,
                "binaries": _binaries(),
                "stages": stage_names,
            },
            indent=2,
        )
    )
    found = find_toolchain(kubernetes_version, kwok_version)
    if found is None:
        raise UserError(f"build finished but the toolchain in {root} is incomplete")
    return found


def helm_path(version: str = HELM_VERSION) -> Path:
    """Where :func:`build_helm` puts the ``helm`` binary (in the cache, outside the work tree)."""
    return cache_root() / "helm" / f"v{version}" / "helm"


def build_helm(
    progress: ProgressFn | None = None, *, version: str = HELM_VERSION, force: bool = False
) -> Path:
    """Build (or find cached) ``helm`` from the Go module proxy, in a throwaway wrapper module so its dependency
    versions stay its own; returns its path."""
    out = helm_path(version)
    if out.is_file() and not force:
        return out
    work = out.parent / "gomod"
    work.mkdir(parents=True, exist_ok=True)
    (work / "go.mod").write_text(
        f"module capstan.local/helm\n\ngo 1.26.0\n\nrequire helm.sh/helm/v4 v{version}\n"
    )
    (work / "tools.go").write_text(f'//go:build tools\n\npackage tools\n\nimport _ "{HELM_PACKAGE}"\n')
    builder = GoBuilder(work, progress)
    builder.env["CGO_ENABLED"] = "0"
    builder.run(["mod", "tidy"], "resolve Helm modules", timeout=1800)
    tmp = out.parent / ".helm.tmp"
    builder.build(
        tmp, [HELM_PACKAGE], "helm", f"-s -w -X helm.sh/helm/v4/internal/version.version=v{version}"
    )
    tmp.replace(out)
    return out


def go_module_dir(module: str, version: str) -> Path:
    """The sources of ``module@version`` in Go's module cache, downloaded through the module proxy if missing (for
    files a test installs from a module, such as Karpenter's CRDs). Its go directive may ask for a newer Go than
    the local one: only its files are wanted, so that is not an error here."""
    builder = GoBuilder(Path.cwd())
    cache = builder.run(["env", "GOMODCACHE"], "find the Go module cache").strip()
    path = Path(cache).joinpath(*module.split("/")[:-1], f"{module.split('/')[-1]}@v{version.lstrip('v')}")
    if not path.is_dir():
        try:
            subprocess.run(
                [builder.go, "mod", "download", "-json", f"{module}@v{version.lstrip('v')}"],
                env=builder.env,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise UserError(f"downloading {module}@{version} did not finish within 600 s") from None
    if not path.is_dir():
        raise UserError(
            f"{module}@{version}: not in the Go module cache ({path}) and could not be downloaded"
        )
    return path
