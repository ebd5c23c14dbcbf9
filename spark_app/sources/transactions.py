"""Triggers aligned with the source's transactions (``spec.changes.transactions``, Debezium's transaction metadata).

Debezium with ``provide.transaction.metadata=true`` names the source transaction of every change event
(``transaction: {id, total_order, data_collection_order}``) and writes a BEGIN and an END event per transaction
to its transaction topic; the END says how many change events the transaction has, per data collection
(``data_collections: [{data_collection, event_count}]``). A trigger reads, per topic partition, a range
``[frontier, end)`` chosen without regard to transactions; this module decides, before the range is staged and
again after (before anything is committed), whether that range holds every transaction it touches whole:

* per partition, for each transaction (its id; PostgreSQL's ``<txId>:<LSN>`` by its txId,
  :func:`spark_app.decoding.changes.transaction_key`), the offsets of its first and last event in the range and how
  many events it has there: before staging as the driver reads them (:mod:`spark_app.sources.transaction_scan`),
  after as the tasks noted them while decoding (:class:`spark_app.sources.units.UnitStats`);
* :class:`TransactionLog` reads the transaction topic on the driver (from where it stopped; after a start,
  backwards from the topic's end only as far as the transactions asked about need) for each transaction's
  END: the number of events of the data collections the sync reads (topic ``<prefix>.<data collection>``,
  the prefix being the transaction topic's name without ``.transaction``; when no data collection maps to a
  topic of the sync, the END's total);
* :func:`align` computes the *aligned end*: every transaction with fewer events in the range than its END
  counts is left out, and, since a frontier is a per-partition prefix, so is every transaction with an event at
  or after the first event of a left-out one in any partition, to a fixpoint; each partition then ends at the
  first offset of a left-out event (or where it ended);
* :func:`decide` turns that into what the job does (:class:`Verdict`): stage the range (or commit it, staged),
  stage it with another end instead (narrowed to the aligned end, or grown when the first pending transaction did
  not fit the range the source planned), wait for a transaction still being written, or commit it split once it
  waited ``maxWait``, and always when it is larger than one trigger's cap.

Everything here but :class:`TransactionLog`, the scan and :class:`TransactionAligner`'s clock is pure.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from spark_app.decoding.changes import payload_of, transaction_key
from spark_app.sources.kafka_client import ClientSettings, KafkaAccessError, OffsetLookup, read_range
from spark_app.sources.transaction_scan import Seen, TopicPartition, TransactionScan

log = logging.getLogger("icebergsync.transactions")

Offsets = dict[TopicPartition, int]

SPLIT_NOTE = "transaction-split"
# How long a transaction the transaction topic does not show yet is waited for before its events are committed
# without alignment: Debezium writes its BEGIN and END beside the events, and they may become visible later.
UNKNOWN_GRACE_SECONDS = 15.0
TRANSACTION_TOPIC_SUFFIX = ".transaction"
FIRST_READ_CHUNK = 4096  # offsets of the transaction topic read backwards at a time after a start (doubling)
MAX_REMEMBERED = 200_000  # END events and split transactions remembered; the oldest are forgotten first


def totals(seen: Seen) -> dict[str, int]:
    """Events of each transaction in the range, over every partition."""
    counts: dict[str, int] = {}
    for transactions in seen.values():
        for transaction, (_, _, count) in transactions.items():
            counts[transaction] = counts.get(transaction, 0) + count
    return counts


def align(ends: Mapping[TopicPartition, int], seen: Seen, incomplete: Iterable[str]) -> tuple[Offsets, set[str]]:
    """The aligned end of a range ending at ``ends`` and the transactions it leaves out.

    Leaves out every transaction of ``incomplete`` and, to a fixpoint, every transaction with an event at or after
    the first offset of a left-out one in the same partition (a frontier is a prefix of each partition: what is
    left out of a partition is everything from its first left-out event on). Each partition ends at its first
    left-out event, or at ``ends``. Events outside any transaction (snapshot reads, tombstones) follow their
    partition's end.
    """
    excluded = set(incomplete) & {t for transactions in seen.values() for t in transactions}
    aligned = dict(ends)
    while True:
        for tp, transactions in seen.items():
            firsts = [first for t, (first, _, _) in transactions.items() if t in excluded]
            if firsts:
                aligned[tp] = min(ends[tp], *firsts)
        cut = {t for tp, transactions in seen.items() for t, (_, last, _) in transactions.items()
               if t not in excluded and last >= aligned[tp]}
        if not cut:
            return aligned, excluded
        excluded |= cut


@dataclass(frozen=True)
class Verdict:
    """What to do with a trigger's range, planned (before staging) or staged.

    * ``commit``: stage it, or commit it as staged; ``split`` names transactions it holds only part of (larger
      than a trigger's cap, or waited for ``maxWait``), to be warned about and noted in the commit
      (``transaction-split``);
    * ``restage``: stage ``[frontier, end)`` instead (aligned, or, ``grows``, grown to hold the first pending
      transaction), what was staged discarded;
    * ``wait``: poll again, what was staged discarded: ``waiting`` are still being written (or their END is not out
      yet).
    """

    action: Literal["commit", "restage", "wait"]
    end: Offsets | None = None
    split: tuple[str, ...] = ()
    waiting: frozenset[str] = frozenset()
    unknown: tuple[str, ...] = ()  # transactions the transaction topic does not know: not aligned
    grows: bool = False  # a restage past the range's end


def decide(starts: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int],
           log_ends: Mapping[TopicPartition, int], seen: Seen, expected: Mapping[str, int | None], cap: int,
           overdue: Callable[[set[str]], bool]) -> Verdict:
    """What to do with a trigger's range ``[starts, ends)`` (partitions ending at ``log_ends`` now) whose events
    belong to the transactions ``seen``; ``expected`` is each transaction's event count from its END (None: BEGIN
    only, still open; absent: unknown to the transaction topic), ``cap`` the records one trigger may hold,
    ``overdue(ids)`` whether the oldest of those has been waited for longer than ``maxWait``."""
    counts = totals(seen)
    incomplete: set[str] = set()
    oversize: set[str] = set()
    unknown = sorted(t for t in counts if t not in expected)
    for transaction, count in counts.items():
        if transaction not in expected:
            continue
        wanted = expected[transaction]
        if wanted is not None and count >= wanted:
            continue
        if wanted is not None and wanted > cap:
            oversize.add(transaction)  # cannot fit one trigger: committed in parts
            continue
        incomplete.add(transaction)
    aligned, excluded = align(ends, seen, incomplete)
    if aligned == dict(ends):
        return Verdict("commit", split=tuple(sorted(oversize)), unknown=tuple(unknown))
    if any(aligned[tp] > starts.get(tp, aligned[tp]) for tp in aligned):
        return Verdict("restage", end=aligned, unknown=tuple(unknown))
    # Nothing whole is left. The first pending transaction may be complete in Kafka but larger than the part of
    # a partition the source planned (a capped range shared over partitions by backlog): grow the range.
    sizes = [expected[t] or 0 for t in incomplete if expected.get(t) is not None]
    if sizes:
        reach = 2 * max(sizes)  # its events (and a tombstone after each delete) from the head of each partition
        grown = {tp: min(log_ends.get(tp, end), max(end, starts.get(tp, end) + reach)) for tp, end in ends.items()}
        if grown == dict(ends):
            grown = {tp: min(log_ends.get(tp, end), end + max(1, end - starts.get(tp, end)))
                     for tp, end in ends.items()}
        if grown != dict(ends):
            return Verdict("restage", end=grown, unknown=tuple(unknown), grows=True)
    if overdue(incomplete):
        return Verdict("commit", split=tuple(sorted(excluded | oversize)), unknown=tuple(unknown))
    return Verdict("wait", waiting=frozenset(incomplete), unknown=tuple(unknown))


# -- the transaction topic ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class End:
    """A transaction's END event: its events in all, and per data collection."""

    events: int
    collections: dict[str, int] = field(default_factory=dict)

    def expected(self, prefix: str | None, streams: set[str]) -> int:
        """The events of the data collections the sync reads (topic ``<prefix>.<collection>``); the total when no
        data collection maps to one of ``streams`` (another topic naming)."""
        if prefix is not None:
            mapped = [count for collection, count in self.collections.items() if f"{prefix}.{collection}" in streams]
            if mapped:
                return sum(mapped)
        return self.events


def parse_event(value: bytes | None) -> tuple[str, str, End | None] | None:
    """``(status, id, End or None)`` of a transaction topic record (plain JSON or ``{schema, payload}``); None when
    it is not a BEGIN or END event."""
    record = payload_of(value)
    if not isinstance(record, dict) or not isinstance(record.get("id"), str):
        return None
    status = record.get("status")
    transaction = transaction_key(record["id"])
    if status == "BEGIN":
        return "BEGIN", transaction, None
    if status != "END" or not isinstance(record.get("event_count"), int):
        return None
    collections: dict[str, int] = {}
    for entry in record.get("data_collections") or []:
        if isinstance(entry, dict) and isinstance(entry.get("data_collection"), str) \
                and isinstance(entry.get("event_count"), int):
            collections[entry["data_collection"]] = entry["event_count"]
    return "END", transaction, End(record["event_count"], collections)


class TransactionLog:
    """What the driver knows of the transaction topic: END events by transaction id, and transactions begun.

    It reads forward from where it stopped; after a start it reads backwards from the topic's end, in growing
    chunks, only until every transaction asked about is known (its END, or its BEGIN: still open) or the topic's
    first offset is reached (the transaction is then unknown: no metadata, not aligned).
    """

    def __init__(self, client: ClientSettings, topic: str, lookup: OffsetLookup | None = None) -> None:
        self.client = client
        self.topic = topic
        self.lookup = lookup or OffsetLookup(client)
        self.ends: dict[str, End] = {}
        self.begun: dict[str, None] = {}  # insertion-ordered set
        self.position: dict[int, int] = {}  # per partition: everything below it up to floor has been read
        self.floor: dict[int, int] = {}
        self.records_read = 0
        self.missing_reported = False

    def known(self, transaction: str) -> bool:
        return transaction in self.ends or transaction in self.begun

    def refresh(self, wanted: Iterable[str]) -> None:
        """Read what is new, and, for transactions of ``wanted`` not known yet, further back."""
        partitions = self.lookup.partitions([self.topic])
        if not partitions:
            if not self.missing_reported:
                self.missing_reported = True
                log.warning("transactions: topic %r has no partitions (does it exist?): transactions cannot be "
                            "aligned until it does", self.topic)
            return
        begin, end = self.lookup.offsets(partitions)
        for tp in partitions:
            partition = tp[1]
            position = self.position.get(partition)
            if position is None:  # first look at the partition: read backwards on demand, below
                self.position[partition] = self.floor[partition] = end[tp]
            elif position < end[tp]:
                self._read(partition, max(position, begin[tp]), end[tp])
                self.position[partition] = end[tp]
        chunk = FIRST_READ_CHUNK
        missing = {t for t in wanted if not self.known(t)}
        while missing:
            below = {tp[1]: begin[tp] for tp in partitions if self.floor[tp[1]] > begin[tp]}
            if not below:
                return
            for partition, first in below.items():
                start = max(first, self.floor[partition] - chunk)
                self._read(partition, start, self.floor[partition])
                self.floor[partition] = start
            chunk *= 2
            missing = {t for t in missing if not self.known(t)}

    def _read(self, partition: int, start: int, end: int) -> None:
        for batch in read_range(self.client, self.topic, partition, start, end):
            for value in batch.column("value").to_pylist():
                self.records_read += 1
                event = parse_event(value)
                if event is None:
                    continue
                _, transaction, ended = event
                if ended is not None:
                    self.ends[transaction] = ended
                    self.begun.pop(transaction, None)
                    if len(self.ends) > MAX_REMEMBERED:
                        del self.ends[next(iter(self.ends))]
                elif transaction not in self.ends:
                    self.begun[transaction] = None
                    if len(self.begun) > MAX_REMEMBERED:
                        del self.begun[next(iter(self.begun))]

    def forget(self, transactions: Iterable[str]) -> None:
        """Drop what is known of transactions committed whole."""
        for transaction in transactions:
            self.ends.pop(transaction, None)
            self.begun.pop(transaction, None)

    def close(self) -> None:
        self.lookup.close()


class TransactionAligner:
    """The job's view of transactions across triggers: the transaction topic, the transactions of the ranges
    planned (:class:`TransactionScan`), when each transaction the job waits for was first waited for, and the
    transactions it committed split (their rest is not waited for)."""

    def __init__(self, topic: str, max_wait_seconds: float, client: ClientSettings, streams: Callable[[], list[str]],
                 cap: int, clock: Callable[[], float] = time.monotonic, transaction_log: TransactionLog | None = None,
                 scan: TransactionScan | None = None):
        self.topic = topic
        self.prefix = topic.removesuffix(TRANSACTION_TOPIC_SUFFIX) if topic.endswith(TRANSACTION_TOPIC_SUFFIX) else None
        self.max_wait_seconds = max_wait_seconds
        self.streams = streams
        self.cap = cap
        self.clock = clock
        self.log = transaction_log or TransactionLog(client, topic)
        self.scan = scan or TransactionScan(client)
        self.waiting_since: dict[str, float] = {}
        self.split_before: dict[str, None] = {}  # insertion-ordered set
        self._unknown_reported: set[str] = set()

    def check(self, starts: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int],
              log_ends: Mapping[TopicPartition, int], seen: Seen) -> Verdict:
        """The verdict on a trigger's range ``[starts, ends)``, whose events belong to the transactions ``seen``."""
        counts = totals(seen)
        if not counts:
            return Verdict("commit")
        wanted = [t for t in counts if t not in self.split_before]
        try:
            self.log.refresh(wanted)
        except KafkaAccessError:
            raise  # a wrong password or an untrusted certificate: waiting will not help
        except Exception as exc:  # the broker is unreachable or slow: decide at the next poll
            log.warning("transactions: cannot read %s: %s; the trigger waits", self.topic,
                        str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            self.log.lookup.close()
            return Verdict("wait", waiting=frozenset(counts))
        streams = set(self.streams())
        expected: dict[str, int | None] = {}
        for transaction in counts:
            if transaction in self.split_before:
                expected[transaction] = 0  # its first part is committed already: the rest is not waited for
            elif transaction in self.log.ends:
                expected[transaction] = self.log.ends[transaction].expected(self.prefix, streams)
            elif transaction in self.log.begun:
                expected[transaction] = None
        now = self.clock()
        for transaction in counts:  # not on the transaction topic yet (written beside the events, it may trail them)
            if transaction not in expected and now - self.waiting_since.setdefault(transaction, now) < min(
                    UNKNOWN_GRACE_SECONDS, self.max_wait_seconds):
                expected[transaction] = None  # waited for like an open one, for a moment

        def overdue(transactions: set[str]) -> bool:
            return any(now - self.waiting_since.setdefault(t, now) >= self.max_wait_seconds for t in transactions)

        verdict = decide(starts, ends, log_ends, seen, expected, self.cap, overdue)
        fresh = [t for t in verdict.unknown if t not in self._unknown_reported]
        if fresh:
            self._unknown_reported.update(fresh)
            log.warning("transactions: %d transaction(s) are not in %s (no BEGIN or END event, e.g. %s): their events "
                        "are committed without alignment", len(fresh), self.topic, fresh[0])
        return verdict

    def committed(self, seen: Seen, split: Iterable[str]) -> None:
        """A trigger holding ``seen`` was committed, ``split`` of its transactions only in part."""
        parted = set(split)
        whole = set(totals(seen)) - parted
        self.log.forget(whole)
        for transaction in whole | parted:
            self.waiting_since.pop(transaction, None)
        for transaction in parted:
            self.split_before[transaction] = None
            if len(self.split_before) > MAX_REMEMBERED:
                del self.split_before[next(iter(self.split_before))]

    def close(self) -> None:
        self.log.close()


# -- the job's hook -------------------------------------------------------------------------------------------


def aligner_for(source: Any, spec: Any) -> TransactionAligner | None:
    """The aligner of a sync with ``spec.changes.transactions`` (the kafka source), else None."""
    from spark_app.sources.kafka import ESTIMATED_BYTES_PER_RECORD, KafkaSource

    settings = spec.changes.transactions if spec.changes is not None else None
    if settings is None or not isinstance(source, KafkaSource):
        return None
    cap = min(source.settings.max_records_per_trigger,
              max(1, spec.commit.max_staged_bytes // ESTIMATED_BYTES_PER_RECORD))
    return TransactionAligner(settings.topic, settings.max_wait_seconds, source.options.client,
                              lambda: list(source.topics), cap)


def check_pending(aligner: TransactionAligner, pending: Any, seen: Seen) -> Verdict:
    """:meth:`TransactionAligner.check` of a Kafka trigger's range (a ``KafkaPending``) whose tasks saw ``seen``."""
    from spark_app.sources.kafka import topic_partitions

    ends = topic_partitions(pending.end)
    return aligner.check(pending.starts, {tp: ends[tp] for tp in pending.starts}, pending.log_ends, seen)


def check_planned(aligner: TransactionAligner, pending: Any) -> Verdict:
    """:meth:`TransactionAligner.check` of a Kafka trigger's range before it is staged, on the transactions the
    driver reads of its records (:class:`TransactionScan`)."""
    from spark_app.sources.kafka import topic_partitions

    return check_pending(aligner, pending, aligner.scan.seen(pending.starts, topic_partitions(pending.end)))
