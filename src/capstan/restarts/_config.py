"""The ``restarts`` configuration: strict, validated at start. A bad regex, label selector, webhook URL or token
stops Capstan with one line naming the setting (e.g. ``restarts.yaml: filters.exclude_pods: …``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from capstan.config import StrictModel, load_file
from capstan.kube import parse_label_selector
from capstan.notify import DeliveryPolicy, SinkConfig
from capstan.redact import RedactionPolicy, Redactor
from capstan.restarts._noise import RestartFilter, compile_patterns
from capstan.restarts._report import ReportSettings


class FilterConfig(StrictModel):
    """Which restarts are notified (every restart is still recorded)."""

    include_namespaces: list[str] = Field(default_factory=list)
    exclude_namespaces: list[str] = Field(default_factory=list)
    include_pods: list[str] = Field(default_factory=list)
    exclude_pods: list[str] = Field(default_factory=list)
    label_selector: str = ""
    ignore_exit_code_zero: bool = False

    @field_validator("include_namespaces", "exclude_namespaces", "include_pods", "exclude_pods")
    @classmethod
    def _regexes(cls, value: list[str]) -> list[str]:
        compile_patterns(value, "pattern")
        return value

    @field_validator("label_selector")
    @classmethod
    def _selector(cls, value: str) -> str:
        parse_label_selector(value)
        return value

    def build(self) -> RestartFilter:
        return RestartFilter(
            include_namespaces=compile_patterns(self.include_namespaces, "include_namespaces"),
            exclude_namespaces=compile_patterns(self.exclude_namespaces, "exclude_namespaces"),
            include_pods=compile_patterns(self.include_pods, "include_pods"),
            exclude_pods=compile_patterns(self.exclude_pods, "exclude_pods"),
            selector=parse_label_selector(self.label_selector),
            ignore_exit_code_zero=self.ignore_exit_code_zero,
        )


class ReportConfig(StrictModel):
    log_lines: int = Field(default=50, ge=0, le=5000)
    max_line_chars: int = Field(default=400, ge=40, le=10_000)
    # Regular expressions of further secret shapes, added to the built-in ones of ``capstan.redact`` (a
    # ``(?P<secret>…)`` group limits what is replaced). Both names are accepted; ``redaction.extra_value_patterns``
    # is the same list.
    redact_patterns: list[str] = Field(default_factory=list)
    extra_redact_patterns: list[str] = Field(default_factory=list)
    change_window_seconds: float = Field(default=3600.0, ge=0)
    max_events: int = Field(default=20, ge=0, le=500)

    @field_validator("redact_patterns", "extra_redact_patterns")
    @classmethod
    def _regexes(cls, value: list[str]) -> list[str]:
        compile_patterns(value, "pattern")
        return value


class RestartsConfig(StrictModel):
    """Restart diagnostics: where reports go and how noise is controlled."""

    cluster_name: str = Field(default="cluster", min_length=1, max_length=100)
    sinks: list[SinkConfig] = Field(min_length=1)
    filters: FilterConfig = Field(default_factory=FilterConfig)
    mute_seconds: float = Field(default=600.0, ge=0)
    restart_cap: int = Field(default=30, ge=0, description="Above this restartCount a container is digested.")
    cap_window_seconds: float = Field(default=600.0, gt=0)
    channel_annotation: str = "capstan.io/restart-channel"
    report: ReportConfig = Field(default_factory=ReportConfig)
    delivery: DeliveryPolicy = Field(default_factory=DeliveryPolicy)
    redaction: RedactionPolicy = Field(
        default_factory=RedactionPolicy,
        description="What is redacted from reports, notifications and the outbox (capstan.redact)",
    )

    @field_validator("sinks")
    @classmethod
    def _unique_names(cls, value: list[SinkConfig]) -> list[SinkConfig]:
        names = [s.name for s in value]
        if dupes := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"sink names must be unique, repeated: {', '.join(dupes)}")
        return value

    def redaction_policy(self) -> RedactionPolicy:
        """``redaction`` with the report's extra patterns added."""
        extra = [*self.redaction.extra_value_patterns]
        extra += [
            p for p in (*self.report.redact_patterns, *self.report.extra_redact_patterns) if p not in extra
        ]
        return self.redaction.model_copy(update={"extra_value_patterns": extra})

    def report_settings(self, redactor: Redactor | None = None) -> ReportSettings:
        """How reports are built; ``redactor`` (the store's keyed one in production) defaults to an unkeyed one of
        :meth:`redaction_policy`."""
        return ReportSettings(
            cluster=self.cluster_name,
            log_lines=self.report.log_lines,
            max_line_chars=self.report.max_line_chars,
            redactor=redactor if redactor is not None else Redactor(self.redaction_policy()),
            change_window_seconds=self.report.change_window_seconds,
            max_events=self.report.max_events,
        )


def load_restarts_config(path: Path) -> RestartsConfig:
    """Read and validate a restarts configuration file (YAML)."""
    return load_file(RestartsConfig, path)
