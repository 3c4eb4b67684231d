"""OTLP export: each committed record as an OpenTelemetry log record, per the OTel logs data model.

Mapping (the same for every exporter backend):
- ``Timestamp`` = when it happened (engine time, Event time; for object changes the observation time);
- ``ObservedTimestamp`` = when Capstan saw it;
- ``EventName`` = ``k8s.object.added|modified|deleted``, ``k8s.event``, ``valkey.slowlog.entry``,
  ``valkey.acllog.entry``, ``valkey.commandlog.<type>.entry``, ``valkey.config.change``, ``valkey.server.restart``,
  ``capstan.history.gap``;
- ``Body`` = the patch/snapshot, the Event message, the engine entry or the gap;
- Resource = ``service.name`` plus ``k8s.cluster.name`` (Kubernetes records) or ``capstan.engine.target``
  (engine records). The object's own ``k8s.*`` identity
  (``k8s.namespace.name``, ``k8s.pod.name``...) is per record, so it goes in the record's attributes: one OTLP
  resource per object would split every export into thousands of resource groups.

It hooks into the store as a commit listener, so only records that really committed are exported.
"""

from __future__ import annotations

from typing import Any

from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter
from opentelemetry.sdk.resources import Resource

from capstan.store._models import Batch, EngineEntry, Gap, KubeEvent, ObjectChange

SCOPE = "capstan.history"
_KIND_ATTR = {
    "Pod": "pod",
    "Deployment": "deployment",
    "ReplicaSet": "replicaset",
    "StatefulSet": "statefulset",
    "DaemonSet": "daemonset",
    "Job": "job",
    "CronJob": "cronjob",
    "Node": "node",
    "Namespace": "namespace",
}


def _ns(seconds: float) -> int:
    return round(seconds * 1_000_000_000)


def _any(value: Any) -> Any:
    """A JSON value as an OTel AnyValue (no nulls inside maps; nulls in lists become empty strings)."""
    if isinstance(value, dict):
        return {str(k): _any(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [("" if v is None else _any(v)) for v in value]
    return value


def engine_event_name(log: str) -> str:
    if log == "config":
        return "valkey.config.change"
    if log == "restart":
        return "valkey.server.restart"
    if log.startswith("commandlog-"):
        return f"valkey.commandlog.{log.removeprefix('commandlog-')}.entry"
    return f"valkey.{log}.entry"


class OtlpExporter:
    """Emits log records through one LoggerProvider per record source (resource ``k8s.cluster.name``)."""

    def __init__(
        self, exporter: LogRecordExporter, *, service_name: str = "capstan", batch: bool = True
    ) -> None:
        self._exporter = exporter
        self._service = service_name
        self._batch = batch
        self._providers: dict[str, LoggerProvider] = {}

    def _logger(self, key: str, resource: dict[str, str]) -> Any:
        provider = self._providers.get(key)
        if provider is None:
            provider = LoggerProvider(resource=Resource.create({"service.name": self._service, **resource}))
            if self._batch:
                provider.add_log_record_processor(BatchLogRecordProcessor(self._exporter))
            else:
                from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor

                provider.add_log_record_processor(SimpleLogRecordProcessor(self._exporter))
            self._providers[key] = provider
        return provider.get_logger(SCOPE)

    def __call__(self, batch: Batch) -> None:
        self.export(batch)

    def export(self, batch: Batch) -> None:
        for c in batch.object_changes:
            self._logger(f"k8s:{c.source}", {"k8s.cluster.name": c.source}).emit(self.object_change(c))
        for e in batch.kube_events:
            self._logger(f"k8s:{e.source}", {"k8s.cluster.name": e.source}).emit(self.kube_event(e))
        for n in batch.engine_entries:
            self._logger(f"engine:{n.target}", {"capstan.engine.target": n.target}).emit(self.engine_entry(n))
        for g in batch.gaps:
            self._logger(f"gap:{g.source}", {"capstan.history.source": g.source}).emit(self.gap(g))

    @staticmethod
    def object_change(c: ObjectChange) -> LogRecord:
        attrs: dict[str, Any] = {
            "k8s.namespace.name": c.namespace,
            "k8s.object.kind": c.kind,
            "k8s.object.api_version": c.api_version,
            "k8s.object.name": c.name,
            "k8s.object.uid": c.uid,
            "k8s.object.resource_version": c.resource_version,
            "capstan.observed_via": c.observed_via,
            "capstan.version_seq": c.version_seq,
        }
        short = _KIND_ATTR.get(c.kind)
        if short is not None:
            attrs[f"k8s.{short}.name"] = c.name
            attrs[f"k8s.{short}.uid"] = c.uid
        body: dict[str, Any] = {"change_type": c.change_type}
        if c.patch is not None:
            body["patch"] = c.patch
        if c.snapshot is not None:
            body["snapshot"] = c.snapshot
        return LogRecord(
            timestamp=_ns(c.observed_at),
            observed_timestamp=_ns(c.observed_at),
            severity_number=SeverityNumber.INFO,
            severity_text="INFO",
            event_name=f"k8s.object.{c.change_type}",
            body=_any(body),
            attributes=attrs,
        )

    @staticmethod
    def kube_event(e: KubeEvent) -> LogRecord:
        warn = e.type == "Warning"
        return LogRecord(
            timestamp=_ns(e.event_time if e.event_time is not None else e.observed_at),
            observed_timestamp=_ns(e.observed_at),
            severity_number=SeverityNumber.WARN if warn else SeverityNumber.INFO,
            severity_text="WARN" if warn else "INFO",
            event_name="k8s.event",
            body=e.message,
            attributes={
                "k8s.namespace.name": e.namespace,
                "k8s.event.name": e.name,
                "k8s.event.uid": e.uid,
                "k8s.event.reason": e.reason,
                "k8s.event.type": e.type,
                "k8s.event.count": e.count,
                "k8s.object.kind": e.involved_kind,
                "k8s.object.name": e.involved_name,
                "k8s.object.uid": e.involved_uid,
            },
        )

    @staticmethod
    def engine_entry(n: EngineEntry) -> LogRecord:
        restart = n.log == "restart"
        return LogRecord(
            timestamp=_ns(n.happened_at),
            observed_timestamp=_ns(n.observed_at),
            severity_number=SeverityNumber.WARN if restart else SeverityNumber.INFO,
            severity_text="WARN" if restart else "INFO",
            event_name=engine_event_name(n.log),
            body=_any(n.payload),
            attributes={
                "capstan.engine.target": n.target,
                "capstan.engine.log": n.log,
                "capstan.engine.run_id": n.run_id,
                "capstan.engine.native_id": n.native_id,
            },
        )

    @staticmethod
    def gap(g: Gap) -> LogRecord:
        attrs: dict[str, Any] = {
            "capstan.gap.source": g.source,
            "capstan.gap.log": g.log,
            "capstan.gap.key": g.key,
        }
        if g.lost is not None:
            attrs["gap.lost_count"] = g.lost
        return LogRecord(
            timestamp=_ns(g.observed_at),
            observed_timestamp=_ns(g.observed_at),
            severity_number=SeverityNumber.WARN,
            severity_text="WARN",
            event_name="capstan.history.gap",
            body=_any({"reason": g.reason, "detail": g.detail}),
            attributes=attrs,
        )

    def flush(self, timeout_ms: int = 30_000) -> None:
        for provider in self._providers.values():
            provider.force_flush(timeout_ms)

    def shutdown(self) -> None:
        for provider in self._providers.values():
            provider.shutdown()
        self._providers.clear()


def otlp_http_exporter(endpoint: str, *, timeout_s: float = 10.0) -> OtlpExporter:
    """An exporter sending OTLP/HTTP protobuf to ``endpoint`` (e.g. http://127.0.0.1:4318/v1/logs)."""
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

    return OtlpExporter(OTLPLogExporter(endpoint=endpoint, timeout=timeout_s))
