"""`icebergsync run | status`: the same entry point the SparkApplication runs."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from importlib import metadata

from icebergsync.errors import EXIT_FAILED, EXIT_OK, FencedError, IcebergSyncError
from icebergsync.spec import load_spec

log = logging.getLogger("icebergsync")


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for noisy in ("py4j", "pyiceberg"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def run_command(args: argparse.Namespace) -> int:
    """Run the sync; return the documented exit status."""
    from icebergsync.catalog import open_catalog
    from spark_app.job import SyncJob, install_stop_handlers
    from spark_app.session import build_session, connector_conf

    stop_requested = threading.Event()
    install_stop_handlers(stop_requested)
    log.info("starting %s as sink version %d", args.spec, args.sink_version)
    sync = load_spec(args.spec)
    catalog = open_catalog(sync.spec.table.catalog)  # fail fast, before a JVM starts
    conf = {**sync.spec.spark.conf, **dict(item.split("=", 1) for item in args.conf)}
    conf.update(connector_conf(sync.spec.source.kind, conf))
    spark = build_session(f"icebergsync-{sync.metadata.name}-v{args.sink_version}", args.master or None, conf)
    job = SyncJob(sync, args.sink_version, spark, catalog, stop_requested)
    try:
        summary = job.run()
    except FencedError as fenced:
        log.error("FENCED: sink %s version %d stops without writing: version %d%s owns the table",
                  fenced.sink_id, fenced.version, fenced.by_version,
                  f" (attempt {fenced.by_attempt})" if fenced.by_attempt else "")
        return fenced.exit_status
    finally:
        spark.stop()
    log.info("done: sink=%s version=%d commits=%d records=%d dead_letters=%d frontier=%s",
             summary.writer.sink_id, summary.writer.version, summary.commits, summary.records,
             summary.dead_letters, json.dumps(summary.frontier, sort_keys=True))
    return summary.exit_status


def status_command(args: argparse.Namespace) -> int:
    """Print what the table says about the sync."""
    from icebergsync.catalog import open_catalog
    from icebergsync.sink_state import read_sink_state

    sync = load_spec(args.spec)
    status = read_sink_state(open_catalog(sync.spec.table.catalog), sync.spec.table.name, sync.sink_id)
    if args.json:
        print(json.dumps(status.as_dict(), indent=2, sort_keys=True))
        return EXIT_OK
    rows = [
        ("sink", status.sink_id), ("table", status.table), ("version", status.sink_version),
        ("last snapshot", status.snapshot_id), ("kind", status.kind), ("committed at", status.committed_at),
        ("since last commit", f"{status.seconds_since_commit:.1f}s" if status.seconds_since_commit is not None else None),
        ("frontier", json.dumps(status.frontier, sort_keys=True)), ("records added", status.records_added),
        ("dead letters added", status.dead_letters_added), ("table records", status.total_records),
        ("max event time", status.max_event_time), ("source lag", json.dumps(status.source_lag)),
    ]
    for name, value in rows:
        print(f"{name:>20}: {value if value is not None else '-'}")
    return EXIT_OK


def version_text() -> str:
    """``icebergsync <version> (pyspark <version>, Python <version>)`` of the installed distributions."""
    python = ".".join(map(str, sys.version_info[:3]))
    return f"icebergsync {metadata.version('icebergsync')} (pyspark {metadata.version('pyspark')}, Python {python})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="icebergsync", description=__doc__)
    parser.add_argument("--version", action="version", version=version_text())
    parser.add_argument("--log-level", default="INFO")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the sync (local Spark unless --master is empty under spark-submit)")
    run.add_argument("spec")
    run.add_argument("--sink-version", type=int, default=1)
    run.add_argument("--master", default="local[*]", help="Spark master; '' to take it from spark-submit")
    run.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark conf")
    run.set_defaults(handler=run_command)
    status = commands.add_parser("status", help="print what the table says about the sync")
    status.add_argument("spec")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=status_command)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _configure_logging(args.log_level)
    try:
        return int(args.handler(args))
    except IcebergSyncError as error:
        log.error("%s", error)
        return error.exit_status
    except Exception:
        log.exception("icebergsync failed")
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
