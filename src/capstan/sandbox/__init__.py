"""A real local Kubernetes control plane for tests, benchmarks and the demo.

Public surface: build the binaries (:func:`build_toolchain`), describe the cluster (:class:`SandboxSpec`, its
:class:`NodePool` list, :func:`load_spec`), run it (:class:`Sandbox`); a Go module's files for a test to install (:func:`go_module_dir`); throwaway datastores for tests and benches
(:class:`PostgresServer`, :class:`RedisServer`, which also runs the Valkey that :func:`valkey_server_binary` finds,
:func:`server_version`, :func:`free_port`); and the names the sandbox's fake nodes carry
(:data:`GPU_RESOURCE`, :data:`KWOK_NODE_ANNOTATION` = :data:`KWOK_NODE_ANNOTATION_VALUE`), which the fault
injectors look for.
"""

from capstan.sandbox.build import (
    Toolchain,
    build_helm,
    build_toolchain,
    find_toolchain,
    go_module_dir,
    helm_path,
    require_toolchain,
)
from capstan.sandbox.chart import (
    CHART_COMPONENTS,
    HA_VALUES,
    chart_dir,
    chart_documents,
    identity_manifest,
    mount_service_account,
    render_chart,
)
from capstan.sandbox.cluster import Sandbox, SandboxState, default_state_dir
from capstan.sandbox.datastores import (
    PostgresServer,
    RedisServer,
    free_port,
    server_version,
    valkey_server_binary,
)
from capstan.sandbox.spec import (
    GPU_RESOURCE,
    KWOK_NODE_ANNOTATION,
    KWOK_NODE_ANNOTATION_VALUE,
    NodePool,
    SandboxSpec,
    Taint,
    load_spec,
    node_manifests,
)

__all__ = [
    "CHART_COMPONENTS",
    "GPU_RESOURCE",
    "HA_VALUES",
    "KWOK_NODE_ANNOTATION",
    "KWOK_NODE_ANNOTATION_VALUE",
    "NodePool",
    "PostgresServer",
    "RedisServer",
    "Sandbox",
    "SandboxSpec",
    "SandboxState",
    "Taint",
    "Toolchain",
    "build_helm",
    "build_toolchain",
    "chart_dir",
    "chart_documents",
    "default_state_dir",
    "find_toolchain",
    "free_port",
    "go_module_dir",
    "helm_path",
    "identity_manifest",
    "load_spec",
    "mount_service_account",
    "node_manifests",
    "render_chart",
    "require_toolchain",
    "server_version",
    "valkey_server_binary",
]
