"""Realistic bugs planted one at a time in the protocol and the committer (``scripts/mutate.sh`` runs them).

Each mutant replaces exact source text; ``tests/unit/test_mutants.py`` checks that every one still
applies, so the list cannot silently rot as the code moves. ``REVIEWED`` are the ten a reviewer
planted; ``NEW`` are ten more, on the parts the protocol grows through: unknown outcomes,
the compare-and-swap's requirements, maintenance commits, expiry, dead-letter recovery and the
same-version rule; ``KEYED`` are bugs of keyed commits: where the older rows of the
touched keys are located, and how they are deleted; ``UPKEEP`` are bugs of upkeep's rewrites, judged by
their own integration tests; ``JUDGE`` are bugs of the paths the model test drives (upkeep and
expiry, as it runs the product's own upkeep and reads every tag and branch; carry and drift detection), each
surviving the model before it; ``CUT_MODEL`` are bugs of the SQL catalog's cut that the multi-table model test
catches since its faults reach inside the cut.
"""

from __future__ import annotations

from dataclasses import dataclass

PROTOCOL = "icebergsync/protocol.py"
SWAP = "spark_app/commit/swap.py"
SINK = "spark_app/commit/sink.py"
DEAD_LETTERS = "spark_app/commit/dead_letters.py"
DATA_COMMIT = "spark_app/commit/data_commit.py"
HEAD_WRITES = "spark_app/commit/head_writes.py"
MAINTENANCE_COMMITS = "spark_app/commit/maintenance_commits.py"
EXPIRY = "spark_app/commit/expiry.py"
INTERNALS = "spark_app/iceberg/internals.py"
CUT = "spark_app/iceberg/cut.py"
LOCATE = "spark_app/commit/key_index/locate.py"
CHANGES = "spark_app/decoding/changes.py"
POSITION_DELETES = "spark_app/iceberg/position_deletes/stage.py"
COPY_ON_WRITE = "spark_app/commit/copy_on_write.py"
MAINTENANCE = "spark_app/upkeep/runner.py"
UPKEEP_REWRITE = "spark_app/upkeep/rewrite.py"
CARRY_FILL = "spark_app/commit/carry/fill.py"
DRIFT = "spark_app/decoding/schema_drift/drift.py"


@dataclass(frozen=True)
class Mutant:
    """One planted bug: ``(path, old, new)`` replacements, each of text that occurs exactly once."""

    name: str
    what: str
    replacements: tuple[tuple[str, str, str], ...]


REVIEWED = (
    Mutant("startup-fence-ge", "'>' turned '>=' in the start-up fence (a same-version restart is fenced)",
           ((PROTOCOL, "progress.highest.version > me.version", "progress.highest.version >= me.version"),)),
    Mutant("same-version-clause-dropped", "another attempt of the same version never outranks (a zombie commits)",
           ((PROTOCOL, "checkpoint.writer != me and checkpoint.writer.version >= me.version",
             "checkpoint.writer.version > me.version"),
            (PROTOCOL, "            same_version_above = commit.writer\n", "            pass\n"))),
    Mutant("checkpoint-not-highest", "the checkpoint is not counted toward the highest version",
           ((PROTOCOL, "    if checkpoint and (highest is None or checkpoint.writer.version > highest.version):\n"
                       "        highest = checkpoint.writer\n", ""),)),
    Mutant("other-sinks-are-mine", "other sinks' commits are counted as one's own",
           ((PROTOCOL, "            if summary.get(SINK_ID) != sink_id:\n                if last_commit",
             "            if SINK_ID not in summary:\n                if last_commit"),)),
    Mutant("rollback-to-own-commit-conflict", "a rollback to an earlier own commit is treated as a conflict",
           ((PROTOCOL, "            notes.append(f\"checkpoint snapshot {checkpoint.snapshot_id} is not on main",
             "            raise DamagedRecordError(f\"checkpoint snapshot {checkpoint.snapshot_id} is not on main"),)),
    Mutant("rolled-back-past-removed", "the rolled-back-past refusal before a commit is removed",
           ((SINK, "if protocol.rolled_back_past(metadata, self.writer.sink_id, last):",
             "if False and protocol.rolled_back_past(metadata, self.writer.sink_id, last):"),)),
    Mutant("no-recheck-after-conflict", "the fence is not re-checked after a commit conflict",
           ((SWAP, "                part.pin.check(part.identifier, table.metadata)\n"
                        "            part.check(table.metadata)\n",
             "                part.pin.check(part.identifier, table.metadata)\n"
             "            if not any(attempted):\n                part.check(table.metadata)\n"),)),
    Mutant("checkpoint-pending-ignored", "the dead letters the checkpoint carries are ignored",
           ((DEAD_LETTERS, "carried = protocol.parse_checkpoint(main, sink.writer.sink_id)", "carried = None"),)),
    Mutant("uuid-pin-dropped", "the table-uuid pin is not checked",
           ((SWAP, "if str(metadata.table_uuid) != self.table_uuid:", "if False:"),)),
    Mutant("expiry-unfenced", "a sink expires snapshots without a fence check",
           ((EXPIRY, "sink.part(sink.identifier, sink.steady_check(sink.last_snapshot), build)",
             "sink.part(sink.identifier, lambda metadata: None, build)"),)),
)

NEW = (
    Mutant("same-version-older-commit-fences", "a same-version attempt's older commit fences a rolled-back restart "
           "(a bug the review found)",
           ((PROTOCOL, "return same_version_above if checkpoint is None else None", "return same_version_above"),)),
    Mutant("unknown-outcome-not-searched", "after an unknown outcome the attempted snapshots are not looked for",
           ((SWAP, "landed = [next((s for s in map(table.metadata.snapshot_by_id, ids) if s is not None), None)\n"
                        "                  or _named_by_checkpoint(table.metadata, ids, built)\n",
             "landed = [None\n"),)),
    Mutant("no-head-requirement", "the commit does not require main's head it was checked on (no compare-and-swap)",
           ((CUT, "return (*self.transaction._requirements, *self.requirements)",
             "return (*(r for r in self.transaction._requirements if r.type != 'assert-ref-snapshot-id'), "
             "*self.requirements)"),)),
    Mutant("no-schema-requirement", "the commit does not require the schema it was checked on",
           ((SWAP, "AssertCurrentSchemaId(current_schema_id=table.metadata.current_schema_id),  # type: ignore",
             "# no schema requirement"),)),
    Mutant("maintenance-ignores-moved-head", "a maintenance commit lands although main moved since it was planned",
           ((MAINTENANCE_COMMITS, "if metadata.current_snapshot_id != planned.snapshot_id:", "if False:"),)),
    Mutant("maintenance-null-frontier", "a maintenance commit states no frontier",
           ((MAINTENANCE_COMMITS, "sink.statement(protocol.KIND_MAINTENANCE, sink.frontier, last)",
             "sink.statement(protocol.KIND_MAINTENANCE, None, last)"),)),
    Mutant("expiry-ignores-retain-last", "a sink's expiry keeps only the head, whatever retainLast says",
           ((EXPIRY, "zip(range(max(retain_last, 1)), protocol.main_ancestry(metadata), strict=False)",
             "zip(range(1), protocol.main_ancestry(metadata), strict=False)"),)),
    Mutant("dead-letters-re-added", "recovery re-adds dead-letter files the dead-letter table already holds",
           ((DEAD_LETTERS, "pending = [path for path in listed if normalize(path) not in present]", "pending = listed"),)),
    Mutant("oldest-own-commit", "recovery resumes from the oldest own commit on main instead of the newest",
           ((PROTOCOL, "            if last_commit is None:\n                last_commit = commit\n",
             "            last_commit = commit\n"),)),
    Mutant("expired-last-never-rolled-back", "a rollback whose rolled-back snapshot expired is not noticed",
           ((PROTOCOL, "    if any((s.summary.additional_properties if s.summary else {}).get(SINK_ID) == sink_id\n"
                       "           for s in main_ancestry(metadata)):\n        return True\n"
                       "    return not was_on_main(metadata, last.snapshot_id, last.sequence_number or 0, "
                       "last.timestamp_ms)",
             "    return False"),)),
)

KEYED = (
    Mutant("locate-on-own-last-commit", "the touched keys are located on the writer's own last commit, not on the "
           "head the commit swaps against",
           ((HEAD_WRITES, "located = locate_rows(table, snapshot, touched_keys, self._file_keys, stats, self._spark, "
                        "self._key_columns)",
             "located = locate_rows(table, self._sink.last_snapshot or snapshot, touched_keys, self._file_keys, stats, "
             "self._spark, self._key_columns)"),)),
    Mutant("no-relocate-on-retry", "a commit retried on a new head keeps the deletes located on its first round",
           ((DATA_COMMIT, "                deletes, cow = head_writes.position_deletes(table, output)\n",
             "                deletes, cow = self.__dict__.setdefault('_first', head_writes.position_deletes(table, output))\n"
             ),)),
    Mutant("deletes-not-touched", "a key a trigger only deletes is not among the keys it touches (its row stays)",
           ((CHANGES, "upserts.filter(complete).select(declared), winners.select(list(key)),",
             "upserts.filter(complete).select(declared), upserts.select(list(key)),"),)),
    Mutant("upper-bound-excluded", "a file or row group whose key bound equals a touched key is skipped",
           ((LOCATE, "else bisect.bisect_right(self.sorted, upper)", "else bisect.bisect_left(self.sorted, upper)"),)),
    Mutant("cow-keeps-located-rows", "a small file written again by copy-on-write keeps the rows the trigger "
           "located (the touched keys' older rows stay)",
           ((COPY_ON_WRITE, "            if f.path in result.located:\n", "            if False:\n"),)),
    Mutant("cow-drops-earlier-deletes", "a small file written again by copy-on-write brings back the rows earlier "
           "position deletes or DVs removed",
           ((COPY_ON_WRITE, "            parts = [applied[f.path]] if f.path in applied else []\n",
             "            parts = []\n"),)),
    Mutant("dv-not-merged", "a new deletion vector replaces the data file's live one without holding its positions",
           ((POSITION_DELETES, "target.positions.union(read_deletion_vector(io, old))", "target.positions"),)),
)

UPKEEP = (
    Mutant("manifest-rewrite-renumbers", "a manifest rewrite adds its entries anew: they take the rewrite's "
           "sequence numbers, so the deletes committed before it no longer apply to them",
           ((INTERNALS, "                for entry in entries:\n"
                        "                    writer.existing(entry)\n",
             "                for entry in entries:\n"
             "                    writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, "
             "snapshot_id=self._snapshot_id, data_file=entry.data_file))\n"),)),
)

JUDGE = (
    Mutant("upkeep-deletes-replaced-files", "upkeep deletes the files it replaced as soon as its commit lands "
           "(older snapshots, tags and branches still read them)",
           ((MAINTENANCE, '        crash_point("maintenance-committed")\n',
             '        crash_point("maintenance-committed")\n        for replaced in removed:\n'
             '            with contextlib.suppress(FileNotFoundError):  # the DVs of one Puffin file share its path\n'
             '                table.io.delete(replaced.file_path)\n'),)),
    Mutant("expiry-keeps-main-files-only", "expiry deletes every file main's remaining history does not read, though "
           "a tag or branch cut off from it by the expiry still reads it",
           ((MAINTENANCE, "kept = file_references(table, table.metadata.snapshots, live_only=True)",
             "kept = file_references(table, list(protocol.main_ancestry(table.metadata)), live_only=True)"),)),
    Mutant("expiry-of-referenced-snapshots", "a sink's expiry does not spare the snapshots tags and branches name",
           ((EXPIRY, "protected = {ref.snapshot_id for ref in metadata.refs.values()} | retained",
             "protected = {metadata.current_snapshot_id} | retained"),)),
    Mutant("rewrite-keeps-deleted-rows", "upkeep writes a data file again without applying its position deletes",
           ((UPKEEP_REWRITE, "group.spec_id, positions.get(live.path), keep)", "group.spec_id, None, keep)"),)),
    Mutant("carry-fills-every-carried-column", "a carried row takes from its key's live row every column some row of "
           "the trigger did not send, also those it sent itself",
           ((CARRY_FILL, "takes = pa.array([bool(names) and name in names for names in carries])",
             "takes = pa.array([bool(names) for names in carries])"),)),
    Mutant("drift-widening-reversed", "drift detection asks whether the column widens to the source's type rather "
           "than the source's to the column's: a narrow column the source now sends wider counts as fitting",
           ((DRIFT, "if column == source or widens(iceberg_type(source), iceberg_type(column)):",
             "if column == source or widens(iceberg_type(column), iceberg_type(source)):"),)),
)

CUT_MODEL = (  # judged by tests/integration/test_multi_table_model.py, whose faults reach inside the cut
    Mutant("cut-ignores-moved-pointer", "the SQL catalog's cut moves a table's pointer whatever it points at now "
           "(a commit another writer landed after the cut was built is undone)",
           ((CUT, "IcebergTables.table_name == name, IcebergTables.metadata_location == current.metadata_location)",
             "IcebergTables.table_name == name)"),)),
)

MUTANTS = REVIEWED + NEW + KEYED + UPKEEP + JUDGE + CUT_MODEL
