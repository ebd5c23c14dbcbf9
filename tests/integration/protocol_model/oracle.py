"""The oracle of the model-based protocol test: its own record of the table, and the outcome of every operation.

Nothing here imports the protocol or the committer. The record holds every snapshot that landed (its
parent, landing order, who wrote it, the frontier it states, the rows the table shows at it, whether
it expired), main's head, each sink's commits in landing order, the dead letters each sink still owes
the dead-letter table, the highest version of each sink that fenced the dead-letter table, and the
dead-letter table's rows. Predictions apply the rules of
docs/protocol.md to that record:

- **start-up**: fenced iff a higher version has ever committed for the sink on any of its tables: on
  main (every commit since the sink's checkpoint was last removed to start over: a rollback does not
  forget one, the checkpoint names it) or on the dead-letter table (its start-up's dead-letter fence,
  which neither a rollback of main nor the removal of main's checkpoint touches); a refused start-up
  writes nothing on either table; otherwise it resumes from the newest commit of the sink on main's history: one main still reaches,
  or the sink's last commit (its checkpoint) when expiry cut the way to it; a sink that has
  committed but has no commit on main was rolled back past: a conflict; a sink that never
  committed starts from its source's beginning;
- **a commit of a running attempt**: "table-changed" when the table was recreated or its schema
  changed since the attempt pinned it; "fenced" when another writer of the sink with a version at
  least the attempt's committed after the attempt's last commit; "rolled-back" when main's history
  no longer holds that commit; else "committed";
- **dead letters**: a trigger's bad records are owed from its main commit until its dead-letter
  commit; a complete start-up pays what is owed for main commits on main's history and forgets
  the rest (their range is read again);
- **tags and branches** of other writers: each reads the rows of the snapshot it names, under that snapshot's
  schema, whatever expiry and upkeep did since; no expiry removes a snapshot one names;
- **a keyed commit** (:func:`apply_changes`): per key the trigger's last change wins; every row of
  every key it touches goes, whatever the head it lands on holds (another writer's rows of the key
  included), and the winning upserts are added;
- **carried values** (:func:`carry`): a winning upsert whose source did not send some values (an unchanged
  TOASTed column) takes each from the key's newest earlier upsert in the trigger that has it, else from the
  key's live row on the head the commit lands on, as a reader of that row sees it; one an earlier delete of its
  key in the trigger leaves without a value, or whose key has no live row there, is a dead letter (its record
  the payload) and its key's rows go all the same.

Landed snapshots are learnt by their id, parent, timestamp and sequence number (what the catalog
assigned); what they must say and hold comes from the record alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

# A row's value: who wrote it (keyed: and which change), or, keyed, the tuple of its columns besides the key,
# ``who`` first (``who``, ``note``, ``part``).
Value = str | tuple[str | int | None, ...] | None
# A row: the source id (negative: another writer's; keyed: the key), its value, and the ``who`` column it was
# written to.
Row = tuple[int, Value, int]
Visible = tuple[int, Value]  # a row as a reader sees it: the column of an older schema epoch reads null

FENCE, DATA, MAINTENANCE, SCHEMA_CHANGE, FOREIGN = "fence", "data", "maintenance", "schema", "foreign"
CARRIED = "<not sent>"  # in a change's value: the source did not send this column (an unchanged TOASTed value)


def hidden(value: Value) -> Value:
    """``value`` as a reader sees it once its ``who`` column was dropped and added again: ``who`` reads null."""
    return (None, *value[1:]) if isinstance(value, tuple) else None


def seen(row: Row, who_column: int) -> Value:
    """The value of ``row`` as a reader of a schema whose ``who`` column is ``who_column`` sees it."""
    return row[1] if row[2] == who_column else hidden(row[1])


def apply_changes(head: Counter[Row], changes: Sequence[tuple[int, Value]], who_column: int) -> Counter[Row]:
    """The rows of a keyed table after a commit of ``changes`` ((key, value), None deleting the key, in source
    order) on a head holding ``head``: the last change of a key wins, and no older row of a touched key stays."""
    last = dict(changes)
    kept = Counter({row: n for row, n in head.items() if row[0] not in last})
    return kept + Counter((key, value, who_column) for key, value in last.items() if value is not None)


def carry(head: Counter[Row], changes: Sequence[tuple[int, Value]], who_column: int
          ) -> tuple[list[tuple[int, Value]], list[int]]:
    """``changes`` with the ``CARRIED`` values of each key's winning (last) upsert filled, as the sink must fill
    them on a head holding ``head``, and the indexes of the winning upserts that are dead letters instead (their
    value None: their key's rows go). Each value comes from the key's newest earlier upsert in the trigger that
    has it (a delete of the key met first makes the upsert a dead letter), else from its live row on the head
    (none: a dead letter)."""
    live = {row[0]: seen(row, who_column) for row in head}
    filled, dead = list(changes), []
    for key, index in {key: index for index, (key, _) in enumerate(changes)}.items():
        value = changes[index][1]
        if not isinstance(value, tuple) or CARRIED not in value:
            continue
        values, deleted = list(value), False
        for earlier_key, earlier in reversed(changes[:index]):
            if earlier_key != key:
                continue
            if not isinstance(earlier, tuple):  # a delete: nothing older of the key is left to keep
                deleted = True
                break
            values = [given if item == CARRIED else item for item, given in zip(values, earlier, strict=True)]
            if CARRIED not in values:
                break
        kept = live.get(key)
        if CARRIED in values and not deleted and isinstance(kept, tuple):
            values = [given if item == CARRIED else item for item, given in zip(values, kept, strict=True)]
        if CARRIED in values:
            dead.append(index)
            filled[index] = (key, None)
        else:
            filled[index] = (key, tuple(values))
    return filled, dead


@dataclass(frozen=True)
class Claim:
    """One attempt of one version of a sink."""

    sink: str
    version: int
    attempt: str


@dataclass
class Snap:
    """A snapshot that landed on the main table."""

    id: int
    parent: int | None
    order: int
    timestamp_ms: int
    writer: Claim | None
    kind: str
    frontier: int | None
    rows: Counter[Row]
    expired: bool = False
    who_column: int = 0  # the ``who`` column of the schema it was committed under (a reader of it reads that one)


@dataclass
class SinkRecord:
    """What the table holds of one sink: its commits in landing order, and the dead letters it owes."""

    commits: list[Snap] = field(default_factory=list)
    owed: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)  # (main snapshot id, payloads)


@dataclass
class Attempt:
    """A running attempt as the oracle knows it: what it pinned, its newest commit and that commit's frontier."""

    claim: Claim
    generation: int
    schema_epoch: int
    last: int
    frontier: int | None  # the next source id; None before the sink ever committed data

    @property
    def next_id(self) -> int:
        return self.frontier or 0


class TableModel:
    """The oracle's record of the main table, the dead-letter table and every sink writing them."""

    def __init__(self, columns: Sequence[str] = ("id", "who")) -> None:
        self.generation = 0
        self._initial_columns = list(columns)
        self._reset()

    def _reset(self) -> None:
        self.schema_epoch = 0  # raised by every schema change: an attempt's pin holds only while it stands
        self.who_column = 0  # raised when another writer drops and re-adds ``who``: older rows read it as null
        self.columns = list(self._initial_columns)
        self.widened: set[str] = set()  # the columns a schema change widened
        self.snaps: dict[int, Snap] = {}
        self.head: int | None = None
        self.sinks: dict[str, SinkRecord] = {}
        self.dead: Counter[str] = Counter()  # the dead-letter table's payloads
        # Per sink, the highest version whose start-up fenced the dead-letter table (its later dead-letter
        # commits are of versions that fenced it): no rollback of main and no start over touches it.
        self.dead_letter_fenced: dict[str, int] = {}
        self.refs: dict[str, int] = {}  # other writers' tags and branches: name -> the snapshot it names
        self._order = 0

    def recreate(self) -> None:
        """The tables were dropped and created again: nothing of the old ones counts."""
        self.generation += 1
        self._reset()

    # -- history ---------------------------------------------------------------------------------------

    def record(self, sink: str) -> SinkRecord:
        return self.sinks.setdefault(sink, SinkRecord())

    def history(self, snapshot_id: int | None = None) -> Iterator[Snap]:
        """Main's true history from ``snapshot_id`` (default: the head) down, expired snapshots included."""
        current = self.head if snapshot_id is None else snapshot_id
        while current is not None:
            snap = self.snaps[current]
            yield snap
            current = snap.parent

    def reachable(self) -> Iterator[Snap]:
        """Main's history as a reader can walk it: from the head down to the first expired snapshot."""
        for snap in self.history():
            if snap.expired:
                return
            yield snap

    def on_main(self, snapshot_id: int) -> bool:
        return any(snap.id == snapshot_id for snap in self.history())

    def present(self) -> list[Snap]:
        return [snap for snap in self.snaps.values() if not snap.expired]

    def visible_rows(self, snapshot_id: int | None = None) -> Counter[Visible]:
        """The rows a reader sees at a snapshot (default: the head) under the current schema."""
        at = self.head if snapshot_id is None else snapshot_id
        if at is None:
            return Counter()
        return Counter({(row[0], seen(row, self.who_column)): n for row, n in self.snaps[at].rows.items()})

    def rows_at_ref(self, name: str) -> Counter[Visible]:
        """The rows a reader of tag or branch ``name`` sees: its snapshot's rows under the schema it was committed
        under (a reader of a snapshot reads it with its own schema)."""
        snap = self.snaps[self.refs[name]]
        return Counter({(row[0], seen(row, snap.who_column)): n for row, n in snap.rows.items()})

    def protected(self) -> set[int]:
        """The snapshots a tag or branch names: no expiry removes them."""
        return set(self.refs.values())

    def rewritten_rows(self) -> Counter[Row]:
        """The head's rows as a rewrite writes them again: what a reader sees, under the current schema."""
        return Counter({(source_id, value, self.who_column): n for (source_id, value), n in self.visible_rows().items()})

    def land(self, snapshot_id: int, parent: int | None, timestamp_ms: int, writer: Claim | None, kind: str,
             frontier: int | None, rows: Counter[Row], branch: str | None = None) -> Snap:
        """A snapshot landed on main (its parent must be main's head: every commit swaps against it), or on
        another writer's ``branch`` (its parent must be the branch's head)."""
        assert snapshot_id not in self.snaps, f"snapshot {snapshot_id} landed twice"
        base = self.head if branch is None else self.refs[branch]
        assert parent == base, f"snapshot {snapshot_id} landed on {parent}, not on {branch or 'main'}'s head {base}"
        self._order += 1
        snap = Snap(snapshot_id, parent, self._order, timestamp_ms, writer, kind, frontier, rows,
                    who_column=self.who_column)
        self.snaps[snapshot_id] = snap
        if branch is not None:
            self.refs[branch] = snapshot_id
            return snap
        self.head = snapshot_id
        if writer is not None:
            self.record(writer.sink).commits.append(snap)
        return snap

    def reset(self, sink: str) -> None:
        """The sink's checkpoint property was removed to start over (docs/protocol.md, "Recovery"): the main table
        no longer records its commits, and what it owed the dead-letter table is read again. The dead-letter
        table is untouched: the versions that fenced it still fence every lower one."""
        self.sinks[sink] = SinkRecord()

    def expire(self, snapshot_ids: set[int]) -> None:
        for snapshot_id in snapshot_ids:
            self.snaps[snapshot_id].expired = True

    def rollback(self, target: int) -> None:
        self.head = target

    def publish(self, branch: str) -> None:
        """Main fast-forwarded to ``branch``'s head (write-audit-publish: main's head is the branch's ancestor)."""
        self.head = self.refs[branch]

    def change_columns(self) -> None:
        """Another writer dropped and re-added a column: rows written before read it as null."""
        self.schema_epoch += 1
        self.who_column += 1
        self.columns.remove("who")
        self.columns.append("who")

    def evolve(self, added: Sequence[str], widened: Sequence[str]) -> None:
        """A running attempt committed a schema change its source's records asked for (spark_app/decoding/schema_drift/)."""
        self.schema_epoch += 1
        self.columns.extend(added)
        self.widened.update(widened)

    def add_column(self, name: str) -> None:
        """A sink evolved the schema (an optional column added with its fence's claim, or by a schema commit of a
        running attempt whose source's records gained it, atomically)."""
        self.schema_epoch += 1
        self.columns.append(name)

    # -- predictions -----------------------------------------------------------------------------------

    def highest_version(self, sink: str) -> int:
        """The highest version that committed for the sink on any of its tables (main's record, the dead-letter
        table's)."""
        on_main = max((snap.writer.version for snap in self.record(sink).commits if snap.writer), default=0)
        return max(on_main, self.dead_letter_fenced.get(sink, 0))

    def start_outcome(self, claim: Claim) -> tuple[str, int | None]:
        """("fenced", the owning version), ("conflict", None) or ("resume", the frontier resumed from)."""
        highest = self.highest_version(claim.sink)
        if highest > claim.version:
            return "fenced", highest
        commits = self.record(claim.sink).commits
        newest_on_main = next((s for s in self.history() if s.writer and s.writer.sink == claim.sink), None)
        if newest_on_main is None:
            return ("conflict", None) if commits else ("resume", None)
        reachable = any(s.id == newest_on_main.id for s in self.reachable())
        if reachable or newest_on_main is commits[-1]:
            return "resume", newest_on_main.frontier
        return "conflict", None

    def commit_outcome(self, attempt: Attempt) -> str:
        """What the next commit of a running attempt (data, maintenance or expiry) must come to."""
        if attempt.generation != self.generation or attempt.schema_epoch != self.schema_epoch:
            return "table-changed"
        commits = self.record(attempt.claim.sink).commits
        # The sink's commits since the attempt's last one (all of them, when a reset forgot that one).
        since = next((i + 1 for i, snap in enumerate(commits) if snap.id == attempt.last), 0)
        if any(s.writer != attempt.claim and s.writer is not None and s.writer.version >= attempt.claim.version
               for s in commits[since:]):
            return "fenced"
        return "committed" if self.on_main(attempt.last) else "rolled-back"

    def limit_applies(self) -> bool:
        """Whether expiring main's history now could reach the documented limit (docs/protocol.md, "Limits"):
        some sink's last commit is off main, so expiry could make the rollback look like routine expiry."""
        return any(record.commits and not self.on_main(record.commits[-1].id) for record in self.sinks.values())

    def expirable(self, retain_last: int, keep: int) -> set[int]:
        """What a sink's own expiry removes: every present snapshot beyond the newest ``retain_last`` that
        main reaches, except the attempt's newest snapshot and those a tag or branch names."""
        retained = {snap.id for _, snap in zip(range(max(retain_last, 1)), self.reachable(), strict=False)}
        kept = retained | self.protected() | {keep}
        return {snap.id for snap in self.present() if snap.id not in kept}

    # -- dead letters ----------------------------------------------------------------------------------

    def owe(self, sink: str, main_snapshot: int, payloads: tuple[str, ...]) -> None:
        if payloads:
            self.record(sink).owed.append((main_snapshot, payloads))

    def pay(self, sink: str, main_snapshot: int) -> None:
        """The dead-letter commit of one main commit landed."""
        record = self.record(sink)
        for entry in [e for e in record.owed if e[0] == main_snapshot]:
            record.owed.remove(entry)
            self.dead.update(entry[1])

    def recover(self, claim: Claim) -> None:
        """A start-up's dead-letter fence landed: it records the claim's version on the dead-letter table, and pays
        what main's history still lists, the rest is read again."""
        sink = claim.sink
        self.dead_letter_fenced[sink] = max(self.dead_letter_fenced.get(sink, 0), claim.version)
        record = self.record(sink)
        for main_snapshot, payloads in record.owed:
            if self.on_main(main_snapshot):
                self.dead.update(payloads)
        record.owed = []
