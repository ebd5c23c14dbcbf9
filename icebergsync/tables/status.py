"""The status of a sync of many tables, from the catalog alone: its tables, each one's sink state, the aggregate.

A sync whose ``table.name`` is a template keeps no list of its tables: they are the tables of the template's
namespace whose names the template matches and that hold the sink's checkpoint property (a table is created,
and checkpointed, with its first records). The sync's dead-letter tables hold that checkpoint too; they are
told apart by the field only their checkpoint has (``protocol.MAIN_SNAPSHOT_ID``). A table the template matches
that another sink wrote last, and this one never, is reported apart (``OtherSinkTable``).

The ``icebergsync status`` command and the operator read the tables through ``read_lanes``, each with its own
listing and reading (the operator's within its catalog deadline), and summarize them with ``tables_status``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pyiceberg.catalog import Catalog as PyIcebergCatalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table.metadata import TableMetadata

from icebergsync import protocol
from icebergsync.metrics import lag
from icebergsync.resource_status import TablesStatus, TableStatus
from icebergsync.sink_state import SinkState, sink_state
from icebergsync.table_routing import template_matcher

MAX_LISTED = 20  #: tables listed in a status (items, other sinks)
MAX_READ = 200  #: tables read for one status: beyond this many the rest are counted as unread
MAX_LISTED_ROWS = 10_000  #: names listed from a catalog for one status
MAX_FRONTIER_CHARS = 256  #: a table's frontier in a status is cut to this many characters
ELLIPSIS = "…"


@dataclass(frozen=True)
class OtherSinkTable:
    """A table the template matches that another sink wrote last and this sink never did."""

    table: str
    sink_id: str


@dataclass(frozen=True)
class Lanes:
    """What the catalog shows of a sync of many tables."""

    states: tuple[SinkState, ...] = ()  #: its tables (holding its checkpoint), by name
    other_sinks: tuple[OtherSinkTable, ...] = ()
    unread: int = 0  #: matching tables not read (past ``MAX_READ``)

    @property
    def newest(self) -> SinkState | None:
        """The table state of the sink's newest commit, if any table has one."""
        committed = [state for state in self.states if state.seconds_since_commit is not None]
        return min(committed, key=lambda state: (state.seconds_since_commit, state.table), default=None)

    @property
    def highest_version(self) -> int | None:
        """The highest sink version any table has seen."""
        return max((state.sink_version for state in self.states if state.sink_version is not None), default=None)

    @property
    def taken_over(self) -> SinkState | None:
        """The first table of the sink that another sink committed to since (it writes that table now)."""
        return next((state for state in self.states if state.other_sink is not None), None)


def namespace_of(template: str) -> str:
    """The template's namespace (fixed: only the last part of a table-name template holds fields)."""
    return PyIcebergCatalog.namespace_to_string(PyIcebergCatalog.namespace_from(template))


def matching(template: str, names: Iterable[str]) -> list[str]:
    """The names (``namespace.table``) the template matches, sorted."""
    matcher = template_matcher(template)
    return sorted(name for name in set(names) if matcher.fullmatch(name))


def classify(metadata: TableMetadata, table: str, sink_id: str, now: float | None = None
             ) -> SinkState | OtherSinkTable | None:
    """One matching table: the sink's state on it (its table), the other sink that writes it, or None (not the
    sink's table, or its dead-letter table)."""
    if protocol.checkpoint_key(sink_id) not in metadata.properties:
        other = protocol.other_sink_on_top(metadata, sink_id)
        return OtherSinkTable(table, other) if other is not None else None
    try:
        checkpoint = protocol.parse_checkpoint(metadata, sink_id)
    except protocol.DamagedRecordError:
        checkpoint = None  # the state says so (a conflict): it is reported as the sink's table
    if checkpoint is not None and protocol.MAIN_SNAPSHOT_ID in checkpoint.extra:
        return None
    return sink_state(metadata, table, sink_id, now)


def read_lanes(template: str, names: Iterable[str], read: Callable[[str], TableMetadata | None], sink_id: str,
               now: float | None = None, limit: int = MAX_READ) -> Lanes:
    """Read the tables of ``names`` (``namespace.table``) the template matches, at most ``limit`` of them in
    name order; ``read`` gives a table's metadata, None when the table is gone since it was listed."""
    matched = matching(template, names)
    states: list[SinkState] = []
    others: list[OtherSinkTable] = []
    for name in matched[:limit]:
        metadata = read(name)
        found = classify(metadata, name, sink_id, now) if metadata is not None else None
        if isinstance(found, SinkState):
            states.append(found)
        elif isinstance(found, OtherSinkTable):
            others.append(found)
    return Lanes(tuple(states), tuple(others), max(0, len(matched) - limit))


def read_catalog_lanes(catalog: PyIcebergCatalog, template: str, sink_id: str, now: float | None = None) -> Lanes:
    """``read_lanes`` through a pyiceberg catalog: its ``list_tables`` of the template's namespace (none when the
    namespace does not exist yet), then ``load_table`` of each matching one."""
    try:
        identifiers = catalog.list_tables(namespace_of(template))[:MAX_LISTED_ROWS]
    except NoSuchNamespaceError:
        return Lanes()

    def read(name: str) -> TableMetadata | None:
        try:
            return catalog.load_table(name).metadata
        except NoSuchTableError:  # dropped since it was listed
            return None

    return read_lanes(template, [".".join(identifier) for identifier in identifiers], read, sink_id, now)


def backlog(state: SinkState) -> float | None:
    """The table's source backlog at its newest commit (:func:`icebergsync.metrics.lag.backlog`), None when its
    commit reported none."""
    return lag.backlog(state.source_lag)


def is_lagging(state: SinkState) -> bool:
    """A table lags when its newest commit reported a backlog above zero. (An idle topic's table commits
    nothing, so an old commit alone is no lag.)"""
    return (backlog(state) or 0) > 0


def total_backlog(states: Iterable[SinkState]) -> dict[str, float]:
    """The tables' backlogs added up, per unit."""
    return lag.total(state.source_lag for state in states)


def cut_text(text: str, limit: int = MAX_FRONTIER_CHARS) -> str:
    """``text``, or its first characters and an ellipsis (``limit`` characters in all)."""
    return text if len(text) <= limit else text[: limit - len(ELLIPSIS)] + ELLIPSIS


def problem(state: SinkState) -> str | None:
    """Why the sink cannot go on with the table, if it cannot."""
    if state.other_sink is not None:
        return f"sink {state.other_sink} committed to it after this sink's newest commit: it writes the table now"
    if state.resumed_from == "conflict":
        return ("its record of this sink cannot be resumed from (rolled back past every commit of the sink, or a "
                "damaged checkpoint or summary)")
    return None


def table_status(state: SinkState) -> TableStatus:
    """One table's entry."""
    return TableStatus(
        table=state.table,
        snapshot_id=state.snapshot_id,
        committed_at=state.committed_at,
        seconds_since_commit=state.seconds_since_commit,
        sink_version=state.written_by_version,
        frontier=cut_text(protocol.encode_json(state.frontier)) if state.frontier is not None else None,
        lag=lag.lag_text(state.source_lag),
        lagging=is_lagging(state),
        problem=problem(state),
    )


def _order(state: SinkState) -> tuple[bool, float, float, str]:
    """Problems first, then the largest backlog, then the longest without a commit (never: first), then name."""
    age = state.seconds_since_commit if state.seconds_since_commit is not None else float("inf")
    return problem(state) is None, -(backlog(state) or 0), -age, state.table


def tables_status(lanes: Lanes, limit: int = MAX_LISTED) -> TablesStatus:
    """The aggregate of a sync's tables, with at most ``limit`` tables and other sinks' tables listed."""
    ordered = sorted(lanes.states, key=_order)
    lagging = [state for state in ordered if is_lagging(state)]
    worst = max(lagging, key=lambda state: (backlog(state) or 0), default=None)
    newest = lanes.newest
    return TablesStatus(
        count=len(ordered),
        lagging=len(lagging),
        worst_lag=lag.lag_text(worst.source_lag) if worst else None,
        worst_lag_table=worst.table if worst else None,
        newest_commit_table=newest.table if newest else None,
        problems=sum(1 for state in ordered if problem(state) is not None),
        items=[table_status(state) for state in ordered[:limit]],
        omitted=max(0, len(ordered) - limit),
        unread=lanes.unread,
        other_sinks=[f"{other.table} ({other.sink_id})" for other in lanes.other_sinks[:limit]],
        other_sink_tables=len(lanes.other_sinks),
    )

