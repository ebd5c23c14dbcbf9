"""Exceptions shared by the job and the operator, and the job's documented exit statuses."""

from __future__ import annotations

# Exit statuses of `icebergsync run` (docs/protocol.md). FENCED is used for nothing else, so the operator (and a
# person reading a pod's status) can tell "superseded by a newer version" from a crash.
EXIT_OK = 0
EXIT_FAILED = 1
# An invalid spec (every problem listed), a spec file that cannot be read, or a usage error (argparse's status).
EXIT_INVALID_SPEC = 2
EXIT_FENCED = 75
EXIT_INCOMPATIBLE_SCHEMA = 3
EXIT_CATALOG_UNREACHABLE = 4
# The object store kept failing after the retry budget (icebergsync/transient/): nothing of that trigger committed.
EXIT_OBJECT_STORE_UNREACHABLE = 6
# Another sink wrote the table last (its newest IcebergSync commit): nothing was launched or written.
EXIT_TABLE_IN_USE = 7
# The Schema Registry did not answer within the retry budget (an executor's decode, or the driver's).
EXIT_SCHEMA_REGISTRY_UNREACHABLE = 8
# A record or file that cannot be ingested and no dead-letter table to put it in (EX_DATAERR): waiting or
# relaunching will not help, the operator reports Stalled with the reason.
EXIT_BAD_INPUT = 65
# The table's record of this sink cannot be trusted (damaged checkpoint, rolled back past the sink's
# commits, progress of another source): nothing was written, a person must decide (docs/operations.md).
EXIT_PROGRESS_CONFLICT = 5


class IcebergSyncError(Exception):
    """Base class of the project's errors."""

    exit_status = EXIT_FAILED


class SpecError(IcebergSyncError):
    """An IcebergSync document is invalid; ``problems`` lists each one with its field path."""

    exit_status = EXIT_INVALID_SPEC

    def __init__(self, problems: list[str]):
        self.problems = problems
        # one problem in one line; several one per line, each with its field path
        listed = f" {problems[0]}" if len(problems) == 1 else "".join(f"\n  - {problem}" for problem in problems)
        super().__init__(f"invalid IcebergSync spec:{listed}")


class SpecFileError(IcebergSyncError):
    """The spec file cannot be read (missing, unreadable, not text): the message names it."""

    exit_status = EXIT_INVALID_SPEC


class FencedError(IcebergSyncError):
    """A newer launch of the same sink owns the table; this writer must stop without writing.

    The message names the version that owns the table and how to take it over."""

    exit_status = EXIT_FENCED

    def __init__(self, sink_id: str, version: int, by_version: int, by_attempt: str | None = None):
        self.sink_id = sink_id
        self.version = version
        self.by_version = by_version
        self.by_attempt = by_attempt
        who = f"version {by_version}" + (f" (attempt {by_attempt})" if by_attempt else "")
        super().__init__(f"sink {sink_id} version {version} stops without writing: {who} owns the table; to take it "
                         f"over, run without --sink-version (the next version) or with --sink-version "
                         f"{by_version + 1} or higher")


class TableInUseError(IcebergSyncError):
    """Another sink wrote the table last: a sink never writes a table another sink writes (nothing is launched)."""

    exit_status = EXIT_TABLE_IN_USE

    def __init__(self, table: str, other_sink: str, sink_id: str):
        self.table = table
        self.other_sink = other_sink
        self.sink_id = sink_id
        namespace, _, name = other_sink.partition("/")
        take_over = (f"to take it over on purpose (a renamed sync), give this sync spec.sinkId {name} (or "
                     f"metadata.name {name})" if sink_id.startswith(f"{namespace}/") else
                     f"a sync of namespace {sink_id.partition('/')[0]} cannot take over a sink of namespace {namespace}")
        super().__init__(f"table {table} is written by sink {other_sink}, not {sink_id} (its newest IcebergSync "
                         f"commit): a sink never writes a table another sink writes. Point spec.table.name at another "
                         f"table or stop the other writer; {take_over}")


class IncompatibleSchemaError(IcebergSyncError):
    """The spec's schema cannot be reached from the table's schema by safe evolution."""

    exit_status = EXIT_INCOMPATIBLE_SCHEMA


class CatalogUnreachableError(IcebergSyncError):
    """The catalog could not be contacted; nothing was written."""

    exit_status = EXIT_CATALOG_UNREACHABLE


class ObjectStoreUnreachableError(IcebergSyncError):
    """The object store kept failing after the retry budget; nothing of the trigger was committed."""

    exit_status = EXIT_OBJECT_STORE_UNREACHABLE


class SchemaRegistryUnreachableError(IcebergSyncError):
    """The Schema Registry did not answer usefully within the retry budget; nothing of the trigger is committed."""

    exit_status = EXIT_SCHEMA_REGISTRY_UNREACHABLE


class BadInputError(IcebergSyncError):
    """A record or file cannot be ingested and there is no dead-letter table; nothing of the trigger is committed."""

    exit_status = EXIT_BAD_INPUT


class CommitStateUnknownError(IcebergSyncError):
    """A commit's outcome could not be determined even after looking for our snapshot."""


class ProgressConflictError(IcebergSyncError):
    """The table's record of this sink cannot be resumed from safely; the sink stops without writing."""

    exit_status = EXIT_PROGRESS_CONFLICT


class TableChangedError(IcebergSyncError):
    """The table was recreated, or its schema changed, under a running sink; a restart re-plans from it."""
