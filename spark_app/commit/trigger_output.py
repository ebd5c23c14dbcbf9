"""What one trigger staged for its table, committed in one snapshot (:mod:`spark_app.commit.data_commit`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
from pyiceberg.manifest import DataFile

from spark_app.staging.writer import WritePlan


@dataclass
class TriggerOutput:
    """What one trigger staged, to be committed in one snapshot.

    ``delete_files`` are equality delete files of a keyed table (spark_app/staging/equality_deletes.py), committed in
    the same snapshot as ``data_files``. ``touched_keys`` (the key columns) are the keys a keyed
    trigger touched whose older rows it deletes by position: they are located on the head the commit
    swaps against, and the position deletes (format 2) or deletion vectors (format 3) written then
    (spark_app/iceberg/position_deletes/) join the same snapshot. ``carried`` are upserts missing values
    Debezium did not send: completed from their keys' live rows on that same head and written with
    ``carry_plan`` (spark_app/commit/carry/), they join it too (or its dead letters); ``moved`` are the trigger's deletes
    of source events, the old keys of primary-key updates whose creates are among ``carried``.
    ``removed_copies`` (a table without a primary key) are the distinct rows whose live copies the trigger removes,
    with how many (spark_app/commit/keyless_locate.py): located on that same head, and deleted by position with the keys' rows.
    """

    data_files: list[DataFile] = field(default_factory=list)
    dead_letter_files: list[DataFile] = field(default_factory=list)
    delete_files: list[DataFile] = field(default_factory=list)
    touched_keys: pa.Table | None = None
    carried: pa.Table | None = None
    carry_plan: WritePlan | None = None
    moved: pa.Table | None = None
    removed_copies: pa.Table | None = None
    truncate: bool = False  # the table is emptied first: the snapshot removes every live file (a source truncate)
    records: int = 0
    dead_letters: int = 0
    dead_letter_reasons: dict[str, int] = field(default_factory=dict)
    max_event_time: str | None = None
    source_lag: dict[str, object] | None = None
    source_notes: dict[str, object] | None = None

    @property
    def bytes(self) -> int:
        return sum(f.file_size_in_bytes for f in self.data_files + self.delete_files + self.dead_letter_files)

    def all_paths(self) -> list[str]:
        return [f.file_path for f in self.data_files + self.delete_files + self.dead_letter_files]
