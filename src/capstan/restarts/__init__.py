"""Restart diagnostics: detect each container restart (pure diff of pod versions), build a complete report from a
snapshot, control noise without losing restarts, and turn reports and digests into chat notices."""

from capstan.restarts._accounting import (
    AIRWALLEX_PATTERN,
    CAPSTAN_PATTERN,
    Accounting,
    ChatMessage,
    Injected,
    account,
    messages_from_slack_receiver,
)
from capstan.restarts._config import (
    FilterConfig,
    ReportConfig,
    RestartsConfig,
    load_restarts_config,
)
from capstan.restarts._detect import (
    ContainerCount,
    ContainerRestart,
    container_counts,
    detect_restarts,
    detect_while_down,
)
from capstan.restarts._meaning import explain, signal_of
from capstan.restarts._noise import (
    Digest,
    NoiseGate,
    Requirement,
    RestartFilter,
    compile_patterns,
    parse_label_selector,
)
from capstan.restarts._pipeline import Outcome, RestartNotifier
from capstan.restarts._records import (
    count_records,
    last_seen,
    notified_restarts,
    restart_batch,
    restart_records,
    unsent_digested,
)
from capstan.restarts._render import (
    digest_notices,
    recovered_digest_notices,
    report_notice,
    restart_token,
)
from capstan.restarts._report import (
    EventLine,
    NodeInfo,
    RecordedChange,
    ReportSettings,
    RestartReport,
    RestartSnapshot,
    Termination,
    WorkloadRef,
    build_report,
    last_termination,
    log_tail,
    resolve_owner,
)

__all__ = [
    "AIRWALLEX_PATTERN",
    "CAPSTAN_PATTERN",
    "Accounting",
    "ChatMessage",
    "ContainerCount",
    "ContainerRestart",
    "Digest",
    "EventLine",
    "FilterConfig",
    "Injected",
    "NodeInfo",
    "NoiseGate",
    "Outcome",
    "RecordedChange",
    "ReportConfig",
    "ReportSettings",
    "Requirement",
    "RestartFilter",
    "RestartNotifier",
    "RestartReport",
    "RestartSnapshot",
    "RestartsConfig",
    "Termination",
    "WorkloadRef",
    "account",
    "build_report",
    "compile_patterns",
    "container_counts",
    "count_records",
    "detect_restarts",
    "detect_while_down",
    "digest_notices",
    "explain",
    "last_seen",
    "last_termination",
    "load_restarts_config",
    "log_tail",
    "messages_from_slack_receiver",
    "notified_restarts",
    "parse_label_selector",
    "recovered_digest_notices",
    "report_notice",
    "resolve_owner",
    "restart_batch",
    "restart_records",
    "restart_token",
    "signal_of",
    "unsent_digested",
]
