"""Parquet's hash of a value: XXH64 (seed 0) of its plain encoding, as Bloom filters store it.

The plain encoding is little-endian for INT32 and INT64 and the raw bytes for BYTE_ARRAY and
FIXED_LEN_BYTE_ARRAY (no length prefix), which is what Parquet's Java and C++ writers hash.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

# Arrow types whose Parquet physical type and plain encoding this module knows, by byte width (0: bytes).
_FIXED_WIDTH = {pa.int8(): 4, pa.int16(): 4, pa.int32(): 4, pa.date32(): 4, pa.int64(): 8}


def hashable(arrow_type: pa.DataType) -> bool:
    """Whether :func:`parquet_hashes` can hash values of ``arrow_type`` as Parquet writes them."""
    return (arrow_type in _FIXED_WIDTH or pa.types.is_timestamp(arrow_type) or pa.types.is_string(arrow_type)
            or pa.types.is_large_string(arrow_type) or pa.types.is_binary(arrow_type)
            or pa.types.is_large_binary(arrow_type) or pa.types.is_fixed_size_binary(arrow_type))


def parquet_hashes(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The uint64 Parquet hashes of the non-null ``values`` (a :func:`hashable` type)."""
    values = pc.drop_null(values)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    arrow_type = values.type
    if arrow_type in _FIXED_WIDTH or pa.types.is_timestamp(arrow_type):
        width = _FIXED_WIDTH.get(arrow_type, 8)
        as_integers = values.view(pa.int32() if width == 4 else pa.int64()) if pa.types.is_temporal(arrow_type) \
            else values.cast(pa.int64())
        numbers = as_integers.to_numpy(zero_copy_only=False)
        encoded = memoryview(numbers.astype(f"<i{width}").tobytes())
        return np.fromiter((xxhash.xxh64_intdigest(encoded[i:i + width]) for i in range(0, len(encoded), width)),
                           dtype=np.uint64, count=len(values))
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return np.fromiter((xxhash.xxh64_intdigest(value.encode()) for value in values.to_pylist()),
                           dtype=np.uint64, count=len(values))
    if hashable(arrow_type):
        return np.fromiter((xxhash.xxh64_intdigest(value) for value in values.to_pylist()),
                           dtype=np.uint64, count=len(values))
    raise TypeError(f"no Parquet hash for Arrow type {arrow_type}")
