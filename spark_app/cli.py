"""`icebergsync run | status | validate`: the program users and the SparkApplication run.

The core's command line (``icebergsync.cli``) with the data plane's `run` command added.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from icebergsync import cli
from icebergsync.errors import FencedError
from icebergsync.spec import load_spec, shown

if TYPE_CHECKING:
    from spark_app.job.loop import SyncJob

log = logging.getLogger("icebergsync")


def run_command(args: argparse.Namespace) -> int:
    """Run the sync; return the documented exit status."""
    from icebergsync.catalog import open_catalog  # the data plane's imports: only for `run`
    from icebergsync.launch_check import check_launch
    from icebergsync.spark_conf import spark_conf
    from spark_app.job.loop import SyncJob, install_stop_handlers
    from spark_app.job.session import build_session, warm_up

    stop_requested = threading.Event()
    install_stop_handlers(stop_requested)
    sync = load_spec(args.spec)
    catalog = open_catalog(sync.spec.table.catalog_or_default)  # fail fast, before a JVM starts
    version = check_launch(catalog, sync, args.sink_version)
    log.info("starting %s as sink version %d%s", args.spec, version,
             "" if args.sink_version is not None else " (the one after the table's newest)")
    conf = {**spark_conf(sync.spec), **dict(args.conf)}
    # The JVM and the Python workers start while the sink fences the table (which needs no Spark).
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="isync-spark-start") as starter:
        session = starter.submit(
            lambda: warm_up(build_session(f"icebergsync-{sync.metadata.name}-v{version}", args.master or None, conf)))
        job = SyncJob(sync, version, session.result, catalog, stop_requested)
        server = serve_metrics(job, metrics_address(args.master))
        try:
            summary = job.run()
        except FencedError as fenced:
            log.error("FENCED: %s", fenced)
            return fenced.exit_status
        finally:
            session.result().stop()
            if server is not None:
                server.shutdown()
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


def metrics_address(master: str) -> str:
    """Where the driver serves its metrics: every interface under spark-submit in a pod (``--master ''``, as the
    operator launches it), the loopback interface for a local run."""
    return "0.0.0.0" if master == "" else "127.0.0.1"


def serve_metrics(job: SyncJob, address: str) -> Any:
    """Serve the job's metrics when ``spec.metrics.enabled`` (the server, or None); a port in use is a warning,
    never a stop of the sync."""
    from spark_app.job.metrics import serve

    settings = job.spec.metrics
    if not settings.enabled:
        return None
    try:
        server = serve(job.metrics, settings.port, address)
    except OSError as exc:
        log.warning("metrics: cannot serve on %s:%d (%s); the sync runs without its metrics endpoint", address,
                    settings.port, exc)
        return None
    log.info("metrics: serving on %s:%d/metrics", address, settings.port)
    return server


def positive_int(text: str) -> int:
    """An integer of at least 1 (the sink versions the CRD and the operator use)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def conf_pair(text: str) -> tuple[str, str]:
    """A ``KEY=VALUE`` Spark setting."""
    key, separator, value = text.partition("=")
    if not separator or not key.strip():
        raise argparse.ArgumentTypeError(f"{shown(text)} is not KEY=VALUE (e.g. spark.driver.memory=2g)")
    return key.strip(), value


def add_run_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `run SPEC [--sink-version N] [--master M] [--conf K=V]`."""
    run = commands.add_parser("run", help="run the sync (local Spark unless --master is empty under spark-submit)")
    run.add_argument("spec")
    run.add_argument("--sink-version", type=positive_int, default=None,
                     help="this launch's sink version (at least 1; a higher one fences lower ones); default: the one "
                          "after the newest version of this sink the table has seen (1 for a new table)")
    run.add_argument("--master", default="local[*]", help="Spark master; '' to take it from spark-submit")
    run.add_argument("--conf", action="append", default=[], type=conf_pair, metavar="KEY=VALUE",
                     help="extra Spark conf")
    run.set_defaults(handler=run_command)


def main(argv: list[str] | None = None) -> int:
    """The `icebergsync` program; returns the documented exit status."""
    return cli.main(argv, extra_commands=(add_run_command,), description=(__doc__ or "").splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
