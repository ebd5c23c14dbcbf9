"""Exceptions shared by the job and the operator, and the job's documented exit statuses."""

from __future__ import annotations

# Exit statuses of `icebergsync run`. FENCED is used for nothing else, so the operator (and a
# person reading a pod's status) can tell "superseded by a newer version" from a crash.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID_SPEC = 2
EXIT_FENCED = 75
EXIT_INCOMPATIBLE_SCHEMA = 3
EXIT_CATALOG_UNREACHABLE = 4
# The object store kept failing after the retry budget (icebergsync/transient/): nothing of that trigger committed.
EXIT_OBJECT_STORE_UNREACHABLE = 6
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
        super().__init__("invalid IcebergSync spec:\n" + "\n".join(f"  - {problem}" for problem in problems))


class FencedError(IcebergSyncError):
    """A newer launch of the same sink owns the table; this writer must stop without writing."""

    exit_status = EXIT_FENCED

    def __init__(self, sink_id: str, version: int, by_version: int, by_attempt: str | None = None):
        self.sink_id = sink_id
        self.version = version
        self.by_version = by_version
        self.by_attempt = by_attempt
        who = f"version {by_version}" + (f" (attempt {by_attempt})" if by_attempt else "")
        super().__init__(f"sink {sink_id} version {version} is fenced by {who}")


class IncompatibleSchemaError(IcebergSyncError):
    """The spec's schema cannot be reached from the table's schema by safe evolution."""

    exit_status = EXIT_INCOMPATIBLE_SCHEMA


class CatalogUnreachableError(IcebergSyncError):
    """The catalog could not be contacted; nothing was written."""

    exit_status = EXIT_CATALOG_UNREACHABLE


class ObjectStoreUnreachableError(IcebergSyncError):
    """The object store kept failing after the retry budget; nothing of the trigger was committed."""

    exit_status = EXIT_OBJECT_STORE_UNREACHABLE


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
