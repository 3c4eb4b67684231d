#!/usr/bin/env bash
# Build the real Karpenter and cluster-autoscaler, each with its kwok cloud provider, OUTSIDE this repository, for
# bench/_autoscalers.py and bench/autoscaler_peers_smoke.py. Nothing it builds or fetches is ever committed.
#
#   bench/peers/build_autoscalers.sh OUT_DIR [karpenter|cluster-autoscaler|both]   (default: both)
#
# Writes OUT_DIR/karpenter-kwok and OUT_DIR/cluster-autoscaler-kwok. Builds run one at a time under `nice -n 10`
# (each takes minutes of CPU on 2 cores) and print their CPU time.
#
# Karpenter: from the Go module proxy, `sigs.k8s.io/karpenter/kwok@$KARPENTER_VERSION` (default v1.15.0, which needs
# Go >= 1.26.9: GOTOOLCHAIN=$KARPENTER_GOTOOLCHAIN, default go1.26.9, makes the go command fetch that toolchain
# through the proxy). Without a toolchain download: KARPENTER_VERSION=v1.14.1 KARPENTER_GOTOOLCHAIN=local. The
# module stays in $(go env GOMODCACHE)/sigs.k8s.io/karpenter@VERSION, where bench/_autoscalers.py reads its CRDs.
#
# cluster-autoscaler: the proxy refuses k8s.io/autoscaler/cluster-autoscaler, and the kwok provider now lives in
# kubernetes-sigs/cluster-autoscaler (pkg/cloudprovider/kwok, a kwok-only main in kwok/). The CALLER fetches the
# sources and passes their directory as CA_SRC (default: OUT_DIR/../src), laid out as:
#   $CA_SRC/cluster-autoscaler/                  a tree of github.com/kubernetes-sigs/cluster-autoscaler
#   $CA_SRC/autoscaler/cluster-autoscaler/apis/  that directory of github.com/kubernetes/autoscaler
# e.g. `git --git-dir=<clone of kubernetes-sigs/cluster-autoscaler> archive HEAD | tar -x -C $CA_SRC/cluster-autoscaler`
# and `git --git-dir=<clone of kubernetes/autoscaler> archive HEAD cluster-autoscaler/apis | tar -x -C $CA_SRC/autoscaler`.
# This script then edits cluster-autoscaler/go.mod (keeping go.mod.orig): every v0.37.0-rc.0 pin becomes v0.37.2
# and k8s.io/kubernetes v1.37.0-rc.0 becomes v1.37.2 (the proxy refuses the release candidates), and
# k8s.io/autoscaler/cluster-autoscaler/apis is replaced by ../autoscaler/cluster-autoscaler/apis (the proxy refuses
# its pseudo-version); no code change. Then: GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod go build ./kwok.
set -euo pipefail

say() { printf 'build_autoscalers: %s\n' "$*" >&2; }

if [[ $# -lt 1 || $# -gt 2 ]]; then
  say "usage: $0 OUT_DIR [karpenter|cluster-autoscaler|both]"
  exit 2
fi
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
WHAT=${2:-both}
case "$WHAT" in karpenter|cluster-autoscaler|both) ;; *) say "unknown peer '$WHAT'"; exit 2 ;; esac
command -v go >/dev/null || { say "go is not on PATH"; exit 2; }
[[ -x /usr/bin/time ]] || { say "/usr/bin/time is missing (Debian package: time)"; exit 2; }

KARPENTER_VERSION=${KARPENTER_VERSION:-v1.15.0}
KARPENTER_GOTOOLCHAIN=${KARPENTER_GOTOOLCHAIN:-go1.26.9}
CA_SRC=${CA_SRC:-$OUT/../src}

timed() {  # timed LABEL CMD...: run it under nice -n 10, then print its wall and CPU (user+sys) seconds
  local label=$1; shift
  local tf
  tf=$(mktemp)
  /usr/bin/time -f '%e %U %S' -o "$tf" nice -n 10 "$@"
  say "$label: $(awk '{printf "wall %.0f s, CPU %.0f s (user %.0f + sys %.0f)", $1, $2 + $3, $2, $3}' "$tf")"
  rm -f "$tf"
}

build_karpenter() {
  local gobin
  gobin=$(mktemp -d)
  say "karpenter: GOTOOLCHAIN=$KARPENTER_GOTOOLCHAIN go install sigs.k8s.io/karpenter/kwok@$KARPENTER_VERSION"
  timed karpenter env GOTOOLCHAIN="$KARPENTER_GOTOOLCHAIN" GOBIN="$gobin" CGO_ENABLED=0 \
    go install "sigs.k8s.io/karpenter/kwok@$KARPENTER_VERSION"
  mv "$gobin/kwok" "$OUT/karpenter-kwok"  # the package's binary is called kwok, like the sandbox's kwok
  rmdir "$gobin"
  say "karpenter: $OUT/karpenter-kwok; CRDs in $(go env GOMODCACHE)/sigs.k8s.io/karpenter@$KARPENTER_VERSION/kwok"
}

build_cluster_autoscaler() {
  local src=$CA_SRC/cluster-autoscaler apis=$CA_SRC/autoscaler/cluster-autoscaler/apis
  [[ -f $src/go.mod && -f $src/kwok/main.go ]] || { say "no kubernetes-sigs/cluster-autoscaler tree at $src"; exit 2; }
  [[ -f $apis/go.mod ]] || { say "no kubernetes/autoscaler cluster-autoscaler/apis at $apis"; exit 2; }
  [[ -f $src/go.mod.orig ]] || cp "$src/go.mod" "$src/go.mod.orig"
  sed -e 's/v0\.37\.0-rc\.0/v0.37.2/g' -e 's#k8s\.io/kubernetes v1\.37\.0-rc\.0#k8s.io/kubernetes v1.37.2#' \
    "$src/go.mod.orig" >"$src/go.mod"
  printf '\nreplace k8s.io/autoscaler/cluster-autoscaler/apis => ../autoscaler/cluster-autoscaler/apis\n' >>"$src/go.mod"
  if grep -q 'rc\.0' "$src/go.mod"; then say "go.mod still pins a release candidate:"; grep 'rc\.0' "$src/go.mod" >&2; exit 1; fi
  say "cluster-autoscaler: go build ./kwok in $src (go.mod edited; diff against go.mod.orig)"
  (cd "$src" && timed cluster-autoscaler env GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod \
    go build -o "$OUT/cluster-autoscaler-kwok" ./kwok)
  say "cluster-autoscaler: $OUT/cluster-autoscaler-kwok"
}

[[ $WHAT == cluster-autoscaler ]] || build_karpenter
[[ $WHAT == karpenter ]] || build_cluster_autoscaler
