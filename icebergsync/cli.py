"""The `icebergsync` command line of the core: logging, errors to exit statuses, `status` and `validate`.

The layers above add their own commands: the program users and the SparkApplication run is
``spark_app.cli`` (which adds `run`), so this module never imports the data plane.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import TYPE_CHECKING

from icebergsync.errors import EXIT_FAILED, EXIT_OK, IcebergSyncError
from icebergsync.spec import IcebergSync, load_spec
from icebergsync.transient.calls import last_line, unreachable

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from icebergsync.launch_check import TableState
    from icebergsync.sink_state import SinkState
    from icebergsync.tables.status import Lanes

log = logging.getLogger("icebergsync")

# Adds one subcommand (parser with ``handler`` default) to the program's subparsers.
CommandAdder = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
VALIDATE_CATALOG_SECONDS = 15.0  #: how long `validate` waits for the catalog to answer
# A path in a message of a permission error that is not a Python PermissionError (pyarrow's, a Spark task's).
_QUOTED_PATH = re.compile(r"""['"]((?:file:/+|/)[^'"]+)['"]""")


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for noisy in ("py4j", "pyiceberg"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def status_command(args: argparse.Namespace) -> int:
    """Print what the table (each table, for a table.name template) says about the sync; another sink that
    writes the table now is named first."""
    from icebergsync.catalog import open_catalog
    from icebergsync.launch_check import read_table_state
    from icebergsync.tables.status import Lanes

    sync = load_spec(args.spec)
    catalog = open_catalog(sync.spec.table.catalog_or_default)
    state = read_table_state(catalog, sync)
    if state is None:
        raise IcebergSyncError(f"no table yet: {sync.spec.table.name} does not exist in the catalog; run first "
                               f"(icebergsync run {args.spec})")
    if isinstance(state, Lanes):
        return _print_tables(catalog, sync, state, args.json)
    settings = _source_settings(sync, [state])
    if args.json:
        print(json.dumps({**state.as_dict(), "source_settings": settings}, indent=2, sort_keys=True))
        return EXIT_OK
    _print_in_use(state)
    _print_source_settings(settings)
    rows = [
        ("sink", state.sink_id), ("table", state.table), ("version", state.sink_version),
        ("last snapshot", state.snapshot_id), ("kind", state.kind), ("committed at", state.committed_at),
        ("since last commit", f"{state.seconds_since_commit:.1f}s" if state.seconds_since_commit is not None else None),
        ("frontier", json.dumps(state.frontier, sort_keys=True)), ("records added", state.records_added),
        ("dead letters added", state.dead_letters_added), ("table records", state.total_records),
        ("max event time", state.max_event_time), ("source lag", json.dumps(state.source_lag)),
    ]
    _print_rows(rows)
    return EXIT_OK


def _print_in_use(state: TableState) -> None:
    """A line on top when another sink wrote the table (one of the sink's tables) last: it writes it now."""
    from icebergsync.launch_check import table_in_use

    refusal = table_in_use(state)
    if refusal is not None:
        print(f"WARNING: {refusal}")


def _source_settings(sync: IcebergSync, states: Sequence[SinkState]) -> dict[str, object] | None:
    """A sync of Debezium events: what its tables' newest data commits say of the documented Debezium settings
    (icebergsync.source_settings) as ``{"ok", "reason", "message"}``; None for other syncs."""
    from icebergsync.source_settings.checks import settings_verdict

    if sync.spec.changes is None or sync.spec.changes.format != "debezium":
        return None
    verdict = settings_verdict((state.table, state.source_notes) for state in states)
    return {"ok": verdict.ok, "reason": verdict.reason, "message": verdict.message}


def _print_source_settings(settings: dict[str, object] | None) -> None:
    """A line on top when the events show a documented Debezium setting not in use."""
    if settings is not None and not settings["ok"]:
        print(f"WARNING: source settings ({settings['reason']}): {settings['message']}")


def _print_rows(rows: Sequence[tuple[str, object]]) -> None:
    for name, value in rows:
        print(f"{name:>20}: {value if value is not None else '-'}")


def _print_tables(catalog: Catalog, sync: IcebergSync, lanes: Lanes, as_json: bool) -> int:
    """A sync of many tables: the aggregate of its tables, then the listed ones (worst first)."""
    from icebergsync.tables.cuts import catalog_cut_support
    from icebergsync.tables.status import tables_status

    template = sync.spec.table.name
    summary = tables_status(lanes)
    cuts = catalog_cut_support(catalog)
    settings = _source_settings(sync, lanes.states)
    if as_json:
        print(json.dumps({"sink": sync.sink_id, "template": template, "atomicCuts": cuts.atomic,
                          "sourceSettings": settings, "tables": summary.model_dump(by_alias=True, mode="json")},
                         indent=2, sort_keys=True))
        return EXIT_OK
    _print_in_use(lanes)
    _print_source_settings(settings)
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


def validate_command(args: argparse.Namespace) -> int:
    """Check the spec (as the operator and the job do) and that its catalog answers, without running anything."""
    from icebergsync.catalog import open_catalog_within

    sync = load_spec(args.spec)
    catalog = sync.spec.table.catalog_or_default
    open_catalog_within(catalog, VALIDATE_CATALOG_SECONDS)
    print(f"valid: sink {sync.sink_id}, {sync.spec.source.kind} source into {sync.spec.table.name} "
          f"({catalog.type} catalog at {catalog.uri} answers)")
    return EXIT_OK


def run_arguments(spec_path: str, sink_version: int, master: str = "") -> list[str]:
    """The ``icebergsync run`` arguments for one launch (what the operator renders into the application)."""
    return ["run", spec_path, "--sink-version", str(sink_version), "--master", master]


def version_text() -> str:
    """``icebergsync <version> (pyspark <version>, Python <version>)`` of the installed distributions."""
    python = ".".join(map(str, sys.version_info[:3]))
    return f"icebergsync {metadata.version('icebergsync')} (pyspark {metadata.version('pyspark')}, Python {python})"


def build_parser(extra_commands: Sequence[CommandAdder] = (), description: str | None = None) -> argparse.ArgumentParser:
    """The ``icebergsync`` parser: the layers' ``extra_commands`` first, then ``status`` and ``validate``."""
    parser = argparse.ArgumentParser(prog="icebergsync", description=description)
    parser.add_argument("--version", action="version", version=version_text())
    parser.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS,
                        help="logging level (case does not matter)")
    commands = parser.add_subparsers(dest="command", required=True)
    for add_command in extra_commands:
        add_command(commands)
    status = commands.add_parser("status", help="print what the table says about the sync")
    status.add_argument("spec")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=status_command)
    validate = commands.add_parser("validate", help="check the spec and that its catalog answers, without running")
    validate.add_argument("spec")
    validate.set_defaults(handler=validate_command)
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
    retry budget (:mod:`icebergsync.transient`) is the catalog's or the object store's documented status; a path
    it may not use (a read-only warehouse) is named (status 1); any other unexpected error is logged with its
    traceback first (for whoever debugs it), then the line."""
    documented = error if isinstance(error, IcebergSyncError) else unreachable("the job", error)
    if documented is not None:
        log.error("%s", documented)
        return documented.exit_status
    denied = permission_denied(error)
    if denied is not None:
        log.error("permission denied on %s: give this user access to it (a warehouse it cannot write: make it "
                  "writable, or point spec.table.catalog.warehouse at a directory it can write)", denied)
        return EXIT_FAILED
    log.warning("the job failed with an unexpected error", exc_info=error)
    log.error("icebergsync failed: %s", last_line(error))
    return EXIT_FAILED


def permission_denied(error: BaseException) -> str | None:
    """The path a permission error (``error`` or its cause, in this process or a Spark task) names; None when
    ``error`` is no permission error. ``"?"`` when it names none."""
    for cause in _causes(error):
        if isinstance(cause, PermissionError):
            return str(cause.filename) if cause.filename else _quoted_path(str(cause))
        if type(cause).__name__ in ("PythonException", "Py4JJavaError") and (
                "Permission denied" in str(cause) or "AccessDeniedException" in str(cause)):
            return _quoted_path(str(cause))
    return None


def _causes(error: BaseException) -> list[BaseException]:
    """``error`` and the chain of its causes (``raise … from``, or raised while handling)."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _quoted_path(text: str) -> str:
    found = _QUOTED_PATH.search(text)
    return found.group(1) if found else "?"
