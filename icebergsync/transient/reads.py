"""Reads of S3 objects that ride out an error answer the AWS SDK cannot read.

Arrow reads a byte range of an object into a buffer of the range's size, and the AWS SDK writes the answer's body
there, whatever its status. An error answer (``SlowDown``, 429, 500, 503: a few hundred bytes of XML) to a read of a
shorter range (a small column chunk, a deletion vector, a small file, the 8 bytes of a Parquet footer's length) does
not fit:
the SDK fails the read with ``INTERNAL_FAILURE``, "Failed to flush response stream", which neither of its retry
strategies repeats (a client-side error other than a lost connection is never retryable to them) and which hides
the answer's status. :class:`RetriedReads` repeats such a read with the one backoff policy
(:func:`~icebergsync.transient.http.repeated`); every other error is the SDK's to retry, as it does.
"""

from __future__ import annotations

import os

import pyarrow as pa
from pyiceberg.io import InputStream
from pyiceberg.io.pyarrow import PyArrowFile

from icebergsync.transient.http import repeated

UNREAD_ANSWER = "Failed to flush response stream"


def unread_answer(error: Exception) -> bool:
    """Whether ``error`` is a read failed by an answer whose body did not fit the read's buffer."""
    return isinstance(error, OSError) and UNREAD_ANSWER in str(error)


class RetriedReads:
    """A readable file over ``file`` (Arrow's S3 input file) whose reads are repeated on :func:`unread_answer`.

    It keeps its own position and reads each range at it (``seek`` then ``read_buffer`` on ``file``, no copy), so a
    failed read leaves nothing to undo. Arrow calls it through :class:`pyarrow.PythonFile`."""

    def __init__(self, file: pa.NativeFile, location: str):
        self._file = file
        self._location = location
        self._size = file.size()
        self._position = 0

    @property
    def closed(self) -> bool:
        return bool(self._file.closed)

    def close(self) -> None:
        self._file.close()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self._size}[whence]
        self._position = base + offset
        return self._position

    def read_buffer(self, nbytes: int | None = None) -> pa.Buffer:
        """The next ``nbytes`` bytes (all that are left when None or negative)."""
        position, left = self._position, max(0, self._size - self._position)
        wanted = left if nbytes is None or nbytes < 0 else min(nbytes, left)
        buffer = repeated(f"a read of {wanted} bytes at {position} of {self._location}",
                          lambda: self._read_at(position, wanted), unread_answer)
        self._position = position + buffer.size
        return buffer

    read = read_buffer  # Arrow copies out of any object with the buffer protocol

    def _read_at(self, position: int, nbytes: int) -> pa.Buffer:
        self._file.seek(position)
        return self._file.read_buffer(nbytes)


class RetryingInputFile(PyArrowFile):
    """A :class:`PyArrowFile` of an S3 object whose streams are :class:`RetriedReads` (always random access)."""

    def open(self, seekable: bool = True) -> InputStream:
        return pa.PythonFile(RetriedReads(super().open(seekable=True), self.location), mode="r")
