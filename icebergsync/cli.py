"""The `icebergsync` command line of the core: logging, errors to exit statuses, and `status`.

The layers above add their own commands: the program users and the SparkApplication run is
``spark_app.cli`` (which adds `run`), so this module never imports the data plane.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import TYPE_CHECKING

from icebergsync.errors import EXIT_FAILED, EXIT_OK, IcebergSyncError
from icebergsync.spec import IcebergSync, load_spec
from icebergsync.transient.calls import last_line, unreachable

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

log = logging.getLogger("icebergsync")

# Adds one subcommand (parser with ``handler`` default) to the program's subparsers.
CommandAdder = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for noisy in ("py4j", "pyiceberg"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def status_command(args: argparse.Namespace) -> int:
    """Print what the table (each table, for a table.name template) says about the sync."""
    from icebergsync.catalog import open_catalog
    from icebergsync.sink_state import read_sink_state

    sync = load_spec(args.spec)
    catalog = open_catalog(sync.spec.table.catalog_or_default)
    if sync.spec.table.is_template:
        return _print_tables(catalog, sync, args.json)
    status = read_sink_state(catalog, sync.spec.table.name, sync.sink_id)
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
    _print_rows(rows)
    return EXIT_OK


def _print_rows(rows: Sequence[tuple[str, object]]) -> None:
    for name, value in rows:
        print(f"{name:>20}: {value if value is not None else '-'}")


def _print_tables(catalog: Catalog, sync: IcebergSync, as_json: bool) -> int:
    """A sync of many tables: the aggregate of its tables, then the listed ones (worst first)."""
    from icebergsync.tables.cuts import catalog_cut_support
    from icebergsync.tables.status import read_catalog_lanes, tables_status

    template = sync.spec.table.name
    summary = tables_status(read_catalog_lanes(catalog, template, sync.sink_id))
    cuts = catalog_cut_support(catalog)
    if as_json:
        print(json.dumps({"sink": sync.sink_id, "template": template, "atomicCuts": cuts.atomic,
                          "tables": summary.model_dump(by_alias=True, mode="json")}, indent=2, sort_keys=True))
        return EXIT_OK
    _print_rows([
        ("sink", sync.sink_id), ("tables of", template), ("tables", summary.count), ("lagging", summary.lagging),
        ("worst lag", f"{summary.worst_lag} ({summary.worst_lag_table})" if summary.worst_lag else None),
        ("newest commit", summary.newest_commit_table), ("with problems", summary.problems),
        ("atomic cuts", f"{'yes' if cuts.atomic else 'no'} ({cuts.reason})"),
        ("other sinks' tables", ", ".join(summary.other_sinks) or None),
    ])
    for item in summary.items:
        age = f"{item.seconds_since_commit:.1f}s ago" if item.seconds_since_commit is not None else "no commit"
        print(f"{item.table}: snapshot {item.snapshot_id or '-'} v{item.sink_version or '-'} {age}, "
              f"lag {item.lag or '-'}, frontier {item.frontier or '-'}" + (f"; {item.problem}" if item.problem else ""))
    if summary.omitted or summary.unread:
        print(f"({summary.omitted} more tables not listed, {summary.unread} matching tables not read)")
    return EXIT_OK


def run_arguments(spec_path: str, sink_version: int, master: str = "") -> list[str]:
    """The ``icebergsync run`` arguments for one launch (what the operator renders into the application)."""
    return ["run", spec_path, "--sink-version", str(sink_version), "--master", master]


def version_text() -> str:
    """``icebergsync <version> (pyspark <version>, Python <version>)`` of the installed distributions."""
    python = ".".join(map(str, sys.version_info[:3]))
    return f"icebergsync {metadata.version('icebergsync')} (pyspark {metadata.version('pyspark')}, Python {python})"


def build_parser(extra_commands: Sequence[CommandAdder] = (), description: str | None = None) -> argparse.ArgumentParser:
    """The ``icebergsync`` parser: the layers' ``extra_commands`` first, then ``status``."""
    parser = argparse.ArgumentParser(prog="icebergsync", description=description)
    parser.add_argument("--version", action="version", version=version_text())
    parser.add_argument("--log-level", default="INFO")
    commands = parser.add_subparsers(dest="command", required=True)
    for add_command in extra_commands:
        add_command(commands)
    status = commands.add_parser("status", help="print what the table says about the sync")
    status.add_argument("spec")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=status_command)
    return parser


def main(argv: list[str] | None = None, extra_commands: Sequence[CommandAdder] = (),
         description: str | None = None) -> int:
    """Parse ``argv``, run the chosen command, and turn its outcome into the documented exit status."""
    args = build_parser(extra_commands, description).parse_args(argv)
    _configure_logging(args.log_level)
    try:
        return int(args.handler(args))
    except Exception as error:
        return exit_status_of(error)


def exit_status_of(error: Exception) -> int:
    """Log ``error`` as the job's end and return its documented exit status.

    The last line printed is always one line saying what ended the job: a transient fault that outlasted the
    retry budget (:mod:`icebergsync.transient`) is the catalog's or the object store's documented status; any
    other unexpected error is logged with its traceback first (for whoever debugs it), then the line."""
    documented = error if isinstance(error, IcebergSyncError) else unreachable("the job", error)
    if documented is not None:
        log.error("%s", documented)
        return documented.exit_status
    log.warning("the job failed with an unexpected error", exc_info=error)
    log.error("icebergsync failed: %s", last_line(error))
    return EXIT_FAILED
