"""GPU capacity planning: a pure planner deciding placement and provisioning together, and the simulator that
replays real traces against it and against emulated cluster-autoscaler, Karpenter, static and oracle policies.

Entry points: :func:`plan` (a :class:`Snapshot` and a :class:`PlannerConfig` to a :class:`Plan`; a
:class:`PlanCache` carries memos between decisions and a :class:`Forecaster`, :class:`SlidingForecast` by
default), :func:`load_trace` and the readers beside it (a trace to a :class:`Workload`, node types from a file),
:class:`Controller` (when to plan and at which scope, over any :class:`Cluster`; :func:`apply_plan` carries a
plan out), :class:`Sim` (a replay of a workload under a :class:`Policy`, :func:`make_policy` by name; it is
a :class:`Cluster`, so the controller runs there as it runs live), and
:func:`run_policies` / :func:`summarize` (a replay's figures as a :class:`Summary`) with :func:`write_plots`.
"""

from capstan.capacity._cluster_autoscaler import CAConfig, ClusterAutoscalerPolicy, buffer_size_and_template
from capstan.capacity._demand import ANNOUNCED_SUFFIX, AllAnnounced, Announcements, QueuedDemand, TraceLead
from capstan.capacity._karpenter import KarpenterConfig, KarpenterPolicy
from capstan.capacity._oracle import OraclePolicy
from capstan.capacity.controller import Activity, Cluster, Controller, apply_plan
from capstan.capacity.forecast import (
    Forecast,
    Forecaster,
    NoForecast,
    SlidingForecast,
    forecast_lookback,
    gpu_horizon,
    headroom_window,
)
from capstan.capacity.model import Delay, NodeState, NodeType, Pod, Taint, Toleration, Workload
from capstan.capacity.nodetypes import inference_node_types, load_node_type_file, read_openb_nodes
from capstan.capacity.placement import node_labels
from capstan.capacity.planner import (
    Drain,
    Launch,
    NodeView,
    Nomination,
    Plan,
    PlanCache,
    PlannerConfig,
    Snapshot,
    plan,
)
from capstan.capacity.policies import POLICY_NAMES, make_policy
from capstan.capacity.report import (
    Summary,
    empty_start_floor,
    run_policies,
    summarize,
    write_plots,
    write_sweep_plot,
)
from capstan.capacity.sim import IDLE_CAUSES, STAGES, Policy, Sim, SimResult
from capstan.capacity.traces import (
    OPENB_QOS,
    AgenticSpec,
    load_trace,
    read_openb_pods,
    synthetic_agentic,
)

__all__ = [
    "ANNOUNCED_SUFFIX",
    "IDLE_CAUSES",
    "OPENB_QOS",
    "POLICY_NAMES",
    "STAGES",
    "Activity",
    "AgenticSpec",
    "AllAnnounced",
    "Announcements",
    "CAConfig",
    "Cluster",
    "ClusterAutoscalerPolicy",
    "Controller",
    "Delay",
    "Drain",
    "Forecast",
    "Forecaster",
    "KarpenterConfig",
    "KarpenterPolicy",
    "Launch",
    "NoForecast",
    "NodeState",
    "NodeType",
    "NodeView",
    "Nomination",
    "OraclePolicy",
    "Plan",
    "PlanCache",
    "PlannerConfig",
    "Pod",
    "Policy",
    "QueuedDemand",
    "Sim",
    "SimResult",
    "SlidingForecast",
    "Snapshot",
    "Summary",
    "Taint",
    "Toleration",
    "TraceLead",
    "Workload",
    "apply_plan",
    "buffer_size_and_template",
    "empty_start_floor",
    "forecast_lookback",
    "gpu_horizon",
    "headroom_window",
    "inference_node_types",
    "load_node_type_file",
    "load_trace",
    "make_policy",
    "node_labels",
    "plan",
    "read_openb_nodes",
    "read_openb_pods",
    "run_policies",
    "summarize",
    "synthetic_agentic",
    "write_plots",
    "write_sweep_plot",
]
