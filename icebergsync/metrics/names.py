"""The job's metrics as Prometheus exposes them: each name with its labels and meaning. The job defines its
series from these (spark_app/job/metrics/), docs/operations.md lists them and the chart's alerts and dashboard query
them (a test checks all three against this table)."""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "icebergsync_job_"


@dataclass(frozen=True)
class MetricName:
    """One exposed metric: its full name, type, labels (beyond the scrape's own) and meaning."""

    name: str
    kind: str  # counter, gauge or histogram
    labels: tuple[str, ...]
    help: str

    @property
    def base(self) -> str:
        """The name given to prometheus-client (a counter's without ``_total``)."""
        return self.name.removesuffix("_total") if self.kind == "counter" else self.name


SINK, TABLE = "sink", "table"
PHASES = ("plan", "stage", "commit", "upkeep")  # a trigger's phases (TRIGGER_PHASE)
STOP_REASONS = ("fenced", "progress_conflict", "bad_input", "catalog_unreachable", "failed")  # STOPS

RECORDS_READ = MetricName(PREFIX + "records_read_total", "counter", (SINK, TABLE),
                          "Records the tasks read and staged (a trigger staged again after a schema change or a "
                          "transaction re-plan counts again).")
SOURCE_BYTES_READ = MetricName(PREFIX + "source_bytes_read_total", "counter", (SINK,),
                               "Bytes of the source ranges staged, as the source sizes them (files: file sizes; "
                               "Kafka and the generator: an estimate per record).")
RECORDS_COMMITTED = MetricName(PREFIX + "records_committed_total", "counter", (SINK, TABLE),
                               "Records committed to the table.")
BYTES_COMMITTED = MetricName(PREFIX + "bytes_committed_total", "counter", (SINK, TABLE),
                             "Bytes of the data, delete and dead-letter files committed.")
DEAD_LETTERS = MetricName(PREFIX + "dead_letters_total", "counter", (SINK, TABLE),
                          "Records committed to the dead-letter table.")
COMMITS = MetricName(PREFIX + "commits_total", "counter", (SINK, TABLE), "Data commits.")
COMMIT_DURATION = MetricName(PREFIX + "commit_duration_seconds", "histogram", (SINK, TABLE),
                             "Time of each data commit (the fenced compare-and-swap, retries included).")
TRIGGER_PHASE = MetricName(PREFIX + "trigger_phase_seconds", "histogram", (SINK, "phase"),
                           "Time of each phase of a trigger: plan (range, units, claims), stage (tasks write "
                           "files), commit (merge small files, commit), upkeep (maintenance after the commit).")
LAST_COMMIT = MetricName(PREFIX + "last_commit_timestamp_seconds", "gauge", (SINK, TABLE),
                         "When the sink's newest snapshot of the table was committed (its fence after a restart).")
SOURCE_LAG = MetricName(PREFIX + "source_lag", "gauge", (SINK, TABLE, "unit"),
                        "The source's backlog beyond the table's frontier, by unit: records (Kafka: end offsets "
                        "minus the frontier, summed; the generator) or files (the files source). 0: idle.")
PARTITION_LAG = MetricName(PREFIX + "source_partition_lag_records", "gauge", (SINK, TABLE, "topic", "partition"),
                           "Kafka: one partition's end offset minus the frontier's offset.")
LAG_SECONDS = MetricName(PREFIX + "source_lag_seconds", "gauge", (SINK, TABLE, "clock"),
                         "0 while the backlog is 0. Otherwise clock=wall: seconds since the table last caught up "
                         "or committed; clock=event: now minus the newest event time committed (spec."
                         "eventTimeColumn). Growing with a backlog and no commit: stuck.")
UPKEEP_WORK = MetricName(PREFIX + "upkeep_total", "counter", (SINK, "work"),
                         "What the built-in maintenance did, by work: runs, data_files_rewritten, bytes_rewritten, "
                         "delete_files_removed, manifests_rewritten, snapshots_expired, orphans_removed.")
UPKEEP_FAILURES = MetricName(PREFIX + "upkeep_failures_total", "counter", (SINK,),
                             "Maintenance steps that failed (each is tried again after a later commit).")
STOPS = MetricName(PREFIX + "stops_total", "counter", (SINK, "reason"),
                   "Runs that stopped on an error, by reason: fenced, progress_conflict (the table was rolled "
                   "back or its record damaged), bad_input, catalog_unreachable, failed.")
SINK_VERSION = MetricName(PREFIX + "sink_version", "gauge", (SINK,), "The sink version this job runs as.")

JOB_METRICS = (RECORDS_READ, SOURCE_BYTES_READ, RECORDS_COMMITTED, BYTES_COMMITTED, DEAD_LETTERS, COMMITS,
               COMMIT_DURATION, TRIGGER_PHASE, LAST_COMMIT, SOURCE_LAG, PARTITION_LAG, LAG_SECONDS, UPKEEP_WORK,
               UPKEEP_FAILURES, STOPS, SINK_VERSION)
