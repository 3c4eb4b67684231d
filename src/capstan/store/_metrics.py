"""Prometheus metrics of the history recorder and store, on a registry the app object owns (never the default)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from capstan.store._models import Batch

_LAG_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class HistoryMetrics:
    """Records written by source, write lag, relists, gaps, collector errors, failed writes."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.records_written = Counter(
            "capstan_history_records_written",
            "Records newly written to the history store, by source and table.",
            ["source", "table"],
            registry=registry,
        )
        self.write_lag = Histogram(
            "capstan_history_write_lag_seconds",
            "Time from observing a record to committing it.",
            ["table"],
            buckets=_LAG_BUCKETS,
            registry=registry,
        )
        self.relists = Counter(
            "capstan_history_relists",
            "Relists performed by the recorder.",
            ["source", "kind"],
            registry=registry,
        )
        self.gaps = Counter(
            "capstan_history_gaps", "Gap records written.", ["source", "log"], registry=registry
        )
        self.lost_entries = Counter(
            "capstan_history_lost_entries",
            "Entries known lost (sum of gap counts).",
            ["source", "log"],
            registry=registry,
        )
        self.collector_errors = Counter(
            "capstan_history_collector_errors",
            "Failed polls of a collector, by collector and target.",
            ["collector", "target"],
            registry=registry,
        )
        self.write_failures = Counter(
            "capstan_history_write_failures",
            "Store writes that failed and were rolled back.",
            registry=registry,
        )
        self.pruned = Counter("capstan_history_pruned_rows", "Rows deleted by retention.", registry=registry)

    def observe_write(self, batch: Batch, inserted: dict[str, int], now: float) -> None:
        """Account one committed batch: counts per (source, table) and observation-to-commit lag."""
        sources: dict[tuple[str, str], int] = {}
        for c in batch.object_changes:
            sources[(c.source, "object_changes")] = sources.get((c.source, "object_changes"), 0) + 1
            self.write_lag.labels("object_changes").observe(max(0.0, now - c.observed_at))
        for e in batch.kube_events:
            sources[(e.source, "kube_events")] = sources.get((e.source, "kube_events"), 0) + 1
            self.write_lag.labels("kube_events").observe(max(0.0, now - e.observed_at))
        for n in batch.engine_entries:
            sources[(n.target, "engine_entries")] = sources.get((n.target, "engine_entries"), 0) + 1
            self.write_lag.labels("engine_entries").observe(max(0.0, now - n.observed_at))
        share = inserted.get("gaps", 0) / len(batch.gaps) if batch.gaps else 0.0
        for g in batch.gaps:
            if share:
                self.gaps.labels(g.source, g.log).inc(share)
                if g.lost:
                    self.lost_entries.labels(g.source, g.log).inc(g.lost * share)
        # NOTE: per-source counts are of offered records scaled by what the table actually inserted, so
        # idempotent re-writes do not inflate the counter.
        for table in ("object_changes", "kube_events", "engine_entries"):
            offered = sum(v for (src, tbl), v in sources.items() if tbl == table)
            new = inserted.get(table, 0)
            if offered == 0:
                continue
            for (src, tbl), v in sources.items():
                if tbl == table:
                    self.records_written.labels(src, table).inc(v * new / offered)
