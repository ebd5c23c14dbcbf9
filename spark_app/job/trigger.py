"""One trigger of a sync of several tables: the data commits of the tables it touched, as one cut.

Each table's commit is that table's own (its fence check, its frontier: the sub-frontier of its streams,
its checkpoint), built by its :class:`~spark_app.commit.committer.SinkCommitter`. Where the catalog commits several
tables atomically they land as ONE cut (:func:`spark_app.commit.data_commit.commit_together`); elsewhere one table at
a time in identifier order, a crash between two of them leaving each table exactly once at its own frontier.
Every snapshot records its cut in ``icebergsync.cut``: ``{"atomic": …, "id": …, "tables": …}``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from icebergsync.errors import BadInputError, FencedError, ProgressConflictError, TableChangedError
from icebergsync.protocol import Frontier
from spark_app.commit.committer import SinkCommitter
from spark_app.commit.data_commit import commit_together
from spark_app.commit.swap import Commit
from spark_app.commit.trigger_output import TriggerOutput
from spark_app.faults import crash_point
from spark_app.iceberg.cut import atomic_cut_supported


def commit_trigger(parts: Sequence[tuple[SinkCommitter, TriggerOutput, Frontier]]) -> dict[str, Commit]:
    """Commit each ``(committer, output, frontier)``: the touched tables of one trigger, all of one catalog.

    Returns each table's commit by identifier. A refusal (fenced, rolled back, changed, bad input) raises
    after deleting what the refused commit and every table not yet committed staged; on the per-table path
    the tables before it keep their commits.
    """
    ordered = sorted(parts, key=lambda part: part[0].identifier)
    atomic = atomic_cut_supported(ordered[0][0].catalog)
    cut = {"atomic": atomic, "id": uuid.uuid4().hex, "tables": len(ordered)}
    commits = [committer.data_commit(output, frontier, cut) for committer, output, frontier in ordered]
    if atomic:
        landed = commit_together(commits)
        return {commit.identifier: done for commit, done in zip(commits, landed, strict=True)}
    result: dict[str, Commit] = {}
    for index, commit in enumerate(commits):
        try:
            [result[commit.identifier]] = commit_together([commit])
        except (FencedError, ProgressConflictError, TableChangedError, BadInputError):
            for later in commits[index + 1:]:
                later.abandon()
            raise
        crash_point("table-committed")
    return result
