"""Position deletes without a catalog: deletion-vector blobs, Puffin files, position delete files and DV files.

Byte-compared with Apache Iceberg's own binary test resources (tests/unit/resources/iceberg/README.md).
"""

from __future__ import annotations

import io
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record

from spark_app.iceberg import internals
from spark_app.iceberg.position_deletes.deletion_vector import (
    MAGIC,
    MAX_POSITION,
    DeletionVector,
    DeletionVectorError,
)
from spark_app.iceberg.position_deletes.dv_files import read_deletion_vector, write_deletion_vectors
from spark_app.iceberg.position_deletes.plan import DeleteTarget, PositionDeletePlan
from spark_app.iceberg.position_deletes.position_files import write_position_delete_file
from spark_app.iceberg.position_deletes.puffin import (
    Blob,
    BlobMetadata,
    PuffinError,
    read_blob,
    read_footer,
    write_puffin,
)

RESOURCES = Path(__file__).parent / "resources" / "iceberg"
KEY = 1 << 32  # one 32-bit bitmap's span: position = key * KEY + low
CONTAINER = 1 << 16


def resource(name: str) -> bytes:
    return (RESOURCES / name).read_bytes()


# -- deletion-vector-v1 blobs ---------------------------------------------------------------------------


def all_container_types() -> DeletionVector:
    """TestBitmapPositionDeleteIndex.testAllContainerTypesIndexSerialization (its delete(a, b) is [a, b))."""
    vector = DeletionVector([5, 7, KEY + 10, KEY + 20])
    for key in (0, 1):
        first = 1 if key == 0 else 10
        last = 1000 if key == 0 else 500
        vector.add_range(key * KEY + CONTAINER + first, key * KEY + CONTAINER + last)
        vector.add_range(key * KEY + 2 * CONTAINER + 1, key * KEY + 3 * CONTAINER - 1)
    return vector


@pytest.mark.parametrize(("golden", "vector"), [
    ("empty-position-index.bin", lambda: DeletionVector()),
    ("small-alternating-values-position-index.bin", lambda: DeletionVector([1, 3, 5, 7, 9])),
    ("small-and-large-values-position-index.bin",
     lambda: DeletionVector([100, 101, 2**31 - 1 + 100, 2**31 - 1 + 101])),
    ("all-container-types-position-index.bin", all_container_types),
])
def test_blobs_are_the_bytes_icebergs_java_writer_writes(golden: str, vector: object) -> None:
    built = vector()  # type: ignore[operator]
    expected = resource(golden)
    assert built.serialize() == expected
    read = DeletionVector.deserialize(expected, cardinality=built.cardinality)
    assert read == built and list(read) == sorted(read)


def test_round_trips_empty_one_position_high_keys_and_a_large_run() -> None:
    empty = DeletionVector()
    assert DeletionVector.deserialize(empty.serialize()) == empty and empty.cardinality == 0
    one = DeletionVector([42])
    assert list(DeletionVector.deserialize(one.serialize(), cardinality=1)) == [42]
    # Beyond 2^32: several keys, each a 32-bit bitmap; only keys holding positions are written.
    positions = [0, 7, KEY - 1, KEY, 3 * KEY + 5, 3 * KEY + (KEY - 1), 40 * KEY + 1]
    high = DeletionVector(positions)
    blob = high.serialize()
    assert int.from_bytes(blob[8:16], "little") == 4  # keys 0, 1, 3 and 40
    assert int.from_bytes(blob[16:20], "little") == 0
    back = DeletionVector.deserialize(blob, cardinality=len(positions))
    assert list(back) == positions and all(p in back for p in positions) and 8 not in back
    # A run of ten million positions across a key boundary is run-length encoded: a few KB, not 1.2 MB.
    run = DeletionVector().add_range(KEY - 5_000_000, KEY + 5_000_000)
    blob = run.serialize()
    assert len(blob) < 4096
    back = DeletionVector.deserialize(blob, cardinality=10_000_000)
    assert back == run and KEY - 5_000_001 not in back and KEY + 4_999_999 in back and KEY + 5_000_000 not in back
    np.testing.assert_array_equal(back.to_numpy()[:3], [KEY - 5_000_000, KEY - 4_999_999, KEY - 4_999_998])


def test_positions_come_from_lists_numpy_and_arrow_and_are_checked() -> None:
    expected = [1, 2, 9, KEY + 3]
    assert list(DeletionVector([9, 2, 1, KEY + 3, 2])) == expected
    assert list(DeletionVector(np.array([KEY + 3, 9, 1, 2], dtype=np.int64))) == expected
    assert list(DeletionVector(pa.array([2, 1, KEY + 3, 9], pa.int64()))) == expected
    assert DeletionVector(range(1000)).cardinality == 1000
    for bad in ([-1], [MAX_POSITION + 1]):
        with pytest.raises(ValueError, match="outside"):
            DeletionVector(bad)
    with pytest.raises(ValueError, match="integers"):
        DeletionVector(np.array([1.5]))
    assert MAX_POSITION in DeletionVector([MAX_POSITION])


def test_a_union_holds_both_vectors_and_changes_neither() -> None:
    earlier = DeletionVector([1, 5, KEY + 1])
    later = DeletionVector([5, 6, 3 * KEY])
    union = later.union(earlier)
    assert list(union) == [1, 5, 6, KEY + 1, 3 * KEY]
    assert list(earlier) == [1, 5, KEY + 1] and list(later) == [5, 6, 3 * KEY]
    assert DeletionVector.deserialize(union.serialize(), cardinality=5) == union
    assert union == earlier.union(later) and DeletionVector().union(earlier) == earlier


def test_a_corrupted_blob_is_a_clear_error() -> None:
    blob = bytearray(DeletionVector([1, 2, 3, KEY]).serialize())
    corrupted = bytearray(blob)
    corrupted[20] ^= 0x01  # a byte of the first bitmap
    with pytest.raises(DeletionVectorError, match=r"invalid deletion vector CRC 0x[0-9a-f]{8}, expected 0x"):
        DeletionVector.deserialize(bytes(corrupted))
    wrong_magic = bytearray(blob)
    wrong_magic[4] ^= 0xFF
    with pytest.raises(DeletionVectorError, match="invalid deletion vector magic"):
        DeletionVector.deserialize(bytes(wrong_magic))
    with pytest.raises(DeletionVectorError, match="invalid bitmap data length"):
        DeletionVector.deserialize(bytes(blob[:-1]))
    with pytest.raises(DeletionVectorError, match="too short"):
        DeletionVector.deserialize(bytes(blob[:10]))
    with pytest.raises(DeletionVectorError, match="holds 4 positions, expected 5"):
        DeletionVector.deserialize(bytes(blob), cardinality=5)
    # A well-framed blob whose bitmaps announce more than they hold.
    announcing_two = (2).to_bytes(8, "little") + (0).to_bytes(4, "little") + bytes.fromhex("3a30000000000000")
    with pytest.raises(DeletionVectorError, match="truncated: 2 bitmaps announced, 1 read"):
        DeletionVector.deserialize(framed_bitmaps(announcing_two))
    # Well-formed bitmaps with bytes after them, and keys out of order.
    one, two = DeletionVector([1]).serialize()[20:-4], DeletionVector([2]).serialize()[20:-4]  # the bitmaps alone
    with pytest.raises(DeletionVectorError, match="has 3 bytes after its 1 bitmaps"):
        DeletionVector.deserialize(framed_bitmaps((1).to_bytes(8, "little") + bytes(4) + one + b"xyz"))
    descending = (2).to_bytes(8, "little") + (5).to_bytes(4, "little") + one + (4).to_bytes(4, "little") + two
    with pytest.raises(DeletionVectorError, match="not in ascending order"):
        DeletionVector.deserialize(framed_bitmaps(descending))


def framed_bitmaps(bitmap_data: bytes) -> bytes:
    """A portable 64-bit bitmap wrapped as a deletion-vector-v1 blob."""
    data = MAGIC + bitmap_data
    return len(data).to_bytes(4, "big") + data + zlib.crc32(data).to_bytes(4, "big")


def test_the_roaring_format_specs_64_bit_examples_read_as_java_reads_them() -> None:
    assert DeletionVector.deserialize(framed_bitmaps(resource("64mapempty.bin"))).cardinality == 0
    assert list(DeletionVector.deserialize(framed_bitmaps(resource("64map32bitvals.bin")))) == list(range(10))
    spread = DeletionVector.deserialize(framed_bitmaps(resource("64mapspreadvals.bin")))
    assert list(spread) == [key * KEY + low for key in range(10) for low in range(10)]
    with pytest.raises(DeletionVectorError, match="too large"):  # Java: "Invalid unsigned key"
        DeletionVector.deserialize(framed_bitmaps(resource("64maphighvals.bin")))
    # Java writes an empty bitmap for each key below the highest that holds no position: read, not rewritten.
    one, five = DeletionVector([1]).serialize()[20:-4], DeletionVector([5]).serialize()[20:-4]  # the bitmaps alone
    empty = bytes.fromhex("3a30000000000000")  # a 32-bit bitmap without containers
    dense = (3).to_bytes(8, "little") + b"".join(
        key.to_bytes(4, "little") + bitmap for key, bitmap in ((0, one), (1, empty), (2, five)))
    vector = DeletionVector.deserialize(framed_bitmaps(dense), cardinality=2)
    assert list(vector) == [1, 2 * KEY + 5] and vector.serialize() == DeletionVector([1, 2 * KEY + 5]).serialize()


# -- Puffin ---------------------------------------------------------------------------------------------


def puffin(blobs: list[Blob], properties: dict[str, str]) -> tuple[bytes, list[BlobMetadata]]:
    stream = io.BytesIO()
    written, size = write_puffin(stream, blobs, properties)
    assert size == len(stream.getvalue())
    return stream.getvalue(), written


def test_puffin_files_are_the_bytes_icebergs_java_writer_writes() -> None:
    empty, written = puffin([], {})
    assert empty == resource("empty-puffin-uncompressed.bin") and written == []
    text = "xxx some blob \u0000 binary data 🤯 that is not very very very very very very long, is it? xxx".encode()
    blobs = [Blob("some-blob", (1,), 2, 1, b"abcdefghi"), Blob("some-other-blob", (2,), 2, 1, text[4:-4])]
    data, written = puffin(blobs, {"created-by": "Test 1234"})
    assert data == resource("sample-metric-data-uncompressed.bin")
    footer = read_footer(io.BytesIO(data), len(data))
    assert footer.properties == {"created-by": "Test 1234"}
    assert list(footer.blobs) == written
    assert [(b.offset, b.length) for b in footer.blobs] == [(4, 9), (13, 83)]
    assert [read_blob(io.BytesIO(data), b) for b in footer.blobs] == [b"abcdefghi", text[4:-4]]
    assert footer.size == len(data) - 4 - 9 - 83


def test_a_puffin_file_of_deletion_vectors_reads_back_blob_by_blob() -> None:
    vectors = {"s3://b/t/data/a.parquet": DeletionVector([0, 3]), "s3://b/t/data/b.parquet": DeletionVector([KEY + 1])}
    blobs = [Blob("deletion-vector-v1", (2147483645,), -1, -1, v.serialize(),
                  {"referenced-data-file": path, "cardinality": str(v.cardinality)}) for path, v in vectors.items()]
    data, _ = puffin(blobs, {"created-by": "test"})
    footer = read_footer(io.BytesIO(data), len(data))
    for metadata in footer.blobs:
        assert (metadata.type, metadata.fields, metadata.snapshot_id, metadata.sequence_number) == (
            "deletion-vector-v1", (2147483645,), -1, -1)
        assert metadata.compression_codec is None
        vector = DeletionVector.deserialize(read_blob(io.BytesIO(data), metadata),
                                            cardinality=int(metadata.properties["cardinality"]))
        assert vector == vectors[metadata.properties["referenced-data-file"]]
    assert b'"properties":{"referenced-data-file":"s3://b/t/data/a.parquet","cardinality":"2"}' in data


def test_what_is_not_a_puffin_file_or_is_compressed_is_refused() -> None:
    data, _ = puffin([Blob("x", (1,), 1, 1, b"abc")], {})
    for index, message in ((0, "no PFA1 magic at its start"), (len(data) - 1, "no PFA1 magic at its end")):
        broken = bytearray(data)
        broken[index] ^= 0xFF
        with pytest.raises(PuffinError, match=message):
            read_footer(io.BytesIO(bytes(broken)), len(broken))
    compressed = bytearray(data)
    compressed[-8] = 0x01  # flags byte 0, bit 0: LZ4-compressed footer
    with pytest.raises(PuffinError, match="LZ4-compressed"):
        read_footer(io.BytesIO(bytes(compressed)), len(compressed))
    with pytest.raises(PuffinError, match="shorter than an empty one"):
        read_footer(io.BytesIO(data[:10]), 10)
    wrong_size = bytearray(data)
    wrong_size[-12:-8] = (len(data)).to_bytes(4, "little")
    with pytest.raises(PuffinError, match="invalid Puffin footer payload size"):
        read_footer(io.BytesIO(bytes(wrong_size)), len(wrong_size))
    footer = read_footer(io.BytesIO(data), len(data))
    blob = footer.blobs[0]
    with pytest.raises(PuffinError, match="compressed with zstd"):
        read_blob(io.BytesIO(data), type(blob)(**{**blob.__dict__, "compression_codec": "zstd"}))


# -- position delete files (v2) and deletion-vector files (v3) -----------------------------------------


def plan(tmp_path: Path, format_version: int) -> PositionDeletePlan:
    return PositionDeletePlan((tmp_path / "t").as_uri(), {}, {}, format_version)


def data_file(tmp_path: Path, name: str, day: int, spec_id: int = 0) -> DataFile:
    result = internals.full_data_file(
        content=DataFileContent.DATA, file_path=(tmp_path / "t" / "data" / name).as_uri(),
        file_format=FileFormat.PARQUET, partition=Record(day), record_count=10, file_size_in_bytes=100)
    result.spec_id = spec_id
    return result


def test_a_position_delete_file_holds_sorted_rows_with_field_ids_and_its_datafile(tmp_path: Path) -> None:
    b, a = data_file(tmp_path, "b.parquet", 7), data_file(tmp_path, "a.parquet", 7)
    targets = [DeleteTarget(b, DeletionVector([9, 0, KEY + 1])), DeleteTarget(a, DeletionVector([5, 2]))]
    delete_file = write_position_delete_file(plan(tmp_path, 2), targets, "isync-test")
    assert delete_file.file_path.startswith((tmp_path / "t" / "data" / "isync-test-posdel-").as_uri())
    parquet = pq.ParquetFile(delete_file.file_path.removeprefix("file://"))
    rows = parquet.read()
    assert rows.to_pydict() == {"file_path": [a.file_path] * 2 + [b.file_path] * 3, "pos": [2, 5, 0, 9, KEY + 1]}
    assert [(f.name, f.type, f.nullable, f.metadata[b"PARQUET:field_id"]) for f in rows.schema] == [
        ("file_path", pa.string(), False, b"2147483546"), ("pos", pa.int64(), False, b"2147483545")]
    assert (delete_file.content, delete_file.file_format, delete_file.record_count, delete_file.partition,
            delete_file.spec_id) == (DataFileContent.POSITION_DELETES, FileFormat.PARQUET, 5, Record(7), 0)
    assert delete_file.file_size_in_bytes == Path(delete_file.file_path.removeprefix("file://")).stat().st_size
    assert internals.referenced_data_file(delete_file) is None  # two data files
    # Full bounds on file_path (no truncation): readers can tell which data files the file references.
    assert delete_file.lower_bounds[2147483546] == a.file_path.encode()
    assert delete_file.upper_bounds[2147483546] == b.file_path.encode()
    assert delete_file.upper_bounds[2147483545] == (KEY + 1).to_bytes(8, "little")
    one = write_position_delete_file(plan(tmp_path, 2), [DeleteTarget(a, DeletionVector([1]))], "isync-test")
    assert internals.referenced_data_file(one) == a.file_path


def test_position_delete_files_are_refused_where_the_spec_forbids_them(tmp_path: Path) -> None:
    a, other_day = data_file(tmp_path, "a.parquet", 7), data_file(tmp_path, "c.parquet", 8)
    with pytest.raises(ValueError, match="one file per partition"):
        write_position_delete_file(plan(tmp_path, 2), [DeleteTarget(a, DeletionVector([1])),
                                                       DeleteTarget(other_day, DeletionVector([1]))], "p")
    with pytest.raises(ValueError, match="format-version 2 tables only"):
        write_position_delete_file(plan(tmp_path, 3), [DeleteTarget(a, DeletionVector([1]))], "p")
    with pytest.raises(ValueError, match="at least one deleted position"):
        write_position_delete_file(plan(tmp_path, 2), [DeleteTarget(a, DeletionVector())], "p")
    with pytest.raises(ValueError, match="deletion vectors need a format-version 3"):
        write_deletion_vectors(plan(tmp_path, 2), [DeleteTarget(a, DeletionVector([1]))], "p")


def test_deletion_vector_files_point_at_their_blobs(tmp_path: Path) -> None:
    a, b = data_file(tmp_path, "a.parquet", 7), data_file(tmp_path, "b.parquet", 8, spec_id=1)
    vectors = {a.file_path: DeletionVector([3, 4]), b.file_path: DeletionVector([0, KEY + 7, 2 * KEY])}
    dvs = write_deletion_vectors(plan(tmp_path, 3), [DeleteTarget(b, vectors[b.file_path]),
                                                     DeleteTarget(a, vectors[a.file_path])], "isync-test")
    path = dvs[0].file_path
    assert path.endswith(".puffin") and {dv.file_path for dv in dvs} == {path}
    local = Path(path.removeprefix("file://"))
    data = local.read_bytes()
    footer = read_footer(io.BytesIO(data), len(data))
    assert [b.properties["referenced-data-file"] for b in footer.blobs] == [a.file_path, b.file_path]
    assert footer.properties["created-by"].startswith("IcebergSync ")
    for dv, blob, source in zip(dvs, footer.blobs, (a, b), strict=True):
        assert (dv.content, dv.file_format, dv.file_size_in_bytes) == (
            DataFileContent.POSITION_DELETES, FileFormat.PUFFIN, len(data))
        assert (dv.partition, dv.spec_id) == (source.partition, source.spec_id)
        assert internals.referenced_data_file(dv) == source.file_path
        assert (internals.content_offset(dv), internals.content_size_in_bytes(dv)) == (
            blob.offset, blob.length)
        assert dv.record_count == int(blob.properties["cardinality"]) == vectors[source.file_path].cardinality
        assert internals.is_deletion_vector(dv)
        assert read_deletion_vector(plan(tmp_path, 3).io(), dv) == vectors[source.file_path]
    corrupted = bytearray(data)
    corrupted[internals.content_offset(dvs[1]) + 20] ^= 0x01  # type: ignore[operator]
    local.write_bytes(bytes(corrupted))
    with pytest.raises(DeletionVectorError, match="CRC"):
        read_deletion_vector(plan(tmp_path, 3).io(), dvs[1])
    assert read_deletion_vector(plan(tmp_path, 3).io(), dvs[0]) == vectors[a.file_path]
    with pytest.raises(ValueError, match="one deletion vector per data file"):
        write_deletion_vectors(plan(tmp_path, 3), [DeleteTarget(a, DeletionVector([1])),
                                                   DeleteTarget(a, DeletionVector([2]))], "p")
