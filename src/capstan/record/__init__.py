"""Recording history: the pure diff builder, the object/event core the Kubernetes recorder uses, and the
Redis/Valkey engine collectors with gap-aware cursors. Everything is written through :mod:`capstan.store`.
"""

from capstan.record._diff import DiffPolicy, apply_patch, make_patch, normalize
from capstan.record._engine_core import (
    PollPlan,
    RingEntry,
    ServerInfo,
    plan_config,
    plan_ring,
    plan_server,
)
from capstan.record._kube import KubeCollector, KubernetesConfig
from capstan.record._objects import ObjectHistory, event_record, kind_key
from capstan.record._redis import EngineCollector, RedisTargetConfig
from capstan.record._runner import (
    Collector,
    Recorder,
    RecorderConfig,
    RecorderRunner,
    load_recorder_config,
)

__all__ = [
    "Collector",
    "DiffPolicy",
    "EngineCollector",
    "KubeCollector",
    "KubernetesConfig",
    "ObjectHistory",
    "PollPlan",
    "Recorder",
    "RecorderConfig",
    "RecorderRunner",
    "RedisTargetConfig",
    "RingEntry",
    "ServerInfo",
    "apply_patch",
    "event_record",
    "kind_key",
    "load_recorder_config",
    "make_patch",
    "normalize",
    "plan_config",
    "plan_ring",
    "plan_server",
]
