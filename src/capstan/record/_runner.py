"""Running several collectors side by side, plus the recorder's configuration file.

A :class:`Collector` is anything with a ``name`` and ``async run(stop)``. The runner starts each in its own task:
a collector that crashes on a bug is logged and restarted with backoff, so one bad target never stops the others;
a :class:`~capstan.store.StoreWriteError` (full/read-only disk, lost database) stops every collector and is raised,
because writing nothing loudly beats writing half silently, and so does a :class:`~capstan.errors.UserError` (a
configuration error, e.g. a kubeconfig that cannot work): restarting cannot fix it, and restarting it for ever
hid it in a crash loop. More collectors (the Kubernetes recorder) are added with
:meth:`RecorderRunner.add` before :meth:`RecorderRunner.run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from prometheus_client import CollectorRegistry, start_http_server
from pydantic import Field, model_validator

from capstan.backoff import NO_JITTER, Backoff
from capstan.config import StrictModel, load_file, load_model, read_mapping
from capstan.errors import UserError
from capstan.kube import KubeConnect
from capstan.record._diff import DiffPolicy
from capstan.record._kube import KubeCollector, KubernetesConfig
from capstan.record._redis import RedisCollector, RedisTargetConfig
from capstan.redact import RedactionPolicy, Redactor
from capstan.store import (
    INGEST_CACHE_KIB,
    HistoryMetrics,
    HistoryWriter,
    OtlpExporter,
    RetentionPolicy,
    RetentionWorker,
    StoreWriteError,
    open_store,
    otlp_http_exporter,
)

log = logging.getLogger(__name__)


class Collector(Protocol):
    """One source of history; ``run`` returns when ``stop`` is set and raises only StoreWriteError (or bugs)."""

    name: str

    async def run(self, stop: asyncio.Event) -> None: ...


class RetentionConfig(StrictModel):
    max_age_days: float | None = Field(default=14.0, gt=0)
    max_megabytes: float | None = Field(default=None, gt=0)
    interval_s: float = Field(default=300.0, gt=0)


class OtlpConfig(StrictModel):
    endpoint: str = Field(description="OTLP/HTTP logs endpoint, e.g. http://127.0.0.1:4318/v1/logs")
    timeout_s: float = Field(default=10.0, gt=0, le=120)


class RecorderConfig(StrictModel):
    """The ``capstan record`` configuration file."""

    store: str = Field(description="SQLite file path or postgresql:// URL")
    source: str = Field(default="default", description="Name of this cluster in the records")
    redis: list[RedisTargetConfig] = Field(default_factory=list)
    kubernetes: KubernetesConfig | None = Field(default=None, description="Record cluster objects and Events")
    diff: DiffPolicy = Field(default_factory=DiffPolicy)
    redaction: RedactionPolicy = Field(
        default_factory=RedactionPolicy,
        description="What is redacted before anything is stored (capstan.redact)",
    )
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    otlp: OtlpConfig | None = None
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    metrics_address: str = "127.0.0.1"

    @model_validator(mode="after")
    def _unique_targets(self) -> RecorderConfig:
        names = [t.name for t in self.redis]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"redis target names must be unique: {', '.join(dupes)}")
        return self

    def lease_name(self) -> str:
        """The Lease ``capstan record --leader-elect`` campaigns for unless told another:
        ``capstan-record-<source>-<scope>``, ``scope`` being 8 hex digits of what this recorder covers (its
        watches' cursor keys and its Redis/Valkey targets). Replicas of one configuration share the Lease, so one
        of them records at a time; shards of one source (:attr:`KubernetesConfig.namespaces`, other kinds, other
        targets) get a Lease each, so every shard has its own leader."""
        from capstan.kube import scoped_lease_name

        scope = [w.key for w in self.kubernetes.watches()] if self.kubernetes is not None else []
        return scoped_lease_name("record", self.source, scope + [f"redis:{t.name}" for t in self.redis])


def load_recorder_config(path: Path, *, store: str | None = None) -> RecorderConfig:
    """The configuration file at ``path``; ``store`` (given on the command line or from a Secret through the
    environment) replaces its ``store:``, which the file may then leave out."""
    if store is None:
        return load_file(RecorderConfig, path)
    data = read_mapping(path)
    data["store"] = store
    return load_model(RecorderConfig, data, f"{path} (with the store given apart)")


class RecorderRunner:
    """Runs collectors concurrently until stopped (see the module docstring)."""

    def __init__(
        self, *, max_restart_backoff_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._collectors: list[Collector] = []
        self._max_backoff = max_restart_backoff_s
        self._clock = clock
        self.crashes: dict[str, int] = {}

    def add(self, collector: Collector) -> None:
        self._collectors.append(collector)

    @property
    def collectors(self) -> list[Collector]:
        return list(self._collectors)

    async def _supervise(self, collector: Collector, stop: asyncio.Event) -> None:
        # restarts wait 1 s, doubling up to the cap, without jitter
        backoff = Backoff(base=1.0, cap=self._max_backoff, jitter=NO_JITTER)
        while not stop.is_set():
            try:
                await collector.run(stop)
                return
            except (StoreWriteError, UserError):
                raise  # a configuration error is not a crash: restarting cannot fix it
            except Exception:
                self.crashes[collector.name] = self.crashes.get(collector.name, 0) + 1
                delay = backoff.next()
                log.exception("collector %s crashed; restarting in %.0fs", collector.name, delay)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=delay)

    async def run(self, stop: asyncio.Event) -> None:
        """Run every collector until ``stop``; a store failure stops all of them and is re-raised."""
        tasks = [asyncio.create_task(self._supervise(c, stop), name=c.name) for c in self._collectors]
        try:
            for fut in asyncio.as_completed(tasks):
                try:
                    await fut
                except StoreWriteError as exc:
                    log.critical("history store write failed, stopping the recorder: %s", exc)
                    stop.set()
                    raise
                except UserError as exc:
                    log.critical("configuration error, stopping the recorder: %s", exc)
                    stop.set()
                    raise
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)


def redis_collectors(
    config: RecorderConfig,
    history: HistoryWriter,
    *,
    metrics: HistoryMetrics | None,
    clock: Callable[[], float] = time.time,
    redactor: Redactor | None = None,
) -> list[RedisCollector]:
    """One collector per configured Redis/Valkey target (``redactor``: the store's keyed one by default)."""
    return [RedisCollector(t, history, clock=clock, metrics=metrics, redactor=redactor) for t in config.redis]


class Recorder:
    """The ``capstan record`` process: store + metrics + OTLP + retention + a runner of collectors.

    With a ``kubernetes:`` section it records that cluster through ``kube_connect``, which the caller builds from
    ``kubernetes.kubeconfig`` (see :class:`KubeCollector`). More collectors plug in with :meth:`add_collector`
    (anything satisfying :class:`Collector`) before :meth:`run`; they get the same store's history
    (``recorder.store.history``) and metrics (``recorder.metrics``).
    """

    def __init__(
        self,
        config: RecorderConfig,
        *,
        kube_connect: KubeConnect | None = None,
        clock: Callable[[], float] = time.time,
        registry: CollectorRegistry | None = None,
        metrics: HistoryMetrics | None = None,
    ) -> None:
        """``metrics``: the history metrics to report to (on their registry), made on ``registry`` (or a new one)
        when not given; a caller that retries construction while the store is unreachable gives the same ones
        each time (a registry takes each series once)."""
        if config.kubernetes is not None and kube_connect is None:
            raise ValueError("the configuration records a cluster (kubernetes:): give kube_connect")
        self.config = config
        self._clock = clock
        self.metrics = metrics if metrics is not None else HistoryMetrics(registry or CollectorRegistry())
        self.registry = self.metrics.registry
        self.store = open_store(
            config.store, clock=clock, metrics=self.metrics, writer_cache_kib=INGEST_CACHE_KIB
        )
        # one redactor for everything this process records, keyed with the store's key (capstan.redact)
        self.redactor = self.store.keys.redactor(config.redaction)
        self._otlp: OtlpExporter | None = None
        if config.otlp is not None:
            self._otlp = otlp_http_exporter(config.otlp.endpoint, timeout_s=config.otlp.timeout_s)
            self.store.history.add_commit_listener(self._otlp)
        self.redis_collectors = redis_collectors(
            config, self.store.history, metrics=self.metrics, clock=clock, redactor=self.redactor
        )
        self.runner = RecorderRunner()
        for collector in self.redis_collectors:
            self.runner.add(collector)
        self.kubernetes: KubeCollector | None = None
        if config.kubernetes is not None:
            assert kube_connect is not None  # checked before anything was opened
            self.kubernetes = KubeCollector(
                config.kubernetes,
                self.store.history,
                connect=kube_connect,
                source=config.source,
                policy=config.diff,
                metrics=self.metrics,
                clock=clock,
                redactor=self.redactor,
            )
            self.runner.add(self.kubernetes)

    def add_collector(self, collector: Collector) -> None:
        self.runner.add(collector)

    def poll_redis_once(self) -> dict[str, str | None]:
        """Poll every Redis/Valkey target once; returns the error line per target (None = ok). Store errors raise."""
        results: dict[str, str | None] = {}
        for collector in self.redis_collectors:
            try:
                collector.poll_once()
                results[collector.target.name] = None
            except StoreWriteError:
                raise
            except Exception as exc:
                results[collector.target.name] = collector.describe_error(exc)
                self.metrics.collector_errors.labels(collector.kind, collector.target.name).inc()
            finally:
                collector.close()
        return results

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop``: collectors, background retention and (if configured) the metrics endpoint."""
        r = self.config.retention
        policy = RetentionPolicy(
            max_age_s=None if r.max_age_days is None else r.max_age_days * 86400.0,
            max_bytes=None if r.max_megabytes is None else int(r.max_megabytes * 1024 * 1024),
        )
        retention = RetentionWorker(self.store.retention, policy, interval_s=r.interval_s, clock=self._clock)
        retention.start()
        server = None
        if self.config.metrics_port is not None:
            server, _thread = start_http_server(
                self.config.metrics_port, addr=self.config.metrics_address, registry=self.registry
            )
        try:
            await self.runner.run(stop)
        finally:
            retention.stop()
            if server is not None:
                server.shutdown()

    def close(self) -> None:
        if self._otlp is not None:
            self._otlp.flush()
            self._otlp.shutdown()
        self.store.close()
