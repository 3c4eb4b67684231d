"""Restart diagnostics: detect each container restart (pure diff of pod versions), build a complete report from a
snapshot, control noise without losing restarts, and turn reports and digests into chat notices.

Entry points: :class:`RestartWatcher` runs it live against a cluster (``RestartWatcher.over_store`` wires it to a
:class:`capstan.store.Store`); :class:`RestartNotifier` is the pure pipeline it drives (:func:`detect_restarts` →
:class:`RestartSnapshot` → :func:`build_report` → notices); :func:`load_restarts_config` reads its configuration;
:func:`account` checks delivered chat messages against injected restarts (the benches and the capacity simulator).
"""

from typing import TYPE_CHECKING

from capstan.lazy import lazy_attributes
from capstan.restarts._accounting import (
    AIRWALLEX_PATTERN,
    CAPSTAN_PATTERN,
    Accounting,
    ChatMessage,
    Injected,
    account,
    messages_from_slack_receiver,
)
from capstan.restarts._config import RestartsConfig, load_restarts_config
from capstan.restarts._detect import ContainerRestart, detect_restarts, detect_while_down
from capstan.restarts._meaning import explain, signal_of
from capstan.restarts._pipeline import Outcome, RestartNotifier
from capstan.restarts._render import recovered_digest_notices
from capstan.restarts._report import (
    RecordedChange,
    ReportSettings,
    RestartReport,
    RestartSnapshot,
    build_report,
    is_probe_failure,
    last_termination,
    resolve_owner,
    summarize_patch,
)

# The live watcher pulls in the cluster client (lightkube, the HTTP stack) and the delivery shell; the pure cores
# (detection, report, rendering) and the processes that only account for messages never need them.
_LAZY = {
    # the store's row types (SQLAlchemy): the analyzers and the message accounting import this package without them
    "last_seen": "capstan.restarts._records",
    "restart_batch": "capstan.restarts._records",
    "unsent_digested": "capstan.restarts._records",
    "RestartHistory": "capstan.restarts._watch",
    "RestartRecordWriter": "capstan.restarts._watch",
    "RestartWatcher": "capstan.restarts._watch",
}

__getattr__ = lazy_attributes("capstan.restarts", _LAZY)

if TYPE_CHECKING:
    from capstan.restarts._records import last_seen, restart_batch, unsent_digested
    from capstan.restarts._watch import RestartHistory, RestartRecordWriter, RestartWatcher

__all__ = [
    "AIRWALLEX_PATTERN",
    "CAPSTAN_PATTERN",
    "Accounting",
    "ChatMessage",
    "ContainerRestart",
    "Injected",
    "Outcome",
    "RecordedChange",
    "ReportSettings",
    "RestartHistory",
    "RestartNotifier",
    "RestartRecordWriter",
    "RestartReport",
    "RestartSnapshot",
    "RestartWatcher",
    "RestartsConfig",
    "account",
    "build_report",
    "detect_restarts",
    "detect_while_down",
    "explain",
    "is_probe_failure",
    "last_seen",
    "last_termination",
    "load_restarts_config",
    "messages_from_slack_receiver",
    "recovered_digest_notices",
    "resolve_owner",
    "restart_batch",
    "signal_of",
    "summarize_patch",
    "unsent_digested",
]
