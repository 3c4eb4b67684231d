"""A real local Kubernetes control plane for tests, benchmarks and the demo.

Public surface: build the binaries (:func:`build_toolchain`), describe the cluster (:class:`SandboxSpec`), run it
(:class:`Sandbox`).
"""

from capstan.sandbox.build import Toolchain, build_toolchain, find_toolchain, require_toolchain
from capstan.sandbox.cluster import Sandbox, SandboxState, default_state_dir
from capstan.sandbox.datastores import PostgresServer, RedisServer, free_port
from capstan.sandbox.spec import NodePool, SandboxSpec, Taint, load_spec, node_manifests

__all__ = [
    "NodePool",
    "PostgresServer",
    "RedisServer",
    "Sandbox",
    "SandboxSpec",
    "SandboxState",
    "Taint",
    "Toolchain",
    "build_toolchain",
    "default_state_dir",
    "find_toolchain",
    "free_port",
    "load_spec",
    "node_manifests",
    "require_toolchain",
]
