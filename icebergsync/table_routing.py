"""Which table each source stream of a sync of several tables goes to, and each table's part of the frontier.

A stream is a Kafka topic, and a frontier maps each stream to its position (``{"<topic>": {"<partition>":
next_offset}}``). A table's commits carry the frontier restricted to its streams; the sync resumes from the
union of its tables' frontiers, each stream from the table it is routed to now (docs/protocol.md, "Many
tables in one sync").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from icebergsync.protocol import Frontier

_FIELD = re.compile(r"\{(topic|[1-9][0-9]*)\}")
_NOT_IN_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")


def is_template(name: str) -> bool:
    """True when a table name holds a field (``{topic}``, ``{1}``, …): one table per stream."""
    return _FIELD.search(name) is not None


def template_fields(name: str) -> list[str]:
    """The fields a table-name template names, in order (``topic``, ``1``, …)."""
    return _FIELD.findall(name)


def template_texts(template: str) -> list[str]:
    """The literal texts of a template around its fields (``db.t_{topic}`` gives ``["db.t_", ""]``)."""
    return _FIELD.split(template)[::2]


def template_matcher(template: str) -> re.Pattern[str]:
    """What the names ``template`` gives look like: its text, each field any identifier part."""
    parts = _FIELD.split(template)
    return re.compile("".join(re.escape(text) if index % 2 == 0 else "[A-Za-z0-9_]+"
                              for index, text in enumerate(parts)))


def identifier_part(text: str) -> str:
    """``text`` as a part of a table identifier: every character but letters, digits and ``_`` becomes ``_``,
    and a leading digit gets a ``_`` before it."""
    part = _NOT_IN_IDENTIFIER.sub("_", text)
    return f"_{part}" if part[:1].isdigit() else part


def table_for(template: str, stream: str, pattern: re.Pattern[str] | None = None) -> str:
    """The table ``template`` names for ``stream``: ``{topic}`` is the stream's name, ``{1}``, ``{2}``, … the
    groups of ``pattern``'s full match of it, each made an identifier part. Raises ``ValueError`` when
    ``pattern`` does not match the stream, or a group the template names is missing or empty."""
    match = pattern.fullmatch(stream) if pattern is not None else None
    if pattern is not None and match is None:
        raise ValueError(f"stream {stream!r} does not match {pattern.pattern!r}")

    def value(field: re.Match[str]) -> str:
        name = field.group(1)
        if name == "topic":
            return identifier_part(stream)
        group = int(name)
        found = match.group(group) if match is not None and group <= (pattern.groups if pattern else 0) else None
        if not found:
            raise ValueError(f"{field.group(0)} in {template!r}: stream {stream!r} has no such group, or it is empty")
        return identifier_part(found)

    return _FIELD.sub(value, template)


def table_frontier(frontier: Frontier, owns: Callable[[str], bool]) -> Frontier:
    """A table's part of the sync's frontier: the entries of the streams it ``owns`` (those routed to it)."""
    return {stream: position for stream, position in frontier.items() if owns(stream)}


def resume_frontier(routed: Mapping[str, str], progress: Mapping[str, Frontier | None], initial: Frontier) -> Frontier:
    """The frontier the sync resumes from: each stream's entry in the frontier of the table it is routed to,
    or its entry in ``initial`` (the source's start) when that table holds none (no progress of the sink, or
    the stream was never committed to it). A table's entries of streams routed elsewhere now are not taken."""
    resumed: Frontier = {}
    for stream, table in routed.items():
        position = (progress.get(table) or {}).get(stream, initial.get(stream))
        if position is not None:
            resumed[stream] = position
    return resumed
