"""Diagnosis: analyzers that name a root cause from one cluster snapshot (issue 25).

:func:`diagnose` runs the registered analyzers (:data:`ANALYZERS`: ``pods``, ``scheduling``, ``services``,
``nodes``, ``references``, ``storage``, ``workloads``, ``batch``, ``scaling``, ``lifecycle``, ``network-policies``,
``gpu``, ``quotas``, ``ingress``, ``rbac``, ``webhooks``) over a :class:`Snapshot` of live objects, Events,
previous-log tails and recorded changes, and returns a :class:`Diagnosis`: redacted :class:`Finding` objects,
symptoms folded into the roots that explain them and ranked in a fixed order (severity, symptoms explained,
confidence, id), the analyzers that raised (:class:`Failure`) and the kinds that could not be read
(:class:`Blind`). An analyzer is anything with the :class:`Analyzer` shape (:class:`FunctionAnalyzer` wraps a pure
function; :func:`about` names the object it is reading). Everything here is pure but :func:`read_snapshot`, which
builds a snapshot from a live cluster and the history store (``capstan diagnose`` runs the two; docs/diagnose.md).
"""

from typing import TYPE_CHECKING

from capstan.diagnose._analyzer import Analyzer, Blind, Diagnosis, Failure, FunctionAnalyzer, about
from capstan.diagnose._finding import Category, Evidence, Finding, ObjectRef, Severity, Source, Symptom
from capstan.diagnose._registry import ANALYZERS, diagnose
from capstan.diagnose._snapshot import Readable, Snapshot
from capstan.lazy import lazy_attributes

# The live reader needs the cluster client's HTTP stack; the pure analyzers do not, so it loads on first use.
__getattr__ = lazy_attributes("capstan.diagnose", {"read_snapshot": "capstan.diagnose._live"})

if TYPE_CHECKING:
    from capstan.diagnose._live import read_snapshot

__all__ = [
    "ANALYZERS",
    "Analyzer",
    "Blind",
    "Category",
    "Diagnosis",
    "Evidence",
    "Failure",
    "Finding",
    "FunctionAnalyzer",
    "ObjectRef",
    "Readable",
    "Severity",
    "Snapshot",
    "Source",
    "Symptom",
    "about",
    "diagnose",
    "read_snapshot",
]
