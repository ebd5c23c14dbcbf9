"""Which manifests a manifest rewrite merges (spark_app/upkeep/manifests.py): threshold, grouping, size, bounds."""

from __future__ import annotations

from pyiceberg.manifest import ManifestContent, ManifestFile
from pyiceberg.table.snapshots import Snapshot

from spark_app.upkeep.manifests import (
    DEFAULT_TARGET_BYTES,
    ManifestPlan,
    ManifestThresholds,
    plan_manifest_rewrite,
    target_bytes,
)

HEAD = Snapshot(snapshot_id=99, sequence_number=50, timestamp_ms=0, manifest_list="/t/metadata/snap.avro")
THRESHOLDS = ManifestThresholds(max_manifests=4, target_bytes=1000, max_files=1000, max_bytes=10**9)


def manifest(name: str, size: int = 100, content: ManifestContent = ManifestContent.DATA, spec_id: int = 0) -> ManifestFile:
    return ManifestFile.from_args(manifest_path=f"/t/metadata/{name}.avro", manifest_length=size,
                                  partition_spec_id=spec_id, content=content, sequence_number=1,
                                  min_sequence_number=1, added_snapshot_id=1)


def bins(plan: ManifestPlan | None) -> list[list[str]]:
    assert plan is not None
    return sorted(sorted(m.manifest_path.rsplit("/", 1)[-1].removesuffix(".avro") for m in b) for b in plan.bins)


def test_nothing_is_due_until_the_snapshot_lists_more_than_max_manifests() -> None:
    four = [manifest(f"m{i}") for i in range(4)]
    assert plan_manifest_rewrite(HEAD, four, THRESHOLDS) is None
    plan = plan_manifest_rewrite(HEAD, [*four, manifest("m4")], THRESHOLDS)
    assert bins(plan) == [["m0", "m1", "m2", "m3", "m4"]]
    assert plan is not None and (plan.listed, plan.manifests, plan.bytes, plan.deferred) == (5, 5, 500, 0)


def test_contents_and_specs_are_never_merged_and_full_manifests_stay() -> None:
    manifests = [manifest("d0"), manifest("d1"), manifest("x0", content=ManifestContent.DELETES),
                 manifest("x1", content=ManifestContent.DELETES), manifest("s0", spec_id=1), manifest("s1", spec_id=1),
                 manifest("full", 1000), manifest("lone", content=ManifestContent.DELETES, spec_id=1)]
    assert bins(plan_manifest_rewrite(HEAD, manifests, THRESHOLDS)) == [["d0", "d1"], ["s0", "s1"], ["x0", "x1"]]


def test_bins_hold_at_most_the_target_size() -> None:
    manifests = [manifest(f"m{i}", 400) for i in range(5)]
    assert bins(plan_manifest_rewrite(HEAD, manifests, THRESHOLDS)) == [["m0", "m1"], ["m2", "m3"]]  # m4 alone stays


def test_bounds_take_the_largest_bins_and_always_one() -> None:
    manifests = [*(manifest(f"a{i}", 100) for i in range(6)),
                 *(manifest(f"x{i}", 100, ManifestContent.DELETES) for i in range(3))]
    plan = plan_manifest_rewrite(HEAD, manifests, ManifestThresholds(4, 1000, 6, 10**9))
    assert bins(plan) == [[f"a{i}" for i in range(6)]] and plan is not None and plan.deferred == 1
    plan = plan_manifest_rewrite(HEAD, manifests, ManifestThresholds(4, 1000, 4, 10**9))
    assert bins(plan) == [["a0", "a1", "a2", "a3"]]  # a bin never holds more than max_files: a4, a5 and x* wait
    assert plan is not None and plan.deferred == 2
    plan = plan_manifest_rewrite(HEAD, manifests, ManifestThresholds(4, 1000, 1000, 50))
    assert plan is not None and plan.manifests == 6 and plan.deferred == 1  # the first bin is taken whatever its bytes


def test_the_target_size_is_the_tables_manifest_target() -> None:
    assert target_bytes({}) == DEFAULT_TARGET_BYTES == 8 * 1024 * 1024
    assert target_bytes({"commit.manifest.target-size-bytes": "1024"}) == 1024
