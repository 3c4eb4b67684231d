"""GPU capacity planning: a pure planner deciding placement and provisioning together, and the simulator that
replays real traces against it and against emulated cluster-autoscaler, Karpenter, static and oracle policies."""

from capstan.capacity.model import Delay, NodeState, NodeType, Pod, Taint, Toleration, Workload
from capstan.capacity.nodetypes import inference_node_types, load_node_type_file, read_openb_nodes
from capstan.capacity.planner import (
    Drain,
    Launch,
    NodeView,
    Nomination,
    Plan,
    PlannerConfig,
    Snapshot,
    plan,
)
from capstan.capacity.policies import (
    POLICY_NAMES,
    CAConfig,
    CapstanPolicy,
    ClusterAutoscalerPolicy,
    KarpenterPolicy,
    OraclePolicy,
    StaticPolicy,
    make_policy,
)
from capstan.capacity.report import Summary, run_policies, summarize, write_plots, write_sweep_plot
from capstan.capacity.sim import IDLE_CAUSES, STAGES, Policy, Sim, SimResult
from capstan.capacity.traces import (
    AgenticSpec,
    ReplicaShape,
    grow,
    grow_node_types,
    load_trace,
    read_genai_qps,
    read_openb_pods,
    synthetic_agentic,
)

__all__ = [
    "IDLE_CAUSES",
    "POLICY_NAMES",
    "STAGES",
    "AgenticSpec",
    "CAConfig",
    "CapstanPolicy",
    "ClusterAutoscalerPolicy",
    "Delay",
    "Drain",
    "KarpenterPolicy",
    "Launch",
    "NodeState",
    "NodeType",
    "NodeView",
    "Nomination",
    "OraclePolicy",
    "Plan",
    "PlannerConfig",
    "Pod",
    "Policy",
    "ReplicaShape",
    "Sim",
    "SimResult",
    "Snapshot",
    "StaticPolicy",
    "Summary",
    "Taint",
    "Toleration",
    "Workload",
    "grow",
    "grow_node_types",
    "inference_node_types",
    "load_node_type_file",
    "load_trace",
    "make_policy",
    "plan",
    "read_genai_qps",
    "read_openb_nodes",
    "read_openb_pods",
    "run_policies",
    "summarize",
    "synthetic_agentic",
    "write_plots",
    "write_sweep_plot",
]
