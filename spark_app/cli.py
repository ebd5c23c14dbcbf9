"""`icebergsync run | status`: the program users and the SparkApplication run.

The core's command line (``icebergsync.cli``) with the data plane's `run` command added.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from icebergsync import cli
from icebergsync.catalog import open_catalog
from icebergsync.errors import FencedError
from icebergsync.spark_conf import spark_conf
from icebergsync.spec import load_spec, shown

log = logging.getLogger("icebergsync")


def run_command(args: argparse.Namespace) -> int:
    """Run the sync; return the documented exit status."""
    from spark_app.job import SyncJob, install_stop_handlers
    from spark_app.session import build_session, warm_up

    stop_requested = threading.Event()
    install_stop_handlers(stop_requested)
    log.info("starting %s as sink version %d", args.spec, args.sink_version)
    sync = load_spec(args.spec)
    catalog = open_catalog(sync.spec.table.catalog_or_default)  # fail fast, before a JVM starts
    conf = {**spark_conf(sync.spec), **dict(item.split("=", 1) for item in args.conf)}
    # The JVM and the Python workers start while the sink fences the table (which needs no Spark).
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="isync-spark-start") as starter:
        session = starter.submit(
            lambda: warm_up(build_session(f"icebergsync-{sync.metadata.name}-v{args.sink_version}",
                                          args.master or None, conf)))
        job = SyncJob(sync, args.sink_version, session.result, catalog, stop_requested)
        try:
            summary = job.run()
        except FencedError as fenced:
            log.error("FENCED: sink %s version %d stops without writing: version %d%s owns the table",
                      fenced.sink_id, fenced.version, fenced.by_version,
                      f" (attempt {fenced.by_attempt})" if fenced.by_attempt else "")
            return fenced.exit_status
        finally:
            session.result().stop()
    upkeep = summary.upkeep
    log.info("done: sink=%s version=%d commits=%d records=%d dead_letters=%d frontier=%s; maintenance: %d run(s) "
             "rewrote %d data file(s) (%d bytes) into %d, removed %d delete file(s), merged %d manifest(s) into %d, "
             "expired %d snapshot(s), removed %d orphan(s), %d step(s) failed and retried in %.1fs",
             summary.writer.sink_id, summary.writer.version,
             summary.commits, summary.records, summary.dead_letters, json.dumps(summary.frontier, sort_keys=True),
             upkeep.runs, upkeep.data_files_rewritten, upkeep.bytes_rewritten, upkeep.data_files_written,
             upkeep.delete_files_removed, upkeep.manifests_rewritten, upkeep.manifests_written,
             upkeep.snapshots_expired, upkeep.orphans_removed, upkeep.failures, upkeep.seconds)
    return summary.exit_status


def positive_int(text: str) -> int:
    """An integer of at least 1 (the sink versions the CRD and the operator use)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def add_run_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `run SPEC [--sink-version N] [--master M] [--conf K=V]`."""
    run = commands.add_parser("run", help="run the sync (local Spark unless --master is empty under spark-submit)")
    run.add_argument("spec")
    run.add_argument("--sink-version", type=positive_int, default=1,
                     help="this launch's sink version (at least 1; a higher one fences lower ones)")
    run.add_argument("--master", default="local[*]", help="Spark master; '' to take it from spark-submit")
    run.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark conf")
    run.set_defaults(handler=run_command)


def main(argv: list[str] | None = None) -> int:
    """The `icebergsync` program; returns the documented exit status."""
    return cli.main(argv, extra_commands=(add_run_command,), description=(__doc__ or "").splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
