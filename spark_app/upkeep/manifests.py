"""Which manifests one manifest rewrite merges, planned on the manifest list of one main snapshot (no I/O here).

Every commit adds manifests (a data commit one per content it adds, a compaction the ones it
rewrites) and nothing merges them, so a reader plans through more and more small files: Iceberg
merges them with ``RewriteManifests`` (or its merging appends). Once the snapshot lists more than
``rewriteManifests.maxManifests`` manifests, the manifests smaller than the table's
``commit.manifest.target-size-bytes`` (Iceberg's property, 8 MiB by default) are grouped by content
and partition spec and packed first-fit decreasing into bins of at most that size; each bin of two or
more becomes one manifest (a bin never holds more than ``maxFilesPerRun``). Bins are taken those of
most manifests first while they fit the run's bounds (``maxFilesPerRun`` manifests, ``maxBytesPerRun``
bytes of them); the first is always taken, so that every run makes progress.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyiceberg.manifest import ManifestFile
from pyiceberg.table.snapshots import Snapshot

from spark_app.staging.packing import first_fit_decreasing

TARGET_SIZE_PROPERTY = "commit.manifest.target-size-bytes"
DEFAULT_TARGET_BYTES = 8 * 1024 * 1024  # Iceberg's default for commit.manifest.target-size-bytes


@dataclass(frozen=True)
class ManifestThresholds:
    """``spec.maintenance.rewriteManifests`` and the run's bounds, as the planner applies them."""

    max_manifests: int
    target_bytes: int
    max_files: int
    max_bytes: int


@dataclass(frozen=True)
class ManifestPlan:
    """One run: planned on ``snapshot`` (which lists ``listed`` manifests), the bins each merged into one manifest."""

    snapshot: Snapshot
    bins: tuple[tuple[ManifestFile, ...], ...]
    listed: int
    deferred: int = 0  # bins the bounds left for a later run

    @property
    def manifests(self) -> int:
        return sum(map(len, self.bins))

    @property
    def bytes(self) -> int:
        return sum(_size(m) for manifests in self.bins for m in manifests)


def target_bytes(properties: dict[str, str]) -> int:
    """The table's manifest target size (``commit.manifest.target-size-bytes``)."""
    return int(properties.get(TARGET_SIZE_PROPERTY, DEFAULT_TARGET_BYTES))


def _size(manifest: ManifestFile) -> int:
    return manifest.manifest_length


def _path(manifest: ManifestFile) -> str:
    return manifest.manifest_path


def _chunks(manifests: list[ManifestFile], size: int) -> list[list[ManifestFile]]:
    return [manifests[start:start + size] for start in range(0, len(manifests), size)]


def plan_manifest_rewrite(snapshot: Snapshot, manifests: Sequence[ManifestFile],
                          thresholds: ManifestThresholds) -> ManifestPlan | None:
    """The manifest rewrite due on ``snapshot``, whose manifest list is ``manifests``; None when none is due."""
    if len(manifests) <= thresholds.max_manifests:
        return None
    groups: dict[tuple[int, int], list[ManifestFile]] = {}
    for manifest in manifests:
        if _size(manifest) < thresholds.target_bytes:
            groups.setdefault((int(manifest.content), manifest.partition_spec_id), []).append(manifest)
    bins = [part for _, small in sorted(groups.items())
            for packed in first_fit_decreasing(small, _size, thresholds.target_bytes, _path)
            for part in _chunks(packed, thresholds.max_files) if len(part) > 1]
    taken: list[tuple[ManifestFile, ...]] = []
    count = size = 0
    for packed in sorted(bins, key=lambda b: (-len(b), _path(b[0]))):
        grown = size + sum(map(_size, packed))
        if taken and (count + len(packed) > thresholds.max_files or grown > thresholds.max_bytes):
            continue
        taken.append(tuple(sorted(packed, key=_path)))
        count, size = count + len(packed), grown
    if not taken:
        return None
    return ManifestPlan(snapshot, tuple(taken), len(manifests), len(bins) - len(taken))
