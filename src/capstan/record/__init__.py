"""Recording history: the pure diff builder, the object/event core the Kubernetes recorder uses, and the
Redis/Valkey collectors with gap-aware cursors. Everything is written through :mod:`capstan.store`.

Entry points: :class:`Recorder` runs what a :class:`RecorderConfig` (:func:`load_recorder_config`) names;
:class:`KubeCollector` records a cluster's objects and Events, :class:`RedisCollector` one Redis/Valkey target's
logs (planned by the pure :func:`plan_ring`, :func:`plan_config`, :func:`plan_server`), both behind the
:class:`Collector` protocol a :class:`RecorderRunner` runs; :func:`make_patch` / :func:`apply_patch` are the diff.
"""

from capstan.record._diff import DiffPolicy, apply_patch, make_patch, normalize
from capstan.record._kube import DEFAULT_KINDS, KubeCollector, KubernetesConfig, Watch
from capstan.record._objects import ObjectHistory, event_record, kind_key
from capstan.record._redis import RedisCollector, RedisTargetConfig
from capstan.record._redis_core import (
    PollPlan,
    RingEntry,
    ServerInfo,
    plan_config,
    plan_ring,
    plan_server,
)
from capstan.record._runner import (
    Collector,
    Recorder,
    RecorderConfig,
    RecorderRunner,
    load_recorder_config,
)

__all__ = [
    "DEFAULT_KINDS",
    "Collector",
    "DiffPolicy",
    "KubeCollector",
    "KubernetesConfig",
    "ObjectHistory",
    "PollPlan",
    "Recorder",
    "RecorderConfig",
    "RecorderRunner",
    "RedisCollector",
    "RedisTargetConfig",
    "RingEntry",
    "ServerInfo",
    "Watch",
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
