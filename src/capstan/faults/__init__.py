"""Kubelet-like fault injection for kwok nodes, and the fault-scenario suite that measures the diagnosis.

:class:`Kubelet` writes the pod and node status a kubelet would (:class:`Termination` describes how a container
ended). A :class:`Scenario` (YAML, docs/faults.md; :func:`load_scenarios` reads a directory, by default the shipped
ones) says what to create, break, edit and expect; a :class:`Runner` plays it on a cluster in its own namespace and
scores the diagnosis with the pure :func:`score` into an :class:`Outcome`.

The agent evaluation (:class:`Evaluation`, ``capstan faults eval``) lets a model diagnose each scenario while its
state is live: an :class:`Agent` loop over a :class:`ChatModel` (:class:`OpenAIChat`) and a :class:`Toolbox`
(:class:`McpToolbox` through :func:`mcp_toolbox`, or :class:`KubectlToolbox`), its answer scored by
:func:`score_answer` (the keyword rule of :func:`missing_keywords`), accuracy and time per arm by :func:`summarize`.
"""

from typing import TYPE_CHECKING

from capstan.faults._scenario import (
    Expectation,
    ObjectKey,
    Scenario,
    builtin_dir,
    load_scenario,
    load_scenarios,
    parse_scenario,
)
from capstan.faults._score import Score, missing_keywords, score
from capstan.faults.kubelet import Kubelet, LogsNotServed, Termination
from capstan.lazy import lazy_attributes

# The runner needs the recorder and the store; loading the scenarios (`capstan faults list`) does not.
# The agent evaluation needs the MCP server and an HTTP client; neither is loaded until it is used.
_EVAL = (
    "ARMS",
    "Agent",
    "AgentRun",
    "AnswerScore",
    "Arm",
    "ChatModel",
    "EvalResult",
    "Evaluation",
    "KubectlToolbox",
    "McpToolbox",
    "ModelError",
    "OpenAIChat",
    "Refused",
    "Reply",
    "ToolCall",
    "ToolDef",
    "Toolbox",
    "kubectl_argv",
    "mcp_toolbox",
    "parse_completion",
    "score_answer",
    "summarize",
    "task_prompt",
)
__getattr__ = lazy_attributes(
    "capstan.faults",
    {
        "Runner": "capstan.faults._runner",
        "Outcome": "capstan.faults._runner",
        **dict.fromkeys(_EVAL, "capstan.faults._eval"),
    },
)

if TYPE_CHECKING:
    from capstan.faults._eval import (
        ARMS,
        Agent,
        AgentRun,
        AnswerScore,
        Arm,
        ChatModel,
        EvalResult,
        Evaluation,
        KubectlToolbox,
        McpToolbox,
        ModelError,
        OpenAIChat,
        Refused,
        Reply,
        Toolbox,
        ToolCall,
        ToolDef,
        kubectl_argv,
        mcp_toolbox,
        parse_completion,
        score_answer,
        summarize,
        task_prompt,
    )
    from capstan.faults._runner import Outcome, Runner

__all__ = [
    "ARMS",
    "Agent",
    "AgentRun",
    "AnswerScore",
    "Arm",
    "ChatModel",
    "EvalResult",
    "Evaluation",
    "Expectation",
    "KubectlToolbox",
    "Kubelet",
    "LogsNotServed",
    "McpToolbox",
    "ModelError",
    "ObjectKey",
    "OpenAIChat",
    "Outcome",
    "Refused",
    "Reply",
    "Runner",
    "Scenario",
    "Score",
    "Termination",
    "ToolCall",
    "ToolDef",
    "Toolbox",
    "builtin_dir",
    "kubectl_argv",
    "load_scenario",
    "load_scenarios",
    "mcp_toolbox",
    "missing_keywords",
    "parse_completion",
    "parse_scenario",
    "score",
    "score_answer",
    "summarize",
    "task_prompt",
]
