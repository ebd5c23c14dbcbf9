"""The job's FileIO: pyiceberg's PyArrow FileIO, with uploads that ride out the object store's transient faults.

* A small object (below Arrow's multipart part size: manifests, manifest lists, delete files, most data
  files of a trigger) is uploaded in ONE ``PutObject`` (``allow_delayed_open``): repeating it after a lost
  answer writes the same bytes again. (Without it Arrow starts a multipart upload for every object, and a
  lost answer to ``CompleteMultipartUpload`` makes the SDK's own retry fail with ``NO_SUCH_UPLOAD``
  although the object exists.)
* The SDK retries the store's transient answers (``SlowDown``, 500, 503, throttling, resets) up to
  ``S3_ATTEMPTS`` times with its standard backoff (:class:`S3Retries`), unless ``s3.retry-strategy-impl``
  names another strategy.
* A large object is still a multipart upload: :func:`close_upload` takes one whose completion answer was
  lost, but whose object exists with every byte written, for the success it was.
* Every read of an object (every file pyiceberg and the job read through the FileIO) repeats what the SDK cannot:
  an error answer to a read of a range shorter than the answer's body (:mod:`.reads`).
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from pyarrow.fs import AwsStandardS3RetryStrategy, FileSystem, S3FileSystem
from pyiceberg.io import S3_RETRY_STRATEGY_IMPL, FileIO
from pyiceberg.io.pyarrow import PyArrowFile, PyArrowFileIO

from icebergsync.transient.reads import RetryingInputFile

log = logging.getLogger("icebergsync")

S3_ATTEMPTS = 10
S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
_LOST_COMPLETION = ("NO_SUCH_UPLOAD", "NoSuchUpload")


class S3Retries(AwsStandardS3RetryStrategy):
    """The SDK's standard retry strategy with ``S3_ATTEMPTS`` attempts (Arrow's default is 3)."""

    def __init__(self) -> None:
        super().__init__(max_attempts=S3_ATTEMPTS)


class RetryingFileIO(PyArrowFileIO):
    """:class:`PyArrowFileIO` whose S3 filesystem uploads small objects in one PUT and retries transient faults, and
    whose S3 objects are read through :class:`~.reads.RetriedReads`."""

    def new_input(self, location: str) -> PyArrowFile:
        scheme, netloc, path = self.parse_location(location, self.properties)
        if scheme not in S3_SCHEMES:
            return super().new_input(location)
        return RetryingInputFile(location, path, self.fs_by_scheme(scheme, netloc))

    def _initialize_s3_fs(self, netloc: str | None) -> FileSystem:
        built = super()._initialize_s3_fs(netloc)
        _, (settings,) = built.__reduce__()  # the filesystem's settings, as pickling rebuilds it (its retry
        named = self.properties.get(S3_RETRY_STRATEGY_IMPL)  # strategy is not among them: named again here)
        strategy = _instance(named) if named else S3Retries()
        return S3FileSystem(**{**settings, "allow_delayed_open": True, "retry_strategy": strategy})


def _instance(qualified_name: str) -> Any:
    """An instance of the class ``module.Class`` names (``s3.retry-strategy-impl``, as pyiceberg reads it)."""
    module, _, name = qualified_name.rpartition(".")
    return getattr(importlib.import_module(module), name)()


def close_upload(stream: Any, io: FileIO, path: str, size: int) -> None:
    """Close ``stream``, an upload of ``size`` bytes to ``path``. A multipart upload whose completion answer was
    lost fails the SDK's retry with ``NO_SUCH_UPLOAD``: when the object then exists with ``size`` bytes, it was
    completed, and the upload counts as closed; otherwise the error stands."""
    try:
        stream.close()
    except OSError as error:
        if not any(marker in str(error) for marker in _LOST_COMPLETION):
            raise
        try:
            found = len(io.new_input(path))
        except OSError:
            raise error from None
        if found != size:
            raise
        log.info("the upload of %s was completed although its answer was lost (%d bytes)", path, size)


IMPL = f"{RetryingFileIO.__module__}.{RetryingFileIO.__qualname__}"
