"""Kubelet-like fault injection for kwok nodes, and the fault-scenario suite that measures the diagnosis.

:class:`Kubelet` writes the pod and node status a kubelet would (:class:`Termination` describes how a container
ended). A :class:`Scenario` (YAML, docs/faults.md; :func:`load_scenarios` reads a directory, by default the shipped
ones) says what to create, break, edit and expect; a :class:`Runner` plays it on a cluster in its own namespace and
scores the diagnosis with the pure :func:`score` into an :class:`Outcome`.
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
from capstan.faults._score import Score, score
from capstan.faults.kubelet import Kubelet, Termination
from capstan.lazy import lazy_attributes

# The runner needs the recorder and the store; loading the scenarios (`capstan faults list`) does not.
__getattr__ = lazy_attributes(
    "capstan.faults", {"Runner": "capstan.faults._runner", "Outcome": "capstan.faults._runner"}
)

if TYPE_CHECKING:
    from capstan.faults._runner import Outcome, Runner

__all__ = [
    "Expectation",
    "Kubelet",
    "ObjectKey",
    "Outcome",
    "Runner",
    "Scenario",
    "Score",
    "Termination",
    "builtin_dir",
    "load_scenario",
    "load_scenarios",
    "parse_scenario",
    "score",
]
