"""What the table says before a launch: whether another sink writes it, and the version a new launch takes.

The operator (from its own bounded catalog reads) and `icebergsync run` (from the catalog) decide by these
same functions: a launch into a table whose newest IcebergSync commit on main is another sink's is refused
(``TableInUseError``; for a table-name template, any of the sink's tables), and a new launch's version is
above every version of the sink the table (every table) has seen.
"""

from __future__ import annotations

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError

from icebergsync.errors import TableInUseError
from icebergsync.sink_state import SinkState, read_sink_state
from icebergsync.spec import IcebergSync
from icebergsync.tables.status import Lanes, read_catalog_lanes

# What the catalog shows of a sync: its one table's state, or the tables of its table-name template.
TableState = SinkState | Lanes


def table_in_use(state: TableState | None) -> TableInUseError | None:
    """The refusal due when another sink committed to the sink's table (one of its tables) after it, else None."""
    taken = state.taken_over if isinstance(state, Lanes) else state
    if taken is None or taken.other_sink is None:
        return None
    return TableInUseError(taken.table, taken.other_sink, taken.sink_id)


def highest_version(state: TableState | None) -> int | None:
    """The highest version of the sink the table (any table, for a template) has seen; None: none yet."""
    if isinstance(state, Lanes):
        return state.highest_version
    return state.sink_version if state is not None else None


def read_table_state(catalog: Catalog, sync: IcebergSync) -> TableState | None:
    """What ``catalog`` shows of ``sync``'s table (tables); None when its one table does not exist yet."""
    if sync.spec.table.is_template:
        return read_catalog_lanes(catalog, sync.spec.table.name, sync.sink_id)
    try:
        return read_sink_state(catalog, sync.spec.table.name, sync.sink_id)
    except NoSuchTableError:
        return None


def check_launch(catalog: Catalog, sync: IcebergSync, sink_version: int | None) -> int:
    """The version to launch ``sync`` as: ``sink_version``, or (None) the one after the table's highest of the
    sink, 1 for a new table. Raises ``TableInUseError`` when another sink writes the table."""
    state = read_table_state(catalog, sync)
    refusal = table_in_use(state)
    if refusal is not None:
        raise refusal
    return sink_version if sink_version is not None else (highest_version(state) or 0) + 1
