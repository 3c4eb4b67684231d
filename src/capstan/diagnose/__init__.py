"""Diagnosis: analyzers that name a root cause from one cluster snapshot (issue 25).

:func:`diagnose` runs the registered analyzers (:data:`ANALYZERS`: ``pods``, ``scheduling``, ``services``,
``nodes``, ``references``, ``storage``, ``workloads``, ``batch``, ``scaling``, ``gpu``, ``quotas``, ``ingress``,
``rbac``, ``webhooks``) over a :class:`Snapshot` of live objects, Events,
previous-log tails and recorded changes, and returns a :class:`Diagnosis`: redacted :class:`Finding` objects,
symptoms folded into the roots that explain them and ranked in a fixed order (severity, symptoms explained,
confidence, id), the analyzers that raised (:class:`Failure`) and the kinds that could not be read
(:class:`Blind`). An analyzer is anything with the :class:`Analyzer` shape (:class:`FunctionAnalyzer` wraps a pure
function; :func:`about` names the object it is reading). Everything here is pure; building a snapshot from the
informer and the store, and the ``capstan diagnose`` command, come later (docs/diagnose.md).
"""

from capstan.diagnose._analyzer import Analyzer, Blind, Diagnosis, Failure, FunctionAnalyzer, about
from capstan.diagnose._finding import Category, Evidence, Finding, ObjectRef, Severity, Source, Symptom
from capstan.diagnose._registry import ANALYZERS, diagnose
from capstan.diagnose._snapshot import Readable, Snapshot

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
]
