"""Recording history: the pure diff builder, the object/event core the Kubernetes recorder uses, and the
Redis/Valkey engine collectors with gap-aware cursors. Everything is written through :mod:`capstan.store`.
"""

from capstan.record._diff import (
    DEFAULT_DROP_PATHS,
    DiffPolicy,
    apply_patch,
    make_patch,
    normalize,
)
from capstan.record._engine_core import (
    PollPlan,
    RingEntry,
    ServerInfo,
    plan_acllog_without_ids,
    plan_config,
    plan_ring,
    plan_server,
)
from capstan.record._kube import DEFAULT_KINDS, CustomKind, KubeCollector, KubernetesConfig
from capstan.record._objects import ObjectHistory, event_record, kind_key
from capstan.record._redis import EngineCollector, RedisTargetConfig, parse_acllog, parse_slowlog
from capstan.record._runner import (
    Collector,
    OtlpConfig,
    Recorder,
    RecorderConfig,
    RecorderRunner,
    RetentionConfig,
    engine_collectors,
    load_recorder_config,
)

__all__ = [
    "DEFAULT_DROP_PATHS",
    "DEFAULT_KINDS",
    "Collector",
    "CustomKind",
    "DiffPolicy",
    "EngineCollector",
    "KubeCollector",
    "KubernetesConfig",
    "ObjectHistory",
    "OtlpConfig",
    "PollPlan",
    "Recorder",
    "RecorderConfig",
    "RecorderRunner",
    "RedisTargetConfig",
    "RetentionConfig",
    "RingEntry",
    "ServerInfo",
    "apply_patch",
    "engine_collectors",
    "event_record",
    "kind_key",
    "load_recorder_config",
    "make_patch",
    "normalize",
    "parse_acllog",
    "parse_slowlog",
    "plan_acllog_without_ids",
    "plan_config",
    "plan_ring",
    "plan_server",
]
