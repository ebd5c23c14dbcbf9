"""PySpark's worker daemon with the data plane imported before it forks workers.

Set as ``spark.python.daemon.module``: every Python worker forked from this daemon starts with
pyarrow, pyiceberg and the data plane already loaded, instead of importing them itself (about a
CPU-second per worker), and a new worker (another core, a replaced worker) is ready at once.

It also keeps each task from re-reading pyspark.zip: PySpark's worker calls
``importlib.invalidate_caches()`` before every task, and since Python 3.10 that makes every zip
importer on the path read its archive's whole directory again (one importer per package of
pyspark.zip, about 70 ms of CPU per task and worker). Here (from the daemon's start-up, :func:`main`)
a zip importer re-reads its archive only when the file changed since it last read it. And as the daemon's worker runs ``gc.collect()``
after every task, the objects of the imported modules are frozen before the fork (``gc.freeze()``):
a collection walks only what the tasks made, not every object of pyarrow and pyiceberg (about
40 ms of CPU per task and worker otherwise).
"""

import gc
import os
import zipimport

from pyspark import daemon

import spark_app.staging.pipeline  # noqa: F401 - the import is the point: forked workers inherit it

_reread_directory = zipimport.zipimporter.invalidate_caches
_directory_read_as_of: dict[int, tuple[int, int, int]] = {}


def invalidate_when_changed(importer: zipimport.zipimporter) -> None:
    """``zipimporter.invalidate_caches``, skipped while the archive is the file this importer last read."""
    try:
        stat = os.stat(importer.archive)
        state: tuple[int, int, int] | None = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
    except OSError:
        state = None
    if state is None or _directory_read_as_of.get(id(importer)) != state:
        _reread_directory(importer)
        if state is not None:
            _directory_read_as_of[id(importer)] = state


def reread_archives_only_when_changed() -> None:
    """Put :func:`invalidate_when_changed` in place of ``zipimporter.invalidate_caches`` (calling it again changes
    nothing); the daemon does it at start-up, and the workers it forks inherit it."""
    # typeshed types this method with two selves, hence the ignore
    zipimport.zipimporter.invalidate_caches = invalidate_when_changed  # type: ignore[method-assign,assignment]


def main() -> None:
    """Start PySpark's daemon with the zip importers' check in place and the imported modules' objects frozen."""
    reread_archives_only_when_changed()
    gc.freeze()  # the daemon runs gc.collect() in a worker after each task: skip the imported modules' objects
    daemon.manager()


if __name__ == "__main__":
    main()
